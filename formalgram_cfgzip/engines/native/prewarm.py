"""The class masks a native grammar reaches first: a bounded exploration from the start, whose
token rows the expander can keep before the first request (a cold start without row-cache
misses on the masks every sequence meets first).

A decoding loop's first masks of a freshly compiled grammar all miss the expander's row cache;
the costliest of them (a string's interior: most of the vocabulary, a few dozen class lists)
cost several microseconds each where a cached row costs one copy.  Those first masks are the
same for every sequence of the grammar, and a class mask depends only on the state, so the
compile step can meet them ahead of time: :func:`reachable_class_rows` walks the grammar's
states from the start over one representative token per allowed class (each stack once, the
states that show a new mask first, so that a stretch of equal masks, such as a string's
interior or the digits of a counted repetition, does not hide the masks beyond it), and
:meth:`NativeCompiled.prewarm <formalgram_cfgzip.engines.native.matcher.NativeCompiled.prewarm>`
hands the class masks it met to :meth:`MaskExpander.pin_rows
<formalgram_cfgzip.expand.cpu.MaskExpander.pin_rows>`.  A row-cache miss whose class mask is one
of them is then one copy of its pinned token row.

The class masks themselves cost a walk of the stack, and a new sequence's first walks are the
longest ones (at the start of a JSON object every key the schema allows is open, each a chain of
one-symbol nodes).  They are also the same for every sequence: the state after a path of token
classes from the start depends on that path alone.  :func:`remember_prefixes` stores the class
masks of the first paths, breadth first, in the C kernel's prefix memo, which every matcher of
the grammar follows while its accepted classes are a path of it, filling without a walk.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import EngineError

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.native.matcher import NativeCompiled, StateLike

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


def _stack_key(
    state: StateLike, canon: dict[tuple[int, tuple[int, ...]], int], known: dict[int, int], old: int
) -> tuple[int, ...]:
    """The stack of ``state`` under a canonical name: the sorted canonical ids of its tops.

    A node's canonical id names its symbol and its parents' ids (interned in ``canon``), so two
    states have one key exactly when their stacks hold the same paths, and then the same
    future: the class mask of every continuation.  ``known`` keeps the ids of the nodes below
    ``old`` (those of the state explored, shared by its successors); the ids of newer nodes
    (a successor's pushes, numbered again after each rollback) are not kept.
    """
    local: dict[int, int] = {}

    def cid(v: int) -> int:
        """Node ``v``'s canonical id, -1 before it is named."""
        return (known if v < old else local).get(v, -1)

    tops = state.tops()
    todo = list(tops)
    while todo:  # post-order without recursion: a node after its parents
        v = todo[-1]
        if cid(v) >= 0:
            todo.pop()
            continue
        sym, parents = state.node(v)
        missing = [u for u in parents if cid(u) < 0]
        if missing:
            todo.extend(missing)
            continue
        todo.pop()
        ids = tuple(sorted({cid(u) for u in parents}))
        (known if v < old else local)[v] = canon.setdefault((sym, ids), len(canon))
    return tuple(sorted({cid(v) for v in tops}))


def reachable_class_rows(
    compiled: NativeCompiled,
    *,
    max_rows: int = 256,
    max_seconds: float = 1.0,
) -> npt.NDArray[np.int32]:
    """Distinct class masks reachable from the start, the states that show a new one first.

    From the initial state, every allowed class (the stop class aside) is accepted by its
    representative in turn.  Each state met is named by its stack (two states with the same
    stack have the same future) and explored once: a state whose class mask is new before any
    whose mask was met already, and among those, the fewer steps since its path last met a new
    mask the sooner, then the shallower.  So the exploration goes through a stretch of equal
    masks (the digits of a counted repetition, a string's interior) to the masks beyond it
    without being held up by the states of the stretch.  Every mask returned is exact; which
    ones are met within the budget is a heuristic.

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
        ``(n, compiled.engine_words)`` int32 class masks, in the order met, the start's first;
        ``n <= max_rows``.

    Raises
    ------
    EngineError
        On ``max_rows < 1`` or a negative or non-finite ``max_seconds``.

    Notes
    -----
    Cost: per explored state, one replay of its path from the start (its length in tokens;
    its class mask is the one filled when it was met), then per allowed class one token
    accepted, the new stack nodes named, one class fill and one rollback; within ``max_seconds`` (checked after every accepted token); memory for
    ``max_rows`` class masks, and a name and a path per state met.

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
    n, stop, never, tokens = (
        compiled.engine_size,
        compiled.stop_class,
        compiled.never_list,
        compiled.engine_tokens,
    )
    row = np.zeros(compiled.engine_words, dtype=np.int32)
    canon: dict[tuple[int, tuple[int, ...]], int] = {}
    state = compiled.new_state()
    state.fill(row)
    seen = {row.tobytes(): 0}  # each distinct mask met: its index in rows
    rows = [row.copy()]
    met = {_stack_key(state, canon, {}, 0)}
    # (steps since the path last met a new mask, path length, order met, path, its mask's index
    # in rows): a path waits with the class mask filled when it was met
    todo: list[tuple[int, int, int, tuple[int, ...], int]] = [(0, 0, 0, (), 0)]
    order = 1
    while todo and len(rows) < max_rows and time.perf_counter() < deadline:
        stale, _, _, path, at = heapq.heappop(todo)
        state.reset()
        for c in path:
            state.accept_class(tokens[c], c)
        old = state.info()["nodes"]
        known: dict[int, int] = {}  # names of the explored state's nodes, kept for its successors
        for c in _allowed(rows[at], n):
            if c == stop or never[c] or not state.accept_class(tokens[c], c):
                continue
            key = _stack_key(state, canon, known, old)
            if key not in met:
                met.add(key)
                state.fill(row)
                mask = row.tobytes()
                new = mask not in seen
                if new:
                    seen[mask] = len(rows)
                    rows.append(row.copy())
                entry = (0 if new else stale + 1, len(path) + 1, order, (*path, c), seen[mask])
                heapq.heappush(todo, entry)
                order += 1
            state.rollback(1)
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
