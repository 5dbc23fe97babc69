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
    import torch

    from formalgram_cfgzip.classes import TokenClasses

__all__ = [
    "MaskExpander",
    "TorchMaskExpander",
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
        order = np.argsort(-sizes, kind="stable")
        # Choose K (number of dense classes) by the cost model's worst case.
        row_bytes = self.num_words * 4
        k_cap = min(num_classes, max(0, memory_budget // max(row_bytes, 1)))
        if max_dense is not None:
            k_cap = min(k_cap, max(0, max_dense))
        cum = np.concatenate([[0], np.cumsum(sizes[order][:k_cap])])
        n_valid = int(valid.sum())
        best_k, best_cost = 0, math.inf
        for k in range(k_cap + 1):
            small = n_valid - int(cum[k])
            cost = self._split_cost(k // 2 + 1 if k else 0, small)
            if cost < best_cost:
                best_k, best_cost = k, cost
        self._gather_cost = _NS_PER_GATHER_TOKEN * padded_bits + 2 * _NS_PER_CALL
        if best_cost >= self._gather_cost:
            best_k = 0
        dense = order[:best_k]
        self._dense_classes = dense.astype(np.intp)
        self._is_dense = np.zeros(num_classes + 1, dtype=bool)
        self._is_dense[dense] = True
        in_dense = np.zeros(padded_bits, dtype=bool)
        in_dense[:width] = valid & self._is_dense[np.where(valid, tc, num_classes)]
        self._dense_bits = np.zeros((best_k, self.num_words), dtype=np.uint32)
        if best_k:
            rank = np.full(num_classes + 1, -1, dtype=np.intp)
            rank[dense] = np.arange(best_k)
            ids = np.flatnonzero(in_dense)
            bools = np.zeros((best_k, padded_bits), dtype=np.uint8)
            bools[rank[full[ids]], ids] = 1
            self._dense_bits = np.packbits(bools, axis=1, bitorder="little").view(np.uint32).copy()
        self._dense_union = np.zeros(self.num_words, dtype=np.uint32)
        if best_k:
            np.bitwise_or.reduce(self._dense_bits, axis=0, out=self._dense_union)
        small_mask = ~in_dense & (full != self._zero_slot)
        self._small_ids = np.flatnonzero(small_mask).astype(np.intp)
        self._small_class = full[self._small_ids].astype(np.intp)
        self._small_classes = np.flatnonzero(~self._is_dense[:num_classes]).astype(np.intp)
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

    def _split_cost(self, dense_ops: int, small: int) -> float:
        return (
            dense_ops * (self.num_words * _NS_PER_WORD_OR + _NS_PER_CALL)
            + small * _NS_PER_SMALL_TOKEN
            + (3 * _NS_PER_CALL + self.num_words * 8 * _NS_PER_WORD_OR if small else 0.0)
        )

    @property
    def num_dense(self) -> int:
        """Number of classes with a precomputed bitmask."""
        return int(self._dense_classes.shape[0])

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
        dense = self._dense_classes
        k = dense.shape[0]
        allowed_dense = table[dense]
        a = int(np.count_nonzero(allowed_dense))
        small_any = bool(table[self._small_classes].any()) if self._small_ids.shape[0] else False
        if strategy == "auto":
            split = self._split_cost(min(a, k - a + 1), self._small_ids.shape[0] if small_any else 0)
            strategy = "gather" if split > self._gather_cost else "split"
        self.last_strategy = strategy
        if strategy == "gather":
            buf = self._byte_buf
            np.take(table, self._gather_index, out=buf)
            out[:] = np.packbits(buf, bitorder="little").view(np.uint32)
            return
        # split path: dense classes by vector OR (or complement), small ones by gather.
        bits = self._dense_bits
        if a == 0:
            out[:] = 0
        elif 2 * a <= k:
            ranks = np.flatnonzero(allowed_dense)
            np.copyto(out, bits[ranks[0]])
            for r in ranks[1:]:
                np.bitwise_or(out, bits[r], out=out)
        else:
            ranks = np.flatnonzero(allowed_dense == 0)
            if ranks.shape[0] == 0:
                np.copyto(out, self._dense_union)
            else:
                tmp = self._tmp_words
                np.copyto(tmp, bits[ranks[0]])
                for r in ranks[1:]:
                    np.bitwise_or(tmp, bits[r], out=tmp)
                np.invert(tmp, out=tmp)
                np.bitwise_and(self._dense_union, tmp, out=out)
        if small_any:
            vals = self._small_vals
            np.take(table, self._small_class, out=vals)
            buf = self._small_buf
            buf[self._small_ids] = vals
            np.bitwise_or(out, np.packbits(buf, bitorder="little").view(np.uint32), out=out)

    # -- batches ------------------------------------------------------------------------
    def _check_class_bitmask(self, class_bitmask: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        cm = np.asarray(class_bitmask)
        if cm.ndim == 1:
            cm = cm[None, :]
        if cm.ndim != 2 or cm.dtype != np.int32 or cm.shape[1] != self.class_words:
            raise ValueError(
                f"class bitmask must be int32 of shape (batch, {self.class_words}), "
                f"got {cm.dtype} {cm.shape}"
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

    def mask_logits(self, logits: npt.NDArray[np.floating[Any]], class_bitmask: npt.NDArray[np.int32]) -> None:
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
