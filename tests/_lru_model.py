"""An independent model of a least-recently-used cache, the oracle for the row caches of
:class:`formalgram_cfgzip.expand.MaskExpander` (the numpy kernel's
:class:`~formalgram_cfgzip.expand.row_cache.RowCache` and the C kernel's own)."""

from __future__ import annotations


def lru_model(keys: list[bytes], capacity: int) -> tuple[int, int, int]:
    """Hits, misses and evictions of an LRU cache of ``capacity`` entries looking up ``keys``
    in order (a plain list, least recently used first: slow, obviously right)."""
    entries: list[bytes] = []
    hits = misses = evictions = 0
    for key in keys:
        if key in entries:
            hits += 1
            entries.remove(key)
        else:
            misses += 1
            if len(entries) == capacity:
                entries.pop(0)
                evictions += 1
        entries.append(key)
    return hits, misses, evictions
