"""The left-corner construction of a GNF grammar (no left-recursion removal needed).

:class:`LeftCorner` turns an epsilon-free table of rules without unit cycles straight into
GNF rules, one continuation nonterminal per pair of a nonterminal and a left corner; its
variants (dominator split, unit steps spelled out, cut at the children, deep cut) are
chosen by :func:`formalgram.transforms.gnf.to_gnf`, which runs them on one table and lets them
share what depends on the table alone (:class:`Shared`).
"""

from __future__ import annotations

from collections.abc import Container
from typing import cast

from formalgram.transforms.budget import Meter
from formalgram.transforms.gnf_rules import Body, Builder, terminal_name
from formalgram.transforms.left_recursion import body_key
from formalgram.transforms.unit import sccs

__all__ = ["CutFrame", "LeftCorner", "Shared"]


class Shared:
    """What the left-corner variants of one conversion compute from the same table, kept once.

    The components of the left-corner graph, the first maps, the unit reaches, the unit-closed
    raw continuation bodies and the dominators depend on the table only.  Each entry keeps
    the steps of work its computation charged, chunk by chunk, and a variant that takes an
    entry from here charges those chunks again at the point where it would have computed
    it, so the meter (and with it every budget decision) runs exactly as without sharing.
    The table must not change while the entries are in use.
    """

    def __init__(self, table: list[list[Body]]) -> None:
        self.table = table
        self.comp: list[int] | None = None
        self.cyclic: list[bool] = []
        self.firsts: dict[int, tuple[dict[int, list[tuple[int, Body]]], list[int]]] = {}
        self.unit_reach: dict[int, tuple[set[int], list[int]]] = {}
        # pair key of (a, x) (see LeftCorner.pair) -> the unit-closed bodies of [a/x], their
        # keys, and the work charged
        self.raw: dict[int, tuple[list[tuple[Body, int]], list[object], int]] = {}
        self.idoms: dict[int, tuple[dict[int, int], list[int]]] = {}
        # pair key of (a, x) -> x and its unit ancestors in LC(a), parents first
        self.orders: dict[int, list[int]] = {}
        # pair key of (a, x) -> the base of the name of [a/x] (before fresh_name's suffix)
        self.bases: dict[int, str] = {}
        # terminal id -> the base of the name of its lifted ``T -> a``
        self.lift_bases: dict[int, str] = {}
        # the offset of the pair keys of ``raw`` (the number of terminals; -1: no user yet)
        self.offset = -1


def _replay(meter: Meter, chunks: list[int]) -> None:
    """Charge ``chunks`` one by one, as the computation that recorded them did."""
    for k in chunks:
        meter.spend(k)


