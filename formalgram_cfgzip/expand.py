"""Class mask -> full-vocabulary mask expansion (CPU with numpy, CPU/CUDA with torch).

A grammar engine run over one representative per token class produces a *class
bitmask*: bit ``k`` set when class ``k`` may come next.  Decoding needs the
*token bitmask* over every logit index, in XGrammar's layout:

* int32 words, shape ``(batch, ceil(logit_width / 32))``;
* bit ``j`` (least significant first) of word ``w`` of a row is token ``32 * w + j``;
* bits past ``logit_width`` in the last word are zero.

so that ``xgrammar.apply_token_bitmask_inplace`` and llguidance's helpers work unchanged.
Token ``i`` is allowed exactly when its class ``token_class[i]`` is allowed.

Algorithm (chosen by measurement, see ``bench/expand_bench.py``).  A per-token gather
(``allowed[token_class]`` then packing bits) costs about 0.6 ns per token in numpy, about
80 µs for 128k tokens: too slow on its own.  Classes are very uneven in size, so the
expander splits them:

* the ``K`` largest classes get a precomputed full-width bitmask each; their part of the
  mask is the OR of the allowed ones' bitmasks, or, when more than half are allowed, the
  precomputed union with the OR of the *disallowed* ones cleared (cost ~ min(a, K - a)
  vector ORs of ``logit_width / 32`` words);
* the remaining "small-class" tokens ``S`` are gathered one by one into a persistent byte
  buffer that is zero everywhere else, which is packed to bits (cost ~ ``|S|`` + a pack);

and, per row, the cheaper of this split path and the plain gather is taken, by a cost
model whose constants were measured on the development machine.  ``K`` is chosen at
construction to minimise the model's worst case within a memory budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses

__all__ = [
    "MaskExpander",
    "TorchMaskExpander",
    "apply_token_bitmask_inplace",
    "bitmask_shape",
    "expand_reference",
]

Strategy = Literal["auto", "split", "gather"]

# Cost model constants (nanoseconds), measured with bench/expand_bench.py on a 2-core x86 VM.
_NS_PER_WORD_OR = 0.30  # one uint32 word of a vector OR
_NS_PER_CALL = 1500.0  # fixed overhead of one numpy call on a full row
_NS_PER_GATHER_TOKEN = 0.65  # np.take of one token (intp index) into a byte buffer
_NS_PER_SMALL_TOKEN = 1.6  # np.take + scatter of one small-class token


def bitmask_shape(batch: int, width: int) -> tuple[int, int]:
    """XGrammar's token-bitmask shape ``(batch, ceil(width / 32))``.

    Parameters
    ----------
    batch : int
        Number of rows.
    width : int
        Number of bit positions (logit width or number of classes).

    Returns
    -------
    tuple of int
        ``(batch, (width + 31) // 32)``.

    Example
    -------
    >>> bitmask_shape(2, 33)
    (2, 2)
    """
    return (batch, (width + 31) // 32)


def expand_reference(
    token_class: npt.NDArray[np.integer[Any]], class_bitmask: npt.NDArray[np.int32], logit_width: int
) -> npt.NDArray[np.int32]:
    """Slow, obviously correct expansion (bit by bit in Python); the test oracle.

    Parameters
    ----------
    token_class : numpy.ndarray
        Class id of every logit index; ids ``< 0`` mean "never allowed".
    class_bitmask : numpy.ndarray
        int32 array ``(batch, ceil(num_classes / 32))``.
    logit_width : int
        Number of logits.

    Returns
    -------
    numpy.ndarray
        int32 array ``(batch, ceil(logit_width / 32))``.

    Complexity
    ----------
    O(batch * logit_width) Python operations.
    """
    batch = class_bitmask.shape[0]
    words = np.zeros((batch, (logit_width + 31) // 32), dtype=np.uint32)
    cm = class_bitmask.view(np.uint32)
    for b in range(batch):
        for i in range(logit_width):
            c = int(token_class[i])
            if c >= 0 and (int(cm[b, c >> 5]) >> (c & 31)) & 1:
                words[b, i >> 5] |= np.uint32(1 << (i & 31))
    return words.view(np.int32)


def _check_token_class(token_class: npt.ArrayLike, num_classes: int) -> npt.NDArray[np.int64]:
    tc = np.asarray(token_class)
    if tc.ndim != 1 or tc.shape[0] == 0:
        raise ValueError(f"token_class must be a non-empty 1-D array, got shape {tc.shape}")
    if not np.issubdtype(tc.dtype, np.integer):
        raise ValueError(f"token_class must be integers, got dtype {tc.dtype}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    tc64 = tc.astype(np.int64)
    if int(tc64.max()) >= num_classes:
        raise ValueError(f"token_class holds class {int(tc64.max())} >= num_classes={num_classes}")
    return tc64


class MaskExpander:
    """Expand class bitmasks to full-vocabulary token bitmasks on the CPU (numpy).

    Parameters
    ----------
    token_class : array of int
        Class id of every logit index (length ``logit_width``); a negative id marks a
        logit index that is never allowed (use it for padding ids, or map them to the
        invalid class).
    num_classes : int
        Number of classes (width of the class bitmask).
    memory_budget : int, keyword-only
        Bytes allowed for the precomputed per-class bitmasks (default 32 MiB).
    max_dense : int or None, keyword-only
        Upper bound on the number of classes given a precomputed bitmask (``None``: chosen
        by the cost model; ``0`` forces the plain gather).

    Raises
    ------
    ValueError
        If ``token_class`` is not a non-empty 1-D integer array or holds ids
        ``>= num_classes``.

    Complexity
    ----------
    Construction O(logit_width + K * logit_width / 32); see the module docstring for a step.

    Example
    -------
    >>> import numpy as np
    >>> ex = MaskExpander(np.array([0, 1, 1, 2, -1], dtype=np.int32), 3)
    >>> ex.expand(np.array([[0b110]], dtype=np.int32)).tolist()
    [[14]]
    """

    def __init__(
        self,
        token_class: npt.ArrayLike,
        num_classes: int,
        *,
        memory_budget: int = 32 << 20,
        max_dense: int | None = None,
    ) -> None:
        tc = _check_token_class(token_class, num_classes)
        width = int(tc.shape[0])
        self.logit_width = width
        self.num_classes = num_classes
        self.num_words = (width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        padded_bits = self.num_words * 32
        # Slot `num_classes` of the per-step class table is always 0: holes, padding ids
        # and the pad bits of the last word all point to it.
        self._zero_slot = num_classes
        full = np.full(padded_bits, self._zero_slot, dtype=np.intp)
        valid = tc >= 0
        full[:width][valid] = tc[valid]
        self._gather_index = full
        sizes = np.bincount(tc[valid], minlength=num_classes)
        order = np.argsort(-sizes, kind="stable").astype(np.intp)
        self._order = order
        row_bytes = self.num_words * 4
        stored = min(num_classes, max(0, memory_budget // max(row_bytes, 1)))
        if max_dense is not None:
            stored = min(stored, max(0, max_dense))
        # K0 ("big" classes, always handled by vector ORs) minimises the cost of a step in
        # which half of the big classes and some small class are allowed.
        cum = np.concatenate([[0], np.cumsum(sizes[order][:stored])])
        n_valid = int(valid.sum())
        best_k, best_cost = 0, math.inf
        for k in range(stored + 1):
            cost = self._ops_cost(k // 2 + 1 if k else 0) + self._small_cost(n_valid - int(cum[k]))
            if cost < best_cost:
                best_k, best_cost = k, cost
        self._gather_cost = _NS_PER_GATHER_TOKEN * padded_bits + 2 * _NS_PER_CALL
        if best_cost >= self._gather_cost and stored < num_classes:
            best_k, stored = 0, 0
        self._k0 = best_k
        self._stored = stored
        rank = np.full(num_classes + 1, num_classes, dtype=np.intp)
        rank[order] = np.arange(num_classes)
        token_rank = rank[full]  # zero slot -> rank num_classes
        ids = np.flatnonzero(token_rank < stored)
        self._bits = np.zeros((stored, self.num_words), dtype=np.uint32)
        np.bitwise_or.at(
            self._bits, (token_rank[ids], ids >> 5), np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
        )
        self._union_big = np.zeros(self.num_words, dtype=np.uint32)
        np.bitwise_or.reduce(self._bits[:best_k], axis=0, out=self._union_big)
        self._union_small = np.zeros(self.num_words, dtype=np.uint32)
        if stored == num_classes:
            np.bitwise_or.reduce(self._bits[best_k:], axis=0, out=self._union_small)
        small_mask = (token_rank >= best_k) & (token_rank < num_classes)
        self._small_ids = np.flatnonzero(small_mask).astype(np.intp)
        self._small_class = full[self._small_ids].astype(np.intp)
        # Per-step scratch (reused; a matcher fills rows one at a time).
        self._table = np.zeros(self.class_words * 32 + 1, dtype=np.uint8)
        self._byte_buf = np.zeros(padded_bits, dtype=np.uint8)
        self._small_buf = np.zeros(padded_bits, dtype=np.uint8)
        self._small_vals = np.zeros(self._small_ids.shape[0], dtype=np.uint8)
        self._tmp_words = np.zeros(self.num_words, dtype=np.uint32)
        self.last_strategy = ""

    # -- construction helpers -----------------------------------------------------------
    @classmethod
    def from_classes(cls, classes: TokenClasses, **kwargs: Any) -> MaskExpander:
        """Expander for a :class:`~formalgram_cfgzip.classes.TokenClasses` (all logit indices)."""
        return cls(classes.token_class, classes.num_classes, **kwargs)

    def _ops_cost(self, n_rows: int) -> float:
        return n_rows * (self.num_words * _NS_PER_WORD_OR + _NS_PER_CALL)

    def _small_cost(self, n_tokens: int) -> float:
        if n_tokens == 0:
            return 0.0
        return n_tokens * _NS_PER_SMALL_TOKEN + 3 * _NS_PER_CALL + self.num_words * 8 * _NS_PER_WORD_OR

    @property
    def num_dense(self) -> int:
        """Number of "big" classes, always expanded by vector ORs."""
        return self._k0

    @property
    def num_stored(self) -> int:
        """Number of classes with a precomputed bitmask (``num_classes`` when all fit)."""
        return self._stored

    @property
    def num_small_tokens(self) -> int:
        """Number of logit indices handled by the per-token gather of the split path."""
        return int(self._small_ids.shape[0])

    # -- one row ------------------------------------------------------------------------
    def _load_table(self, class_row: npt.NDArray[np.int32]) -> None:
        bits = np.unpackbits(class_row.view(np.uint8), bitorder="little")
        t = self._table
        t[: bits.shape[0]] = bits
        t[self.num_classes :] = 0

    def expand_row(
        self, class_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32], strategy: Strategy = "auto"
    ) -> None:
        """Expand one class-bitmask row into one token-bitmask row, in place.

        Parameters
        ----------
        class_row : numpy.ndarray
            int32, shape ``(ceil(num_classes / 32),)``.
        out_row : numpy.ndarray
            int32, shape ``(ceil(logit_width / 32),)``, C-contiguous; overwritten.
        strategy : {"auto", "split", "gather"}
            Force one path (tests and benchmarks); ``"auto"`` picks by the cost model.
        """
        self._load_table(class_row)
        table = self._table
        out = out_row.view(np.uint32)
        k0, stored, c = self._k0, self._stored, self.num_classes
        tr = table[self._order]
        a_big = int(np.count_nonzero(tr[:k0]))
        a_small = int(np.count_nonzero(tr[k0:]))
        n_small = c - k0
        big_rows = min(a_big, k0 - a_big + 1) if a_big else 0
        small_plan = "none"
        small_cost = 0.0
        if a_small:
            small_plan, small_cost = "gather", self._small_cost(self._small_ids.shape[0])
            if stored == c:
                for plan, rows in (("or", a_small), ("complement", n_small - a_small + 1)):
                    cost = self._ops_cost(rows)
                    if cost < small_cost:
                        small_plan, small_cost = plan, cost
        if strategy == "auto":
            split = self._ops_cost(big_rows) + small_cost
            strategy = "gather" if split > self._gather_cost else "split"
        self.last_strategy = strategy if strategy == "gather" else f"split/{small_plan}"
        if strategy == "gather":
            buf = self._byte_buf
            np.take(table, self._gather_index, out=buf)
            out[:] = np.packbits(buf, bitorder="little").view(np.uint32)
            return
        bits = self._bits
        tr_bool = tr.astype(bool)
        # big classes
        if a_big == 0:
            out[:] = 0
        elif 2 * a_big <= k0:
            self._or_rows(np.flatnonzero(tr_bool[:k0]), out)
        else:
            ranks = np.flatnonzero(~tr_bool[:k0])
            if ranks.shape[0] == 0:
                np.copyto(out, self._union_big)
            else:
                tmp = self._tmp_words
                self._or_rows(ranks, tmp)
                np.invert(tmp, out=tmp)
                np.bitwise_and(self._union_big, tmp, out=out)
        # small classes
        if small_plan == "or":
            ranks = np.flatnonzero(tr_bool[k0:]) + k0
            for r in ranks:
                np.bitwise_or(out, bits[r], out=out)
        elif small_plan == "complement":
            tmp = self._tmp_words
            ranks = np.flatnonzero(~tr_bool[k0:]) + k0
            if ranks.shape[0] == 0:
                np.bitwise_or(out, self._union_small, out=out)
            else:
                self._or_rows(ranks, tmp)
                np.invert(tmp, out=tmp)
                np.bitwise_and(tmp, self._union_small, out=tmp)
                np.bitwise_or(out, tmp, out=out)
        elif small_plan == "gather":
            vals = self._small_vals
            np.take(table, self._small_class, out=vals)
            buf = self._small_buf
            buf[self._small_ids] = vals
            np.bitwise_or(out, np.packbits(buf, bitorder="little").view(np.uint32), out=out)

    def _or_rows(self, ranks: npt.NDArray[np.intp], out: npt.NDArray[np.uint32]) -> None:
        bits = self._bits
        np.copyto(out, bits[ranks[0]])
        for r in ranks[1:]:
            np.bitwise_or(out, bits[r], out=out)

    # -- batches ------------------------------------------------------------------------
    def _check_class_bitmask(self, class_bitmask: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        cm = np.asarray(class_bitmask)
        if cm.ndim == 1:
            cm = cm[None, :]
        if cm.ndim != 2 or cm.dtype != np.int32 or cm.shape[1] != self.class_words:
            raise ValueError(
                f"class bitmask must be int32 of shape (batch, {self.class_words}), got {cm.dtype} {cm.shape}"
            )
        return np.ascontiguousarray(cm)

    def expand(
        self,
        class_bitmask: npt.NDArray[np.int32],
        out: npt.NDArray[np.int32] | None = None,
        *,
        indices: Sequence[int] | None = None,
        strategy: Strategy = "auto",
    ) -> npt.NDArray[np.int32]:
        """Expand a batch of class bitmasks to token bitmasks.

        Parameters
        ----------
        class_bitmask : numpy.ndarray
            int32 ``(batch, ceil(num_classes / 32))`` (a 1-D row is taken as batch 1).
        out : numpy.ndarray or None
            int32 ``(batch', ceil(logit_width / 32))`` C-contiguous, written in place;
            allocated when ``None``.
        indices : sequence of int or None, keyword-only
            Rows of ``out`` to fill, one per class-bitmask row (default ``0..batch-1``).
        strategy : {"auto", "split", "gather"}, keyword-only
            Force one path (tests and benchmarks).

        Returns
        -------
        numpy.ndarray
            ``out``.

        Raises
        ------
        ValueError
            On a dtype or shape mismatch, or an index out of range.

        Complexity
        ----------
        Per row: min(split cost, gather cost); see the module docstring.
        """
        cm = self._check_class_bitmask(class_bitmask)
        batch = cm.shape[0]
        if out is None:
            out = np.zeros((batch, self.num_words), dtype=np.int32)
        if out.ndim != 2 or out.dtype != np.int32 or out.shape[1] != self.num_words:
            raise ValueError(
                f"token bitmask must be int32 of shape (batch, {self.num_words}), got {out.dtype} {out.shape}"
            )
        if not out.flags["C_CONTIGUOUS"]:
            raise ValueError("token bitmask must be C-contiguous")
        rows = range(batch) if indices is None else indices
        if len(rows) != batch:
            raise ValueError(f"{len(rows)} indices given for {batch} class-bitmask rows")
        for src, dst in enumerate(rows):
            if not 0 <= dst < out.shape[0]:
                raise IndexError(f"batch index {dst} out of range for a bitmask of {out.shape[0]} rows")
            self.expand_row(cm[src], out[dst], strategy)
        return out

    def mask_logits(
        self, logits: npt.NDArray[np.floating[Any]], class_bitmask: npt.NDArray[np.int32]
    ) -> None:
        """Set the logits of disallowed tokens to ``-inf`` in place (the direct logits path).

        Parameters
        ----------
        logits : numpy.ndarray
            float ``(batch, n)`` with ``n >= logit_width``; columns past ``logit_width`` are
            set to ``-inf`` as well (padding is never allowed).
        class_bitmask : numpy.ndarray
            int32 ``(batch, ceil(num_classes / 32))``.

        Raises
        ------
        ValueError
            On a shape mismatch.
        """
        cm = self._check_class_bitmask(class_bitmask)
        lg = logits if logits.ndim == 2 else logits[None, :]
        if lg.shape[0] != cm.shape[0] or lg.shape[1] < self.logit_width:
            raise ValueError(f"logits of shape {logits.shape} do not fit a class bitmask of {cm.shape}")
        for b in range(cm.shape[0]):
            self._load_table(cm[b])
            np.take(self._table, self._gather_index, out=self._byte_buf)
            np.putmask(lg[b, : self.logit_width], self._byte_buf[: self.logit_width] == 0, -np.inf)
            lg[b, self.logit_width :] = -np.inf


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("TorchMaskExpander needs PyTorch (pip install torch)") from exc
    return torch


class TorchMaskExpander:
    """Class bitmask -> token bitmask / masked logits with torch tensors, on the CPU or a GPU.

    On the CPU (``backend="auto"``) the numpy :class:`MaskExpander` runs on the tensors'
    memory (no copy).  On CUDA (or with ``backend="torch"``) the expansion is a gather on
    the device: unpack the class bits, ``index_select`` them by token class, pack 32 bits
    per word; buffers are kept per batch size, so a step allocates nothing on the host.

    Parameters
    ----------
    token_class : array of int
        Class id per logit index (negative: never allowed).
    num_classes : int
        Width of the class bitmask.
    device : str or torch.device, keyword-only
        Where the class bitmasks, outputs and logits live.
    backend : {"auto", "numpy", "torch"}, keyword-only
        ``"auto"``: numpy on the CPU, torch elsewhere.

    Raises
    ------
    ValueError
        On a malformed ``token_class`` or a numpy backend on a non-CPU device.

    Example
    -------
    >>> import numpy as np, torch
    >>> ex = TorchMaskExpander(np.array([0, 1, 1, 2]), 3, backend="torch")
    >>> ex.expand(torch.tensor([[0b101]], dtype=torch.int32)).tolist()
    [[9]]
    """

    def __init__(
        self,
        token_class: npt.ArrayLike,
        num_classes: int,
        *,
        device: Any = "cpu",
        backend: Literal["auto", "numpy", "torch"] = "auto",
    ) -> None:
        torch = _torch()
        tc = _check_token_class(token_class, num_classes)
        self.device = torch.device(device)
        self.logit_width = int(tc.shape[0])
        self.num_classes = num_classes
        self.num_words = (self.logit_width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        if backend == "auto":
            backend = "numpy" if self.device.type == "cpu" else "torch"
        if backend == "numpy" and self.device.type != "cpu":
            raise ValueError("the numpy backend runs on the CPU only")
        self.backend = backend
        self._numpy: MaskExpander | None = MaskExpander(tc, num_classes) if backend == "numpy" else None
        zero_slot = self.class_words * 32  # an extra, always-zero column of the class table
        idx = np.full(self.num_words * 32, zero_slot, dtype=np.int64)
        idx[: self.logit_width] = np.where(tc >= 0, tc, zero_slot)
        self._index = torch.from_numpy(idx).to(self.device)
        self._shifts = torch.arange(32, dtype=torch.int32, device=self.device)
        self._buffers: dict[int, tuple[Any, Any, Any]] = {}

    def _buffers_for(self, batch: int) -> tuple[Any, Any, Any]:
        buf = self._buffers.get(batch)
        if buf is None:
            torch = _torch()
            table = torch.zeros((batch, self.class_words * 32 + 1), dtype=torch.int32, device=self.device)
            gathered = torch.empty((batch, self.num_words * 32), dtype=torch.int32, device=self.device)
            packed = torch.empty((batch, self.num_words), dtype=torch.int32, device=self.device)
            buf = (table, gathered, packed)
            self._buffers[batch] = buf
        return buf

    def _gather(self, class_bitmask: Any) -> Any:
        """(batch, num_words * 32) int32 tensor of 0/1 per logit index (torch backend)."""
        torch = _torch()
        batch = int(class_bitmask.shape[0])
        table, gathered, _ = self._buffers_for(batch)
        cw = self.class_words
        bits = table[:, : cw * 32].view(batch, cw, 32)
        torch.bitwise_right_shift(class_bitmask.unsqueeze(-1), self._shifts, out=bits)
        bits.bitwise_and_(1)
        if self.num_classes < cw * 32:
            table[:, self.num_classes : cw * 32] = 0
        torch.index_select(table, 1, self._index, out=gathered)
        return gathered

    def _check(self, class_bitmask: Any) -> Any:
        torch = _torch()
        if not isinstance(class_bitmask, torch.Tensor):
            class_bitmask = torch.as_tensor(np.asarray(class_bitmask), device=self.device)
        if class_bitmask.dim() == 1:
            class_bitmask = class_bitmask.unsqueeze(0)
        if class_bitmask.dtype != torch.int32 or class_bitmask.shape[-1] != self.class_words:
            raise ValueError(
                f"class bitmask must be int32 of shape (batch, {self.class_words}), "
                f"got {class_bitmask.dtype} {tuple(class_bitmask.shape)}"
            )
        if class_bitmask.device != self.device:
            class_bitmask = class_bitmask.to(self.device, non_blocking=True)
        return class_bitmask

    def expand(self, class_bitmask: Any, out: Any = None) -> Any:
        """Token bitmask ``(batch, ceil(logit_width / 32))`` int32 on :attr:`device`.

        Parameters
        ----------
        class_bitmask : torch.Tensor
            int32 ``(batch, ceil(num_classes / 32))`` (moved to the device if needed).
        out : torch.Tensor or None
            Written in place when given.

        Returns
        -------
        torch.Tensor
        """
        torch = _torch()
        cm = self._check(class_bitmask)
        batch = int(cm.shape[0])
        if out is None:
            out = torch.empty((batch, self.num_words), dtype=torch.int32, device=self.device)
        if self._numpy is not None:
            self._numpy.expand(cm.contiguous().numpy(), out.numpy())
            return out
        gathered = self._gather(cm)
        words = gathered.view(batch, self.num_words, 32)
        words.bitwise_left_shift_(self._shifts)
        # the 32 shifted bits are distinct, so their int32 sum is their OR (no carries)
        torch.sum(words, dim=-1, dtype=torch.int32, out=out)
        return out

    def mask_logits(self, logits: Any, class_bitmask: Any) -> Any:
        """Set disallowed logits to ``-inf`` in place (columns past ``logit_width`` too).

        Parameters
        ----------
        logits : torch.Tensor
            float ``(batch, n)`` with ``n >= logit_width``, on :attr:`device`.
        class_bitmask : torch.Tensor
            int32 ``(batch, ceil(num_classes / 32))``.

        Returns
        -------
        torch.Tensor
            ``logits``.
        """
        cm = self._check(class_bitmask)
        if logits.dim() != 2 or logits.shape[0] != cm.shape[0] or logits.shape[1] < self.logit_width:
            raise ValueError(
                f"logits of shape {tuple(logits.shape)} do not fit a class bitmask of {tuple(cm.shape)}"
            )
        w = self.logit_width
        if self._numpy is not None:
            self._numpy.mask_logits(logits.detach().numpy(), cm.contiguous().numpy())
            return logits
        gathered = self._gather(cm)
        logits[:, :w].masked_fill_(gathered[:, :w] == 0, float("-inf"))
        if logits.shape[1] > w:
            logits[:, w:] = float("-inf")
        return logits


def apply_token_bitmask_inplace(logits: Any, bitmask: Any) -> Any:
    """Set logits whose bit is 0 in an XGrammar-layout bitmask to ``-inf`` (torch, any device).

    Columns past ``32 * bitmask.shape[1]`` are set to ``-inf`` as well.  Equivalent to
    ``xgrammar.apply_token_bitmask_inplace`` without the XGrammar dependency.

    Parameters
    ----------
    logits : torch.Tensor
        float ``(batch, n)``.
    bitmask : torch.Tensor
        int32 ``(batch, words)`` on the same device.

    Returns
    -------
    torch.Tensor
        ``logits``.
    """
    torch = _torch()
    if logits.dim() == 1:
        logits = logits.unsqueeze(0)
    if bitmask.dim() == 1:
        bitmask = bitmask.unsqueeze(0)
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).view(bitmask.shape[0], -1)
    n = min(int(logits.shape[1]), int(bits.shape[1]))
    logits[:, :n].masked_fill_(bits[:, :n] == 0, float("-inf"))
    if logits.shape[1] > n:
        logits[:, n:] = float("-inf")
    return logits
