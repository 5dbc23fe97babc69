"""The compiled grammar both backends subclass: id mapping, mask expansion and batch fills.

A *compiled grammar* is a grammar engine (XGrammar, llguidance) prepared for one grammar
over an *engine vocabulary*:

* **compressed**: engine token ``k`` is class ``k`` of a
  :class:`~formalgram_cfgzip.classes.TokenClasses`; its bytes are the bytes of the class
  representative.  A real token id is mapped to its class before it reaches the engine,
  and the engine's class mask is expanded back to every logit index
  (:class:`~formalgram_cfgzip.expand.MaskExpander`).
* **full** (the reference): engine token ``i`` is token ``i`` of the
  :class:`~formalgram_cfgzip.vocabulary.Vocabulary`, no compression.

Both use the same special-token policy (:mod:`formalgram_cfgzip.engines.tokens`), so their
masks can be compared bit for bit.  The matcher both backends subclass is
:class:`~formalgram_cfgzip.engines.matcher.EngineMatcher`, the options check
:mod:`formalgram_cfgzip.engines.arguments`.

Threads: a :class:`CompiledGrammar` may be shared by threads (its expanders and batch
buffers are used under :attr:`CompiledGrammar.expander_lock`); a matcher may not (one
sequence, one thread at a time).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines.arguments import as_integer
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.engines.tokens import never_allowed
from formalgram_cfgzip.errors import BatchIndexError, EngineError, TokenIdError
from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander
from formalgram_cfgzip.expand.layout import as_int32_rows, check_row_index

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["CompiledGrammar", "Syntax"]

#: Grammar text formats: GBNF / XGrammar EBNF (both engines) or Lark (llguidance only).
Syntax = Literal["gbnf", "lark"]


class CompiledGrammar(ABC):
    """A grammar compiled by one engine over a compressed or a full engine vocabulary.

    Made by :func:`formalgram_cfgzip.engines.compile_grammar` (compressed) or
    :func:`~formalgram_cfgzip.engines.compile_full` (the reference); not constructed directly.

    Attributes
    ----------
    vocab : Vocabulary
        The real vocabulary (token ids seen by the caller).
    classes : TokenClasses or None
        The classes (``None`` for the full-vocabulary reference).
    logit_width : int
        Number of logits; token bitmasks have ``token_words = ceil(logit_width / 32)`` words.
    engine_size : int
        Number of engine tokens (classes, or logit indices, plus a dummy stop if needed).
    never : numpy.ndarray
        bool per engine id: never allowed by the special-token policy.
    engine_words : int
        Words per row of the engine's own bitmask.
    expander : MaskExpander or None
        The CPU expander of class masks (``None`` for the full-vocabulary reference), shared
        by every matcher.  See :meth:`torch_expander` for torch devices.
    expander_lock : threading.Lock
        Held while this grammar's expanders or batch buffers are in use.

    Notes
    -----
    One compiled grammar serves any number of matchers, processors and requests, on any
    number of threads: it owns one CPU :class:`~formalgram_cfgzip.expand.MaskExpander` and
    at most one :class:`~formalgram_cfgzip.expand.TorchMaskExpander` per torch device
    (:meth:`torch_expander`), made once.  Expanders keep scratch buffers and a row cache
    and are not thread-safe, so every use of them here (a row expansion, a batch fill,
    :meth:`mask_logits`) holds :attr:`expander_lock`; the engine's own fill of one matcher
    runs outside it.  The lock costs one uncontended acquire per fill, small next to the
    fill and the expansion themselves.  Code that calls :attr:`expander` or a
    :meth:`torch_expander` itself from several threads must hold :attr:`expander_lock` too.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        classes: TokenClasses | None,
        engine_tokens: Sequence[bytes],
        stop_ids: Sequence[int],
        never: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        engine_size = len(engine_tokens)
        self.vocab = vocab
        self.classes = classes
        self.logit_width = vocab.logit_width
        self.token_words = (self.logit_width + 31) // 32
        self.engine_size = engine_size
        self.engine_words = (engine_size + 31) // 32
        self.expander_lock = threading.Lock()
        self.expander: MaskExpander | None = None
        self._token_class: npt.NDArray[np.int64] | None = None
        if classes is not None:
            self._token_class = np.asarray(classes.token_class, dtype=np.int64)
            self.expander = MaskExpander(self._token_class, engine_size)
        self._torch_expanders: dict[Any, TorchMaskExpander] = {}
        self._batch_scratch = np.zeros((0, self.engine_words), dtype=np.int32)
        #: the engine writes token bitmasks itself (full reference of the same width: no
        #: scratch row, no copy)
        self.direct_fill = classes is None and self.engine_words == self.token_words
        rem = self.logit_width % 32
        self._pad_mask = np.int32((1 << rem) - 1) if rem else None
        #: engine ids that the policy never allows (empty bytes, not a stop token); the
        #: full-vocabulary engines pass their vocabulary's one (:func:`~formalgram_cfgzip.engines.tokens.full_never`)
        self.never = never_allowed(engine_tokens, stop_ids) if never is None else never

    @property
    def compressed(self) -> bool:
        """True for a class-representative engine, False for the full-vocabulary reference."""
        return self.classes is not None

    @abstractmethod
    def matcher(self) -> EngineMatcher:
        """A fresh matcher in the initial state."""

    def engine_id(self, token_id: int) -> int:
        """Engine token for a real token id (its class, or itself).

        Raises
        ------
        TokenIdError
            If ``token_id`` is not an integer in ``0 .. logit_width - 1``.
        """
        t = as_integer(token_id, "token id", TokenIdError)
        if not 0 <= t < self.logit_width:
            raise TokenIdError(f"token id {t} is outside the vocabulary (0..{self.logit_width - 1})")
        if self._token_class is None:
            return t
        return int(self._token_class[t])

    def allocate_token_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed int32 token bitmask of shape ``(batch, ceil(logit_width / 32))``."""
        return np.zeros((batch, self.token_words), dtype=np.int32)

    def allocate_class_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed int32 engine bitmask of shape ``(batch, engine_words)``."""
        return np.zeros((batch, self.engine_words), dtype=np.int32)

    # -- expanders ----------------------------------------------------------------------------
    def torch_expander(self, device: Any = "cpu") -> TorchMaskExpander:
        """The expander of this grammar's class masks on a torch ``device`` (made once per
        device and shared by every caller; hold :attr:`expander_lock` while using it).

        Parameters
        ----------
        device : str or torch.device
            Where the class bitmasks and logits live (``"cuda"`` and ``"cuda:0"`` share one).

        Returns
        -------
        TorchMaskExpander

        Raises
        ------
        EngineError
            For a full-vocabulary grammar (it has no class masks).
        ImportError
            Without PyTorch.

        Notes
        -----
        The first call per device builds the expander (O(logit_width) on the device; on
        the CPU it reuses :attr:`expander`); later calls are one dictionary lookup.
        """
        ex = self._torch_expanders.get(device)
        if ex is not None:
            return ex
        if self._token_class is None:
            raise EngineError("a full-vocabulary grammar has no class masks to expand")
        import torch

        resolved = torch.empty(0, device=device).device  # "cuda" -> "cuda:<current>"
        with self.expander_lock:
            ex = self._torch_expanders.get(resolved)
            if ex is None:
                ex = TorchMaskExpander(
                    self._token_class, self.engine_size, device=resolved, cpu_expander=self.expander
                )
                self._torch_expanders[resolved] = ex
            self._torch_expanders[device] = ex
        return ex

    def mask_logits(self, logits: Any, class_bitmask: Any) -> Any:
        """Set the logits of tokens whose class bit is 0 to ``-inf``, in place, on the
        logits' device (:meth:`torch_expander`, under :attr:`expander_lock`).

        Parameters
        ----------
        logits : torch.Tensor
            float ``(batch, n)`` with ``n >= logit_width`` (columns past it are set to
            ``-inf`` too).
        class_bitmask : numpy.ndarray or torch.Tensor
            int32 ``(batch, engine_words)``, e.g. from :meth:`fill_next_class_bitmask_batch`.

        Returns
        -------
        torch.Tensor
            ``logits``.

        Raises
        ------
        EngineError
            For a full-vocabulary grammar.
        ValueError
            On shapes that do not fit (from the expander).
        """
        ex = self.torch_expander(logits.device)
        with self.expander_lock:
            return ex.mask_logits(logits, class_bitmask)

    def finish_row(self, engine_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32]) -> None:
        """Engine-mask row -> token-mask row (expansion, or a copy with padding cleared)."""
        if self.expander is not None:
            with self.expander_lock:
                self.expander.expand_row(engine_row, out_row)
            return
        np.copyto(out_row, engine_row[: self.token_words])
        self.clear_padding(out_row[None, :])

    def clear_padding(self, rows: npt.NDArray[np.int32]) -> None:
        """Clear the bits past ``logit_width`` in the last word of each token-mask row."""
        if self._pad_mask is not None:
            rows[:, -1] &= self._pad_mask

    # -- batches ------------------------------------------------------------------------------
    @abstractmethod
    def _batch_engine_fill(
        self, matchers: Sequence[EngineMatcher], engine_bitmask: npt.NDArray[np.int32]
    ) -> None:
        """Fill rows ``0..len(matchers)-1`` of an engine-width bitmask, all at once."""

    def _check_matchers(self, matchers: Sequence[EngineMatcher]) -> None:
        """Every entry is a matcher made by this compiled grammar."""
        for j, m in enumerate(matchers):
            if getattr(m, "compiled", None) is not self or not isinstance(m, EngineMatcher):
                what = "None" if m is None else f"a matcher of another compiled grammar ({type(m).__name__})"
                raise EngineError(f"entry {j} of the batch is {what}, not a matcher of this grammar")

    def _batch_rows(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], words: int, what: str,
        indices: Iterable[object] | None,
    ) -> list[int]:  # fmt: skip
        """Validate a whole batch call before anything is filled; the target row of each matcher."""
        if arr.shape[1] != words:
            raise EngineError(f"{what} must have {words} int32 words per row, got {arr.shape[1]}")
        n = arr.shape[0]
        rows = list(range(len(matchers))) if indices is None else [check_row_index(i, n) for i in indices]
        if len(rows) != len(matchers):
            raise EngineError(f"{len(rows)} indices given for {len(matchers)} matchers")
        if len(set(rows)) != len(rows):
            raise BatchIndexError(f"a row is given twice in the batch indices {rows}")
        self._check_matchers(matchers)
        return rows

    def _run_batch(
        self,
        matchers: Sequence[EngineMatcher],
        bitmask: Any,
        words: int,
        what: str,
        indices: Iterable[object] | None,
        fill: Callable[[Sequence[EngineMatcher], npt.NDArray[np.int32], list[int], list[int]], None],
    ) -> None:
        """Validate a batch, then ``fill`` it (under :attr:`expander_lock`): optimistically,
        without termination checks, when the engine raises on a terminated matcher, and
        redone with the checks (terminated rows zeroed) if it does."""
        arr = as_int32_rows(bitmask, what)
        rows = self._batch_rows(matchers, arr, words, what, indices)
        with self.expander_lock:
            if bool(matchers) and all(m.FILL_RAISES_WHEN_TERMINATED for m in matchers):
                try:
                    fill(matchers, arr, rows, list(range(len(matchers))))
                    return
                except RuntimeError:
                    pass  # a terminated matcher: redo with the checks (rows are rewritten)
            live: list[int] = []
            for j, m in enumerate(matchers):
                if m.is_terminated():
                    arr[rows[j]] = 0
                else:
                    live.append(j)
            fill(matchers, arr, rows, live)

    def _scratch_rows(self, n: int) -> npt.NDArray[np.int32]:
        """``n`` rows of engine-width scratch (kept between calls; under the lock)."""
        if self._batch_scratch.shape[0] < n:
            self._batch_scratch = np.zeros((n, self.engine_words), dtype=np.int32)
        return self._batch_scratch[:n]

    def fill_next_token_bitmask_batch(
        self, matchers: Sequence[EngineMatcher], bitmask: Any, indices: Sequence[int] | None = None
    ) -> None:
        """Fill many matchers' full-vocabulary masks at once (the engine's batch API + expansion).

        Parameters
        ----------
        matchers : sequence of EngineMatcher
            Matchers made by this compiled grammar.
        bitmask : numpy.ndarray or torch.Tensor
            Writable int32 ``(batch, ceil(logit_width / 32))`` on the CPU.
        indices : sequence of int, optional
            Rows of ``bitmask`` to fill, one per matcher, all different (default ``0..len-1``).

        Raises
        ------
        EngineError
            On a bad buffer, a matcher of another grammar (or ``None``), or as many indices
            as matchers not given; nothing is filled then.
        BatchIndexError
            On an index that is not an integer row of ``bitmask``, or a repeated one.

        Notes
        -----
        One engine batch fill over the live matchers (rows of terminated matchers are
        zeroed) and one batch expansion, under :attr:`expander_lock`.
        """
        self._run_batch(matchers, bitmask, self.token_words, "token bitmask", indices, self._token_batch)

    def _token_batch(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], rows: list[int], live: list[int]
    ) -> None:
        n = len(live)
        if n == 0:
            return
        if self.direct_fill and n == len(matchers) and rows == list(range(n)):
            self._batch_engine_fill(matchers, arr[:n])
            self.clear_padding(arr[:n])
            return
        scratch = self._scratch_rows(n)
        self._batch_engine_fill([matchers[j] for j in live], scratch)
        if self.expander is not None:
            self.expander.expand(scratch, arr, indices=[rows[j] for j in live])
            return
        for src, j in enumerate(live):
            self.finish_row(scratch[src], arr[rows[j]])

    def fill_next_class_bitmask_batch(
        self, matchers: Sequence[EngineMatcher], class_bitmask: Any, indices: Sequence[int] | None = None
    ) -> None:
        """Fill many matchers' engine (class) masks at once; no expansion.

        Parameters
        ----------
        matchers : sequence of EngineMatcher
            Matchers made by this compiled grammar.
        class_bitmask : numpy.ndarray or torch.Tensor
            Writable int32 ``(batch, engine_words)`` on the CPU; rows of terminated
            matchers are zeroed.  Pair it with :meth:`mask_logits` to expand on the
            logits' device.
        indices : sequence of int, optional
            As for :meth:`fill_next_token_bitmask_batch`.

        Raises
        ------
        EngineError, BatchIndexError
            As for :meth:`fill_next_token_bitmask_batch`.
        """
        self._run_batch(
            matchers, class_bitmask, self.engine_words, "class bitmask", indices, self._class_batch
        )

    def _class_batch(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], rows: list[int], live: list[int]
    ) -> None:
        if not live:
            return
        if live == list(range(len(matchers))) and rows == live:
            self._batch_engine_fill(matchers, arr[: len(matchers)])
            return
        scratch = self._scratch_rows(len(live))
        self._batch_engine_fill([matchers[j] for j in live], scratch)
        for src, j in enumerate(live):
            arr[rows[j]] = scratch[src]

    def accept_token_batch(self, matchers: Sequence[EngineMatcher], token_ids: Sequence[int]) -> list[bool]:
        """Advance each matcher by its token; the whole batch is checked before any moves.

        Parameters
        ----------
        matchers : sequence of EngineMatcher
            Matchers made by this compiled grammar.
        token_ids : sequence of int
            One real token id per matcher.

        Returns
        -------
        list of bool
            Per matcher, whether its token was accepted (a refused token leaves it unchanged).

        Raises
        ------
        EngineError
            On a matcher of another grammar (or ``None``), or as many tokens as matchers
            not given.
        TokenIdError
            On a token id outside the vocabulary; no matcher has moved then.
        """
        if len(matchers) != len(token_ids):
            raise EngineError(f"{len(matchers)} matchers but {len(token_ids)} tokens")
        self._check_matchers(matchers)
        engine_ids = [self.engine_id(t) for t in token_ids]
        return [m._accept_engine_id(e) for m, e in zip(matchers, engine_ids, strict=True)]
