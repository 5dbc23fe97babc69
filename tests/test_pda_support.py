"""Shared helpers for the PDA and stack-adjacency tests (no tests here).

* :func:`gnf_grammars` -- Hypothesis strategy of small random GNF grammars over ``b"abc"``
  (some with ``S -> ε``, some with the start on right-hand sides, some with non-generating
  or unreachable nonterminals).
* :class:`DerivationOracle` -- membership and prefix tests by span-based derivation
  (CYK-style over the grammar's rules), independent of any stack simulation.
"""

from __future__ import annotations

import itertools
from functools import cache

from hypothesis import strategies as st

from formalgram import Grammar

ALPHABET = b"abc"


def all_strings(alphabet: bytes, max_len: int) -> list[bytes]:
    """Every string over ``alphabet`` of length ``0 .. max_len``."""
    out: list[bytes] = []
    for n in range(max_len + 1):
        out.extend(bytes(t) for t in itertools.product(alphabet, repeat=n))
    return out


@st.composite
def gnf_grammars(draw: st.DrawFn, max_nonterminals: int = 5, max_push: int = 3) -> Grammar:
    """Random GNF grammars; terminals are random subsets of ``b"abc"`` (rarely empty)."""
    n = draw(st.integers(1, max_nonterminals))
    names = [f"N{i}" for i in range(n)]
    start = 0
    eps = draw(st.booleans())
    # with S -> ε the start may not appear on right-hand sides
    rhs_nts = list(range(1, n)) if eps else list(range(n))
    masks: list[int] = []
    rules: list[tuple[int, tuple[int, ...]]] = []
    if eps:
        rules.append((start, ()))
    for a in range(n):
        for _ in range(draw(st.integers(0 if a else 1, 3))):
            chars = draw(st.sets(st.sampled_from(list(ALPHABET)), min_size=1, max_size=2))
            if draw(st.integers(0, 15)) == 0:
                chars = set()  # rarely, a terminal that matches nothing
            mask = 0
            for c in chars:
                mask |= 1 << c
            masks.append(mask)
            t = len(masks) - 1
            push: tuple[int, ...] = ()
            if rhs_nts:
                push = tuple(draw(st.lists(st.sampled_from(rhs_nts), max_size=max_push)))
            rules.append((a, (~t, *push)))
    return Grammar.from_ids(names, masks, start, rules)


class DerivationOracle:
    """Exact membership / prefix tests by derivation over spans (no stack simulation).

    ``derives(A, i, j)``: nonterminal ``A`` derives ``s[i:j]``; computed from the rules
    ``A -> a B1..Bn`` by splitting ``s[i+1:j]`` among ``B1..Bn``.  Prefix test: a sequence of
    symbols *prefix-derives* the rest of ``s`` when its first symbol derives a piece of it and
    the others prefix-derive the remainder, or the first symbol prefix-derives all of it and
    the others are generating.
    """

    def __init__(self, g: Grammar) -> None:
        self.g = g
        n = len(g.names)
        gen = [False] * n
        changed = True
        while changed:
            changed = False
            for lhs, rhs in g.rules:
                if not gen[lhs] and all((gen[s] if s >= 0 else g.masks[~s] != 0) for s in rhs):
                    gen[lhs] = True
                    changed = True
        self.gen = gen

    def accepts(self, s: bytes) -> bool:
        g = self.g
        if not s:
            return any(not g.rules[r][1] for r in g.rules_by_lhs[g.start_id])
        return self._tables(s)[0](g.start_id, 0, len(s))

    def is_prefix(self, s: bytes) -> bool:
        g = self.g
        if not s:
            return self.gen[g.start_id]
        return self._tables(s)[1]((g.start_id,), 0)

    def _tables(self, s: bytes):  # type: ignore[no-untyped-def]
        g = self.g
        n = len(s)
        gen = self.gen

        @cache
        def derives(a: int, i: int, j: int) -> bool:
            if i >= j:
                return False
            for r in g.rules_by_lhs[a]:
                rhs = g.rules[r][1]
                if rhs and (g.masks[~rhs[0]] >> s[i]) & 1 and seq_derives(rhs[1:], i + 1, j):
                    return True
            return False

        @cache
        def seq_derives(seq: tuple[int, ...], i: int, j: int) -> bool:
            if not seq:
                return i == j
            if j - i < len(seq):  # every non-start symbol derives at least one byte
                return False
            return any(derives(seq[0], i, k) and seq_derives(seq[1:], k, j) for k in range(i + 1, j + 1))

        @cache
        def prefix(seq: tuple[int, ...], i: int) -> bool:
            if i == n:
                return all(gen[x] for x in seq)
            if not seq:
                return False
            a, rest = seq[0], seq[1:]
            if all(gen[x] for x in rest) and first_prefix(a, i):
                return True
            return any(derives(a, i, k) and prefix(rest, k) for k in range(i + 1, n + 1))

        @cache
        def first_prefix(a: int, i: int) -> bool:
            for r in g.rules_by_lhs[a]:
                rhs = g.rules[r][1]
                if rhs and (g.masks[~rhs[0]] >> s[i]) & 1 and prefix(rhs[1:], i + 1):
                    return True
            return False

        return derives, prefix
