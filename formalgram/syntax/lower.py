"""Lowering: the rules of a front end's syntax tree (:mod:`formalgram.syntax.nodes`) -> a byte :class:`Grammar`.

One definition of what every construct means at the byte level, shared by every front end:

* a ``STRING`` is the sequence of single-byte terminals of its UTF-8 encoding;
* a ``CLASS`` of code points below 0x80 (or a raw byte class) is one byte-set terminal; a
  class with code points >= 0x80 is a nonterminal whose alternatives are the UTF-8 byte-set
  sequences of the set (:func:`formalgram.utf8.utf8_sequences`), shared per distinct set and
  named ``<rule>-chars``; a rule whose whole body is such a class owns the alternatives;
* an ``ALT`` of several alternatives is a nonterminal ``<rule>-group``; of one, its sequence;
* ``x{m,n}`` is ``m`` copies of ``x`` then a chain ``O_k ::= x O_{k-1} | ""`` (named
  ``<rule>-opt``, ``<rule>-rep``), ``x{m,}`` is ``m`` copies then ``N ::= x N | ""``
  (``<rule>-star``); equal repeated content shares its helpers; a rule whose whole body is
  ``x*`` or ``x+`` recurses on itself.  Nullability is exact.

Helper names are made unique with :func:`formalgram.grammar.fresh_name` (per-base
counters, so naming stays linear).  Trees of any depth are lowered with explicit stacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from formalgram.automaton import EPSILON, ByteAutomaton
from formalgram.byteset import ByteSet
from formalgram.errors import GrammarError
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.syntax.nodes import (
    ALT,
    CLASS,
    RAW_BASE,
    REF,
    REPEAT,
    SEQ,
    STRING,
    Node,
    Source,
    charge_repeat,
    repeat,
)
from formalgram.utf8 import encode_code_point, utf8_sequences

# frames of the explicit lowering stack
_F_SEQ: Final = 0  # the children's symbols go, in order, to the frame's sink
_F_ALT: Final = 1  # one production of a group nonterminal per child; the nonterminal goes to the sink
_F_REP: Final = 2  # a chain of repetition operators applied to the one child's symbols


class _Frame:
    __slots__ = ("buf", "i", "kind", "node", "nt", "ops", "sink")

    def __init__(self, kind: int, node: Node, nt: int, sink: list[int]) -> None:
        self.kind = kind
        self.node = node
        self.i = 0
        self.nt = nt
        self.sink = sink  # where this frame's symbols go
        self.buf: list[int] = []  # the current child's symbols (ALT, REP)
        self.ops: list[Node] = []  # REP: outermost operator first


def iter_references(body: Node) -> list[Node]:
    """The ``REF`` nodes of a tree in text order (pre-order, left to right).

    Parameters
    ----------
    body : Node
        Any node.

    Returns
    -------
    list of Node
        Every ``REF`` node below ``body`` (or ``body`` itself).

    Notes
    -----
    O(number of nodes), with an explicit stack.

    Examples
    --------
    >>> a, b = Node(REF, 1, 1), Node(REF, 1, 3)
    >>> a.name, b.name = "a", "b"
    >>> seq = Node(SEQ, 1, 1)
    >>> seq.children = [a, b]
    >>> [r.name for r in iter_references(seq)]
    ['a', 'b']
    """
    out: list[Node] = []
    stack = [body]
    while stack:
        node = stack.pop()
        if node.kind == REF:
            out.append(node)
        elif node.children:
            stack.extend(reversed(node.children))
    return out


class _Lowering:
    """Turns rule bodies into the integer view of a Grammar."""

    def __init__(self, source: Source, rule_names: list[str], max_repeat: int) -> None:
        self.source = source
        self.names: list[str] = list(rule_names)
        self.index: dict[str, int] = {name: i for i, name in enumerate(rule_names)}
        self.taken: set[str] = set(rule_names)
        self.counters: dict[str, int] = {}
        self.masks: list[int] = []
        self.mask_index: dict[int, int] = {}
        self.rules: list[IdRule] = []
        self.class_memo: dict[tuple[tuple[int, int], ...], int] = {}
        self.rep_memo: dict[tuple[tuple[int, ...], int, int], int] = {}
        self.max_repeat = max_repeat
        self.repeat_used = 0

    def add(self, lhs: int, rhs: tuple[int, ...]) -> None:
        self.rules.append((lhs, rhs))

    def terminal(self, mask: int) -> int:
        t = self.mask_index.get(mask)
        if t is None:
            t = len(self.masks)
            self.mask_index[mask] = t
            self.masks.append(mask)
        return ~t

    def new_nonterminal(self, base: str) -> int:
        name = fresh_name(base, self.taken, self.counters)
        self.taken.add(name)
        self.index[name] = len(self.names)
        self.names.append(name)
        return len(self.names) - 1

    def class_alternatives(self, ranges: tuple[tuple[int, int], ...]) -> list[list[int]]:
        return [[self.terminal(b.mask) for b in seq] for seq in utf8_sequences(ranges)]

    def lower_rule(self, lhs: int, body: Node) -> None:
        rule = self.names[lhs]
        alternatives = body.children if body.kind == ALT else [_as_sequence(body)]
        # a body that is one element: class, or repetition, gets the rule itself
        if len(alternatives) == 1 and len(alternatives[0].children) == 1:
            elem = _unwrap(alternatives[0].children[0])
            if elem.kind == CLASS and not elem.ranges:
                # ``x ::= []``: a rule without any production (how the printer writes one)
                return
            if elem.kind == CLASS and not elem.raw and _is_multibyte(elem.ranges):
                for alt in self.class_alternatives(elem.ranges):
                    self.add(lhs, tuple(alt))
                return
            if elem.kind == REPEAT and elem.hi == -1 and elem.lo <= 1:
                x = self.lower_node(elem.children[0], rule)
                self.add(lhs, (*x, lhs))
                self.add(lhs, tuple(x) if elem.lo == 1 else ())
                return
        for seq in alternatives:
            self.add(lhs, tuple(self.lower_node(seq, rule)))

    def lower_node(self, node: Node, rule: str) -> list[int]:
        """The symbols of ``node``, creating helper nonterminals named after ``rule``.

        Helpers are created in the order of a recursive descent (a group's nonterminal
        before its contents, a repetition's after), with an explicit stack; nested
        sequences write into one list, so deep nesting costs linear time.
        """
        out: list[int] = []
        stack: list[_Frame] = []
        done = self.open(node, rule, stack, out)
        while stack:
            top = stack[-1]
            if done:  # the top frame's current child is complete
                if top.kind == _F_REP:
                    x = top.buf
                    for op in reversed(top.ops):
                        x = self.lower_repeat(x, op, rule)
                    top.sink.extend(x)
                    stack.pop()
                    continue
                if top.kind == _F_ALT:
                    self.add(top.nt, tuple(top.buf))
            children = top.node.children
            if top.i < len(children):
                child = children[top.i]
                top.i += 1
                if top.kind == _F_ALT:
                    top.buf = []
                    done = self.open(child, rule, stack, top.buf)
                else:
                    done = self.open(child, rule, stack, top.sink)
            else:
                stack.pop()
                if top.kind == _F_ALT:
                    top.sink.append(top.nt)
                done = True
        return out

    def open(self, node: Node, rule: str, stack: list[_Frame], sink: list[int]) -> bool:
        """Append the symbols of a leaf to ``sink`` (True), or push the frame that will (False)."""
        node = _single(node)
        if node.kind == REPEAT:
            # stacked operators (x*+?) are applied innermost first to the base's symbols
            frame = _Frame(_F_REP, node, -1, sink)
            while node.kind == REPEAT:
                frame.ops.append(node)
                node = _single(node.children[0])
            stack.append(frame)
            sink = frame.buf
        kind = node.kind
        if kind == REF:
            nt = self.index.get(node.name, -1)
            if nt < 0:
                raise self.source.error(f"rule '{node.name}' is not defined", node.line, node.col)
            sink.append(nt)
        elif kind == STRING:
            for c in node.chars:
                if c >= RAW_BASE:
                    sink.append(self.terminal(1 << (c - RAW_BASE)))
                else:
                    for b in encode_code_point(c):
                        sink.append(self.terminal(1 << b))
        elif kind == CLASS:
            if node.raw or not _is_multibyte(node.ranges):
                mask = 0
                for lo, hi in node.ranges:
                    mask |= ByteSet.from_range(lo, hi).mask
                sink.append(self.terminal(mask))
            else:
                nt = self.class_memo.get(node.ranges, -1)
                if nt < 0:
                    nt = self.new_nonterminal(f"{rule}-chars")
                    self.class_memo[node.ranges] = nt
                    for alt in self.class_alternatives(node.ranges):
                        self.add(nt, tuple(alt))
                sink.append(nt)
        elif kind == SEQ:
            stack.append(_Frame(_F_SEQ, node, -1, sink))
            return False
        elif kind == ALT:  # of several alternatives (_single unwrapped the others)
            stack.append(_Frame(_F_ALT, node, self.new_nonterminal(f"{rule}-group"), sink))
            return False
        else:
            raise ValueError(f"unknown syntax node kind {kind}")
        return True

    def lower_repeat(self, x: list[int], elem: Node, rule: str) -> list[int]:
        lo = elem.lo
        hi = elem.hi
        width = len(x)
        self.repeat_used = charge_repeat(self.source, elem, width, self.repeat_used, self.max_repeat)
        if width == 0:
            return []
        out: list[int] = []
        for _ in range(lo):
            out.extend(x)
        if hi < 0:
            out.append(self.star(x, rule))
        elif hi > lo:
            out.append(self.optional_chain(x, hi - lo, rule))
        return out

    def star(self, x: list[int], rule: str) -> int:
        key = (tuple(x), -1, 0)
        nt = self.rep_memo.get(key, -1)
        if nt < 0:
            nt = self.new_nonterminal(f"{rule}-star")
            self.rep_memo[key] = nt
            self.add(nt, (*x, nt))
            self.add(nt, ())
        return nt

    def optional_chain(self, x: list[int], k: int, rule: str) -> int:
        # O_1 -> x | eps ; O_j -> x O_{j-1} | eps  (accepts 0..k copies, each once)
        tx = tuple(x)
        prev = -1
        for j in range(1, k + 1):
            key = (tx, -2, j)
            nt = self.rep_memo.get(key, -1)
            if nt < 0:
                nt = self.new_nonterminal(f"{rule}-opt" if j == 1 else f"{rule}-rep")
                self.rep_memo[key] = nt
                self.add(nt, tx if prev < 0 else (*tx, prev))
                self.add(nt, ())
            prev = nt
        return prev


def _as_sequence(node: Node) -> Node:
    if node.kind == SEQ:
        return node
    seq = Node(SEQ, node.line, node.col)
    seq.children.append(node)
    return seq


def _single(node: Node) -> Node:
    # a choice of one alternative is that alternative
    while node.kind == ALT and len(node.children) == 1:
        node = node.children[0]
    return node


def _unwrap(elem: Node) -> Node:
    # strip redundant parentheses: ((x)) -> x
    while elem.kind == ALT and len(elem.children) == 1 and len(elem.children[0].children) == 1:
        elem = elem.children[0].children[0]
    return elem


def _is_multibyte(ranges: tuple[tuple[int, int], ...]) -> bool:
    return bool(ranges) and ranges[-1][1] >= 0x80


def automaton_rules(
    automaton: ByteAutomaton, names: Sequence[str], line: int, col: int
) -> list[tuple[str, Node]]:
    """A byte automaton as right-linear rules, one per state, for :func:`lower_rules`.

    Parameters
    ----------
    automaton : ByteAutomaton
        Any automaton (ε-edges and calls of sub-automata included).
    names : sequence of str
        The rule name of each state (``len(names) == automaton.num_states``); a reference
        to ``names[automaton.start]`` stands for the automaton's language.
    line, col : int
        The position the nodes carry (where the automaton came from in the text).

    Returns
    -------
    list of (name, body)
        Per state, in state order: one alternative per call (the sub-automaton's start
        rule, repeated, then the target's rule), one per target reached by bytes (a raw
        byte class then the target's rule), one per ε-target, the empty alternative for a
        final state, and an alternative matching nothing for a state that neither accepts
        nor moves.  So the rule of state ``q`` derives exactly the byte strings that lead
        from ``q`` to a final state.

    Notes
    -----
    Linear in the states, edges and calls.

    Examples
    --------
    >>> a = ByteAutomaton(2, 0, (1,), ((0, 0x61, 0x62, 1), (1, EPSILON, EPSILON, 0)))
    >>> rules = automaton_rules(a, ["s", "t"], 1, 1)
    >>> g = lower_rules(rules, "s", Source(""), max_repeat=10)
    >>> g.accepts(b"ab"), g.accepts(b""), g.accepts(b"c")
    (True, False, False)
    """
    if len(names) != automaton.num_states:
        raise ValueError(f"{len(names)} names for {automaton.num_states} states")
    out: list[tuple[str, Node]] = []
    # per state: the byte ranges to each target, the ε-targets, and whether it accepts
    ranges: list[dict[int, list[tuple[int, int]]]] = [{} for _ in names]
    for src, lo, hi, dst in automaton.edges:
        ranges[src].setdefault(dst, []).append((lo, hi))
    finals = set(automaton.finals)
    calls: list[list[tuple[int, int, int, int]]] = [[] for _ in names]
    for src, entry, lo, hi, dst in automaton.calls:
        calls[src].append((entry, lo, hi, dst))
    for state, name in enumerate(names):
        body = Node(ALT, line, col)
        for entry, lo, hi, dst in calls[state]:
            seq = Node(SEQ, line, col)
            inner = Node(REF, line, col)
            inner.name = names[entry]
            seq.children.append(inner if lo == hi == 1 else repeat(inner, lo, hi, line, col))
            target = Node(REF, line, col)
            target.name = names[dst]
            seq.children.append(target)
            body.children.append(seq)
        for dst, spans in ranges[state].items():
            seq = Node(SEQ, line, col)
            target = Node(REF, line, col)
            target.name = names[dst]
            byte_spans = [(lo, hi) for lo, hi in spans if lo != EPSILON]
            if byte_spans:
                cls = Node(CLASS, line, col)
                cls.raw = True
                cls.ranges = tuple(sorted(byte_spans))
                seq.children.append(cls)
                seq.children.append(target)
                body.children.append(seq)
            if len(byte_spans) < len(spans):  # an ε-edge too
                eps = Node(SEQ, line, col)
                eps_target = Node(REF, line, col)
                eps_target.name = names[dst]
                eps.children.append(eps_target)
                body.children.append(eps)
        if state in finals:
            body.children.append(Node(SEQ, line, col))
        if not body.children:  # a state that neither accepts nor moves
            dead = Node(SEQ, line, col)
            dead.children.append(Node(CLASS, line, col))
            body.children.append(dead)
        out.append((name, body))
    return out


def lower_rules(rules: Sequence[tuple[str, Node]], start: str, source: Source, *, max_repeat: int) -> Grammar:
    """The byte-level grammar of a front end's rules.

    Parameters
    ----------
    rules : sequence of (name, body)
        The rules in text order; names are distinct; a body is an ``ALT`` of ``SEQ`` nodes
        (any other node is read as a one-element sequence).  Nonterminal ids follow this
        order; helper nonterminals come after.
    start : str
        The start rule's name (one of ``rules``).
    source : Source
        The text, for error positions.
    max_repeat : int
        Budget for the symbols created by ``{m,n}`` expansion, in total.

    Returns
    -------
    Grammar
        Over bytes, accepting exactly the UTF-8 encodings of the rules' languages.

    Raises
    ------
    GrammarSyntaxError
        At the repetition operator when ``max_repeat`` is exceeded; at the reference for
        a ``REF`` to a rule not in ``rules`` (front ends check references first, with
        their own wording).
    GrammarError
        For duplicate rule names or an undefined start rule.

    Notes
    -----
    Time and memory are linear in the size of the trees plus the size of the produced
    grammar, which ``max_repeat`` bounds (each ``x{m,n}`` costs ``m*|x| + (n-m)*(|x|+1)``
    symbols, ``|x|`` the lowered width of ``x``).  No Python recursion over the trees.

    Examples
    --------
    >>> from formalgram.syntax.nodes import repeat
    >>> a = Node(STRING, 1, 10)
    >>> a.chars = [ord("a")]
    >>> seq = Node(SEQ, 1, 10)
    >>> seq.children.append(repeat(a, 2, 3, 1, 13))
    >>> body = Node(ALT, 1, 10)
    >>> body.children.append(seq)
    >>> g = lower_rules([("root", body)], "root", Source('root ::= "a"{2,3}'), max_repeat=100)
    >>> [g.accepts(b"a" * n) for n in range(5)]
    [False, False, True, True, False]
    """
    names: list[str] = []
    seen: set[str] = set()
    for name, _ in rules:
        if name in seen:
            raise GrammarError(f"rule '{name}' is defined more than once")
        seen.add(name)
        names.append(name)
    if start not in seen:
        raise GrammarError(f"start rule '{start}' is not defined")
    low = _Lowering(source, names, max_repeat)
    for lhs, (_, body) in enumerate(rules):
        low.lower_rule(lhs, body)
    return Grammar.from_ids(low.names, low.masks, low.index[start], low.rules)
