"""Greibach normal form with byte-set terminals: the one definition, and a conversion that stays small.

A grammar is in GNF when every rule is ``A -> a B1 .. Bn`` with ``a`` a byte-set terminal
and ``B1 .. Bn`` nonterminals, except possibly the rule ``S -> ε`` for the start ``S``,
which then occurs on no right-hand side (:func:`gnf_violation`: the check every consumer
uses).  :func:`to_gnf` produces a stricter form: its byte sets are non-empty and its start
occurs on no right-hand side at all.

The conversion (see :func:`to_gnf`) is a pipeline of exact rewritings; what keeps
the result small is

* epsilon removal with a bounded expansion per rule (long rules are cut);
* collapsing unit cycles instead of expanding them;
* a left-corner construction straight into GNF (polynomial: one continuation
  nonterminal per pair of a nonterminal and a left corner, one level of leftmost
  substitution, so tails never accumulate), with an optional dominator split that
  shares continuations between nonterminals;
* as an alternative, Paull's left-recursion removal inside cyclic left-corner
  components followed by on-demand leftmost substitution (better on shallow
  grammars); the smaller result wins;
* merging rules ``A -> a β`` and ``A -> b β`` into ``A -> (a|b) β`` (a byte-set union);
* one shared nonterminal ``T -> a`` per distinct byte set used after the first
  position;
* finally merging nonterminals whose rule sets coincide up to that merging (the
  coarsest stable partition, computed by refinement like DFA minimisation).

Correctness: ``proofs/normal_forms.md`` §6.
"""

from __future__ import annotations

from typing import Final, cast

from formalgram.analysis import generating, nullable
from formalgram.errors import GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.transforms.budget import DEFAULT_BUDGET, Meter
from formalgram.transforms.epsilon import remove_epsilon
from formalgram.transforms.left_recursion import body_key, remove_left_recursion_table
from formalgram.transforms.unit import merge_unit_cycles, sccs
from formalgram.transforms.useless import compact, remove_useless

__all__ = ["DEFAULT_BUDGET", "STRATEGIES", "gnf_violation", "is_gnf", "require_gnf", "to_gnf"]

Body = tuple[int, ...]


# left-corner variants: (dominator split, unit steps spelled out, cut at children, deep cut)
_LC_VARIANTS: dict[str, tuple[bool, bool, bool, bool]] = {
    "left-corner:plain": (False, False, False, False),
    "left-corner:deep": (False, False, True, True),
    "left-corner:dominator": (True, False, False, False),
    "left-corner:cut": (False, False, True, False),
    "left-corner:dominator-distribute": (True, True, False, False),
}
STRATEGIES: tuple[str, ...] = ("auto", "left-corner", "substitution", *_LC_VARIANTS)

# An alternative construction tried after the first one gives up (the first result is
# kept) once it has taken this many times the first one's work, or this floor, whichever
# is larger: on the shared grammars no alternative takes more than three times as much,
# while on long chains the deep cut is quadratic where the plain one is linear.
_ALTERNATIVE_WORK: Final = 8
_ALTERNATIVE_FLOOR: Final = 100_000


