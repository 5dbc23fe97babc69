"""Least-fixpoint analyses of a grammar: nullable, generating and reachable nonterminals.

Each is computed once here, with a worklist, in time linear in the size of the grammar
(the total length of all right-hand sides plus the number of rules), on the integer view
of :class:`~formalgram.grammar.Grammar`; every other module calls these functions instead
of running its own fixpoint.  Results are nonterminal ids (``Grammar.names`` turns them
into names).

A terminal whose byte set is empty matches no byte, so it never counts as generating: a
rule that contains one derives no string at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from formalgram.grammar import Grammar

__all__ = ["generating", "generating_rules", "nonterminal_counts", "nullable", "reachable", "unreachable"]


def nonterminal_counts(g: Grammar, terminal_ok: list[bool]) -> tuple[list[int], list[list[int]]]:
    """Per rule, its number of nonterminal items; per nonterminal, the rules it occurs in.

    The set-up of every counting fixpoint over a grammar (:func:`nullable`,
    :func:`generating`, the shortest lengths of :mod:`formalgram.recognize.enumerate`): a
    rule fires once each of its nonterminals is known.

    Parameters
    ----------
    g : Grammar
        Any grammar.
    terminal_ok : list of bool
        Per terminal id: whether a rule holding it may fire at all.

    Returns
    -------
    pending : list of int
        Per rule index, the number of nonterminal items of its right-hand side, or ``-1``
        when it holds a terminal that is not ``terminal_ok``.
    occurs : list of list of int
        Per nonterminal id, the rules (not the ``-1`` ones) it occurs in, once per
        occurrence, in rule order.

    Notes
    -----
    O(|G|); no budget, raises nothing.

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> g = parse_gbnf('root ::= x x "a"\\nx ::= "b"')
    >>> nonterminal_counts(g, [True] * len(g.masks))
    ([2, 0], [[], [0, 0]])
    >>> nonterminal_counts(g, [False] * len(g.masks))
    ([-1, -1], [[], []])
    """
    rules = g.rules
    pending = [0] * len(rules)
    occurs: list[list[int]] = [[] for _ in g.names]
    for ri, (_, rhs) in enumerate(rules):
        if any(s < 0 and not terminal_ok[~s] for s in rhs):
            pending[ri] = -1
            continue
        count = 0
        for s in rhs:
            if s >= 0:
                count += 1
                occurs[s].append(ri)
        pending[ri] = count
    return pending, occurs


def _counting_fixpoint(g: Grammar, terminal_ok: list[bool]) -> frozenset[int]:
    """Least set of nonterminals having a rule whose items are all in the set or ``terminal_ok``.

    Each rule keeps a counter of nonterminal items not yet in the set
    (:func:`nonterminal_counts`); a rule with a terminal that is not ``terminal_ok`` never
    fires.  O(|G|).
    """
    rules = g.rules
    n = len(g.names)
    result = [False] * n
    pending, occurs = nonterminal_counts(g, terminal_ok)
    work: list[int] = []
    for ri, (lhs, _) in enumerate(rules):
        if pending[ri] == 0 and not result[lhs]:
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

    Notes
    -----
    O(|G|): each rule keeps a counter of right-hand-side items not yet known to be
    nullable; each occurrence of a nonterminal is visited once.  Linear, so no budget;
    raises nothing.

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> g = parse_gbnf('root ::= ws "x"\\nws ::= [ ]*')
    >>> sorted(g.names[i] for i in nullable(g))
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

    Notes
    -----
    O(|G|), the same counter scheme as :func:`nullable`; no budget, raises nothing.

    Examples
    --------
    ``S -> a S`` has no base case, so ``S`` derives nothing:

    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, X = Nonterminal("S"), Nonterminal("X")
    >>> a = ByteSet.single(97)
    >>> g = Grammar([Production(S, [a, S]), Production(S, [X, a]), Production(X, [a])], "S")
    >>> sorted(g.names[i] for i in generating(g))
    ['S', 'X']
    >>> sorted(generating(Grammar([Production(S, [a, S])], "S")))
    []
    """
    return _counting_fixpoint(g, [m != 0 for m in g.masks])


