"""Token displacements over a GNF grammar (CFGzip, Algorithm 1), computed by lazy subset construction.

Let ``G`` be a trimmed grammar in Greibach normal form and ``P`` its one-state PDA
(:class:`formalgram.pda.PDA`, whose transition table and byte classes the search uses:
reading byte ``c`` with ``A`` on top pops ``A`` and pushes ``B1..Bn`` for each rule
``A -> a B1..Bn`` with ``c`` in ``a``).  The *displacement* of a byte string ``t`` is the
set of pairs ``(σ_in, σ_out)`` such that ``P``, started on any stack ``σ_in·γ``, can read ``t``
by popping exactly the symbols of ``σ_in`` from the original stack (top first) and end with
``σ_out·γ``.  Equal displacements imply syntactic congruence (``proofs/congruence.md``).

The search follows every path of Algorithm 1 at once:

* the first byte pops an arbitrary symbol ``A`` (``σ_in = A``) and pushes the tail of a rule;
* later bytes pop the top of ``σ_out``;
* when ``σ_out`` is empty the next byte must pop the symbol ``Z`` that lay below the
  original ``σ_in`` (a *backtrack*): ``Z`` is appended to ``σ_in``, restricted to symbols that
  can lie directly below ``last``, the symbol whose expansion emptied ``σ_out``, and below the
  previous consumed symbol (the stack-adjacency relation; ``proofs/stack_adjacency.md``).

All paths are kept in one structure: the set of strings ``σ_out · # · reverse(σ_in)`` as a
canonical hash-consed trie (:mod:`~formalgram_cfgzip.search.trie`, which this search extends:
a DAG with shared subtries, equal sets equal node ids).  A step only rewrites the root of the trie
(pop the top symbol, push a rule tail in front of the shared rest), so its cost depends on
the number of distinct *top* symbols, not on the number of stacks, which can be exponential
(a token such as ``"))))"`` closes many combinations of contexts).  When ``σ_out`` becomes
empty the separator is labelled with ``last``, or rather with the first symbol that has the
same set of possible symbols below it (the label serves only to look that set up, so symbols
with equal sets share a label; :meth:`DisplacementSearch.key_of` drops labels anyway).
The backtrack below one separator edge, for one byte class, is memoised: sets that share
the edge share its result.  Equal sets are equal node ids, so the
transition ``(trie, byte class) -> trie`` is memoised: the search is a lazily built
deterministic automaton over byte classes, and every distinct (trie, byte class) pair is
expanded once however many tokens share it.

"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from formalgram.adjacency import _members, below_bits
from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.pda import PDA
from formalgram_cfgzip.search.memory import current_rss
from formalgram_cfgzip.search.trie import DEAD, EPS, START, CanonicalKey, Edge, SymbolTrie

__all__ = ["EXPANSION_WORK", "DisplacementSearch"]

_SEP = -1  # separator between σ_out and reverse(σ_in) while σ_out is not empty
EXPANSION_WORK = 40  # fixed cost of one step, in scanned stack tops (see DisplacementSearch.work)


def _sep(last: int) -> int:
    """Separator symbol recording that ``σ_out`` was emptied by popping ``last``."""
    return -(last + 2)


def _add(groups: dict[int, list[int]], sym: int, child: int) -> None:
    """Append ``child`` to the list of ``sym`` in ``groups``."""
    lst = groups.get(sym)
    if lst is None:
        groups[sym] = [child]
    else:
        lst.append(child)


class DisplacementSearch(SymbolTrie):
    """Lazily determinised displacement automaton of a GNF grammar over its byte classes.

    A state of the automaton is a set of strings ``σ_out · # · reverse(σ_in)`` stored as a
    canonical hash-consed trie (node ids of the :class:`~formalgram_cfgzip.search.trie.SymbolTrie`
    it extends; equal sets have equal ids; ``DEAD`` when no path survives, ``START`` before
    the first byte).  See the module
    docstring for the search itself.

    Parameters
    ----------
    gnf : Grammar
        A trimmed grammar in Greibach normal form
        (:func:`~formalgram.transforms.gnf_check.gnf_violation`); the empty rule of the start plays
        no part, and rules that derive no string are left out as the PDA leaves them out.
    max_states : int
        Largest number of distinct top symbols of one trie; exceeding it raises GrammarTooLarge.
    max_cells : int
        Largest number of trie nodes plus memo entries.
    max_work : int or None
        Largest amount of work (see ``work`` below); exceeding it raises GrammarTooLarge.
        A deterministic measure, used to bound a trial search.
    memory_budget : int or None
        See the attribute.

    Attributes
    ----------
    pda : PDA
        The grammar's one-state PDA (transition table and byte classes).
    byte_class : bytes
        Byte value -> byte class (``pda.byte_class_of``).
    num_byte_classes : int
        Number of byte classes.
    expansions : int
        Steps computed so far (memo misses), summed over resets.
    work : int
        Deterministic cost estimate of those steps: the stack tops (root edges) they scanned
        plus ``EXPANSION_WORK`` per step (the ratio of the two costs, measured in CPU time).
    memory_budget : int or None
        Bytes the search may add to the process's resident memory, counted from when this
        object was created (memory the process already held -- a model, other caches --
        does not count); checked periodically, exceeding it raises GrammarTooLarge.

    Raises
    ------
    GrammarError
        If ``gnf`` is not in Greibach normal form.

    Notes
    -----
    Building costs what :meth:`PDA.from_gnf <formalgram.pda.PDA.from_gnf>` and
    :func:`~formalgram.adjacency.below_bits` cost (the sets below a symbol are built when first used); see :meth:`step` for a step.

    Examples
    --------
    >>> from formalgram import Grammar, Production, Nonterminal, ByteSet
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.from_bytes(b"a"), S]),
    ...              Production(S, [ByteSet.from_bytes(b"b")])], "S")
    >>> d = DisplacementSearch(g)
    >>> d.key_of(d.run(b"aa")) == d.key_of(d.run(b"a"))
    True
    """

    def __init__(
        self,
        gnf: Grammar,
        *,
        max_states: int = 200_000,
        max_cells: int = 40_000_000,
        max_work: int | None = None,
        memory_budget: int | None = None,
    ) -> None:
        self.gnf = gnf
        self.max_states = max_states
        self.max_cells = max_cells
        self.memory_budget = memory_budget
        # resident memory when the search was created: the budget counts growth from here
        # (not reset by reset(), which frees tables the allocator may keep)
        self._rss_base = current_rss() if memory_budget is not None else 0
        self.max_work = max_work
        self.expansions = 0  # steps computed (memo misses), summed over resets
        self.work = 0  # stack tops scanned by those steps, plus EXPANSION_WORK per step
        # the PDA checks the GNF form and owns the byte classes and the transition table
        pda = PDA.from_gnf(gnf)
        self.pda = pda
        self.byte_class = pda.byte_class_of
        self.num_byte_classes = pda.n_classes
        n = len(gnf.names)
        ncls = self.num_byte_classes
        # per byte class and symbol: each pushed tail split as (head, rest, rest + separator,
        # tail id) (head -1 for an empty tail; equal tails have equal ids, so tails are
        # grouped by an int key); rows are sparse, sharing one empty tuple
        no_split: tuple[tuple[int, tuple[int, ...], tuple[int, ...], int], ...] = ()
        self._split: list[list[tuple[tuple[int, tuple[int, ...], tuple[int, ...], int], ...]]] = [
            [no_split] * n for _ in range(ncls)
        ]
        tail_id: dict[tuple[int, ...], int] = {}
        # tail id -> (head, rest + separator)
        self._tail_parts: list[tuple[int, tuple[int, ...]]] = []
        starters: list[list[int]] = [[] for _ in range(ncls)]
        self._classes_of: list[int] = [0] * n  # symbol -> bit set of the byte classes it has rules for
        for (c, lhs), ts in pda.table.items():  # any order: only the starters need one (below)
            row: list[tuple[int, tuple[int, ...], tuple[int, ...], int]] = []
            for t in ts:
                tid = tail_id.get(t)
                if tid is None:
                    tid = len(self._tail_parts)
                    tail_id[t] = tid
                    self._tail_parts.append((t[0], (*t[1:], _SEP)) if t else (-1, (_SEP,)))
                head, rest_sep = self._tail_parts[tid]
                row.append((head, t[1:], rest_sep, tid))
            self._split[c][lhs] = tuple(row)
            starters[c].append(lhs)
            self._classes_of[lhs] |= 1 << c
        self._single: list[tuple[int]] = [(z,) for z in range(n)]  # z -> (z,), built once
        self._starters: list[tuple[int, ...]] = [tuple(sorted(a)) for a in starters]
        self._starter_sets: list[frozenset[int]] = [frozenset(a) for a in starters]
        # y -> the symbols that can lie below y (can_be_below), as a bit set, and as a
        # frozenset built on first use (the search looks at few of them; equal sets shared)
        self.below_bits: list[int] = below_bits(gnf)
        self._below: list[frozenset[int] | None] = [None] * n
        self._below_sets: dict[int, frozenset[int]] = {}
        self._below_classes: list[int] = [-1] * n  # y -> classes of the symbols below y (lazy)
        # The separator only serves to look up what may lie below ``last``, so symbols with the
        # same set of possible symbols below share one separator label (fewer, smaller sets).
        label_of: dict[int, int] = {}
        self._sep_of: list[int] = [_sep(label_of.setdefault(zs, y)) for y, zs in enumerate(self.below_bits)]
        # memo keys are ints: (node, class) as node * ncls + c, and so on (no tuple per lookup)
        self._n = n
        self._below_c: dict[int, tuple[int, ...]] = {}  # y * ncls + c
        #: symbols never guessed -> their models, and the longest token that may then be read
        #: (:meth:`use_twins`)
        self.twins: dict[int, int] = {}
        self.horizon: int | None = None
        super().__init__()

    def use_twins(self, twins: Mapping[int, int], horizon: int) -> None:
        """Never guess the symbols of ``twins`` as a token's first stack top or below a popped
        symbol, for tokens of at most ``horizon`` bytes; forgets every table.

        Parameters
        ----------
        twins : mapping
            Symbol -> model, from :func:`~formalgram_cfgzip.search.symmetry.shift_twins` with
            the same ``horizon``: the partition of the tokens stays the full search's, and
            :func:`~formalgram_cfgzip.search.symmetry.close_domains` makes the domains whole.
        horizon : int
            The longest token (bytes) a walk may then read
            (:func:`~formalgram_cfgzip.search.driver.walk_trie` refuses a deeper trie).

        Notes
        -----
        O(starters + len(twins)), plus :meth:`reset`.

        Examples
        --------
        >>> from formalgram import parse_gbnf, to_gnf
        >>> d = DisplacementSearch(to_gnf(parse_gbnf('root ::= "a" | "b"')))
        >>> d.use_twins({}, 3); d.horizon
        3
        """
        drop = set(twins)
        self._starters = [tuple(a for a in row if a not in drop) for row in self._starters]
        self._starter_sets = [frozenset(row) for row in self._starters]
        self._below_c = {}
        self.twins = dict(twins)
        self.horizon = horizon
        self.reset()

    def reset(self) -> None:
        """Forget every interned trie and memo entry (ids from before become meaningless).

        Digests from :meth:`canonical` stay valid across a reset, so a long search can
        bound its memory by recording digests and resetting.

        Notes
        -----
        O(1) (the old tables are dropped).

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> d = DisplacementSearch(parse_gbnf('root ::= "(" root root | ")"'))  # GNF as written
        >>> before = d.canonical(d.run(b"(("))
        >>> d.reset()
        >>> d.size() < 10, d.canonical(d.run(b"((")) == before
        (True, True)
        """
        super().reset()
        self._filter: dict[int, int] = {}  # rev_in * n + z
        self._backtracks: dict[int, tuple[Edge, ...]] = {}  # (rev_in * n + last) * ncls + c
        self._memo: dict[int, int] = {}  # node * ncls + c
        self._keys: dict[int, int] = {}
        self._popped: dict[int, int] = {}
        self._checks = 0

    # -- the stack symbols below
    def _kept_below(self, rev_in: int, z: int) -> int:
        """The strings of ``rev_in`` whose first symbol ``z`` can lie below (DEAD if none)."""
        k = rev_in * self._n + z
        r = self._filter.get(k)
        if r is None:
            edges = self._edges_of(rev_in)
            below = self._below
            keep: list[Edge] = []
            for e in edges:
                zs = below[e[0]]
                if zs is None:
                    zs = self._below_set(e[0])
                if z in zs:
                    keep.append(e)
            r = rev_in if len(keep) == len(edges) else self._node(False, tuple(keep))
            self._filter[k] = r
        return r

    def _below_set(self, y: int) -> frozenset[int]:
        """The symbols that can lie below ``y`` (``can_be_below(gnf)[y]``), built once per set."""
        zs = self._below[y]
        if zs is None:
            bits = self.below_bits[y]
            zs = self._below_sets.get(bits)
            if zs is None:
                zs = frozenset(_members(bits))
                self._below_sets[bits] = zs
            self._below[y] = zs
        return zs

    # -- transitions ----------------------------------------------------------------------
    def _classes_below(self, y: int) -> int:
        """Bit set of the byte classes that some symbol able to lie below ``y`` has rules for."""
        r = self._below_classes[y]
        if r < 0:
            r = 0
            classes_of = self._classes_of
            for z in self._below_set(y):
                r |= classes_of[z]
            self._below_classes[y] = r
        return r

    def _below_starting(self, y: int, c: int) -> tuple[int, ...]:
        """Symbols that can lie below ``y`` and have a rule for byte class ``c``, ascending."""
        k = y * self.num_byte_classes + c
        r = self._below_c.get(k)
        if r is None:
            below = self._below_set(y)
            starters = self._starters[c]
            if len(starters) <= len(below):
                r = tuple(z for z in starters if z in below)
            else:
                has = self._starter_sets[c]
                r = tuple(sorted(z for z in below if z in has))
            self._below_c[k] = r
        return r

    def _backtrack(self, last: int, rev_in: int, c: int) -> tuple[Edge, ...]:
        """Root edges of the strings reached by popping, with class ``c``, a symbol below ``last``.

        ``rev_in`` is the set of reversed consumed inputs under the separator; memoised, as
        many sets share their separator edges.
        """
        k = (rev_in * self._n + last) * self.num_byte_classes + c
        r = self._backtracks.get(k)
        if r is None:
            below: list[Edge] = []
            for z in self._below_starting(last, c):
                kept = self._kept_below(rev_in, z)
                if kept != DEAD:
                    below.append((z, kept))
            groups: dict[int, list[int]] = {}
            if below:
                self._consume(below, c, groups)
            r = tuple([(sym, self._union(groups[sym])) for sym in sorted(groups)])
            self._backtracks[k] = r
        return r

    def _consume(self, below: list[Edge], c: int, groups: dict[int, list[int]]) -> None:
        """Pop a symbol ``z`` of the original stack with a byte of class ``c``, for each ``(z, rev_in)``.

        ``below`` lists, by increasing ``z``, the symbols that may be consumed and the set
        ``rev_in`` of reversed consumed inputs under each.  Adds the root edges of the strings
        ``tail · # · z · rev_in`` to ``groups``; rule tails shared by several ``z`` are
        pushed once, in front of the set of all their ``z · rev_in``.
        """
        by_tail: dict[int, list[Edge]] = {}  # tail id -> its (z, rev_in), by increasing z
        split = self._split[c]
        for edge in below:
            z = edge[0]
            for head, _, _, tid in split[z]:
                if head < 0:  # σ_out is empty at once: the separator records ``z``
                    _add(groups, self._sep_of[z], self._chain(self._single[z], edge[1]))
                else:
                    lst = by_tail.get(tid)
                    if lst is None:
                        by_tail[tid] = [edge]
                    else:
                        lst.append(edge)
        tail_parts = self._tail_parts
        for tid, edges in by_tail.items():
            head, rest_sep = tail_parts[tid]
            _add(groups, head, self._chain(rest_sep, self._node(False, tuple(edges))))

    def step(self, node: int, c: int) -> int:
        """The set reached from ``node`` by reading one byte of class ``c``.

        Parameters
        ----------
        node : int
            A node id (``START`` for nothing read yet).
        c : int
            A byte class (``byte_class[b]`` for byte ``b``).

        Returns
        -------
        int
            The node id of the resulting set (``DEAD`` when no path survives).

        Raises
        ------
        GrammarTooLarge
            If the set has more than ``max_states`` top symbols, or the tables, the work or
            the memory pass their budgets.

        Notes
        -----
        Memoised: O(1) for a (node, class) pair seen before; otherwise O(top symbols of
        ``node`` times the rule tails per symbol), plus the merges of the groups' children.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> d = DisplacementSearch(parse_gbnf('root ::= "(" root root | ")"'))  # GNF as written
        >>> open_ = d.byte_class[ord("(")]
        >>> d.step(d.step(START, open_), open_) == d.run(b"((")
        True
        """
        k = node * self.num_byte_classes + c
        r = self._memo.get(k)
        if r is not None:
            return r
        # root edges of the result, grouped by symbol (no string of a set is empty, so the
        # root is never final); each group's children are merged once at the end
        groups: dict[int, list[int]] = {}
        split = self._split[c]
        below_classes = self._below_classes
        scanned = 0
        if node == START:
            self._consume([(a, EPS) for a in self._starters[c]], c, groups)
        elif node != DEAD:
            edges = self._edges_of(node)
            scanned = len(edges)
            if len(edges) > self.max_states:
                raise GrammarTooLarge(
                    "displacement search",
                    self.max_states,
                    "too many distinct stack tops for one token prefix",
                )
            sep_of = self._sep_of
            for sym, child in edges:
                if sym >= 0:  # pop the top of σ_out
                    for head, rest, _, _ in split[sym]:
                        if head >= 0:
                            item = self._chain(rest, child) if rest else child
                            lst = groups.get(head)
                            if lst is None:
                                groups[head] = [item]
                            else:
                                lst.append(item)
                        else:  # σ_out may now be empty: label its separator with ``sym``
                            for sym2, child2 in self._edges_of(child):
                                _add(groups, sep_of[sym] if sym2 == _SEP else sym2, child2)
                elif sym != _SEP:  # σ_out is empty: backtrack below the consumed input
                    last = -sym - 2
                    classes = below_classes[last]
                    if classes < 0:
                        classes = self._classes_below(last)
                    if (classes >> c) & 1:
                        for sym2, child2 in self._backtrack(last, child, c):
                            _add(groups, sym2, child2)
        if groups:
            r = self._node(False, tuple([(sym, self._union(groups[sym])) for sym in sorted(groups)]))
        else:
            r = DEAD
        self._memo[k] = r
        self.expansions += 1
        self.work += scanned + EXPANSION_WORK
        if self.max_work is not None and self.work > self.max_work:
            raise GrammarTooLarge("displacement search", self.max_work, "units of work")
        self._check_budget()
        return r

    def _check_budget(self) -> None:
        self._checks += 1
        if self._checks & 1023:
            return
        cells = len(self._final) + len(self._memo) + len(self._unions)
        if cells > self.max_cells:
            raise GrammarTooLarge("displacement search", self.max_cells, "trie nodes and memo entries")
        if self.memory_budget is not None:
            rss = current_rss()
            if rss - self._rss_base > self.memory_budget:
                raise GrammarTooLarge(
                    "displacement search",
                    self.memory_budget,
                    f"bytes: memory grew by {(rss - self._rss_base) >> 20} MiB since the search"
                    f" started; resident {rss >> 20} MiB",
                )

    def run_classes(self, classes: Iterable[int], node: int = START) -> int:
        """Run a sequence of byte-class ids from ``node``; returns the final node id.

        Parameters
        ----------
        classes : iterable of int
            Byte classes.
        node : int
            Where to start (default ``START``).

        Returns
        -------
        int
            The final node id (``DEAD`` as soon as no path survives).

        Notes
        -----
        One :meth:`step` per class.
        """
        for c in classes:
            node = self.step(node, c)
            if node == DEAD:
                return DEAD
        return node

    def run(self, data: bytes) -> int:
        """Run the bytes of one token from the initial set.

        Parameters
        ----------
        data : bytes
            The token's bytes.

        Returns
        -------
        int
            The node id of its set (``DEAD`` for a token valid nowhere).

        Notes
        -----
        One :meth:`step` per byte.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> d = DisplacementSearch(parse_gbnf('root ::= "(" root root | ")"'))  # GNF as written
        >>> d.run(b"x") == DEAD, d.run(b"()") == DEAD
        (True, False)
        """
        bc = self.byte_class
        return self.run_classes([bc[b] for b in data])

    # -- displacement keys ---------------------------------------------------------------
    def key_of(self, node: int) -> int:
        """Canonical id of the displacement of a set (``last`` labels dropped); equal ids <=> equal displacements.

        Parameters
        ----------
        node : int
            A node id from this search (since the last reset).

        Returns
        -------
        int
            A node id, valid until the next :meth:`reset` or :meth:`compact`.

        Notes
        -----
        Memoised; the first call merges the node's separator edges once.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> d = DisplacementSearch(parse_gbnf('root ::= "(" root root | ")"'))  # GNF as written
        >>> d.key_of(d.run(b"()")) == d.key_of(d.run(b"(())")), d.key_of(d.run(b"(")) == d.key_of(d.run(b"(("))
        (True, False)
        """
        r = self._keys.get(node)
        if r is None:
            if node in (DEAD, START):
                r = node
            else:
                plain: list[Edge] = []
                emptied: list[int] = []
                for sym, child in self._edges_of(node):
                    if sym >= 0 or sym == _SEP:
                        plain.append((sym, child))
                    else:
                        emptied.append(child)
                if emptied:
                    plain.append((_SEP, self._union(emptied)))
                    plain.sort()
                r = self._node(self._final[node], tuple(plain))
            self._keys[node] = r
        return r

    def popped(self, node: int) -> int:
        """The popped sequences of a set's displacement, reversed: ``{reverse(σ_in)}`` as a trie node.

        Parameters
        ----------
        node : int
            A node id from this search (since the last reset).

        Returns
        -------
        int
            The canonical node of the set of strings ``reverse(σ_in)`` over the pairs
            ``(σ_in, σ_out)`` of the displacement (the subtries below the separator edges
            reachable by ``σ_out`` symbols, united); equal sets give equal ids.  DEAD for
            DEAD and START.  Valid until the next :meth:`reset` or :meth:`compact`.

        Notes
        -----
        Memoised per node; an iterative post-order over the ``σ_out`` part of the trie (a
        DAG), one :meth:`~formalgram_cfgzip.search.trie.SymbolTrie.union` per node of it.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> d = DisplacementSearch(parse_gbnf('root ::= "(" root root | ")"'))  # GNF as written
        >>> sorted(d.strings(d.popped(d.run(b"))"))))  # σ_in = (root, root), reversed
        [(0, 0)]
        >>> d.popped(d.run(b"(")) == d.popped(d.run(b"((")), d.popped(d.run(b"x"))
        (True, 0)
        """
        memo = self._popped
        if node in (DEAD, START):
            return DEAD
        todo = [node]
        while todo:
            n = todo[-1]
            if n in memo:
                todo.pop()
                continue
            parts: list[int] = []
            pending = False
            for sym, child in self._edges_of(n):
                if sym < 0:
                    parts.append(child)
                else:
                    c = memo.get(child)
                    if c is None:
                        todo.append(child)
                        pending = True
                    elif c != DEAD:
                        parts.append(c)
            if pending:
                continue
            todo.pop()
            memo[n] = self._union(parts) if parts else DEAD
        return memo[node]

    def displacement(self, node: int) -> frozenset[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The displacement as explicit ``(σ_in, σ_out)`` id tuples, top first (for tests).

        Parameters
        ----------
        node : int
            A node id.

        Returns
        -------
        frozenset of (tuple of int, tuple of int)

        Notes
        -----
        As :meth:`strings`: can be huge.

        Examples
        --------
        >>> from formalgram import parse_gbnf
        >>> d = DisplacementSearch(parse_gbnf('root ::= "(" root root | ")"'))  # GNF as written
        >>> sorted(d.displacement(d.run(b"))")))
        [((0, 0), ())]
        """
        if node in (DEAD, START):
            return frozenset()
        out: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        for s in self.strings(node):
            cut = next(i for i, sym in enumerate(s) if sym < 0)
            out.add((tuple(reversed(s[cut + 1 :])), s[:cut]))
        return frozenset(out)

    def canonical(self, node: int) -> CanonicalKey:
        """A process-independent digest of the displacement (equal displacements <=> equal digests).

        Parameters
        ----------
        node : int
            A node id from this search.

        Returns
        -------
        bytes
            ``digest(key_of(node))``; survives :meth:`reset` and can be compared across
            processes.

        Notes
        -----
        As :meth:`key_of` plus :meth:`digest`.
        """
        return self.digest(self.key_of(node))

    def size(self) -> int:
        """Interned trie nodes plus memo entries (what a reset frees); O(1)."""
        return (
            len(self._final) + len(self._memo) + len(self._unions) + len(self._filter) + len(self._backtracks)
        )

    def state_count(self, node: int) -> int:
        """Number of distinct top symbols (root edges) of a set; O(1)."""
        return len(self._edges_of(node))

    def stats(self) -> dict[str, int]:
        """Sizes of the interned tables, steps and work so far; O(1)."""
        return {
            "trie_nodes": len(self._final),
            "unions": len(self._unions),
            "memo_entries": len(self._memo),
            "expansions": self.expansions,
            "work": self.work,
            "byte_classes": self.num_byte_classes,
        }
