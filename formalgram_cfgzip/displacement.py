"""Token displacements over a GNF grammar (CFGzip, Algorithm 1), computed by lazy subset construction.

Let ``G`` be a trimmed grammar in Greibach normal form and ``P`` its one-state PDA (stack of
nonterminals; reading byte ``c`` with ``A`` on top pops ``A`` and pushes ``B1..Bn`` for each
rule ``A -> a B1..Bn`` with ``c`` in ``a``).  The *displacement* of a byte string ``t`` is the
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
hash-consed trie (a DAG with shared subtries).  A step only rewrites the root of the trie
(pop the top symbol, push a rule tail in front of the shared rest), so its cost depends on
the number of distinct *top* symbols, not on the number of stacks, which can be exponential
(a token such as ``"))))"`` closes many combinations of contexts).  When ``σ_out`` becomes
empty the separator is labelled with ``last``.  Equal sets are equal node ids, so the
transition ``(trie, byte class) -> trie`` is memoised: the search is a lazily built
deterministic automaton over byte classes, and every distinct (trie, byte class) pair is
expanded once however many tokens share it.
"""

from __future__ import annotations

import hashlib
import resource
from collections.abc import Iterable

from formalgram.adjacency import can_be_below
from formalgram.errors import GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar, fresh_name
from formalgram.transforms.byte_classes import byte_class_map

Edge = tuple[int, int]  # (symbol, child node)
CanonicalKey = bytes

DEAD = 0  # the empty set of strings: no path survives
START = 1  # the initial set (nothing read yet)
_EPS = 2  # the set holding only the empty string
_SEP = -1  # separator between σ_out and reverse(σ_in) while σ_out is not empty


def _sep(last: int) -> int:
    """Separator symbol recording that ``σ_out`` was emptied by popping ``last``."""
    return -(last + 2)