def gnf_violation(g: Grammar) -> str:
    """Why ``g`` is not in Greibach normal form, or ``""`` when it is.

    The one definition of GNF that every consumer checks (:func:`is_gnf`,
    :meth:`formalgram.pda.PDA.from_gnf`, :func:`formalgram.adjacency.stack_adjacency` and the
    displacement search): every rule is ``A -> a B1 .. Bn`` with ``a`` a byte-set terminal and
    ``B1 .. Bn`` nonterminals (``n >= 0``); only the start ``S`` may have the empty rule
    ``S -> ε``, and when it has one, ``S`` occurs on no right-hand side.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    str
        An explanation naming the first offending rule, or ``""``.

    Notes
    -----
    This is exactly what the one-state PDA needs: a rule pops ``A`` on reading a byte of
    ``a`` and pushes ``B1 .. Bn``.  The start may occur on right-hand sides (``S -> a S B |
    a B`` is GNF) unless ``S -> ε`` is a rule: a pushed ``S`` could then vanish without
    reading a byte, which no PDA move expresses.  A terminal with an empty byte set keeps the
    form (the rule simply never fires); usefulness is not part of the form (see
    :func:`~formalgram.transforms.useless.remove_useless`).  O(|G|) time, no budget;
    raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, B = Nonterminal("S"), Nonterminal("B")
    >>> a, b = ByteSet.single(97), ByteSet.single(98)
    >>> gnf_violation(Grammar([Production(S, [a, S, B]), Production(S, [a, B]), Production(B, [b])], "S"))
    ''
    >>> gnf_violation(Grammar([Production(S, [B, a]), Production(B, [b])], "S"))
    'a rule of S starts with nonterminal B, not with a terminal'
    """
    start = g.start_id
    names = g.names
    start_has_eps = False
    for lhs, rhs in g.rules:
        if not rhs:
            if lhs != start:
                return f"rule {names[lhs]} -> ε: only the start symbol may have an empty rule"
            start_has_eps = True
            continue
        if rhs[0] >= 0:
            return f"a rule of {names[lhs]} starts with nonterminal {names[rhs[0]]}, not with a terminal"
        for s in rhs[1:]:
            if s < 0:
                return f"a rule of {names[lhs]} has a terminal after its first symbol"
    if start_has_eps:
        for lhs, rhs in g.rules:
            if start in rhs:
                return (
                    f"start symbol {names[start]} has an empty rule and appears on the right-hand side "
                    f"of a rule of {names[lhs]}"
                )
    return ""


def require_gnf(g: Grammar, user: str) -> None:
    """Raise :class:`~formalgram.errors.GrammarError` unless ``g`` is in GNF (:func:`gnf_violation`).

    Parameters
    ----------
    g : Grammar
        The grammar a GNF consumer was given.
    user : str
        What needs GNF, for the message (e.g. ``"PDA.from_gnf"``).

    Raises
    ------
    GrammarError
        ``"<user>: grammar is not in Greibach normal form: <why>"``.

    Notes
    -----
    O(|G|) time, no budget.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> require_gnf(Grammar([Production(S, [ByteSet.single(97)])], "S"), "example")
    >>> require_gnf(Grammar([Production(S, [S])], "S"), "example")
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarError: example: grammar is not in Greibach normal form: a rule of S starts with nonterminal S, not with a terminal
    """
    why = gnf_violation(g)
    if why:
        raise GrammarError(f"{user}: grammar is not in Greibach normal form: {why}")


def is_gnf(g: Grammar) -> bool:
    """True when ``g`` is in Greibach normal form (as :func:`gnf_violation` defines it).

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    bool

    Notes
    -----
    O(|G|) time, no budget; raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A = Nonterminal("S"), Nonterminal("A")
    >>> a = ByteSet.single(97)
    >>> is_gnf(Grammar([Production(S, [a, A]), Production(A, [a])], "S"))
    True
    >>> is_gnf(Grammar([Production(S, [A, a]), Production(A, [a])], "S"))
    False
    """
    return not gnf_violation(g)


