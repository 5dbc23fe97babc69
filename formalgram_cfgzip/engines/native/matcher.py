"""Native grammars and matchers over real token ids (the decoding protocol of the other engines).

:func:`compile_native` prepares a grammar over its :class:`~formalgram_cfgzip.classes.TokenClasses`
(building or loading the :class:`~formalgram_cfgzip.engines.native.tables.NativeTables`);
its :class:`NativeMatcher` takes real token ids and fills class masks and full-vocabulary
token masks (XGrammar's bitmask layout), advancing with each token's own bytes.

Token policy (as for the other engines): a text token is allowed when the grammar allows its
bytes next; a stop token when the text so far is in the language (accepting it terminates
the matcher: every later mask is empty and every later token refused); tokens of the invalid
class (special tokens, holes, padding, text valid nowhere) never.

Kernels: the C kernel ``_cnative`` when it is built (``kernel="auto"``; not with
``FORMALGRAM_NO_CNATIVE=1``), else the pure-Python :class:`~formalgram_cfgzip.engines.native.gss.PyState`;
both give identical masks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines.native._adapter import (
    EngineError,
    Grammar,
    MaskExpander,
    TokenClasses,
    TokenIdError,
)
from formalgram_cfgzip.engines.native.gss import PyState
from formalgram_cfgzip.engines.native.tables import NativeTables, build_tables

__all__ = ["NativeGrammar", "NativeMatcher", "c_module", "compile_native"]


class StateLike(Protocol):
    """What both kernels' states provide."""

    def accept_bytes(self, data: bytes, /) -> bool: ...

    def accept_stop(self) -> bool: ...

    def rollback(self, num_tokens: int, /) -> None: ...

    def reset(self) -> None: ...

    def fill(self, row: Any, /) -> None: ...

    def stop_allowed(self) -> bool: ...

    def is_terminated(self) -> bool: ...

    def tops(self) -> tuple[int, ...]: ...

    def node(self, i: int, /) -> tuple[int, tuple[int, ...]]: ...

    def info(self) -> dict[str, int]: ...


def c_module() -> Any:
    """The compiled kernel module, or ``None`` (not built, or ``FORMALGRAM_NO_CNATIVE=1``)."""
    if os.environ.get("FORMALGRAM_NO_CNATIVE", "") not in ("", "0"):
        return None
    try:
        from formalgram_cfgzip.engines.native import _cnative
    except ImportError:
        return None
    return _cnative


def _c_tables(module: Any, t: NativeTables) -> Any:
    d = t.domains
    return module.Tables(
        t.num_symbols,
        t.start_symbol,
        t.accepts_empty,
        t.num_classes,
        t.stop_class,
        t.byte_class,
        t.trie_sym,
        t.trie_up,
        t.trans_key,
        t.trans_start,
        t.trans_push,
        d.edge_start,
        d.edge_sym,
        d.edge_to,
        d.out,
        d.set_start,
        d.set_class,
    )


