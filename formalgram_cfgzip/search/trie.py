"""Sets of symbol strings as canonical hash-consed tries: the states of the displacement search.

A set of strings over integer symbols is a trie whose nodes are interned: a node is its
*final* flag (the empty string belongs to the set) and its root edges ``(symbol, child)``,
sorted, and equal sets get equal node ids, so comparing two sets costs one integer
comparison.  Tries share subtries (they form a DAG), and :meth:`SymbolTrie.union` merges any
number of them, memoised, on an explicit stack as deep as they share paths (never on Python's
call stack).

A run of single-edge, non-final nodes is stored as one *chain* node (its symbols and the node
below them): putting a string of length ``n`` in front of a set then costs one interned node,
not ``n``.  The representation stays canonical (a chain always ends on a node that is not a
chain, and no branch node has a single edge without being final), so equal sets still have
equal ids, and :meth:`SymbolTrie.digest` hashes a set as if every chain were unrolled.

Node ids 0, 1 and 2 are reserved: :data:`DEAD` (the empty set), :data:`START` (a marker the
displacement search gives its initial state; it is no set of strings) and :data:`EPS` (the
set holding only the empty string).  :class:`~formalgram_cfgzip.search.displacement.DisplacementSearch`
extends :class:`SymbolTrie` with its transitions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["DEAD", "EPS", "START", "CanonicalKey", "Edge", "SymbolTrie"]

Edge = tuple[int, int]  # (symbol, child node)
CanonicalKey = bytes

DEAD = 0  # the empty set of strings
START = 1  # reserved for the displacement search's initial state (nothing read yet)
EPS = 2  # the set holding only the empty string


def _union_key(ids: list[int]) -> tuple[int, ...]:
    """The distinct non-DEAD sets of ``ids``, sorted: the memo key of their union."""
    key = tuple(sorted(set(ids)))
    if key and key[0] == DEAD:
        key = key[1:]
    return key


class _Merge:
    """A union of tries in progress (:meth:`DisplacementSearch._union`).

    Either a chain merge (``prefix`` non-empty: the result is ``prefix`` in front of the
    union of ``parts[0]``) or a branch merge (the result has root edges ``syms[i]`` to the
    union of ``parts[i]``, and ``final`` as its final flag).  ``done`` collects the unions of
    the parts, in order.
    """

    __slots__ = ("done", "final", "key", "parts", "prefix", "syms")

    def __init__(
        self,
        key: tuple[int, ...],
        prefix: tuple[int, ...],
        final: bool,
        syms: list[int],
        parts: list[list[int]],
    ) -> None:
        self.key = key
        self.prefix = prefix
        self.final = final
        self.syms = syms
        self.parts = parts
        self.done: list[int] = []


class SymbolTrie:
    """Interned tries of symbol strings: node ids, equal sets equal ids (see the module docstring).

    Notes
    -----
    Every table grows until :meth:`reset` or :meth:`compact`; an interned node costs one
    dictionary entry and a few list slots.

    Examples
    --------
    >>> t = SymbolTrie()
    >>> ab, ac = t.string((1, 2)), t.string((1, 3))
    >>> u = t.union([ab, ac])
    >>> u == t.union([ac, ab, ab]), sorted(t.strings(u)), t.union([ab, DEAD]) == ab
    (True, [(1, 2), (1, 3)], True)
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every interned node (ids other than DEAD, START and EPS become meaningless).

        Digests (:meth:`digest`) stay valid across a reset.

        Notes
        -----
        O(1) (the old tables are dropped).

        Examples
        --------
        >>> t = SymbolTrie()
        >>> before = t.digest(t.string((5, 6)))
        >>> t.reset()
        >>> t.digest(t.string((5, 6))) == before
        True
        """
        # ids 0, 1, 2 are DEAD, START, EPS.  A *branch* node has a final flag and sorted
        # edges (and is final or has 0 or >= 2 edges); a *chain* node is a run of single-edge
        # non-final nodes: symbols (non-empty) and a base node that is no chain.
        self._final: list[bool] = [False, False, True]
        self._edges: list[tuple[Edge, ...]] = [(), ((-(1 << 40), DEAD),), ()]  # chains: filled lazily
        self._syms: list[tuple[int, ...]] = [(), (), ()]  # chain symbols; () for branch nodes
        self._base: list[int] = [-1, -1, -1]  # chain base; -1 for branch nodes
        self._ids: dict[tuple[bool, tuple[Edge, ...]], int] = {(False, ()): DEAD, (True, ()): EPS}
        self._chains: dict[tuple[tuple[int, ...], int], int] = {}
        self._unions: dict[tuple[int, ...], int] = {}
        self._digest: dict[int, bytes] = {}

    def compact(self, roots: list[int]) -> list[int]:
        """Reset the tables but keep the sets ``roots``: returns their ids in the new tables.

        A copying collection: the nodes reachable from ``roots`` are interned again, children
        first, in fresh tables (same structure, so still canonical); everything else, memo
        tables included, is dropped.  Ids from before (other than the returned ones and DEAD,
        START, EPS) become meaningless, as after :meth:`reset`.

        Parameters
        ----------
        roots : list of int
            Node ids to keep.

        Returns
        -------
        list of int
            Their ids in the new tables, in the same order.

        Notes
        -----
        O(nodes reachable from ``roots``), far less than recomputing the sets; iterative.

        Examples
        --------
        >>> t = SymbolTrie()
        >>> u = t.union([t.string((1, 2)), t.string((1, 3)), t.string((4,))])
        >>> digest = t.digest(u)
        >>> [kept] = t.compact([u])
        >>> t.digest(kept) == digest, sorted(t.strings(kept))
        (True, [(1, 2), (1, 3), (4,)])
        """
        finals, edges_of, syms_of, base_of = self._final, self._edges, self._syms, self._base
        self.reset()
        new: dict[int, int] = {DEAD: DEAD, START: START, EPS: EPS}
        todo = list(roots)
        while todo:
            n = todo[-1]
            if n in new:
                todo.pop()
                continue
            syms = syms_of[n]
            if syms:
                base = base_of[n]
                if base not in new:
                    todo.append(base)
                    continue
                todo.pop()
                new[n] = self._chain(syms, new[base])
                continue
            pending = [child for _, child in edges_of[n] if child not in new]
            if pending:
                todo.extend(pending)
                continue
            todo.pop()
            new[n] = self._node(finals[n], tuple((sym, new[child]) for sym, child in edges_of[n]))
        return [new[r] for r in roots]

    def string(self, symbols: Sequence[int]) -> int:
        """The set holding the one string ``symbols`` (canonical id); O(1) interning.

        Examples
        --------
        >>> t = SymbolTrie()
        >>> t.string(()) == EPS, sorted(t.strings(t.string((3, 1))))
        (True, [(3, 1)])
        """
        syms = tuple(symbols)
        return self._chain(syms, EPS) if syms else EPS

    def union(self, ids: list[int]) -> int:
        """The union of the sets ``ids`` (canonical id; DEAD for none).

        Notes
        -----
        Memoised per set of operands; a new union merges the tries as deep as they share
        paths.

        Examples
        --------
        >>> t = SymbolTrie()
        >>> sorted(t.strings(t.union([t.string((1,)), t.string((1, 2)), EPS])))
        [(), (1,), (1, 2)]
        """
        return self._union(ids) if ids else DEAD

    def _node(self, final: bool, edges: tuple[Edge, ...]) -> int:
        """The set with the given final flag and root edges (canonical id)."""
        if not final:
            if len(edges) == 1:
                return self._chain((edges[0][0],), edges[0][1])
            if not edges:
                return DEAD
        k = (final, edges)
        i = self._ids.get(k)
        if i is None:
            i = len(self._final)
            self._ids[k] = i
            self._final.append(final)
            self._edges.append(edges)
            self._syms.append(())
            self._base.append(-1)
        return i

    def _chain(self, syms: tuple[int, ...], base: int) -> int:
        """The set ``{syms · w : w in base}`` for a non-empty ``syms`` (canonical id)."""
        if base == DEAD:
            return DEAD
        below = self._syms[base]
        if below:
            syms = syms + below
            base = self._base[base]
        k = (syms, base)
        i = self._chains.get(k)
        if i is None:
            i = len(self._final)
            self._chains[k] = i
            self._final.append(False)
            self._edges.append(())
            self._syms.append(syms)
            self._base.append(base)
        return i

    def _edges_of(self, node: int) -> tuple[Edge, ...]:
        """Root edges of a set (for a chain: its first symbol and the rest of the chain)."""
        edges = self._edges[node]
        if edges:
            return edges
        syms = self._syms[node]
        if not syms:
            return edges
        base = self._base[node]
        rest = base if len(syms) == 1 else self._chain(syms[1:], base)
        edges = ((syms[0], rest),)
        self._edges[node] = edges
        return edges

    def _union(self, ids: list[int]) -> int:
        """The union of several sets (memoised n-ary merge of canonical tries).

        The merge descends as deep as the tries share paths (one level per symbol of the
        longest ``σ_out · # · reverse(σ_in)``), so it runs on an explicit stack of pending
        merges instead of Python recursion.  Each pending merge is computed exactly as a
        recursive merge would, children in increasing symbol order, so node ids are the same.
        """
        if len(ids) == 1:
            return ids[0]
        key = _union_key(ids)
        r = self._known_union(key)
        if r >= 0:
            return r
        pending = [self._open_merge(key)]
        while True:
            top = pending[-1]
            done = top.done
            parts = top.parts
            if len(done) < len(parts):
                part = parts[len(done)]
                if len(part) == 1:
                    done.append(part[0])
                    continue
                sub = _union_key(part)
                r = self._known_union(sub)
                if r >= 0:
                    done.append(r)
                else:
                    pending.append(self._open_merge(sub))
                continue
            if top.prefix:
                r = self._chain(top.prefix, done[0])
            else:
                r = self._node(top.final, tuple(zip(top.syms, done, strict=True)))
            self._unions[top.key] = r
            pending.pop()
            if not pending:
                return r
            pending[-1].done.append(r)

    def _known_union(self, key: tuple[int, ...]) -> int:
        """The union of the sets ``key`` (from :func:`_union_key`) if known without merging, else -1."""
        if not key:
            return DEAD
        if len(key) == 1:
            return key[0]
        r = self._unions.get(key)
        return -1 if r is None else r

    def _open_merge(self, key: tuple[int, ...]) -> _Merge:
        """The pending merge of the sets ``key`` (at least two, none DEAD), its parts to merge first.

        Chains that all start with the same symbol have their common prefix ``P`` factored
        out at once: ``⋃ P·s_i·B_i = P · ⋃ s_i·B_i`` (one part, then one chain).  Otherwise the
        root edges are grouped by symbol: one part per symbol, its children.
        """
        syms = self._syms
        first = syms[key[0]]
        if first:
            p = len(first)
            head = first[0]
            for h in key[1:]:
                s = syms[h]
                if not s or s[0] != head:
                    p = 0
                    break
                if len(s) < p:
                    p = len(s)
                i = 1
                while i < p and s[i] == first[i]:
                    i += 1
                p = i
            if p:
                rests: list[int] = []
                for h in key:
                    s = syms[h]
                    rests.append(self._base[h] if len(s) == p else self._chain(s[p:], self._base[h]))
                return _Merge(key, first[:p], False, [], [rests])
        final = False
        children: dict[int, list[int]] = {}
        for h in key:
            if self._final[h]:
                final = True
            for sym, child in self._edges_of(h):
                lst = children.get(sym)
                if lst is None:
                    children[sym] = [child]
                else:
                    lst.append(child)
        order = sorted(children)
        return _Merge(key, (), final, order, [children[sym] for sym in order])

    def edges(self, node: int) -> tuple[Edge, ...]:
        """The ``(symbol, child)`` root edges of a set, ascending (a chain: its first symbol).

        Separator symbols are negative.  O(1) (a chain's edge is built once).

        Examples
        --------
        >>> t = SymbolTrie()
        >>> [sym for sym, _ in t.edges(t.union([t.string((1, 2)), t.string((0,))]))]
        [0, 1]
        """
        return self._edges_of(node)

    def is_final(self, node: int) -> bool:
        """Whether the empty string belongs to the set ``node``; O(1)."""
        return self._final[node]

    def strings(self, node: int) -> frozenset[tuple[int, ...]]:
        """All strings of a set (for tests and debugging).

        Parameters
        ----------
        node : int
            A node id.

        Returns
        -------
        frozenset of tuple of int
            The strings of the set (in the displacement search: ``σ_out · # · reverse(σ_in)``,
            separators negative).

        Notes
        -----
        Exponential in the worst case.
        """
        out: set[tuple[int, ...]] = set()
        todo: list[tuple[int, tuple[int, ...]]] = [(node, ())]
        while todo:
            n, prefix = todo.pop()
            if self._final[n]:
                out.add(prefix)
            for sym, child in self._edges_of(n):
                todo.append((child, (*prefix, sym)))
        return frozenset(out)

    def digest(self, node: int) -> CanonicalKey:
        """SHA-256 digest of a trie: equal sets of strings <=> equal digests.

        Parameters
        ----------
        node : int
            A node id (for the digest of a displacement, a key from :meth:`key_of`).

        Returns
        -------
        bytes

        Notes
        -----
        Iterative post-order over the nodes not digested yet (memoised until the next
        reset); chains are hashed as if unrolled, so the digest does not depend on how the
        set is stored.
        """
        done = self._digest
        todo = [node]
        while todo:
            n = todo[-1]
            if n in done:
                todo.pop()
                continue
            syms = self._syms[n]
            if syms:
                base = self._base[n]
                if base not in done:
                    todo.append(base)
                    continue
                todo.pop()
                h = done[base]
                for j in range(len(syms) - 1, -1, -1):
                    h = hashlib.sha256(b"N" + syms[j].to_bytes(8, "little", signed=True) + h).digest()
                done[n] = h
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