class _Builder:
    """Mutable state of one construction: names, masks, its rule cap and the shared meter.

    ``budget`` caps the rules of this construction (a later alternative gets a tighter cap
    than the conversion's budget); ``meter`` counts the work of the whole conversion.
    """

    def __init__(self, names: list[str], masks: list[int], budget: int, meter: Meter) -> None:
        self.names = names
        self.taken = set(names)
        self.masks = masks
        self.mask_id: dict[int, int] = {}
        for i, m in enumerate(masks):
            self.mask_id.setdefault(m, i)
        self.budget = budget
        self.count = 0
        self.meter = meter

    def terminal(self, mask: int) -> int:
        t = self.mask_id.get(mask)
        if t is None:
            t = len(self.masks)
            self.masks.append(mask)
            self.mask_id[mask] = t
        return ~t

    def fresh(self, base: str) -> int:
        name = fresh_name(base, self.taken)
        # fresh_name tries base, base_1, base_2, ... in turn: charge every try
        self.meter.spend(1 if name == base else 1 + int(name[len(base) + 1 :]))
        self.taken.add(name)
        self.names.append(name)
        return len(self.names) - 1

    def charge(self, k: int, a: int) -> None:
        """Count ``k`` new rules of nonterminal ``a`` against the cap."""
        self.count += k
        self.meter.spend(k)
        if self.count > self.budget:
            raise GrammarTooLarge(
                "GNF conversion",
                self.budget,
                f"more than {self.budget} rules while expanding {self.names[a]!r}",
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
        b.meter.spend(1 + sum(len(body) for body in table[a]))
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
                    b.meter.spend(len(body))
                else:
                    subs = gnf[x]
                    # what this body writes is charged before it is written
                    b.meter.spend(len(subs) * len(body) + sum(len(tail) for tail in subs))
                    for tail, m in subs.items():
                        key = tail + rest
                        out[key] = out.get(key, 0) | m
                    if b.count + len(out) > b.budget:
                        b.charge(len(out), a)
            b.charge(len(out), a)
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


class _LeftCorner:
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
        b: _Builder,
        factor: bool,
        distribute: bool,
        cut: bool = False,
        deep: bool = False,
    ) -> None:
        self.cut = cut or deep
        self.deep = deep
        # strongly connected components of the left-corner graph (deep cuts stay acyclic)
        n = len(table)
        b.meter.spend(n + sum(len(bodies) for bodies in table))
        succ = [[body[0] for body in table[v] if body[0] >= 0] for v in range(n)]
        self.comp = [0] * n
        self.cyclic = [False] * n
        for i, members in enumerate(sccs(n, succ)):
            for v in members:
                self.comp[v] = i
                self.cyclic[v] = len(members) > 1 or v in succ[v]
        self.factor = factor
        self.distribute = distribute
        self.ups: dict[tuple[int, int], list[int]] = {}
        self.table = table
        self.b = b
        self.meter = b.meter
        self.n_orig = len(table)
        self.firsts: dict[int, dict[int, list[tuple[int, Body]]]] = {}
        self.raw: dict[tuple[int, int], list[tuple[Body, int]]] = {}
        self.raw_keys: dict[tuple[int, int], list[object]] = {}
        self.unit_reach: dict[int, set[int]] = {}
        self.ids: dict[tuple[int, int], int] = {}
        self.top: dict[int, list[tuple[int, Body]]] = {}
        self.lifted: dict[int, int] = {}
        self.lifted_mask: dict[int, int] = {}
        self.cont_of: dict[int, tuple[int, int]] = {}

    def lift(self, body: Body) -> Body:
        self.meter.spend(1 + len(body))
        out: list[int] = []
        for s in body:
            if s >= 0:
                out.append(s)
                continue
            mask = self.b.masks[~s]
            nt = self.lifted.get(mask)
            if nt is None:
                nt = self.b.fresh(_terminal_name(mask))
                self.lifted[mask] = nt
                self.lifted_mask[nt] = mask
            out.append(nt)
        return tuple(out)

    def first_map(self, a: int) -> dict[int, list[tuple[int, Body]]]:
        """Leading symbol ``X`` -> the pairs ``(B, β)`` with ``B`` in LC(a) and a rule ``B -> X β``."""
        got = self.firsts.get(a)
        if got is not None:
            return got
        table = self.table
        seen = {a}
        order = [a]
        i = 0
        while i < len(order):
            bodies = table[order[i]]
            # a visit, and an entry of the map (a pair and a sliced body) per rule
            self.meter.spend(1 + 12 * len(bodies))
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
        return fm

    def nullable(self, a: int, x: int) -> bool:
        """Whether A/X derives ε: X is reached from A by unit rules (A itself included)."""
        if x == a:
            return True
        reach = self.unit_reach.get(a)
        if reach is None:
            # the symbols reached from ``a`` through rules ``B -> X`` (all of them lie in LC(a))
            table = self.table
            reach = {a}
            stack = [a]
            while stack:
                bodies = table[stack.pop()]
                self.meter.spend(1 + len(bodies))
                for body in bodies:
                    if len(body) == 1:
                        y = body[0]
                        if y not in reach:
                            reach.add(y)
                            if y >= 0:
                                stack.append(y)
            self.unit_reach[a] = reach
        return x in reach

    def raw_rules(self, a: int, x: int) -> list[tuple[Body, int]]:
        """Bodies ``(β, B)`` of ``[A/X]`` before GNF-ification, unit steps closed over.

        ``[A/X]`` gets ``(β, B)`` for each ``B`` in LC(A) with a rule ``B -> X β``, ``β``
        non-empty, and (unless unit steps are spelled out) every body of ``[A/B]`` for each
        unit rule ``B -> X``, first occurrences only.  The unit steps form an acyclic graph
        (unit cycles are merged beforehand); it is walked in post-order on an explicit
        stack, so chains of any length are fine.
        """
        key = (a, x)
        got = self.raw.get(key)
        if got is not None:
            return got
        fm = self.first_map(a)
        raw = self.raw
        # frames: (symbol, index of its next unit step to look at)
        frames: list[tuple[int, int]] = [(x, 0)]
        on_path = {x}
        while frames:
            node, i = frames[-1]
            entries = fm.get(node, [])
            if not self.distribute:
                pushed = False
                while i < len(entries):
                    bnt, beta = entries[i]
                    i += 1
                    if not beta and (a, bnt) not in raw and bnt not in on_path:
                        frames[-1] = (node, i)
                        frames.append((bnt, 0))
                        on_path.add(bnt)
                        pushed = True
                        break
                if pushed:
                    continue
            frames.pop()
            on_path.discard(node)
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
                    below = cast("list[object]", raw.get((a, bnt), []))
                    below_keys = self.raw_keys.get((a, bnt), [])
                    work += 3 * len(below)
                    for j in range(len(below)):
                        k = below_keys[j]
                        if k not in seen:
                            seen.add(k)
                            shared.append(below[j])
                            keys.append(k)
            self.meter.spend(work)
            raw[(a, node)] = out
            self.raw_keys[(a, node)] = keys
        return raw[key]

    def up(self, a: int, x: int) -> list[int]:
        """``X`` and every ``Y`` in LC(a) from which ``X`` is reached by unit rules.

        In the order ``X`` first, then the lists of the unit parents ``B`` of ``X`` (rules
        ``B -> X``) one after the other, first occurrences only; computed in post-order on
        an explicit stack.
        """
        key = (a, x)
        got = self.ups.get(key)
        if got is not None:
            return got
        fm = self.first_map(a)
        ups = self.ups
        frames: list[tuple[int, int]] = [(x, 0)]
        on_path = {x}
        while frames:
            node, i = frames[-1]
            entries = fm.get(node, [])
            pushed = False
            while i < len(entries):
                bnt, beta = entries[i]
                i += 1
                if not beta and (a, bnt) not in ups and bnt not in on_path:
                    frames[-1] = (node, i)
                    frames.append((bnt, 0))
                    on_path.add(bnt)
                    pushed = True
                    break
            if pushed:
                continue
            frames.pop()
            on_path.discard(node)
            out = [node]
            seen = {node}
            work = 1
            for bnt, beta in entries:
                work += 1
                if not beta:
                    above = ups.get((a, bnt), [])
                    work += 2 * len(above)
                    for y in above:
                        if y not in seen:
                            seen.add(y)
                            out.append(y)
            self.meter.spend(work)
            ups[(a, node)] = out
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
        key = (a, x)
        got = self.ids.get(key)
        if got is not None:
            return got
        if not self.raw_rules(a, x):
            self.ids[key] = -1
            return -1
        label = self.b.names[x] if x >= 0 else _terminal_name(self.b.masks[~x])
        nt = self.b.fresh(f"{self.b.names[a]}__{label}")
        self.ids[key] = nt
        self.cont_of[nt] = key
        return nt

    def dominators(self, a: int) -> dict[int, int]:
        """Immediate dominators in the left-corner graph of ``a`` (root ``a``).

        Nodes are the members of LC(a) and the terminals leading their rules; the
        iterative algorithm of Cooper, Harvey and Kennedy on reverse postorder.
        """
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
                self.meter.spend(steps)
                if idom.get(v) != new:
                    idom[v] = new
                    changed = True
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
        frames: list[_CutFrame] = [self.cut_start(root)]
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

    def cut_start(self, a: int) -> _CutFrame:
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
                lifted = self.lift(body[1:])
                self.meter.spend(len(self_tails) * (1 + len(lifted)))
                for q in self_tails:
                    out.append((head, lifted + q))
            elif head != a and head not in child_set:
                child_set.add(head)
                children.append(head)
        return _CutFrame(a, out, children)

    def cut_resume(self, f: _CutFrame) -> int:
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

    def cont_rules(self, a: int, x: int) -> list[tuple[int, Body]]:
        out: list[tuple[int, Body]] = []
        for beta, bnt in self.raw_rules(a, x):
            lifted = self.lift(beta[1:])
            rests: list[Body] = [lifted + c for c in self.conts(a, bnt)]
            if self.nullable(a, bnt):
                rests.append(lifted)
            head = beta[0]
            if head < 0:
                self.meter.spend(len(rests) * (2 + len(lifted)))
                for rest in rests:
                    out.append((head, rest))
            elif rests:
                tops = self.top_rules(head)
                tails = sum(len(tail) for _, tail in tops)
                self.meter.spend(len(rests) * (1 + tails + len(tops) * (3 + len(lifted))))
                for rest in rests:
                    for t, tail in tops:
                        out.append((t, tail + rest))
        return out

    def run(self, start: int) -> dict[int, dict[Body, int]]:
        """GNF rules (tail -> mask) of every nonterminal needed from ``start``."""
        result: dict[int, dict[Body, int]] = {}
        masks = self.b.masks
        needed = [start]
        seen = {start}
        while needed:
            nt = needed.pop()
            rules: list[tuple[int, Body]]
            if nt < self.n_orig:
                rules = self.top_rules(nt)
            elif nt in self.lifted_mask:
                rules = [(self.b.terminal(self.lifted_mask[nt]), ())]
            else:
                a, x = self.cont_of[nt]
                rules = self.cont_rules(a, x)
            out: dict[Body, int] = {}
            for t, tail in rules:
                out[tail] = out.get(tail, 0) | masks[~t]
            self.b.charge(len(out), nt)
            result[nt] = out
            work = 0
            for tail in out:
                work += len(tail)
                for sym in tail:
                    if sym not in seen:
                        seen.add(sym)
                        needed.append(sym)
            self.meter.spend(work + len(rules))
        return result