class NativeGrammar:
    """A grammar compiled for the native engine over token classes.

    Parameters
    ----------
    classes : TokenClasses
    tables : NativeTables
        Tables built for ``classes`` (:func:`~formalgram_cfgzip.engines.native.tables.build_tables`).
    kernel : {"auto", "c", "python"}, keyword-only
        ``"auto"``: the C kernel when built, else pure Python.

    Raises
    ------
    EngineError
        If ``kernel="c"`` and the C kernel is not built, or the tables do not fit the classes.

    Attributes
    ----------
    kernel : str
        ``"c"`` or ``"python"``: the kernel in use.
    logit_width, token_words, num_classes, class_words : int
        Widths of the masks.
    expander : MaskExpander
        Class mask -> token mask.
    """

    def __init__(
        self, classes: TokenClasses, tables: NativeTables, *, kernel: Literal["auto", "c", "python"] = "auto"
    ) -> None:
        if tables.num_classes != classes.num_classes or tables.stop_class != classes.stop_class:
            raise EngineError("the native tables were built for other classes")
        if kernel not in ("auto", "c", "python"):
            raise EngineError(f"kernel must be 'auto', 'c' or 'python', got {kernel!r}")
        module = c_module() if kernel != "python" else None
        if kernel == "c" and module is None:
            raise EngineError("the native C kernel (formalgram_cfgzip.engines.native._cnative) is not built")
        self.classes = classes
        self.tables = tables
        self.vocab = classes.vocab
        self.kernel = "c" if module is not None else "python"
        self._module = module
        self._ctables = _c_tables(module, tables) if module is not None else None
        self.logit_width = self.vocab.logit_width
        self.token_words = (self.logit_width + 31) // 32
        self.num_classes = classes.num_classes
        self.class_words = (self.num_classes + 31) // 32
        self.token_class = np.asarray(classes.token_class, dtype=np.int32)
        self._class_list: list[int] = self.token_class.tolist()
        self.expander = MaskExpander(self.token_class, self.num_classes)
        self._batch_scratch = np.zeros((0, self.class_words), dtype=np.int32)

    def new_state(self) -> StateLike:
        """A fresh kernel state (empty prefix)."""
        if self._module is not None:
            state: StateLike = self._module.State(self._ctables)
            return state
        return PyState(self.tables)

    def matcher(self) -> NativeMatcher:
        """A fresh matcher in the initial state."""
        return NativeMatcher(self)

    def allocate_token_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed int32 token bitmask ``(batch, ceil(logit_width / 32))``."""
        return np.zeros((batch, self.token_words), dtype=np.int32)

    def allocate_class_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed int32 class bitmask ``(batch, ceil(num_classes / 32))``."""
        return np.zeros((batch, self.class_words), dtype=np.int32)

    def fill_next_class_bitmask_batch(self, matchers: Sequence[NativeMatcher], class_bitmask: Any) -> None:
        """Row ``i`` of ``class_bitmask`` := class mask of ``matchers[i]``.

        Raises
        ------
        EngineError
            If the bitmask is not a C-contiguous int32 array with enough rows of the class
            width, or a matcher belongs to another grammar.
        """
        arr = _rows(class_bitmask, self.class_words, len(matchers), "class bitmask")
        for m in matchers:
            if m.grammar is not self:
                raise EngineError("a matcher of another grammar was passed")
        if self._module is not None:
            self._module.fill_batch([m._state for m in matchers], arr)
            return
        for i, m in enumerate(matchers):
            m._state.fill(arr[i])

    def fill_next_token_bitmask_batch(self, matchers: Sequence[NativeMatcher], bitmask: Any) -> None:
        """Row ``i`` of ``bitmask`` := token mask of ``matchers[i]`` (class masks, then one expansion)."""
        arr = _rows(bitmask, self.token_words, len(matchers), "token bitmask")
        n = len(matchers)
        if self._batch_scratch.shape[0] < n:
            self._batch_scratch = np.zeros((n, self.class_words), dtype=np.int32)
        scratch = self._batch_scratch[:n]
        self.fill_next_class_bitmask_batch(matchers, scratch)
        self.expander.expand(scratch, arr[:n])

    def accept_token_batch(self, matchers: Sequence[NativeMatcher], token_ids: Sequence[int]) -> list[bool]:
        """Advance each matcher by its token."""
        if len(matchers) != len(token_ids):
            raise EngineError(f"{len(matchers)} matchers but {len(token_ids)} tokens")
        return [m.accept_token(t) for m, t in zip(matchers, token_ids, strict=True)]


def _rows(bitmask: Any, words: int, rows: int, what: str) -> npt.NDArray[np.int32]:
    if not (
        isinstance(bitmask, np.ndarray)
        and bitmask.dtype == np.int32
        and bitmask.ndim == 2
        and bitmask.flags.c_contiguous
    ):
        raise EngineError(f"{what} must be a C-contiguous 2-D int32 numpy array")
    if bitmask.shape[1] != words or bitmask.shape[0] < rows:
        raise EngineError(
            f"{what} must have at least {rows} rows of {words} int32 words, got {bitmask.shape}"
        )
    return bitmask