class LeftCorner:
    """Left-corner construction straight into GNF (Rosenkrantz; Moore 2000).

    For a nonterminal ``A`` let ``LC(A)`` be the nonterminals reachable from ``A`` through
    leftmost symbols (``A`` included).  For a symbol ``X`` that starts a rule of some
    ``B`` in ``LC(A)``, the nonterminal ``A/X`` derives what is left of a string of ``A``
    once a leftmost ``X`` has been recognised::

        A   -> t A/t          for each terminal t leading a rule of LC(A)
        A/X -> β A/B          for each B in LC(A) and rule B -> X β
        A/A -> ε

    Here ``[A/X]`` stands for ``A/X`` without the empty string; ``A/X`` is nullable iff
    ``X`` is reached from ``A`` by unit rules (``A`` included).  Unit rules ``B -> X``
    give unit steps ``A/X -> A/B`` which are closed over (the input has no unit
    cycles).  A body ``β`` starting with a nonterminal ``C`` is made GNF by
    substituting ``C``'s own rules ``C -> t [C/t] | t``: one level only, so tails never
    accumulate.  The input must be epsilon-free; left recursion is allowed.
    """

    def __init__(
        self,
        table: list[list[Body]],
        b: Builder,
        factor: bool,
        distribute: bool,
        cut: bool = False,
        deep: bool = False,
        shared: Shared | None = None,
    ) -> None:
        self.cut = cut or deep
        self.deep = deep
        if shared is None:
            shared = Shared(table)
        assert shared.table is table
        self.shared = shared
        # strongly connected components of the left-corner graph (deep cuts stay acyclic)
        n = len(table)
        b.meter.spend(n + sum(len(bodies) for bodies in table))
        comp = shared.comp
        if comp is None:
            succ = [[body[0] for body in table[v] if body[0] >= 0] for v in range(n)]
            comp = [0] * n
            cyclic = [False] * n
            for i, members in enumerate(sccs(n, succ)):
                for v in members:
                    comp[v] = i
                    cyclic[v] = len(members) > 1 or v in succ[v]
            shared.comp = comp
            shared.cyclic = cyclic
        self.comp = comp
        self.cyclic = shared.cyclic
        self.factor = factor
        self.distribute = distribute
        # the tables keyed by a pair (a, x) use one int, ``a * stride + x + offset``: the
        # symbols x of the table are its nonterminals and the terminals ~t, t < len(b.masks)
        self.offset = len(b.masks)
        self.stride = self.offset + len(table)
        if shared.offset < 0:
            shared.offset = self.offset
        assert shared.offset == self.offset
        self.ups: dict[int, list[int]] = {}
        self.table = table
        self.b = b
        self.meter = b.meter
        self.n_orig = len(table)
        self.firsts: dict[int, dict[int, list[tuple[int, Body]]]] = {}
        self.raw: dict[int, list[tuple[Body, int]]] = {}
        self.unit_reach: dict[int, set[int]] = {}
        self.ids: dict[int, int] = {}
        self.top: dict[int, list[tuple[int, Body]]] = {}
        # the summed tail lengths of each finished ``top`` list (for the charges of cont_rules)
        self.top_len: dict[int, int] = {}
        self.lifted: dict[int, int] = {}
        self.lifted_mask: dict[int, int] = {}
        # the same by terminal id (-1: not looked up yet), so a lookup needs no mask hash
        self.lifted_t = [-1] * len(b.masks)
        self.cont_of: dict[int, tuple[int, int]] = {}

    def lift_tail(self, body: Body) -> Body:
        """``body[1:]`` with each terminal replaced by its shared ``T -> a`` (made on first use)."""
        n = len(body)
        self.meter.spend(n)
        i = 1
        while i < n and body[i] >= 0:
            i += 1
        if i == n:
            return body[1:]
        out: list[int] = list(body[1:i])
        lifted_t = self.lifted_t
        while i < n:
            s = body[i]
            i += 1
            if s >= 0:
                out.append(s)
                continue
            t = ~s
            nt = lifted_t[t] if t < len(lifted_t) else -1
            if nt < 0:
                mask = self.b.masks[t]
                got = self.lifted.get(mask)
                if got is None:
                    base = self.shared.lift_bases.get(t)
                    if base is None:
                        base = terminal_name(mask)
                        self.shared.lift_bases[t] = base
                    got = self.b.fresh(base)
                    self.lifted[mask] = got
                    self.lifted_mask[got] = mask
                nt = got
                if t < len(lifted_t):
                    lifted_t[t] = nt
            out.append(nt)
        return tuple(out)

    def first_map(self, a: int) -> dict[int, list[tuple[int, Body]]]:
        """Leading symbol ``X`` -> the pairs ``(B, β)`` with ``B`` in LC(a) and a rule ``B -> X β``."""
        got = self.firsts.get(a)
        if got is not None:
            return got
        known = self.shared.firsts.get(a)
        if known is not None:
            _replay(self.meter, known[1])
            self.firsts[a] = known[0]
            return known[0]
        table = self.table
        seen = {a}
        order = [a]
        chunks: list[int] = []
        i = 0
        while i < len(order):
            bodies = table[order[i]]
            # a visit, and an entry of the map (a pair and a sliced body) per rule
            chunk = 1 + 12 * len(bodies)
            chunks.append(chunk)
            self.meter.spend(chunk)
            for body in bodies:
                x = body[0]
                if x >= 0 and x not in seen:
                    seen.add(x)
                    order.append(x)
            i += 1
        fm: dict[int, list[tuple[int, Body]]] = {}
        for bnt in order:
            for body in table[bnt]:
                fm.setdefault(body[0], []).append((bnt, body[1:]))
        self.firsts[a] = fm
        self.shared.firsts[a] = (fm, chunks)
        return fm

    def nullable(self, a: int, x: int) -> bool:
        """Whether A/X derives ε: X is reached from A by unit rules (A itself included)."""
        if x == a:
            return True
        reach = self.unit_reach.get(a)
        if reach is None:
            known = self.shared.unit_reach.get(a)
            if known is not None:
                _replay(self.meter, known[1])
                self.unit_reach[a] = known[0]
                return x in known[0]
            # the symbols reached from ``a`` through rules ``B -> X`` (all of them lie in LC(a))
            table = self.table
            reach = {a}
            stack = [a]
            chunks: list[int] = []
            while stack:
                bodies = table[stack.pop()]
                chunks.append(1 + len(bodies))
                self.meter.spend(1 + len(bodies))
                for body in bodies:
                    if len(body) == 1:
                        y = body[0]
                        if y not in reach:
                            reach.add(y)
                            if y >= 0:
                                stack.append(y)
            self.unit_reach[a] = reach
            self.shared.unit_reach[a] = (reach, chunks)
        return x in reach

    def pair(self, a: int, x: int) -> int:
        """The int key of the pair ``(a, x)`` in the tables keyed by pairs."""
        return a * self.stride + x + self.offset

    def unit_order(self, a: int, x: int, done: Container[int]) -> list[int]:
        """``x`` and its unit ancestors in LC(a) not yet in ``done``, each after its unit parents.

        A unit parent of ``X`` is a ``B`` with a rule ``B -> X``; a symbol ``B`` with
        ``pair(a, B)`` in ``done`` is not entered.  The unit steps form an acyclic graph (unit
        cycles are merged beforehand); it is walked in post-order on an explicit stack, so
        chains of any length are fine.  Free of charge: the callers charge what they build.

        The walk from scratch (nothing done) is kept in :class:`Shared`: each caller's
        ``done`` holds, with a symbol, all of its unit ancestors (it adds whole orders), so
        the walk that skips ``done`` lists the same symbols as the one from scratch, minus
        those in ``done``, in the same order.
        """
        key = self.pair(a, x)
        full = self.shared.orders.get(key)
        if full is None:
            full = self.unit_walk(a, x)
            self.shared.orders[key] = full
        return [node for node in full if self.pair(a, node) not in done]

    def unit_walk(self, a: int, x: int) -> list[int]:
        """``x`` and all its unit ancestors in LC(a), each after its unit parents (post-order)."""
        fm = self.first_map(a)
        order: list[int] = []
        # frames: (symbol, index of its next unit step to look at)
        frames: list[tuple[int, int]] = [(x, 0)]
        listed = {x}
        while frames:
            node, i = frames[-1]
            entries = fm.get(node, [])
            pushed = False
            while i < len(entries):
                bnt, beta = entries[i]
                i += 1
                if not beta and bnt not in listed:
                    frames[-1] = (node, i)
                    frames.append((bnt, 0))
                    listed.add(bnt)
                    pushed = True
                    break
            if pushed:
                continue
            frames.pop()
            order.append(node)
        return order

    def raw_rules(self, a: int, x: int) -> list[tuple[Body, int]]:
        """Bodies ``(β, B)`` of ``[A/X]`` before GNF-ification, unit steps closed over.

        ``[A/X]`` gets ``(β, B)`` for each ``B`` in LC(A) with a rule ``B -> X β``, ``β``
        non-empty, and (unless unit steps are spelled out) every body of ``[A/B]`` for each
        unit rule ``B -> X``, first occurrences only, built in :meth:`unit_order`.
        """
        key = self.pair(a, x)
        got = self.raw.get(key)
        if got is not None:
            return got
        fm = self.first_map(a)
        raw = self.raw
        known_raw = self.shared.raw
        for node in [x] if self.distribute else self.unit_order(a, x, raw):
            if not self.distribute:
                known = known_raw.get(self.pair(a, node))
                if known is not None:
                    self.meter.spend(known[2])
                    raw[self.pair(a, node)] = known[0]
                    continue
            entries = fm.get(node, [])
            out: list[tuple[Body, int]] = []
            # deduplicated by body_key (bodies over the terminals ~0 and ~1 would collide);
            # the keys are kept with the lists, so copying a list does not rebuild them.
            # Copies go through ``object`` views: a compiled build would otherwise unbox
            # each pair and box a fresh copy of it.
            shared = cast("list[object]", out)
            keys: list[object] = []
            seen: set[object] = set()
            work = 1
            for bnt, beta in entries:
                work += 1 + len(beta)
                if beta:
                    k: object = (body_key(beta), bnt)
                    if k not in seen:
                        seen.add(k)
                        out.append((beta, bnt))
                        keys.append(k)
                elif not self.distribute:
                    below = cast("list[object]", raw.get(self.pair(a, bnt), []))
                    # the keys of a unit-closed list are kept with it in Shared
                    known = known_raw.get(self.pair(a, bnt))
                    below_keys = known[1] if known is not None else []
                    work += 3 * len(below)
                    for j in range(len(below)):
                        k = below_keys[j]
                        if k not in seen:
                            seen.add(k)
                            shared.append(below[j])
                            keys.append(k)
            self.meter.spend(work)
            raw[self.pair(a, node)] = out
            if not self.distribute:
                known_raw[self.pair(a, node)] = (out, keys, work)
        return raw[key]

    def up(self, a: int, x: int) -> list[int]:
        """``X`` and every ``Y`` in LC(a) from which ``X`` is reached by unit rules.

        In the order ``X`` first, then the lists of the unit parents ``B`` of ``X`` (rules
        ``B -> X``) one after the other, first occurrences only; built in :meth:`unit_order`.
        """
        key = self.pair(a, x)
        got = self.ups.get(key)
        if got is not None:
            return got
        fm = self.first_map(a)
        ups = self.ups
        for node in self.unit_order(a, x, ups):
            entries = fm.get(node, [])
            out = [node]
            seen = {node}
            work = 1
            for bnt, beta in entries:
                work += 1
                if not beta:
                    above = ups.get(self.pair(a, bnt), [])
                    work += 2 * len(above)
                    for y in above:
                        if y not in seen:
                            seen.add(y)
                            out.append(y)
            self.meter.spend(work)
            ups[self.pair(a, node)] = out
        return ups[key]

    def conts(self, a: int, x: int) -> list[Body]:
        """The tails that stand for ``[A/X]`` in a rule (without the empty tail).

        Normally the single nonterminal ``[A/X]``.  In *distribute* mode ``[A/X]`` is
        not closed over unit steps; instead the union ``[A/X] = ∪ own(A/Y)`` over the
        ``Y`` above ``X`` by unit rules is spelled out at the place of use, which
        avoids copying the rules of every unit ancestor into every descendant.
        """
        if not self.distribute:
            c = self.cont_id(a, x)
            return [(c,)] if c >= 0 else []
        out: list[Body] = []
        for y in self.up(a, x):
            c = self.cont_id(a, y)
            if c >= 0:
                out.append((c,))
        return out

    def cont_id(self, a: int, x: int) -> int:
        """The nonterminal ``[A/X]`` (created on first use), or -1 when it derives nothing."""
        key = self.pair(a, x)
        got = self.ids.get(key)
        if got is not None:
            return got
        if not self.raw_rules(a, x):
            self.ids[key] = -1
            return -1
        base = self.shared.bases.get(key)
        if base is None:
            # the names of the table's symbols are the same in every construction
            label = self.b.names[x] if x >= 0 else terminal_name(self.b.masks[~x])
            base = f"{self.b.names[a]}__{label}"
            self.shared.bases[key] = base
        nt = self.b.fresh(base)
        self.ids[key] = nt
        self.cont_of[nt] = (a, x)
        return nt

    def dominators(self, a: int) -> dict[int, int]:
        """Immediate dominators in the left-corner graph of ``a`` (root ``a``).

        Nodes are the members of LC(a) and the terminals leading their rules; the
        iterative algorithm of Cooper, Harvey and Kennedy on reverse postorder.
        """
        known = self.shared.idoms.get(a)
        if known is not None:
            _replay(self.meter, known[1])
            return known[0]
        chunks: list[int] = []
        succ: dict[int, list[int]] = {}
        order: list[int] = []
        seen = {a}
        stack: list[tuple[int, int]] = [(a, 0)]
        while stack:
            v, i = stack[-1]
            nxt = succ.get(v)
            if nxt is None:
                nxt = list(dict.fromkeys([body[0] for body in self.table[v]])) if v >= 0 else []
                succ[v] = nxt
                chunks.append(1 + 2 * len(nxt))
                self.meter.spend(1 + 2 * len(nxt))
            if i < len(nxt):
                stack[-1] = (v, i + 1)
                w = nxt[i]
                if w not in seen:
                    seen.add(w)
                    stack.append((w, 0))
                continue
            stack.pop()
            order.append(v)
        order.reverse()
        rpo = {v: i for i, v in enumerate(order)}
        preds: dict[int, list[int]] = {v: [] for v in order}
        for v in order:
            for w in succ[v]:
                preds[w].append(v)
        idom: dict[int, int] = {a: a}
        changed = True
        while changed:
            changed = False
            for v in order[1:]:
                new = -(1 << 62)
                steps = 1
                for p in preds[v]:
                    steps += 1
                    if p not in idom:
                        continue
                    if new == -(1 << 62):
                        new = p
                        continue
                    f1, f2 = p, new
                    while f1 != f2:
                        while rpo[f1] > rpo[f2]:
                            f1 = idom[f1]
                            steps += 1
                        while rpo[f2] > rpo[f1]:
                            f2 = idom[f2]
                            steps += 1
                    new = f1
                chunks.append(steps)
                self.meter.spend(steps)
                if idom.get(v) != new:
                    idom[v] = new
                    changed = True
        self.shared.idoms[a] = (idom, chunks)
        return idom

    def top_rules(self, a: int) -> list[tuple[int, Body]]:
        """GNF rules of an original nonterminal: ``A -> t [A/t]`` (and ``A -> t``).

        When some nonterminal ``E != A`` lies on every left-corner path from ``A`` to
        ``t`` (a strict dominator), ``A/t = E/t · A/E`` and the rule becomes
        ``A -> t [E/t] [A/E]`` (with the nullable factors optional): ``[E/t]`` is then
        shared by every ``A`` above ``E`` instead of being rebuilt for each.  The
        highest such ``E`` (the child of ``A`` in the dominator tree) is used.
        """
        got = self.top.get(a)
        if got is not None:
            return got
        out: list[tuple[int, Body]] = []
        if self.cut:
            return self.cut_top(a)
        idom = self.dominators(a) if self.factor else {}
        for x in self.first_map(a):
            if x >= 0:
                continue
            e = x
            while e in idom and idom[e] != a:
                e = idom[e]
                self.meter.spend(1)
            if e == x or e not in idom:
                for c in self.conts(a, x):
                    out.append((x, c))
                if self.nullable(a, x):
                    out.append((x, ()))
                self.meter.spend(2)
                continue
            lower = self.conts(e, x)
            if self.nullable(e, x):
                lower.append(())
            upper = self.conts(a, e)
            if self.nullable(a, e):
                upper.append(())
            self.meter.spend(len(lower) * len(upper) * 2)
            for p1 in lower:
                for p2 in upper:
                    out.append((x, p1 + p2))
        self.top[a] = out
        return out

    def cut_top(self, root: int) -> list[tuple[int, Body]]:
        """Top rules through the children of ``A`` in the left-corner graph.

        Cut every spine from ``A`` to ``t`` after its last ``A``: the next node is
        ``t`` itself (a rule ``A -> t γ``, leaving ``γ`` then ``A/A``) or a child
        ``B != A``, so ``A/t = ∪ γ·A/A ∪ ∪_B B/t · A/B``.  The continuations ``[B/t]``
        are shared by every parent of ``B``.  In *deep* mode a child in another
        component of the left-corner graph contributes its own top rules (which stand
        for ``t · B/t``), cut the same way; that descent runs on an explicit stack (the
        components form an acyclic graph), in the order a recursive descent would take.
        """
        frames: list[CutFrame] = [self.cut_start(root)]
        while True:
            f = frames[-1]
            need = self.cut_resume(f)
            if need >= 0:
                frames.append(self.cut_start(need))
                continue
            frames.pop()
            self.top[f.a] = f.out
            if not frames:
                return f.out

    def cut_start(self, a: int) -> CutFrame:
        """The rules of ``A`` led by a terminal, and the children of ``A``, still to be cut."""
        out: list[tuple[int, Body]] = []
        # ``[A/A]`` derives something only when ``A`` is left recursive, i.e. lies on a cycle
        # of the left-corner graph (a one-member component may still have ``A -> A β``)
        self_tails = self.conts(a, a) if self.cyclic[a] else []
        self_tails.append(())
        children: list[int] = []
        child_set: set[int] = set()
        bodies = self.table[a]
        self.meter.spend(1 + len(bodies))
        for body in bodies:
            head = body[0]
            if head < 0:
                lifted = self.lift_tail(body)
                self.meter.spend(len(self_tails) * (1 + len(lifted)))
                for q in self_tails:
                    out.append((head, lifted + q))
            elif head != a and head not in child_set:
                child_set.add(head)
                children.append(head)
        return CutFrame(a, out, children)

    def cut_resume(self, f: CutFrame) -> int:
        """Cut the remaining children of ``f``; a child whose top rules are needed first, or -1."""
        a = f.a
        out = f.out
        while True:
            upper = f.upper
            if upper is not None:
                tops = self.top.get(f.children[f.next - 1])
                if tops is None:
                    return f.children[f.next - 1]
                self.meter.spend(len(upper) * (sum(len(tail) for _, tail in tops) + 3 * len(tops)))
                for x, tail in tops:
                    for p2 in upper:
                        out.append((x, tail + p2))
                f.upper = None
                continue
            if f.next >= len(f.children):
                return -1
            child = f.children[f.next]
            f.next += 1
            upper = self.conts(a, child)
            if self.nullable(a, child):
                upper.append(())
            if self.deep and self.comp[child] != self.comp[a]:
                # the child's own top rules stand for t · B/t (recursively cut)
                f.upper = upper
                continue
            for x in self.first_map(child):
                if x >= 0:
                    continue
                lower = self.conts(child, x)
                if self.nullable(child, x):
                    lower.append(())
                self.meter.spend(1 + len(lower) * len(upper) * 2)
                for p1 in lower:
                    for p2 in upper:
                        out.append((x, p1 + p2))

    def cont_rules(self, a: int, x: int, out: dict[Body, int]) -> int:
        """Add the GNF rules of ``[A/X]`` to ``out`` (tail -> mask, equal tails merged).

        Returns the number of rules made before merging.
        """
        masks = self.b.masks
        made = 0
        for beta, bnt in self.raw_rules(a, x):
            lifted = self.lift_tail(beta)
            rests: list[Body] = [lifted + c for c in self.conts(a, bnt)]
            if self.nullable(a, bnt):
                rests.append(lifted)
            head = beta[0]
            if head < 0:
                self.meter.spend(len(rests) * (2 + len(lifted)))
                m = masks[~head]
                for rest in rests:
                    old = out.setdefault(rest, m)
                    if old != m:
                        out[rest] = old | m
                made += len(rests)
            elif rests:
                tops = self.top_rules(head)
                tails = self.top_len.get(head, -1)
                if tails < 0:
                    tails = 0
                    for top in tops:
                        tails += len(top[1])
                    self.top_len[head] = tails
                self.meter.spend(len(rests) * (1 + tails + len(tops) * (3 + len(lifted))))
                for rest in rests:
                    for t, tail in tops:
                        key = tail + rest
                        m = masks[~t]
                        old = out.setdefault(key, m)
                        if old != m:
                            out[key] = old | m
                made += len(rests) * len(tops)
        return made

    def run(self, start: int) -> dict[int, dict[Body, int]]:
        """GNF rules (tail -> mask) of every nonterminal needed from ``start``."""
        result: dict[int, dict[Body, int]] = {}
        masks = self.b.masks
        needed = [start]
        seen = {start}
        while needed:
            nt = needed.pop()
            out: dict[Body, int] = {}
            made: int
            if nt >= self.n_orig and nt not in self.lifted_mask:
                a, x = self.cont_of[nt]
                made = self.cont_rules(a, x, out)
            else:
                rules: list[tuple[int, Body]]
                if nt < self.n_orig:
                    rules = self.top_rules(nt)
                else:
                    rules = [(self.b.terminal(self.lifted_mask[nt]), ())]
                for t, tail in rules:
                    m = masks[~t]
                    # one hash when the tail is new (the usual case); a second only to merge
                    old = out.setdefault(tail, m)
                    if old != m:
                        out[tail] = old | m
                made = len(rules)
            self.b.charge(len(out), nt)
            result[nt] = out
            work = 0
            for tail in out:
                work += len(tail)
                for sym in tail:
                    if sym not in seen:
                        seen.add(sym)
                        needed.append(sym)
            self.meter.spend(work + made)
        return result


class CutFrame:
    """A nonterminal whose cut top rules are being built (see :meth:`LeftCorner.cut_top`)."""

    def __init__(self, a: int, out: list[tuple[int, Body]], children: list[int]) -> None:
        self.a = a
        self.out = out
        self.children = children
        self.next = 0
        # the continuations above the child before ``next`` while its top rules are computed
        self.upper: list[Body] | None = None
