"""The immutable grammar model: symbols, productions and :class:`Grammar`.

People use the symbolic API (:class:`Nonterminal`, :class:`~formalgram.byteset.ByteSet`,
:class:`Production`, names as strings).  Algorithms share the interned integer view
exposed by the same object:

* ``g.names``      -- tuple, nonterminal id -> name (ids are ``0 .. n-1``);
* ``g.masks``      -- tuple, terminal id -> 256-bit byte mask (see ByteSet);
* ``g.start_id``   -- id of the start nonterminal;
* ``g.rules``      -- tuple of ``(lhs_id, rhs)`` where ``rhs`` is a tuple of ints: a value
  ``s >= 0`` is nonterminal ``s``, a value ``s < 0`` is terminal ``~s`` (i.e. ``-s - 1``);
* ``g.rules_by_lhs`` -- tuple, nonterminal id -> tuple of indices into ``g.rules``.

Both views describe the same grammar; neither can be mutated after construction.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar, final

from formalgram.byteset import ByteSet
from formalgram.errors import GrammarError

__all__ = ["Grammar", "IdRule", "Nonterminal", "Production", "Symbol", "fresh_name"]


@final
class Nonterminal:
    """A nonterminal symbol, identified by its name.

    Never equal to a plain ``str``: ``Nonterminal("a") != "a"``.

    Examples
    --------
    >>> Nonterminal("expr") == Nonterminal("expr")
    True
    """

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise GrammarError(f"nonterminal name must be a non-empty string, got {name!r}")
        self._name = name

    @property
    def name(self) -> str:
        """The nonterminal's name."""
        return self._name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Nonterminal):
            return NotImplemented
        return self._name == other._name

    def __hash__(self) -> int:
        return hash(("Nonterminal", self._name))

    def __repr__(self) -> str:
        return f"Nonterminal({self._name!r})"


Symbol = Nonterminal | ByteSet


@final
class Production:
    """A production ``lhs -> rhs`` with ``rhs`` a (possibly empty) tuple of symbols.

    Equality and hashing respect the order of the right-hand side.
    """

    __slots__ = ("_lhs", "_rhs")

    def __init__(self, lhs: Nonterminal, rhs: Sequence[Symbol]) -> None:
        if not isinstance(lhs, Nonterminal):
            raise GrammarError(f"production lhs must be a Nonterminal, got {lhs!r}")
        items = tuple(rhs)
        for s in items:
            if not isinstance(s, (Nonterminal, ByteSet)):
                raise GrammarError(f"production rhs items must be Nonterminal or ByteSet, got {s!r}")
        self._lhs = lhs
        self._rhs = items

    @property
    def lhs(self) -> Nonterminal:
        """The left-hand side."""
        return self._lhs

    @property
    def rhs(self) -> tuple[Symbol, ...]:
        """The right-hand side (empty tuple for an epsilon production)."""
        return self._rhs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Production):
            return NotImplemented
        return self._lhs == other._lhs and self._rhs == other._rhs

    def __hash__(self) -> int:
        return hash(("Production", self._lhs, self._rhs))

    def __repr__(self) -> str:
        body = " ".join(s.name if isinstance(s, Nonterminal) else s.describe() for s in self._rhs)
        return f"Production({self._lhs.name} -> {body or 'ε'})"


IdRule = tuple[int, tuple[int, ...]]


