"""The llguidance backend: a grammar compiled by llguidance over class representatives (or
over the full vocabulary), behind the protocol of :mod:`formalgram_cfgzip.engines.base`.

The engine tokenizer is an ``llguidance.LLTokenizer`` over a token list: class
representatives' bytes (compressed, :func:`compile_grammar`) or every token's bytes (full
reference, :func:`compile_full`), with the special-token policy of
:mod:`formalgram_cfgzip.engines.tokens` (special tokens, holes and stop tokens get empty
bytes; empty-bytes tokens are never allowed by llguidance; the stop tokens are its EOS
tokens, allowed when the grammar is accepting).  When the vocabulary has no stop token a
dummy EOS engine token (empty bytes, no real token maps to it) is appended, because
llguidance always has one.

llguidance facts this relies on (1.9.1): ``grammar_from("gbnf" | "lark", text)`` gives a
grammar string for ``LLMatcher(tokenizer, grammar)``; the matcher never raises for
grammar errors but enters an error state (``is_error()``/``get_error()``); consuming a
forbidden token puts it into the error state, so :meth:`LLGuidanceMatcher.accept_token`
checks with ``validate_tokens`` first; ``llguidance.numpy.fill_next_token_bitmask`` writes
XGrammar's int32 layout; ``fill_next_token_bitmask_par`` with an ``LLExecutor`` fills a
batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines.arguments import prepare_compressed, prepare_full
from formalgram_cfgzip.engines.base import CompiledGrammar, Syntax
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.engines.tokens import per_vocabulary
from formalgram_cfgzip.errors import EngineError

if TYPE_CHECKING:
    from llguidance import LLParserLimits

    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["LLGuidanceCompiled", "LLGuidanceMatcher", "compile_full", "compile_grammar"]


def _llg() -> Any:
    try:
        import llguidance
        import llguidance.numpy
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EngineError(
            "the llguidance backend needs the 'llguidance' package (pip install llguidance)"
        ) from exc
    return llguidance


class _TokenList:
    """The minimal tokenizer object ``llguidance.TokenizerWrapper`` reads.

    llguidance tokenizes the bytes a grammar forces (e.g. the ``)`` that must follow), so
    ``__call__`` must really tokenize: it is a greedy longest-match over the engine tokens.
    A tokenizer that returns nothing there makes llguidance stop with "no extension".
    """

    def __init__(self, tokens: list[bytes], eos: int) -> None:
        self.tokens = tokens
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids: list[int] = []
        self._ids: dict[bytes, int] = {}
        for i, t in enumerate(tokens):
            if t and t not in self._ids:
                self._ids[t] = i
        self._max_len = max((len(t) for t in self._ids), default=1)

    def __call__(self, data: bytes | str) -> list[int]:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        out: list[int] = []
        i, n = 0, len(raw)
        ids = self._ids
        while i < n:
            for length in range(min(self._max_len, n - i), 0, -1):
                tid = ids.get(raw[i : i + length])
                if tid is not None:
                    out.append(tid)
                    i += length
                    break
            else:
                i += 1  # a byte no token spells: skipped (it cannot be generated anyway)
        return out


class LLGuidanceMatcher(EngineMatcher):
    """Matcher over real token ids backed by an ``llguidance.LLMatcher``."""

    def __init__(self, compiled: LLGuidanceCompiled) -> None:
        super().__init__(compiled)
        self._m = compiled.pristine.deep_copy()
        self._eos = compiled.eos_ids

    def _engine_accept(self, engine_id: int) -> bool:
        if self.is_terminated():
            return False
        m = self._m
        # validate_tokens does not count EOS, and is_accepting() is not always what the
        # mask says (e.g. in llguidance's stopped states): read the EOS bit of the mask.
        if engine_id in self._eos:
            scratch = self._scratch
            self._engine_fill(scratch, 0)
            if not (int(scratch[0, engine_id >> 5]) >> (engine_id & 31)) & 1:
                return False
        elif m.is_error() or m.validate_tokens([engine_id]) != 1:
            return False
        if not m.consume_token(engine_id):  # pragma: no cover - validated above
            raise EngineError(f"llguidance failed after validating a token: {m.get_error()[:300]}")
        return True

    def _engine_fill(self, bitmask: npt.NDArray[np.int32], index: int) -> None:
        _llg().numpy.fill_next_token_bitmask(self._m, bitmask, index)

    def engine_error(self) -> str:
        """llguidance's error message (e.g. its parser item limit), or ``""``."""
        return str(self._m.get_error()) if self._m.is_error() else ""

    def _engine_rollback(self, num_tokens: int) -> None:
        self._m.rollback(num_tokens)

    def _engine_reset(self) -> None:
        self._m.reset()

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return bool(self._history) and self._history[-1] in self._eos


