"""Removal of unit rules ``A -> B`` (unit cycles included).

Also holds two helpers shared by the other transforms: :func:`sccs` (iterative
Tarjan) and :func:`merge_unit_cycles`.
"""

from __future__ import annotations

from collections.abc import Sequence

from formalgram.grammar import Grammar, IdRule
from formalgram.transforms.budget import DEFAULT_BUDGET, Meter
from formalgram.transforms.useless import compact

__all__ = ["merge_unit_cycles", "remove_unit", "sccs"]


def sccs(n: int, succ: Sequence[Sequence[int]]) -> list[list[int]]:
    """Strongly connected components of the graph ``0..n-1`` with edges ``succ``.

    Parameters
    ----------
    n : int
        Number of vertices.
    succ : sequence of sequence of int
        ``succ[v]``: the successors of ``v``.

    Returns
    -------
    list of list of int
        The components in reverse topological order: every component is listed after all
        the components it can reach (sinks first).

    Notes
    -----
    Iterative Tarjan (no recursion, so any depth), O(V + E); no budget, raises nothing.

    Examples
    --------
    >>> sccs(4, [[1], [0, 2], [], [3]])
    [[2], [1, 0], [3]]
    """
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, pos = work[-1]
            edges = succ[v]
            if pos < len(edges):
                work[-1] = (v, pos + 1)
                w = edges[pos]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                comp: list[int] = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def merge_unit_cycles(g: Grammar) -> Grammar:
    """Collapse each cycle of unit rules into one nonterminal and drop ``A -> A``.

    All members of a strongly connected component of the unit graph derive each
    other, so they have the same language; the member with the smallest id (the start
    when it is a member) represents the component.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    Grammar
        ``L`` is preserved for every surviving nonterminal.

    Notes
    -----
    O(|G|) (:func:`sccs` on the unit graph); no budget, raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A = Nonterminal("S"), Nonterminal("A")
    >>> g = Grammar([Production(S, [A]), Production(A, [S]), Production(A, [ByteSet.single(97)])], "S")
    >>> merge_unit_cycles(g).names
    ('S',)
    """
    n = len(g.names)
    succ: list[list[int]] = [[] for _ in range(n)]
    for lhs, rhs in g.rules:
        if len(rhs) == 1 and rhs[0] >= 0:
            succ[lhs].append(rhs[0])
    rep = list(range(n))
    for comp in sccs(n, succ):
        if len(comp) > 1:
            head = g.start_id if g.start_id in comp else min(comp)
            for v in comp:
                rep[v] = head
    if all(rep[i] == i for i in range(n)) and not any(
        len(rhs) == 1 and rhs[0] == lhs for lhs, rhs in g.rules
    ):
        return g
    out: list[IdRule] = []
    for lhs, rhs in g.rules:
        body = tuple(rep[s] if s >= 0 else s for s in rhs)
        a = rep[lhs]
        if len(body) == 1 and body[0] == a:
            continue
        out.append((a, body))
    return compact(g.names, g.masks, rep[g.start_id], out)


