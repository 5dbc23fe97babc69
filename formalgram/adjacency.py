"""Stack adjacency of the one-state PDA of a GNF grammar (CFGzip paper, 3.2.2 and appendix).

Every function here speaks in nonterminal ids (graph nodes, pairs, indices), like the rest
of the toolkit; ``gnf.names[i]`` gives a name.

**The relation.**
Let ``P`` be the PDA of a GNF grammar (:class:`formalgram.pda.PDA`).  A stack is
*reachable* when the PDA reaches it from the initial stack ``(S)`` by reading some
bytes.  The **stack adjacency** relation is

    ``X -> Y``  iff  ``X`` sits *immediately above* ``Y`` in some reachable stack.

Equivalently (for a trimmed grammar): ``Y`` can be the symbol uncovered when ``X`` is
popped, so when ``X`` is expanded by a rule with no nonterminal (``X -> a``), ``Y`` is the
very next symbol the PDA pops.  The paper's backtrack step only uses this special case
(pairs whose upper symbol has such a rule): :func:`backtrack_pairs`.

Rules that mention a non-generating nonterminal are ignored (as in the PDA): a stack holding
such a symbol can never be emptied, so it occurs in no accepting run.  With that trimming and
``reachable_only=True``, the relation is exactly the set of pairs that occur in stacks of
accepting runs (a reachable stack of generating symbols can always be popped down to any of
its positions and then emptied).  Proof and discussion: ``proofs/stack_adjacency.md``.

**How it is computed.**
Pushing ``B1 ... Bn`` (``B1`` on top) in place of ``A`` creates exactly the new adjacent
pairs ``(B_i, B_{i+1})`` and ``(B_n, C)`` where ``C`` was below ``A``.  So the relation is the
least one containing the *seeds* ``(B_i, B_{i+1})`` of every usable rule and closed under
``(A, C) in R, A -> a ... B  ==>  (B, C) in R`` (``B`` the rightmost nonterminal of a rule of
``A``).  With ``H`` the "rightmost nonterminal" graph (edge ``A -> B`` per rule
``A -> a β B``), that is: ``(W, Z)`` for every seed ``(X, Z)`` and every ``W`` reachable from ``X``
in ``H`` (``X`` itself included).

So the set of symbols below ``W`` is the union of the seed sets of every ``X`` that reaches
``W``: one propagation along the edges of ``H``.  The strongly connected components of ``H``
(every member reaches every other, so they share one set) are visited in topological order,
each passing its set on to the components its edges enter; the sets are bit sets held in
Python ints (:func:`below_bits`).  Every function of this module reads the relation from
that one computation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import networkx as nx

from formalgram.analysis import generating_rules, reachable
from formalgram.grammar import Grammar
from formalgram.transforms.gnf_check import require_gnf
from formalgram.transforms.unit import sccs

__all__ = ["backtrack_pairs", "below_bits", "can_be_below", "rightmost_graph", "stack_adjacency"]


def _usable_rules(gnf: Grammar, reachable_only: bool, trim: bool) -> list[tuple[int, tuple[int, ...]]]:
    """Rules (non-empty, GNF) kept for the relation, as ``(lhs, (B1, ..., Bn))``."""
    require_gnf(gnf, "stack adjacency")
    rules = gnf.rules
    kept: Sequence[int] = generating_rules(gnf) if trim else range(len(rules))
    if reachable_only:
        reach = reachable(gnf, kept)
        kept = [ri for ri in kept if rules[ri][0] in reach]
    out: list[tuple[int, tuple[int, ...]]] = []
    for ri in kept:
        lhs, rhs = rules[ri]
        if rhs:
            out.append((lhs, rhs[1:]))
    return out


def rightmost_graph(gnf: Grammar, *, reachable_only: bool = True, trim: bool = True) -> nx.DiGraph:
    """The "rightmost nonterminal" graph ``H`` of a GNF grammar, on nonterminal ids.

    Edge ``A -> B`` for every rule ``A -> a β B``; every nonterminal id is a node.

    Parameters
    ----------
    gnf : Grammar
        A GNF grammar.
    reachable_only, trim : bool, keyword-only
        As in :func:`stack_adjacency`.

    Returns
    -------
    networkx.DiGraph
        Nodes are nonterminal ids (all of them).

    Raises
    ------
    GrammarError
        If ``gnf`` is not in GNF (:func:`~formalgram.transforms.gnf_check.gnf_violation`).

    Notes
    -----
    O(total rule length): linear, so no budget; raises only for a non-GNF grammar.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A = Nonterminal("S"), Nonterminal("A")
    >>> x = ByteSet.single(ord("x"))
    >>> g = Grammar([Production(S, [x, A, A]), Production(A, [x])], "S")
    >>> sorted(rightmost_graph(g).edges)
    [(0, 1)]
    """
    return _rightmost(len(gnf.names), _usable_rules(gnf, reachable_only, trim))


def _rightmost(n: int, rules: list[tuple[int, tuple[int, ...]]]) -> nx.DiGraph:
    """The graph ``H`` on ids ``0 .. n-1``: edge ``A -> Bn`` for each rule ``(A, (B1, ..., Bn))``."""
    h = nx.DiGraph()
    h.add_nodes_from(range(n))
    h.add_edges_from((lhs, push[-1]) for lhs, push in rules if push)
    return h


def below_bits(gnf: Grammar, *, reachable_only: bool = True, trim: bool = True) -> list[int]:
    """Nonterminal id ``X`` -> bit set (a Python int) of the ids that can sit immediately below ``X``.

    The relation of :func:`stack_adjacency` as bit sets: bit ``Y`` of ``below_bits(gnf)[X]``
    is set iff ``X -> Y`` is an edge there.

    Parameters
    ----------
    gnf : Grammar
        A GNF grammar.
    reachable_only, trim : bool, keyword-only
        As in :func:`stack_adjacency`.

    Returns
    -------
    list of int
        Indexed by nonterminal id.

    Raises
    ------
    GrammarError
        If ``gnf`` is not in GNF.

    Notes
    -----
    The seed sets are propagated along the rightmost-nonterminal graph ``H`` over its
    strongly connected components (iterative Tarjan, then one pass in topological order):
    O(V + E) steps, each a bit-set union of O(V / 30) machine words, plus the total rule
    length to collect the seeds.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A, B = Nonterminal("S"), Nonterminal("A"), Nonterminal("B")
    >>> x = ByteSet.single(ord("x"))
    >>> g = Grammar([Production(S, [x, A, B]), Production(A, [x, A]), Production(A, [x]),
    ...              Production(B, [x])], "S")
    >>> [bin(b) for b in below_bits(g)]  # A (id 1) can lie above B (id 2), after any number of A -> x A
    ['0b0', '0b100', '0b0']
    """
    return _propagate(len(gnf.names), _usable_rules(gnf, reachable_only, trim))


def _propagate(n: int, rules: list[tuple[int, tuple[int, ...]]]) -> list[int]:
    """The seed sets of ``rules`` closed along their rightmost-nonterminal graph, as bit sets."""
    succ: list[list[int]] = [[] for _ in range(n)]
    seeds = [0] * n  # upper symbol X -> bit set of the Z with a seed (X, Z)
    for lhs, push in rules:
        m = len(push)
        if m:
            succ[lhs].append(push[m - 1])
            for i in range(m - 1):
                seeds[push[i]] |= 1 << push[i + 1]
    comp, order = _components(succ)
    # Tarjan emits a component after every component it reaches: reversed, a topological order
    inflow = [0] * len(order)
    below = [0] * n
    for ci in range(len(order) - 1, -1, -1):
        members = order[ci]
        bits = inflow[ci]
        for v in members:
            bits |= seeds[v]
        for v in members:
            below[v] = bits
        if bits:
            for v in members:
                for w in succ[v]:
                    cw = comp[w]
                    if cw != ci:
                        inflow[cw] |= bits
    return below


def _components(succ: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Strongly connected components of the graph ``succ`` (:func:`~formalgram.transforms.unit.sccs`).

    Returns the component index of each vertex and the components' members, components
    numbered in the order Tarjan completes them (each after every component it reaches).
    """
    order = sccs(len(succ), succ)
    comp = [-1] * len(succ)
    for ci, members in enumerate(order):
        for v in members:
            comp[v] = ci
    return comp, order