def current_rss() -> int:
    """Resident memory of this process in bytes (Linux ``/proc``; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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

    A state of the automaton is a set of strings ``σ_out · # · reverse(σ_in)`` stored as a
    canonical hash-consed trie (node ids; equal sets have equal ids).  See the module
    docstring for the search itself.

    Parameters
    ----------
    gnf : Grammar
        A trimmed grammar in Greibach normal form (every rule ``A -> a B1..Bn`` with ``a`` a
        terminal and ``Bi`` nonterminals; only the start may have an empty rule).
    max_states : int
        Largest number of distinct top symbols of one trie; exceeding it raises GrammarTooLarge.
    max_cells : int
        Largest number of trie nodes plus memo entries.
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
        max_cells: int = 40_000_000,
        memory_budget: int | None = None,
    ) -> None:
        self.gnf = gnf
        self.max_states = max_states
        self.max_cells = max_cells
        self.memory_budget = memory_budget
        self.byte_class = byte_class_map(gnf)
        self.num_byte_classes = max(self.byte_class) + 1
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
        self._below = can_be_below(gnf)
        above: list[set[int]] = [set() for _ in range(n)]
        for x, zs in enumerate(self._below):
            for z in zs:
                above[z].add(x)
        self._above: list[frozenset[int]] = [frozenset(a) for a in above]
        self._below_c: dict[tuple[int, int], tuple[int, ...]] = {}
        self.reset()

    def reset(self) -> None:
        """Forget every interned trie and memo entry (ids from before become meaningless).

        Digests from :meth:`canonical` stay valid across a reset, so a long search can
        bound its memory by recording digests and resetting.
        """
        # trie nodes: id -> (final, sorted edges); ids 0, 1, 2 are DEAD, START, EPS
        self._final: list[bool] = [False, False, True]
        self._edges: list[tuple[Edge, ...]] = [(), ((-(1 << 40), DEAD),), ()]
        self._ids: dict[tuple[bool, tuple[Edge, ...]], int] = {(False, ()): DEAD, (True, ()): _EPS}
        self._unions: dict[tuple[int, ...], int] = {}
        self._relabel: dict[tuple[int, int], int] = {}
        self._filter: dict[tuple[int, int], int] = {}
        self._memo: dict[tuple[int, int], int] = {}
        self._keys: dict[int, int] = {}
        self._digest: dict[int, bytes] = {}
        self._checks = 0

    # -- trie nodes -----------------------------------------------------------------------
    def _node(self, final: bool, edges: tuple[Edge, ...]) -> int:
        k = (final, edges)
        i = self._ids.get(k)
        if i is None:
            i = len(self._final)
            self._ids[k] = i
            self._final.append(final)
            self._edges.append(edges)
        return i

    def _path(self, tail: tuple[int, ...], base: int) -> int:
        """The set ``{tail · w : w in base}``."""
        node = base
        for j in range(len(tail) - 1, -1, -1):
            node = self._node(False, ((tail[j], node),))
        return node

    def _union(self, ids: list[int]) -> int:
        """The union of several sets (memoised n-ary merge of canonical tries)."""
        if len(ids) == 1:
            return ids[0]
        key = tuple(sorted(set(ids)))
        if key[0] == DEAD:
            key = key[1:]
        if not key:
            return DEAD
        if len(key) == 1:
            return key[0]
        r = self._unions.get(key)
        if r is not None:
            return r
        final = False
        children: dict[int, list[int]] = {}
        for h in key:
            if self._final[h]:
                final = True
            for sym, child in self._edges[h]:
                lst = children.get(sym)
                if lst is None:
                    children[sym] = [child]
                else:
                    lst.append(child)
        edges = tuple((sym, self._union(children[sym])) for sym in sorted(children))
        r = self._node(final, edges)
        self._unions[key] = r
        return r

    def _emptied_by(self, node: int, last: int) -> int:
        """``node`` with its root separator labelled by ``last`` (σ_out just became empty)."""
        k = (node, last)
        r = self._relabel.get(k)
        if r is None:
            edges = [(_sep(last) if sym == _SEP else sym, child) for sym, child in self._edges[node]]
            edges.sort()
            r = self._node(self._final[node], tuple(edges))
            self._relabel[k] = r
        return r

    def _consumed_then(self, rev_in: int, z: int) -> int:
        """``{z · w : w in rev_in}`` keeping only ``w`` whose first symbol ``z`` can lie below; DEAD if none."""
        k = (rev_in, z)
        r = self._filter.get(k)
        if r is None:
            edges = self._edges[rev_in]
            above = self._above[z]
            keep = tuple(e for e in edges if e[0] in above)
            if not keep:
                r = DEAD
            else:
                base = rev_in if len(keep) == len(edges) else self._node(False, keep)
                r = self._node(False, ((z, base),))
            self._filter[k] = r
        return r

    # -- transitions ----------------------------------------------------------------------
    def _below_starting(self, y: int, c: int) -> tuple[int, ...]:
        k = (y, c)
        r = self._below_c.get(k)
        if r is None:
            row = self._trans[c]
            r = tuple(sorted(z for z in self._below[y] if row[z]))
            self._below_c[k] = r
        return r

    def _expand(self, rev_in: int, z: int, c: int, out: list[int]) -> None:
        """Pop ``z`` (consumed from the original stack) with a byte of class ``c``."""
        sep_rest = -1
        for tail in self._trans[c][z]:
            if tail:
                if sep_rest < 0:
                    sep_rest = self._node(False, ((_SEP, rev_in),))
                out.append(self._path(tail, sep_rest))
            else:
                out.append(self._node(False, ((_sep(z), rev_in),)))

    def step(self, node: int, c: int) -> int:
        """The set reached from ``node`` by reading one byte of class ``c``."""
        k = (node, c)
        r = self._memo.get(k)
        if r is not None:
            return r
        out: list[int] = []
        if node == START:
            for a in self._starters[c]:
                self._expand(self._node(False, ((a, _EPS),)), a, c, out)
        elif node != DEAD:
            edges = self._edges[node]
            if len(edges) > self.max_states:
                raise GrammarTooLarge(
                    "displacement search",
                    self.max_states,
                    "too many distinct stack tops for one token prefix",
                )
            for sym, child in edges:
                if sym >= 0:  # pop the top of σ_out
                    for tail in self._trans[c][sym]:
                        out.append(self._path(tail, child) if tail else self._emptied_by(child, sym))
                elif sym != _SEP:  # σ_out is empty: backtrack below the consumed input
                    last = -sym - 2
                    for z in self._below_starting(last, c):
                        rz = self._consumed_then(child, z)
                        if rz != DEAD:
                            self._expand(rz, z, c, out)
        r = self._union(out) if out else DEAD
        self._memo[k] = r
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
            if rss > self.memory_budget:
                raise GrammarTooLarge(
                    "displacement search", self.memory_budget, f"peak memory reached {rss >> 20} MiB"
                )

    def run_classes(self, classes: Iterable[int], node: int = START) -> int:
        """Run a sequence of byte-class ids from ``node``; returns the final node id."""
        for c in classes:
            node = self.step(node, c)
            if node == DEAD:
                return DEAD
        return node

    def run(self, data: bytes) -> int:
        """Run the bytes of one token from the initial set."""
        bc = self.byte_class
        return self.run_classes([bc[b] for b in data])

    # -- displacement keys ---------------------------------------------------------------
    def key_of(self, node: int) -> int:
        """Canonical id of the displacement of a set (``last`` labels dropped); equal ids <=> equal displacements."""
        r = self._keys.get(node)
        if r is None:
            if node in (DEAD, START):
                r = node
            else:
                plain: list[Edge] = []
                emptied: list[int] = []
                for sym, child in self._edges[node]:
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

    def strings(self, node: int) -> frozenset[tuple[int, ...]]:
        """All strings of a set (exponential in the worst case; for tests and debugging)."""
        out: set[tuple[int, ...]] = set()
        todo: list[tuple[int, tuple[int, ...]]] = [(node, ())]
        while todo:
            n, prefix = todo.pop()
            if self._final[n]:
                out.add(prefix)
            for sym, child in self._edges[n]:
                todo.append((child, (*prefix, sym)))
        return frozenset(out)

    def displacement(self, node: int) -> frozenset[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The displacement as explicit ``(σ_in, σ_out)`` id tuples, top first (for tests; can be huge)."""
        if node in (DEAD, START):
            return frozenset()
        out: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        for s in self.strings(node):
            cut = next(i for i, sym in enumerate(s) if sym < 0)
            out.add((tuple(reversed(s[cut + 1 :])), s[:cut]))
        return frozenset(out)

    def canonical(self, node: int) -> CanonicalKey:
        """A process-independent digest of the displacement (equal displacements <=> equal digests)."""
        return self._digest_of(self.key_of(node))

    def _digest_of(self, node: int) -> bytes:
        """Digest of a trie (iterative post-order, memoised)."""
        done = self._digest
        todo = [node]
        while todo:
            n = todo[-1]
            if n in done:
                todo.pop()
                continue
            pending = [child for _, child in self._edges[n] if child not in done]
            if pending:
                todo.extend(pending)
                continue
            todo.pop()
            m = hashlib.sha256(b"F" if self._final[n] else b"N")
            for sym, child in self._edges[n]:
                m.update(sym.to_bytes(8, "little", signed=True))
                m.update(done[child])
            done[n] = m.digest()
        return done[node]

    def size(self) -> int:
        """Interned trie nodes plus memo entries (what a reset frees)."""
        return len(self._final) + len(self._memo) + len(self._unions) + len(self._filter)

    def state_count(self, node: int) -> int:
        """Number of distinct top symbols (root edges) of a set."""
        return len(self._edges[node])

    def stats(self) -> dict[str, int]:
        """Sizes of the interned tables."""
        return {
            "trie_nodes": len(self._final),
            "unions": len(self._unions),
            "memo_entries": len(self._memo),
            "byte_classes": self.num_byte_classes,
        }
