"""Token displacements over a GNF grammar (CFGzip, Algorithm 1), computed by lazy subset construction.

Let ``G`` be a trimmed grammar in Greibach normal form and ``P`` its one-state PDA (stack of
nonterminals; reading byte ``c`` with ``A`` on top pops ``A`` and pushes ``B1..Bn`` for each
rule ``A -> a B1..Bn`` with ``c`` in ``a``).  The *displacement* of a byte string ``t`` is the
set of pairs ``(σ_in, σ_out)`` such that ``P``, started on any stack ``σ_in·γ``, can read ``t``
by popping exactly the symbols of ``σ_in`` from the original stack (top first) and end with
``σ_out·γ``.  Equal displacements imply syntactic congruence (``proofs/congruence.md``).

The search follows one *state* ``(σ_in, σ_out, last)`` per path:

* the first byte pops an arbitrary symbol ``A`` (``σ_in = A``) and pushes the tail of a rule;
* later bytes pop the top of ``σ_out``;
* when ``σ_out`` is empty the next byte must pop the symbol ``Z`` that lay below the
  original ``σ_in`` (a *backtrack*): ``Z`` is appended to ``σ_in``, restricted to symbols that
  can lie directly below ``last``, the symbol whose expansion emptied ``σ_out``
  (the stack-adjacency relation; ``proofs/stack_adjacency.md``).

Stacks are interned cons lists, states are int triples, and *sets* of states are interned as
well.  The transition ``(state set, byte class) -> state set`` is memoised, so the search is a
lazily built deterministic automaton over byte classes: every vocabulary token is run through
it, and every distinct (state set, byte class) pair is expanded exactly once, however many
tokens share it (a strict generalisation of sharing work along a vocabulary trie).
"""

from __future__ import annotations

import hashlib
import resource
from collections.abc import Iterable, Sequence

from formalgram.errors import GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar, fresh_name

State = tuple[int, int, int]  # (σ_out stack id, last popped symbol or -1, history id)
StateSet = frozenset[State]
CanonicalKey = tuple[tuple[tuple[int, ...], bytes], ...]

EMPTY = 0  # id of the empty stack
DEAD = 0  # id of the empty state set
START = 1  # id of the initial state set (nothing read yet)
_EPS = 0  # history holding only the empty σ_in
_SENTINEL: State = (-1, -1, -1)


def compute_byte_classes(masks: Sequence[int]) -> tuple[bytes, int]:
    """Partition the 256 byte values by the terminals that contain them.

    Parameters
    ----------
    masks : sequence of int
        256-bit terminal masks.

    Returns
    -------
    (bytes, int)
        A 256-entry map byte -> class id (classes numbered by smallest member) and the
        number of classes.

    Complexity
    ----------
    O(256 * len(masks)).
    """
    signature_to_class: dict[tuple[bool, ...], int] = {}
    out = bytearray(256)
    for b in range(256):
        sig = tuple((m >> b) & 1 == 1 for m in masks)
        cls = signature_to_class.get(sig)
        if cls is None:
            cls = len(signature_to_class)
            signature_to_class[sig] = cls
        out[b] = cls
    return bytes(out), len(signature_to_class)


def adjacency_below(gnf: Grammar) -> list[frozenset[int]]:
    """For each nonterminal ``X``, the nonterminals that can lie directly below ``X`` on a stack.

    Over-approximates the relation over all stacks reachable from ``(S)``: seeds are the
    pairs ``(B_i, B_{i+1})`` inside every rule, and a pair ``(X, Z)`` propagates to ``(W, Z)``
    for every ``W`` reachable from ``X`` along rightmost-nonterminal edges ``A -> B`` (rules
    ``A -> a β B``): when ``A`` lies on ``Z`` and is expanded, its last pushed symbol lies on ``Z``.

    Complexity
    ----------
    O(N * (N + R)) for N nonterminals and R rules.
    """
    n = len(gnf.names)
    rightmost: list[set[int]] = [set() for _ in range(n)]
    seeds: list[set[int]] = [set() for _ in range(n)]
    for lhs, rhs in gnf.rules:
        tail = rhs[1:]
        if tail:
            rightmost[lhs].add(tail[-1])
        for i in range(len(tail) - 1):
            seeds[tail[i]].add(tail[i + 1])
    # closure: below[W] ⊇ seeds[X] for W reachable from X.
    below: list[set[int]] = [set() for _ in range(n)]
    for x in range(n):
        if not seeds[x]:
            continue
        seen = {x}
        todo = [x]
        while todo:
            w = todo.pop()
            below[w] |= seeds[x]
            for nxt in rightmost[w]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    return [frozenset(s) for s in below]


