"""The domain automaton: every class's popped sequences σ_in, read top of stack first.

For a class ``k`` with representative ``t``, the displacement search ends on a trie of the
strings ``σ_out · # · reverse(σ_in)``.  The strings below its separator edges are the
reversed popped sequences; their union is one canonical trie node ``r_k`` (equal sets have
equal ids), the *domain root* of ``k``: :func:`domain_roots`.  Classes with equal roots
have equal domains ``dom(k) = {σ_in}``, hence equal masks in every context.

The mask walk reads stacks from the top, so the domains are needed top first: the
automaton built by :func:`domain_automaton` is the subset construction of the *reversed*
tries (a state is the set of trie nodes ``n`` from which ``reverse(x)`` leads to a final
node, ``x`` the symbols read so far).  A state's *output* is the set of classes ``k`` with
``r_k`` in it, i.e. with ``x ∈ dom(k)``.  The automaton is acyclic (popped sequences are at
most as long as their token) and stored as flat arrays (:class:`DomainAutomaton`).

Outputs hold all of ``dom(k)``, not only its minimal elements: a stack that starts with a
longer ``σ_in`` also starts with its prefix, so the extra outputs never change a mask (the
walk simply ORs a class it already has).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines.native._adapter import (
    DEAD,
    START,
    DisplacementSearch,
    GrammarTooLarge,
    trie_edges,
    trie_final,
    trie_union,
)

__all__ = ["DomainAutomaton", "domain_automaton", "domain_roots"]

I32 = npt.NDArray[np.int32]


@dataclass(frozen=True, eq=False)
class DomainAutomaton:
    """A deterministic acyclic automaton over stack symbols with class sets on its states.

    State 0 is the initial state (nothing read).  Edges of state ``d`` are
    ``edge_sym[edge_start[d] : edge_start[d + 1]]`` (ascending symbols) with targets
    ``edge_to[...]``.  ``out[d]`` is the id of the class set of ``d`` (``-1``: none); set
    ``s`` holds the classes ``set_class[set_start[s] : set_start[s + 1]]`` (ascending).

    Attributes
    ----------
    edge_start, edge_sym, edge_to, out, set_start, set_class : numpy.ndarray
        int32 arrays as above.
    """

    edge_start: I32
    edge_sym: I32
    edge_to: I32
    out: I32
    set_start: I32
    set_class: I32

    @property
    def num_states(self) -> int:
        """Number of states."""
        return int(self.out.shape[0])

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return int(self.edge_sym.shape[0])

    @property
    def num_sets(self) -> int:
        """Number of distinct class sets."""
        return int(self.set_start.shape[0]) - 1

    def accepted(self, word: Sequence[int]) -> frozenset[int]:
        """The classes whose domain contains ``word`` (stack symbols, top first).

        Examples
        --------
        >>> import numpy as np
        >>> a = np.asarray
        >>> d = DomainAutomaton(a([0, 1, 1], np.int32), a([7], np.int32), a([1], np.int32),
        ...                     a([-1, 0], np.int32), a([0, 2], np.int32), a([3, 5], np.int32))
        >>> sorted(d.accepted([7])), sorted(d.accepted([8]))
        ([3, 5], [])
        """
        d = 0
        for sym in word:
            lo, hi = int(self.edge_start[d]), int(self.edge_start[d + 1])
            i = lo + int(np.searchsorted(self.edge_sym[lo:hi], sym))
            if i >= hi or int(self.edge_sym[i]) != sym:
                return frozenset()
            d = int(self.edge_to[i])
        s = int(self.out[d])
        if s < 0:
            return frozenset()
        return frozenset(self.set_class[self.set_start[s] : self.set_start[s + 1]].tolist())


def domain_roots(search: DisplacementSearch, tokens: Sequence[bytes | None]) -> list[int]:
    """The domain root of each token: the trie node of the set of its reversed popped sequences.

    Parameters
    ----------
    search : DisplacementSearch
        A search over the GNF the classes were computed on.
    tokens : sequence of bytes or None
        One byte string per class (its representative), ``None`` or ``b""`` for a class
        with no text (stop, invalid).

    Returns
    -------
    list of int
        ``-1`` for a class without text or with an empty displacement; otherwise a node of
        ``search`` whose strings are exactly ``{reverse(σ_in) : (σ_in, σ_out) ∈ Δ(t)}``.
        Equal domains give equal nodes.

    Notes
    -----
    One search step per distinct (state, byte class) pair of the tokens (memoised by the
    search), plus a walk of each final trie's ``σ_out`` part to its separator edges.
    """
    roots: list[int] = []
    below_of: dict[int, int] = {}  # trie node -> union of the σ_in sets under its separators
    for data in tokens:
        if not data:
            roots.append(-1)
            continue
        node = search.run(data)
        if node in (DEAD, START):
            roots.append(-1)
            continue
        roots.append(_separated(search, node, below_of))
    return roots


def _separated(search: DisplacementSearch, node: int, memo: dict[int, int]) -> int:
    """Union of the subtries hanging below separator edges reachable from ``node`` by σ_out symbols."""
    r = memo.get(node)
    if r is not None:
        return r
    # iterative post-order over the σ_out part (a DAG)
    todo = [node]
    while todo:
        n = todo[-1]
        if n in memo:
            todo.pop()
            continue
        parts: list[int] = []
        pending = False
        for sym, child in trie_edges(search, n):
            if sym < 0:
                parts.append(child)
            else:
                c = memo.get(child)
                if c is None:
                    todo.append(child)
                    pending = True
                elif c != DEAD:
                    parts.append(c)
        if pending:
            continue
        todo.pop()
        memo[n] = trie_union(search, parts) if parts else DEAD
    return memo[node]


def domain_automaton(
    search: DisplacementSearch,
    roots: Sequence[int],
    *,
    max_states: int = 4_000_000,
    max_edges: int = 40_000_000,
) -> DomainAutomaton:
    """Build the top-first domain automaton of the classes whose domain roots are ``roots``.

    Parameters
    ----------
    search : DisplacementSearch
        The search that produced ``roots``.
    roots : sequence of int
        Class id -> domain root (:func:`domain_roots`), ``-1`` for a class never allowed by text.
    max_states, max_edges : int, keyword-only
        Bounds on the automaton; exceeding one raises :class:`GrammarTooLarge`.

    Returns
    -------
    DomainAutomaton
        Reading ``x`` from state 0 reaches a state whose output holds exactly the classes
        ``k`` with ``x ∈ dom(k)``.

    Raises
    ------
    GrammarTooLarge
        If the automaton passes ``max_states`` states or ``max_edges`` edges.

    Notes
    -----
    Subset construction of the reversed tries: O(sum over states of the trie edges into
    their nodes), in practice about the size of the tries below the domain roots (SynCode Go:
    14k trie nodes, 13k states; xml2rfc: 110k nodes, 109k states).
    """
    classes_at: dict[int, list[int]] = {}
    for k, r in enumerate(roots):
        if r >= 0:
            classes_at.setdefault(r, []).append(k)
    # the tries below the roots, with their edges reversed
    into: dict[int, list[tuple[int, int]]] = {}  # node -> (symbol, node above it)
    seen: set[int] = set()
    todo = list(classes_at)
    finals: list[int] = []
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if trie_final(search, n):
            finals.append(n)
        for sym, child in trie_edges(search, n):
            lst = into.get(child)
            if lst is None:
                into[child] = [(sym, n)]
            else:
                lst.append((sym, n))
            todo.append(child)
    first = tuple(sorted(finals))
    ids: dict[tuple[int, ...], int] = {first: 0}
    states: list[tuple[int, ...]] = [first]
    edge_start = [0]
    edge_sym: list[int] = []
    edge_to: list[int] = []
    out: list[int] = []
    set_ids: dict[tuple[int, ...], int] = {}
    i = 0
    while i < len(states):
        state = states[i]
        hit = sorted(k for n in state for k in classes_at.get(n, ()))
        if hit:
            key = tuple(hit)
            s = set_ids.get(key)
            if s is None:
                s = len(set_ids)
                set_ids[key] = s
            out.append(s)
        else:
            out.append(-1)
        step: dict[int, set[int]] = {}
        for n in state:
            for sym, above in into.get(n, ()):
                bucket = step.get(sym)
                if bucket is None:
                    step[sym] = {above}
                else:
                    bucket.add(above)
        for sym in sorted(step):
            target = tuple(sorted(step[sym]))
            j = ids.get(target)
            if j is None:
                j = len(states)
                if j >= max_states:
                    raise GrammarTooLarge("domain automaton", max_states, "states")
                ids[target] = j
                states.append(target)
            edge_sym.append(sym)
            edge_to.append(j)
        if len(edge_sym) > max_edges:
            raise GrammarTooLarge("domain automaton", max_edges, "edges")
        edge_start.append(len(edge_sym))
        i += 1
    set_start = [0]
    set_class: list[int] = []
    for key in sorted(set_ids, key=set_ids.__getitem__):
        set_class.extend(key)
        set_start.append(len(set_class))
    a = np.asarray
    return DomainAutomaton(
        a(edge_start, dtype=np.int32),
        a(edge_sym, dtype=np.int32),
        a(edge_to, dtype=np.int32),
        a(out, dtype=np.int32),
        a(set_start, dtype=np.int32),
        a(set_class, dtype=np.int32),
    )
