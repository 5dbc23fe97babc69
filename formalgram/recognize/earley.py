"""Earley recognition over bytes: the reference oracle of formalgram.

**Public entry points.**

* :func:`accepts` -- is ``data`` in L(g)?
* :func:`is_prefix` -- is there a ``z`` with ``data + z`` in L(g)?
* :class:`EarleyRecognizer` -- the same questions asked incrementally, one byte at a time,
  plus :meth:`EarleyRecognizer.allowed_bytes` (the exact set of bytes that keep the prefix viable).

**How it works.**
The recognizer runs on the integer view of :class:`~formalgram.grammar.Grammar`
(terminals are byte sets; terminal ``t`` matches byte ``b`` when ``(masks[t] >> b) & 1``).

1. **Pruning.**  Rules that mention a non-generating symbol (a nonterminal deriving no
   string, or a terminal whose byte set is empty) can never be completed; they are dropped
   before anything else.  After pruning, *every* symbol occurring in a kept rule derives some
   byte string.  This makes viability exact: an Earley set is non-empty exactly when the
   prefix read so far can still be completed to a member of L(g) (see the invariants below).
2. **Dotted rules** ("LR(0) items") of the pruned grammar get dense ids ``lr``; rule ``r`` with
   right-hand side length ``k`` owns ids ``base[r] .. base[r] + k`` (dot before symbol 0 ... dot at
   the end), so advancing the dot is ``lr + 1``.
3. **Items** are packed ints ``item = origin * n_lr + lr``; advancing the dot of an item is again
   ``item + 1``, its origin is ``item // n_lr`` and its dotted rule ``item % n_lr``.
4. **Nullable completion** follows Aycock and Horspool (2002): when an item waits for a nullable
   nonterminal ``B``, the item with the dot moved over ``B`` is added at once.  Hence a completed
   item whose origin is the current position never needs to be completed explicitly.
5. **Prediction** adds the dotted rules of a nonterminal with the dot at 0 (``first_lr``) the
   first time the set waits for it; their own predictions and nullable advances follow as
   they are processed, so a set costs what it holds, even on long unit chains.

Invariants, for Earley set ``i`` after reading ``w = data[:i]``:

* (soundness) item ``(A -> α . β, j)`` is in set ``i`` only if ``S =>* w[:j] A γ`` for some ``γ`` and
  ``α =>* w[j:i]``;
* (completeness) every such item whose rule survives pruning is in set ``i``;
* (viability) since every symbol of a kept rule is generating, ``β`` and ``γ`` derive byte
  strings, so set ``i`` is non-empty **iff** ``w`` is a prefix of some member of L(g);
* (acceptance) ``w`` is in L(g) iff set ``i`` holds a completed item of the start symbol with
  origin 0.

Each set is closed (saturated) before the next byte is read and never changes afterwards, so
copies of a recognizer can share all finished sets.

**Cost and budget.**
With ``|R|`` dotted rules, set ``i`` holds at most ``(i + 1) * |R|`` items, and completing an
item walks the items of its origin's set that wait for its left-hand side.  Reading ``n``
bytes therefore costs O(n^3) steps on ambiguous grammars, O(n^2) on unambiguous ones and
O(n) on LR(k) grammars without right recursion (Earley 1970), each with a grammar factor of
at most ``|R|^2``; a right-recursive rule such as ``S -> a S`` costs O(n^2) here (Leo's 1991
refinement, which would make every LR-regular grammar linear, is not implemented).  Building
the tables is linear in the size of the grammar, and a set costs what it holds: a unit chain
of ``k`` rules costs O(k) per byte, not O(k^2).

Every recognizer has a work budget: :data:`DEFAULT_BUDGET` steps unless told otherwise
(``budget=None`` removes it), one step per kernel item, per item processed and per waiting
item visited by a completion, counted from the last :meth:`EarleyRecognizer.reset`.  When
it runs out the byte being read raises :class:`~formalgram.errors.GrammarTooLarge` and is
not consumed.  The default is spent in a few seconds of pure Python: about 400 bytes of a
highly ambiguous grammar (``S -> S S | x``), about 3,000 of a right-recursive one, millions
of bytes of an LR grammar with small sets.  Memory grows with the work (only items are
stored), so the budget bounds it too.

References
----------
J. Earley, "An efficient context-free parsing algorithm", CACM 13(2), 1970.
doi:10.1145/362007.362035.
J. Aycock and R. N. Horspool, "Practical Earley parsing", The Computer Journal 45(6), 2002.
doi:10.1093/comjnl/45.6.620.
"""