def specialize_terminal_symbols(gnf: Grammar) -> Grammar:
    """Give every tail occurrence of a single-byte-class nonterminal its own copy.

    A nonterminal ``T`` whose rules are all ``T -> a`` (no tail) stands for one byte.  GNF
    conversion shares such symbols across contexts, which makes the stack-adjacency relation
    (a relation on *pairs* of symbols) admit long chains that no real stack holds, e.g. the
    ``"*"`` of ``"/*"`` and the ``"*"`` of ``"*/"`` stacked many times.  Copying ``T`` per
    (rule, position) keeps the language and the PDA's behaviour, and makes the relation exact
    for these symbols, which keeps the search small and the classes coarse.

    Parameters
    ----------
    gnf : Grammar
        A grammar in Greibach normal form.

    Returns
    -------
    Grammar
        An equivalent GNF grammar in which each single-byte nonterminal occurs once.

    Complexity
    ----------
    O(size of the grammar).
    """
    names = list(gnf.names)
    byte_only: list[list[int]] = [[] for _ in names]
    is_byte_only = [bool(gnf.rules_by_lhs[a]) for a in range(len(names))]
    for lhs, rhs in gnf.rules:
        if len(rhs) == 1 and rhs[0] < 0:
            byte_only[lhs].append(rhs[0])
        else:
            is_byte_only[lhs] = False
    is_byte_only[gnf.start_id] = False
    taken = set(names)
    rules: list[tuple[int, tuple[int, ...]]] = []
    for lhs, rhs in gnf.rules:
        if is_byte_only[lhs]:
            continue  # re-emitted per occurrence below
        new_rhs = list(rhs)
        for pos in range(1, len(rhs)):
            sym = rhs[pos]
            if sym >= 0 and is_byte_only[sym]:
                name = fresh_name(f"{names[sym]}@{len(rules)}.{pos}", taken)
                taken.add(name)
                copy = len(names)
                names.append(name)
                for t in byte_only[sym]:
                    rules.append((copy, (t,)))
                new_rhs[pos] = copy
        rules.append((lhs, tuple(new_rhs)))
    return Grammar.from_ids(names, gnf.masks, gnf.start_id, rules)