class _CutFrame:
    """A nonterminal whose cut top rules are being built (see :meth:`_LeftCorner.cut_top`)."""

    def __init__(self, a: int, out: list[tuple[int, Body]], children: list[int]) -> None:
        self.a = a
        self.out = out
        self.children = children
        self.next = 0
        # the continuations above the child before ``next`` while its top rules are computed
        self.upper: list[Body] | None = None


def _minimise(
    rules: dict[int, dict[Body, int]], start: int, meter: Meter
) -> tuple[dict[int, dict[Body, int]], int, list[int]]:
    """Merge nonterminals with identical rule sets (coarsest stable partition).

    The partition starts with one block and is refined until every block is stable:
    the *signature* of a nonterminal (its rules with every tail symbol replaced by its
    block, the byte sets of rules that become equal merged) is the same for all members
    of a block.  Refinement runs on a worklist in the manner of Hopcroft's automaton
    minimisation: when a block splits, the largest part keeps its number and only the
    nonterminals whose tails mention a member of another part are looked at again, so a
    chain of n nonterminals takes O(n log n) signature computations, not O(n^2).

    Returns the quotient rules keyed by representative (the smallest member of each
    block, the start for its own block), the start's representative and the
    representative of each nonterminal (indexable by id, -1 when absent).
    """
    ids = sorted(rules)
    top = max(ids) + 1 if ids else 1
    # who mentions whom: users[s] = the nonterminals with ``s`` in some tail
    users: list[list[int]] = [[] for _ in range(top)]
    work = 0
    for a in ids:
        mentioned: set[int] = set()
        for tail in rules[a]:
            work += 1 + len(tail)
            for s in tail:
                if s not in mentioned:
                    mentioned.add(s)
                    users[s].append(a)
    meter.spend(work)
    block = [-1] * top
    for a in ids:
        block[a] = 0
    size = [len(ids)]
    # the signature every member of a block has (None: not computed yet)
    block_sig: list[frozenset[tuple[Body, int]] | None] = [None]
    members: list[set[int]] = [set(ids)]
    touched: set[int] = set(ids)
    while touched:
        # signatures of every touched nonterminal, all under the same partition
        groups: dict[int, dict[frozenset[tuple[Body, int]], list[int]]] = {}
        work = 0
        for a in sorted(touched):
            merged: dict[Body, int] = {}
            for tail, m in rules[a].items():
                work += 1 + len(tail)
                k = tuple([block[s] for s in tail])
                merged[k] = merged.get(k, 0) | m
            sig = frozenset(merged.items())
            groups.setdefault(block[a], {}).setdefault(sig, []).append(a)
        meter.spend(work)
        touched = set()
        for c, parts in groups.items():
            old = block_sig[c]
            untouched = size[c] - sum(len(p) for p in parts.values())
            if untouched:
                # the members not looked at again still have the block's signature
                assert old is not None
                parts.setdefault(old, [])
            pieces = list(parts.items())
            if len(pieces) == 1:
                block_sig[c] = pieces[0][0]
                continue
            counts = [len(part) + (untouched if sig == old else 0) for sig, part in pieces]
            keep = counts.index(max(counts))
            block_sig[c] = pieces[keep][0]
            for i, (sig, part) in enumerate(pieces):
                if i == keep:
                    continue
                moving = list(part)
                work = 1
                if untouched and sig == old:
                    looked_at: set[int] = set()
                    for other in parts.values():
                        looked_at.update(other)
                    moving.extend(a for a in members[c] if a not in looked_at)
                    work += len(looked_at) + len(members[c])
                new = len(size)
                size.append(len(moving))
                block_sig.append(sig)
                members.append(set(moving))
                size[c] -= len(moving)
                for a in moving:
                    members[c].discard(a)
                    block[a] = new
                    work += 1 + len(users[a])
                    touched.update(users[a])
                meter.spend(work)
    rep_of_block: dict[int, int] = {}
    for a in ids:
        if block[a] not in rep_of_block:
            rep_of_block[block[a]] = a
    rep_of_block[block[start]] = start
    rep = [-1] * top
    for a in ids:
        rep[a] = rep_of_block[block[a]]
    out: dict[int, dict[Body, int]] = {}
    for a in rep_of_block.values():
        merged2: dict[Body, int] = {}
        for tail, m in rules[a].items():
            k2 = tuple([rep[s] for s in tail])
            merged2[k2] = merged2.get(k2, 0) | m
        out[a] = merged2
    return out, rep[start], rep


