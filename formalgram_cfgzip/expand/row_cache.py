"""The LRU cache of expanded token rows of the numpy kernel, and the cache size rule.

Decoding revisits the same matcher states constantly (every step inside a string or a
comment has the same class mask), so an expanded token row is kept, keyed by the bytes of
its class-bitmask row, and a hit is one copy of ``4 * ceil(logit_width / 32)`` bytes.  The
rows live in one preallocated ``(capacity, words)`` array; a dict maps each key to its
slot and keeps the keys in recency order (a hit moves its key to the end, the first key is
evicted).  The C kernel keeps its own cache (an open-addressing table in C) of the same
capacity, from :func:`cache_capacity`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["RowCache", "cache_capacity"]

_ENTRY_OVERHEAD = 100  # bytes per entry besides its row and key (dict slot, bytes object)


def cache_capacity(cache_bytes: int, num_words: int, class_words: int) -> int:
    """Rows a cache of ``cache_bytes`` holds: each costs its token row, its class-row key
    and a fixed overhead.

    Parameters
    ----------
    cache_bytes : int
        The cache's byte budget (``>= 0``).
    num_words, class_words : int
        Words of a token row and of a class row.

    Returns
    -------
    int
        ``cache_bytes // (4 * num_words + 4 * class_words + 100)``.

    Examples
    --------
    >>> cache_capacity(8 << 20, 4008, 1)  # 8 MiB of 128k-token rows
    519
    """
    return cache_bytes // (4 * num_words + 4 * class_words + _ENTRY_OVERHEAD)


class RowCache:
    """LRU cache of token rows keyed by class-row bytes, with hit / miss counters.

    Parameters
    ----------
    capacity : int
        Number of rows (``0``: nothing is ever stored).
    num_words : int
        Words of a token row.

    Notes
    -----
    A lookup hashes the key (O(key bytes)) and copies the row on a hit; a store evicts
    the least recently used row when full.  :attr:`deltas` is counted by the kernel (the
    misses it patched from the most recent row).

    Examples
    --------
    >>> import numpy as np
    >>> cache = RowCache(1, 2)
    >>> row = np.zeros(2, dtype=np.uint32)
    >>> cache.get(b"k", row)
    False
    >>> cache.put(b"k", np.array([1, 2], dtype=np.uint32))
    >>> cache.get(b"k", row), row.tolist()
    (True, [1, 2])
    >>> cache.stats()["hits"], cache.stats()["misses"]
    (1, 1)
    """

    def __init__(self, capacity: int, num_words: int) -> None:
        self.capacity = capacity
        self._rows = np.zeros((capacity, num_words), dtype=np.uint32)
        self._slots: dict[bytes, int] = {}  # key -> row of _rows, least recently used first
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.deltas = 0

    def get(self, key: bytes, out: npt.NDArray[np.uint32]) -> bool:
        """Copy the row of ``key`` into ``out`` and mark it most recently used (a hit), or
        count a miss.

        Returns
        -------
        bool
            Whether ``key`` was cached.
        """
        slots = self._slots
        slot = slots.pop(key, -1)
        if slot < 0:
            self.misses += 1
            return False
        slots[key] = slot  # most recently used: last in the dict's order
        np.copyto(out, self._rows[slot])
        self.hits += 1
        return True

    def put(self, key: bytes, row: npt.NDArray[np.uint32]) -> None:
        """Store a copy of ``row`` under ``key`` (absent), evicting the least recently used
        row when full."""
        slots = self._slots
        if len(slots) < self.capacity:
            slot = len(slots)
        else:
            slot = slots.pop(next(iter(slots)))
            self.evictions += 1
        slots[key] = slot
        np.copyto(self._rows[slot], row)

    def most_recent(self) -> tuple[bytes, npt.NDArray[np.uint32]] | None:
        """The most recently used key and its row (a view: do not write it), or ``None``."""
        if not self._slots:
            return None
        key = next(reversed(self._slots))
        return key, self._rows[self._slots[key]]

    def copy_hits(self, keys: list[bytes], out: npt.NDArray[np.uint32], rows: list[int]) -> list[int]:
        """A batch's hits in one fancy copy: ``out[rows[i]]`` gets the row of ``keys[i]``
        for every cached key (marked most recently used, in batch order).

        Misses are not counted here: the caller looks each of them up again (a row equal
        to an earlier miss of the batch is then a hit).

        Returns
        -------
        list of int
            The positions ``i`` whose key is not cached.
        """
        slots = self._slots
        hit_dst: list[int] = []
        hit_slot: list[int] = []
        misses: list[int] = []
        for i, key in enumerate(keys):
            slot = slots.pop(key, -1)
            if slot >= 0:
                slots[key] = slot
                hit_dst.append(rows[i])
                hit_slot.append(slot)
            else:
                misses.append(i)
        if hit_dst:
            self.hits += len(hit_dst)
            out[hit_dst] = self._rows[hit_slot]
        return misses

    def stats(self) -> dict[str, int]:
        """``hits``, ``misses`` (of which ``deltas`` were patched from a cached row),
        ``evictions``, ``entries`` and ``capacity`` (rows)."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "deltas": self.deltas,
            "entries": len(self._slots),
            "capacity": self.capacity,
        }

    def clear(self) -> None:
        """Drop every row and reset the counters."""
        self._slots.clear()
        self.hits = self.misses = self.evictions = self.deltas = 0
