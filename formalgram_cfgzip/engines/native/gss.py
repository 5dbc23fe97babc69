"""The native engine's state in pure Python: a graph-structured stack and the mask walk.

This is the reference kernel (the pure-Python build uses it; the C kernel
``_cnative.c`` implements the same operations on the same tables and is checked against it).

**The graph-structured stack (GSS).**  After a prefix ``w`` the PDA may hold many stacks;
they are kept as a DAG of *nodes*, each a stack cell with a symbol and a tuple of *parents*
(the nodes that may lie directly below it), node 0 being the bottom (the empty rest).  The
stacks after ``w`` are the paths from the current *tops* down to node 0.  Nodes never change
once a byte has been read, so an old tops tuple still describes its stacks exactly: a
rollback just goes back to it (and frees the nodes made after it).

**Reading one byte** (byte class ``c``).  For each top ``v`` with symbol ``X`` and each tail
``β`` of a rule of ``X`` for ``c`` (the push trie of
:mod:`~formalgram_cfgzip.engines.native.tables`):

* ``β`` empty: the parents of ``v`` become tops (they are *exposed*);
* otherwise one new node per trie node on ``β``'s path is used, shared by every top that
  pushes a tail through that trie node during this byte; the node of ``β``'s last symbol
  gets the parents of ``v`` as (some of) its parents, each other node the next one down.

Then the tops are merged by symbol: an exposed node with the symbol of a new trie root adds
its parents to that root, and several exposed nodes with one symbol and no new root become
one new node with the union of their parents.

*Why these merges are exact.*  Replacing nodes ``u1, ..., um`` of one symbol ``X`` by one node
``u`` whose parents are the union of theirs turns the stacks ``α · X · β`` (``α`` a path from a
top down to ``ui``, ``β`` a path below ``ui``) into ``α · X · β'`` for every ``α`` above *some*
``uj`` and every ``β'`` below *some* ``uj``: the same set exactly when all ``ui`` have the same
set of paths above them.  Tops have only the empty path above them.  A new node for a trie
node of ``B1 ... Bi`` has exactly one path above it, ``B1 ... B(i-1)`` (each node above it
has a single parent), so two tails that share a trie node share that path.  Merging two
nodes with the same symbol but different paths above them (say, two tails ending in ``B``
with different prefixes) would not be exact, and is never done.

**The mask walk.**  With ``D`` the domain automaton (top-first popped sequences, class sets on
states), the allowed classes after ``w`` are the outputs of the pairs ``(node, state)`` reached
by walking down from every top while ``D`` has a transition on the node's symbol.  Each pair
is visited once; the walk is as deep as the longest popped sequence.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.engines.native.tables import NativeTables

__all__ = ["BOTTOM", "PyState"]

BOTTOM = 0  # the node below every stack (no symbol); a top when the stack can be empty


class PyState:
    """One matcher's state over shared :class:`NativeTables`, in pure Python.

    Parameters
    ----------
    tables : NativeTables

    Notes
    -----
    Operations (same as the C kernel's ``State``): :meth:`accept_bytes`, :meth:`accept_class`,
    :meth:`accept_stop`, :meth:`rollback`, :meth:`reset`, :meth:`fill`, :meth:`stop_allowed`,
    :meth:`is_terminated`, :meth:`tops`, :meth:`node` and :meth:`info`.  The C kernel's prefix
    memo (``remember``) has no counterpart here: a fill always walks the stack.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> from formalgram_cfgzip.engines.native.tables import build_tables
    >>> text = 'root ::= "(" root ")" | "x"'
    >>> v = Vocabulary([b"(", b")", b"x", b"y"], stop_ids=())
    >>> tc = compress(text, v, progress=False)
    >>> s = PyState(build_tables(tc, text))
    >>> s.accept_bytes(b"(("), s.accept_bytes(b")"), s.accept_bytes(b"x")
    (True, False, True)
    >>> s.allowed_classes() == {int(tc.token_class[1])}
    True
    """

    def __init__(self, tables: NativeTables) -> None:
        self.tables = tables
        n = tables.num_symbols
        self._nsym = n
        self._bc = bytes(tables.byte_class.tobytes())
        self._tsym: list[int] = tables.trie_sym.tolist()
        self._tup: list[int] = tables.trie_up.tolist()
        keys: list[int] = tables.trans_key.tolist()
        starts: list[int] = tables.trans_start.tolist()
        pushes: list[int] = tables.trans_push.tolist()
        self._trans: dict[int, tuple[int, ...]] = {
            key: tuple(pushes[starts[j] : starts[j + 1]]) for j, key in enumerate(keys)
        }
        d = tables.domains
        es: list[int] = d.edge_start.tolist()
        sy: list[int] = d.edge_sym.tolist()
        to: list[int] = d.edge_to.tolist()
        self._dom: list[dict[int, int]] = [
            dict(zip(sy[es[i] : es[i + 1]], to[es[i] : es[i + 1]], strict=True)) for i in range(len(es) - 1)
        ]
        self._out: list[int] = d.out.tolist()
        ss: list[int] = d.set_start.tolist()
        sc: list[int] = d.set_class.tolist()
        self._sets: list[tuple[int, ...]] = [tuple(sc[ss[i] : ss[i + 1]]) for i in range(len(ss) - 1)]
        self._set_rows: dict[int, npt.NDArray[np.uint32]] = {}
        self.words = (tables.num_classes + 31) // 32
        self.last_pairs = 0  # (node, state) pairs visited by the last walk
        self._sym: list[int] = []
        self._par: list[tuple[int, ...]] = []
        self._hist: list[tuple[tuple[int, ...], bool, int]] = []  # (tops, terminated, node count)
        self.reset()

    # -- state ----------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the empty prefix."""
        t = self.tables
        self._sym = [-1, t.start_symbol]
        self._par = [(), (BOTTOM,)]
        tops = (BOTTOM, 1) if t.accepts_empty else (1,)
        self._hist = [(tops, False, 2)]

    def tops(self) -> tuple[int, ...]:
        """The current top nodes (ascending; ``BOTTOM`` among them when the prefix is in the language)."""
        return self._hist[-1][0]

    def node(self, i: int) -> tuple[int, tuple[int, ...]]:
        """Symbol and parents of node ``i`` (``-1`` and ``()`` for ``BOTTOM``)."""
        if not 0 <= i < len(self._sym):
            raise IndexError(f"node {i} does not exist")
        return self._sym[i], self._par[i]

    def info(self) -> dict[str, int]:
        """Sizes: nodes, parents (summed over nodes), position, last_pairs (pairs of the last walk)."""
        return {
            "nodes": len(self._sym),
            "parents": sum(len(p) for p in self._par),
            "position": len(self._hist) - 1,
            "last_pairs": self.last_pairs,
        }

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return self._hist[-1][1]

    def stop_allowed(self) -> bool:
        """Whether the prefix read so far is in the language (and no stop token was accepted)."""
        tops, done, _ = self._hist[-1]
        return not done and bool(tops) and tops[0] == BOTTOM

    # -- advancing ------------------------------------------------------------------------
    def accept_bytes(self, data: bytes) -> bool:
        """Read a token's bytes; ``False`` (state unchanged) if no stack survives them."""
        tops, done, _ = self._hist[-1]
        if done or not data:
            return False
        mark = len(self._sym)
        bc = self._bc
        for b in data:
            tops = self._step(tops, bc[b])
            if not tops:
                del self._sym[mark:]
                del self._par[mark:]
                return False
        self._hist.append((tops, False, len(self._sym)))
        return True

    def accept_class(self, data: bytes, cls: int) -> bool:
        """``accept_bytes(data)`` for a token of class ``cls`` (the C kernel's prefix memo follows
        the classes; this reference keeps none, so it reads the bytes alone)."""
        return self.accept_bytes(data)

    def accept_stop(self) -> bool:
        """Accept a stop token: ``True`` (and terminated) when the prefix is in the language."""
        if not self.stop_allowed():
            return False
        self._hist.append((self.tops(), True, len(self._sym)))
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens.

        Raises
        ------
        ValueError
            If ``num_tokens`` is negative or more than were accepted.
        """
        if num_tokens < 0 or num_tokens > len(self._hist) - 1:
            raise ValueError(f"cannot roll back {num_tokens} tokens: {len(self._hist) - 1} were accepted")
        if num_tokens:
            del self._hist[-num_tokens:]
            keep = self._hist[-1][2]
            del self._sym[keep:]
            del self._par[keep:]

    def compact(self, keep: int) -> None:
        """Forget all but the last ``keep`` accepted tokens (rollback reaches back ``keep``
        tokens at most) and free the nodes that no kept position's tops reach.

        The kept nodes are renumbered in their order, so every kept position's nodes stay
        below its node count and rollback keeps working on them.

        Raises
        ------
        ValueError
            If ``keep`` is negative.

        Notes
        -----
        O(nodes + parents) of the graph; the masks of every kept position are unchanged.
        """
        if keep < 0:
            raise ValueError("keep must be >= 0")
        first = len(self._hist) - 1 - keep
        if first <= 0:
            return
        sym, par = self._sym, self._par
        reached = [False] * len(sym)
        reached[BOTTOM] = True
        todo = [v for tops, _, _ in self._hist[first:] for v in tops]
        while todo:
            v = todo.pop()
            if not reached[v]:
                reached[v] = True
                todo.extend(par[v])
        newid = [-1] * len(sym)
        below = [0] * (len(sym) + 1)
        kept = 0
        for i, r in enumerate(reached):
            below[i] = kept
            if r:
                newid[i] = kept
                kept += 1
        below[len(sym)] = kept
        self._sym = [sym[i] for i in range(len(sym)) if reached[i]]
        self._par = [tuple(newid[u] for u in par[i]) for i in range(len(sym)) if reached[i]]
        self._hist = [
            (tuple(newid[v] for v in tops), done, below[min(count, len(sym))])
            for tops, done, count in self._hist[first:]
        ]

    def _new(self, symbol: int) -> int:
        self._sym.append(symbol)
        self._par.append(())
        return len(self._sym) - 1

    def _step(self, tops: tuple[int, ...], c: int) -> tuple[int, ...]:
        """The tops after reading one byte of class ``c`` (module docstring)."""
        sym, par = self._sym, self._par
        trans, tsym, tup = self._trans, self._tsym, self._tup
        base = c * self._nsym
        fresh: dict[int, int] = {}  # trie node -> its node for this byte
        pend: dict[int, list[tuple[int, ...]]] = {}  # new node -> parent tuples to unite
        roots: dict[int, int] = {}  # symbol -> new node of a trie root (a new top)
        exposed: list[tuple[int, ...]] = []
        for v in tops:
            if v == BOTTOM:
                continue
            pushes = trans.get(base + sym[v])
            if pushes is None:
                continue
            below = par[v]
            for tau in pushes:
                if tau < 0:
                    exposed.append(below)
                    continue
                g = fresh.get(tau)
                if g is None:
                    g = self._new(tsym[tau])
                    fresh[tau] = g
                    pend[g] = []
                    t, child = tau, g
                    while True:  # the nodes above, up to the trie root
                        up = tup[t]
                        if up < 0:
                            roots[tsym[t]] = child
                            break
                        h = fresh.get(up)
                        if h is not None:
                            pend[h].append((child,))
                            break
                        h = self._new(tsym[up])
                        fresh[up] = h
                        pend[h] = [(child,)]
                        t, child = up, h
                pend[g].append(below)
        new_tops = list(roots.values())
        bottom = False
        if exposed:
            alone: dict[int, list[int]] = {}  # symbol -> exposed nodes without a new root
            for below in exposed:
                for u in below:
                    if u == BOTTOM:
                        bottom = True
                        continue
                    r = roots.get(sym[u])
                    if r is not None:
                        pend[r].append(par[u])
                    else:
                        lst = alone.get(sym[u])
                        if lst is None:
                            alone[sym[u]] = [u]
                        elif u not in lst:
                            lst.append(u)
            for x, us in alone.items():
                if len(us) == 1:
                    new_tops.append(us[0])
                else:
                    g = self._new(x)
                    pend[g] = [par[u] for u in us]
                    new_tops.append(g)
        for g, parts in pend.items():
            if len(parts) == 1:
                par[g] = parts[0]
            else:
                united: set[int] = set()
                for p in parts:
                    united.update(p)
                par[g] = tuple(sorted(united, key=lambda u: (sym[u], u)))
        if bottom:
            new_tops.append(BOTTOM)
        return tuple(sorted(new_tops))

    # -- masks ----------------------------------------------------------------------------
    def allowed_sets(self) -> set[int]:
        """Ids of the domain automaton's class sets reached by the walk from the current tops."""
        dom, out, sym, par = self._dom, self._out, self._sym, self._par
        seen: set[tuple[int, int]] = set()
        hits: set[int] = set()
        todo = [(v, 0) for v in self.tops() if v != BOTTOM]
        while todo:
            v, d = todo.pop()
            d2 = dom[d].get(sym[v])
            if d2 is None:
                continue
            key = (v, d2)
            if key in seen:
                continue
            seen.add(key)
            o = out[d2]
            if o >= 0:
                hits.add(o)
            if dom[d2]:
                for u in par[v]:
                    if u != BOTTOM:
                        todo.append((u, d2))
        self.last_pairs = len(seen)
        return hits

    def allowed_classes(self) -> set[int]:
        """The classes allowed next (the stop class when the prefix is complete)."""
        if self.is_terminated():
            return set()
        out: set[int] = set()
        for s in self.allowed_sets():
            out.update(self._sets[s])
        if self.stop_allowed() and self.tables.stop_class >= 0:
            out.add(self.tables.stop_class)
        return out

    def fill(self, row: Any) -> None:
        """Write the class mask (int32 words, bit ``k`` = class ``k``) into the 1-D array ``row``."""
        acc = np.zeros(self.words, dtype=np.uint32)
        if not self.is_terminated():
            for s in self.allowed_sets():
                r = self._set_rows.get(s)
                if r is None:
                    r = _bits(self._sets[s], self.words)
                    self._set_rows[s] = r
                acc |= r
            stop = self.tables.stop_class
            if stop >= 0 and self.stop_allowed():
                acc[stop >> 5] |= np.uint32(1 << (stop & 31))
        row[:] = acc.view(np.int32)

    def forget_row(self) -> None:
        """Nothing to forget: this kernel has no row update (the C kernel's ``update_token``)."""

    def fill_into(self, bitmask: Any, index: int) -> None:
        """Write the class mask into row ``index`` of the 2-D int32 array ``bitmask``."""
        self.fill(bitmask[index])


def _bits(ids: tuple[int, ...], words: int) -> npt.NDArray[np.uint32]:
    """uint32 words with the bits ``ids`` set."""
    a = np.asarray(ids, dtype=np.int64)
    flat = np.zeros(words * 32, dtype=np.uint8)
    flat[a] = 1
    return np.packbits(flat, bitorder="little").view(np.uint32)
