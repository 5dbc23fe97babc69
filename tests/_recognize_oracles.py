"""Brute-force language oracles used by the recognizer tests (independent of Earley).

Everything here is a least-fixpoint computation over spans of the input, written as plainly
as possible; it is exponential-free but cubic-to-quintic, so keep inputs short (<= ~10 bytes).
"""

from __future__ import annotations

from itertools import product

from formalgram import Grammar


def generating(g: Grammar) -> set[int]:
    """Nonterminals deriving at least one byte string (terminals with an empty set derive none)."""
    gen: set[int] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            if lhs not in gen and all((s in gen) if s >= 0 else g.masks[~s] != 0 for s in rhs):
                gen.add(lhs)
                changed = True
    return gen


def _step(g: Grammar, w: bytes, table: set[tuple[int, int, int]], starts: set[int], s: int) -> set[int]:
    """End positions reachable from ``starts`` by deriving symbol ``s`` exactly (per ``table``)."""
    out: set[int] = set()
    if s < 0:
        mask = g.masks[~s]
        for e in starts:
            if e < len(w) and (mask >> w[e]) & 1:
                out.add(e + 1)
    else:
        for a, i, j in table:
            if a == s and i in starts:
                out.add(j)
    return out


def span_table(g: Grammar, w: bytes) -> set[tuple[int, int, int]]:
    """All ``(A, i, j)`` with ``A =>* w[i:j]`` (least fixpoint, handles cycles and epsilon)."""
    n = len(w)
    table: set[tuple[int, int, int]] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            for i in range(n + 1):
                ends = {i}
                for s in rhs:
                    ends = _step(g, w, table, ends, s)
                    if not ends:
                        break
                for j in ends:
                    if (lhs, i, j) not in table:
                        table.add((lhs, i, j))
                        changed = True
    return table


def oracle_accepts(g: Grammar, w: bytes) -> bool:
    """``w`` in L(g), by the span table."""
    return (g.start_id, 0, len(w)) in span_table(g, w)


def oracle_is_prefix(g: Grammar, w: bytes) -> bool:
    """``w`` in Pr(L(g)): some nonterminal chain derives a string that starts with ``w``.

    ``P(A, i)`` holds when ``A`` derives a string that starts with ``w[i:]``.  For a rule
    ``A -> X1 .. Xk`` it holds when, for some ``m``, ``X1 .. X(m-1)`` derive ``w[i:e]`` exactly,
    ``Xm`` derives a string starting with ``w[e:]`` and ``X(m+1) .. Xk`` are generating; or when
    ``X1 .. Xk`` derive ``w[i:]`` exactly.  ``P(A, len(w))`` is "A is generating".
    """
    n = len(w)
    gen = generating(g)
    table = span_table(g, w)

    def sym_generating(s: int) -> bool:
        return s in gen if s >= 0 else g.masks[~s] != 0

    pref: set[tuple[int, int]] = {(a, n) for a in gen}
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            for i in range(n + 1):
                if (lhs, i) in pref:
                    continue
                ok = False
                ends = {i}
                for m, s in enumerate(rhs):
                    rest_ok = all(sym_generating(x) for x in rhs[m + 1 :])
                    if rest_ok:
                        for e in ends:
                            if s < 0:
                                mask = g.masks[~s]
                                if mask and (e == n or (n - e == 1 and (mask >> w[e]) & 1)):
                                    ok = True
                            elif (s, e) in pref:
                                ok = True
                    if ok:
                        break
                    ends = _step(g, w, table, ends, s)
                    if not ends:
                        break
                else:
                    if n in ends:
                        ok = True
                if ok:
                    pref.add((lhs, i))
                    changed = True
    return (g.start_id, 0) in pref


def all_strings(alphabet: bytes, max_len: int) -> list[bytes]:
    """Every string over ``alphabet`` of length ``<= max_len``, sorted by (length, bytes)."""
    letters = sorted(set(alphabet))
    out: list[bytes] = []
    for k in range(max_len + 1):
        out.extend(bytes(t) for t in product(letters, repeat=k))
    return out