from __future__ import annotations

from typing import Final, final

from formalgram.analysis import generating, generating_rules, nullable
from formalgram.byteset import ByteSet
from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar

__all__ = ["DEFAULT_BUDGET", "EarleyRecognizer", "EarleyTables", "accepts", "earley_tables", "is_prefix"]

DEFAULT_BUDGET: Final = 10_000_000
"""Default work budget of a recognizer, in steps (kernel items, items processed, waiting items
visited): a few seconds of pure Python."""

# next-symbol value of a dotted rule whose dot is at the end (nonterminal ids are smaller)
_DONE: Final = 1 << 40


@final
class EarleyTables:
    """Per-grammar tables shared by every recognizer of the same grammar object.

    Attributes
    ----------
    n_lr : int
        Number of dotted rules of the pruned grammar.
    next_sym : list[int]
        Dotted rule -> the symbol after the dot (``>= 0`` nonterminal, ``< 0`` terminal ``~t``),
        or a sentinel larger than every nonterminal id when the dot is at the end.
    lhs : list[int]
        Dotted rule -> left-hand side nonterminal.
    nullable : list[bool]
        Nonterminal -> derives the empty string.
    generating : list[bool]
        Nonterminal -> derives at least one byte string.
    first_lr : list[list[int]]
        Nonterminal ``B`` -> the dotted rules of ``B`` with the dot at 0 (what predicting ``B``
        adds, with origin the current position).
    masks : list[int]
        Terminal id -> byte mask (as in the grammar).
    start : int
        Start nonterminal id.

    Notes
    -----
    Built in O(|G|) time and space (the analyses of :mod:`formalgram.analysis` and one pass
    over the rules); raises nothing.  Build them with :func:`earley_tables`, which caches.

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> t = EarleyTables(parse_gbnf('root ::= "a" root | ""'))
    >>> t.n_lr, t.first_lr, t.nullable
    (4, [[0, 3]], [True])
    """

    __slots__ = (
        "first_lr",
        "generating",
        "lhs",
        "masks",
        "n_lr",
        "next_sym",
        "nullable",
        "start",
    )

    def __init__(self, g: Grammar) -> None:
        n = len(g.names)
        masks = list(g.masks)
        rules = g.rules
        # -- 1. rules that derive some string (the others take part in no parse) ----------
        gen = generating(g)
        generating_ids = [a in gen for a in range(n)]
        kept = [rules[ri] for ri in generating_rules(g, gen)]
        # -- 2. nullable nonterminals (all their ε-derivations use kept rules) -----------
        null = nullable(g)
        nullable_ids = [a in null for a in range(n)]
        # -- 3. dotted rules -----------------------------------------------------------
        next_sym: list[int] = []
        lhs_of: list[int] = []
        first_lr: list[list[int]] = [[] for _ in range(n)]
        for lhs, rhs in kept:
            first_lr[lhs].append(len(next_sym))
            for s in rhs:
                next_sym.append(s)
                lhs_of.append(lhs)
            next_sym.append(_DONE)
            lhs_of.append(lhs)
        self.n_lr: int = len(next_sym)
        self.next_sym: list[int] = next_sym
        self.lhs: list[int] = lhs_of
        self.nullable: list[bool] = nullable_ids
        self.generating: list[bool] = generating_ids
        self.first_lr: list[list[int]] = first_lr
        self.masks: list[int] = masks
        self.start: int = g.start_id


