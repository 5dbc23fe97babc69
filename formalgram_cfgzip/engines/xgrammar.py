"""The XGrammar backend: a grammar compiled by XGrammar over class representatives (or over
the full vocabulary), behind the protocol of :mod:`formalgram_cfgzip.engines.base`.

:func:`compile_grammar` builds an ``xgrammar.TokenizerInfo`` whose token ``k`` is class
``k`` (bytes of its representative; the stop class is the engine's only stop token; the
invalid class has empty bytes, which XGrammar treats as a special token and never allows),
compiles the grammar for it, and returns an :class:`XGrammarCompiled` whose matchers take
real token ids and fill full-vocabulary bitmasks.  :func:`compile_full` is the
uncompressed reference with the same protocol and the same special-token policy.

XGrammar facts this relies on (0.2.9): tokens given as ``b""`` and ids in
``[len(encoded_vocab), vocab_size)`` are special and never allowed; a stop token is
allowed exactly when the grammar can end, and accepting it terminates the matcher;
``stop_token_ids=[]`` means no stop token (no auto-detection); rejected tokens leave the
state unchanged; ``BatchGrammarMatcher.batch_fill_next_token_bitmask`` fills many rows;
``compile_grammar`` refuses text nested deeper than about 1,000 parentheses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines._xgrammar_guard import crash_cycle
from formalgram_cfgzip.engines.arguments import prepare_compressed, prepare_full
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.engines.tokens import full_engine_tokens, full_never, per_vocabulary
from formalgram_cfgzip.errors import EngineError

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "XGrammarCompiled",
    "XGrammarMatcher",
    "compile_full",
    "compile_full_json_schema",
    "compile_grammar",
    "full_tokenizer_info",
]

_full_tokenizer_cache: dict[str, Any] = {}


def _xgr() -> Any:
    try:
        import xgrammar
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EngineError("the XGrammar backend needs the 'xgrammar' package (pip install xgrammar)") from exc
    return xgrammar


class XGrammarMatcher(EngineMatcher):
    """Matcher over real token ids backed by an ``xgrammar.GrammarMatcher``."""

    # XGrammar's fills raise "GrammarMatcher has terminated ..." after a stop token
    FILL_RAISES_WHEN_TERMINATED = True

    def __init__(self, compiled: XGrammarCompiled) -> None:
        super().__init__(compiled)
        self._m = _xgr().GrammarMatcher(compiled.engine_grammar)

    def _engine_accept(self, engine_id: int) -> bool:
        return bool(self._m.accept_token(engine_id))

    def _engine_fill(self, bitmask: npt.NDArray[np.int32], index: int) -> None:
        self._m.fill_next_token_bitmask(bitmask, index)

    def _fill_live(self, bitmask: npt.NDArray[np.int32], index: int) -> bool:
        # the base class's optimistic fill with the engine call inlined (the hot path)
        try:
            self._m.fill_next_token_bitmask(bitmask, index)
            return True
        except RuntimeError:
            if not self.is_terminated():
                raise
        bitmask[index] = 0
        return False

    def _engine_rollback(self, num_tokens: int) -> None:
        self._m.rollback(num_tokens)

    def _engine_reset(self) -> None:
        self._m.reset()

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return bool(self._m.is_terminated())


class XGrammarCompiled(CompiledGrammar):
    """A grammar compiled by XGrammar over classes or the full vocabulary.

    Made by :func:`compile_grammar` or :func:`compile_full`; see
    :class:`~formalgram_cfgzip.engines.base.CompiledGrammar` for the attributes.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        classes: TokenClasses | None,
        engine_tokens: Sequence[bytes],
        stop_ids: list[int],
        engine_grammar: Any,
        *,
        max_threads: int,
    ) -> None:
        super().__init__(
            vocab, classes, engine_tokens, stop_ids, None if classes is not None else full_never(vocab)
        )
        self.engine_grammar = engine_grammar
        self._max_threads = max_threads
        self._batch: Any = None

    def matcher(self) -> XGrammarMatcher:
        """A fresh matcher in the initial state."""
        return XGrammarMatcher(self)

    def _batch_engine_fill(
        self, matchers: Sequence[EngineMatcher], engine_bitmask: npt.NDArray[np.int32]
    ) -> None:
        if self._batch is None:
            self._batch = _xgr().BatchGrammarMatcher(self._max_threads)
        inner = [m._m for m in matchers if isinstance(m, XGrammarMatcher)]
        if len(inner) != len(matchers):
            raise EngineError("matchers of another engine were passed to an XGrammar batch")
        self._batch.batch_fill_next_token_bitmask(inner, engine_bitmask)


