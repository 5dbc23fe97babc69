"""Class bitmask -> full-vocabulary token bitmask on the CPU: :class:`MaskExpander`.

A grammar engine run over one representative per token class produces a *class
bitmask*: bit ``k`` set when class ``k`` may come next.  Decoding needs the *token
bitmask* over every logit index, in XGrammar's layout (:mod:`~formalgram_cfgzip.expand.layout`);
token ``i`` is allowed exactly when its class ``token_class[i]`` is allowed.

:class:`MaskExpander` checks the arguments and hands the rows to one of two kernels with
the same protocol (:class:`~formalgram_cfgzip.expand.kernel.ExpansionKernel`) and
bit-identical rows: the compiled C kernel (:mod:`~formalgram_cfgzip.expand._c_kernel`),
taken when it is built, or the numpy kernel (:mod:`~formalgram_cfgzip.expand._numpy_kernel`).
Both choose a plan per row by a cost model (:mod:`~formalgram_cfgzip.expand.plans`) and keep
an LRU cache of expanded rows keyed by the class row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.expand._c_kernel import CKernel, load_c_module
from formalgram_cfgzip.expand._numpy_kernel import NumpyKernel
from formalgram_cfgzip.expand.kernel import ExpansionKernel, RowWriter
from formalgram_cfgzip.expand.layout import (
    allocate_bitmask,
    as_int32_rows,
    check_logits_shape,
    check_row_index,
    check_token_class,
)
from formalgram_cfgzip.expand.plans import Strategy
from formalgram_cfgzip.expand.row_cache import cache_capacity

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses

__all__ = ["MaskExpander"]


class MaskExpander:
    """Expand class bitmasks to full-vocabulary token bitmasks on the CPU (C kernel or numpy).

    Parameters
    ----------
    token_class : array of int
        Class id of every logit index (length ``logit_width``); a negative id marks a
        logit index that is never allowed (use it for padding ids, or map them to the
        invalid class).
    num_classes : int
        Number of classes (width of the class bitmask).
    memory_budget : int, keyword-only
        Bytes allowed for what is precomputed for the largest (*dense*) classes (default
        32 MiB): the C kernel's one token row per dense class (``4 * ceil(logit_width /
        32)`` bytes, 16 KiB at 128k; the cost model takes a class when OR-ing its row is
        cheaper than setting its tokens), the numpy kernel's subset tables (8 classes
        each, ``256 * 4 * ceil(logit_width / 32)`` bytes, 4 MiB at 128k).
    max_dense : int or None, keyword-only
        Upper bound on the number of dense classes (``None``: chosen by the cost model;
        ``0``: none).
    dense : int or None, keyword-only
        Force the ``dense`` largest classes to be dense (the numpy kernel rounds up to a
        multiple of 8), ignoring the budget and the cost model (tests and benchmarks).
    cache_bytes : int, keyword-only
        Bytes of the LRU cache of expanded rows, keyed by the class-bitmask row (default
        8 MiB; ``0`` disables it).  See :attr:`cache_stats`.
    delta : bool or None, keyword-only
        On a cache miss, patch a recently used cached row (flip the tokens of the classes
        whose bits differ; the C kernel takes the nearest of the few most recent ones): ``None`` when the cost model expects it to be cheaper
        than a fresh row, ``True`` always (tests), ``False`` never.
    kernel : {"auto", "c", "numpy"}, keyword-only
        Which implementation computes rows: ``"auto"`` the C kernel when it is built (the
        normal compiled install; not with ``FORMALGRAM_NO_CEXPAND=1``), else numpy; ``"c"``
        requires it.  Both give bit-identical rows.  See :attr:`kernel`.
    adapt : bool, keyword-only
        C kernel only: time the rows whose plan it chooses and scale each plan's modelled
        cost by its measured / modelled ratio (default ``True``).  The cost model was fitted
        with warm caches; between two rows of a decoding loop the engine's fill can evict
        the kernel's tables, which slows the listed plans far more than the streaming
        gather.  ``False`` gives a choice that depends on the rows only (benchmarks of the
        model itself).  The rows are identical either way.
    cache_admission : {"costly", "always"}, keyword-only
        C kernel only: which misses go into the row cache.  ``"costly"`` (default): a row that
        the cost model finds cheap to compute (under 0.4 ns per token word: 1.6 µs at 128k
        tokens) is cached only when it comes back (the second time it misses), and never by
        the native engine's ``update_next_token_bitmask``, whose matcher keeps its own last
        row; writing a row into a cache slot that is out of the CPU's caches costs about as
        much as computing such a row (2-3 µs at 128k tokens in a decoding loop's cold
        caches).  ``"always"``: every miss is cached (a plain LRU; the numpy kernel's only
        policy).  The rows are identical either way.

    Raises
    ------
    EngineError
        If ``token_class`` is not a non-empty 1-D integer array or holds ids
        ``>= num_classes``, a budget is negative, or ``kernel="c"`` is not built.

    Notes
    -----
    Not thread-safe: the scratch buffers and the cache are per expander, so use one
    expander per thread.  Rows written into caller buffers are copies (the cache never
    aliases them).

    Construction is O(logit_width + precomputed words): ``dense * logit_width / 32`` for the
    C kernel, ``groups * 256 * logit_width / 32`` for the numpy kernel.  A row costs a cache
    lookup (hashing the class row) and, on a hit, one copy of the token row; on a miss,
    the cheapest plan of the kernel's cost model (see :mod:`~formalgram_cfgzip.expand.plans`).

    Examples
    --------
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
        dense: int | None = None,
        cache_bytes: int = 8 << 20,
        delta: bool | None = None,
        kernel: Literal["auto", "c", "numpy"] = "auto",
        adapt: bool = True,
        cache_admission: Literal["costly", "always"] = "costly",
    ) -> None:
        tc = check_token_class(token_class, num_classes)
        if cache_admission not in ("costly", "always"):
            raise EngineError(f"cache_admission must be 'costly' or 'always', got {cache_admission!r}")
        if memory_budget < 0 or cache_bytes < 0:
            raise EngineError("memory_budget and cache_bytes must be >= 0")
        if kernel not in ("auto", "c", "numpy"):
            raise EngineError(f"kernel must be 'auto', 'c' or 'numpy', got {kernel!r}")
        width = int(tc.shape[0])
        #: the class id of every logit index (int64; negative: never allowed)
        self.token_class = tc
        self.logit_width = width
        self.num_classes = num_classes
        self.num_words = (width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        self._scratch = np.zeros((1, self.num_words), dtype=np.int32)  # mask_logits' row
        cache_rows = cache_capacity(cache_bytes, self.num_words, self.class_words)
        module = load_c_module() if kernel != "numpy" else None
        if kernel == "c" and module is None:
            raise EngineError(
                "the C kernel (formalgram_cfgzip.expand._cexpand) is not built: install without "
                "FORMALGRAM_NO_MYPYC=1, or use kernel='numpy'"
            )
        self._kernel: ExpansionKernel
        if module is not None:
            self._kernel = CKernel(
                module,
                tc,
                num_classes,
                memory_budget=memory_budget,
                max_dense=max_dense,
                dense=dense,
                cache_rows=cache_rows,
                delta=delta,
                adapt=adapt,
                cache_admission=cache_admission,
            )
        else:
            self._kernel = NumpyKernel(
                tc,
                num_classes,
                memory_budget=memory_budget,
                max_dense=max_dense,
                dense=dense,
                cache_rows=cache_rows,
                delta=delta,
            )
        #: ``"c"`` (compiled kernel) or ``"numpy"``: which implementation computes rows
        self.kernel: str = self._kernel.name

    @classmethod
    def from_classes(
        cls,
        classes: TokenClasses,
        *,
        memory_budget: int = 32 << 20,
        max_dense: int | None = None,
        dense: int | None = None,
        cache_bytes: int = 8 << 20,
        delta: bool | None = None,
        kernel: Literal["auto", "c", "numpy"] = "auto",
        adapt: bool = True,
        cache_admission: Literal["costly", "always"] = "costly",
    ) -> MaskExpander:
        """Expander for a :class:`~formalgram_cfgzip.classes.TokenClasses` (all logit indices);
        the options are the constructor's."""
        return cls(
            classes.token_class,
            classes.num_classes,
            memory_budget=memory_budget,
            max_dense=max_dense,
            dense=dense,
            cache_bytes=cache_bytes,
            delta=delta,
            kernel=kernel,
            adapt=adapt,
            cache_admission=cache_admission,
        )

    @property
    def last_strategy(self) -> str:
        """Plan of the last row written, a name of :mod:`~formalgram_cfgzip.expand.plans`
        (``""`` before the first; not updated by :meth:`row_writer`'s C writer)."""
        return self._kernel.last_plan

    @property
    def c_kernel(self) -> object | None:
        """The compiled ``formalgram_cfgzip.expand._cexpand.Kernel`` itself when the C kernel
        is in use, else ``None``: other C extensions expand rows through it directly (the
        native engine's fused fill and expansion, ``State.fill_token``)."""
        return self._kernel.raw if isinstance(self._kernel, CKernel) else None

    @property
    def num_dense(self) -> int:
        """Number of dense classes: combined by a precomputed row each in every plan (C kernel;
        a class with a row but fewer than 1,024 tokens is listed like the tail, and flipped by its
        row only where the row update patches a row in place) or covered by the subset tables
        (numpy kernel)."""
        return self._kernel.info().dense_classes

    @property
    def num_stored(self) -> int:
        """Number of subset tables (numpy kernel, 256 precomputed rows each; the C kernel
        has none: its :attr:`num_dense` rows instead)."""
        return self._kernel.info().groups

    @property
    def num_small_tokens(self) -> int:
        """Number of logit indices outside the dense classes (the tail)."""
        return self._kernel.info().tail_tokens

    @property
    def cache_stats(self) -> dict[str, int]:
        """Row-cache counters: ``hits`` (with the C kernel, copies of pinned rows too: see
        :meth:`pin_rows`), ``misses`` (of which ``deltas`` were patched from a cached row or,
        ``set_deltas`` of them with the C kernel, from a kept set: see :meth:`keep_sets`;
        ``not_cached`` of them with the C kernel, rows cheap to compute left out of the
        cache: see ``cache_admission``), ``evictions``, ``entries``, ``capacity`` (rows)."""
        return self._kernel.cache_stats()

    def clear_cache(self) -> None:
        """Drop every cached row and reset the counters (the kept sets and pinned rows stay)."""
        self._kernel.clear_cache()

    def keep_sets(
        self,
        set_start: npt.ArrayLike,
        set_class: npt.ArrayLike,
        *,
        memory_budget: int = 8 << 20,
        min_cost_ns: float = 1500.0,
    ) -> int:
        """Keep the token rows of class sets that rows to come will contain or nearly contain.

        A grammar's class masks are unions of a few class sets that it knows in advance (the
        native engine's: the outputs of its domain automaton).  A row-cache miss that holds
        most of a large one is patched from its token row (plan ``"delta"``: one copy and
        the differing classes flipped) instead of being built class by class.  The kept rows
        outlive :meth:`clear_cache`; a new call replaces them.

        Parameters
        ----------
        set_start, set_class : array_like of int
            The sets in compressed form: set ``s`` holds the classes
            ``set_class[set_start[s] : set_start[s + 1]]`` (``set_start`` non-decreasing,
            within ``set_class``; every class below ``num_classes``).
        memory_budget : int
            Bytes the kept token rows may take (``4 * ceil(logit_width / 32)`` each, rounded
            up to 64 bytes).
        min_cost_ns : float
            Keep a set only when the cost model prices its own row at least this high (a
            cheaper row gains little from a copy).

        Returns
        -------
        int
            Sets kept: the dearest first, each class set once, within the budget; 0 with the
            numpy kernel, which keeps none.

        Raises
        ------
        EngineError
            On a negative budget or cost, or sets that are not as above.

        Notes
        -----
        Cost: one pass over the class lists, then one row expansion per kept set.

        Examples
        --------
        >>> import numpy as np
        >>> ex = MaskExpander(np.arange(64, dtype=np.int32) % 40, 40)
        >>> ex.keep_sets([0, 3, 40], list(range(3)) + list(range(3, 40)), min_cost_ns=0.0) <= 2
        True
        """
        budget_rows = self._rows_within(memory_budget, min_cost_ns)
        start = np.asarray(set_start)
        classes = np.asarray(set_class)
        if (
            start.ndim != 1
            or classes.ndim != 1
            or start.shape[0] < 1
            or not np.issubdtype(start.dtype, np.integer)
            or (classes.shape[0] and not np.issubdtype(classes.dtype, np.integer))
        ):
            raise EngineError("set_start (at least one entry) and set_class must be 1-D integer arrays")
        if (
            start[0] < 0
            or start[-1] > classes.shape[0]
            or np.any(np.diff(start) < 0)
            or (classes.shape[0] and (classes.min() < 0 or classes.max() >= self.num_classes))
        ):
            raise EngineError(
                f"set_start must be non-decreasing within set_class, whose classes must lie in "
                f"0 .. {self.num_classes - 1}"
            )
        return self._kernel.keep_sets(
            np.ascontiguousarray(start, dtype=np.int32),
            np.ascontiguousarray(classes, dtype=np.int32),
            budget_rows,
            float(min_cost_ns),
        )

    def pin_rows(
        self,
        class_rows: npt.ArrayLike,
        *,
        memory_budget: int = 8 << 20,
        min_cost_ns: float = 0.0,
    ) -> int:
        """Keep the token rows of given class rows beside the row cache, found by their class row.

        A row-cache miss whose class row is one of the pinned ones copies its token row (a
        hit) instead of building it; the pinned rows outlive :meth:`clear_cache`, and a new
        call replaces them.  For the class masks every sequence of a grammar meets first
        (:meth:`NativeCompiled.prewarm
        <formalgram_cfgzip.engines.native.matcher.NativeCompiled.prewarm>`): a cold start
        then builds none of them.

        Parameters
        ----------
        class_rows : array_like of int32
            ``(n, class_words)`` class rows (bits past ``num_classes`` ignored).
        memory_budget : int
            Bytes the pinned token rows may take (``4 * ceil(logit_width / 32)`` each, rounded
            up to 64 bytes): the first rows that fit are pinned.  The C kernel keeps each
            distinct 64-byte line of them once (rows met one after another share most of
            theirs), and stops at 65,536 distinct lines; what they take is
            ``c_kernel.info()["pinned_bytes"]``.
        min_cost_ns : float
            Pin a row only when the cost model prices building it at least this high (default
            0: every row; a row of few tokens adds its line numbers and a few lines to the pool,
            and its copy reads the pool's lines of no token, which stay cached).

        Returns
        -------
        int
            Rows pinned, each class row once; 0 with the numpy kernel, which pins none.

        Raises
        ------
        EngineError
            On a negative budget or cost, or class rows not of shape ``(n, class_words)``.

        Notes
        -----
        Cost: one row expansion per pinned row; memory for its distinct lines and two bytes
        per line of each row.  A hit gathers its row's lines: 7-15 % of the rows' bytes on the
        first rows of JSON schemas and code grammars, which stay in the CPU's caches where whole
        rows came from memory.

        Examples
        --------
        >>> import numpy as np
        >>> ex = MaskExpander(np.arange(64, dtype=np.int32) % 40, 40)
        >>> rows = np.array([[0b101, 0], [0b101, 0], [-1, 0xff]], dtype=np.int32)
        >>> ex.pin_rows(rows, min_cost_ns=0.0) <= 2  # the first two are one class row
        True
        """
        budget_rows = self._rows_within(memory_budget, min_cost_ns)
        rows = np.asarray(class_rows)
        if rows.ndim != 2 or rows.shape[1] != self.class_words or not np.issubdtype(rows.dtype, np.integer):
            raise EngineError(f"class_rows must be an integer array of shape (n, {self.class_words})")
        bits = np.ascontiguousarray(rows.astype(np.int32))  # the bits of each word, as int32
        return self._kernel.pin_rows(bits, budget_rows, float(min_cost_ns))

    def _rows_within(self, memory_budget: int, min_cost_ns: float) -> int:
        """The token rows (64-byte aligned) that ``memory_budget`` bytes hold, after the check
        of :meth:`keep_sets` and :meth:`pin_rows` on their budget and cost arguments."""
        if memory_budget < 0 or not min_cost_ns >= 0:
            raise EngineError("memory_budget and min_cost_ns must be >= 0")
        return memory_budget // (-(-4 * self.num_words // 64) * 64)

    @property
    def num_pinned_rows(self) -> int:
        """Number of class rows whose token rows are pinned (:meth:`pin_rows`)."""
        return self._kernel.info().pinned_rows

    @property
    def num_kept_sets(self) -> int:
        """Number of class sets whose token rows are kept (:meth:`keep_sets`)."""
        return self._kernel.info().kept_sets

    # -- one row ------------------------------------------------------------------------
    def expand_row(
        self, class_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32], strategy: Strategy = "auto"
    ) -> None:
        """Expand one class-bitmask row into one token-bitmask row, in place.

        Parameters
        ----------
        class_row : numpy.ndarray
            int32, shape ``(ceil(num_classes / 32),)``, C-contiguous.
        out_row : numpy.ndarray
            int32, shape ``(ceil(logit_width / 32),)``, C-contiguous; overwritten.
        strategy : {"auto", "split", "gather", "sparse"}
            ``"auto"``: the row cache, then (on a miss) a patch of a recently cached row
            or the cheapest plan of the cost model.  The others force one plan and bypass
            the cache (tests and benchmarks): ``"gather"`` the plain gather, ``"split"``
            the dense classes + a tail gather, ``"sparse"`` the dense classes + the listed
            tail classes (or their complement); see :mod:`~formalgram_cfgzip.expand.plans`.

        Notes
        -----
        The caller checks the shapes (the engines' hot path).  A cache hit costs one copy
        of ``4 * ceil(logit_width / 32)`` bytes plus hashing the class row.
        """
        self._kernel.expand_row(class_row, out_row, strategy)

    def expand_at(self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], index: int) -> None:
        """Expand row 0 of ``class_rows`` into row ``index`` of ``out`` (the one-sequence
        path of the engine adapters: no row views, one call into the C kernel).

        Parameters
        ----------
        class_rows : numpy.ndarray
            int32 ``(1, ceil(num_classes / 32))``, C-contiguous.
        out : numpy.ndarray
            int32 ``(batch, ceil(logit_width / 32))``, C-contiguous.
        index : int
            Row of ``out`` to write; the caller checks it is in range.
        """
        self._kernel.expand_at(class_rows, out, index)

    def row_writer(self) -> RowWriter:
        """:meth:`expand_at` as one callable for a hot loop: with the C kernel its compiled
        ``expand_rows`` itself (no Python frame in between; :attr:`last_strategy` is then
        not updated), else the numpy kernel's ``expand_at``.  Same arguments and checks as
        :meth:`expand_at`."""
        return self._kernel.row_writer()

    # -- batches ------------------------------------------------------------------------
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
            int32 ``(batch', ceil(logit_width / 32))`` C-contiguous (numpy, or a CPU torch
            tensor), written in place; allocated when ``None``.
        indices : sequence of int or None, keyword-only
            Rows of ``out`` to fill, one per class-bitmask row (default ``0..batch-1``).
        strategy : {"auto", "split", "gather", "sparse"}, keyword-only
            Force one plan, bypassing the cache (tests and benchmarks); see :meth:`expand_row`.

        Returns
        -------
        numpy.ndarray
            ``out``.

        Raises
        ------
        EngineError
            On a dtype or shape mismatch, or a number of indices other than the batch.
        BatchIndexError
            If an index is not a row of ``out`` (before any row is written).

        Notes
        -----
        Per row: a cache lookup, then the kernel's cheapest plan on a miss.
        """
        if (  # the common case, checked inline: plain arrays of the right widths
            type(class_bitmask) is np.ndarray
            and class_bitmask.ndim == 2
            and class_bitmask.dtype == np.int32
            and class_bitmask.shape[1] == self.class_words
            and class_bitmask.flags.c_contiguous
        ):
            cm = class_bitmask
        else:
            cm = as_int32_rows(class_bitmask, "class bitmask", self.class_words, writable=False)
        batch = cm.shape[0]
        if out is None:
            out = target = allocate_bitmask(batch, self.logit_width)
        elif (
            type(out) is np.ndarray
            and out.ndim == 2
            and out.dtype == np.int32
            and out.shape[1] == self.num_words
            and out.flags.c_contiguous
            and out.flags.writeable
        ):
            target = out
        else:
            target = as_int32_rows(out, "token bitmask", self.num_words)
        if indices is not None and len(indices) != batch:
            raise EngineError(f"{len(indices)} indices given for {batch} class-bitmask rows")
        if strategy == "auto":
            self._kernel.expand_rows(cm, target, indices)
            return out
        rows = range(batch) if indices is None else indices
        for dst in rows:
            check_row_index(dst, target.shape[0])
        for src, dst in enumerate(rows):
            self._kernel.expand_row(cm[src], target[dst], strategy)
        return out

    def mask_logits(
        self, logits: npt.NDArray[np.floating[Any]], class_bitmask: npt.NDArray[np.int32]
    ) -> None:
        """Set the logits of disallowed tokens to ``-inf`` in place (the direct logits path).

        Parameters
        ----------
        logits : numpy.ndarray
            float16, float32 or float64 ``(batch, n)`` with ``n >= logit_width``; columns
            past ``logit_width`` are set to ``-inf`` as well (padding is never allowed).
        class_bitmask : numpy.ndarray
            int32 ``(batch, ceil(num_classes / 32))``.

        Raises
        ------
        EngineError
            On a shape mismatch or another dtype.

        Notes
        -----
        Per row, one expansion (cached rows: a copy) and one pass over the logits (C kernel:
        only the disallowed ones are written).
        """
        lg = logits if logits.ndim == 2 else logits[None, :]
        if lg.dtype.kind != "f" or lg.dtype.itemsize not in (2, 4, 8):
            raise EngineError(f"logits must be float16, float32 or float64, got {lg.dtype}")
        unsigned = np.dtype(f"u{lg.dtype.itemsize}")
        pattern = int(np.array(-np.inf, dtype=lg.dtype).view(unsigned).item())
        self._mask_raw(lg.view(unsigned), class_bitmask, pattern)

    def _mask_raw(self, raw: npt.NDArray[Any], class_bitmask: Any, pattern: int) -> None:
        """:meth:`mask_logits` on the logits' bits: ``raw`` is an unsigned-int view of them
        (2, 4 or 8 bytes per value; bfloat16 included) and ``pattern`` the bits of ``-inf``
        (also :class:`~formalgram_cfgzip.expand.TorchMaskExpander`'s CPU path)."""
        cm = as_int32_rows(class_bitmask, "class bitmask", self.class_words, writable=False)
        check_logits_shape(raw.shape, cm.shape, self.logit_width)
        row = self._scratch
        width = self.logit_width
        kernel = self._kernel
        neg_inf = raw.dtype.type(pattern)
        for b in range(cm.shape[0]):
            kernel.expand_at(cm[b : b + 1], row, 0)
            values = raw[b]
            kernel.mask_row(row[0], values[:width], pattern)
            values[width:] = neg_inf
