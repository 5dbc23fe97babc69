"""The compiled C kernel (``_cexpand.c``) behind the kernel protocol, and its loader.

The C kernel (built by the normal compiled install) precomputes one full-vocabulary token
row for each of the largest classes, chosen by its cost model within the memory budget,
and keeps the other classes' tokens listed.  Per row it chooses the cheapest of five plans
(see the comment at the top of ``_cexpand.c`` and :mod:`~formalgram_cfgzip.expand.plans`):
a plain gather; the dense classes' rows combined 32 bytes at a time (OR of the allowed
ones, or their union AND-NOT the disallowed ones) plus a gather, a scatter of the allowed
or a clear of the disallowed tail tokens; or a patch of the nearest of the most recently
used cached rows (the rows of the differing dense classes XOR-ed, the differing tail
classes' tokens flipped).  With ``adapt`` it times the rows whose plan it chooses and
scales each plan's modelled cost by its measured / modelled ratio, since the engine's work
between two rows of a decoding loop can evict the kernel's rows and lists.  Its LRU row
cache is an open-addressing table keyed by the class row (bits past ``num_classes``
ignored).

This module translates the expander's options into the kernel's arguments, its plan codes
into :mod:`~formalgram_cfgzip.expand.plans` names and its index errors into
:class:`~formalgram_cfgzip.errors.BatchIndexError`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import BatchIndexError
from formalgram_cfgzip.expand._numpy_kernel import mask_row
from formalgram_cfgzip.expand.kernel import KernelInfo, RowWriter
from formalgram_cfgzip.expand.plans import C_FORCED, C_PLAN_NAMES, Strategy

__all__ = ["CKernel", "load_c_module"]


def load_c_module() -> ModuleType | None:
    """The compiled kernel module :mod:`formalgram_cfgzip.expand._cexpand`, or ``None``
    when it is not built (the pure-Python build) or disabled by ``FORMALGRAM_NO_CEXPAND=1``.

    Returns
    -------
    module or None
    """
    if os.environ.get("FORMALGRAM_NO_CEXPAND", "") not in ("", "0"):
        return None
    try:
        from formalgram_cfgzip.expand import _cexpand
    except ImportError:
        return None
    return _cexpand


class CKernel:
    """The C kernel as an :class:`~formalgram_cfgzip.expand.kernel.ExpansionKernel`.

    Parameters
    ----------
    module : module
        :func:`load_c_module`'s module.
    token_class : numpy.ndarray
        int64 class id per logit index (checked; negative: never allowed).
    num_classes : int
        Number of classes.
    memory_budget, max_dense, dense :
        The limits of :class:`~formalgram_cfgzip.expand.MaskExpander` on the precomputed
        rows: bytes, at most ``max_dense`` classes (``None``: no bound), exactly the
        ``dense`` largest classes (``None``: chosen by the cost model).
    cache_rows : int
        Capacity of the row cache.
    delta : bool or None
        Patch the most recently cached row on a miss: by cost (``None``), always, never.
    adapt : bool
        Correct the cost model by timing the rows whose plan the kernel chooses.
    cache_admission : {"costly", "always"}
        Which misses go into the row cache (see :class:`~formalgram_cfgzip.expand.MaskExpander`).
    """

    name = "c"

    def __init__(
        self,
        module: ModuleType,
        token_class: npt.NDArray[np.int64],
        num_classes: int,
        *,
        memory_budget: int,
        max_dense: int | None,
        dense: int | None,
        cache_rows: int,
        delta: bool | None,
        adapt: bool,
        cache_admission: Literal["costly", "always"],
    ) -> None:
        rows = -1 if dense is None else max(0, dense)
        max_rows = -1 if max_dense is None else max(0, max_dense)
        delta_mode = 1 if delta is None else 2 if delta else 0
        self.num_classes = num_classes
        self.last_plan = ""
        #: the compiled ``Kernel`` (its numbered plans can be forced: tests and benchmarks)
        self.raw: Any = module.Kernel(
            token_class.astype(np.int32),
            num_classes,
            memory_budget,
            rows,
            cache_rows,
            delta_mode,
            adapt,
            max_rows,
            cache_admission == "always",
        )
        self._apply_bitmask: Any = module.apply_bitmask

    def info(self) -> KernelInfo:
        """Sizes of the precomputed rows (no subset tables) and the tail: the dense classes are
        the large ones, combined by their rows in every plan."""
        info = self.raw.info()
        return KernelInfo(
            0, int(info["large"]), int(info["small_tokens"]), int(info["sets"]), int(info["pinned"])
        )

    def cache_stats(self) -> dict[str, int]:
        """The row cache's counters."""
        return {k: int(v) for k, v in self.raw.cache_info().items()}

    def clear_cache(self) -> None:
        """Drop every cached row and reset the counters."""
        self.raw.clear_cache()

    def keep_sets(
        self, set_start: npt.NDArray[np.int32], set_class: npt.NDArray[np.int32], max_sets: int, min_ns: float
    ) -> int:
        """The kernel's ``keep_sets`` (see the protocol)."""
        return int(self.raw.keep_sets(set_start, set_class, max_sets, min_ns))

    def pin_rows(self, class_rows: npt.NDArray[np.int32], max_rows: int, min_ns: float) -> int:
        """The kernel's ``pin_rows`` (see the protocol)."""
        return int(self.raw.pin_rows(class_rows, max_rows, min_ns))

    def expand_rows(
        self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], indices: Sequence[int] | None
    ) -> None:
        """Every class row into its output row, in one call (the kernel checks the rows;
        its ``IndexError`` becomes a ``BatchIndexError``)."""
        index = None if indices is None else np.asarray(indices, dtype=np.int64)
        try:
            plan = self.raw.expand_rows(class_rows, out, index)
        except IndexError as exc:
            raise BatchIndexError(str(exc)) from None
        self.last_plan = C_PLAN_NAMES[plan]

    def expand_row(
        self, class_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32], strategy: Strategy
    ) -> None:
        """One row: ``"auto"`` through the row cache, another strategy forced."""
        if strategy == "auto":
            plan = self.raw.expand_rows(class_row, out_row)
        else:
            plan = self.raw.expand(class_row, out_row, None, None, C_FORCED[strategy])
        self.last_plan = C_PLAN_NAMES[plan]

    def expand_at(self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], index: int) -> None:
        """Row 0 of ``class_rows`` into row ``index`` of ``out`` (one call into C)."""
        try:
            plan = self.raw.expand_rows(class_rows, out, index)
        except IndexError as exc:
            raise BatchIndexError(str(exc)) from None
        self.last_plan = C_PLAN_NAMES[plan]

    def row_writer(self) -> RowWriter:
        """The compiled ``Kernel.expand_rows`` itself: no Python frame in between (it does
        not update :attr:`last_plan`; an index out of range raises ``IndexError``)."""
        writer: RowWriter = self.raw.expand_rows
        return writer

    def mask_row(self, row: npt.NDArray[np.int32], values: npt.NDArray[Any], pattern: int) -> None:
        """In C for contiguous values; strided ones through the numpy
        :func:`~formalgram_cfgzip.expand._numpy_kernel.mask_row`."""
        if values.flags.c_contiguous:
            self._apply_bitmask(row, values, values.dtype.itemsize, pattern)
        else:
            mask_row(row, values, pattern)