_CACHE: dict[int, tuple[Grammar, EarleyTables]] = {}
_CACHE_SIZE: Final = 32


def earley_tables(g: Grammar) -> EarleyTables:
    """The (cached) :class:`EarleyTables` of ``g``.

    The cache is keyed by object identity (equal grammars may intern symbols differently) and
    holds the last few grammars only.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    EarleyTables

    Notes
    -----
    O(|G|) the first time (:class:`EarleyTables`), O(1) afterwards; raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.single(97), S]), Production(S, [])], "S")
    >>> t = earley_tables(g)
    >>> t is earley_tables(g), t.n_lr, t.nullable
    (True, 4, [True])
    """
    hit = _CACHE.get(id(g))
    if hit is not None and hit[0] is g:
        return hit[1]
    tables = EarleyTables(g)
    if len(_CACHE) >= _CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]
    _CACHE[id(g)] = (g, tables)
    return tables


@final
class _Column:
    """One closed Earley set.

    ``waiting`` maps a nonterminal to the items whose dot stands before it (used when an item
    with this set's position as origin completes); ``scan`` maps a terminal id to the items whose
    dot stands before it; ``accepting`` says whether the start symbol completed from origin 0.
    """

    __slots__ = ("accepting", "scan", "waiting")

    def __init__(self, waiting: dict[int, list[int]], scan: dict[int, list[int]], accepting: bool) -> None:
        self.waiting = waiting
        self.scan = scan
        self.accepting = accepting


def _close(
    t: EarleyTables, columns: list[_Column], pos: int, kernel: list[int], spent: int, budget: int
) -> tuple[_Column, int]:
    """Saturate the Earley set at position ``pos`` from its ``kernel`` items.

    ``columns`` holds the closed sets ``0 .. pos - 1`` (completions look up origins there).
    Returns the set and the steps of work it took (one per kernel item, item processed and
    waiting item visited by a completion).

    Raises
    ------
    GrammarTooLarge
        As soon as ``spent`` plus this work passes ``budget`` (checked at every item; a
        negative ``budget`` means no limit).
    """
    n_lr = t.n_lr
    next_sym = t.next_sym
    nullable = t.nullable
    first_lr = t.first_lr
    lhs_of = t.lhs
    start = t.start
    base = pos * n_lr
    seen: set[int] = set(kernel)
    todo: list[int] = list(seen)
    waiting: dict[int, list[int]] = {}
    scan: dict[int, list[int]] = {}
    predicted: set[int] = set()
    accepting = False
    work = len(kernel)
    limit = (1 << 62) if budget < 0 else budget - spent
    while todo:
        item = todo.pop()
        work += 1
        if work > limit:
            where = f"while reading byte {pos}" if pos else "before reading any byte"
            raise GrammarTooLarge("Earley recognition", budget, f"more than {budget} steps of work {where}")
        lr = item % n_lr
        s = next_sym[lr]
        if s == _DONE:
            origin = item // n_lr
            a = lhs_of[lr]
            if origin == 0 and a == start:
                accepting = True
            if origin == pos:
                # covered by the nullable advance (Aycock-Horspool): ``a`` is nullable and
                # every item of this set waiting for ``a`` was advanced when it was added.
                continue
            above = columns[origin].waiting.get(a)
            if above is None:
                continue
            work += len(above)
            for w in above:
                nxt = w + 1
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        elif s >= 0:
            lst = waiting.get(s)
            if lst is None:
                waiting[s] = [item]
            else:
                lst.append(item)
            if s not in predicted:
                predicted.add(s)
                for lr2 in first_lr[s]:
                    nxt = base + lr2
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            if nullable[s]:
                nxt = item + 1
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        else:
            lst = scan.get(~s)
            if lst is None:
                scan[~s] = [item]
            else:
                lst.append(item)
    return _Column(waiting, scan, accepting), work


