"""The matcher over real token ids that both backends subclass, and the protocol it meets.

:class:`EngineMatcher` maps token ids to engine ids, checks arguments, keeps the history
that :meth:`~EngineMatcher.rollback` may undo and expands the engine's masks through its
:class:`~formalgram_cfgzip.engines.base.CompiledGrammar`; a backend implements the
``_engine_*`` hooks.  :class:`Matcher` is the structural protocol of every matcher.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines.arguments import as_integer
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.expand.layout import as_int32_rows, check_row_index

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.base import CompiledGrammar

__all__ = ["EngineMatcher", "Matcher"]


@runtime_checkable
class Matcher(Protocol):
    """What both engines' matchers provide (compressed and full-vocabulary alike); see
    :class:`EngineMatcher` for the behaviour and the errors."""

    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it."""
        ...

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask into row ``index`` of ``bitmask``."""
        ...

    def update_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Bring row ``index`` of ``bitmask``, as this matcher last wrote it, to the
        full-vocabulary mask."""
        ...

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """Write the engine's own (class) mask into row ``index`` of ``class_bitmask``."""
        ...

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        ...

    def reset(self) -> None:
        """Back to the initial state."""
        ...

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        ...


_INT32 = np.dtype(np.int32)


class EngineMatcher(ABC):
    """A matcher over real token ids, whatever the engine vocabulary (base of both engines).

    Subclasses implement the ``_engine_*`` hooks over *engine* ids; this class maps ids,
    checks arguments, keeps the history that :meth:`rollback` may undo and expands masks.

    Notes
    -----
    A matcher holds one sequence's state and a scratch row: use it from one thread at a
    time.  Matchers of one compiled grammar share its expander (under its lock).
    """

    #: The engine's fill raises ``RuntimeError`` once a stop token was accepted (XGrammar):
    #: fills then skip the per-call ``is_terminated()`` (a call into the engine) and check
    #: it only when the fill raised.
    FILL_RAISES_WHEN_TERMINATED = False

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._scratch = np.zeros((1, compiled.engine_words), dtype=np.int32)
        # for fill_next_token_bitmask: the expander's row writer (None without classes), and
        # the row width, read once here rather than through ``compiled`` on every call
        ex = compiled.expander
        self._write_row = ex.row_writer() if ex is not None and not compiled.direct_fill else None
        self._token_words = compiled.token_words
        self._lock = compiled.expander_lock
        #: engine ids accepted since the start (what rollback may undo)
        self._history: list[int] = []

    def _fill_live(self, bitmask: npt.NDArray[np.int32], index: int) -> bool:
        """Engine fill of row ``index``; ``False`` (row zeroed, nothing filled) when the
        matcher is terminated."""
        if self.FILL_RAISES_WHEN_TERMINATED:
            try:
                self._engine_fill(bitmask, index)
                return True
            except RuntimeError:
                if not self.is_terminated():
                    raise
        elif not self.is_terminated():
            self._engine_fill(bitmask, index)
            return True
        bitmask[index] = 0
        return False

    # -- engine hooks -----------------------------------------------------------------------
    @abstractmethod
    def _engine_accept(self, engine_id: int) -> bool:
        """Advance by an engine id; ``False`` (state unchanged) if the grammar forbids it."""

    @abstractmethod
    def _engine_fill(self, bitmask: npt.NDArray[np.int32], index: int) -> None:
        """Fill row ``index`` of an engine-width int32 bitmask."""

    @abstractmethod
    def _engine_rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` (``1 <= num_tokens <= len(history)``) accepted tokens."""

    @abstractmethod
    def _engine_reset(self) -> None:
        """Back to the engine's initial state."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """Whether a stop token has been accepted (nothing more may follow)."""

    def engine_error(self) -> str:
        """The engine's error message when it gave up (e.g. hit an internal limit), else ``""``."""
        return ""

    # -- protocol ---------------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it.

        Raises
        ------
        TokenIdError
            If ``token_id`` is not an integer in ``0 .. logit_width - 1``.
        """
        return self._accept_engine_id(self.compiled.engine_id(token_id))

    def _accept_engine_id(self, engine_id: int) -> bool:
        if self.compiled.never[engine_id] or not self._engine_accept(engine_id):
            return False  # never allowed by the policy: spares the engine's warning
        self._history.append(engine_id)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens (the stop token included).

        Raises
        ------
        EngineError
            If ``num_tokens`` is not an integer between 0 and the number of tokens
            accepted since the start or the last :meth:`reset` (the same for both engines).
        """
        n = as_integer(num_tokens, "num_tokens")
        if not 0 <= n <= len(self._history):
            raise EngineError(f"cannot roll back {n} tokens: {len(self._history)} accepted since the start")
        if n:
            self._engine_rollback(n)
            del self._history[-n:]

    def reset(self) -> None:
        """Back to the initial state (nothing accepted)."""
        self._engine_reset()
        self._history.clear()

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """Write the engine's own mask (one bit per engine token) into row ``index``.

        For a compressed grammar the bits are classes; for the full reference, tokens.
        After a stop token was accepted the row is all zeros (nothing may follow).

        Parameters
        ----------
        class_bitmask : numpy.ndarray or torch.Tensor
            Writable C-contiguous int32 on the CPU, shape ``(batch, engine_words)`` (see
            :attr:`CompiledGrammar.engine_words`) or ``(engine_words,)``.
        index : int
            Row to write.

        Raises
        ------
        EngineError
            On a read-only buffer, a wrong dtype, shape or device.
        BatchIndexError
            If ``index`` is not an integer row of ``class_bitmask``.
        """
        arr = as_int32_rows(class_bitmask, "class bitmask")
        c = self.compiled
        if arr.shape[1] != c.engine_words:
            raise EngineError(
                f"class bitmask must have {c.engine_words} int32 words per row, got {arr.shape[1]}"
            )
        self._fill_live(arr, check_row_index(index, arr.shape[0]))

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask (XGrammar layout) into row ``index`` of ``bitmask``.

        Bit ``j`` of word ``w`` is token ``32 * w + j``.  After a stop token was accepted
        the row is all zeros (nothing may follow).

        Parameters
        ----------
        bitmask : numpy.ndarray or torch.Tensor
            Writable C-contiguous int32 on the CPU, shape ``(batch, ceil(logit_width / 32))``
            or ``(ceil(logit_width / 32),)``.
        index : int
            Row to write.

        Raises
        ------
        EngineError
            On a read-only buffer, a wrong dtype, shape or device.
        BatchIndexError
            If ``index`` is not an integer row of ``bitmask``.

        Notes
        -----
        One engine fill of ``engine_size`` bits, then (compressed) one row expansion under
        the compiled grammar's :attr:`~CompiledGrammar.expander_lock`.
        """
        if (  # the common case, checked inline: no helper calls before the engine's fill
            type(bitmask) is np.ndarray
            and type(index) is int
            and bitmask.dtype is _INT32
            and bitmask.ndim == 2
            and bitmask.shape[1] == self._token_words
            and 0 <= index < bitmask.shape[0]
            and (flags := bitmask.flags).c_contiguous
            and flags.writeable
        ):
            arr = bitmask
        else:
            arr, index = self._checked_token_bitmask(bitmask, index)
        write = self._write_row
        if write is None and self.compiled.direct_fill:
            if self._fill_live(arr, index):
                self.compiled.clear_padding(arr[index : index + 1])
            return
        scratch = self._scratch
        if not self._fill_live(scratch, 0):
            arr[index] = 0
        elif write is not None:
            with self._lock:
                write(scratch, arr, index)
        else:
            self.compiled.finish_row(scratch[0], arr[index])

    def update_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Bring row ``index`` of ``bitmask`` to the full-vocabulary mask, writing only what changed.

        The row must hold what this matcher's last :meth:`fill_next_token_bitmask` or
        :meth:`update_next_token_bitmask` on the same array and row wrote there, untouched
        since (nothing else writes that row: not another matcher, not a batch fill, not the
        caller).  A decoding loop that keeps one row per sequence meets this; where rows move
        between sequences, use :meth:`fill_next_token_bitmask`.  On another array or row, or
        in an engine that cannot patch a row, this is :meth:`fill_next_token_bitmask`.

        Parameters
        ----------
        bitmask : numpy.ndarray or torch.Tensor
            As for :meth:`fill_next_token_bitmask`.
        index : int
            Row to bring up to date.

        Raises
        ------
        EngineError, BatchIndexError
            As for :meth:`fill_next_token_bitmask`.

        Notes
        -----
        The native engine with its C kernels writes nothing when the class mask is the last
        one (most steps inside a string or a comment), flips the tokens of the differing
        classes when that costs less than copying a row, and otherwise writes the whole row;
        it keeps a reference to the array.  The other engines write the whole row.

        Examples
        --------
        >>> from formalgram_cfgzip import Vocabulary, compress, engines
        >>> vocab = Vocabulary([b"a", b"b", b"ab", b"</s>"], special_ids=[3], stop_ids=[3])
        >>> text = 'root ::= "a"+ "b"'
        >>> compiled = engines.compile_grammar(compress(text, vocab, progress=False), text, engine="native")
        >>> m = compiled.matcher()
        >>> row = compiled.allocate_token_bitmask(1)  # kept for this matcher
        >>> m.update_next_token_bitmask(row, 0)
        >>> bin(int(row[0, 0]))  # "a" or "ab"
        '0b101'
        >>> m.accept_token(0)
        True
        >>> m.update_next_token_bitmask(row, 0)
        >>> bin(int(row[0, 0]))  # "a", "b" or "ab"
        '0b111'
        >>> fresh = compiled.allocate_token_bitmask(1)
        >>> m.fill_next_token_bitmask(fresh, 0)
        >>> bool((fresh == row).all())
        True
        """
        self.fill_next_token_bitmask(bitmask, index)

    def _checked_token_bitmask(self, bitmask: Any, index: object) -> tuple[npt.NDArray[np.int32], int]:
        """``bitmask`` as a numpy int32 array whose row ``index`` has the token width, and
        ``index`` as an int, or the typed error saying why not."""
        arr = as_int32_rows(bitmask, "token bitmask")
        c = self.compiled
        if arr.shape[1] != c.token_words:
            raise EngineError(
                f"token bitmask must have ceil({c.logit_width}/32) = {c.token_words} int32 words per row, "
                f"got {arr.shape[1]}"
            )
        row = check_row_index(index, arr.shape[0])
        return arr, row