class DisplacementSearch:
    """Lazily determinised displacement automaton of a GNF grammar over its byte classes.

    A search state is ``(σ_out, last, H)``: the current output stack, the symbol whose
    expansion emptied it (``-1`` while it is not empty), and ``H``, the *set* of input stacks
    ``σ_in`` consumed by the paths that reach this ``(σ_out, last)``.  The future of a path
    depends only on ``(σ_out, last)``, so paths are merged there and their histories united.
    Histories are hash-consed tries over reversed ``σ_in`` (deepest symbol first), so equal
    sets have equal ids, union is a memoised merge, and a backtrack that consumes ``Z`` is a
    single new node ``{Z: H}``.  This keeps the search linear in the number of distinct
    ``(σ_out, last)`` pairs even when a token (say ``")))"``) closes exponentially many
    combinations of contexts.

    Parameters
    ----------
    gnf : Grammar
        A trimmed grammar in Greibach normal form (every rule ``A -> a B1..Bn`` with ``a`` a
        terminal and ``Bi`` nonterminals; only the start may have an empty rule).
    max_states : int
        Largest number of ``(σ_out, last)`` pairs for one token prefix; exceeding it raises
        GrammarTooLarge.
    max_cells : int
        Largest number of interned stack cells, history nodes and memo entries.
    memory_budget : int or None
        Peak resident memory, in bytes, checked periodically; exceeding it raises GrammarTooLarge.

    Raises
    ------
    GrammarError
        If ``gnf`` is not in Greibach normal form.

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
        max_cells: int = 30_000_000,
        memory_budget: int | None = None,
    ) -> None:
        self.gnf = gnf
        self.max_states = max_states
        self.max_cells = max_cells
        self.memory_budget = memory_budget
        self.byte_class, self.num_byte_classes = compute_byte_classes(gnf.masks)
        n = len(gnf.names)
        ncls = self.num_byte_classes
        rep = [-1] * ncls
        for b in range(256):
            c = self.byte_class[b]
            if rep[c] < 0:
                rep[c] = b
        trans: list[list[list[tuple[int, ...]]]] = [[[] for _ in range(n)] for _ in range(ncls)]
        for lhs, rhs in gnf.rules:
            if not rhs:
                if lhs != gnf.start_id:
                    raise GrammarError(f"not in GNF: empty rule for non-start {gnf.names[lhs]!r}")
                continue
            if rhs[0] >= 0 or any(s < 0 for s in rhs[1:]):
                raise GrammarError(f"not in GNF: rule for {gnf.names[lhs]!r} is not 'a B1..Bn'")
            mask = gnf.masks[~rhs[0]]
            tail = rhs[1:]
            for c in range(ncls):
                if (mask >> rep[c]) & 1:
                    trans[c][lhs].append(tail)
        self._trans: list[list[tuple[tuple[int, ...], ...]]] = [[tuple(x) for x in row] for row in trans]
        self._starters: list[tuple[int, ...]] = [tuple(a for a in range(n) if row[a]) for row in self._trans]
        self._below = adjacency_below(gnf)
        self._below_c: dict[tuple[int, int], tuple[int, ...]] = {}
        # output stacks: interned cons cells, id 0 is the empty stack
        self._top: list[int] = [-1]
        self._rest: list[int] = [0]
        self._cells: dict[tuple[int, int], int] = {}
        # histories: hash-consed tries over reversed σ_in; node = (final, ((symbol, child), ...))
        self._h_final: list[bool] = [True]
        self._h_edges: list[tuple[tuple[int, int], ...]] = [()]
        self._h_ids: dict[tuple[bool, tuple[tuple[int, int], ...]], int] = {(True, ()): _EPS}
        self._h_unions: dict[tuple[int, ...], int] = {}
        self._h_ext: dict[tuple[int, int], int] = {}
        self._h_digest: dict[int, bytes] = {}
        # state sets: frozensets of (σ_out, last, history)
        self._sets: list[StateSet] = [frozenset(), frozenset([_SENTINEL])]
        self._set_ids: dict[StateSet, int] = {self._sets[0]: DEAD, self._sets[1]: START}
        self._memo: dict[tuple[int, int], int] = {}
        self._keys: dict[frozenset[tuple[int, int]], int] = {}
        self._key_of_set: dict[int, int] = {}
        self._checks = 0

    # -- output stacks --------------------------------------------------------------------
    def _cons(self, top: int, rest: int) -> int:
        k = (top, rest)
        i = self._cells.get(k)
        if i is None:
            i = len(self._top)
            self._cells[k] = i
            self._top.append(top)
            self._rest.append(rest)
        return i

    def _push(self, tail: tuple[int, ...], base: int) -> int:
        s = base
        for j in range(len(tail) - 1, -1, -1):
            s = self._cons(tail[j], s)
        return s

    def stack(self, sid: int) -> tuple[int, ...]:
        """The nonterminal ids of an interned output stack, top first."""
        out: list[int] = []
        while sid != EMPTY:
            out.append(self._top[sid])
            sid = self._rest[sid]
        return tuple(out)

    # -- histories ------------------------------------------------------------------------
    def _h_node(self, final: bool, edges: tuple[tuple[int, int], ...]) -> int:
        k = (final, edges)
        i = self._h_ids.get(k)
        if i is None:
            i = len(self._h_final)
            self._h_ids[k] = i
            self._h_final.append(final)
            self._h_edges.append(edges)
        return i

    def _h_append(self, h: int, z: int) -> int:
        """History ``{σ·z : σ in h}``."""
        return self._h_node(False, ((z, h),))

    def _h_extend(self, h: int, z: int) -> int:
        """History ``{σ·z : σ in h, z can lie directly below the last symbol of σ}``; -1 if empty.

        The root edges of a history trie are the deepest consumed symbols, so keeping only
        those that ``z`` can lie below is one filter of the root; on top of the backtrack
        test on ``last`` it keeps every consecutive pair of ``σ_in`` adjacency-consistent.
        """
        k = (h, z)
        r = self._h_ext.get(k)
        if r is None:
            edges = self._h_edges[h]
            keep = tuple(e for e in edges if z in self._below[e[0]])
            if not keep:
                r = -1
            else:
                base = h if len(keep) == len(edges) else self._h_node(False, keep)
                r = self._h_node(False, ((z, base),))
            self._h_ext[k] = r
        return r

    def _h_union(self, ids: list[int]) -> int:
        """History ``∪ ids`` (memoised n-ary trie merge; equal sets give equal ids)."""
        if len(ids) == 1:
            return ids[0]
        key = tuple(sorted(set(ids)))
        if len(key) == 1:
            return key[0]
        r = self._h_unions.get(key)
        if r is not None:
            return r
        final = False
        children: dict[int, list[int]] = {}
        for h in key:
            if self._h_final[h]:
                final = True
            for sym, child in self._h_edges[h]:
                lst = children.get(sym)
                if lst is None:
                    children[sym] = [child]
                else:
                    lst.append(child)
        edges = tuple((sym, self._h_union(children[sym])) for sym in sorted(children))
        r = self._h_node(final, edges)
        self._h_unions[key] = r
        return r

    def history(self, h: int) -> frozenset[tuple[int, ...]]:
        """The input stacks ``σ_in`` (top first) of a history; exponential size in the worst case."""
        out: set[tuple[int, ...]] = set()
        todo: list[tuple[int, tuple[int, ...]]] = [(h, ())]
        while todo:
            node, suffix = todo.pop()
            if self._h_final[node]:
                out.add(suffix)
            for sym, child in self._h_edges[node]:
                todo.append((child, (sym, *suffix)))
        return frozenset(out)

    def _h_canonical(self, h: int) -> bytes:
        """A process-independent digest of a history (equal sets <=> equal digests)."""
        d = self._h_digest.get(h)
        if d is None:
            m = hashlib.sha256(b"F" if self._h_final[h] else b"N")
            for sym, child in self._h_edges[h]:
                m.update(sym.to_bytes(4, "little"))
                m.update(self._h_canonical(child))
            d = m.digest()
            self._h_digest[h] = d
        return d

    # -- transitions ----------------------------------------------------------------------
    def _below_starting(self, y: int, c: int) -> tuple[int, ...]:
        k = (y, c)
        r = self._below_c.get(k)
        if r is None:
            row = self._trans[c]
            r = tuple(sorted(z for z in self._below[y] if row[z]))
            self._below_c[k] = r
        return r

    @staticmethod
    def _add(out: dict[tuple[int, int], list[int]], so: int, last: int, h: int) -> None:
        k = (so, last)
        lst = out.get(k)
        if lst is None:
            out[k] = [h]
        else:
            lst.append(h)

    def _step_state(self, st: State, c: int, out: dict[tuple[int, int], list[int]]) -> None:
        so, last, h = st
        row = self._trans[c]
        if h < 0:  # nothing read yet: pop any symbol
            for a in self._starters[c]:
                ha = self._h_append(_EPS, a)
                for tail in row[a]:
                    nso = self._push(tail, EMPTY)
                    self._add(out, nso, a if nso == EMPTY else -1, ha)
        elif so != EMPTY:
            a = self._top[so]
            rest = self._rest[so]
            for tail in row[a]:
                nso = self._push(tail, rest)
                self._add(out, nso, a if nso == EMPTY else -1, h)
        else:  # backtrack below the consumed input
            for z in self._below_starting(last, c):
                hz = self._h_extend(h, z)
                if hz < 0:
                    continue
                for tail in row[z]:
                    nso = self._push(tail, EMPTY)
                    self._add(out, nso, z if nso == EMPTY else -1, hz)

    def step(self, set_id: int, c: int) -> int:
        """The state set reached from ``set_id`` by reading one byte of class ``c``."""
        k = (set_id, c)
        r = self._memo.get(k)
        if r is not None:
            return r
        if set_id == DEAD:
            r = DEAD
        else:
            out: dict[tuple[int, int], list[int]] = {}
            for st in self._sets[set_id]:
                self._step_state(st, c, out)
                if len(out) > self.max_states:
                    raise GrammarTooLarge(
                        "displacement search",
                        self.max_states,
                        "too many distinct parser stacks for one token prefix",
                    )
            fs = frozenset((so, last, self._h_union(hs)) for (so, last), hs in out.items())
            r = self._set_ids.get(fs)
            if r is None:
                r = len(self._sets)
                self._sets.append(fs)
                self._set_ids[fs] = r
        self._memo[k] = r
        self._check_budget()
        return r

    def _check_budget(self) -> None:
        self._checks += 1
        if self._checks & 1023:
            return
        cells = len(self._top) + len(self._memo) + len(self._h_final) + len(self._h_unions)
        if cells > self.max_cells:
            raise GrammarTooLarge(
                "displacement search", self.max_cells, "interned stacks, histories and memo entries"
            )
        if self.memory_budget is not None:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            if rss > self.memory_budget:
                raise GrammarTooLarge(
                    "displacement search", self.memory_budget, f"peak memory reached {rss >> 20} MiB"
                )

    def run_classes(self, classes: Iterable[int], set_id: int = START) -> int:
        """Run a sequence of byte-class ids from ``set_id``; returns the final state set id."""
        for c in classes:
            set_id = self.step(set_id, c)
            if set_id == DEAD:
                return DEAD
        return set_id

    def run(self, data: bytes) -> int:
        """Run the bytes of one token from the initial state set."""
        bc = self.byte_class
        return self.run_classes([bc[b] for b in data])

    # -- displacement keys ---------------------------------------------------------------
    def _pairs(self, set_id: int) -> dict[int, int]:
        """σ_out -> united history, over all states of a set."""
        by_out: dict[int, list[int]] = {}
        for so, _last, h in self._sets[set_id]:
            lst = by_out.get(so)
            if lst is None:
                by_out[so] = [h]
            else:
                lst.append(h)
        return {so: self._h_union(hs) for so, hs in by_out.items()}

    def key_of(self, set_id: int) -> int:
        """Interned id of the displacement of a state set (equal ids <=> equal displacements)."""
        r = self._key_of_set.get(set_id)
        if r is None:
            if set_id == START:
                pairs: frozenset[tuple[int, int]] = frozenset([(-1, -1)])
            elif set_id == DEAD:
                pairs = frozenset()
            else:
                pairs = frozenset(self._pairs(set_id).items())
            r = self._keys.get(pairs)
            if r is None:
                r = len(self._keys)
                self._keys[pairs] = r
            self._key_of_set[set_id] = r
        return r

    def displacement(self, set_id: int) -> frozenset[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The displacement as explicit ``(σ_in, σ_out)`` id tuples, top first (for tests; can be huge)."""
        if set_id in (DEAD, START):
            return frozenset()
        out: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        for so, h in self._pairs(set_id).items():
            stack = self.stack(so)
            for si in self.history(h):
                out.add((si, stack))
        return frozenset(out)

    def canonical(self, set_id: int) -> CanonicalKey:
        """A process-independent form of the displacement: sorted ``(σ_out, digest of σ_in set)``."""
        if set_id in (DEAD, START):
            return ()
        return tuple(sorted((self.stack(so), self._h_canonical(h)) for so, h in self._pairs(set_id).items()))

    def state_count(self, set_id: int) -> int:
        """Number of ``(σ_out, last)`` search states in a state set."""
        return len(self._sets[set_id])

    def stats(self) -> dict[str, int]:
        """Sizes of the interned tables."""
        return {
            "stack_cells": len(self._top),
            "history_nodes": len(self._h_final),
            "state_sets": len(self._sets),
            "memo_entries": len(self._memo),
            "byte_classes": self.num_byte_classes,
        }