@final
class EarleyRecognizer:
    """Incremental Earley recognizer of L(g) over bytes.

    The state is the prefix read so far (always a viable prefix of L(g), or the empty prefix
    when L(g) is empty).  :meth:`feed` refuses a byte that would make the prefix non-viable and
    leaves the state unchanged.

    Parameters
    ----------
    g : Grammar
        The grammar.  Per-grammar tables are computed once and cached.
    budget : int or None, keyword-only
        Work budget in steps, counted from the last :meth:`reset` (default
        :data:`DEFAULT_BUDGET`; ``None``: unbounded).

    Raises
    ------
    GrammarTooLarge
        When even the first Earley set does not fit the budget.
    ValueError
        When ``budget`` is negative.

    Notes
    -----
    Exactness: rules with a non-generating symbol are pruned first, so the current Earley set is
    non-empty exactly when the prefix can be completed (see the module docstring).  Finished
    Earley sets are immutable, so :meth:`copy` is O(position) and copies share them.

    Reading ``n`` bytes takes O(n^3) steps on ambiguous grammars, O(n^2) on unambiguous ones and
    O(n) on LR(k) grammars without right recursion, times a grammar factor of at most ``|R|^2``
    (``|R|`` dotted rules); the budget stops it (see the module docstring).

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production, parse_gbnf
    >>> S = Nonterminal("S")
    >>> a, b = ByteSet.single(97), ByteSet.single(98)
    >>> g = Grammar([Production(S, [a, S, b]), Production(S, [])], "S")
    >>> r = EarleyRecognizer(g)
    >>> r.feed_bytes(b"aab"), r.is_accepting(), bytes(r.allowed_bytes())
    (True, False, b'b')
    >>> r.feed(ord("a"))
    False
    >>> slow = EarleyRecognizer(parse_gbnf('root ::= root root | "x"'), budget=5_000)
    >>> slow.feed_bytes(b"x" * 100)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: Earley recognition exceeded its budget of 5000 (more than 5000 steps of work while reading byte 29)
    """

    __slots__ = ("_budget", "_columns", "_grammar", "_spent", "_tables")

    def __init__(
        self, g: Grammar, *, budget: int | None = DEFAULT_BUDGET, _columns: list[_Column] | None = None
    ) -> None:
        # ``_columns`` is private: :meth:`copy` passes the shared finished sets (mypyc classes
        # cannot be created with ``__new__`` alone).
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0 or None, got {budget}")
        self._grammar = g
        self._tables = earley_tables(g)
        self._budget = -1 if budget is None else budget
        self._spent = 0
        self._columns: list[_Column] = []
        if _columns is None:
            self.reset()
        else:
            self._columns = _columns

    @property
    def grammar(self) -> Grammar:
        """The grammar being recognized."""
        return self._grammar

    @property
    def position(self) -> int:
        """Number of bytes consumed so far."""
        return len(self._columns) - 1

    @property
    def budget(self) -> int | None:
        """The work budget (steps since the last :meth:`reset`), None for no limit."""
        return None if self._budget < 0 else self._budget

    @property
    def work(self) -> int:
        """Steps of work spent since the last :meth:`reset` (all the bytes read so far)."""
        return self._spent

    def reset(self) -> None:
        """Go back to the empty prefix (and a fresh work budget).

        Raises
        ------
        GrammarTooLarge
            When the budget does not cover the first Earley set.

        Notes
        -----
        Builds the first Earley set: O(|R|) steps at most.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> r = EarleyRecognizer(parse_gbnf('root ::= "ab"'))
        >>> r.feed_bytes(b"a"), r.position, r.work
        (True, 1, 5)
        >>> r.reset()
        >>> r.position, r.work
        (0, 2)
        """
        t = self._tables
        self._columns = []
        self._spent = 0
        # origin 0, so an item is just its dotted rule
        kernel = list(t.first_lr[t.start]) if t.generating[t.start] else []
        col, work = _close(t, self._columns, 0, kernel, 0, self._budget)
        self._columns.append(col)
        self._spent = work

    def copy(self) -> EarleyRecognizer:
        """An independent recognizer in the same state (shares the immutable finished sets).

        The copy has the same budget and has spent the same work so far.

        Notes
        -----
        O(position): the finished sets are shared, not copied.  Raises nothing.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> r = EarleyRecognizer(parse_gbnf('root ::= "a" | "ab"'))
        >>> r.feed(ord("a"))
        True
        >>> twin = r.copy()
        >>> twin.feed(ord("b")), twin.is_accepting(), r.position
        (True, True, 1)
        """
        twin = EarleyRecognizer(self._grammar, budget=self.budget, _columns=list(self._columns))
        twin._spent = self._spent
        return twin

    def _advance(self, byte: int) -> _Column | None:
        t = self._tables
        cols = self._columns
        cur = cols[-1]
        masks = t.masks
        kernel: list[int] = []
        for term, items in cur.scan.items():
            if (masks[term] >> byte) & 1:
                for it in items:
                    kernel.append(it + 1)
        if not kernel:
            self._spent += len(cur.scan)
            return None
        col, work = _close(t, cols, len(cols), kernel, self._spent + len(cur.scan), self._budget)
        self._spent += len(cur.scan) + work
        return col

    def feed(self, byte: int) -> bool:
        """Consume one byte.

        Returns
        -------
        bool
            True when the extended prefix is still viable (the byte is consumed); False when no
            completion exists (the byte is refused and the state is unchanged).

        Raises
        ------
        GrammarTooLarge
            When the work budget runs out while the new Earley set is built (the byte is not
            consumed; the state is unchanged).
        ValueError
            If ``byte`` is not in ``0 .. 255``.

        Notes
        -----
        O(size of the current set) to scan, plus the closure of the new set: O(position * |R|)
        items, each completion walking O(position * |R|) waiting items in the worst case.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> r = EarleyRecognizer(parse_gbnf('root ::= "a"+'))
        >>> r.feed(ord("a")), r.feed(ord("b")), r.position
        (True, False, 1)
        """
        if byte < 0 or byte > 255:
            raise ValueError(f"byte value out of range: {byte}")
        col = self._advance(byte)
        if col is None:
            return False
        self._columns.append(col)
        return True

    def feed_bytes(self, data: bytes) -> bool:
        """Consume ``data`` atomically.

        Returns True when every byte was consumed.  When some byte is refused, returns False and
        restores the state from before the call (all or nothing).

        Raises
        ------
        GrammarTooLarge
            When the work budget runs out; the state from before the call is restored first.

        Notes
        -----
        ``len(data)`` calls of :meth:`feed` (see its cost).

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> r = EarleyRecognizer(parse_gbnf('root ::= "ab"'))
        >>> r.feed_bytes(b"ax"), r.position, r.feed_bytes(b"ab"), r.is_accepting()
        (False, 0, True, True)
        """
        mark = len(self._columns)
        for b in data:
            try:
                col = self._advance(b)
            except GrammarTooLarge:
                del self._columns[mark:]
                raise
            if col is None:
                del self._columns[mark:]
                return False
            self._columns.append(col)
        return True

    def is_accepting(self) -> bool:
        """True when the bytes consumed so far form a member of L(g).

        Notes
        -----
        O(1): the current set records whether the start symbol completed from origin 0.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> r = EarleyRecognizer(parse_gbnf('root ::= "ab"'))
        >>> r.is_accepting(), r.feed_bytes(b"ab"), r.is_accepting()
        (False, True, True)
        """
        return self._columns[-1].accepting

    def is_viable(self) -> bool:
        """True when the bytes consumed so far are a prefix of some member of L(g).

        Always True after a successful :meth:`feed`; False only for the empty prefix of a grammar
        whose language is empty.

        Notes
        -----
        O(1).

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> EarleyRecognizer(parse_gbnf('root ::= "a" root')).is_viable()
        False
        """
        # Every refused byte leaves the state unchanged, so a position > 0 was reached through
        # non-empty (hence viable) sets; the empty prefix is viable iff the start generates.
        t = self._tables
        return len(self._columns) > 1 or t.generating[t.start]

    def allowed_bytes(self) -> ByteSet:
        """The bytes ``b`` such that the current prefix followed by ``b`` is still viable.

        Notes
        -----
        O(number of terminals the current set waits for).

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> r = EarleyRecognizer(parse_gbnf('root ::= "a" [bc]'))
        >>> r.feed(ord("a")), bytes(r.allowed_bytes())
        (True, b'bc')
        """
        masks = self._tables.masks
        m = 0
        for term in self._columns[-1].scan:
            m |= masks[term]
        return ByteSet(m)