def generating_rules(g: Grammar, gen: frozenset[int] | None = None) -> tuple[int, ...]:
    """Indices (into ``g.rules``) of the rules whose every item derives some string.

    A rule survives when each nonterminal of its right-hand side is generating and each
    terminal matches some byte; these are the rules that can occur in a derivation of a
    byte string (the ones the trimming transforms, the PDA and the recognizers keep).

    Parameters
    ----------
    g : Grammar
        Any grammar.
    gen : frozenset of int, optional
        ``generating(g)`` when the caller already has it.

    Returns
    -------
    tuple of int
        Rule indices in increasing order.

    Notes
    -----
    O(|G|); no budget, raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, X = Nonterminal("S"), Nonterminal("X")
    >>> a = ByteSet.single(97)
    >>> g = Grammar([Production(S, [a]), Production(S, [X]), Production(X, [a, X]),
    ...              Production(S, [ByteSet.empty()])], "S")
    >>> generating_rules(g)
    (0,)
    """
    if gen is None:
        gen = generating(g)
    masks = g.masks
    out: list[int] = []
    for ri, (lhs, rhs) in enumerate(g.rules):
        if lhs not in gen:
            continue
        ok = True
        for s in rhs:
            if (s >= 0 and s not in gen) or (s < 0 and masks[~s] == 0):
                ok = False
                break
        if ok:
            out.append(ri)
    return tuple(out)


def reachable(g: Grammar, rule_ids: Sequence[int] | None = None) -> frozenset[int]:
    """The ids of the nonterminals reachable from the start symbol (start included).

    Parameters
    ----------
    g : Grammar
        Any grammar.
    rule_ids : sequence of int, optional
        Only follow these rules (indices into ``g.rules``, e.g. :func:`generating_rules`);
        all rules when ``None``.

    Returns
    -------
    frozenset of int
        Nonterminal ids occurring in some sentential form derived from the start.

    Notes
    -----
    O(|G|) depth-first search over rule right-hand sides (on an explicit stack), plus
    O(len(rule_ids) + nonterminals) to index ``rule_ids``; no budget, raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, X = Nonterminal("S"), Nonterminal("X")
    >>> g = Grammar([Production(S, [ByteSet.single(97)]), Production(X, [ByteSet.single(98)])], "S")
    >>> sorted(g.names[i] for i in reachable(g))
    ['S']
    >>> g = Grammar([Production(S, [ByteSet.single(97), X]), Production(X, [ByteSet.empty()])], "S")
    >>> sorted(g.names[i] for i in reachable(g)), sorted(g.names[i] for i in reachable(g, generating_rules(g)))
    (['S', 'X'], ['S'])
    """
    seen = [False] * len(g.names)
    seen[g.start_id] = True
    stack = [g.start_id]
    rules = g.rules
    by_lhs: Sequence[Sequence[int]] = g.rules_by_lhs
    if rule_ids is not None:
        kept: list[list[int]] = [[] for _ in g.names]
        for ri in rule_ids:
            kept[rules[ri][0]].append(ri)
        by_lhs = kept
    while stack:
        a = stack.pop()
        for ri in by_lhs[a]:
            for s in rules[ri][1]:
                if s >= 0 and not seen[s]:
                    seen[s] = True
                    stack.append(s)
    return frozenset(i for i in range(len(seen)) if seen[i])


def unreachable(g: Grammar) -> frozenset[int]:
    """The ids of the nonterminals that have rules but cannot be reached from the start.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    frozenset of int
        Nonterminal ids (:meth:`Grammar.unreachable <formalgram.grammar.Grammar.unreachable>`
        gives their names).

    Notes
    -----
    O(|G|); no budget, raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, X = Nonterminal("S"), Nonterminal("X")
    >>> g = Grammar([Production(S, [ByteSet.single(97)]), Production(X, [ByteSet.single(98)])], "S")
    >>> [g.names[i] for i in sorted(unreachable(g))]
    ['X']
    """
    reach = reachable(g)
    by_lhs = g.rules_by_lhs
    return frozenset(i for i in range(len(g.names)) if by_lhs[i] and i not in reach)