def _compile_text(tokenizer_info: Any, grammar_text: str, root: str, max_threads: int) -> Any:
    cycle = crash_cycle(grammar_text)
    if cycle is not None:
        shown = " -> ".join([*cycle, cycle[0]])
        raise EngineError(
            f"rules {shown} only repeat one another with a {{m,n}} range (they derive nothing or only "
            "the empty string); XGrammar 0.2.9 crashes (stack overflow) compiling this shape, so it is "
            "refused: rewrite those rules"
        )
    xgr = _xgr()
    compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=max_threads, cache_enabled=False)
    try:
        return compiler.compile_grammar(grammar_text, root_rule_name=root)
    except (RuntimeError, ValueError) as exc:
        raise EngineError(f"XGrammar cannot compile the grammar: {str(exc).strip()[:500]}") from exc


def compile_grammar(
    classes: TokenClasses,
    grammar_text: str,
    *,
    root: str = "root",
    vocab: Vocabulary | None = None,
    check: bool = True,
    max_threads: int = 1,
) -> XGrammarCompiled:
    """Compile ``grammar_text`` with XGrammar over the representatives of ``classes``.

    Parameters
    ----------
    classes : TokenClasses
        Classes computed by :func:`formalgram_cfgzip.compress` for this grammar.
    grammar_text : str
        GBNF / XGrammar EBNF text (the same text the classes were computed from).
    root : str, keyword-only
        Start rule.
    vocab : Vocabulary or None, keyword-only
        The vocabulary the caller decodes with; checked against ``classes.vocab``.
    check : bool, keyword-only
        Validate fingerprints and the special-token policy
        (:func:`~formalgram_cfgzip.engines.tokens.check_classes`).
    max_threads : int, keyword-only
        Threads for compilation and batch filling (at least 1).

    Returns
    -------
    XGrammarCompiled

    Raises
    ------
    ClassesMismatchError
        If the classes belong to another vocabulary or grammar, or break the policy.
    EngineError
        If an option has the wrong type or value, XGrammar rejects the grammar (or would
        crash on it), or is not installed.

    Notes
    -----
    XGrammar's compilation over ``num_classes`` tokens, plus O(logit_width) for the
    expander (its subset tables: up to 32 MiB at 128k tokens).

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> vocab = Vocabulary([b"a", b"b", b"ab", b"ba", b"</s>"], special_ids=[4], stop_ids=[4])
    >>> text = 'root ::= "a" "b"*'
    >>> compiled = compile_grammar(compress(text, vocab, progress=False), text)
    >>> m = compiled.matcher()
    >>> mask = compiled.allocate_token_bitmask()
    >>> m.fill_next_token_bitmask(mask)
    >>> format(int(mask[0, 0]), "05b")  # bit i: token i ("a", "ab")
    '00101'
    >>> m.accept_token(0), m.accept_token(3)
    (True, False)
    """
    tokens = prepare_compressed(
        classes, grammar_text, root=root, vocab=vocab, check=check, max_threads=max_threads
    )
    stops = [classes.stop_class] if classes.stop_class >= 0 else []
    info = _xgr().TokenizerInfo(tokens, vocab_size=len(tokens), stop_token_ids=stops)
    engine = _compile_text(info, grammar_text, root, max_threads)
    return XGrammarCompiled(classes.vocab, classes, tokens, stops, engine, max_threads=max_threads)


def full_tokenizer_info(vocab: Vocabulary) -> Any:
    """``xgrammar.TokenizerInfo`` over every logit index of ``vocab`` (policy applied).

    Notes
    -----
    Built once per vocabulary (by fingerprint) and shared: it is immutable, and takes
    O(logit_width) time and memory to build.
    """
    return per_vocabulary(
        _full_tokenizer_cache,
        vocab,
        lambda: _xgr().TokenizerInfo(
            list(full_engine_tokens(vocab)),
            vocab_size=vocab.logit_width,
            stop_token_ids=sorted(vocab.stop_ids),
        ),
    )


