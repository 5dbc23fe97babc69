"""Greibach normal form with byte-set terminals, kept small.

A grammar is in GNF (as the CFGzip paper defines it) when every rule is
``A -> a B1 .. Bn`` with ``a`` a non-empty byte set and ``B1 .. Bn`` nonterminals other
than the start, except possibly the single rule ``S -> ε`` for the start ``S``.

The conversion (see :func:`to_gnf`) is a pipeline of exact rewritings; what keeps
the result small is

* doing epsilon removal with a bounded expansion per rule (long rules are cut);
* collapsing unit cycles instead of expanding them;
* removing left recursion only inside cyclic components of the left-corner graph;
* substituting only the *leftmost* symbol of each rule, on demand, in topological
  order of the (now acyclic) left-corner graph, and only for nonterminals that the
  result needs;
* merging rules ``A -> a β`` and ``A -> b β`` into ``A -> (a|b) β`` (a byte-set union);
* sharing one nonterminal ``T -> a`` per distinct byte set used after the first
  position;
* finally merging nonterminals whose rule sets coincide up to that merging (the
  coarsest stable partition, computed by refinement like DFA minimisation).
"""

from __future__ import annotations

from formalgram.analysis import nullable
from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.transforms.epsilon import remove_epsilon
from formalgram.transforms.left_recursion import remove_left_recursion_table
from formalgram.transforms.unit import merge_unit_cycles
from formalgram.transforms.useless import compact, remove_useless

Body = tuple[int, ...]

DEFAULT_BUDGET = 200_000


def is_gnf(g: Grammar) -> bool:
    """True when ``g`` is in Greibach normal form.

    Every rule must be ``A -> a B1 .. Bn`` (``a`` a non-empty byte set, ``Bi``
    nonterminals) and the start symbol must occur on no right-hand side; the start
    (and only the start) may also have the rule ``S -> ε``.

    Complexity
    ----------
    O(|G|).

    Example
    -------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A = Nonterminal("S"), Nonterminal("A")
    >>> a = ByteSet.single(97)
    >>> is_gnf(Grammar([Production(S, [a, A]), Production(A, [a])], "S"))
    True
    >>> is_gnf(Grammar([Production(S, [A, a]), Production(A, [a])], "S"))
    False
    """
    start = g.start_id
    masks = g.masks
    for lhs, rhs in g.rules:
        if not rhs:
            if lhs != start:
                return False
            continue
        first = rhs[0]
        if first >= 0 or masks[~first] == 0:
            return False
        for s in rhs[1:]:
            if s < 0 or s == start:
                return False
    return True


class _Builder:
    """Mutable state of one conversion: names, masks and the budget counter."""

    def __init__(self, names: list[str], masks: list[int], budget: int) -> None:
        self.names = names
        self.taken = set(names)
        self.masks = masks
        self.mask_id: dict[int, int] = {}
        for i, m in enumerate(masks):
            self.mask_id.setdefault(m, i)
        self.budget = budget
        self.count = 0

    def terminal(self, mask: int) -> int:
        t = self.mask_id.get(mask)
        if t is None:
            t = len(self.masks)
            self.masks.append(mask)
            self.mask_id[mask] = t
        return ~t

    def fresh(self, base: str) -> int:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        self.names.append(name)
        return len(self.names) - 1

    def charge(self, k: int, where: str) -> None:
        self.count += k
        if self.count > self.budget:
            raise GrammarTooLarge(
                "GNF conversion", self.budget, f"more than {self.budget} rules while expanding {where}"
            )


def _terminal_name(mask: int) -> str:
    if mask & (mask - 1) == 0:
        b = mask.bit_length() - 1
        ch = chr(b)
        if ch.isascii() and ch.isalnum():
            return f"t_{ch}"
        return f"t_x{b:02x}"
    return "t_set"


