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
"""

from __future__ import annotations

import networkx as nx

from formalgram.analysis import generating_rules, reachable
from formalgram.grammar import Grammar
from formalgram.transforms.gnf_check import require_gnf

__all__ = ["backtrack_pairs", "can_be_below", "rightmost_graph", "stack_adjacency"]


def _usable_rules(gnf: Grammar, reachable_only: bool, trim: bool) -> list[tuple[int, tuple[int, ...]]]:
    """Rules (non-empty, GNF) kept for the relation, as ``(lhs, (B1, ..., Bn))``."""
    require_gnf(gnf, "stack adjacency")
    rules = gnf.rules
    kept = [rules[ri] for ri in generating_rules(gnf)] if trim else list(rules)
    if reachable_only:
        reach = reachable(Grammar.from_ids(gnf.names, gnf.masks, gnf.start_id, kept))
        kept = [rule for rule in kept if rule[0] in reach]
    return [(lhs, rhs[1:]) for lhs, rhs in kept if rhs]


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


def _pairs(gnf: Grammar, reachable_only: bool, trim: bool) -> set[tuple[int, int]]:
    """The relation as a set of id pairs (the seeds closed along ``H``)."""
    rules = _usable_rules(gnf, reachable_only, trim)
    h = _rightmost(len(gnf.names), rules)
    seeds: dict[int, set[int]] = {}  # upper symbol X -> set of Z with seed (X, Z)
    for _, push in rules:
        for i in range(len(push) - 1):
            seeds.setdefault(push[i], set()).add(push[i + 1])
    out: set[tuple[int, int]] = set()
    for x, zs in seeds.items():
        # BFS from x in H; the source itself is included (path of length zero).
        for w in nx.descendants(h, x) | {x}:
            for z in zs:
                out.add((w, z))
    return out


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
    O(K * (V + E) + |result|) with K the number of distinct upper symbols of seeds, V the
    nonterminals and E the edges of the rightmost-nonterminal graph: at most quadratic in
    the grammar, and the result has at most V^2 pairs.  Polynomial and bounded by the
    grammar's size, so it takes no budget (a GNF within :func:`~formalgram.to_gnf`'s default
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
    d.add_edges_from(sorted(_pairs(gnf, reachable_only, trim)))
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
    below: list[set[int]] = [set() for _ in gnf.names]
    for x, y in _pairs(gnf, reachable_only, trim):
        below[x].add(y)
    return tuple(frozenset(s) for s in below)


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
    unary: set[int] = set()
    for lhs, push in _usable_rules(gnf, reachable_only, trim):
        if not push:
            unary.add(lhs)
    return frozenset(p for p in _pairs(gnf, reachable_only, trim) if p[0] in unary)