def compile_full(
    vocab: Vocabulary, grammar_text: str, *, root: str = "root", max_threads: int = 1
) -> XGrammarCompiled:
    """The uncompressed reference: XGrammar over every token of ``vocab``, same protocol.

    Parameters
    ----------
    vocab : Vocabulary
    grammar_text : str
        GBNF / XGrammar EBNF text.
    root : str, keyword-only
        Start rule.
    max_threads : int, keyword-only
        Threads for compilation and batch filling (at least 1).

    Returns
    -------
    XGrammarCompiled

    Raises
    ------
    EngineError
        If an option has the wrong type or value, XGrammar rejects the grammar (or would
        crash on it), or is not installed.

    Notes
    -----
    XGrammar's compilation over ``logit_width`` tokens (its tokenizer is built once per
    vocabulary, :func:`full_tokenizer_info`).

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> full = compile_full(Vocabulary([b"a", b"b", b"ab"]), 'root ::= "a" "b"*')
    >>> mask = full.allocate_token_bitmask()
    >>> full.matcher().fill_next_token_bitmask(mask)
    >>> format(int(mask[0, 0]), "03b")
    '101'
    """
    tokens = prepare_full(vocab, grammar_text, root=root, max_threads=max_threads)
    engine = _compile_text(full_tokenizer_info(vocab), grammar_text, root, max_threads)
    return XGrammarCompiled(vocab, None, tokens, sorted(vocab.stop_ids), engine, max_threads=max_threads)


def compile_full_json_schema(
    vocab: Vocabulary,
    schema: str | Mapping[str, Any] | bool,
    *,
    max_threads: int = 1,
    converted: Any = None,
    **options: Any,
) -> XGrammarCompiled:
    """XGrammar's own compile of a JSON Schema over every token of ``vocab``, same protocol.

    The grammar is XGrammar's converter's (what its ``compile_json_schema`` compiles), not
    the text :func:`~formalgram_cfgzip.json_schema.from_json_schema` prints from it: the
    masks are XGrammar's own for the schema, and no conversion of this package's precedes
    the compile.

    Parameters
    ----------
    vocab : Vocabulary
    schema : str, mapping or bool
        The schema.
    max_threads : int, keyword-only
        Threads for compilation and batch filling (at least 1).
    converted : xgrammar.Grammar or None, keyword-only
        XGrammar's grammar of ``schema`` when it is already converted
        (:func:`~formalgram_cfgzip.json_schema.xgrammar_schema_grammar` with ``options``):
        compiled as it is.
    **options
        XGrammar's converter options (those of
        :func:`~formalgram_cfgzip.json_schema.from_json_schema`).

    Returns
    -------
    XGrammarCompiled

    Raises
    ------
    EngineError
        If XGrammar's converter refuses the schema, or XGrammar is not installed.

    Notes
    -----
    XGrammar's conversion and compilation over ``logit_width`` tokens.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> full = compile_full_json_schema(Vocabulary([b"true", b"false", b"t"]), {"type": "boolean"})
    >>> mask = full.allocate_token_bitmask()
    >>> full.matcher().fill_next_token_bitmask(mask)
    >>> format(int(mask[0, 0]), "03b")
    '111'
    """
    from formalgram_cfgzip.json_schema import xgrammar_schema_grammar

    # the options checked as for any grammar (a schema has no grammar text: a stand-in one)
    tokens = prepare_full(vocab, 'root ::= ""', root="root", max_threads=max_threads)
    grammar = xgrammar_schema_grammar(schema, **options) if converted is None else converted
    compiler = _xgr().GrammarCompiler(
        full_tokenizer_info(vocab), max_threads=max_threads, cache_enabled=False
    )
    try:
        engine = compiler.compile_grammar(grammar)
    except (RuntimeError, ValueError) as exc:
        raise EngineError(f"XGrammar cannot compile the schema: {str(exc).strip()[:500]}") from exc
    return XGrammarCompiled(vocab, None, tokens, sorted(vocab.stop_ids), engine, max_threads=max_threads)