def accepts(g: Grammar, data: bytes, *, budget: int | None = DEFAULT_BUDGET) -> bool:
    """Whether ``data`` is a member of L(g).

    Parameters
    ----------
    g : Grammar
        The grammar (any grammar: left recursion, nullable rules, cycles, ambiguity are fine).
    data : bytes
        The input.
    budget : int or None, keyword-only
        Work budget in steps (default :data:`DEFAULT_BUDGET`, a few seconds; ``None``:
        unbounded).

    Returns
    -------
    bool
        True iff ``g``'s start symbol derives exactly ``data``.

    Raises
    ------
    GrammarTooLarge
        When the recognition needs more than ``budget`` steps.

    Notes
    -----
    O(n^3) steps in ``n = len(data)`` on ambiguous grammars, O(n^2) on unambiguous ones, O(n)
    on LR(k) grammars without right recursion; O(|G|) to build the grammar's tables once (see
    :class:`EarleyRecognizer` and the module docstring).

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> E = Nonterminal("E")
    >>> x, plus = ByteSet.single(ord("x")), ByteSet.single(ord("+"))
    >>> g = Grammar([Production(E, [E, plus, E]), Production(E, [x])], "E")
    >>> accepts(g, b"x+x+x"), accepts(g, b"x+")
    (True, False)
    >>> accepts(g, b"x+" * 100 + b"x", budget=100_000)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: Earley recognition exceeded its budget of 100000 (more than 100000 steps of work while reading byte 159)
    >>> accepts(g, b"x+" * 30 + b"x", budget=None)
    True
    """
    r = EarleyRecognizer(g, budget=budget)
    return r.feed_bytes(data) and r.is_accepting()


def is_prefix(g: Grammar, data: bytes, *, budget: int | None = DEFAULT_BUDGET) -> bool:
    """Whether some ``z`` makes ``data + z`` a member of L(g) (``z`` may be empty).

    Exact: rules that can never complete (a non-generating symbol) are ignored, so an
    error-free parse that cannot be finished is reported as False.

    Parameters
    ----------
    g : Grammar
        The grammar.
    data : bytes
        The candidate prefix.
    budget : int or None, keyword-only
        As for :func:`accepts`.

    Returns
    -------
    bool
        True iff ``data`` is in Pr(L(g)); False for every input when L(g) is empty.

    Raises
    ------
    GrammarTooLarge
        When the recognition needs more than ``budget`` steps.

    Notes
    -----
    As :func:`accepts`.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.single(97), ByteSet.single(98)])], "S")
    >>> is_prefix(g, b"a"), is_prefix(g, b"b"), is_prefix(g, b"a", budget=5)
    (True, False, True)
    """
    r = EarleyRecognizer(g, budget=budget)
    return r.feed_bytes(data) and r.is_viable()