@final
class Grammar:
    """An immutable context-free grammar over bytes.

    Build one from symbolic productions with ``Grammar(productions, start)``, from the
    integer view with :meth:`Grammar.from_ids`, or from text with
    :func:`formalgram.parse_gbnf`.

    Parameters
    ----------
    productions : iterable of Production
        The rules.  Duplicates are dropped; order of first appearance is kept.
    start : str or Nonterminal
        The start symbol.  It need not have rules (the language is then empty).
    extra_nonterminals : iterable of str, optional
        Names to intern even when no production mentions them.

    Raises
    ------
    GrammarError
        If an argument has the wrong type.

    Notes
    -----
    Two grammars are equal when they have the same start name and the same *set* of
    productions; rule order and interning order do not matter.

    Examples
    --------
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.single(97), S]), Production(S, [])], "S")
    >>> len(g.productions)
    2
    """

    __slots__ = ("_by_lhs", "_hash", "_index", "_key", "_masks", "_names", "_rules", "_start")

    def __init__(
        self,
        productions: Iterable[Production],
        start: str | Nonterminal,
        extra_nonterminals: Iterable[str] = (),
    ) -> None:
        start_name = start.name if isinstance(start, Nonterminal) else start
        if not isinstance(start_name, str) or not start_name:
            raise GrammarError(f"start symbol must be a non-empty name, got {start!r}")
        names: list[str] = [start_name]
        index: dict[str, int] = {start_name: 0}
        masks: list[int] = []
        mindex: dict[int, int] = {}
        rules: list[IdRule] = []
        for p in productions:
            if not isinstance(p, Production):
                raise GrammarError(f"expected a Production, got {p!r}")
            lhs = interned(p.lhs.name, index, names)
            rhs: list[int] = []
            for s in p.rhs:
                if isinstance(s, Nonterminal):
                    rhs.append(interned(s.name, index, names))
                else:
                    rhs.append(~interned(s.mask, mindex, masks))
            rules.append((lhs, tuple(rhs)))
        for extra in extra_nonterminals:
            interned(extra, index, names)
        self._init_ids(tuple(names), tuple(masks), 0, rules)

    @staticmethod
    def from_ids(
        names: Sequence[str], masks: Sequence[int], start_id: int, rules: Iterable[IdRule]
    ) -> Grammar:
        """Build a grammar directly from the interned integer view.

        Parameters
        ----------
        names : sequence of str
            Nonterminal id -> unique name.
        masks : sequence of int
            Terminal id -> 256-bit byte mask.  Duplicate masks are merged.
        start_id : int
            Id of the start symbol.
        rules : iterable of (lhs_id, rhs)
            ``rhs`` holds ``s >= 0`` for nonterminal ``s`` and ``~t`` for terminal ``t``.

        Raises
        ------
        GrammarError
            On duplicate names or ids out of range.

        Notes
        -----
        O(total rule length).
        """
        g = Grammar((), names[start_id] if 0 <= start_id < len(names) else "?")
        n = len(names)
        if len(set(names)) != n:
            raise GrammarError("duplicate nonterminal names")
        if not 0 <= start_id < n:
            raise GrammarError(f"start id {start_id} out of range")
        # merge equal masks so that terminal ids are canonical
        canon: list[int] = []
        remap: list[int] = []
        seen: dict[int, int] = {}
        for m in masks:
            if m < 0 or m >> 256:
                raise GrammarError(f"terminal mask out of range: {m!r}")
            remap.append(interned(m, seen, canon))
        nt_count = n
        t_count = len(remap)
        fixed: list[IdRule] = []
        for lhs, rhs in rules:
            if not 0 <= lhs < nt_count:
                raise GrammarError(f"rule lhs id {lhs} out of range")
            out: list[int] = []
            for s in rhs:
                if s >= 0:
                    if s >= nt_count:
                        raise GrammarError(f"nonterminal id {s} out of range")
                    out.append(s)
                else:
                    t = ~s
                    if t >= t_count:
                        raise GrammarError(f"terminal id {t} out of range")
                    out.append(~remap[t])
            fixed.append((lhs, tuple(out)))
        g._init_ids(tuple(names), tuple(canon), start_id, fixed)
        return g

    @staticmethod
    def _trusted(
        names: Sequence[str], masks: Sequence[int], start_id: int, rules: Iterable[IdRule], *, unique: bool
    ) -> Grammar:
        """A grammar over the integer view that the library itself built, not validated again.

        For the transforms only: the caller guarantees what :meth:`from_ids` checks (unique
        names, ``start_id`` and every rule id in range) and that ``masks`` are distinct (so
        no terminal is merged); with ``unique`` it also guarantees that no rule repeats (no
        de-duplication pass).  The result is the grammar :meth:`from_ids` would build from
        the same arguments, and as immutable.

        Notes
        -----
        O(number of rules) (plus one hash per rule without ``unique``), against
        O(total rule length) checks and copies for :meth:`from_ids`.
        """
        g = Grammar((), names[start_id])
        g._init_ids(tuple(names), tuple(masks), start_id, rules, unique)
        return g

    def _init_ids(
        self,
        names: tuple[str, ...],
        masks: tuple[int, ...],
        start: int,
        rules: Iterable[IdRule],
        unique: bool = False,
    ) -> None:
        by_lhs: list[list[int]] = [[] for _ in names]
        uniq: tuple[IdRule, ...]
        if unique:
            uniq = tuple(rules)
            for i, r in enumerate(uniq):
                by_lhs[r[0]].append(i)
        else:
            seen: set[IdRule] = set()
            kept: list[IdRule] = []
            for r in rules:
                if r in seen:
                    continue
                seen.add(r)
                by_lhs[r[0]].append(len(kept))
                kept.append(r)
            uniq = tuple(kept)
        self._names = names
        self._masks = masks
        self._start = start
        self._rules: tuple[IdRule, ...] = uniq
        self._by_lhs: tuple[tuple[int, ...], ...] = tuple(tuple(x) for x in by_lhs)
        self._index: dict[str, int] = {name: i for i, name in enumerate(names)}
        self._key: frozenset[tuple[str, tuple[object, ...]]] | None = None
        self._hash = -1

    # -- integer view ---------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """Nonterminal id -> name."""
        return self._names

    @property
    def masks(self) -> tuple[int, ...]:
        """Terminal id -> 256-bit byte mask."""
        return self._masks

    @property
    def start_id(self) -> int:
        """Id of the start nonterminal."""
        return self._start

    @property
    def rules(self) -> tuple[IdRule, ...]:
        """All rules as ``(lhs_id, rhs_ids)``; see the module docstring for the encoding."""
        return self._rules

    @property
    def rules_by_lhs(self) -> tuple[tuple[int, ...], ...]:
        """Nonterminal id -> indices of its rules in :attr:`rules`."""
        return self._by_lhs

    def id_of(self, name: str) -> int:
        """The id of nonterminal ``name``; raises KeyError if unknown."""
        return self._index[name]

    def has_nonterminal(self, name: str) -> bool:
        """True when ``name`` is a nonterminal of this grammar."""
        return name in self._index

    # -- symbolic view --------------------------------------------------------------------
    @property
    def start(self) -> Nonterminal:
        """The start symbol."""
        return Nonterminal(self._names[self._start])

    @property
    def nonterminals(self) -> tuple[Nonterminal, ...]:
        """All nonterminals, in id order (the start symbol need not be first)."""
        return tuple(Nonterminal(n) for n in self._names)

    @property
    def terminals(self) -> tuple[ByteSet, ...]:
        """All distinct terminals (byte sets), in id order."""
        return tuple(ByteSet(m) for m in self._masks)

    def symbol(self, s: int) -> Symbol:
        """The symbolic form of an encoded rhs item."""
        if s >= 0:
            return Nonterminal(self._names[s])
        return ByteSet(self._masks[~s])

    @property
    def productions(self) -> tuple[Production, ...]:
        """All productions, symbolic."""
        return tuple(self._production(r) for r in self._rules)

    def _production(self, rule: IdRule) -> Production:
        return Production(Nonterminal(self._names[rule[0]]), [self.symbol(s) for s in rule[1]])

    def rules_for(self, name: str | Nonterminal) -> tuple[Production, ...]:
        """The productions whose left-hand side is ``name``; raises KeyError if unknown."""
        key = name.name if isinstance(name, Nonterminal) else name
        i = self._index[key]
        return tuple(self._production(self._rules[r]) for r in self._by_lhs[i])

    def stats(self) -> dict[str, int]:
        """Size statistics: nonterminals, productions, terminals, total rhs length, max rhs length."""
        lengths = [len(r[1]) for r in self._rules]
        return {
            "nonterminals": len(self._names),
            "productions": len(self._rules),
            "terminals": len(self._masks),
            "size": sum(lengths) + len(lengths),
            "max_rhs": max(lengths, default=0),
        }

    def with_start(self, name: str) -> Grammar:
        """The same rules with another start symbol; raises KeyError if ``name`` is unknown."""
        return Grammar.from_ids(self._names, self._masks, self._index[name], self._rules)

    # -- thin wrappers over the free functions (one algorithm per module) ---------------------
    def to_gbnf(self, *, portable_names: bool = False) -> str:
        """GBNF text of this grammar; see :func:`formalgram.syntax.printer.to_gbnf`."""
        from formalgram.syntax.printer import to_gbnf

        return to_gbnf(self, portable_names=portable_names)

    def accepts(self, data: bytes) -> bool:
        """Whether ``data`` is in the language; see :func:`formalgram.accepts`."""
        from formalgram.recognize.earley import accepts

        return accepts(self, data)

    def is_prefix(self, data: bytes) -> bool:
        """Whether ``data`` extends to a member; see :func:`formalgram.is_prefix`."""
        from formalgram.recognize.earley import is_prefix

        return is_prefix(self, data)

    def unreachable(self) -> tuple[str, ...]:
        """Names of nonterminals with rules that the start cannot reach; see :func:`formalgram.unreachable`."""
        from formalgram.analysis import unreachable

        return tuple(self._names[i] for i in sorted(unreachable(self)))

    def remove_useless(self) -> Grammar:
        """See :func:`formalgram.remove_useless`."""
        from formalgram.transforms.useless import remove_useless

        return remove_useless(self)

    def remove_epsilon(self) -> Grammar:
        """See :func:`formalgram.remove_epsilon`."""
        from formalgram.transforms.epsilon import remove_epsilon

        return remove_epsilon(self)

    def remove_unit(self) -> Grammar:
        """See :func:`formalgram.remove_unit`."""
        from formalgram.transforms.unit import remove_unit

        return remove_unit(self)

    def remove_left_recursion(self) -> Grammar:
        """See :func:`formalgram.remove_left_recursion`."""
        from formalgram.transforms.left_recursion import remove_left_recursion

        return remove_left_recursion(self)

    def to_gnf(self, *, budget: int = 200_000) -> Grammar:
        """See :func:`formalgram.to_gnf`."""
        from formalgram.transforms.gnf import to_gnf

        return to_gnf(self, budget=budget)

    def is_gnf(self) -> bool:
        """See :func:`formalgram.is_gnf`."""
        from formalgram.transforms.gnf_check import is_gnf

        return is_gnf(self)

    def byte_classes(self) -> tuple[ByteSet, ...]:
        """See :func:`formalgram.byte_classes`."""
        from formalgram.transforms.byte_classes import byte_classes

        return byte_classes(self)

    # -- identity -------------------------------------------------------------------------
    def _structural_key(self) -> frozenset[tuple[str, tuple[object, ...]]]:
        if self._key is None:
            names = self._names
            masks = self._masks
            items: list[tuple[str, tuple[object, ...]]] = []
            for lhs, rhs in self._rules:
                body: list[object] = []
                for s in rhs:
                    body.append(names[s] if s >= 0 else masks[~s])
                items.append((names[lhs], tuple(body)))
            self._key = frozenset(items)
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Grammar):
            return NotImplemented
        if self._names[self._start] != other._names[other._start]:
            return False
        return self._structural_key() == other._structural_key()

    def __hash__(self) -> int:
        if self._hash == -1:
            self._hash = hash(("Grammar", self._names[self._start], self._structural_key()))
        return self._hash

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<Grammar start={self._names[self._start]!r} nonterminals={s['nonterminals']} "
            f"productions={s['productions']} terminals={s['terminals']}>"
        )

    def __getstate__(self) -> object:
        # Grammars pickle by value (used by worker processes, never for caches on disk).
        return (self._names, self._masks, self._start, self._rules)

    def __setstate__(self, state: tuple[tuple[str, ...], tuple[int, ...], int, tuple[IdRule, ...]]) -> None:
        names, masks, start, rules = state
        self._init_ids(names, masks, start, rules)


