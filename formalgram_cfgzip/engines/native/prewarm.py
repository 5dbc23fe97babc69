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

The class masks themselves cost a walk of the stack, and a new sequence's first walks are the
longest ones (at the start of a JSON object every key the schema allows is open, each a chain of
one-symbol nodes).  They are also the same for every sequence: the state after a path of token
classes from the start depends on that path alone.  :func:`remember_prefixes` stores the class
masks of the first paths, breadth first, in the C kernel's prefix memo, which every matcher of
the grammar follows while its accepted classes are a path of it, filling without a walk.
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

__all__ = ["reachable_class_rows", "remember_prefixes"]


def _check_bounds(name: str, most: object, max_seconds: object) -> float:
    if isinstance(most, bool) or not isinstance(most, (int, np.integer)) or most < 1:
        raise EngineError(f"{name} must be an integer >= 1, got {most!r}")
    if not (isinstance(max_seconds, (int, float)) and 0.0 <= float(max_seconds) < float("inf")):
        raise EngineError(f"max_seconds must be a finite number >= 0, got {max_seconds!r}")
    return time.perf_counter() + float(max_seconds)


def _allowed(row: npt.NDArray[np.int32], n: int) -> list[int]:
    """The classes set in a class row."""
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:n]
    return [int(c) for c in np.flatnonzero(bits)]


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
    deadline = _check_bounds("max_rows", max_rows, max_seconds)
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
        for c in _allowed(cm[0], n):
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


def remember_prefixes(
    compiled: NativeCompiled,
    *,
    max_prefixes: int = 1024,
    max_seconds: float = 1.0,
) -> tuple[int, npt.NDArray[np.int32]]:
    """Store the class masks of the first paths from the start in the C kernel's prefix memo.

    Breadth first over paths of token classes (one representative token per class, the stop
    class aside): each path's class mask is stored under it, so that a matcher of ``compiled``
    whose accepted tokens' classes are that path fills without walking its stack.  The memo is
    the C tables' own (shared by every matcher of the grammar, kept for its life, only added
    to): a second call extends it, up to ``max_prefixes`` paths in all.

    Parameters
    ----------
    compiled : NativeCompiled
        The grammar.
    max_prefixes : int
        Most paths the memo holds (the empty path included); each holds one class row of
        ``compiled.engine_words`` words.
    max_seconds : float
        Wall-clock budget: the exploration stops, keeping what it stored, once it is spent.

    Returns
    -------
    tuple of (int, numpy.ndarray)
        The paths the memo holds, and the distinct class masks met, ``(n, engine_words)``
        int32 in the order met (by depth); ``(0, empty)`` with the pure-Python kernel, which
        keeps no memo.

    Raises
    ------
    EngineError
        On ``max_prefixes < 1`` or a negative or non-finite ``max_seconds``.

    Notes
    -----
    Cost: per path explored, a replay of it from the start (its depth in tokens) and one class
    fill, then per allowed class one token accepted, one class fill (a walk: the new path's
    mask, stored) and one rollback; within ``max_seconds`` (checked after every path stored)
    and ``max_prefixes`` rows of memory.  Masks are unchanged: a stored mask is the one the
    walk computes for the state its path reaches.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> from formalgram_cfgzip.engines import compile_grammar
    >>> vocab = Vocabulary([b"[", b"]", b"[]", b"a", b"b", b"ab", b"</s>"], special_ids=[6], stop_ids=[6])
    >>> text = 'root ::= "[" ("a" | "b")* "]"'
    >>> g = compile_grammar(compress(text, vocab, progress=False), text, engine="native")
    >>> stored, rows = remember_prefixes(g, max_prefixes=4)
    >>> stored in (0, 4)  # the start, "[", "[]" and one path below "[" (0: pure-Python kernel)
    True
    >>> rows.shape[0] in (0, 3), rows.shape[1] == g.engine_words  # three distinct masks
    (True, True)
    """
    deadline = _check_bounds("max_prefixes", max_prefixes, max_seconds)
    words, n, stop = compiled.engine_words, compiled.engine_size, compiled.stop_class
    state = compiled.new_state()
    remember = getattr(state, "remember", None)
    if remember is None:
        return 0, np.zeros((0, words), dtype=np.int32)
    most = int(max_prefixes)
    tokens, never = compiled.engine_tokens, compiled.never_list
    row = np.zeros(words, dtype=np.int32)
    rows: dict[bytes, npt.NDArray[np.int32]] = {}

    def keep() -> npt.NDArray[np.int32]:
        """The state's class mask, kept among the distinct ones met."""
        state.fill(row)
        return rows.setdefault(row.tobytes(), row.copy())

    if remember(most) < 0:
        return state.info()["prefixes"], np.zeros((0, words), dtype=np.int32)
    # each path waits with its class mask, filled when it was stored
    queue: deque[tuple[tuple[int, ...], npt.NDArray[np.int32]]] = deque([((), keep())])
    full = False
    while queue and not full:
        path, mask = queue.popleft()
        state.reset()
        for c in path:
            state.accept_class(tokens[c], c)
        for c in _allowed(mask, n):
            if c == stop or never[c] or not state.accept_class(tokens[c], c):
                continue
            full = remember(most) < 0 or time.perf_counter() >= deadline
            if not full:
                queue.append(((*path, c), keep()))
            state.rollback(1)
            if full:
                break
    stored = state.info()["prefixes"]
    return stored, np.stack(list(rows.values())).astype(np.int32, copy=False)
