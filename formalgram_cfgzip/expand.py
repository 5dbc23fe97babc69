"""Class mask -> full-vocabulary mask expansion (CPU with numpy, CPU/CUDA with torch).

A grammar engine run over one representative per token class produces a *class
bitmask*: bit ``k`` set when class ``k`` may come next.  Decoding needs the
*token bitmask* over every logit index, in XGrammar's layout:

* int32 words, shape ``(batch, ceil(logit_width / 32))``;
* bit ``j`` (least significant first) of word ``w`` of a row is token ``32 * w + j``;
* bits past ``logit_width`` in the last word are zero.

so that ``xgrammar.apply_token_bitmask_inplace`` and llguidance's helpers work unchanged.
Token ``i`` is allowed exactly when its class ``token_class[i]`` is allowed.

Two CPU kernels compute rows; :class:`MaskExpander` takes the compiled one when it is
built (``kernel="auto"``).  Algorithms chosen by measurement (``bench/expand_bench.py``):

**C kernel** (``formalgram_cfgzip/_cexpand.c``, built by the normal compiled install):
per row, the cheapest of seven plans by a cost model fitted on the development machine --
a plain gather (about 0.21 ns per logit index: ~28 µs at 128k), subset tables for the
largest classes plus a gather of the remaining ("tail") tokens, the tokens of the few
allowed (or disallowed) classes listed, with or without the subset tables, or a patch of
the most recently used cached row.  Listed plans are tried when their estimate beats the
fixed plans and are given up as soon as their running cost passes it.  The LRU row cache
lives in the kernel too (open addressing keyed by the class row): a hit is one 16 KB copy
at 128k, under 1 µs with the call.

**numpy kernel** (the pure-Python build, ``FORMALGRAM_NO_MYPYC=1``, or
``FORMALGRAM_NO_CEXPAND=1``).  A per-token gather (``allowed[token_class]`` then packing
bits) costs about 0.6 ns per token in numpy, about 80 µs for 128k tokens: too slow on its
own.  This kernel therefore

* keeps a bounded **LRU cache** of expanded rows keyed by the class-bitmask row: decoding
  revisits the same matcher states constantly (every step inside a string or a comment
  has the same class mask), and a hit is one copy of ``logit_width / 8`` bytes (~2 µs at
  128k).  On a miss it patches the most recently used cached row when few classes
  differ (a token's bit is its class's bit, so ``new = old ^ tokens of the flipped
  classes``), or computes the row by the split below or the plain gather:
* the largest classes are grouped 8 at a time; each group has a **subset table** of the
  256 unions of its classes' bitmasks, so a group costs one vector OR of
  ``logit_width / 32`` words whatever subset of it is allowed;
* the remaining "small-class" tokens are either gathered one by one into a persistent
  byte buffer that is zero everywhere else, then packed to bits (cost ~ their number),
  or, when only a few of them are allowed (or disallowed), listed class by class from a
  CSR index and set (or cleared from their union);

and, per row, the cheapest of these and the plain gather is taken by a cost model whose
constants were measured on the development machine.  Flat class distributions (tens of
thousands of classes of a few tokens) leave almost every token to the gather: about
70-90 µs per uncached row at 128k on the development machine (the C kernel: 30-40 µs).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
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

Strategy = Literal["auto", "split", "gather", "sparse"]

# Cost model constants (nanoseconds), measured with bench/expand_bench.py on a 2-core x86 VM.
_NS_PER_WORD_OR = 0.30  # one uint32 word of a vector OR
_NS_PER_CALL = 1000.0  # fixed overhead of one numpy call
_NS_PER_GATHER_TOKEN = 0.60  # np.take of one token (intp index) into a byte buffer
_NS_PER_PACK_BIT = 0.04  # np.packbits, per byte packed to one bit
_NS_PER_SMALL_TOKEN = 1.6  # np.take + scatter of one small-class token
_NS_PER_SPARSE_TOKEN = 12.0  # one token of a listed class (listing, repeat, gather, 2 scatters)
_GROUP_BITS = 8  # classes per subset table (2**8 precomputed unions each)
_DELTA_MIN_FRESH_NS = 30_000.0  # try patching a cached row only when a fresh one costs more
_AT_TOKENS = 256  # listed tokens up to this many: updated by ufunc.at, no full-width buffer
_LOOP_TOKENS = 12  # up to this many: a Python loop (cheaper than ufunc.at's set-up)
_NS_PER_AT_TOKEN = 40.0  # one token updated by ufunc.at (listing included)


# C kernel plan codes -> names (8: a row-cache hit)
_C_PLANS = ("gather", "split", "set", "clear", "delta", "", "split/set", "split/clear", "cache")
_C_FORCED = {"gather": 0, "split": 1, "sparse": 5}


def _c_module() -> Any:
    """The compiled kernel module, or ``None`` (pure-Python build, or disabled by setting
    ``FORMALGRAM_NO_CEXPAND=1``)."""
    if os.environ.get("FORMALGRAM_NO_CEXPAND", "") not in ("", "0"):
        return None
    try:
        from formalgram_cfgzip import _cexpand
    except ImportError:
        return None
    return _cexpand


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
        Bytes allowed for the precomputed subset tables (default 32 MiB; each table of
        8 classes takes ``256 * 4 * ceil(logit_width / 32)`` bytes, 4 MiB at 128k).
    max_dense : int or None, keyword-only
        Upper bound on the number of classes covered by subset tables (``None``: chosen
        by the cost model; ``0`` disables them).
    dense : int or None, keyword-only
        Force subset tables for the ``dense`` largest classes, rounded up to a multiple
        of 8, ignoring the budget and the cost model (tests and benchmarks).
    cache_bytes : int, keyword-only
        Bytes of the LRU cache of expanded rows, keyed by the class-bitmask row (default
        8 MiB; ``0`` disables it).  See :attr:`cache_stats`.
    delta : bool or None, keyword-only
        On a cache miss, patch the most recently used cached row (flip the tokens of the
        classes whose bits differ): ``None`` when the cost model expects it to be cheaper
        than a fresh row, ``True`` always (tests), ``False`` never.
    kernel : {"auto", "c", "numpy"}, keyword-only
        Which implementation computes rows: ``"auto"`` the C kernel when it is built (the
        normal compiled install; not with ``FORMALGRAM_NO_CEXPAND=1``), else numpy; ``"c"``
        requires it.  Both give bit-identical rows.  See :attr:`kernel`.
    adapt : bool, keyword-only
        C kernel only: time the rows whose plan it chooses and scale each plan's modelled
        cost by its measured / modelled ratio (default ``True``).  The cost model was fitted
        with warm caches on one machine; between two rows of a decoding loop the engine's
        fill can evict the kernel's tables, which slows the listed plans far more than the
        streaming gather (SynCode SQL, caches flushed: 57 -> 35 µs per row).  ``False``
        gives a choice that depends on the rows only (benchmarks of the model itself).
        The rows are identical either way.

    Notes
    -----
    Not thread-safe: the scratch buffers and the cache are per expander, so use one
    expander per thread.  Rows written into caller buffers are copies (the cache never
    aliases them).

    Raises
    ------
    ValueError
        If ``token_class`` is not a non-empty 1-D integer array or holds ids
        ``>= num_classes``, a budget is negative, or ``kernel="c"`` is not built.

    Complexity
    ----------
    Construction O(logit_width + groups * 256 * logit_width / 32); see the module
    docstring for a step.

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
        dense: int | None = None,
        cache_bytes: int = 8 << 20,
        delta: bool | None = None,
        kernel: Literal["auto", "c", "numpy"] = "auto",
        adapt: bool = True,
    ) -> None:
        tc = _check_token_class(token_class, num_classes)
        if memory_budget < 0 or cache_bytes < 0:
            raise ValueError("memory_budget and cache_bytes must be >= 0")
        if kernel not in ("auto", "c", "numpy"):
            raise ValueError(f"kernel must be 'auto', 'c' or 'numpy', got {kernel!r}")
        width = int(tc.shape[0])
        #: the class id of every logit index (int64; negative: never allowed)
        self.token_class = tc
        self.logit_width = width
        self.num_classes = num_classes
        self.num_words = (width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        row_bytes = self.num_words * 4
        self.last_strategy = ""
        # -- LRU cache of expanded rows (kept by the C kernel itself when it is used)
        key_bytes = self.class_words * 4
        self._cache_slots = cache_bytes // (row_bytes + key_bytes + 100)
        self._cache_store = np.zeros((0, self.num_words), dtype=np.uint32)
        self._cache: dict[bytes, int] = {}
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._deltas = 0
        self._delta = delta
        self._scratch = np.zeros(self.num_words, dtype=np.uint32)  # mask_logits' row
        module = _c_module() if kernel != "numpy" else None
        if kernel == "c" and module is None:
            raise ValueError(
                "the C kernel (formalgram_cfgzip._cexpand) is not built: install without "
                "FORMALGRAM_NO_MYPYC=1, or use kernel='numpy'"
            )
        #: ``"c"`` (compiled kernel) or ``"numpy"``: which implementation computes rows
        self.kernel: str = "c" if module is not None else "numpy"
        self._kernel: Any = None
        self._apply_bitmask: Any = None  # the C module's apply_bitmask, with the kernel
        if module is not None:
            budget = memory_budget
            if max_dense is not None:
                table_bytes = (1 << _GROUP_BITS) * row_bytes
                budget = min(budget, (max(0, max_dense) // _GROUP_BITS) * table_bytes)
            forced = -1 if dense is None else -(-max(0, dense) // _GROUP_BITS)
            delta_mode = 1 if delta is None else 2 if delta else 0
            self._apply_bitmask = module.apply_bitmask
            self._kernel = module.Kernel(
                tc.astype(np.int32), num_classes, budget, forced, self._cache_slots, delta_mode, adapt
            )
            return
        self._cache_store = np.zeros((self._cache_slots, self.num_words), dtype=np.uint32)
        self._init_numpy(tc, memory_budget, max_dense, dense)

    def _init_numpy(
        self, tc: npt.NDArray[np.int64], memory_budget: int, max_dense: int | None, dense: int | None
    ) -> None:
        num_classes = self.num_classes
        width = self.logit_width
        padded_bits = self.num_words * 32
        row_bytes = self.num_words * 4
        # Slot `num_classes` of the per-step class table is always 0: holes, padding ids
        # and the pad bits of the last word all point to it.
        zero = num_classes
        full = np.full(padded_bits, zero, dtype=np.intp)
        valid = tc >= 0
        full[:width][valid] = tc[valid]
        self._gather_index = full
        sizes = np.bincount(tc[valid], minlength=num_classes)
        order = np.argsort(-sizes, kind="stable").astype(np.intp)
        # -- subset tables: classes order[8g : 8g + 8] form group g; row `code` of its table
        # is the union of the bitmasks of the classes whose bit is set in `code`.
        table_bytes = (1 << _GROUP_BITS) * row_bytes
        max_groups = memory_budget // table_bytes
        if max_dense is not None:
            max_groups = min(max_groups, max(0, max_dense) // _GROUP_BITS)
        or_cost = self._or_cost()
        groups = 0
        while groups < max_groups and groups * _GROUP_BITS < num_classes:
            part = int(sizes[order[groups * _GROUP_BITS : (groups + 1) * _GROUP_BITS]].sum())
            if part * _NS_PER_SMALL_TOKEN < or_cost:
                break
            groups += 1
        if dense is not None:
            groups = min(-(-max(0, dense) // _GROUP_BITS), -(-num_classes // _GROUP_BITS))
        self._groups = groups
        k0 = min(num_classes, groups * _GROUP_BITS)
        self._k0 = k0
        group_members = np.full(groups * _GROUP_BITS, zero, dtype=np.intp)
        group_members[:k0] = order[:k0]
        self._group_members = group_members
        self._tables = self._build_tables(full, group_members, groups)
        self._group_base = np.arange(groups, dtype=np.intp) << _GROUP_BITS
        # -- small classes: the remaining tokens, in token order and (CSR) by class
        rank = np.full(num_classes + 1, num_classes, dtype=np.intp)
        rank[order] = np.arange(num_classes)
        token_rank = rank[full]  # zero slot -> rank num_classes
        small_mask = (token_rank >= k0) & (token_rank < num_classes)
        self._small_ids = np.flatnonzero(small_mask).astype(np.intp)
        self._small_class = full[self._small_ids].astype(np.intp)
        by_class = np.argsort(self._small_class, kind="stable")
        self._csr_tokens = self._small_ids[by_class]
        counts = np.bincount(self._small_class, minlength=num_classes + 1)[: num_classes + 1]
        offsets = np.zeros(num_classes + 2, dtype=np.intp)
        np.cumsum(counts, out=offsets[1:])
        self._csr_start = offsets[:-1]
        self._csr_len = counts.astype(np.intp)
        # group members as (word, shift, mask) of the class row; padding members read 0
        real = group_members < num_classes
        self._member_word = np.where(real, group_members >> 5, 0).astype(np.intp)
        self._member_shift = np.where(real, group_members & 31, 0).astype(np.uint32)
        self._member_mask = real.astype(np.uint32)
        rem = num_classes % 32
        self._junk_mask = np.uint32(0xFFFFFFFF ^ ((1 << rem) - 1)) if rem else np.uint32(0)
        self._union_small = np.zeros(self.num_words, dtype=np.uint32)
        if self._small_ids.shape[0]:
            ub = np.zeros(padded_bits, dtype=np.uint8)
            ub[self._small_ids] = 1
            self._union_small = np.packbits(ub, bitorder="little").view(np.uint32)
        n_small = int(self._small_ids.shape[0])
        self._pack_cost = padded_bits * _NS_PER_PACK_BIT + 2 * _NS_PER_CALL
        self._small_gather_cost = n_small * _NS_PER_SMALL_TOKEN + 2 * _NS_PER_CALL + self._pack_cost
        self._gather_cost = _NS_PER_GATHER_TOKEN * padded_bits + self._pack_cost
        # Classes listed per row at most: beyond, their tokens (at the mean small-class size)
        # would cost more than the cheapest fresh plan without listing.
        small_sizes = counts[:num_classes][counts[:num_classes] > 0]
        mean_size = float(small_sizes.mean()) if small_sizes.shape[0] else 1.0
        budget = min(self._gather_cost, groups * self._or_cost() + self._small_gather_cost)
        self._list_max = max(
            16, int((budget - self._sparse_fixed_cost()) / (_NS_PER_SPARSE_TOKEN * mean_size))
        )
        # Plan each row only when some row could be cheaper than "split/gather" (a plan
        # costs a few µs: a short row with few small-class tokens skips it).
        self._plan_rows = (
            self._small_gather_cost > self._sparse_fixed_cost()
            or groups * self._or_cost() + self._small_gather_cost > self._gather_cost
        )
        # -- per-step scratch (reused; a matcher fills rows one at a time)
        self._table = np.zeros(self.class_words * 32 + 1, dtype=np.uint8)
        self._byte_buf = np.zeros(padded_bits, dtype=np.uint8)
        self._small_buf = np.zeros(padded_bits, dtype=np.uint8)  # zero outside small ids
        self._sparse_buf = np.zeros(padded_bits, dtype=np.uint8)  # all zero between steps
        self._small_vals = np.zeros(n_small, dtype=np.uint8)
        # CSR index of every valid token by class (for patching cached rows)
        all_ids = np.flatnonzero(full < num_classes)
        self._all_tokens = all_ids[np.argsort(full[all_ids], kind="stable")].astype(np.intp)
        all_counts = np.bincount(full[all_ids], minlength=num_classes)
        self._all_start = np.zeros(num_classes, dtype=np.intp)
        np.cumsum(all_counts[:-1], out=self._all_start[1:])
        self._all_len = all_counts.astype(np.intp)
        nonempty = int(np.count_nonzero(all_counts))
        self._mean_class_size = all_ids.shape[0] / nonempty if nonempty else 1.0
        # estimated cost of a fresh row in the worst case the plans allow
        self._fresh_cost = min(self._gather_cost, groups * self._or_cost() + self._small_gather_cost)

    def _build_tables(
        self, full: npt.NDArray[np.intp], members: npt.NDArray[np.intp], groups: int
    ) -> npt.NDArray[np.uint32]:
        size = 1 << _GROUP_BITS
        tables = np.zeros((groups * size, self.num_words), dtype=np.uint32)
        if groups == 0:
            return tables
        for g in range(groups):
            base = g * size
            for j in range(_GROUP_BITS):
                c = int(members[g * _GROUP_BITS + j])
                if c == self.num_classes:
                    continue
                row = np.packbits(full == c, bitorder="little").view(np.uint32)
                lo = 1 << j
                # rows lo .. 2*lo - 1: the rows 0 .. lo - 1 with class j added
                np.bitwise_or(tables[base : base + lo], row, out=tables[base + lo : base + 2 * lo])
        return tables

    @classmethod
    def from_classes(cls, classes: TokenClasses, **kwargs: Any) -> MaskExpander:
        """Expander for a :class:`~formalgram_cfgzip.classes.TokenClasses` (all logit indices)."""
        return cls(classes.token_class, classes.num_classes, **kwargs)

    def _sparse_fixed_cost(self) -> float:
        return 10 * _NS_PER_CALL + self._pack_cost

    def _or_cost(self) -> float:
        return self.num_words * _NS_PER_WORD_OR + _NS_PER_CALL

    @property
    def num_dense(self) -> int:
        """Number of classes covered by the subset tables (expanded by one OR per 8)."""
        if self._kernel is not None:
            return min(self.num_classes, int(self._kernel.info()["groups"]) * _GROUP_BITS)
        return self._k0

    @property
    def num_stored(self) -> int:
        """Number of subset tables (256 precomputed rows each)."""
        if self._kernel is not None:
            return int(self._kernel.info()["groups"])
        return self._groups

    @property
    def num_small_tokens(self) -> int:
        """Number of logit indices not covered by the subset tables."""
        if self._kernel is not None:
            return int(self._kernel.info()["tail_tokens"])
        return int(self._small_ids.shape[0])

    @property
    def cache_stats(self) -> dict[str, int]:
        """Row-cache counters: ``hits``, ``misses`` (of which ``deltas`` were patched from a
        cached row), ``evictions``, ``entries``, ``capacity`` (rows)."""
        if self._kernel is not None:
            return {k: int(v) for k, v in self._kernel.cache_info().items()}
        return {
            "hits": self._hits,
            "misses": self._misses,
            "evictions": self._evictions,
            "deltas": self._deltas,
            "entries": len(self._cache),
            "capacity": self._cache_slots,
        }

    def clear_cache(self) -> None:
        """Drop every cached row and reset the counters."""
        if self._kernel is not None:
            self._kernel.clear_cache()
        self._cache.clear()
        self._hits = self._misses = self._evictions = self._deltas = 0

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
        strategy : {"auto", "split", "gather", "sparse"}
            ``"auto"``: the row cache, then (on a miss) a patch of the last cached row or
            the cheapest plan of the cost model.  The others force one plan and bypass
            the cache (tests and benchmarks): ``"gather"`` the plain gather, ``"split"``
            subset tables + small-class gather, ``"sparse"`` subset tables + the listed
            small classes (or their complement).

        Complexity
        ----------
        A cache hit: one copy of ``4 * ceil(logit_width / 32)`` bytes plus hashing the
        class row.  A miss: see the module docstring.
        """
        if self._kernel is not None:
            if strategy == "auto":
                plan = self._kernel.expand_rows(class_row, out_row)
            else:
                plan = self._kernel.expand(class_row, out_row, None, None, _C_FORCED[strategy])
            self.last_strategy = _C_PLANS[plan]
            return
        out = out_row.view(np.uint32)
        if strategy == "auto" and self._cache_slots:
            key = class_row.tobytes()
            cache = self._cache
            slot = cache.pop(key, -1)
            if slot >= 0:
                cache[key] = slot  # most recently used: last in the dict's order
                np.copyto(out, self._cache_store[slot])
                self._hits += 1
                self.last_strategy = "cache"
                return
            self._misses += 1
            if self._try_delta(class_row, out):
                self._deltas += 1
            else:
                self._compute_row(class_row, out, strategy)
            if len(cache) < self._cache_slots:
                slot = len(cache)
            else:
                slot = cache.pop(next(iter(cache)))
                self._evictions += 1
            cache[key] = slot
            np.copyto(self._cache_store[slot], out)
            return
        self._compute_row(class_row, out, strategy)

    def expand_at(self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], index: int) -> None:
        """Expand row 0 of ``class_rows`` into row ``index`` of ``out`` (the one-sequence
        fast path of the engine adapters: no row views, one call into the C kernel).

        Parameters
        ----------
        class_rows : numpy.ndarray
            int32 ``(1, ceil(num_classes / 32))``, C-contiguous.
        out : numpy.ndarray
            int32 ``(batch, ceil(logit_width / 32))``, C-contiguous.
        index : int
            Row of ``out`` to write; the caller checks it is in range.
        """
        if self._kernel is not None:
            self.last_strategy = _C_PLANS[self._kernel.expand_rows(class_rows, out, index)]
        else:
            self.expand_row(class_rows[0], out[index])

    def row_writer(self) -> Callable[[npt.NDArray[np.int32], npt.NDArray[np.int32], int], object]:
        """:meth:`expand_at` as one callable for a hot loop: with the C kernel its bound
        ``expand_rows`` itself (no Python frame in between; :attr:`last_strategy` is then
        not updated), else :meth:`expand_at`.  Same arguments and checks as ``expand_at``."""
        if self._kernel is not None:
            writer: Callable[[npt.NDArray[np.int32], npt.NDArray[np.int32], int], object] = (
                self._kernel.expand_rows
            )
            return writer
        return self.expand_at

    def _compute_row(
        self, class_row: npt.NDArray[np.int32], out: npt.NDArray[np.uint32], strategy: str
    ) -> None:
        row = class_row.view(np.uint32)
        cls: npt.NDArray[np.intp] | None = None
        small_plan = "gather"
        if strategy == "split" or (strategy == "auto" and not self._plan_rows):
            strategy = "split"
        elif strategy != "gather":
            forced = strategy == "sparse"
            small_plan, cls, small_cost = self._small_plan(row, forced)
            if forced:
                strategy = "split"
            else:
                split_cost = self._groups * self._or_cost() + small_cost
                strategy = "gather" if split_cost > self._gather_cost else "split"
        if strategy == "gather":
            self.last_strategy = "gather"
            self._load_table(class_row)
            buf = self._byte_buf
            np.take(self._table, self._gather_index, out=buf)
            out[:] = np.packbits(buf, bitorder="little").view(np.uint32)
            return
        self.last_strategy = f"split/{small_plan}"
        # subset tables: one OR per group with a non-zero code (codes read off the class row)
        if self._groups:
            member_bits = np.bitwise_and(
                np.right_shift(row[self._member_word], self._member_shift), self._member_mask
            )
            codes = np.packbits(
                member_bits.astype(np.uint8).reshape(self._groups, _GROUP_BITS), axis=1, bitorder="little"
            )
            rows = np.flatnonzero(codes[:, 0] != 0)
            if rows.shape[0] == 0:
                out[:] = 0
            else:
                idx = self._group_base[rows] + codes[rows, 0]
                tables = self._tables
                np.copyto(out, tables[idx[0]])
                for r in idx[1:]:
                    np.bitwise_or(out, tables[r], out=out)
        else:
            out[:] = 0
        if small_plan == "none":
            return
        if small_plan == "all":
            np.bitwise_or(out, self._union_small, out=out)
            return
        if small_plan == "gather":
            self._load_table(class_row)
            vals = self._small_vals
            np.take(self._table, self._small_class, out=vals)
            buf = self._small_buf
            buf[self._small_ids] = vals
            np.bitwise_or(out, np.packbits(buf, bitorder="little").view(np.uint32), out=out)
            return
        # sparse / complement: the tokens of the listed small classes, from the CSR lists
        assert cls is not None
        csr = (self._csr_tokens, self._csr_start, self._csr_len)
        if small_plan == "sparse":
            self._apply_listed(cls, csr, out, "or")
        else:  # small classes are disjoint from the subset tables' ones: clear inside their union
            np.bitwise_or(out, self._union_small, out=out)
            self._apply_listed(cls, csr, out, "clear")

    def _row_classes(self, words_row: npt.NDArray[np.uint32]) -> npt.NDArray[np.intp]:
        """Ids ``< num_classes`` of the set bits of a class-bitmask row, ascending."""
        words = np.flatnonzero(words_row != 0)  # (nonzero on bool arrays is the fast one)
        pos = np.flatnonzero(np.unpackbits(words_row[words].view(np.uint8), bitorder="little").view(np.bool_))
        cls: npt.NDArray[np.intp] = words[pos >> 5] * 32 + (pos & 31)
        if cls.shape[0] and cls[-1] >= self.num_classes:  # junk bits past num_classes
            cls = cls[cls < self.num_classes]
        return cls

    def _apply_listed(
        self,
        cls: npt.NDArray[np.intp],
        csr: tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]],
        out: npt.NDArray[np.uint32],
        op: str,
    ) -> None:
        """Set (``"or"``), clear (``"clear"``) or flip (``"xor"``) in ``out`` the bits of the
        tokens of classes ``cls``, listed by a CSR index ``(tokens, start, length)``.

        Few tokens are updated one by one (a loop, or ``ufunc.at``); more go through a
        full-width byte buffer packed to bits.
        """
        tokens, start, length = csr
        lens = length[cls]
        n_tokens = int(lens.sum())
        if n_tokens == 0:
            return
        if n_tokens <= _LOOP_TOKENS:
            for c, n in zip(cls.tolist(), lens.tolist(), strict=True):
                first = int(start[c])
                for t in tokens[first : first + n].tolist():
                    bit = np.uint32(1 << (t & 31))
                    if op == "or":
                        out[t >> 5] |= bit
                    elif op == "clear":
                        out[t >> 5] &= ~bit
                    else:
                        out[t >> 5] ^= bit
            return
        ends = np.cumsum(lens)
        at = np.arange(n_tokens, dtype=np.intp)
        at += np.repeat(start[cls] - (ends - lens), lens)
        toks = tokens[at]
        if n_tokens <= _AT_TOKENS:
            bits = np.left_shift(np.uint32(1), (toks & 31).astype(np.uint32))
            if op == "or":
                np.bitwise_or.at(out, toks >> 5, bits)
            elif op == "clear":
                np.bitwise_and.at(out, toks >> 5, np.invert(bits))
            else:
                np.bitwise_xor.at(out, toks >> 5, bits)
            return
        buf = self._sparse_buf
        buf[toks] = 1
        packed = np.packbits(buf, bitorder="little").view(np.uint32)
        buf[toks] = 0
        if op == "or":
            np.bitwise_or(out, packed, out=out)
        elif op == "clear":
            np.invert(packed, out=packed)
            np.bitwise_and(out, packed, out=out)
        else:
            np.bitwise_xor(out, packed, out=out)

    def _listed_cost(self, n_tokens: int) -> float:
        """Estimated ns of :meth:`_apply_listed` for ``n_tokens`` tokens."""
        if n_tokens <= _AT_TOKENS:
            return n_tokens * _NS_PER_AT_TOKEN + 8 * _NS_PER_CALL
        return n_tokens * _NS_PER_SPARSE_TOKEN + self._sparse_fixed_cost()

    def _try_delta(self, class_row: npt.NDArray[np.int32], out: npt.NDArray[np.uint32]) -> bool:
        """On a cache miss: patch the most recently used cached row if few classes differ.

        A token's bit is its class's bit, so flipping the bits of every class that differs
        between two class rows turns one token row into the other: ``out = base ^ tokens
        of (old ^ new)``.  Taken when the cost model finds it cheaper than a fresh row.
        """
        cache = self._cache
        if not cache or self._delta is False:
            return False
        if self._delta is None and self._fresh_cost < _DELTA_MIN_FRESH_NS:
            return False
        key = next(reversed(cache))
        flips = np.bitwise_xor(np.frombuffer(key, dtype=np.uint32), class_row.view(np.uint32))
        if self._delta is None:  # bail out early when too many classes differ
            n_diff = int(np.bitwise_count(flips).sum())
            if n_diff * self._mean_class_size * _NS_PER_SPARSE_TOKEN >= self._fresh_cost:
                return False
        cls = self._row_classes(flips)
        if self._delta is None and self._listed_cost(int(self._all_len[cls].sum())) >= self._fresh_cost:
            return False
        np.copyto(out, self._cache_store[cache[key]])
        self._apply_listed(cls, (self._all_tokens, self._all_start, self._all_len), out, "xor")
        self.last_strategy = "delta"
        return True

    def _small_plan(
        self, row: npt.NDArray[np.uint32], forced: bool
    ) -> tuple[str, npt.NDArray[np.intp] | None, float]:
        """Plan for the small-class tokens: ``(plan, listed classes, estimated ns)``.

        The allowed classes (or the disallowed ones, whichever are fewer) are listed when
        there are few of them; their small-class tokens are counted from the CSR index.
        ``forced`` (strategy ``"sparse"``) lists them whatever their number.
        """
        n_small = int(self._small_ids.shape[0])
        if n_small == 0:
            return "none", None, 0.0
        c = self.num_classes
        n_set = int(np.bitwise_count(row).sum()) - int(np.bitwise_count(row[-1] & self._junk_mask))
        want_set = 2 * n_set <= c
        if not forced and min(n_set, c - n_set) > self._list_max:
            return "gather", None, self._small_gather_cost
        cls = self._row_classes(row if want_set else np.invert(row))
        n_tok = int(self._csr_len[cls].sum())
        a_tokens = n_tok if want_set else n_small - n_tok
        if a_tokens == 0:
            return "none", cls, 0.0
        if a_tokens == n_small:
            return "all", cls, self._or_cost()
        plan = "sparse" if want_set else "complement"
        cost = self._listed_cost(n_tok)
        if forced or cost < self._small_gather_cost:
            return plan, cls, cost
        return "gather", None, self._small_gather_cost

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
        strategy : {"auto", "split", "gather", "sparse"}, keyword-only
            Force one plan, bypassing the cache (tests and benchmarks); see :meth:`expand_row`.

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
        Per row: a cache lookup, then min(split cost, gather cost) on a miss.
        """
        if (  # the C kernel's fast path: plain arrays, the kernel checks the indices
            self._kernel is not None
            and strategy == "auto"
            and type(class_bitmask) is np.ndarray
            and class_bitmask.ndim == 2
            and class_bitmask.dtype == np.int32
            and class_bitmask.shape[1] == self.class_words
            and class_bitmask.flags.c_contiguous
            and type(out) is np.ndarray
            and out.ndim == 2
            and out.dtype == np.int32
            and out.shape[1] == self.num_words
            and out.flags.c_contiguous
        ):
            if indices is not None and len(indices) != class_bitmask.shape[0]:
                raise ValueError(
                    f"{len(indices)} indices given for {class_bitmask.shape[0]} class-bitmask rows"
                )
            index = None if indices is None else np.asarray(indices, dtype=np.int64)
            self.last_strategy = _C_PLANS[self._kernel.expand_rows(class_bitmask, out, index)]
            return out
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
        for dst in rows:
            if not 0 <= dst < out.shape[0]:
                raise IndexError(f"batch index {dst} out of range for a bitmask of {out.shape[0]} rows")
        if self._kernel is not None and strategy == "auto":
            index = None if indices is None else np.asarray(rows, dtype=np.int64)
            self.last_strategy = _C_PLANS[self._kernel.expand_rows(cm, out, index)]
            return out
        if strategy == "auto" and self._cache_slots and batch > 1:
            self._copy_cached_rows(cm, out, rows)
            return out
        for src, dst in enumerate(rows):
            self.expand_row(cm[src], out[dst], strategy)
        return out

    def _copy_cached_rows(
        self, cm: npt.NDArray[np.int32], out: npt.NDArray[np.int32], rows: Sequence[int]
    ) -> None:
        """Batch path: all cache hits in one fancy copy, then the misses row by row."""
        raw = cm.tobytes()
        kb = self.class_words * 4
        cache = self._cache
        hit_dst: list[int] = []
        hit_slot: list[int] = []
        misses: list[int] = []
        for i in range(cm.shape[0]):
            key = raw[i * kb : (i + 1) * kb]
            slot = cache.pop(key, -1)
            if slot >= 0:
                cache[key] = slot
                hit_dst.append(rows[i])
                hit_slot.append(slot)
            else:
                misses.append(i)
        if hit_dst:
            self._hits += len(hit_dst)
            out.view(np.uint32)[hit_dst] = self._cache_store[hit_slot]
            self.last_strategy = "cache"
        for i in misses:  # a row equal to an earlier miss of this batch is a hit here
            self.expand_row(cm[i], out[rows[i]])

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
        ValueError
            On a shape mismatch or another dtype.

        Complexity
        ----------
        Per row, one expansion (cached rows: a copy) and one pass over the logits (C kernel:
        only the disallowed ones are written).
        """
        lg = logits if logits.ndim == 2 else logits[None, :]
        if lg.dtype.kind != "f" or lg.dtype.itemsize not in (2, 4, 8):
            raise ValueError(f"logits must be float16, float32 or float64, got {lg.dtype}")
        unsigned = np.dtype(f"u{lg.dtype.itemsize}")
        pattern = int(np.array(-np.inf, dtype=lg.dtype).view(unsigned).item())
        self._mask_raw(lg.view(unsigned), class_bitmask, pattern)

    def _mask_raw(self, raw: npt.NDArray[Any], class_bitmask: npt.NDArray[np.int32], pattern: int) -> None:
        """:meth:`mask_logits` on the logits' bits: ``raw`` is an unsigned-int view of them
        (2, 4 or 8 bytes per value; bfloat16 included) and ``pattern`` the bits of ``-inf``."""
        cm = self._check_class_bitmask(class_bitmask)
        if raw.ndim != 2 or raw.shape[0] != cm.shape[0] or raw.shape[1] < self.logit_width:
            raise ValueError(f"logits of shape {raw.shape} do not fit a class bitmask of {cm.shape}")
        row = self._scratch.view(np.int32)[None, :]
        apply = None if self._kernel is None else self._apply_bitmask
        neg_inf = raw.dtype.type(pattern)
        for b in range(cm.shape[0]):
            self.expand_at(cm[b : b + 1], row, 0)
            values = raw[b]
            if apply is not None and values.flags.c_contiguous:
                apply(row, values[: self.logit_width], raw.dtype.itemsize, pattern)
            else:
                bits = np.unpackbits(row.view(np.uint8), count=self.logit_width, bitorder="little")
                np.putmask(values[: self.logit_width], bits == 0, neg_inf)
            values[self.logit_width :] = neg_inf