def remove_unit(g: Grammar, *, budget: int = DEFAULT_BUDGET) -> Grammar:
    """Remove every unit rule ``A -> B`` (``B`` a nonterminal), unit cycles included.

    For each nonterminal ``A`` the set ``U(A)`` of nonterminals reachable from ``A``
    through unit rules is computed; ``A`` then receives every non-unit rule of every
    member of ``U(A)``.  Unit cycles are collapsed first, which shrinks the closures.

    Parameters
    ----------
    g : Grammar
        Any grammar (epsilon rules are allowed and kept as they are).
    budget : int, keyword-only
        Most rules the result may have before unreachable ones are dropped; the work is
        bounded by :data:`~formalgram.transforms.budget.WORK_PER_RULE` steps per rule of
        budget (see :mod:`formalgram.transforms.budget`).

    Returns
    -------
    Grammar
        A grammar without unit rules and ``L(result) == L(g)`` (empty string
        included).  Nonterminals that only served as unit targets may become
        unreachable; they are dropped.

    Raises
    ------
    GrammarTooLarge
        When the rules written pass ``budget`` or the work passes its allowance; checked
        while the closures are written.

    Notes
    -----
    O(|G| + |result|) when every nonterminal has at most one distinct unit successor (unit
    chains: the closure of ``A -> B`` is ``A``'s own rules followed by ``B``'s closure);
    otherwise a depth-first search per nonterminal, O(|V| * |G|) in the worst case.  Only
    the nonterminals the result keeps (reachable once unit rules are gone) get a closure.
    The result itself can be quadratic: in ``A_i -> A_{i+1} | a_i A_i`` every ``A_i`` gets
    all the ``a_j A_j`` with ``j >= i``.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A = Nonterminal("S"), Nonterminal("A")
    >>> g = Grammar([Production(S, [A]), Production(A, [ByteSet.single(97)])], "S")
    >>> [len(p.rhs) for p in remove_unit(g).productions]
    [1]
    >>> print(remove_unit(g, budget=2).to_gbnf(), end="")
    S ::= "a"
    """
    meter = Meter("unit rule removal", budget)
    meter.spend(len(g.rules) + sum(len(rhs) for _, rhs in g.rules))
    g = merge_unit_cycles(g)
    n = len(g.names)
    succ: list[list[int]] = [[] for _ in range(n)]
    plain: list[list[tuple[int, ...]]] = [[] for _ in range(n)]
    unit_rules: set[tuple[int, int]] = set()
    for lhs, rhs in g.rules:
        if len(rhs) == 1 and rhs[0] >= 0:
            # a repeated unit rule adds nothing to the search below
            if (lhs, rhs[0]) not in unit_rules:
                unit_rules.add((lhs, rhs[0]))
                succ[lhs].append(rhs[0])
        else:
            plain[lhs].append(rhs)
    # the nonterminals still reachable once unit rules are gone: the start, and every
    # nonterminal in a non-unit body of a nonterminal that one of them reaches by unit rules
    start = g.start_id
    kept = [False] * n
    visited = [False] * n
    kept[start] = visited[start] = True
    stack = [start]
    while stack:
        b = stack.pop()
        meter.spend(1 + len(succ[b]) + sum(len(body) for body in plain[b]))
        for c in succ[b]:
            if not visited[c]:
                visited[c] = True
                stack.append(c)
        for body in plain[b]:
            for s in body:
                if s >= 0 and not kept[s]:
                    kept[s] = True
                    if not visited[s]:
                        visited[s] = True
                        stack.append(s)
    # closure[a]: the non-unit bodies of U(a), in the order of a depth-first search from a
    closure: dict[int, list[tuple[int, ...]]] = {}
    out: list[IdRule] = []
    for a in range(n):
        if not kept[a]:
            continue
        bodies = _closure(a, succ, plain, closure, kept, meter)
        out.extend((a, body) for body in bodies)
        if len(out) > budget:
            meter.too_many_rules("after closing over unit rules")
    return compact(g.names, g.masks, start, out)


def _closure(
    a: int,
    succ: list[list[int]],
    plain: list[list[tuple[int, ...]]],
    memo: dict[int, list[tuple[int, ...]]],
    keep: list[bool],
    meter: Meter,
) -> list[tuple[int, ...]]:
    """The non-unit bodies of the nonterminals reached from ``a`` by unit rules, in DFS order.

    The order is that of a depth-first search from ``a`` (a stack; a nonterminal is
    marked when pushed; its bodies are listed when popped).  When ``a`` has a single unit
    successor ``b`` (``a`` is not reachable from ``b``: unit cycles are merged), that
    search lists ``a``'s bodies and then exactly the search from ``b``.  So a chain of
    single successors is walked down to a known list (or a branching nonterminal, searched
    in full) and the lists are assembled bottom-up, reversed, so that each step only
    appends; ``memo`` keeps the lists of the nonterminals ``keep`` marks (those whose rules
    the result keeps), and nothing else is copied.
    """
    got = memo.get(a)
    if got is not None:
        return got
    # the chain of single successors below ``a``, down to a known list or a branching node
    chain = [a]
    while len(succ[chain[-1]]) == 1 and succ[chain[-1]][0] not in memo:
        chain.append(succ[chain[-1]][0])
    meter.spend(len(chain))
    last = chain[-1]
    below: list[tuple[int, ...]]
    if len(succ[last]) == 1:
        below = list(plain[last]) + memo[succ[last][0]]
    elif not succ[last]:
        below = list(plain[last])
    else:
        below = []
        seen = {last}
        stack = [last]
        while stack:
            b = stack.pop()
            below.extend(plain[b])
            meter.spend(1 + len(plain[b]) + len(succ[b]))
            for c in succ[b]:
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
    meter.spend(1 + len(below))
    if keep[last]:
        memo[last] = below
    if len(chain) == 1:
        return below
    # the lists above ``last``, reversed: each nonterminal appends its own bodies backwards
    acc = below[::-1]
    for b in reversed(chain[:-1]):
        acc.extend(reversed(plain[b]))
        meter.spend(1 + len(plain[b]))
        if keep[b]:
            memo[b] = acc[::-1]
            meter.spend(len(acc))
    return memo[a]