_K = TypeVar("_K", bound=Hashable)


def interned(key: _K, index: dict[_K, int], items: list[_K]) -> int:
    """The id of ``key`` in the interning ``index`` / ``items``, appended when new.

    Parameters
    ----------
    key : hashable
    index : dict
        Key -> id, for the keys in ``items``.
    items : list
        The keys in id order.

    Returns
    -------
    int

    Notes
    -----
    O(1) expected.  A module-level function rather than one nested in its caller: compiled
    with mypyc, a nested function and its caller's closure refer to each other, and each
    call would leave them (and everything the closure holds) to the cyclic collector.

    Examples
    --------
    >>> index, items = {}, []
    >>> interned("a", index, items), interned("b", index, items), interned("a", index, items)
    (0, 1, 0)
    >>> items
    ['a', 'b']
    """
    i = index.get(key)
    if i is None:
        i = len(items)
        index[key] = i
        items.append(key)
    return i


def fresh_name(base: str, taken: set[str] | dict[str, int], counters: dict[str, int] | None = None) -> str:
    """A name derived from ``base`` that is not in ``taken``.

    Parameters
    ----------
    base : str
        The wanted name.
    taken : set or dict of str
        The names in use.
    counters : dict of str to int, optional
        Per-base suffix counters kept by the caller between calls.  With it, a caller that
        adds every returned name to ``taken`` (and never removes one) gets the same names as
        without it, in amortized constant time per call instead of time linear in the number
        of names already derived from ``base``.

    Returns
    -------
    str
        ``base`` itself when free, else the first of ``base_1``, ``base_2``, ... not in
        ``taken``.

    Notes
    -----
    Without ``counters`` a call costs one set lookup per suffix tried, so deriving ``k``
    names from one base costs O(k^2); with ``counters`` it costs O(k) in total.

    Examples
    --------
    >>> taken = {"x", "x_1"}
    >>> fresh_name("x", taken)
    'x_2'
    >>> counters: dict[str, int] = {}
    >>> names = []
    >>> for _ in range(3):
    ...     names.append(fresh_name("y", taken, counters))
    ...     taken.add(names[-1])
    >>> names
    ['y', 'y_1', 'y_2']
    """
    if base not in taken:
        return base
    i = 1 if counters is None else counters.get(base, 1)
    while f"{base}_{i}" in taken:
        i += 1
    if counters is not None:
        counters[base] = i + 1
    return f"{base}_{i}"
