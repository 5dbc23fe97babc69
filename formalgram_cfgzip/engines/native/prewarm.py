"""The class masks a native grammar reaches first: a bounded breadth-first exploration from the
start, whose token rows the expander can keep before the first request (a cold start without
row-cache misses on the masks every sequence meets first).

A decoding loop's first masks of a freshly compiled grammar all miss the expander's row cache;
the costliest of them (a string's interior: most of the vocabulary, a few dozen class lists)
cost several microseconds each where a cached row costs one copy.  Those first masks are the
same for every sequence of the grammar, and a class mask depends only on the state, so the
compile step can meet them ahead of time: :func:`reachable_class_rows` walks the grammar's
states from the start over one representative token per allowed class, and
:meth:`NativeCompiled.prewarm <formalgram_cfgzip.engines.native.matcher.NativeCompiled.prewarm>`
hands the class masks it met to :meth:`MaskExpander.keep_sets
<formalgram_cfgzip.expand.cpu.MaskExpander.keep_sets>`, beside the domain automaton's sets.  A
row-cache miss whose class mask is one of them is then one copy of its kept token row.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import EngineError

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.native.matcher import NativeCompiled

__all__ = ["reachable_class_rows"]


def reachable_class_rows(
    compiled: NativeCompiled,
    *,
    max_rows: int = 256,
    max_seconds: float = 1.0,
) -> npt.NDArray[np.int32]:
    """Distinct class masks reachable from the start, breadth first.

    From the initial state, every allowed class (the stop class aside) is accepted by its
    representative in turn; each class mask not met before is kept, and the state that first
    showed it is explored later.  States with a class mask already met are not explored again:
    a heuristic that keeps the exploration within the number of distinct masks (two states
    with one mask usually lie at one place of the grammar), so that some reachable masks may be
    missed; every mask returned is exact.

    Parameters
    ----------
    compiled : NativeCompiled
        The grammar.
    max_rows : int
        Most class masks returned (the start's included).
    max_seconds : float
        Wall-clock budget: the exploration stops, keeping what it met, once it is spent.

    Returns
    -------
    numpy.ndarray
        ``(n, compiled.engine_words)`` int32 class masks, in the order met (by depth), the
        start's first; ``n <= max_rows``.

    Raises
    ------
    EngineError
        On ``max_rows < 1`` or a negative or non-finite ``max_seconds``.

    Notes
    -----
    Cost: per explored state, one replay of its path from the start (its depth in tokens),
    then per allowed class one token accepted, one class fill and one rollback; within
    ``max_seconds`` (checked after every accepted token) and ``max_rows`` class masks of
    memory.  A grammar compiled with ``max_rollback_tokens=0`` replays the path per class
    instead of rolling back.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> from formalgram_cfgzip.engines import compile_grammar
    >>> vocab = Vocabulary([b"[", b"]", b"[]", b"a", b"b", b"ab", b"</s>"], special_ids=[6], stop_ids=[6])
    >>> text = 'root ::= "[" ("a" | "b")* "]"'
    >>> g = compile_grammar(compress(text, vocab, progress=False), text, engine="native")
    >>> rows = reachable_class_rows(g)
    >>> rows.shape[0]  # at the start, inside the brackets, after them
    3
    """
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < 1:
        raise EngineError(f"max_rows must be an integer >= 1, got {max_rows!r}")
    if not (isinstance(max_seconds, (int, float)) and 0.0 <= float(max_seconds) < float("inf")):
        raise EngineError(f"max_seconds must be a finite number >= 0, got {max_seconds!r}")
    deadline = time.perf_counter() + float(max_seconds)
    n, stop = compiled.engine_size, compiled.stop_class
    can_roll = compiled.max_rollback_tokens is None or compiled.max_rollback_tokens >= 1
    cm = compiled.allocate_class_bitmask(1)
    start = compiled.matcher()
    start.fill_next_class_bitmask(cm, 0)
    seen: dict[bytes, int] = {cm[0].tobytes(): 0}
    rows = [cm[0].copy()]
    queue: deque[tuple[int, ...]] = deque([()])
    while queue and len(rows) < max_rows and time.perf_counter() < deadline:
        path = queue.popleft()
        m = compiled.matcher()
        for c in path:
            m._accept_engine_id(c)
        m.fill_next_class_bitmask(cm, 0)
        allowed = np.flatnonzero(np.unpackbits(cm[0].view(np.uint8), bitorder="little")[:n])
        for c in allowed.tolist():
            if c == stop or not m._accept_engine_id(c):
                continue
            m.fill_next_class_bitmask(cm, 0)
            key = cm[0].tobytes()
            if key not in seen:
                seen[key] = len(rows)
                rows.append(cm[0].copy())
                queue.append((*path, c))
            if can_roll:
                m.rollback(1)
            else:
                m = compiled.matcher()
                for p in path:
                    m._accept_engine_id(p)
            if len(rows) >= max_rows or time.perf_counter() >= deadline:
                break
    return np.stack(rows).astype(np.int32, copy=False)
