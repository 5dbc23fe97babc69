"""Shift symmetry of counted repetitions: the chain symbols whose displacements need not be searched.

A counted repetition ``x{0,N}`` (a JSON string's ``maxLength``, a pattern's ``{1,500}``)
becomes, in Greibach normal form, a chain of stack symbols ``X_0, X_1, ..., X_N`` where
``X_j`` reads one more ``x`` and leaves ``X_(j-1)`` (``X_j`` holds "at most ``j`` more").
The displacement search guesses every such symbol as a stack top, and a chain of a thousand
symbols makes every set of the search a thousand strings long: the tail of the MaskBench
time to first mask.

Far from the chain's end the symbols are alike: a token of at most ``H`` bytes read from
``X_(k+1)``, ``k >= H``, takes exactly the steps it takes from ``X_k`` with every chain symbol
one higher.  :func:`shift_twins` finds the chains where this holds (checked on the grammar,
below) and names, for each symbol ``X_(k+1)``, ``k >= H``, its *model* ``X_H``.  A search that
never guesses those symbols (at the start of a token, or below a popped symbol) partitions the
tokens exactly as the full search, and the domains it finds become the full ones when every
edge on a model in the domain automaton is copied to the symbols it models
(:func:`close_domains`).

Why it is exact, and the four conditions :func:`shift_twins` checks on the grammar (the
chain's rules are renamings of one another; nothing the items push reaches the chain; equal
``below`` sets from ``H`` symbols under the model up; equal ``above`` sets along the twins):
``proofs/shift_symmetry.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from formalgram.pda import PDA
from formalgram_cfgzip.search.domains import DomainAutomaton

__all__ = ["MAX_TAILS", "close_domains", "shift_twins"]

Tails = dict[tuple[int, ...], int]  # tail -> bit set of the byte classes it is pushed for
#: Symbols with more distinct rule tails than this are never taken for chain symbols (a
#: counted repetition's symbol has a few tails per form of its item; the signatures of large
#: rule sets, compared pairwise, would cost more than the search they could save)
MAX_TAILS = 256


def _signature(rules: Tails, role: int) -> frozenset[tuple[tuple[int, ...], int]]:
    """``rules`` with the symbol ``role`` replaced by ``-1`` in every tail."""
    return frozenset((tuple(-1 if x == role else x for x in t), bits) for t, bits in rules.items())


def _shape(rules: Tails) -> tuple[tuple[int, int], ...]:
    """What :func:`_signature` keeps of ``rules`` whatever the role: tail lengths and classes."""
    return tuple(sorted((len(t), bits) for t, bits in rules.items()))


def _links(rules: list[Tails]) -> tuple[dict[int, int], dict[int, int]]:
    """``link[a] = b`` when ``b`` is the only symbol of ``a``'s tails such that ``a``'s rules
    are ``b``'s with some symbol ``s`` of ``b``'s tails renamed ``b`` (``role[b] = s``)."""
    shapes = [_shape(r) for r in rules]
    sigs: dict[tuple[int, int], frozenset[tuple[tuple[int, ...], int]]] = {}

    def sig(a: int, s: int) -> frozenset[tuple[tuple[int, ...], int]]:
        key = (a, s)
        got = sigs.get(key)
        if got is None:
            got = sigs[key] = _signature(rules[a], s)
        return got

    link: dict[int, int] = {}
    role: dict[int, int] = {}
    for a, ra in enumerate(rules):
        if not ra or len(ra) > MAX_TAILS:
            continue
        found: list[tuple[int, int]] = []
        for b in sorted({x for t in ra for x in t} - {a}):
            if shapes[b] != shapes[a]:
                continue
            want = sig(a, b)
            for s in sorted({x for t in rules[b] for x in t} - {a, b}):
                if sig(b, s) == want:
                    found.append((b, s))
        if len(found) == 1:
            b, s = found[0]
            if role.setdefault(b, s) == s:  # b plays one role for every symbol linked to it
                link[a] = b
    return link, role


def _reach(rules: list[Tails], roots: set[int]) -> set[int]:
    """The symbols reachable from ``roots`` through rule tails (``roots`` included)."""
    seen = set(roots)
    todo = list(roots)
    while todo:
        for t in rules[todo.pop()]:
            for x in t:
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
    return seen


def shift_twins(pda: PDA, below: Sequence[int], horizon: int, *, min_skipped: int = 1) -> dict[int, int]:
    """The chain symbols a search of tokens of at most ``horizon`` bytes need not guess, with their models.

    Parameters
    ----------
    pda : PDA
        The one-state PDA of a GNF grammar (:meth:`formalgram.pda.PDA.from_gnf`).
    below : sequence of int
        ``below[y]``: bit set of the symbols that may lie below ``y``
        (:func:`formalgram.adjacency.below_bits` of the same grammar).
    horizon : int
        The longest token, in bytes, that a search with the result may read.
    min_skipped : int, keyword-only
        Chains that would skip fewer symbols are left alone.

    Returns
    -------
    dict
        Symbol -> its model (a symbol of the same chain, itself not in the dict).  Empty when
        the grammar has no such chain.

    Notes
    -----
    O(rules) to group the rules by symbol and shape, plus one signature (a rule set with one
    symbol abstracted) per pair of symbols of equal shape that mention each other, each with
    at most :data:`MAX_TAILS` tails, plus a reachability pass per chain found.  Why the
    result is exact: ``proofs/shift_symmetry.md``.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> from formalgram.adjacency import below_bits
    >>> gnf = to_gnf(parse_gbnf('root ::= "[" [a-z]{0,12} "]"'))
    >>> pda = PDA.from_gnf(gnf)
    >>> twins = shift_twins(pda, below_bits(gnf), 4)
    >>> len(twins), len(set(twins.values()))
    (6, 1)
    >>> shift_twins(pda, below_bits(gnf), 20)
    {}
    """
    n = len(below)
    if n < horizon + min_skipped + 2:  # no chain can reach past the horizon: the common case
        return {}
    rules: list[Tails] = [{} for _ in range(n)]
    for (c, lhs), tails in pda.table.items():
        r = rules[lhs]
        for t in tails:
            r[t] = r.get(t, 0) | (1 << c)
    link, role = _links(rules)
    linked_to: dict[int, int] = {}
    for a, b in link.items():
        linked_to[b] = -1 if b in linked_to else a
    twins: dict[int, int] = {}
    # each chain from its bottom X_1 (linked to, links nowhere); X_0 = its role
    for bottom in sorted(b for b in linked_to if b not in link):
        chain = [role[bottom], bottom]
        while True:
            up = linked_to.get(chain[-1], -1)
            if up < 0 or up in chain:
                break
            chain.append(up)
        # chain[j] = X_j; for j >= 1, X_(j+1)'s rules are X_j's renamed (link + role agree)
        if any(role.get(chain[j - 1]) != chain[j - 2] for j in range(2, len(chain))):
            continue
        top = len(chain) - 1
        if top - horizon < min_skipped + 1:
            continue
        members = set(chain)
        # X_j (j >= 1) leaves no chain symbol but X_(j-1), and nothing else it pushes ever does
        if any(
            x in members and x != chain[j - 1]
            for j in range(1, len(chain))
            for t in rules[chain[j]]
            for x in t
        ):
            continue
        outside = {x for j in range(1, len(chain)) for t in rules[chain[j]] for x in t} - members
        if _reach(rules, outside) & members:
            continue
        # lowest b with below(X_j) equal for all j in [b, top]
        b = top
        while b > 0 and below[chain[b - 1]] == below[chain[top]]:
            b -= 1
        model_at = b + horizon
        if top - model_at < min_skipped:
            continue
        above: dict[int, int] = {x: 0 for x in chain[model_at:]}
        mask = sum(1 << x for x in above)
        for y, bits in enumerate(below):
            hit = bits & mask
            while hit:
                low = hit & -hit
                above[low.bit_length() - 1] |= 1 << y
                hit ^= low
        model = chain[model_at]
        for j in range(model_at + 1, top + 1):
            if above[chain[j]] != above[chain[j - 1]]:
                break
            twins[chain[j]] = model
    return twins


def close_domains(automaton: DomainAutomaton, twins: Mapping[int, int]) -> DomainAutomaton:
    """``automaton`` with every edge on a model copied to each symbol it models.

    Parameters
    ----------
    automaton : DomainAutomaton
        The domain automaton of a search that did not guess the symbols of ``twins``.
    twins : mapping
        Symbol -> model (:func:`shift_twins`).

    Returns
    -------
    DomainAutomaton
        The domain automaton of the full search: the same states, outputs and class sets, and
        the added edges kept in ascending symbol order within each state.  An edge already
        on a modelled symbol is left as it is.

    Notes
    -----
    O(edges + added edges) numpy work.

    Examples
    --------
    >>> a = DomainAutomaton(*(np.array(x, np.int32) for x in
    ...     ([0, 2, 2, 2], [1, 5], [1, 2], [-1, 0, 0], [0, 1], [0])))
    >>> b = close_domains(a, {7: 5, 6: 5})
    >>> b.edge_start.tolist(), b.edge_sym.tolist(), b.edge_to.tolist()
    ([0, 4, 4, 4], [1, 5, 6, 7], [1, 2, 2, 2])
    """
    if not twins or automaton.num_edges == 0:
        return automaton
    groups: dict[int, list[int]] = {}
    for x, m in sorted(twins.items()):
        groups.setdefault(m, []).append(x)
    starts = automaton.edge_start.astype(np.int64)
    state_of = np.repeat(np.arange(automaton.num_states, dtype=np.int64), np.diff(starts))
    syms = automaton.edge_sym.astype(np.int64)
    tos = automaton.edge_to.astype(np.int64)
    # edges already on a modelled symbol (none when the search skipped them): left as they are
    on_twin = np.isin(syms, np.array(sorted(twins), dtype=np.int64))
    present = set(zip(state_of[on_twin].tolist(), syms[on_twin].tolist(), strict=True))
    add_state: list[int] = []
    add_sym: list[int] = []
    add_to: list[int] = []
    for i in np.flatnonzero(np.isin(syms, np.array(sorted(groups), dtype=np.int64))).tolist():
        d, m, t = int(state_of[i]), int(syms[i]), int(tos[i])
        for x in groups[m]:
            if (d, x) not in present:
                add_state.append(d)
                add_sym.append(x)
                add_to.append(t)
    if not add_state:
        return automaton
    state_all = np.concatenate([state_of, np.array(add_state, dtype=np.int64)])
    sym_all = np.concatenate([syms, np.array(add_sym, dtype=np.int64)])
    to_all = np.concatenate([tos, np.array(add_to, dtype=np.int64)])
    order = np.lexsort((sym_all, state_all))
    counts = np.bincount(state_all, minlength=automaton.num_states)
    edge_start = np.zeros(automaton.num_states + 1, dtype=np.int64)
    np.cumsum(counts, out=edge_start[1:])
    return DomainAutomaton(
        edge_start.astype(np.int32),
        sym_all[order].astype(np.int32),
        to_all[order].astype(np.int32),
        automaton.out,
        automaton.set_start,
        automaton.set_class,
    )
