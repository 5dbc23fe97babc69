"""Look-around in regular expressions: a syntax tree with ``LOOK`` nodes -> a deterministic byte automaton.

A pattern with look-ahead ``(?=A)`` ``(?!A)`` and look-behind ``(?<=B)`` ``(?<!B)`` but
without back-references still denotes a regular language; this module computes its
deterministic automaton over bytes, which :func:`formalgram.syntax.lower.automaton_rules`
writes as right-linear rules.  The language is the one of :func:`re.fullmatch`: a
look-ahead at a position sees the rest of the whole string (to its end), a look-behind sees
everything before the position, and assertions nest, repeat and alternate freely.

Construction: Brzozowski derivatives over a small extended syntax, with the pattern kept as a
flat continuation (a sequence of items) so that an assertion always sees what follows it:

* a state is a boolean formula (``and``, ``or``, ``not``) over *atoms*, each atom a sequence
  the rest of the input must match entirely;
* ``(?=A) R`` becomes ``A Σ* ∧ R`` and ``(?!A) R`` becomes ``¬(A Σ*) ∧ R`` (``Σ*`` any
  bytes), so a look-ahead's atoms are carried forward in the state until they decide;
* each look-behind body ``B`` gets a *tracker*, the formula of ``Σ* B`` run over the input
  read so far (restarted at every position), carried in the state; at a position
  ``(?<=B)`` is the tracker's verdict "a match of ``B`` ends here" (with what look-ahead
  inside ``B`` still asks of the input to come);
* a repetition ``x*`` iterates only non-empty ``x`` (an empty iteration adds only
  constraints already checked), so every expansion terminates.

A character class is kept as one item, the trie of its UTF-8 encodings, read a byte at a
time (so formulas stay small for classes such as Unicode ``\\w``); the bytes of a state are
split into the classes its atoms tell apart, and one derivative is taken per class.
Formulas are hash-consed and kept flat, sorted and free of duplicates (equal up to
associativity, commutativity and idempotence), which makes the set of states finite
(Brzozowski).  Everything walks with explicit stacks (no Python recursion), and the number
of states is bounded: past ``max_states`` the construction stops with
:class:`~formalgram.errors.GrammarTooLarge`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from formalgram.automaton import ByteAutomaton
from formalgram.byteset import ByteSet
from formalgram.errors import GrammarTooLarge
from formalgram.syntax.nodes import (
    ALT,
    CLASS,
    DEFAULT_MAX_REPEAT,
    LOOK,
    RAW_BASE,
    REF,
    REPEAT,
    SEQ,
    STRING,
    Node,
    Source,
    charge_repeat,
)
from formalgram.utf8 import encode_code_point, utf8_sequences

__all__ = ["DEFAULT_MAX_STATES", "compile_lookaround", "fixed_width", "has_lookaround"]

DEFAULT_MAX_STATES: Final = 20_000  # states of one look-around automaton

_ALL_BYTES: Final = (1 << 256) - 1
_MAXREPEAT: Final = 4294967295  # Python's re: widths are capped here

# items of a continuation: (kind, a, lo, hi, subs)
_BYTES: Final = 0  # a: byte mask
_CHOICE: Final = 1  # subs: the alternatives (sequence ids); lo 1: all of bytes only, none
# empty (a byte trie: read like one byte set, a: the first bytes)
_REP: Final = 2  # a: the repeated sequence; lo, hi (-1: no bound)
_AHEAD: Final = 3  # a: the sequence ``A Σ*``
_NOT_AHEAD: Final = 4
_BEHIND: Final = 5  # a: the tracker
_NOT_BEHIND: Final = 6
_GUARD: Final = 7  # an iteration of ``x*`` that reaches here without a byte is dropped
_END: Final = 8  # a: the tracker whose body ends here

# formulas: (kind, a, args)
_FALSE: Final = 0  # formula ids 0 and 1 are the constants
_TRUE: Final = 1
_F_ATOM: Final = 2  # a: a sequence id (empty, or headed by bytes)
_F_HIT: Final = 3  # a: a tracker; its body ended at this position
_F_QUERY: Final = 4  # a: a tracker; does a match of its body end at this position?
_F_NOT: Final = 5
_F_AND: Final = 6
_F_OR: Final = 7

_Item = tuple[int, int, int, int, tuple[int, ...]]
_Form = tuple[int, int, tuple[int, ...]]


def has_lookaround(node: Node) -> bool:
    """Whether a syntax tree holds a ``LOOK`` node (references are not followed).

    Parameters
    ----------
    node : Node
        Any syntax tree.

    Returns
    -------
    bool

    Notes
    -----
    O(nodes), with an explicit stack.

    Examples
    --------
    >>> look = Node(LOOK, 1, 1)
    >>> has_lookaround(look), has_lookaround(Node(SEQ, 1, 1))
    (True, False)
    """
    stack = [node]
    while stack:
        top = stack.pop()
        if top.kind == LOOK:
            return True
        stack.extend(top.children)
    return False


def fixed_width(node: Node) -> int:
    """The width in characters of every string a tree matches, as Python's ``re`` computes it, or -1.

    Python's ``re`` accepts a look-behind only when its body's shortest and longest matches
    have the same number of characters (assertions count 0, widths are capped at
    ``MAXREPEAT``); this is that test.

    Parameters
    ----------
    node : Node
        A regular expression's syntax tree (no ``REF`` nodes).

    Returns
    -------
    int
        The common width, or -1 when the widths differ.

    Notes
    -----
    O(nodes), with an explicit stack.

    Examples
    --------
    >>> from formalgram.syntax.regex import regex_tree
    >>> def width(p):
    ...     return fixed_width(regex_tree(p, 0, Source(p), list(range(len(p) + 1)), lookaround=True))
    >>> width("ab[cd]"), width("a|bc"), width("(?:ab){3}(?=x*)"), width("a*")
    (3, -1, 6, -1)
    """
    widths: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        top, ready = stack.pop()
        kids = top.children
        if kids and not ready and top.kind != LOOK:
            stack.append((top, True))
            stack.extend((c, False) for c in kids)
            continue
        kind = top.kind
        if kind == STRING:
            lo = hi = len(top.chars)
        elif kind == CLASS:
            lo = hi = 1
        elif kind == SEQ:
            lo = hi = 0
            for c in kids:
                clo, chi = widths[id(c)]
                lo += clo
                hi += chi
        elif kind == ALT:
            pairs = [widths[id(c)] for c in kids]
            lo = min(p[0] for p in pairs)
            hi = max(p[1] for p in pairs)
        elif kind == REPEAT:
            clo, chi = widths[id(kids[0])]
            lo = clo * top.lo
            hi = _MAXREPEAT if top.hi < 0 and chi else chi * max(top.hi, 0)
        else:  # LOOK (zero width); REF does not occur in a regular expression
            lo = hi = 0
        widths[id(top)] = (min(lo, _MAXREPEAT - 1), min(hi, _MAXREPEAT))
    lo, hi = widths[id(node)]
    return lo if lo == hi else -1


class _Compiler:
    """The tables of one construction: items, sequences, formulas and their memos."""

    def __init__(self, source: Source, max_repeat: int, max_states: int) -> None:
        self.source = source
        self.max_repeat = max_repeat
        self.repeat_used = 0
        self.max_states = max_states
        self.max_forms = 64 * max_states + 10_000
        self.items: list[_Item] = []
        self.item_ids: dict[_Item, int] = {}
        self.seqs: list[tuple[int, ...]] = []
        self.seq_ids: dict[tuple[int, ...], int] = {}
        self.seq_ends: list[bool] = []  # the sequence holds an _END item (a tracker's body)
        self.forms: list[_Form] = [(_FALSE, 0, ()), (_TRUE, 0, ())]
        self.queries: list[bool] = [False, False]  # the formula holds a look-behind query
        self.heads: list[int] = [0, 0]  # the bytes its atoms can read next
        self.zeros: list[bool] = [False, True]  # its value when every leaf is false
        self.form_ids: dict[_Form, int] = {self.forms[0]: _FALSE, self.forms[1]: _TRUE}
        self.trackers: list[int] = []  # per look-behind: the sequence ``B END``
        self.closures: dict[int, int] = {}
        self.expansions: dict[int, tuple[int, int, list[int]]] = {}
        self.derivatives: dict[tuple[int, int], int] = {}
        self.restricted: dict[int, int] = {}
        self.firsts: dict[tuple[int, ...], set[int]] = {}
        self.guard = self.item((_GUARD, 0, 0, 0, ()))
        self.any_star = self.item((_REP, self.seq((self.item((_BYTES, _ALL_BYTES, 0, 0, ())),)), 0, -1, ()))

    # -- interning ------------------------------------------------------------------------
    def item(self, it: _Item) -> int:
        found = self.item_ids.get(it)
        if found is None:
            found = len(self.items)
            self.items.append(it)
            self.item_ids[it] = found
        return found

    def seq(self, items: tuple[int, ...]) -> int:
        found = self.seq_ids.get(items)
        if found is None:
            found = len(self.seqs)
            self.seqs.append(items)
            self.seq_ids[items] = found
            self.seq_ends.append(any(self.items[i][0] == _END for i in items))
        return found

    def form(self, f: _Form) -> int:
        found = self.form_ids.get(f)
        if found is None:
            found = len(self.forms)
            if found > self.max_forms:
                raise GrammarTooLarge(
                    "look-around automaton", self.max_states, f"more than {self.max_forms} formulas"
                )
            self.forms.append(f)
            self.form_ids[f] = found
            kind, a, args = f
            queries, heads, zeros = self.queries, self.heads, self.zeros
            queries.append(kind == _F_QUERY or any(queries[x] for x in args))
            head = 0
            if kind == _F_ATOM:
                items = self.seqs[a]
                head = self.items[items[0]][1] if items else 0
            for x in args:
                head |= heads[x]
            heads.append(head)
            if kind == _F_NOT:
                zeros.append(not zeros[args[0]])
            elif kind == _F_AND:
                zeros.append(all(zeros[x] for x in args))
            elif kind == _F_OR:
                zeros.append(any(zeros[x] for x in args))
            else:
                zeros.append(False)
        return found

    def mk_not(self, x: int) -> int:
        if x <= _TRUE:
            return _TRUE - x
        kind, _, args = self.forms[x]
        if kind == _F_NOT:
            return args[0]
        return self.form((_F_NOT, 0, (x,)))

    def mk_junction(self, kind: int, xs: list[int]) -> int:
        """``and`` (kind ``_F_AND``) or ``or`` of ``xs``, flattened, sorted, deduplicated."""
        unit, zero = (_TRUE, _FALSE) if kind == _F_AND else (_FALSE, _TRUE)
        out: set[int] = set()
        forms = self.forms
        for x in xs:
            if x == zero:
                return zero
            if x == unit:
                continue
            f = forms[x]
            if f[0] == kind:
                out.update(f[2])
            else:
                out.add(x)
        for x in out:
            f = forms[x]
            if f[0] == _F_NOT and f[2][0] in out:
                return zero
        if not out:
            return unit
        if len(out) == 1:
            return next(iter(out))
        return self.form((kind, 0, tuple(sorted(out))))

    # -- the pattern as items -------------------------------------------------------------
    def convert(self, root: Node, refs: Mapping[str, Node]) -> tuple[int, ...]:
        """The items of a syntax tree (references to ``refs`` inlined), post-order."""
        done: dict[int, tuple[int, ...]] = {}
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            key = id(node)
            if key in done:
                continue
            if node.kind == REF:
                target = refs.get(node.name)
                if target is None:
                    raise self.source.error(f"'{node.name}' is not defined", node.line, node.col)
                if not ready:
                    stack.append((node, True))
                    stack.append((target, False))
                else:
                    done[key] = done[id(target)]
                continue
            kids = node.children
            if kids and not ready:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(kids))
                continue
            done[key] = self.node_items(node, [done[id(c)] for c in kids])
        return done[id(root)]

    def choice(self, alts: list[int]) -> int:
        """The item choosing between the sequences ``alts``."""
        first = 0
        simple = True
        for alt in alts:
            items = self.seqs[alt]
            if not items or any(self.items[i][0] != _BYTES for i in items):
                simple = False
                break
            first |= self.items[items[0]][1]
        if simple:
            return self.item((_CHOICE, first, 1, 0, tuple(sorted(set(alts)))))
        return self.item((_CHOICE, 0, 0, 0, tuple(alts)))

    def first_masks(self, alts: tuple[int, ...]) -> set[int]:
        """The first byte sets of the alternatives of a byte trie (memoized)."""
        found = self.firsts.get(alts)
        if found is None:
            found = {self.items[self.seqs[x][0]][1] for x in alts}
            self.firsts[alts] = found
        return found

    def byte_items(self, masks: list[int]) -> tuple[int, ...]:
        return tuple(self.item((_BYTES, m, 0, 0, ())) for m in masks)

    def node_items(self, node: Node, kids: list[tuple[int, ...]]) -> tuple[int, ...]:
        kind = node.kind
        if kind == STRING:
            masks: list[int] = []
            for c in node.chars:
                if c >= RAW_BASE:
                    masks.append(1 << (c - RAW_BASE))
                else:
                    masks.extend(1 << b for b in encode_code_point(c))
            return self.byte_items(masks)
        if kind == CLASS:
            ranges = node.ranges
            if node.raw or not ranges or ranges[-1][1] < 0x80:
                mask = 0
                for lo, hi in ranges:
                    mask |= ByteSet.from_range(lo, hi).mask
                return self.byte_items([mask])
            alts = [self.seq(self.byte_items([b.mask for b in s])) for s in utf8_sequences(ranges)]
            return (self.choice(alts),)
        if kind == SEQ:
            out: list[int] = []
            for k in kids:
                out.extend(k)
            return tuple(out)
        if kind == ALT:
            if len(kids) == 1:
                return kids[0]
            return (self.choice([self.seq(k) for k in kids]),)
        if kind == REPEAT:
            lo, hi = node.lo, node.hi
            self.repeat_used = charge_repeat(
                self.source, node, len(kids[0]), self.repeat_used, self.max_repeat
            )
            if hi == 0 or not kids[0]:
                return ()
            return (self.item((_REP, self.seq(kids[0]), lo, hi, ())),)
        if kind == LOOK:
            body = kids[0]
            if node.name == "=" or node.name == "!":
                a = self.seq((*body, self.any_star))
                return (self.item((_AHEAD if node.name == "=" else _NOT_AHEAD, a, 0, 0, ())),)
            tracker = len(self.trackers)
            self.trackers.append(self.seq((*body, self.item((_END, tracker, 0, 0, ())))))
            return (self.item((_BEHIND if node.name == "<=" else _NOT_BEHIND, tracker, 0, 0, ())),)
        raise ValueError(f"unknown syntax node kind {kind}")

    # -- closures: a sequence as a formula over byte-headed atoms ------------------------------
    def expand(self, s: int) -> tuple[int, int, list[int]]:
        """One step of the closure of sequence ``s``: (operation, argument, sequences it needs).

        Operations: ``_F_ATOM`` (``s`` itself), ``_FALSE``, ``_TRUE``, ``_F_HIT`` (argument:
        tracker), ``_F_OR`` (of the needed), ``_F_AND`` (of the needed; argument 1: the
        first negated), ``_F_QUERY`` (argument: tracker * 2 + negated, and the rest).
        """
        items = self.seqs[s]
        if not items:
            return (_F_ATOM, 0, [])
        if all(i == self.any_star for i in items):
            return (_TRUE, 0, [])
        kind, a, lo, hi, subs = self.items[items[0]]
        rest = items[1:]
        if kind == _BYTES or (kind == _CHOICE and lo == 1):
            return (_F_ATOM, 0, []) if a else (_FALSE, 0, [])
        if kind == _GUARD:
            return (_FALSE, 0, [])
        if kind == _END:
            return (_F_HIT, a, [])
        if kind == _CHOICE:
            return (_F_OR, 0, [self.seq(self.seqs[alt] + rest) for alt in subs])
        if kind == _REP:
            body = self.seqs[a]
            if lo > 0:
                more: tuple[int, ...] = ()
                if hi != 1:
                    more = (self.item((_REP, a, lo - 1, hi - 1 if hi > 0 else -1, ())),)
                return (_F_OR, 0, [self.seq(body + more + rest)])
            if hi > 0:
                more = () if hi == 1 else (self.item((_REP, a, 0, hi - 1, ())),)
                return (_F_OR, 0, [self.seq(rest), self.seq(body + more + rest)])
            return (_F_OR, 0, [self.seq(rest), self.seq((*body, self.guard, items[0], *rest))])
        if kind in (_AHEAD, _NOT_AHEAD):
            return (_F_AND, int(kind == _NOT_AHEAD), [a, self.seq(rest)])
        return (_F_QUERY, 2 * a + int(kind == _NOT_BEHIND), [self.seq(rest)])

    def closure(self, root: int) -> int:
        """The formula of sequence ``root``: ``or``/``and``/``not`` of empty or byte-headed atoms,
        hits and look-behind queries (iterative, memoized)."""
        memo = self.closures
        found = memo.get(root)
        if found is not None:
            return found
        expansions = self.expansions
        stack = [root]
        open_: set[int] = set()
        while stack:
            s = stack[-1]
            if s in memo:
                stack.pop()
                continue
            step = expansions.get(s)
            if step is None:
                step = self.expand(s)
                expansions[s] = step
            op, arg, needs = step
            missing = [d for d in needs if d not in memo]
            if missing:
                if s in open_:
                    raise RuntimeError("look-around closure met a cycle")  # not reachable
                open_.add(s)
                stack.extend(missing)
                continue
            stack.pop()
            if op == _F_ATOM:
                value = self.form((_F_ATOM, s, ()))
            elif op in (_FALSE, _TRUE):
                value = op
            elif op == _F_HIT:
                value = self.form((_F_HIT, arg, ()))
            elif op == _F_OR:
                value = self.mk_junction(_F_OR, [memo[d] for d in needs])
            elif op == _F_AND:
                first = memo[needs[0]]
                value = self.mk_junction(_F_AND, [self.mk_not(first) if arg else first, memo[needs[1]]])
            else:  # _F_QUERY
                query = self.form((_F_QUERY, arg >> 1, ()))
                value = self.mk_junction(_F_AND, [self.mk_not(query) if arg & 1 else query, memo[needs[0]]])
            memo[s] = value
        return memo[root]

    # -- formulas -------------------------------------------------------------------------
    def substitute(
        self,
        root: int,
        leaf: Callable[[int], int],
        memo: dict[int, int],
        known: Callable[[int], int] | None = None,
    ) -> int:
        """``root`` with each leaf (atom, hit, query) ``f`` replaced by ``leaf(f)``; with
        ``known``, a formula ``f`` with ``known(f) >= 0`` is replaced by that, unvisited."""
        forms = self.forms
        stack = [root]
        while stack:
            f = stack[-1]
            if f in memo:
                stack.pop()
                continue
            if known is not None:
                value = known(f)
                if value >= 0:
                    memo[f] = value
                    stack.pop()
                    continue
            kind, _, args = forms[f]
            if kind >= _F_NOT:
                missing = [x for x in args if x not in memo]
                if missing:
                    stack.extend(missing)
                    continue
                new = [memo[x] for x in args]
                memo[f] = self.mk_not(new[0]) if kind == _F_NOT else self.mk_junction(kind, new)
            elif kind <= _TRUE:
                memo[f] = f
            else:
                memo[f] = leaf(f)
            stack.pop()
        return memo[root]

    def derive(self, root: int, byte: int) -> int:
        """The formula after reading ``byte`` (hits of the previous position drop out;
        look-behind queries of the new closures stay to be resolved)."""

        def leaf(f: int) -> int:
            kind, s, _ = self.forms[f]
            if kind != _F_ATOM:
                return _FALSE
            key = (s, byte)
            found = self.derivatives.get(key)
            if found is None:
                items = self.seqs[s]
                found = _FALSE
                if items and self.items[items[0]][1] >> byte & 1:
                    rest = tuple(i for i in items[1:] if i != self.guard)
                    kind, _, _, _, alts = self.items[items[0]]
                    if kind == _CHOICE:  # a byte trie: the tails of the alternatives read
                        seqs, its = self.seqs, self.items
                        tails = [self.seq(seqs[x][1:]) for x in alts if its[seqs[x][0]][1] >> byte & 1]
                        nonempty = [t for t in tails if self.seqs[t]]
                        heads: list[int] = []
                        if len(nonempty) == 1:
                            heads = [self.closure(self.seq(self.seqs[nonempty[0]] + rest))]
                        elif nonempty:
                            heads = [self.closure(self.seq((self.choice(nonempty), *rest)))]
                        if len(nonempty) < len(tails):
                            heads.append(self.closure(self.seq(rest)))
                        found = self.mk_junction(_F_OR, heads)
                    else:
                        found = self.closure(self.seq(rest))
                self.derivatives[key] = found
            return found

        heads, zeros = self.heads, self.zeros

        def known(f: int) -> int:  # no atom below reads the byte: every leaf becomes false
            if heads[f] >> byte & 1:
                return -1
            return _TRUE if zeros[f] else _FALSE

        return self.substitute(root, leaf, {}, known)

    def restrict(self, tracker_form: int) -> int:
        """A tracker's verdict here: its hits true, its bodies still under way false."""

        def leaf(f: int) -> int:
            kind, a, _ = self.forms[f]
            if kind == _F_HIT:
                return _TRUE
            if kind == _F_ATOM and self.seq_ends[a]:
                return _FALSE
            return f

        return self.substitute(tracker_form, leaf, self.restricted)

    def resolve(self, root: int, trackers: list[int]) -> int:
        """``root`` with each look-behind query answered by the trackers at this position."""

        def leaf(f: int) -> int:
            kind, a, _ = self.forms[f]
            return self.restrict(trackers[a]) if kind == _F_QUERY else f

        queries = self.queries
        if not queries[root]:
            return root
        return self.substitute(root, leaf, {}, lambda f: -1 if queries[f] else f)

    def leaves(self, roots: list[int]) -> list[int]:
        """The distinct leaves below ``roots``."""
        seen: set[int] = set()
        out: list[int] = []
        stack = list(roots)
        forms = self.forms
        while stack:
            f = stack.pop()
            if f in seen:
                continue
            seen.add(f)
            kind, _, args = forms[f]
            if kind >= _F_NOT:
                stack.extend(args)
            elif kind > _TRUE:
                out.append(f)
        return out

    def nullable(self, root: int) -> bool:
        """Whether the formula holds of the empty rest (the input ends here)."""

        def leaf(f: int) -> int:
            kind, s, _ = self.forms[f]
            return _TRUE if kind == _F_ATOM and not self.seqs[s] else _FALSE

        return self.substitute(root, leaf, {}) == _TRUE

    # -- the automaton --------------------------------------------------------------------
    def automaton(self, main_items: tuple[int, ...], line: int, col: int) -> ByteAutomaton:
        main_seq = self.seq(main_items)
        restarts = [self.closure(t) for t in self.trackers]
        first: list[int] = []
        for k in range(len(restarts)):
            first.append(self.resolve(restarts[k], first))
        start = (self.resolve(self.closure(main_seq), first), *first)
        index: dict[tuple[int, ...], int] = {start: 0}
        states = [start]
        edges: dict[tuple[int, int], int] = {}  # (source, target) -> byte mask
        todo = 0
        while todo < len(states):
            state = states[todo]
            src = todo
            todo += 1
            if state[0] == _FALSE:
                continue
            masks: set[int] = set()
            forms = self.forms
            for f in self.leaves(list(state)):
                kind, s, _ = forms[f]
                items = self.seqs[s]
                if kind == _F_ATOM and items:
                    head = self.items[items[0]]
                    if head[0] == _CHOICE:  # bytes that lead to different tails differ
                        masks.update(self.first_masks(head[4]))
                    else:
                        masks.add(head[1])
            union = 0
            for m in masks:
                union |= m
            classes = [union] if union else []
            for m in masks:
                split: list[int] = []
                for c in classes:
                    inside = c & m
                    outside = c & ~m
                    if inside:
                        split.append(inside)
                    if outside:
                        split.append(outside)
                classes = split
            for c in classes:
                byte = (c & -c).bit_length() - 1
                trackers: list[int] = []
                for k in range(len(restarts)):
                    moved = self.derive(state[1 + k], byte)
                    trackers.append(self.resolve(self.mk_junction(_F_OR, [moved, restarts[k]]), trackers))
                main = self.resolve(self.derive(state[0], byte), trackers)
                if main == _FALSE:
                    continue
                key = (main, *trackers)
                dst = index.get(key)
                if dst is None:
                    dst = len(states)
                    if dst >= self.max_states:
                        raise GrammarTooLarge(
                            "look-around automaton",
                            self.max_states,
                            f"states for the regular expression at line {line}, column {col}",
                        )
                    index[key] = dst
                    states.append(key)
                edges[(src, dst)] = edges.get((src, dst), 0) | c
        finals = [i for i, st in enumerate(states) if st[0] != _FALSE and self.nullable(st[0])]
        return _trim(len(states), finals, edges)


