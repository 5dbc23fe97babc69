"""Removal of epsilon rules with an exact empty-string policy.

Language contract: ``L(remove_epsilon(g)) == L(g)`` exactly.  The result has no rule
``A -> ε`` except, when ``ε ∈ L(g)``, one rule ``S' -> ε`` for a start symbol ``S'``
that occurs on no right-hand side (the old start when it already occurs on none,
otherwise a fresh one).
"""

from __future__ import annotations

from formalgram.analysis import nullable
from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.transforms.useless import compact

__all__ = ["remove_epsilon"]

# A rule with more nullable occurrences than this is cut into a right chain first, so
# that expansion produces at most 2**(_MAX_NULLABLE + 1) variants per rule.
_MAX_NULLABLE = 3


def _split_rules(
    g: Grammar, null: frozenset[int], names: list[str], taken: set[str]
) -> tuple[list[IdRule], set[int]]:
    """Cut long rules so that each has at most ``_MAX_NULLABLE + 1`` nullable items.

    Returns the new rule list and the (extended) set of nullable ids.
    """
    out: list[IdRule] = []
    null_ids = set(null)
    for lhs, rhs in g.rules:
        count = 0
        for s in rhs:
            if s >= 0 and s in null_ids:
                count += 1
        if count <= _MAX_NULLABLE + 1:
            out.append((lhs, rhs))
            continue
        # walk the rule, emitting chunks that each hold _MAX_NULLABLE nullable items
        # followed by a fresh nonterminal for the rest
        cur = lhs
        items = list(rhs)
        while True:
            seen = 0
            cut = len(items)
            for i, s in enumerate(items):
                if s >= 0 and s in null_ids:
                    seen += 1
                    if seen == _MAX_NULLABLE:
                        cut = i + 1
                        break
            rest = items[cut:]
            rest_null = sum(1 for s in rest if s >= 0 and s in null_ids)
            if cut >= len(items) or rest_null <= 1:
                out.append((cur, tuple(items)))
                break
            name = fresh_name(names[lhs] + "__tail", taken)
            taken.add(name)
            rid = len(names)
            names.append(name)
            if all(s >= 0 and s in null_ids for s in rest):
                null_ids.add(rid)
            out.append((cur, (*items[:cut], rid)))
            cur = rid
            items = rest
    return out, null_ids


def _check_size(count: int, limit: int) -> None:
    if 0 <= limit < count:
        raise GrammarTooLarge("epsilon removal", limit, f"more than {limit} rules")


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
        Most rules the result may have (checked after each rule's variants are written);
        ``None`` (default): no limit, since the result is at most 16 times the input.

    Returns
    -------
    Grammar
        A grammar with ``L(result) == L(g)`` and no epsilon rule but possibly
        ``S' -> ε`` as described above.  Self loops ``A -> A`` created by the
        expansion are dropped (they add nothing).

    Raises
    ------
    GrammarTooLarge
        When the result would have more than ``budget`` rules.

    Notes
    -----
    O(|G|) nullable analysis; the expansion writes at most 16 variants per rule after
    splitting, so time and output size are O(|G|): the transform cannot blow up, and its
    budget only caps the size of the result.  (Naming the fresh ``<lhs>__tail`` symbols
    tries suffixes one by one, which is quadratic in the number of long rules sharing a
    left-hand side.)

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
    null = nullable(g)
    names = list(g.names)
    taken = set(names)
    rules, null_ids = _split_rules(g, null, names, taken)
    limit = -1 if budget is None else budget
    out: list[IdRule] = []
    for lhs, rhs in rules:
        positions = [i for i, s in enumerate(rhs) if s >= 0 and s in null_ids]
        k = len(positions)
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
        _check_size(len(out), limit)
    start = g.start_id
    if start in null:
        on_rhs = any(start in rhs for _, rhs in out)
        if on_rhs:
            name = fresh_name(names[start] + "__eps", taken)
            taken.add(name)
            new_start = len(names)
            names.append(name)
            copies = [(new_start, rhs) for lhs, rhs in out if lhs == start]
            out.extend(copies)
            _check_size(len(out), limit)
            start = new_start
        out.append((start, ()))
        _check_size(len(out), limit)
    return compact(names, g.masks, start, out)
