"""The substitution route to GNF: terminals lifted out of tails, then leftmost substitution.

Runs after Paull's left-recursion removal
(:func:`~formalgram.transforms.left_recursion.remove_left_recursion_table`), as the
alternative construction of :func:`formalgram.transforms.gnf.to_gnf`.
"""

from __future__ import annotations

from formalgram.transforms.gnf_rules import Body, Builder, terminal_name

__all__ = ["expand_leftmost", "lift_terminals"]


def lift_terminals(table: list[list[Body]], b: Builder) -> None:
    """Replace every terminal after the first position by a shared ``T -> a``."""
    lifted: dict[int, int] = {}
    for a in range(len(table)):
        new: list[Body] = []
        b.meter.spend(1 + sum(len(body) for body in table[a]))
        for body in table[a]:
            i = 1
            while i < len(body) and body[i] >= 0:
                i += 1
            if i < len(body):
                items = [body[0]]
                for s in body[1:]:
                    if s < 0:
                        mask = b.masks[~s]
                        nt = lifted.get(mask)
                        if nt is None:
                            nt = b.fresh(terminal_name(mask))
                            lifted[mask] = nt
                            table.append([(s,)])
                        items.append(nt)
                    else:
                        items.append(s)
                new.append(tuple(items))
            else:
                new.append(body)
        table[a] = new


def _ensure(root: int, table: list[list[Body]], gnf: dict[int, dict[Body, int]], b: Builder) -> None:
    """:func:`expand_leftmost`'s GNF rules of ``root`` and of every nonterminal below it by
    left corners not yet in ``gnf`` (a module-level function: compiled, one nested in its
    caller would make a reference cycle with the caller's closure, holding ``gnf`` and
    ``table`` until the cyclic collector runs)."""
    masks = b.masks
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
                m = masks[~x]
                old = out.setdefault(rest, m)
                if old != m:
                    out[rest] = old | m
                b.meter.spend(len(body))
            else:
                subs = gnf[x]
                # what this body writes is charged before it is written
                b.meter.spend(len(subs) * len(body) + sum(len(tail) for tail in subs))
                for tail, m in subs.items():
                    key = tail + rest
                    old = out.setdefault(key, m)
                    if old != m:
                        out[key] = old | m
                if b.count + len(out) > b.budget:
                    b.charge(len(out), a)
        b.charge(len(out), a)
        gnf[a] = out


def expand_leftmost(table: list[list[Body]], start: int, b: Builder) -> dict[int, dict[Body, int]]:
    """Leftmost substitution on demand; returns GNF rules (tail -> mask) per needed nonterminal.

    ``table`` must be free of left recursion, epsilon rules and non-leading terminals.
    """
    gnf: dict[int, dict[Body, int]] = {}
    needed = [start]
    seen = {start}
    while needed:
        a = needed.pop()
        if a not in gnf:
            _ensure(a, table, gnf, b)
        for tail in gnf[a]:
            for s in tail:
                if s not in seen:
                    seen.add(s)
                    needed.append(s)
    return {a: gnf[a] for a in seen}