# byte value -> the positions of its set bits, ascending
_BYTE_BITS: Final[tuple[tuple[int, ...], ...]] = tuple(
    tuple(i for i in range(8) if (b >> i) & 1) for b in range(256)
)


def _members(bits: int) -> list[int]:
    """The positions of the set bits of ``bits`` (non-negative), ascending.

    One conversion to bytes, then one small-int step per byte (a table per byte value), so
    a set of ``V`` possible members costs O(V / 8) steps plus its size.
    """
    out: list[int] = []
    data = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
    for j in range(len(data)):
        byte = data[j]
        if byte:
            base = j << 3
            for i in _BYTE_BITS[byte]:
                out.append(base + i)
    return out


def _pairs(gnf: Grammar, reachable_only: bool, trim: bool) -> list[tuple[int, int]]:
    """The relation as id pairs, sorted."""
    below = below_bits(gnf, reachable_only=reachable_only, trim=trim)
    return [(x, y) for x in range(len(below)) for y in _members(below[x])]


def stack_adjacency(gnf: Grammar, *, reachable_only: bool = True, trim: bool = True) -> nx.DiGraph:
    """The stack-adjacency relation of the PDA of a GNF grammar, as a directed graph.

    Edge ``X -> Y`` means: ``X`` can sit immediately above ``Y`` in some stack the PDA reaches
    from ``(S)``; equivalently, ``Y`` can be the next symbol popped after ``X`` is popped by a
    rule that pushes nothing.

    Parameters
    ----------
    gnf : Grammar
        A grammar in GNF (see :mod:`formalgram.pda`).
    reachable_only : bool, keyword-only
        Only use rules whose left-hand side is reachable from the start (default).  With
        ``False`` the result also holds pairs from unreachable rules: a superset, still safe.
    trim : bool, keyword-only
        Ignore rules that mention a non-generating nonterminal or whose terminal is the empty
        byte set (default), as the PDA does: such rules occur in no accepting run.

    Returns
    -------
    networkx.DiGraph
        One node per nonterminal id (all of them, isolated ones included) with node
        attribute ``name``, and one edge per adjacent pair of ids.

    Raises
    ------
    GrammarError
        If ``gnf`` is not in GNF (:func:`~formalgram.transforms.gnf_check.gnf_violation`).

    Notes
    -----
    One propagation (:func:`below_bits`): O(V + E) bit-set unions of V bits each, with V
    the nonterminals and E the edges of the rightmost-nonterminal graph, plus
    O(|result|); at most quadratic in the grammar, and the result has at most V^2 pairs.
    Polynomial and bounded by the grammar's size, so it takes no budget (a GNF within :func:`~formalgram.to_gnf`'s default
    budget has at most 200,000 rules).

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A, B = Nonterminal("S"), Nonterminal("A"), Nonterminal("B")
    >>> x = ByteSet.single(ord("x"))
    >>> g = Grammar([Production(S, [x, A, B]), Production(A, [x]), Production(B, [x])], "S")
    >>> adj = stack_adjacency(g)
    >>> [(g.names[u], g.names[v]) for u, v in sorted(adj.edges)]
    [('A', 'B')]
    >>> adj.nodes[1]["name"]
    'A'
    """
    d = nx.DiGraph()
    for i, name in enumerate(gnf.names):
        d.add_node(i, name=name)
    d.add_edges_from(_pairs(gnf, reachable_only, trim))
    return d


