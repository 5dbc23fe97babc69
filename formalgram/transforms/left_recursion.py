"""Removal of direct and indirect left recursion.

The work is confined to the strongly connected components of the *left-corner
graph* (edge ``A -> B`` when some rule ``A -> B β`` exists): only nonterminals inside
a cyclic component can be left recursive, and only they are rewritten.  Within a
component the classic ordered substitution (Paull's algorithm) is run, trying a few
orders of the members and keeping the smallest result.
"""

from __future__ import annotations

from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.transforms.budget import DEFAULT_BUDGET, Meter
from formalgram.transforms.epsilon import remove_epsilon
from formalgram.transforms.unit import merge_unit_cycles, sccs
from formalgram.transforms.useless import compact

__all__ = ["body_key", "distinct_bodies", "remove_left_recursion", "remove_left_recursion_table"]

Body = tuple[int, ...]


def body_key(body: Body) -> Body:
    """A key equal for equal bodies whose hash tells terminals ``~0`` and ``~1`` apart.

    CPython hashes ``-1`` like ``-2``, so two bodies that differ only by exchanging the
    terminals ``~0 == -1`` and ``~1 == -2`` have the same hash, and a set of many such bodies
    (all the words over two bytes, say) degrades to quadratic time.  Shifting the terminals
    down by one keeps the key injective and avoids ``-1``.

    Notes
    -----
    O(len(body)).

    Examples
    --------
    >>> hash((-1, -2)) == hash((-2, -1)), hash(body_key((-1, -2))) == hash(body_key((-2, -1)))
    (True, False)
    """
    return tuple([s if s >= 0 else s - 1 for s in body])


def distinct_bodies(bodies: list[Body]) -> list[Body]:
    """``bodies`` without repeats, first occurrences in order (hashing with :func:`body_key`).

    Notes
    -----
    O(total length of the bodies).

    Examples
    --------
    >>> distinct_bodies([(0, -1), (-2, -1), (0, -1), (-1, -2)])
    [(0, -1), (-2, -1), (-1, -2)]
    """
    seen: set[Body] = set()
    out: list[Body] = []
    for body in bodies:
        k = body_key(body)
        if k not in seen:
            seen.add(k)
            out.append(body)
    return out


def _remove_direct(
    a: int, bodies: list[Body], names: list[str], taken: set[str], table: list[list[Body]], meter: Meter
) -> None:
    """Rewrite ``table[a]`` without direct left recursion (appends a fresh ``A'``).

    ``A -> A α_i | β_j`` becomes ``A -> β_j | β_j A'`` and ``A' -> α_i | α_i A'``.
    Requires every ``α_i`` and ``β_j`` to be non-empty (epsilon-free input).
    """
    meter.spend(1 + 3 * sum(len(body) for body in bodies))
    rec: list[Body] = []
    base: list[Body] = []
    for body in bodies:
        if body and body[0] == a:
            if len(body) > 1:
                rec.append(body[1:])
            # a bare A -> A adds nothing
        else:
            base.append(body)
    if not rec:
        table[a] = base
        return
    base_name = names[a] + "__lr"
    name = fresh_name(base_name, taken)
    meter.spend(1 if name == base_name else 1 + int(name[len(base_name) + 1 :]))
    taken.add(name)
    tail = len(names)
    names.append(name)
    table.append([])
    new_a: list[Body] = []
    for beta in base:
        new_a.append(beta)
        new_a.append((*beta, tail))
    table[a] = new_a
    tail_rules: list[Body] = []
    for alpha in rec:
        tail_rules.append(alpha)
        tail_rules.append((*alpha, tail))
    table[tail] = tail_rules