def _trim(n: int, finals: list[int], edges: dict[tuple[int, int], int]) -> ByteAutomaton:
    """The automaton of states ``0..n-1`` (start 0) without the states that reach no final state."""
    back: list[list[int]] = [[] for _ in range(n)]
    for src, dst in edges:
        back[dst].append(src)
    alive = [False] * n
    stack = list(finals)
    for f in finals:
        alive[f] = True
    while stack:
        q = stack.pop()
        for p in back[q]:
            if not alive[p]:
                alive[p] = True
                stack.append(p)
    if not alive[0]:
        return ByteAutomaton(1, 0, (), ())
    number = [-1] * n
    count = 0
    for q in range(n):
        if alive[q]:
            number[q] = count
            count += 1
    out: list[tuple[int, int, int, int]] = []
    for (src, dst), mask in sorted(edges.items()):
        if alive[src] and alive[dst]:
            for lo, hi in ByteSet(mask).ranges():
                out.append((number[src], lo, hi, number[dst]))
    return ByteAutomaton(count, 0, tuple(number[f] for f in finals), tuple(out))


def compile_lookaround(
    body: Node,
    source: Source,
    *,
    refs: Mapping[str, Node] | None = None,
    max_repeat: int = DEFAULT_MAX_REPEAT,
    max_states: int = DEFAULT_MAX_STATES,
) -> ByteAutomaton:
    """The deterministic byte automaton of a regular expression's tree with look-around.

    Parameters
    ----------
    body : Node
        A syntax tree (:mod:`formalgram.syntax.nodes`) that may hold ``LOOK`` nodes, as
        :func:`formalgram.syntax.regex.regex_tree` returns it.
    source : Source
        The text, for error positions.
    refs : mapping of str to Node, optional
        The trees that ``REF`` nodes stand for (inlined: the whole is one expression, so a
        look-ahead sees through references to the end of ``body``'s match).  The references
        must not be cyclic.
    max_repeat : int
        Budget for the copies made by ``{m,n}`` repetitions, counted as
        :func:`~formalgram.syntax.lower.lower_rules` counts them.
    max_states : int
        The most states the automaton may have (and, times 64, the most formulas built).

    Returns
    -------
    ByteAutomaton
        Deterministic, without ε-edges or calls, start state 0, every state reaching a
        final one (or one state and no final state for the empty language); it accepts the
        byte string ``s.encode()`` exactly when the whole of ``s`` is matched as
        :func:`re.fullmatch` matches: look-ahead sees to the end of ``s``, look-behind sees
        the start of ``s``.

    Raises
    ------
    GrammarTooLarge
        When the automaton needs more than ``max_states`` states (or formulas).
    GrammarSyntaxError
        At a repetition past ``max_repeat``, or a reference missing from ``refs``.

    Notes
    -----
    Each state costs one derivative per class of bytes that its atoms tell apart; a
    derivative is linear in the size of the state's formula.  The number of states can be
    exponential in the number of assertions (that is the budget's purpose); typical
    patterns need a few states per character of the pattern.

    Examples
    --------
    >>> from formalgram.syntax.regex import regex_tree
    >>> p = r"(?:(?!ab)[abc])*"  # no "ab" anywhere
    >>> tree = regex_tree(p, 0, Source(p), list(range(len(p) + 1)), lookaround=True)
    >>> a = compile_lookaround(tree, Source(p))
    >>> a.num_states, len(a.finals)
    (2, 2)
    """
    compiler = _Compiler(source, max_repeat, max_states)
    items = compiler.convert(body, {} if refs is None else refs)
    return compiler.automaton(items, body.line, body.col)