def _triton_kernels() -> Any:
    """The :mod:`formalgram_cfgzip._triton_expand` module, or ``None`` without Triton."""
    try:
        from formalgram_cfgzip import _triton_expand
    except Exception:  # any failure to import Triton means "not available"
        return None
    return _triton_expand


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("TorchMaskExpander needs PyTorch (pip install torch)") from exc
    return torch


class TorchMaskExpander:
    """Class bitmask -> token bitmask / masked logits with torch tensors, on the CPU or a GPU.

    On the CPU (``backend="auto"``, named ``"numpy"``) a :class:`MaskExpander` (its C kernel
    when built) runs on the tensors' memory (no copy; any float type, bfloat16 included, for
    the logits).  On CUDA ``"auto"`` takes the Triton kernels of
    :mod:`formalgram_cfgzip._triton_expand` when Triton is importable (one launch per batch:
    each program reads the class ids of 1024 logit indices, tests their bits in the class
    bitmask and ORs them into 32 words), else the ``"torch"`` backend: a gather on the
    device (unpack the class bits, ``index_select`` them by token class, pack 32 bits per
    word), with buffers kept per batch size.  No backend allocates on the host per step.

    Parameters
    ----------
    token_class : array of int
        Class id per logit index (negative: never allowed).
    num_classes : int
        Width of the class bitmask.
    device : str or torch.device, keyword-only
        Where the class bitmasks, outputs and logits live.
    backend : {"auto", "numpy", "torch", "triton"}, keyword-only
        ``"auto"``: numpy on the CPU; on other devices Triton when it can be imported,
        else torch.  ``"triton"`` needs a CUDA device (or ``TRITON_INTERPRET=1``).

    Raises
    ------
    ValueError
        On a malformed ``token_class``, a numpy backend on a non-CPU device, or a
        ``"triton"`` backend without Triton.

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
        backend: Literal["auto", "numpy", "torch", "triton"] = "auto",
    ) -> None:
        torch = _torch()
        tc = _check_token_class(token_class, num_classes)
        # resolve 'cuda' to 'cuda:<current>' so that device comparisons with tensors hold
        self.device = torch.empty(0, device=device).device
        self.logit_width = int(tc.shape[0])
        self.num_classes = num_classes
        self.num_words = (self.logit_width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        if backend == "auto":
            if self.device.type == "cpu":
                backend = "numpy"
            else:
                backend = "triton" if _triton_kernels() is not None else "torch"
        if backend == "numpy" and self.device.type != "cpu":
            raise ValueError("the numpy backend runs on the CPU only")
        self._kernels: Any = None
        if backend == "triton":
            self._kernels = _triton_kernels()
            if self._kernels is None:
                raise ValueError("the triton backend needs Triton (pip install triton)")
            if self.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
                raise ValueError(
                    "the triton backend needs a CUDA device (or TRITON_INTERPRET=1 for its interpreter)"
                )
            idx32 = np.full(self.num_words * 32, -1, dtype=np.int32)
            idx32[: self.logit_width] = np.where(tc >= 0, tc, -1)
            self._index32 = torch.from_numpy(idx32).to(self.device)
        self.backend = backend
        self._numpy: MaskExpander | None = MaskExpander(tc, num_classes) if backend == "numpy" else None
        zero_slot = self.class_words * 32  # an extra, always-zero column of the class table
        idx = np.full(self.num_words * 32, zero_slot, dtype=np.int64)
        idx[: self.logit_width] = np.where(tc >= 0, tc, zero_slot)
        self._index = torch.from_numpy(idx).to(self.device)
        self._shifts = torch.arange(32, dtype=torch.int32, device=self.device)
        self._buffers: dict[int, tuple[Any, Any, Any]] = {}
        self._staging: dict[int, Any] = {}

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
            class_bitmask = torch.from_numpy(np.ascontiguousarray(class_bitmask))
        if class_bitmask.dim() == 1:
            class_bitmask = class_bitmask.unsqueeze(0)
        if class_bitmask.dtype != torch.int32 or class_bitmask.shape[-1] != self.class_words:
            raise ValueError(
                f"class bitmask must be int32 of shape (batch, {self.class_words}), "
                f"got {class_bitmask.dtype} {tuple(class_bitmask.shape)}"
            )
        if class_bitmask.dim() != 2:
            raise ValueError(f"class bitmask must be 1-D or 2-D, got shape {tuple(class_bitmask.shape)}")
        if class_bitmask.device != self.device:
            # copy into a persistent device buffer: no device allocation per step
            batch = int(class_bitmask.shape[0])
            staged = self._staging.get(batch)
            if staged is None:
                staged = torch.empty((batch, self.class_words), dtype=torch.int32, device=self.device)
                self._staging[batch] = staged
            staged.copy_(class_bitmask)  # blocking: the caller may reuse its host buffer at once
            class_bitmask = staged
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
        elif (
            out.dtype != torch.int32
            or tuple(out.shape) != (batch, self.num_words)
            or out.device != self.device
            or not out.is_contiguous()
        ):
            raise ValueError(
                f"token bitmask must be a contiguous int32 tensor of shape ({batch}, {self.num_words}) "
                f"on {self.device}, got {out.dtype} {tuple(out.shape)} on {out.device}"
            )
        if self._numpy is not None:
            self._numpy.expand(cm.contiguous().numpy(), out.numpy())
            return out
        if self._kernels is not None:
            self._kernels.launch_expand(cm.contiguous(), self._index32, out)
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
            # through an integer view of the same width, so that bfloat16 / float16 work too
            torch = _torch()
            size = logits.element_size()
            if not logits.dtype.is_floating_point or size not in (2, 4, 8):
                raise ValueError(f"logits must be a float tensor of 2, 4 or 8 bytes, got {logits.dtype}")
            int_type = {2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
            pattern = int(torch.tensor(float("-inf"), dtype=logits.dtype).view(int_type).item())
            raw = logits.detach().view(int_type).numpy()
            unsigned = np.dtype(f"u{size}")
            self._numpy._mask_raw(raw.view(unsigned), cm.contiguous().numpy(), pattern % (1 << (8 * size)))
            return logits
        if self._kernels is not None and logits.stride(1) == 1:
            self._kernels.launch_mask_logits(logits, cm.contiguous(), self._index32, w)
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