def _paull(
    order: list[int],
    table: list[list[Body]],
    names: list[str],
    taken: set[str],
    budget: int,
    base_count: int,
    meter: Meter,
) -> None:
    """Paull's algorithm on the members ``order`` of one component, in place."""
    pos = {a: i for i, a in enumerate(order)}
    for i, a in enumerate(order):
        bodies = table[a]
        # substitute leading members that come earlier in the order, repeatedly: the
        # substituted bodies only start with later members (or a itself)
        changed = True
        while changed:
            changed = False
            nxt: list[Body] = []
            for body in bodies:
                if body and body[0] >= 0 and body[0] != a and pos.get(body[0], len(order)) < i:
                    changed = True
                    rest = body[1:]
                    subs = table[body[0]]
                    meter.spend(1 + sum(len(sub) for sub in subs) + len(subs) * len(rest))
                    for sub in subs:
                        nxt.append(sub + rest)
                else:
                    meter.spend(1)
                    nxt.append(body)
                if len(nxt) + base_count > budget:
                    raise GrammarTooLarge(
                        "left recursion removal", budget, f"nonterminal {names[a]!r} needs more rules"
                    )
            # dedupe, keep order
            bodies = distinct_bodies(nxt)
            meter.spend(len(nxt))
        _remove_direct(a, bodies, names, taken, table, meter)
        base_count += len(table[a])


def remove_left_recursion_table(
    names: list[str], start: int, table: list[list[Body]], budget: int, meter: Meter | None = None
) -> list[list[Body]]:
    """Core of :func:`remove_left_recursion` on a per-lhs rule table (epsilon-free).

    Parameters
    ----------
    names : list of str
        Nonterminal names; extended in place with the fresh ``A__lr`` symbols.
    start : int
        The start id.
    table : list of list of tuple of int
        ``table[a]``: the right-hand sides of ``a`` (integer items as in ``Grammar.rules``).
    budget : int
        Largest total number of rules.
    meter : Meter, optional
        Where the work is charged (a caller's, to share one allowance across stages);
        default a fresh one for ``budget`` (see :mod:`formalgram.transforms.budget`).

    Returns
    -------
    list of list of tuple of int
        One entry per name (old and fresh), without left recursion.

    Raises
    ------
    GrammarTooLarge
        When the total rule count would pass ``budget`` for every order tried, or the work
        its allowance.

    Notes
    -----
    As :func:`remove_left_recursion`.

    Examples
    --------
    >>> names = ["E"]
    >>> remove_left_recursion_table(names, 0, [[(0, ~0), (~1,)]], 100), names
    ([[(-2,), (-2, 1)], [(-1,), (-1, 1)]], ['E', 'E__lr'])
    """
    if meter is None:
        meter = Meter("left recursion removal", budget)
    n = len(names)
    succ: list[list[int]] = [[] for _ in range(n)]
    selfloop = [False] * n
    total = 0
    for a in range(n):
        total += len(table[a])
        for body in table[a]:
            if body and body[0] >= 0:
                succ[a].append(body[0])
                if body[0] == a:
                    selfloop[a] = True
    meter.spend(n + total)
    taken = set(names)
    for comp in sccs(n, succ):
        if len(comp) == 1 and not selfloop[comp[0]]:
            continue
        members = sorted(comp)
        if len(members) == 1:
            a = members[0]
            n_rows = len(table)
            total -= len(table[a])
            _remove_direct(a, table[a], names, taken, table, meter)
            total += len(table[a]) + sum(len(row) for row in table[n_rows:])
            continue
        own = sum(len(table[m]) for m in members)
        others = total - own
        candidates: list[list[int]] = [
            members,
            members[::-1],
            sorted(members, key=lambda m: len(table[m])),
            sorted(members, key=lambda m: -len(table[m])),
        ]
        meter.spend(4 * len(members))
        # each order is tried in place and undone: the rows of the members, the rows and
        # names appended for the fresh ``A__lr`` symbols
        saved = [table[m] for m in members]
        n_names = len(names)
        n_rows = len(table)
        best: tuple[list[list[Body]], list[list[Body]], list[str]] | None = None
        best_size = -1
        last_error: GrammarTooLarge | None = None
        for order in candidates:
            try:
                _paull(order, table, names, taken, budget, others, meter)
                size = sum(len(table[m]) for m in members) + sum(len(row) for row in table[n_rows:])
                if best is None or size < best_size:
                    best = ([table[m] for m in members], table[n_rows:], names[n_names:])
                    best_size = size
            except GrammarTooLarge as exc:
                if meter.work > meter.allowance:
                    raise
                last_error = exc
            for m, row in zip(members, saved, strict=True):
                table[m] = row
            del table[n_rows:]
            for name in names[n_names:]:
                taken.discard(name)
            del names[n_names:]
        if best is None:
            assert last_error is not None
            raise last_error
        rows, extra, new_names = best
        for m, row in zip(members, rows, strict=True):
            table[m] = row
        table.extend(extra)
        names.extend(new_names)
        taken.update(new_names)
        total = others + best_size
    return table


