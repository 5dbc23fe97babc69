"""XGrammar backend: a grammar compiled over class representatives (or the full vocabulary).

``compile(classes, grammar_text)`` builds an ``xgrammar.TokenizerInfo`` whose token ``k``
is class ``k`` (bytes of its representative; the stop class is the engine's only stop
token; the invalid class has empty bytes, which XGrammar treats as a special token and
never allows), compiles the grammar for it, and returns a :class:`XGrammarCompiled`
whose matchers take real token ids and fill full-vocabulary bitmasks.
``compile_full(vocab, grammar_text)`` is the uncompressed reference with the same
protocol and the same special-token policy (see :mod:`formalgram_cfgzip.engines.base`).

XGrammar facts this relies on (0.2.9): tokens given as ``b""`` and ids in
``[len(encoded_vocab), vocab_size)`` are special and never allowed; a stop token is
allowed exactly when the grammar can end, and accepting it terminates the matcher;
``stop_token_ids=[]`` means no stop token (no auto-detection); rejected tokens leave the
state unchanged; ``BatchGrammarMatcher.batch_fill_next_token_bitmask`` fills many rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from formalgram_cfgzip.engines._xgrammar_guard import crash_cycle
from formalgram_cfgzip.engines.base import (
    CompiledGrammar,
    EngineError,
    EngineMatcher,
    check_classes,
    class_vocabulary,
    engine_vocabulary,
    per_vocabulary,
)

if TYPE_CHECKING:
    import numpy as np

    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["XGrammarCompiled", "XGrammarMatcher", "compile", "compile_full"]

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

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        self._m.rollback(num_tokens)

    def reset(self) -> None:
        """Back to the initial state."""
        self._m.reset()

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return bool(self._m.is_terminated())


class XGrammarCompiled(CompiledGrammar):
    """A grammar compiled by XGrammar over classes or the full vocabulary."""

    def __init__(
        self,
        vocab: Vocabulary,
        classes: TokenClasses | None,
        engine_tokens: list[bytes],
        stop_ids: list[int],
        engine_grammar: Any,
        *,
        max_threads: int,
    ) -> None:
        super().__init__(vocab, classes, engine_tokens, stop_ids)
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


def compile(
    classes: TokenClasses,
    grammar_text: str,
    *,
    root: str = "root",
    vocab: Vocabulary | None = None,
    max_threads: int = 1,
    check: bool = True,
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
    max_threads : int, keyword-only
        Threads for compilation and batch filling.
    check : bool, keyword-only
        Validate fingerprints and the special-token policy (:func:`check_classes`).

    Returns
    -------
    XGrammarCompiled

    Raises
    ------
    ClassesMismatchError
        If the classes belong to another vocabulary or grammar, or break the policy.
    EngineError
        If XGrammar rejects the grammar or is not installed.

    Complexity
    ----------
    XGrammar compilation over ``num_classes`` tokens, plus O(logit_width) for the expander.

    Example
    -------
    >>> # compiled = compile(compress(text, vocab), text); m = compiled.matcher()
    """
    if check:
        check_classes(classes, grammar_text, vocab)
    xgr = _xgr()
    encoded = class_vocabulary(classes)
    stops = [classes.stop_class] if classes.stop_class >= 0 else []
    info = xgr.TokenizerInfo(encoded, vocab_size=len(encoded), stop_token_ids=stops)
    engine = _compile_text(info, grammar_text, root, max_threads)
    return XGrammarCompiled(classes.vocab, classes, encoded, stops, engine, max_threads=max_threads)


def _full_tokens(vocab: Vocabulary) -> list[bytes]:
    tokens = engine_vocabulary(vocab)
    tokens.extend([b""] * (vocab.logit_width - len(tokens)))
    return tokens


def full_tokenizer_info(vocab: Vocabulary) -> Any:
    """``xgrammar.TokenizerInfo`` over every token of ``vocab`` (policy applied; cached)."""
    return per_vocabulary(
        _full_tokenizer_cache,
        vocab,
        lambda: _xgr().TokenizerInfo(
            _full_tokens(vocab), vocab_size=vocab.logit_width, stop_token_ids=sorted(vocab.stop_ids)
        ),
    )


def compile_full(
    vocab: Vocabulary, grammar_text: str, *, root: str = "root", max_threads: int = 1
) -> XGrammarCompiled:
    """The uncompressed reference: XGrammar over every token of ``vocab``, same protocol.

    Raises
    ------
    EngineError
        If XGrammar rejects the grammar or is not installed.
    """
    engine = _compile_text(full_tokenizer_info(vocab), grammar_text, root, max_threads)
    return XGrammarCompiled(
        vocab, None, _full_tokens(vocab), sorted(vocab.stop_ids), engine, max_threads=max_threads
    )
