"""Basic grammar analyses: nullable, generating and reachable nonterminals.

All three are least fixpoints computed with worklists in time linear in the size of
the grammar (the total length of all right-hand sides plus the number of rules).
They work on the integer view of :class:`~formalgram.grammar.Grammar` and return
frozensets of nonterminal ids.

A terminal whose byte set is empty matches no byte, so it never counts as
generating: a rule that contains one derives no string at all.
"""

from __future__ import annotations

from formalgram.grammar import Grammar


def _counting_fixpoint(g: Grammar, terminal_ok: list[bool]) -> frozenset[int]:
    """Least set of nonterminals having a rule whose items are all in the set or ``terminal_ok``.

    Each rule keeps a counter of nonterminal items not yet in the set; a rule with a terminal
    that is not ``terminal_ok`` never fires.  O(|G|).
    """
    rules = g.rules
    n = len(g.names)
    result = [False] * n
    pending = [0] * len(rules)
    occurs: list[list[int]] = [[] for _ in range(n)]
    work: list[int] = []
    for ri, (lhs, rhs) in enumerate(rules):
        if any(s < 0 and not terminal_ok[~s] for s in rhs):
            pending[ri] = -1
            continue
        count = 0
        for s in rhs:
            if s >= 0:
                count += 1
                occurs[s].append(ri)
        pending[ri] = count
        if count == 0 and not result[lhs]:
            result[lhs] = True
            work.append(lhs)
    while work:
        a = work.pop()
        for ri in occurs[a]:
            pending[ri] -= 1
            if pending[ri] == 0:
                lhs = rules[ri][0]
                if not result[lhs]:
                    result[lhs] = True
                    work.append(lhs)
    return frozenset(i for i in range(n) if result[i])


def nullable(g: Grammar) -> frozenset[int]:
    """The ids of the nonterminals that derive the empty string.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    frozenset of int
        Nonterminal ids ``A`` with ``A =>* ε``.

    Complexity
    ----------
    O(|G|): each rule keeps a counter of right-hand-side items not yet known to be
    nullable; each occurrence of a nonterminal is visited once.

    Example
    -------
    >>> from formalgram import parse_gbnf  # doctest: +SKIP
    >>> g = parse_gbnf('root ::= ws "x"\\nws ::= [ ]*')  # doctest: +SKIP
    >>> sorted(g.names[i] for i in nullable(g))  # doctest: +SKIP
    ['ws']
    """
    return _counting_fixpoint(g, [False] * len(g.masks))


def generating(g: Grammar) -> frozenset[int]:
    """The ids of the nonterminals that derive at least one byte string.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    frozenset of int
        Nonterminal ids ``A`` with ``A =>* w`` for some ``w`` in bytes*.  Terminals with
        an empty byte set are not generating.

    Complexity
    ----------
    O(|G|), the same counter scheme as :func:`nullable`.

    Example
    -------
    >>> # S -> a S has no base case, so S is not generating.
    """
    return _counting_fixpoint(g, [m != 0 for m in g.masks])


def reachable(g: Grammar) -> frozenset[int]:
    """The ids of the nonterminals reachable from the start symbol (start included).

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    frozenset of int
        Nonterminal ids occurring in some sentential form derived from the start.

    Complexity
    ----------
    O(|G|) depth-first search over rule right-hand sides.

    Example
    -------
    >>> # in S -> a, X -> b the nonterminal X is unreachable.
    """
    seen = [False] * len(g.names)
    seen[g.start_id] = True
    stack = [g.start_id]
    rules = g.rules
    by_lhs = g.rules_by_lhs
    while stack:
        a = stack.pop()
        for ri in by_lhs[a]:
            for s in rules[ri][1]:
                if s >= 0 and not seen[s]:
                    seen[s] = True
                    stack.append(s)
    return frozenset(i for i in range(len(seen)) if seen[i])


def unreachable(g: Grammar) -> tuple[str, ...]:
    """Names of the nonterminals that have rules but cannot be reached from the start.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    tuple of str
        Names in nonterminal id order.

    Complexity
    ----------
    O(|G|).

    Example
    -------
    >>> # for S -> a, X -> b this returns ('X',)
    """
    reach = reachable(g)
    by_lhs = g.rules_by_lhs
    return tuple(name for i, name in enumerate(g.names) if by_lhs[i] and i not in reach)