def remove_left_recursion(g: Grammar, *, budget: int = DEFAULT_BUDGET) -> Grammar:
    """Remove direct and indirect left recursion.

    The grammar is first made epsilon-free (:func:`remove_epsilon`, which keeps a
    possible ``S' -> ε`` on a start that occurs on no right-hand side) and its unit
    cycles are collapsed; both are needed because an epsilon rule can hide left
    recursion (``A -> B A`` with ``B`` nullable) and a unit cycle cannot be removed by
    substitution.  Then, inside every cyclic strongly connected component of the
    left-corner graph, Paull's ordered substitution is applied: for the i-th member
    ``A_i``, rules ``A_i -> A_j γ`` with ``j < i`` are replaced by ``A_j``'s rules, then
    direct recursion ``A -> A α | β`` becomes ``A -> β | β A'``, ``A' -> α | α A'``
    (``A'`` is a fresh ``<A>__lr``).  Several member orders are tried and the smallest
    result is kept.

    Parameters
    ----------
    g : Grammar
        Any grammar.
    budget : int, keyword-only
        Maximum total number of rules while rewriting (default
        :data:`~formalgram.transforms.budget.DEFAULT_BUDGET`); it also caps the epsilon-free
        grammar and sets the work allowed
        (:func:`~formalgram.transforms.budget.work_allowance`).

    Returns
    -------
    Grammar
        ``L(result) == L(g)`` (empty string included); no nonterminal ``A`` has a
        derivation ``A =>+ A γ``.

    Raises
    ------
    GrammarTooLarge
        When the rewriting would exceed ``budget`` rules for every member order tried, or
        its work allowance (checked as the rules are written).

    Notes
    -----
    Linear outside left-recursive components; inside a component of k members with r
    rules, Paull's substitution is O(r * k) in good cases and exponential in the worst
    case, which the budget cuts off.  Each order is tried in place and undone, so a grammar
    with many small components costs time linear in its size.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> E = Nonterminal("E")
    >>> a, p = ByteSet.single(97), ByteSet.single(43)
    >>> g = Grammar([Production(E, [E, p, E]), Production(E, [a])], "E")
    >>> sorted(p.lhs.name for p in remove_left_recursion(g).productions)
    ['E', 'E', 'E__lr', 'E__lr']
    >>> remove_left_recursion(g, budget=3)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: left recursion removal exceeded its budget of 3 (more than 3 rules after removing left recursion)
    """
    meter = Meter("left recursion removal", budget)
    g = merge_unit_cycles(remove_epsilon(g, budget=budget))
    names = list(g.names)
    table: list[list[Body]] = [[] for _ in names]
    for lhs, rhs in g.rules:
        table[lhs].append(rhs)
    table = remove_left_recursion_table(names, g.start_id, table, budget, meter)
    rules: list[IdRule] = [(a, body) for a in range(len(names)) for body in table[a]]
    if len(rules) > budget:
        # removing direct recursion at most doubles a nonterminal's rules: checked once here
        meter.too_many_rules("after removing left recursion")
    return compact(names, g.masks, g.start_id, rules)