def _lift_terminals(table: list[list[Body]], b: _Builder) -> None:
    """Replace every terminal after the first position by a shared ``T -> a``."""
    lifted: dict[int, int] = {}
    for a in range(len(table)):
        new: list[Body] = []
        for body in table[a]:
            if any(s < 0 for s in body[1:]):
                items = [body[0]]
                for s in body[1:]:
                    if s < 0:
                        mask = b.masks[~s]
                        nt = lifted.get(mask)
                        if nt is None:
                            nt = b.fresh(_terminal_name(mask))
                            lifted[mask] = nt
                            table.append([(s,)])
                        items.append(nt)
                    else:
                        items.append(s)
                new.append(tuple(items))
            else:
                new.append(body)
        table[a] = new


def _expand(table: list[list[Body]], start: int, b: _Builder) -> dict[int, dict[Body, int]]:
    """Leftmost substitution on demand; returns GNF rules (tail -> mask) per needed nonterminal.

    ``table`` must be free of left recursion, epsilon rules and non-leading terminals.
    """
    gnf: dict[int, dict[Body, int]] = {}
    masks = b.masks

    def ensure(root: int) -> None:
        # iterative post-order over left-corner edges
        stack: list[tuple[int, int]] = [(root, 0)]
        on_path = {root}
        while stack:
            a, i = stack[-1]
            bodies = table[a]
            advanced = False
            while i < len(bodies):
                x = bodies[i][0]
                i += 1
                if x >= 0 and x not in gnf:
                    if x in on_path:
                        raise AssertionError("left recursion survived its removal")
                    stack[-1] = (a, i)
                    stack.append((x, 0))
                    on_path.add(x)
                    advanced = True
                    break
            if advanced:
                continue
            stack.pop()
            on_path.discard(a)
            out: dict[Body, int] = {}
            for body in bodies:
                x = body[0]
                rest = body[1:]
                if x < 0:
                    out[rest] = out.get(rest, 0) | masks[~x]
                else:
                    for tail, m in gnf[x].items():
                        key = tail + rest
                        out[key] = out.get(key, 0) | m
            b.charge(len(out), repr(b.names[a]))
            gnf[a] = out

    needed = [start]
    seen = {start}
    while needed:
        a = needed.pop()
        if a not in gnf:
            ensure(a)
        for tail in gnf[a]:
            for s in tail:
                if s not in seen:
                    seen.add(s)
                    needed.append(s)
    return {a: gnf[a] for a in seen}


def _minimise(
    rules: dict[int, dict[Body, int]], start: int
) -> tuple[dict[int, dict[Body, int]], int, list[int]]:
    """Merge nonterminals with identical rule sets (coarsest stable partition).

    Returns the quotient rules keyed by representative, the start's representative and
    the representative of each nonterminal (indexable by id, -1 when absent).
    """
    ids = sorted(rules)
    top = max(ids) + 1 if ids else 1
    cls = [-1] * top
    for a in ids:
        cls[a] = 0
    count = 1
    while True:
        keys: dict[tuple[int, frozenset[tuple[Body, int]]], int] = {}
        new_cls = [-1] * top
        for a in ids:
            merged: dict[Body, int] = {}
            for tail, m in rules[a].items():
                k = tuple(cls[s] for s in tail)
                merged[k] = merged.get(k, 0) | m
            key = (cls[a], frozenset(merged.items()))
            c = keys.get(key)
            if c is None:
                c = len(keys)
                keys[key] = c
            new_cls[a] = c
        cls = new_cls
        if len(keys) == count:
            break
        count = len(keys)
    rep_of_cls: dict[int, int] = {}
    for a in ids:
        if cls[a] not in rep_of_cls:
            rep_of_cls[cls[a]] = a
    rep_of_cls[cls[start]] = start
    rep = [-1] * top
    for a in ids:
        rep[a] = rep_of_cls[cls[a]]
    out: dict[int, dict[Body, int]] = {}
    for c, a in rep_of_cls.items():
        merged2: dict[Body, int] = {}
        for tail, m in rules[a].items():
            k2 = tuple(rep[s] for s in tail)
            merged2[k2] = merged2.get(k2, 0) | m
        out[a] = merged2
    return out, rep[start], rep


