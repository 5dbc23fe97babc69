"""Removal of epsilon rules with an exact empty-string policy.

Language contract: ``L(remove_epsilon(g)) == L(g)`` exactly.  The result has no rule
``A -> ε`` except, when ``ε ∈ L(g)``, one rule ``S' -> ε`` for a start symbol ``S'``
that occurs on no right-hand side (the old start when it already occurs on none,
otherwise a fresh one).
"""

from __future__ import annotations

from formalgram.analysis import nullable
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.transforms.budget import Meter
from formalgram.transforms.useless import compact

__all__ = ["remove_epsilon"]

# A rule with more nullable occurrences than this is cut into a right chain first, so
# that expansion produces at most 2**(_MAX_NULLABLE + 1) variants per rule.
_MAX_NULLABLE = 3


def _split_rules(
    g: Grammar, null: frozenset[int], names: list[str], taken: set[str], meter: Meter | None
) -> tuple[list[IdRule], set[int]]:
    """Cut long rules so that each has at most ``_MAX_NULLABLE + 1`` nullable items.

    Returns the new rule list and the (extended) set of nullable ids.  Linear in the size
    of ``g``: each rule is walked once, with the nullable items of every suffix counted
    beforehand, and the fresh names come from per-base counters.
    """
    out: list[IdRule] = []
    null_ids = set(null)
    counters: dict[str, int] = {}
    for lhs, rhs in g.rules:
        if meter is not None:
            meter.spend(1 + len(rhs))
        # the bodies of g hold only its own symbols: nullability is that of ``null``
        flags = [s >= 0 and s in null for s in rhs]
        count = sum(flags)
        if count <= _MAX_NULLABLE + 1:
            out.append((lhs, rhs))
            continue
        n = len(rhs)
        after = [0] * (n + 1)  # after[i]: nullable items in rhs[i:]
        for i in range(n - 1, -1, -1):
            after[i] = after[i + 1] + flags[i]
        # walk the rule, emitting chunks that each hold _MAX_NULLABLE nullable items
        # followed by a fresh nonterminal for the rest
        cur = lhs
        begin = 0
        while True:
            seen = 0
            cut = n
            for i in range(begin, n):
                if flags[i]:
                    seen += 1
                    if seen == _MAX_NULLABLE:
                        cut = i + 1
                        break
            if cut >= n or after[cut] <= 1:
                out.append((cur, rhs[begin:]))
                break
            name = fresh_name(names[lhs] + "__tail", taken, counters)
            taken.add(name)
            rid = len(names)
            names.append(name)
            if after[cut] == n - cut:  # the rest is all nullable
                null_ids.add(rid)
            out.append((cur, (*rhs[begin:cut], rid)))
            cur = rid
            begin = cut
    return out, null_ids


def remove_epsilon(g: Grammar, *, budget: int | None = None) -> Grammar:
    """Remove epsilon rules, keeping the language exactly (the empty string included).

    Every rule ``A -> X1 .. Xn`` is replaced by all its variants obtained by dropping
    some nullable occurrences, except the empty variant.  Rules with many nullable
    items are first cut into a right chain of fresh nonterminals (named
    ``<lhs>__tail``), so the expansion stays linear in the grammar size.  When the
    start symbol is nullable a rule ``S' -> ε`` is added, ``S'`` being the old start
    if it occurs on no right-hand side and a fresh symbol (named ``<start>__eps``)
    with copies of the start's rules otherwise.

    Parameters
    ----------
    g : Grammar
        Any grammar.
    budget : int or None, keyword-only
        Most rules the result may have (checked after each rule's variants are written),
        and with it a work allowance of
        :func:`~formalgram.transforms.budget.work_allowance` steps (each symbol read or
        written one step, charged before the variants of a rule are written), so that
        time and memory are bounded too; ``None`` (default): no limit, since the result
        is at most 16 times the input.

    Returns
    -------
    Grammar
        A grammar with ``L(result) == L(g)`` and no epsilon rule but possibly
        ``S' -> ε`` as described above.  Self loops ``A -> A`` created by the
        expansion are dropped (they add nothing).

    Raises
    ------
    GrammarTooLarge
        When the result would have more than ``budget`` rules, or the work its allowance.

    Notes
    -----
    O(|G|) nullable analysis; the splitting walks each rule once (the fresh
    ``<lhs>__tail`` names come from per-base counters), and the expansion writes at most
    16 variants per rule after splitting, so time and output size are O(|G|), at most 16
    times the input: the transform cannot blow up.  A budget bounds the result in rules
    and the work (hence memory) in steps.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> a = ByteSet.single(97)
    >>> g = Grammar([Production(S, [a, S]), Production(S, [])], "S")
    >>> sorted(len(p.rhs) for p in remove_epsilon(g).productions)
    [0, 1, 1, 2, 2]
    >>> remove_epsilon(g, budget=4)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: epsilon removal exceeded its budget of 4 (more than 4 rules)
    """
    meter = None if budget is None else Meter("epsilon removal", budget)
    null = nullable(g)
    names = list(g.names)
    taken = set(names)
    rules, null_ids = _split_rules(g, null, names, taken, meter)
    out: list[IdRule] = []
    for lhs, rhs in rules:
        positions = [i for i, s in enumerate(rhs) if s >= 0 and s in null_ids]
        k = len(positions)
        if meter is not None:
            # each of the 2**k variants is at most len(rhs) symbols: charged before writing
            meter.spend((1 + len(rhs)) << k)
        for choice in range(1 << k):
            # bit j set: drop the j-th nullable occurrence
            if choice == 0:
                body = rhs
            else:
                drop = {positions[j] for j in range(k) if (choice >> j) & 1}
                body = tuple(s for i, s in enumerate(rhs) if i not in drop)
            if not body:
                continue
            if len(body) == 1 and body[0] == lhs:
                continue
            out.append((lhs, body))
        if meter is not None and len(out) > meter.budget:
            meter.too_many_rules("")
    start = g.start_id
    if start in null:
        on_rhs = any(start in rhs for _, rhs in out)
        if on_rhs:
            name = fresh_name(names[start] + "__eps", taken)
            taken.add(name)
            new_start = len(names)
            names.append(name)
            copies = [(new_start, rhs) for lhs, rhs in out if lhs == start]
            if meter is not None:
                meter.spend(len(out) + sum(len(rhs) for _, rhs in copies))
                if len(out) + len(copies) > meter.budget:
                    meter.too_many_rules("")
            out.extend(copies)
            start = new_start
        if meter is not None and len(out) + 1 > meter.budget:
            meter.too_many_rules("")
        out.append((start, ()))
    return compact(names, g.masks, start, out)