def can_be_below(
    gnf: Grammar, *, reachable_only: bool = True, trim: bool = True
) -> tuple[frozenset[int], ...]:
    """Nonterminal id ``X`` -> the ids ``Y`` that can sit immediately below ``X``.

    Same relation as :func:`stack_adjacency`, indexed for fast lookup (for example to check
    that consecutive symbols of a displacement's input stack can be adjacent).

    Parameters
    ----------
    gnf : Grammar
    reachable_only, trim : bool, keyword-only
        As in :func:`stack_adjacency`.

    Returns
    -------
    tuple of frozenset of int
        Indexed by nonterminal id.

    Raises
    ------
    GrammarError
        If ``gnf`` is not in GNF.

    Notes
    -----
    As :func:`stack_adjacency`.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A, B = Nonterminal("S"), Nonterminal("A"), Nonterminal("B")
    >>> x = ByteSet.single(ord("x"))
    >>> g = Grammar([Production(S, [x, A, B]), Production(A, [x]), Production(B, [x])], "S")
    >>> [sorted(g.names[y] for y in ys) for ys in can_be_below(g)]
    [[], ['B'], []]
    """
    sets: dict[int, frozenset[int]] = {}  # symbols with equal bit sets share one frozenset
    out: list[frozenset[int]] = []
    for bits in below_bits(gnf, reachable_only=reachable_only, trim=trim):
        fs = sets.get(bits)
        if fs is None:
            fs = frozenset(_members(bits))
            sets[bits] = fs
        out.append(fs)
    return tuple(out)


def backtrack_pairs(
    gnf: Grammar, *, reachable_only: bool = True, trim: bool = True
) -> frozenset[tuple[int, int]]:
    """The pairs ``(Y, Z)`` of the relation whose upper symbol ``Y`` has a rule ``Y -> a``.

    These are the only pairs the paper's stack backtrack consults: the displacement search
    runs out of output stack exactly when it pops a symbol ``Y`` by a rule that pushes
    nothing, and then the next symbol to pop, ``Z``, is the one below ``Y``.

    Parameters
    ----------
    gnf : Grammar
    reachable_only, trim : bool, keyword-only
        As in :func:`stack_adjacency`.

    Returns
    -------
    frozenset of (int, int)
        Pairs of nonterminal ids.

    Raises
    ------
    GrammarError
        If ``gnf`` is not in GNF.

    Notes
    -----
    Cost as :func:`stack_adjacency`.  With ``reachable_only=False, trim=False`` this is exactly the relation built by the
    paper's appendix (BFS from ``Bn`` for each ``A -> a ... Bn Z ...``), provided that BFS counts
    ``Bn`` itself; see ``proofs/stack_adjacency.md``, section 5.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A, B, C = (Nonterminal(n) for n in "SABC")
    >>> x = ByteSet.single(ord("x"))
    >>> g = Grammar([Production(S, [x, A, B]), Production(A, [x, C]), Production(C, [x]),
    ...              Production(B, [x])], "S")
    >>> sorted((g.names[y], g.names[z]) for y, z in backtrack_pairs(g))
    [('C', 'B')]
    """
    rules = _usable_rules(gnf, reachable_only, trim)
    unary: set[int] = set()
    for lhs, push in rules:
        if not push:
            unary.add(lhs)
    below = _propagate(len(gnf.names), rules)
    return frozenset((y, z) for y in sorted(unary) for z in _members(below[y]))