def to_gnf(g: Grammar, *, budget: int = DEFAULT_BUDGET) -> Grammar:
    """Convert ``g`` to Greibach normal form, keeping ``L`` exactly and the result small.

    Pipeline: :func:`remove_useless`; :func:`remove_epsilon` (the empty string is set
    aside and restored at the end); collapse unit cycles; remove left recursion in
    the cyclic components of the left-corner graph (Paull's substitution, best of a
    few member orders); replace terminals after the first position by shared
    nonterminals ``T -> a``; substitute the leftmost symbol of each rule on demand in
    topological order, merging rules that differ only in their first byte set;
    merge nonterminals with identical rule sets to a fixpoint; add a fresh start
    when the start occurs on a right-hand side, and ``S -> ε`` when ``ε ∈ L(g)``.

    Parameters
    ----------
    g : Grammar
        Any grammar with a non-empty language.
    budget : int
        Maximum number of rules created by any stage of the conversion (default
        200,000).  Every shared grammar of the project needs far less (see
        ``bench/results/gnf_sizes.md``).

    Returns
    -------
    Grammar
        ``is_gnf(result)`` holds and ``L(result) == L(g)``, the empty string included.

    Raises
    ------
    EmptyLanguageError
        When ``L(g)`` is empty.
    GrammarTooLarge
        When a stage would exceed ``budget`` rules (raised as soon as the count passes
        the budget, so memory stays bounded).

    Complexity
    ----------
    Linear for the cleaning stages; the substitution stages are output-sensitive
    (each created rule costs O(its length)) and bounded by ``budget``.  Worst case
    exponential in |G|, which the budget cuts off.

    Example
    -------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> E = Nonterminal("E")
    >>> a, p = ByteSet.single(97), ByteSet.single(43)
    >>> g = Grammar([Production(E, [E, p, E]), Production(E, [a])], "E")
    >>> is_gnf(to_gnf(g))
    True
    """
    g = remove_useless(g)
    has_eps = g.start_id in nullable(g)
    start_name = g.names[g.start_id]
    g = remove_epsilon(g)
    # work on the epsilon-free rules of the original start (a fresh epsilon start made
    # by remove_epsilon is dropped; the empty string is restored at the end)
    proper = [r for r in g.rules if r[1]]
    old_start = g.id_of(start_name)
    if not any(lhs == old_start for lhs, _ in proper):
        # L(g) == {ε}
        return Grammar.from_ids([start_name], [], 0, [(0, ())])
    g = remove_useless(Grammar.from_ids(g.names, g.masks, old_start, proper))
    g = merge_unit_cycles(g)
    if len(g.rules) > budget:
        raise GrammarTooLarge("GNF conversion", budget, f"{len(g.rules)} rules after epsilon removal")
    names = list(g.names)
    table: list[list[Body]] = [[] for _ in names]
    for lhs, rhs in g.rules:
        table[lhs].append(rhs)
    table = remove_left_recursion_table(names, g.start_id, table, budget)
    b = _Builder(names, list(g.masks), budget)
    _lift_terminals(table, b)
    expanded = _expand(table, g.start_id, b)
    quotient, start, _ = _minimise(expanded, g.start_id)
    masks = b.masks
    rules: list[IdRule] = []
    start_on_rhs = False
    for a, tails in quotient.items():
        for tail, m in tails.items():
            if start in tail:
                start_on_rhs = True
            rules.append((a, (b.terminal(m), *tail)))
    if start_on_rhs:
        new_start = b.fresh(start_name + "__gnf")
        rules.extend((new_start, body) for lhs, body in list(rules) if lhs == start)
        start = new_start
    if has_eps:
        rules.append((start, ()))
    return compact(b.names, masks, start, rules)
