"""The one-state pushdown automaton of a grammar in Greibach normal form: its transition table.

A grammar is in GNF when every rule is ``A -> a B1 ... Bn`` with ``a`` a byte-set terminal
followed only by nonterminals, except possibly ``S -> ε`` for the start symbol ``S``, which
then appears on no right-hand side (:func:`formalgram.transforms.gnf_check.gnf_violation`).

Such a grammar is its own pushdown automaton.  The automaton has a single state; its
configuration is a stack of nonterminals, initially ``(S)``.  Reading byte ``c`` with
``A`` on top pops ``A`` and, for *one* rule ``A -> a B1 ... Bn`` with ``c in a``,
pushes ``B1 ... Bn`` so that ``B1`` ends on top.  A non-empty input is accepted when
some run ends with the empty stack; the empty input is accepted when ``S -> ε`` is a rule.

Stacks are plain tuples of nonterminal ids with the **top at the end** (push and pop are
then a slice and a concatenation).  :meth:`PDA.step` and :meth:`PDA.stacks_after` expose
the explicit set of reachable stacks (bounded by ``max_stacks``: in GNF that set can grow
exponentially with bracket nesting, since every open bracket already commits to what follows
its match).  :meth:`PDA.accepts` and :meth:`PDA.is_prefix` simulate the same set on a
graph-structured stack, which stays linear in the input.  See :meth:`PDA.is_prefix` for why
the automaton drops rules that mention non-generating nonterminals.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import final

from formalgram.analysis import generating, generating_rules
from formalgram.errors import GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.transforms.byte_classes import byte_class_map
from formalgram.transforms.gnf_check import require_gnf

__all__ = ["DEFAULT_MAX_STACKS", "DEFAULT_WORK", "PDA", "Stack"]

Stack = tuple[int, ...]
"""A PDA stack: nonterminal ids, top at the end."""

DEFAULT_MAX_STACKS = 200_000

DEFAULT_WORK = 10_000_000
"""Default work budget of :meth:`PDA.accepts` and :meth:`PDA.is_prefix`, in steps (cells
visited, transitions tried, parent links merged): a few seconds of pure Python."""


@final
class PDA:
    """The one-state pushdown automaton of a GNF grammar (CFGzip paper, section 2.1).

    Build it with :meth:`PDA.from_gnf`.

    Attributes
    ----------
    names : tuple of str
        Nonterminal id -> name (the grammar's ids).
    start_id : int
        Id of the start nonterminal; the initial stack is ``(start_id,)``.
    accepts_empty : bool
        True when the grammar has the rule ``S -> ε``.
    byte_class_of : bytes
        256 entries: byte value -> byte class id.  Two bytes in one class belong to exactly
        the same terminals, so no transition distinguishes them.
    n_classes : int
        Number of byte classes.
    class_bytes : tuple of int
        Class id -> 256-bit mask of its bytes.
    table : dict
        ``(byte class, nonterminal) -> tuple of pushed tuples``.  Each pushed tuple is a rule's
        ``(B1, ..., Bn)`` in rule order (``B1`` ends on top of the stack); absent keys mean no
        transition.  Rules that mention a non-generating nonterminal are left out (see
        :meth:`is_prefix`).
    generating : tuple of bool
        Nonterminal id -> whether it derives some string.
    dropped_rules : int
        How many non-empty grammar rules were left out because they derive no string (they
        mention a non-generating nonterminal or a terminal with an empty byte set).
    max_stacks : int
        Bound on the number of distinct stacks kept during a simulation.

    Raises
    ------
    GrammarError
        From the constructor, when ``byte_class_of`` does not have 256 entries.
    ValueError
        When ``max_stacks < 1``.

    Notes
    -----
    Construction (:meth:`from_gnf`) is linear in the grammar times the byte classes.  The
    explicit stack sets of :meth:`step` are bounded by ``max_stacks``; :meth:`accepts` and
    :meth:`is_prefix` by a work budget (:data:`DEFAULT_WORK`).

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, B = Nonterminal("S"), Nonterminal("B")
    >>> a, b = ByteSet.single(ord("a")), ByteSet.single(ord("b"))
    >>> g = Grammar([Production(S, [a, S, B]), Production(S, [a, B]), Production(B, [b])], "S")
    >>> pda = PDA.from_gnf(g)
    >>> pda.accepts(b"aabb"), pda.accepts(b"aab"), pda.is_prefix(b"aab")
    (True, False, True)
    """

    names: tuple[str, ...]
    start_id: int
    accepts_empty: bool
    byte_class_of: bytes
    n_classes: int
    class_bytes: tuple[int, ...]
    table: dict[tuple[int, int], tuple[tuple[int, ...], ...]]
    generating: tuple[bool, ...]
    dropped_rules: int
    max_stacks: int
    _n: int
    _moves: dict[int, tuple[tuple[int, ...], ...]] | None

    def __init__(
        self,
        names: tuple[str, ...],
        start_id: int,
        accepts_empty: bool,
        byte_class_of: bytes,
        n_classes: int,
        table: dict[tuple[int, int], tuple[tuple[int, ...], ...]],
        generating: tuple[bool, ...],
        dropped_rules: int = 0,
        max_stacks: int = DEFAULT_MAX_STACKS,
    ) -> None:
        if len(byte_class_of) != 256:
            raise GrammarError("byte_class_of must have 256 entries")
        if max_stacks < 1:
            raise ValueError(f"max_stacks must be positive, got {max_stacks}")
        self.names = names
        self.start_id = start_id
        self.accepts_empty = accepts_empty
        self.byte_class_of = byte_class_of
        self.n_classes = n_classes
        masks = [0] * n_classes
        for b in range(256):
            masks[byte_class_of[b]] |= 1 << b
        self.class_bytes = tuple(masks)
        self.table = table
        self.generating = generating
        self.dropped_rules = dropped_rules
        self.max_stacks = max_stacks
        self._n = len(names)
        self._moves = None  # the simulation's form of the table, built on first use (_move_table)

    def _move_table(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        """The table for simulation: key ``class * n + nonterminal``, pushes reversed (top last)."""
        moves = self._moves
        if moves is None:
            n = self._n
            moves = {}
            for (cls, nt), pushes in self.table.items():
                moves[cls * n + nt] = tuple(tuple(reversed(p)) for p in pushes)
            self._moves = moves
        return moves

    @staticmethod
    def from_gnf(g: Grammar, *, max_stacks: int = DEFAULT_MAX_STACKS) -> PDA:
        """Build the one-state PDA of a grammar in Greibach normal form.

        Parameters
        ----------
        g : Grammar
            A GNF grammar (:func:`~formalgram.transforms.gnf_check.gnf_violation`): every rule
            ``A -> a B1 ... Bn`` (a terminal, then nonterminals only), except possibly
            ``S -> ε`` for the start ``S``, which then appears on no right-hand side.
        max_stacks : int, keyword-only
            Bound on the number of distinct stacks a simulation may hold at once.

        Returns
        -------
        PDA

        Raises
        ------
        GrammarError
            If ``g`` is not in GNF (the message names the offending rule).
        ValueError
            If ``max_stacks < 1``.

        Notes
        -----
        Rules that derive no string (:func:`~formalgram.analysis.generating_rules`) are
        dropped: a stack holding a non-generating symbol can never be emptied, so those rules
        take part in no accepting run, and dropping them makes "some stack survives" mean
        "is a prefix".  The byte classes are those of
        :func:`~formalgram.transforms.byte_classes.byte_class_map`.

        O(|rules| * |byte classes| + total rule length) time and space.

        Examples
        --------
        >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
        >>> S, A = Nonterminal("S"), Nonterminal("A")
        >>> g = Grammar([Production(S, [ByteSet.from_bytes(b"ab"), A]),
        ...              Production(A, [ByteSet.single(99)])], "S")
        >>> pda = PDA.from_gnf(g)
        >>> pda.n_classes, pda.transitions(ord("b"), 0), pda.transitions(ord("c"), 0)
        (3, ((1,),), ())
        """
        require_gnf(g, "PDA.from_gnf")
        byte_class_of = byte_class_map(g)
        n_classes = max(byte_class_of) + 1
        gen_set = generating(g)
        gen = tuple(a in gen_set for a in range(len(g.names)))
        # byte classes of each terminal
        term_classes: list[list[int]] = []
        for mask in g.masks:
            seen: list[int] = []
            m = mask
            while m:
                low = m & -m
                c = byte_class_of[low.bit_length() - 1]
                if c not in seen:
                    seen.append(c)
                m ^= low
            term_classes.append(seen)
        acc: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        accepts_empty = any(not rhs for _, rhs in g.rules)
        usable = generating_rules(g, gen_set)
        rules = g.rules
        for ri in usable:
            lhs, rhs = rules[ri]
            if not rhs:
                continue
            push = rhs[1:]
            for c in term_classes[~rhs[0]]:
                key = (c, lhs)
                lst = acc.get(key)
                if lst is None:
                    acc[key] = [push]
                elif push not in lst:
                    lst.append(push)
        dropped = sum(1 for _, rhs in rules if rhs) - sum(1 for ri in usable if rules[ri][1])
        table: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        for key, lst in acc.items():
            table[key] = tuple(lst)
        return PDA(
            g.names,
            g.start_id,
            accepts_empty,
            byte_class_of,
            n_classes,
            table,
            gen,
            dropped,
            max_stacks,
        )

    # -- transitions ----------------------------------------------------------------------
    def transitions(self, byte: int, nonterminal: int) -> tuple[tuple[int, ...], ...]:
        """The tuples ``(B1, ..., Bn)`` that may replace ``nonterminal`` on reading ``byte``.

        Parameters
        ----------
        byte : int
            A byte value, ``0 <= byte <= 255``.
        nonterminal : int
            A nonterminal id (the top of the stack).

        Returns
        -------
        tuple of tuple of int
            ``B1`` ends on top.  Empty when no rule applies.

        Notes
        -----
        One dictionary lookup; raises nothing.

        Examples
        --------
        >>> from formalgram import parse_gbnf, to_gnf
        >>> pda = PDA.from_gnf(to_gnf(parse_gbnf('root ::= "a" root | "b"')))
        >>> pda.transitions(ord("a"), pda.start_id), pda.transitions(ord("c"), pda.start_id)
        (((1,),), ())
        """
        return self.table.get((self.byte_class_of[byte], nonterminal), ())

    @property
    def initial_stacks(self) -> frozenset[Stack]:
        """The set of initial stacks, ``{(S,)}``.

        Notes
        -----
        O(1).

        Examples
        --------
        >>> from formalgram import parse_gbnf, to_gnf
        >>> PDA.from_gnf(to_gnf(parse_gbnf('root ::= "x"'))).initial_stacks
        frozenset({(0,)})
        """
        return frozenset([(self.start_id,)])

    def step(self, stacks: Iterable[Stack], byte: int) -> set[Stack]:
        """All stacks reachable from ``stacks`` by reading one byte.

        Parameters
        ----------
        stacks : iterable of tuple of int
            Stacks with the top at the end.  Empty stacks have no successor.
        byte : int
            The byte read, ``0 <= byte <= 255``.

        Returns
        -------
        set of tuple of int

        Raises
        ------
        GrammarTooLarge
            If more than ``max_stacks`` distinct stacks result.
        ValueError
            If ``byte`` is out of range.

        Notes
        -----
        O(sum over stacks of (transitions of its top) * stack depth).

        Examples
        --------
        >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
        >>> S, B = Nonterminal("S"), Nonterminal("B")
        >>> a, b = ByteSet.single(97), ByteSet.single(98)
        >>> pda = PDA.from_gnf(Grammar([Production(S, [a, S, B]), Production(S, [a, B]),
        ...                             Production(B, [b])], "S"))
        >>> sorted(pda.step(pda.initial_stacks, ord("a")))
        [(1,), (1, 0)]
        """
        if byte < 0 or byte > 255:
            raise ValueError(f"byte value out of range: {byte}")
        base = self.byte_class_of[byte] * self._n
        moves = self._move_table()
        out: set[Stack] = set()
        limit = self.max_stacks
        for st in stacks:
            if not st:
                continue
            pushes = moves.get(base + st[-1])
            if pushes is None:
                continue
            rest = st[:-1]
            for p in pushes:
                out.add(rest + p)
            if len(out) > limit:
                raise GrammarTooLarge(
                    "PDA simulation", limit, f"more than {limit} distinct stacks after reading byte {byte}"
                )
        return out

    def stacks_after(self, data: bytes) -> set[Stack]:
        """The set of stacks reachable from the initial stack by reading ``data``.

        Parameters
        ----------
        data : bytes
            The input; for ``b""`` the result is ``{(S,)}``.

        Returns
        -------
        set of tuple of int

        Raises
        ------
        GrammarTooLarge
            When a step holds more than ``max_stacks`` stacks.

        Notes
        -----
        ``len(data)`` calls of :meth:`step`; ``max_stacks`` bounds the stacks held at once,
        hence time and memory per byte.

        Examples
        --------
        >>> from formalgram import parse_gbnf, to_gnf
        >>> pda = PDA.from_gnf(to_gnf(parse_gbnf('root ::= "(" root ")" | "x"')))
        >>> [len(st) for st in pda.stacks_after(b"((")]
        [3]
        """
        cur: set[Stack] = {(self.start_id,)}
        for b in data:
            cur = self.step(cur, b)
            if not cur:
                break
        return cur

    def _run_shared(self, data: bytes, budget: int | None) -> tuple[bool, bool]:
        """Simulate on a graph-structured stack; returns ``(some stack survives, empty stack reached)``.

        The set of reachable stacks is kept as a DAG: a node is a stack cell (a nonterminal)
        whose *parents* are the cells that can lie directly below it (node 0 is the bottom).
        The stacks are the paths from a *top* node down to node 0.  Cells pushed at the same
        step for the same slot of the same pushed tuple are merged (their futures depend only
        on their symbol and the stacks below, so merging unions the stack sets exactly).
        The size is linear in ``len(data)`` times the number of distinct pushed slots, while
        the explicit set of stacks can grow exponentially (nested brackets in a GNF grammar).
        """
        syms: list[int] = [-1, self.start_id]
        parents: list[set[int]] = [set(), {0}]
        tops: set[int] = {1}
        n = self._n
        moves = self._move_table()
        limit = (1 << 62) if budget is None else budget
        work = 0
        for pos, byte in enumerate(data):
            base = self.byte_class_of[byte] * n
            fresh: dict[tuple[tuple[int, ...], int], int] = {}
            new_tops: set[int] = set()
            for v in tops:
                if v == 0:
                    continue
                pushes = moves.get(base + syms[v])
                if pushes is None:
                    continue
                below = parents[v]
                work += 1 + len(pushes) * (1 + len(below))
                if work > limit:
                    raise GrammarTooLarge(
                        "PDA simulation",
                        limit,
                        f"more than {limit} steps of work while reading byte {pos + 1}",
                    )
                for p in pushes:  # reversed: p[-1] is the new top, p[0] lies on ``below``
                    if not p:
                        new_tops |= below
                        continue
                    key = (p, 0)
                    node = fresh.get(key)
                    if node is None:
                        node = len(syms)
                        syms.append(p[0])
                        parents.append(set())
                        fresh[key] = node
                        prev = node
                        for k in range(1, len(p)):
                            cell = len(syms)
                            syms.append(p[k])
                            parents.append({prev})
                            fresh[(p, k)] = cell
                            prev = cell
                        new_tops.add(prev)
                    parents[node] |= below
            tops = new_tops
            if not tops:
                return False, False
        return True, 0 in tops

    # -- language queries -----------------------------------------------------------------
    def accepts(self, data: bytes, *, budget: int | None = DEFAULT_WORK) -> bool:
        """True when ``data`` belongs to the grammar's language.

        Parameters
        ----------
        data : bytes
        budget : int or None, keyword-only
            Most steps of work (cells visited, transitions tried, parent links merged);
            default :data:`DEFAULT_WORK`, ``None`` for no limit.

        Returns
        -------
        bool
            For ``b""``: whether ``S -> ε`` is a rule.  Otherwise: whether some run ends with
            the empty stack.

        Raises
        ------
        GrammarTooLarge
            When the simulation needs more than ``budget`` steps (checked at every cell).

        Notes
        -----
        The set of stacks is simulated on a shared graph-structured stack, never expanded
        (no ``max_stacks`` bound applies): at most C cells per byte, C the number of
        distinct pushed slots of the grammar.  A cell's parent set can hold every earlier
        cell, so a byte costs O(C * n * C) steps at worst and the whole input O(n^2 * C^2)
        time and memory (in GNF an open bracket commits to what follows its match, and
        ambiguous grammars accumulate parents); grammars whose stacks stay few cost O(n * C).
        The budget bounds both.

        Examples
        --------
        >>> from formalgram import parse_gbnf, to_gnf
        >>> pda = PDA.from_gnf(to_gnf(parse_gbnf('root ::= ("a" | "b")* "a"')))
        >>> pda.accepts(b"abba"), pda.accepts(b"abab")
        (True, False)
        >>> pda.accepts(b"ab" * 1000 + b"a", budget=1000)
        Traceback (most recent call last):
        ...
        formalgram.errors.GrammarTooLarge: PDA simulation exceeded its budget of 1000 (more than 1000 steps of work while reading byte 155)
        """
        if not data:
            return self.accepts_empty
        return self._run_shared(data, budget)[1]

    def is_prefix(self, data: bytes, *, budget: int | None = DEFAULT_WORK) -> bool:
        """True when ``data`` is a prefix of some string of the language.

        Parameters
        ----------
        data : bytes
        budget : int or None, keyword-only
            As for :meth:`accepts`.

        Returns
        -------
        bool

        Raises
        ------
        GrammarTooLarge
            When the simulation needs more than ``budget`` steps.

        Notes
        -----
        As :meth:`accepts` (graph-structured stack).  A non-empty ``data`` is a prefix exactly when some reachable stack can still be
        emptied.  A stack can be emptied iff every symbol on it is generating; since the
        automaton leaves out every rule mentioning a non-generating nonterminal, every stack
        it reaches from a generating start consists of generating symbols, so "some stack
        survives" is exact.  The empty input is a prefix iff the language is non-empty.

        Examples
        --------
        >>> from formalgram import parse_gbnf, to_gnf
        >>> pda = PDA.from_gnf(to_gnf(parse_gbnf('root ::= "(" root ")" | "x"')))
        >>> pda.is_prefix(b"(("), pda.is_prefix(b"(x))")
        (True, False)
        """
        if not data:
            return self.accepts_empty or self.generating[self.start_id]
        if not self.generating[self.start_id]:
            return False
        return self._run_shared(data, budget)[0]

    def __repr__(self) -> str:
        return (
            f"<PDA start={self.names[self.start_id]!r} nonterminals={self._n} "
            f"byte_classes={self.n_classes} transitions={len(self.table)}>"
        )
