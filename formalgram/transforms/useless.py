"""Removal of useless symbols (non-generating, then unreachable).

Also holds :func:`compact`, the small helper every transform uses to turn a list of
integer rules back into a :class:`~formalgram.grammar.Grammar` with dense ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from formalgram.analysis import generating, generating_rules, reachable
from formalgram.errors import EmptyLanguageError
from formalgram.grammar import Grammar, IdRule

__all__ = ["compact", "remove_useless"]


def compact(
    names: Sequence[str], masks: Sequence[int], start: int, rules: Sequence[IdRule], *, unique: bool = False
) -> Grammar:
    """Build a grammar keeping only the nonterminals and terminals that are used.

    Nonterminals keep their relative order (the start is always kept); unused masks are
    dropped.

    Parameters
    ----------
    names, masks : sequence
        Nonterminal names and terminal masks the ids of ``rules`` refer to.
    start : int
        The start id (always kept, as id 0 of the result's order of first use).
    rules : sequence of (int, tuple of int)
        Integer rules over ``names`` and ``masks``.
    unique : bool, keyword-only
        The caller guarantees that no rule repeats (the de-duplication pass is skipped).

    Returns
    -------
    Grammar

    Notes
    -----
    O(|G|); no budget, raises nothing.  The ids it builds are in range by construction, so
    the result is built without :meth:`Grammar.from_ids`'s checks, unless two of the kept
    masks or names are equal.

    Examples
    --------
    >>> g = compact(["S", "unused", "A"], [0b10, 0b100], 0, [(0, (~1, 2)), (2, (~1,))])
    >>> g.names, g.masks
    (('S', 'A'), (4,))
    """
    nt_map = [-1] * len(names)
    t_map = [-1] * len(masks)
    new_names: list[str] = []
    new_masks: list[int] = []
    new_start = _renumbered(start, nt_map, names, new_names)
    out: list[IdRule] = []
    for lhs, rhs in rules:
        body: list[int] = []
        for s in rhs:
            if s >= 0:
                body.append(_renumbered(s, nt_map, names, new_names))
            else:
                t = ~s
                k = t_map[t]
                if k < 0:
                    k = len(new_masks)
                    t_map[t] = k
                    new_masks.append(masks[t])
                body.append(~k)
        out.append((_renumbered(lhs, nt_map, names, new_names), tuple(body)))
    if len(set(new_masks)) != len(new_masks) or len(set(new_names)) != len(new_names):
        return Grammar.from_ids(new_names, new_masks, new_start, out)  # merges masks, rejects names
    return Grammar._trusted(new_names, new_masks, new_start, out, unique=unique)


def _renumbered(i: int, new_ids: list[int], names: Sequence[str], new_names: list[str]) -> int:
    """Nonterminal ``i``'s id in :func:`compact`'s order of first use, numbered when first seen
    (a module-level function: compiled, one nested in :func:`compact` would make a reference
    cycle with its closure, left to the cyclic collector at every call)."""
    j = new_ids[i]
    if j < 0:
        j = len(new_names)
        new_ids[i] = j
        new_names.append(names[i])
    return j


def _already_compact(names: Sequence[str], masks: Sequence[int], start: int, rules: Sequence[IdRule]) -> bool:
    """Whether :func:`compact` would give back ids, names, masks and rules unchanged.

    It would when every name and mask is used and the order of first use (the start, then
    each rule's right-hand side before its left-hand side, as :func:`compact` numbers them)
    is the order of the ids; the caller guarantees distinct names and masks.
    """
    nt_map = [-1] * len(names)
    t_map = [-1] * len(masks)
    nts = 0
    ts = 0
    if start != 0:
        return False
    nt_map[0] = 0
    nts = 1
    for lhs, rhs in rules:
        for s in rhs:
            if s >= 0:
                if nt_map[s] < 0:
                    if s != nts:
                        return False
                    nt_map[s] = s
                    nts += 1
            else:
                t = ~s
                if t_map[t] < 0:
                    if t != ts:
                        return False
                    t_map[t] = t
                    ts += 1
        if nt_map[lhs] < 0:
            if lhs != nts:
                return False
            nt_map[lhs] = lhs
            nts += 1
    return nts == len(names) and ts == len(masks)


def remove_useless(g: Grammar) -> Grammar:
    """Drop non-generating symbols, then unreachable ones.

    First every rule that mentions a non-generating nonterminal or an empty byte-set
    terminal is removed; then every rule whose left-hand side cannot be reached from
    the start.  The order matters: removing non-generating rules can make more
    symbols unreachable, never the reverse.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    Grammar
        A grammar with ``L(result) == L(g)`` (the empty string included), in which
        every nonterminal is reachable from the start and generates some string, over
        dense ids in the order of first use (as :func:`compact` numbers them): ``g``
        itself when it is already so.

    Raises
    ------
    EmptyLanguageError
        When the start symbol generates no string (``L(g)`` is empty).

    Notes
    -----
    O(|G|) (:func:`~formalgram.analysis.generating`, then
    :func:`~formalgram.analysis.reachable`); linear, so no budget.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, X = Nonterminal("S"), Nonterminal("X")
    >>> a = ByteSet.single(97)
    >>> g = Grammar([Production(S, [a]), Production(S, [X]), Production(X, [X, a])], "S")
    >>> len(remove_useless(g).productions)
    1
    """
    gen = generating(g)
    if g.start_id not in gen:
        raise EmptyLanguageError(
            f"the start symbol {g.names[g.start_id]!r} generates no string: the language is empty"
        )
    rules = g.rules
    kept = generating_rules(g, gen)
    # a subset of g's rules over g's ids: trusted (g is valid, its rules unique)
    g1 = (
        g
        if len(kept) == len(rules)
        else Grammar._trusted(g.names, g.masks, g.start_id, [rules[ri] for ri in kept], unique=True)
    )
    reach = reachable(g1)
    if len(reach) == len(g1.names) and _already_compact(g1.names, g1.masks, g1.start_id, g1.rules):
        return g1
    final = [r for r in g1.rules if r[0] in reach]
    return compact(g1.names, g1.masks, g1.start_id, final, unique=True)