class LLGuidanceCompiled(CompiledGrammar):
    """A grammar compiled by llguidance over classes or the full vocabulary.

    Made by :func:`compile_grammar` or :func:`compile_full`; see
    :class:`~formalgram_cfgzip.engines.base.CompiledGrammar` for the attributes.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        classes: TokenClasses | None,
        engine_tokens: list[bytes],
        eos_ids: list[int],
        grammar: str,
        *,
        limits: LLParserLimits | None,
        max_threads: int | None,
        tokenizer: Any = None,
    ) -> None:
        super().__init__(vocab, classes, engine_tokens, eos_ids)
        llg = _llg()
        if limits is not None and not isinstance(limits, llg.LLParserLimits):
            raise EngineError(
                f"limits must be an llguidance.LLParserLimits or None, got {type(limits).__name__}"
            )
        self.eos_ids = frozenset(eos_ids)
        if tokenizer is None:
            tokenizer = _tokenizer(engine_tokens, eos_ids)
        self.tokenizer = tokenizer
        if int(self.tokenizer.vocab_size) != len(engine_tokens):
            raise EngineError(
                f"llguidance built a tokenizer of {self.tokenizer.vocab_size} tokens for {len(engine_tokens)}"
            )
        self.pristine = llg.LLMatcher(self.tokenizer, grammar, log_level=0, limits=limits)
        if self.pristine.is_error():
            raise EngineError(f"llguidance cannot compile the grammar: {self.pristine.get_error()[:500]}")
        self._max_threads = max_threads
        self._executor: Any = None

    def matcher(self) -> LLGuidanceMatcher:
        """A fresh matcher in the initial state."""
        return LLGuidanceMatcher(self)

    def _batch_engine_fill(
        self, matchers: Sequence[EngineMatcher], engine_bitmask: npt.NDArray[np.int32]
    ) -> None:
        llg = _llg()
        if self._executor is None:
            self._executor = llg.LLExecutor(self._max_threads)
        pairs = [(m._m, i) for i, m in enumerate(matchers) if isinstance(m, LLGuidanceMatcher)]
        if len(pairs) != len(matchers):
            raise EngineError("matchers of another engine were passed to an llguidance batch")
        llg.numpy.fill_next_token_bitmask_par(self._executor, pairs, engine_bitmask)


def _grammar(grammar_text: str, syntax: Syntax, root: str) -> str:
    """llguidance's grammar string for ``grammar_text``.

    GBNF that llguidance's own converter rejects (it refuses the escapes ``\\-`` and ``\\^``
    in classes, folds rule names so that ``a-b`` and ``a_b`` or ``Text`` and ``text``
    collide, and only starts at ``root``) is parsed by formalgram and printed again with
    :func:`formalgram.to_gbnf` (``portable_names=True``): the same language by the
    printer's contract, spelled the way llguidance reads it.  The full and the compressed
    engine go through this same function, so they see the same text.
    """
    llg = _llg()
    if syntax not in ("gbnf", "lark"):
        raise EngineError(f"syntax must be 'gbnf' or 'lark', got {syntax!r}")
    if syntax == "lark":
        if root != "root":
            raise EngineError("the llguidance backend starts Lark grammars at 'start'; pass root='root'")
        try:
            return str(llg.grammar_from("lark", grammar_text))
        except ValueError as exc:
            raise EngineError(f"llguidance cannot read the grammar: {exc}") from exc
    first: ValueError | None = None
    if root == "root":
        try:
            return str(llg.grammar_from("gbnf", grammar_text))
        except ValueError as exc:
            first = exc
    from formalgram.errors import FormalgramError
    from formalgram.syntax.gbnf import parse_gbnf
    from formalgram.syntax.printer import to_gbnf
    from formalgram_cfgzip.xgrammar_regex import regex_automaton

    try:
        # XGrammar's Regex macros (a JSON Schema's patterns) as XGrammar's automaton reads them
        portable = to_gbnf(parse_gbnf(grammar_text, root, regex=regex_automaton), portable_names=True)
        return str(llg.grammar_from("gbnf", portable))
    except (FormalgramError, ValueError) as exc:
        reason = f"{first}; after reprinting: {exc}" if first is not None else str(exc)
        raise EngineError(f"llguidance cannot read the grammar: {reason}") from exc


def compile_grammar(
    classes: TokenClasses,
    grammar_text: str,
    *,
    root: str = "root",
    vocab: Vocabulary | None = None,
    check: bool = True,
    max_threads: int | None = None,
    syntax: Syntax = "gbnf",
    limits: LLParserLimits | None = None,
) -> LLGuidanceCompiled:
    """Compile ``grammar_text`` with llguidance over the representatives of ``classes``.

    Parameters
    ----------
    classes : TokenClasses
        Classes computed for this grammar.
    grammar_text : str
        GBNF (or Lark with ``syntax="lark"``) text.
    root : str, keyword-only
        Start rule.  GBNF: any rule (a grammar not starting at ``root``, or one
        llguidance's GBNF converter rejects, is reprinted by formalgram first); Lark: must
        be ``"root"`` (the Lark grammar itself starts at ``start``).
    vocab : Vocabulary or None, keyword-only
        The caller's vocabulary, checked against ``classes.vocab``.
    check : bool, keyword-only
        Validate fingerprints (GBNF only) and the special-token policy.
    max_threads : int or None, keyword-only
        Threads of the batch fills (``None``: llguidance's default, most of the cores).
    syntax : {"gbnf", "lark"}, keyword-only
        How ``grammar_text`` is written.
    limits : llguidance.LLParserLimits or None, keyword-only
        llguidance's parser limits for the grammar and every matcher (``None``: its
        defaults, e.g. 50,000 Earley items per mask step).  A matcher that exceeds them
        enters llguidance's error state (:meth:`LLGuidanceMatcher.engine_error`).

    Returns
    -------
    LLGuidanceCompiled

    Raises
    ------
    ClassesMismatchError
        If the classes belong to another vocabulary or grammar, or break the policy.
    EngineError
        If an option has the wrong type or value, llguidance rejects the grammar, or is
        not installed.

    Notes
    -----
    llguidance's grammar compilation and a tokenizer over ``num_classes`` tokens, plus
    O(logit_width) for the expander.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> vocab = Vocabulary([b"a", b"b", b"ab", b"ba", b"</s>"], special_ids=[4], stop_ids=[4])
    >>> text = 'root ::= "a" "b"*'
    >>> compiled = compile_grammar(compress(text, vocab, progress=False), text)
    >>> m = compiled.matcher()
    >>> m.accept_token(0), m.accept_token(4), m.is_terminated()
    (True, True, True)
    """
    tokens = prepare_compressed(
        classes,
        grammar_text,
        root=root,
        vocab=vocab,
        check=check,
        max_threads=max_threads,
        fingerprint=syntax == "gbnf",
    )
    if classes.stop_class >= 0:
        eos = [classes.stop_class]
    else:
        eos = [len(tokens)]
        tokens.append(b"")
    grammar = _grammar(grammar_text, syntax, root)
    return LLGuidanceCompiled(
        classes.vocab, classes, tokens, eos, grammar, limits=limits, max_threads=max_threads
    )


def _tokenizer(engine_tokens: list[bytes], eos_ids: list[int]) -> Any:
    llg = _llg()
    wrapper = llg.TokenizerWrapper(_TokenList(engine_tokens, eos_ids[0]))
    return llg.LLTokenizer(wrapper, eos_token=list(eos_ids))


_full_tokenizer_cache: dict[str, Any] = {}


def compile_full(
    vocab: Vocabulary,
    grammar_text: str,
    *,
    root: str = "root",
    max_threads: int | None = None,
    syntax: Syntax = "gbnf",
    limits: LLParserLimits | None = None,
) -> LLGuidanceCompiled:
    """The uncompressed reference: llguidance over every logit index of ``vocab``.

    Parameters
    ----------
    vocab : Vocabulary
    grammar_text : str
        GBNF (or Lark with ``syntax="lark"``) text.
    root, max_threads, syntax, limits : keyword-only
        As for :func:`compile_grammar`.

    Returns
    -------
    LLGuidanceCompiled

    Raises
    ------
    EngineError
        If an option has the wrong type or value, llguidance rejects the grammar, or is
        not installed.

    Notes
    -----
    llguidance's grammar compilation; its tokenizer over ``logit_width`` tokens is built
    once per vocabulary (by fingerprint) and shared; its cost is measured by
    ``python -m bench.tokenizer_bench``.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> full = compile_full(Vocabulary([b"a", b"b", b"ab"]), 'root ::= "a" "b"*')
    >>> m = full.matcher()
    >>> m.accept_token(2), m.accept_token(0)
    (True, False)
    """
    tokens = list(prepare_full(vocab, grammar_text, root=root, max_threads=max_threads))
    eos = sorted(vocab.stop_ids)
    if not eos:
        eos = [len(tokens)]
        tokens.append(b"")
    grammar = _grammar(grammar_text, syntax, root)
    tokenizer = per_vocabulary(_full_tokenizer_cache, vocab, lambda: _tokenizer(tokens, eos))
    return LLGuidanceCompiled(
        vocab, None, tokens, eos, grammar, limits=limits, max_threads=max_threads, tokenizer=tokenizer
    )
