"""A serving request's grammar, compiled over the token classes: JSON Schema, GBNF, Lark or regex.

Servers receive grammars with their requests.  :class:`RequestCompiler` turns one into a
:class:`~formalgram_cfgzip.engines.base.CompiledGrammar` over the classes and keeps it for the
next request with the same grammar; the framework adapters
(:mod:`~formalgram_cfgzip.integrations.sglang`, :mod:`~formalgram_cfgzip.integrations.vllm`)
share it.  The kinds of grammar (:data:`KINDS`):

* ``json``: a JSON Schema, compiled as XGrammar's own grammar for it
  (:func:`~formalgram_cfgzip.json_schema.from_json_schema`); ``"$$ANY$$"`` is any JSON value;
* ``ebnf``: GBNF / XGrammar EBNF, or a Lark grammar when the text has no ``::=``;
* ``lark``: a Lark grammar, start rule ``start`` (:func:`lark_to_gbnf`);
* ``regex``: :func:`formalgram.parse_regex` with XGrammar's ASCII reading of ``\\d \\w \\s``.

One :class:`~formalgram_cfgzip.compress.Compressor` per vocabulary is shared by the process
(:func:`shared_compressor`), with an on-disk cache (``$FORMALGRAM_CACHE_DIR``, else
``~/.cache/formalgram``); a grammar past its work budget is compiled by XGrammar over the full
vocabulary instead (the same masks, bit for bit, only slower).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from formalgram.errors import GrammarTooLarge
from formalgram_cfgzip.errors import EngineError

if TYPE_CHECKING:
    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.engines import EngineName
    from formalgram_cfgzip.engines.base import CompiledGrammar
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "COMPRESS_OPTIONS",
    "KINDS",
    "RequestCompiler",
    "grammar_text_for",
    "lark_to_gbnf",
    "shared_compressor",
]

logger = logging.getLogger(__name__)

#: The kinds of request grammar :func:`grammar_text_for` reads.
KINDS = ("json", "ebnf", "lark", "regex")

#: Compressor options per request grammar: the native engine's tables from the search
#: (``domains``), no specialization, the fast GNF strategy, and a work budget past which the
#: grammar is compiled by XGrammar over the full vocabulary.
COMPRESS_OPTIONS: dict[str, Any] = {
    "domains": True,
    "specialize": False,
    "gnf_strategy": "fast",
    "max_work": 20_000_000,
}


def lark_to_gbnf(text: str) -> str:
    """GBNF text, start rule ``root``, of a Lark grammar (start rule ``start``).

    Parameters
    ----------
    text : str
        The grammar in Lark's syntax (:func:`formalgram.parse_lark`).

    Returns
    -------
    str
        ``root ::= start`` followed by the printed grammar (the native engine and the
        compression start at ``root``).

    Raises
    ------
    GrammarSyntaxError
        If the text does not parse.
    EngineError
        If the grammar has a rule named ``root`` of its own.

    Notes
    -----
    One parse and one print of the grammar.

    Examples
    --------
    >>> print(lark_to_gbnf('start: "a"+'), end="")
    root ::= start
    start ::= "a" start | "a"
    """
    import formalgram

    grammar = formalgram.parse_lark(text)
    if grammar.has_nonterminal("root"):
        raise EngineError("a Lark grammar served here must not have a rule named 'root'")
    return f"root ::= {grammar.start.name}\n{grammar.to_gbnf()}"


def grammar_text_for(kind: str, spec: str, *, any_whitespace: bool = True) -> str:
    """The GBNF text, start rule ``root``, that a request's grammar stands for.

    Parameters
    ----------
    kind : {"json", "ebnf", "lark", "regex"}
        The kind of grammar (SGLang's ``full_assistant_ebnf`` is read as ``ebnf``).
    spec : str
        The schema (JSON text), grammar or pattern.
    any_whitespace : bool, keyword-only
        For a JSON Schema: free whitespace between elements (``False``: the separators of
        ``json.dumps``).

    Returns
    -------
    str
        GBNF / XGrammar EBNF text whose start rule is ``root``.

    Raises
    ------
    EngineError
        For another kind, a schema XGrammar's converter refuses, or a Lark grammar with a rule
        named ``root``.
    GrammarSyntaxError
        For a Lark grammar or a pattern that does not parse.

    Notes
    -----
    A schema costs XGrammar's conversion (about a millisecond); a Lark grammar or a pattern
    one parse and one print; a GBNF text nothing.

    Examples
    --------
    >>> grammar_text_for("regex", r"[a-c]\\d")
    'root ::= [a-c] [0-9]\\n'
    >>> grammar_text_for("ebnf", 'start: "x" NUMBER\\nNUMBER: /[0-9]+/').splitlines()[:2]
    ['root ::= start', 'start ::= "x" NUMBER']
    """
    import formalgram

    if kind == "json":
        if spec == "$$ANY$$":
            return resources.files("formalgram_cfgzip").joinpath("data/json.gbnf").read_text("utf-8")
        from formalgram_cfgzip.json_schema import from_json_schema

        return from_json_schema(spec, any_whitespace=any_whitespace)
    if kind in ("ebnf", "full_assistant_ebnf"):
        return spec if "::=" in spec else lark_to_gbnf(spec)
    if kind == "lark":
        return lark_to_gbnf(spec)
    if kind == "regex":
        return formalgram.parse_regex(spec, ascii=True).to_gbnf()
    raise EngineError(f"no request grammar of kind {kind!r}; known: {', '.join(KINDS)}")


def _cache_dir() -> Path:
    """Where compressions are kept: ``$FORMALGRAM_CACHE_DIR``, else ``~/.cache/formalgram``."""
    found = os.environ.get("FORMALGRAM_CACHE_DIR")
    return Path(found) if found else Path.home() / ".cache" / "formalgram"


_COMPRESSORS: dict[tuple[str, str], Compressor] = {}
_COMPRESSORS_LOCK = threading.Lock()


def shared_compressor(vocab: Vocabulary, cache_dir: str | os.PathLike[str] | None = None) -> Compressor:
    """The process's compressor for ``vocab`` (made on first use, then shared).

    Parameters
    ----------
    vocab : Vocabulary
        The tokenizer's vocabulary.
    cache_dir : path or None
        The on-disk cache (``None``: ``$FORMALGRAM_CACHE_DIR``, else ``~/.cache/formalgram``).

    Returns
    -------
    Compressor
        With :data:`COMPRESS_OPTIONS`; one per vocabulary fingerprint and cache directory.

    Notes
    -----
    The first call per vocabulary prepares it (tenths of a second for 128k tokens); later
    calls are one dictionary lookup.

    Examples
    --------
    >>> import tempfile
    >>> from formalgram_cfgzip import Vocabulary
    >>> vocab = Vocabulary([b"a", b"b", b"</s>"], special_ids=[2], stop_ids=[2])
    >>> where = tempfile.mkdtemp()
    >>> shared_compressor(vocab, where) is shared_compressor(vocab, where)
    True
    """
    from formalgram_cfgzip.compress import Compressor

    where = Path(cache_dir) if cache_dir is not None else _cache_dir()
    key = (vocab.fingerprint(), str(where))
    with _COMPRESSORS_LOCK:
        found = _COMPRESSORS.get(key)
        if found is None:
            found = Compressor(vocab, cache_dir=where, **COMPRESS_OPTIONS)
            _COMPRESSORS[key] = found
        return found


class RequestCompiler:
    """Compile request grammars over the classes, each grammar once.

    Parameters
    ----------
    vocab : Vocabulary
        The model's vocabulary (its logit width the model's, its stop tokens the model's).
    engine : {"native", "xgrammar"}, keyword-only
        The engine over the classes.
    compressor : Compressor or None, keyword-only
        Compresses the grammars (``None``: :func:`shared_compressor` for ``vocab``).
    any_whitespace : bool, keyword-only
        JSON Schemas with free whitespace between elements.
    cache_size : int, keyword-only
        Compiled grammars kept, most recently used first.

    Attributes
    ----------
    fallbacks : int
        Grammars compiled by XGrammar over the full vocabulary (past the compressor's budget).

    Raises
    ------
    EngineError
        For another engine.

    Notes
    -----
    Thread-safe.  A new grammar costs its text (:func:`grammar_text_for`), its compression
    (a cache hit in memory or on disk after the first time) and the engine's compile over the
    classes; a known one a dictionary lookup.

    Examples
    --------
    >>> import tempfile
    >>> from formalgram_cfgzip import Vocabulary
    >>> vocab = Vocabulary([b"a", b"b", b"ab", b"</s>"], special_ids=[3], stop_ids=[3])
    >>> compiler = RequestCompiler(vocab, compressor=shared_compressor(vocab, tempfile.mkdtemp()))
    >>> m = compiler.compile("regex", "(ab)+").matcher()
    >>> m.accept_token(2), m.accept_token(0), m.accept_token(1), m.accept_token(3), m.is_terminated()
    (True, True, True, True, True)
    >>> compiler.compile("regex", "(ab)+") is compiler.compile("regex", "(ab)+")
    True
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        engine: EngineName = "native",
        compressor: Compressor | None = None,
        any_whitespace: bool = True,
        cache_size: int = 256,
    ) -> None:
        if engine not in ("native", "xgrammar"):
            raise EngineError(f"request grammars run on engine 'native' or 'xgrammar', not {engine!r}")
        self.vocab = vocab
        self.engine: EngineName = engine
        self.compressor = compressor if compressor is not None else shared_compressor(vocab)
        self.any_whitespace = any_whitespace
        self.cache_size = cache_size
        self.fallbacks = 0
        self._compiled: OrderedDict[tuple[str, str], CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, kind: str, spec: str) -> CompiledGrammar:
        """The compiled grammar of one request grammar.

        Parameters
        ----------
        kind, spec : str
            As :func:`grammar_text_for`.

        Returns
        -------
        CompiledGrammar
            Over the classes; over the full vocabulary (XGrammar) when the compression goes
            past the compressor's work budget.

        Raises
        ------
        FormalgramError
            If the grammar does not parse, is empty, or no engine compiles it.
        """
        from formalgram_cfgzip.engines import compile_full, compile_grammar

        key = (kind, spec)
        with self._lock:
            found = self._compiled.get(key)
            if found is not None:
                self._compiled.move_to_end(key)
                return found
        text = grammar_text_for(kind, spec, any_whitespace=self.any_whitespace)
        try:
            classes = self.compressor.compress(text)
        except GrammarTooLarge as exc:
            logger.info("formalgram: %s; XGrammar over the full vocabulary serves this grammar", exc)
            compiled = compile_full(self.vocab, text, engine="xgrammar")
            with self._lock:
                self.fallbacks += 1
        else:
            compiled = compile_grammar(classes, text, engine=self.engine, vocab=self.vocab)
        with self._lock:
            self._compiled[key] = compiled
            while len(self._compiled) > self.cache_size:
                self._compiled.popitem(last=False)
        return compiled