class NativeMatcher:
    """Matcher over real token ids on the native engine (same protocol as the other engines)."""

    def __init__(self, grammar: NativeGrammar) -> None:
        self.grammar = grammar
        self._state = grammar.new_state()
        self._scratch = np.zeros((1, grammar.class_words), dtype=np.int32)
        self._write_row = grammar.expander.row_writer()
        self._tokens = grammar.vocab.tokens
        self._class_of = grammar._class_list
        self._stop = grammar.classes.stop_class
        self._invalid = grammar.classes.invalid_class

    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it.

        Raises
        ------
        TokenIdError
            If ``token_id`` is not an integer in ``0 .. logit_width - 1``.
        """
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise TokenIdError(f"token id must be an integer, got {token_id!r}")
        t = int(token_id)
        if not 0 <= t < len(self._class_of):
            raise TokenIdError(f"token id {t} is outside the vocabulary (0..{len(self._class_of) - 1})")
        k = self._class_of[t]
        if k == self._stop:
            return self._state.accept_stop()
        if k == self._invalid:
            return False
        data = self._tokens[t]
        return bool(data) and self._state.accept_bytes(data)  # type: ignore[arg-type]

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """Write the class mask into row ``index`` of an int32 ``(batch, ceil(num_classes / 32))`` array."""
        arr = _rows(class_bitmask, self.grammar.class_words, 1, "class bitmask")
        if not 0 <= index < arr.shape[0]:
            raise EngineError(f"batch index {index} out of range for a bitmask with {arr.shape[0]} rows")
        self._state.fill(arr[index])

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary token mask into row ``index`` of an int32 ``(batch, ceil(logit_width / 32))`` array."""
        arr = _rows(bitmask, self.grammar.token_words, 1, "token bitmask")
        if not 0 <= index < arr.shape[0]:
            raise EngineError(f"batch index {index} out of range for a bitmask with {arr.shape[0]} rows")
        self._state.fill(self._scratch[0])
        self._write_row(self._scratch, arr, index)

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens.

        Raises
        ------
        EngineError
            If more tokens are rolled back than were accepted since the last reset.
        """
        try:
            self._state.rollback(num_tokens)
        except ValueError as exc:
            raise EngineError(str(exc)) from None

    def reset(self) -> None:
        """Back to the initial state."""
        self._state.reset()

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return self._state.is_terminated()

    def stop_allowed(self) -> bool:
        """Whether the text so far is in the language (a stop token may come next)."""
        return self._state.stop_allowed()

    def info(self) -> dict[str, int]:
        """Sizes of the graph-structured stack and of the last walk (benchmarks)."""
        return self._state.info()


def compile_native(
    classes: TokenClasses,
    grammar: Grammar | str,
    *,
    tables: NativeTables | None = None,
    kernel: Literal["auto", "c", "python"] = "auto",
) -> NativeGrammar:
    """Compile ``grammar`` for the native engine over ``classes``.

    Parameters
    ----------
    classes : TokenClasses
        Classes computed by ``compress`` for ``grammar``.
    grammar : Grammar or str
        The grammar (or its GBNF text).
    tables : NativeTables or None, keyword-only
        Tables built earlier for these classes (``None``: built now, see
        :func:`~formalgram_cfgzip.engines.native.tables.build_tables`).
    kernel : {"auto", "c", "python"}, keyword-only
        Which kernel runs the matchers.

    Returns
    -------
    NativeGrammar

    Raises
    ------
    ClassesMismatchError
        If the classes belong to another grammar.
    EngineError
        If the tables do not fit the classes, or ``kernel="c"`` is not built.
    GrammarTooLarge
        If building the tables exceeds a budget.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> text = 'root ::= "[" ("a" ("," "a")*)? "]"'
    >>> v = Vocabulary([b"[", b"a", b",", b"]", b"a,", b"<eos>"], stop_ids=[5], special_ids=[5])
    >>> g = compile_native(compress(text, v, progress=False), text)
    >>> m = g.matcher()
    >>> mask = g.allocate_token_bitmask()
    >>> m.accept_token(0), m.accept_token(4), m.accept_token(3)
    (True, True, False)
    >>> m.fill_next_token_bitmask(mask)
    >>> [i for i in range(6) if mask[0, 0] >> i & 1]  # "a" or "a," may follow "[a,"
    [1, 4]
    """
    if tables is None:
        tables = build_tables(classes, grammar)
    elif tables.grammar_sha256 != classes.grammar_sha256:
        raise EngineError("the native tables were built for another grammar")
    return NativeGrammar(classes, tables, kernel=kernel)
