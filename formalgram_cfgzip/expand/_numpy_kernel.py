"""The numpy expansion kernel and its cost model (the pure-Python build's CPU kernel).

It runs when the C kernel is not built (``FORMALGRAM_NO_MYPYC=1``), is disabled
(``FORMALGRAM_NO_CEXPAND=1``) or not asked for (``MaskExpander(kernel="numpy")``), and
writes the same rows as the C kernel.

**Algorithms.**
A plain **gather** reads, for every logit index, its class's allowed byte from a table
unpacked from the class row (``np.take``), then packs 8 bytes per byte of the row
(``np.packbits``): its cost is proportional to the logit width whatever the row.  The
kernel therefore also has

* **subset tables**: the largest ("head") classes are grouped 8 at a time, and each group
  has a table of the 256 unions of its classes' token bitmasks, so a group costs one
  vector OR of ``ceil(logit_width / 32)`` words whatever subset of it is allowed (a group
  is built only while its tokens would cost more to gather than its OR);
* for the remaining ("tail") tokens, either a gather of the tail tokens alone into a
  persistent byte buffer that is zero everywhere else, or, when few tail classes are
  allowed (or disallowed), a listing of their tokens from a CSR index, set into the row
  (or cleared from the union of the tail);
* a **delta** on a row-cache miss: a token's bit is its class's bit, so the most recently
  cached row becomes the new one by flipping the tokens of the classes whose bits differ
  (``new = old ^ tokens of (old_classes ^ new_classes)``);

and the :class:`~formalgram_cfgzip.expand.row_cache.RowCache` in front of them.

**Cost model.**
Per row, the cheapest of the gather and the split (the tables' ORs plus the cheapest tail
plan) is taken, each estimated in nanoseconds from the constants below: a fixed cost per
numpy call, and a cost per word ORed, per token gathered, per bit packed and per listed
token (a Python loop up to ``_LOOP_TOKENS`` tokens, ``ufunc.at`` up to ``_AT_TOKENS``, a
full-width byte buffer beyond).  The constants were fitted with ``bench/expand_bench.py``
on the development machine; the choice affects only the speed, never the rows.  A delta is
tried only when a fresh row would cost more than ``_DELTA_MIN_FRESH_NS`` and is given up as
soon as the number of differing classes makes it dearer than a fresh row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.expand.kernel import GROUP_BITS, KernelInfo, RowWriter, forced_groups, table_budget
from formalgram_cfgzip.expand.layout import check_row_index
from formalgram_cfgzip.expand.plans import (
    CACHE,
    DELTA,
    GATHER,
    SPLIT,
    SPLIT_ALL,
    SPLIT_CLEAR,
    SPLIT_NONE,
    SPLIT_SET,
    Strategy,
)
from formalgram_cfgzip.expand.row_cache import RowCache

__all__ = ["NumpyKernel", "mask_row"]

# Cost model constants (nanoseconds).
_NS_PER_WORD_OR = 0.30  # one uint32 word of a vector OR
_NS_PER_CALL = 1000.0  # fixed overhead of one numpy call
_NS_PER_GATHER_TOKEN = 0.60  # np.take of one token (intp index) into a byte buffer
_NS_PER_PACK_BIT = 0.04  # np.packbits, per byte packed to one bit
_NS_PER_SMALL_TOKEN = 1.6  # np.take + scatter of one tail token
_NS_PER_SPARSE_TOKEN = 12.0  # one token of a listed class (listing, repeat, gather, 2 scatters)
_DELTA_MIN_FRESH_NS = 30_000.0  # try patching a cached row only when a fresh one costs more
_AT_TOKENS = 256  # listed tokens up to this many: updated by ufunc.at, no full-width buffer
_LOOP_TOKENS = 12  # up to this many: a Python loop (cheaper than ufunc.at's set-up)
_NS_PER_AT_TOKEN = 40.0  # one token updated by ufunc.at (listing included)

# the tail plans of a split row -> the plan names they are reported under
_SPLIT_PLANS = {
    "gather": SPLIT,
    "sparse": SPLIT_SET,
    "complement": SPLIT_CLEAR,
    "none": SPLIT_NONE,
    "all": SPLIT_ALL,
}

_CSR = tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]]


def mask_row(row: npt.NDArray[np.int32], values: npt.NDArray[Any], pattern: int) -> None:
    """Write ``pattern`` into the items of ``values`` whose bit in the token row is 0.

    Parameters
    ----------
    row : numpy.ndarray
        int32 token-bitmask row.
    values : numpy.ndarray
        1-D unsigned integers (a logits row's bits), any strides, at most ``32 * len(row)``.
    pattern : int
        The value written (the bits of ``-inf`` in the logits' float type).

    Examples
    --------
    >>> import numpy as np
    >>> v = np.zeros(4, dtype=np.uint16)
    >>> mask_row(np.array([0b0101], dtype=np.int32), v, 7)
    >>> v.tolist()
    [0, 7, 0, 7]
    """
    n = int(values.shape[0])
    bits = np.unpackbits(row.view(np.uint8), count=n, bitorder="little")
    np.putmask(values, bits == 0, values.dtype.type(pattern))


class NumpyKernel:
    """The numpy kernel of :class:`~formalgram_cfgzip.expand.MaskExpander` (see the module
    docstring); implements :class:`~formalgram_cfgzip.expand.kernel.ExpansionKernel`.

    Parameters
    ----------
    token_class : numpy.ndarray
        int64 class id per logit index (checked; negative: never allowed).
    num_classes : int
        Number of classes.
    memory_budget, max_dense, dense :
        The subset-table limits of :class:`~formalgram_cfgzip.expand.MaskExpander`.
    cache_rows : int
        Capacity of the row cache.
    delta : bool or None
        Patch the most recently cached row on a miss: by cost (``None``), always, never.

    Notes
    -----
    Construction O(logit_width + groups * 256 * logit_width / 32).
    """

    name = "numpy"

    def __init__(
        self,
        token_class: npt.NDArray[np.int64],
        num_classes: int,
        *,
        memory_budget: int,
        max_dense: int | None,
        dense: int | None,
        cache_rows: int,
        delta: bool | None,
    ) -> None:
        tc = token_class
        width = int(tc.shape[0])
        self.num_classes = num_classes
        self.num_words = (width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        self.last_plan = ""
        self._cache = RowCache(cache_rows, self.num_words)
        self._delta = delta
        padded_bits = self.num_words * 32
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
        table_bytes = (1 << GROUP_BITS) * self.num_words * 4
        max_groups = table_budget(memory_budget, max_dense, self.num_words) // table_bytes
        or_cost = self._or_cost()
        groups = 0
        while groups < max_groups and groups * GROUP_BITS < num_classes:
            part = int(sizes[order[groups * GROUP_BITS : (groups + 1) * GROUP_BITS]].sum())
            if part * _NS_PER_SMALL_TOKEN < or_cost:
                break
            groups += 1
        if dense is not None:
            groups = min(forced_groups(dense), forced_groups(num_classes))
        self._groups = groups
        k0 = min(num_classes, groups * GROUP_BITS)
        self._k0 = k0
        group_members = np.full(groups * GROUP_BITS, zero, dtype=np.intp)
        group_members[:k0] = order[:k0]
        self._tables = self._build_tables(full, group_members, groups)
        self._group_base = np.arange(groups, dtype=np.intp) << GROUP_BITS
        # -- tail classes: the remaining tokens, in token order and (CSR) by class
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
        # Classes listed per row at most: beyond, their tokens (at the mean tail-class size)
        # would cost more than the cheapest fresh plan without listing.
        small_sizes = counts[:num_classes][counts[:num_classes] > 0]
        mean_size = float(small_sizes.mean()) if small_sizes.shape[0] else 1.0
        # estimated cost of a fresh row in the worst case the plans allow
        self._fresh_cost = min(self._gather_cost, groups * or_cost + self._small_gather_cost)
        self._list_max = max(
            16, int((self._fresh_cost - self._sparse_fixed_cost()) / (_NS_PER_SPARSE_TOKEN * mean_size))
        )
        # Plan each row only when some row could be cheaper than "split" with a tail gather
        # (a plan costs a few µs: a short row with few tail tokens skips it).
        self._plan_rows = (
            self._small_gather_cost > self._sparse_fixed_cost()
            or groups * or_cost + self._small_gather_cost > self._gather_cost
        )
        # -- per-step scratch (reused; a matcher fills rows one at a time)
        self._table = np.zeros(self.class_words * 32 + 1, dtype=np.uint8)
        self._byte_buf = np.zeros(padded_bits, dtype=np.uint8)
        self._small_buf = np.zeros(padded_bits, dtype=np.uint8)  # zero outside tail ids
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

    def _build_tables(
        self, full: npt.NDArray[np.intp], members: npt.NDArray[np.intp], groups: int
    ) -> npt.NDArray[np.uint32]:
        size = 1 << GROUP_BITS
        tables = np.zeros((groups * size, self.num_words), dtype=np.uint32)
        for g in range(groups):
            base = g * size
            for j in range(GROUP_BITS):
                c = int(members[g * GROUP_BITS + j])
                if c == self.num_classes:
                    continue
                row = np.packbits(full == c, bitorder="little").view(np.uint32)
                lo = 1 << j
                # rows lo .. 2*lo - 1: the rows 0 .. lo - 1 with class j added
                np.bitwise_or(tables[base : base + lo], row, out=tables[base + lo : base + 2 * lo])
        return tables

    def _sparse_fixed_cost(self) -> float:
        return 10 * _NS_PER_CALL + self._pack_cost

    def _or_cost(self) -> float:
        return self.num_words * _NS_PER_WORD_OR + _NS_PER_CALL

    # -- the kernel protocol ------------------------------------------------------------
    def info(self) -> KernelInfo:
        """Sizes of the subset tables and the tail."""
        return KernelInfo(self._groups, self._k0, int(self._small_ids.shape[0]))

    def cache_stats(self) -> dict[str, int]:
        """The row cache's counters."""
        return self._cache.stats()

    def clear_cache(self) -> None:
        """Drop every cached row and reset the counters."""
        self._cache.clear()

    def keep_sets(
        self, set_start: npt.NDArray[np.int32], set_class: npt.NDArray[np.int32], max_sets: int, min_ns: float
    ) -> int:
        """None kept: this kernel patches a miss from cached rows only."""
        return 0

    def pin_rows(self, class_rows: npt.NDArray[np.int32], max_rows: int, min_ns: float) -> int:
        """None pinned: this kernel's misses go through its row cache only."""
        return 0

    def expand_row(
        self, class_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32], strategy: Strategy
    ) -> None:
        """One row: ``"auto"`` through the row cache (a hit, a delta or the cheapest fresh
        plan), another strategy forced."""
        out = out_row.view(np.uint32)
        cache = self._cache
        if strategy != "auto" or not cache.capacity:
            self._compute_row(class_row, out, strategy)
            return
        key = class_row.tobytes()
        if cache.get(key, out):
            self.last_plan = CACHE
            return
        if self._try_delta(class_row, out):
            cache.deltas += 1
        else:
            self._compute_row(class_row, out, strategy)
        cache.put(key, out)

    def expand_rows(
        self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], indices: Sequence[int] | None
    ) -> None:
        """Every class row into its output row through the row cache (a batch's hits in
        one copy, then the misses one by one)."""
        batch = class_rows.shape[0]
        rows = range(batch) if indices is None else indices
        for dst in rows:
            check_row_index(dst, out.shape[0])
        if self._cache.capacity and batch > 1:
            kb = self.class_words * 4
            raw = class_rows.tobytes()
            keys = [raw[i * kb : (i + 1) * kb] for i in range(batch)]
            misses = self._cache.copy_hits(keys, out.view(np.uint32), list(rows))
            if len(misses) < batch:
                self.last_plan = CACHE
            for i in misses:  # a row equal to an earlier miss of this batch is a hit here
                self.expand_row(class_rows[i], out[rows[i]], "auto")
            return
        for src, dst in enumerate(rows):
            self.expand_row(class_rows[src], out[dst], "auto")

    def expand_at(self, class_rows: npt.NDArray[np.int32], out: npt.NDArray[np.int32], index: int) -> None:
        """Row 0 of ``class_rows`` into row ``index`` of ``out``."""
        self.expand_row(class_rows[0], out[index], "auto")

    def row_writer(self) -> RowWriter:
        """:meth:`expand_at`."""
        return self.expand_at

    def mask_row(self, row: npt.NDArray[np.int32], values: npt.NDArray[Any], pattern: int) -> None:
        """:func:`mask_row`."""
        mask_row(row, values, pattern)

    # -- one fresh row ------------------------------------------------------------------
    def _load_table(self, class_row: npt.NDArray[np.int32]) -> None:
        bits = np.unpackbits(class_row.view(np.uint8), bitorder="little")
        t = self._table
        t[: bits.shape[0]] = bits
        t[self.num_classes :] = 0

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
            self.last_plan = GATHER
            self._load_table(class_row)
            buf = self._byte_buf
            np.take(self._table, self._gather_index, out=buf)
            out[:] = np.packbits(buf, bitorder="little").view(np.uint32)
            return
        self.last_plan = _SPLIT_PLANS[small_plan]
        # subset tables: one OR per group with a non-zero code (codes read off the class row)
        if self._groups:
            member_bits = np.bitwise_and(
                np.right_shift(row[self._member_word], self._member_shift), self._member_mask
            )
            codes = np.packbits(
                member_bits.astype(np.uint8).reshape(self._groups, GROUP_BITS), axis=1, bitorder="little"
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
        # sparse / complement: the tokens of the listed tail classes, from the CSR lists
        assert cls is not None
        csr = (self._csr_tokens, self._csr_start, self._csr_len)
        if small_plan == "sparse":
            self._apply_listed(cls, csr, out, "or")
        else:  # tail classes are disjoint from the subset tables' ones: clear inside their union
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
        self, cls: npt.NDArray[np.intp], csr: _CSR, out: npt.NDArray[np.uint32], op: str
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
        """On a cache miss: patch the most recently used cached row if few classes differ
        (``out = base ^ tokens of (old ^ new)``), when the cost model finds it cheaper than
        a fresh row (or always, with ``delta=True``)."""
        if self._delta is False:
            return False
        if self._delta is None and self._fresh_cost < _DELTA_MIN_FRESH_NS:
            return False
        recent = self._cache.most_recent()
        if recent is None:
            return False
        key, base = recent
        flips = np.bitwise_xor(np.frombuffer(key, dtype=np.uint32), class_row.view(np.uint32))
        if self._delta is None:  # bail out early when too many classes differ
            n_diff = int(np.bitwise_count(flips).sum())
            if n_diff * self._mean_class_size * _NS_PER_SPARSE_TOKEN >= self._fresh_cost:
                return False
        cls = self._row_classes(flips)
        if self._delta is None and self._listed_cost(int(self._all_len[cls].sum())) >= self._fresh_cost:
            return False
        np.copyto(out, base)
        self._apply_listed(cls, (self._all_tokens, self._all_start, self._all_len), out, "xor")
        self.last_plan = DELTA
        return True

    def _small_plan(
        self, row: npt.NDArray[np.uint32], forced: bool
    ) -> tuple[str, npt.NDArray[np.intp] | None, float]:
        """Plan for the tail tokens: ``(plan, listed classes, estimated ns)``.

        The allowed classes (or the disallowed ones, whichever are fewer) are listed when
        there are few of them; their tail tokens are counted from the CSR index.
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
