"""The protocol between :class:`~formalgram_cfgzip.expand.MaskExpander` and its CPU kernels.

Two kernels implement it with bit-identical rows: the compiled C kernel
(:mod:`formalgram_cfgzip.expand._c_kernel`) and the numpy kernel
(:mod:`formalgram_cfgzip.expand._numpy_kernel`).  The expander checks every argument
(:mod:`formalgram_cfgzip.expand.layout`) and hands the kernel arrays in shape: int32,
C-contiguous, class rows of ``ceil(num_classes / 32)`` words and token rows of
``ceil(logit_width / 32)`` words.  A kernel checks only the output row indices it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.expand.plans import Strategy

__all__ = ["GROUP_BITS", "ExpansionKernel", "KernelInfo", "RowWriter", "forced_groups", "table_budget"]

#: classes per subset table (a table holds the ``2 ** GROUP_BITS`` unions of their rows)
GROUP_BITS = 8

#: ``writer(class_rows, out, index)``: row 0 of ``class_rows`` into row ``index`` of ``out``
RowWriter = Callable[[npt.NDArray[np.int32], npt.NDArray[np.int32], int], object]


def table_budget(memory_budget: int, max_dense: int | None, num_words: int) -> int:
    """Bytes the numpy kernel may spend on subset tables: ``memory_budget``, and at most the tables
    of ``max_dense`` classes when it is given (rounded down to whole tables).

    Parameters
    ----------
    memory_budget : int
        The expander's table budget in bytes.
    max_dense : int or None
        Upper bound on the classes the tables cover (``None``: no bound).
    num_words : int
        Words of a token row (a table holds 256 rows).

    Returns
    -------
    int
        The budget in bytes.

    Examples
    --------
    >>> table_budget(32 << 20, 20, 4008)  # two tables of 8 classes
    8208384
    """
    if max_dense is None:
        return memory_budget
    table_bytes = (1 << GROUP_BITS) * 4 * num_words
    return min(memory_budget, (max(0, max_dense) // GROUP_BITS) * table_bytes)


def forced_groups(dense: int) -> int:
    """Number of subset tables covering at least the ``dense`` largest classes.

    Examples
    --------
    >>> forced_groups(17)
    3
    """
    return -(-max(0, dense) // GROUP_BITS)


class KernelInfo(NamedTuple):
    """Sizes of a kernel's precomputed structures."""

    #: number of subset tables (numpy kernel: 256 precomputed rows each, 8 dense classes per
    #: table; the C kernel has none)
    groups: int
    #: number of dense classes: covered by the subset tables (numpy) or with a precomputed
    #: row each (C)
    dense_classes: int
    #: number of logit indices outside the dense classes (the tail)
    tail_tokens: int
    #: number of class sets whose token rows are kept (C kernel; the numpy kernel keeps none)
    kept_sets: int = 0
    #: number of class rows whose token rows are pinned (C kernel; the numpy kernel pins none)
    pinned_rows: int = 0


class ExpansionKernel(Protocol):
    """A CPU kernel: class-bitmask rows -> token-bitmask rows, with an LRU row cache.

    The row cache is keyed by the class row and serves ``"auto"`` requests only; forced
    strategies compute the row and leave the cache alone.
    """

    #: ``"c"`` or ``"numpy"``
    name: str

    @property
    def last_plan(self) -> str:
        """Plan of the last row written (a name of :mod:`formalgram_cfgzip.expand.plans`)."""

    def expand_rows(
        self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], indices: Sequence[int] | None
    ) -> None:
        """Row ``i`` of ``class_rows`` into row ``indices[i]`` (default ``i``) of ``out``,
        through the row cache.  ``indices`` has one entry per class row (checked by the
        caller); an entry out of range raises ``BatchIndexError`` before any row is written."""

    def expand_row(
        self, class_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32], strategy: Strategy
    ) -> None:
        """One 1-D class row into one 1-D token row: ``"auto"`` through the row cache,
        another strategy forced (see :mod:`formalgram_cfgzip.expand.plans`)."""

    def expand_at(self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], index: int) -> None:
        """Row 0 of ``class_rows`` into row ``index`` of ``out``, through the row cache."""

    def row_writer(self) -> RowWriter:
        """:meth:`expand_at` as the cheapest callable the kernel has (for a hot loop; it
        need not update :attr:`last_plan`)."""

    def mask_row(self, row: npt.NDArray[np.int32], values: npt.NDArray[Any], pattern: int) -> None:
        """Write ``pattern`` into ``values[i]`` for every ``i < len(values)`` whose bit in
        the token row ``row`` is 0 (``values``: a logits row's bits, 2, 4 or 8 bytes each;
        ``len(values)`` at most the row's bits)."""

    def cache_stats(self) -> dict[str, int]:
        """``hits``, ``misses``, ``evictions``, ``deltas``, ``entries``, ``capacity``."""

    def clear_cache(self) -> None:
        """Drop every cached row and reset the counters."""

    def keep_sets(
        self, set_start: npt.NDArray[np.int32], set_class: npt.NDArray[np.int32], max_sets: int, min_ns: float
    ) -> int:
        """Keep the token rows of the class sets ``set_class[set_start[s] : set_start[s + 1]]``
        (checked by the caller) whose cheapest plan costs at least ``min_ns`` by the cost
        model, the dearest first, at most ``max_sets``, beside the row cache (a miss may be
        patched from one); returns how many were kept (0 where the kernel keeps none)."""

    def pin_rows(self, class_rows: npt.NDArray[np.int32], max_rows: int, min_ns: float) -> int:
        """Keep the token rows of the 2-D ``class_rows`` (checked by the caller) whose
        cheapest plan costs at least ``min_ns`` by the cost model, in their order, each once,
        at most ``max_rows``, beside the row cache (a miss on one of them copies its row);
        returns how many were pinned (0 where the kernel pins none)."""

    def info(self) -> KernelInfo:
        """Sizes of the precomputed structures."""