def to_gnf(
    g: Grammar, *, budget: int = DEFAULT_BUDGET, strategy: str = "auto", objective: str = "rules"
) -> Grammar:
    """Convert ``g`` to Greibach normal form, keeping ``L`` exactly and the result small.

    Pipeline: :func:`remove_useless`; :func:`remove_epsilon` (the empty string is set
    aside and restored at the end); collapse unit cycles; then build GNF with

    * the *left-corner* construction (``A -> t [A/t]``, where ``[A/X]`` derives what
      follows a leftmost ``X`` inside ``A``), which handles left recursion directly,
      substitutes only one level at the leftmost position and never accumulates
      tails; tried plain, with a dominator split or a cut at the children of each
      nonterminal (both share continuations between nonterminals), with a *deep*
      cut that recursively uses the children's own rules (tails then hold one small
      continuation per level; fewest nonterminals by far), and with unit steps
      spelled out instead of closed;
    * the classic *substitution* route (left recursion removed inside the cyclic
      left-corner components, then leftmost substitution in topological order),
      which is often smaller on shallow grammars and is capped at twice the best
      left-corner size;

    keeping the smallest.  In every case terminals after the first position become
    shared nonterminals ``T -> a``, rules differing only in their first byte set are
    merged (``A -> (a|b) β``), and nonterminals with identical rule sets are merged to
    a fixpoint.  A fresh start is added when the start occurs on a right-hand side,
    and ``S -> ε`` when ``ε ∈ L(g)``.  Proof: ``proofs/normal_forms.md`` §6.

    Parameters
    ----------
    g : Grammar
        Any grammar with a non-empty language.
    budget : int
        Maximum number of rules created by any stage of the conversion (default
        :data:`~formalgram.transforms.budget.DEFAULT_BUDGET`, 200,000), which also sets the
        work allowed: :func:`~formalgram.transforms.budget.work_allowance` steps,
        ``128 * max(budget, 200_000)`` (see :mod:`formalgram.transforms.budget`).  Every
        shared grammar of the project needs far less (see ``bench/results/gnf_sizes.md``;
        the largest have about 11,500 rules and take under half the default work).
    strategy : str
        ``"auto"`` (default, smallest of all), ``"left-corner"`` (smallest left-corner
        variant), ``"substitution"`` (Paull + leftmost substitution only; may blow up)
        or one left-corner variant: ``"left-corner:plain"``,
        ``"left-corner:dominator"``, ``"left-corner:cut"``,
        ``"left-corner:dominator-distribute"``, ``"left-corner:deep"`` (see
        :data:`STRATEGIES`).
    objective : str
        What "smallest" means when several constructions are tried: ``"rules"``
        (default; fewest rules, then fewest nonterminals) or ``"nonterminals"``
        (smallest stack alphabet for the PDA, then fewest rules).

    Returns
    -------
    Grammar
        ``is_gnf(result)`` holds and ``L(result) == L(g)``, the empty string included.

    Raises
    ------
    EmptyLanguageError
        When ``L(g)`` is empty.
    GrammarTooLarge
        When a stage would exceed ``budget`` rules or the conversion its work allowance;
        both are checked while the rules and tables grow, so time and memory stay bounded
        (the default ends within seconds and well under 1 GiB of pure Python).
    ValueError
        For an unknown ``strategy`` or ``objective``.

    Notes
    -----
    Linear for the cleaning stages.  The left-corner construction creates at most
    one continuation per pair (nonterminal, left corner) and is polynomial:
    O(|V| * |G| * k) rules with k the largest number of leading byte sets of a
    nonterminal; it is linear on unit, right and left chains (no recursion, so chains of
    any length convert).  The substitution route is output-sensitive and exponential in
    the worst case.  The final merging of nonterminals refines a partition on a worklist,
    O(m log n) signature computations for ``n`` nonterminals and ``m`` tail symbols.

    Every construction after the first is a candidate only: it gives up (and the best
    result so far is kept) once it has more than twice the rules of the best one, or
    more than eight times the work of the first one (at least 100,000 steps); so a
    variant that is quadratic where the first is linear (the deep cut on long left
    chains) costs a bounded share.  Only the first construction's failure raises.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> E = Nonterminal("E")
    >>> a, p = ByteSet.single(97), ByteSet.single(43)
    >>> g = Grammar([Production(E, [E, p, E]), Production(E, [a])], "E")
    >>> is_gnf(to_gnf(g))
    True
    >>> from formalgram import parse_gbnf
    >>> up_to_300 = parse_gbnf('root ::= "a"{0,300}')
    >>> len(to_gnf(up_to_300, budget=1_000).rules)
    600
    >>> to_gnf(up_to_300, budget=500)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: GNF conversion exceeded its budget of 500 (600 rules after epsilon removal)
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown GNF strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if objective not in ("rules", "nonterminals"):
        raise ValueError(f"unknown objective {objective!r}; expected 'rules' or 'nonterminals'")
    meter = Meter("GNF conversion", budget)
    meter.spend(_size(g))
    g = remove_useless(g)
    has_eps = g.start_id in nullable(g)
    start_name = g.names[g.start_id]
    g = remove_epsilon(g)
    meter.spend(2 * _size(g))
    # work on the epsilon-free rules of the original start (a fresh epsilon start made
    # by remove_epsilon is dropped; the empty string is restored at the end)
    proper = [r for r in g.rules if r[1]]
    g = Grammar.from_ids(g.names, g.masks, g.id_of(start_name), proper)
    if g.start_id not in generating(g):
        # L(g) == {ε}
        return Grammar.from_ids([start_name], [], 0, [(0, ())])
    g = remove_useless(g)
    g = merge_unit_cycles(g)
    meter.spend(2 * _size(g))
    if len(g.rules) > budget:
        raise GrammarTooLarge("GNF conversion", budget, f"{len(g.rules)} rules after epsilon removal")
    base: list[list[Body]] = [[] for _ in g.names]
    for lhs, rhs in g.rules:
        base[lhs].append(rhs)
    best: tuple[dict[int, dict[Body, int]], int, _Builder] | None = None
    allowance = meter.allowance
    first_work = 0
    for name, (factor, distribute, cut, deep) in _LC_VARIANTS.items():
        if strategy not in ("auto", "left-corner", name):
            continue
        # left-corner construction (polynomial, never accumulates tails); variants of
        # the start rules: dominator split, unit steps spelled out, cut at children
        # a later variant gives up once clearly larger than the best so far
        # and once it has taken much more work than the first one
        cap = budget if best is None else min(budget, 2 * best[2].count + 64)
        b = _Builder(list(g.names), list(g.masks), cap, meter)
        before = meter.work
        if best is not None:
            meter.allowance = min(allowance, before + max(_ALTERNATIVE_WORK * first_work, _ALTERNATIVE_FLOOR))
        try:
            lc = _LeftCorner([list(x) for x in base], b, factor, distribute, cut, deep).run(g.start_id)
            quotient, start, _ = _minimise(lc, g.start_id, meter)
        except GrammarTooLarge:
            meter.allowance = allowance
            if best is None:
                raise
            continue
        meter.allowance = allowance
        if best is None:
            first_work = meter.work - before
        if best is None or _score(quotient, objective) < _score(best[0], objective):
            best = (quotient, start, b)
    if strategy in ("auto", "substitution"):
        # Paull + leftmost substitution: often smaller on shallow grammars, but tails
        # accumulate on deep ones, so in "auto" mode it may not grow past the best
        # left-corner result.
        cap = budget if best is None else min(budget, 2 * best[2].count + 64)
        if best is not None:
            meter.allowance = min(
                allowance, meter.work + max(_ALTERNATIVE_WORK * first_work, _ALTERNATIVE_FLOOR)
            )
        try:
            names = list(g.names)
            table = remove_left_recursion_table(names, g.start_id, [list(x) for x in base], cap, meter)
            b2 = _Builder(names, list(g.masks), cap, meter)
            _lift_terminals(table, b2)
            expanded = _expand(table, g.start_id, b2)
            q2, s2, _ = _minimise(expanded, g.start_id, meter)
            if best is None or _score(q2, objective) < _score(best[0], objective):
                best = (q2, s2, b2)
        except GrammarTooLarge:
            if best is None:
                raise
        finally:
            meter.allowance = allowance
    assert best is not None
    quotient, start, b = best
    return _finish(quotient, start, b, start_name, has_eps)


def _size(g: Grammar) -> int:
    """Rules plus right-hand-side symbols: the work of one linear pass over ``g``."""
    return len(g.rules) + sum(len(rhs) for _, rhs in g.rules)


def _count(rules: dict[int, dict[Body, int]]) -> int:
    return sum(len(x) for x in rules.values())


def _score(rules: dict[int, dict[Body, int]], objective: str) -> tuple[int, int]:
    if objective == "nonterminals":
        return (len(rules), _count(rules))
    return (_count(rules), len(rules))


def _finish(
    quotient: dict[int, dict[Body, int]], start: int, b: _Builder, start_name: str, has_eps: bool
) -> Grammar:
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
