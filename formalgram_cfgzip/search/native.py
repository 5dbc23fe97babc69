"""The displacement search over a token trie in C: the compiled build's fast path of :func:`~formalgram_cfgzip.search.driver.walk_trie`.

:class:`NativeSearch` holds one GNF grammar's search in the C kernel
(``formalgram_cfgzip/search/_csearch.c``), which computes exactly what
:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch` computes (the same
canonical sets, so the same partition of the tokens and the same number of steps and units
of work) and walks a whole token trie level by level in one call.  It covers what a
per-request compression needs -- codes of one vocabulary in this process, and the domain
roots the native engine's tables are built from (:meth:`NativeSearch.popped`,
:meth:`~NativeSearch.edges`, :meth:`~NativeSearch.is_final`) -- and hands over to the Python
search for everything else: digests and compactions (a walk whose tables outgrow their cell
or memory budget, a union nested deeper than the kernel allows) and worker processes.
:func:`new_search` picks the kernel when it is built and allowed.

Set ``FORMALGRAM_NO_CSEARCH=1`` to run the Python search everywhere; the pure-Python build
(``FORMALGRAM_NO_MYPYC=1``) does not build the kernel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram.adjacency import below_bits
from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.pda import PDA
from formalgram_cfgzip.search.displacement import DisplacementSearch

__all__ = ["NativeSearch", "answering", "c_module", "new_search"]

_NO_LIMIT = (1 << 63) - 1  # the kernel's limits are int64


def c_module() -> Any:
    """The compiled search kernel, or ``None`` (not built, or ``FORMALGRAM_NO_CSEARCH=1``).

    Returns
    -------
    module or None

    Notes
    -----
    O(1) after the first import.

    Examples
    --------
    >>> m = c_module()
    >>> m is None or hasattr(m, "Search")
    True
    """
    if os.environ.get("FORMALGRAM_NO_CSEARCH", "") not in ("", "0"):
        return None
    try:
        from formalgram_cfgzip.search import _csearch
    except ImportError:
        return None
    return _csearch


class NativeSearch:
    """One GNF grammar's displacement search in the C kernel, with the Python search as fallback.

    Parameters
    ----------
    gnf : Grammar
        A trimmed grammar in Greibach normal form.
    module : module
        The kernel (:func:`c_module`).
    max_states, max_work, memory_budget
        As for :class:`~formalgram_cfgzip.search.displacement.DisplacementSearch`; the
        kernel counts the bytes its own tables hold against ``memory_budget`` (exactly what
        it adds) and hands a walk that needs more to the fallback, which compacts its tables
        and checks the resident memory.
    max_depth : int or None
        Deepest nesting of one trie union in the kernel (the C stack it may take); a walk
        that needs more is done by the fallback.  ``None``: the kernel's default, 20,000.
    dense_below : int or None
        Largest size in bytes of the kernel's bit-set copy of the distinct sets of symbols
        below each symbol; past it the kernel tests them on their sorted member lists alone
        (large specialised grammars).  ``None``: the kernel's default, 64 MiB.

    Attributes
    ----------
    gnf : Grammar
    pda : PDA
        The grammar's one-state PDA.
    byte_class : bytes
        Byte value -> byte class.
    num_byte_classes : int

    Raises
    ------
    GrammarError
        If ``gnf`` is not in Greibach normal form.
    ValueError
        If the grammar's tables do not fit the kernel (a million symbols or more, or more
        than 2**28 members in the distinct sets of symbols below each symbol);
        :func:`new_search` then takes the Python search.

    Notes
    -----
    Building costs :meth:`PDA.from_gnf <formalgram.pda.PDA.from_gnf>` and
    :func:`~formalgram.adjacency.below_bits`, plus copying their tables into the kernel.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> m = c_module()
    >>> search = NativeSearch(to_gnf(parse_gbnf('root ::= "(" root ")" | "x"')), m) if m else None
    >>> search is None or search.num_byte_classes == 4
    True
    """

    def __init__(
        self,
        gnf: Grammar,
        module: Any,
        *,
        max_states: int = 200_000,
        max_work: int | None = None,
        memory_budget: int | None = None,
        max_depth: int | None = None,
        dense_below: int | None = None,
    ) -> None:
        self.gnf = gnf
        self.max_states = max_states
        self.memory_budget = memory_budget
        pda = PDA.from_gnf(gnf)
        self.pda = pda
        self.byte_class = pda.byte_class_of
        self.num_byte_classes = pda.n_classes
        self._fallback: DisplacementSearch | None = None
        self._answered_by_fallback = False
        #: what may lie below each symbol (:func:`~formalgram.adjacency.below_bits`)
        self.below_bits: list[int] = below_bits(gnf)
        depth = {} if max_depth is None else {"max_depth": max_depth}
        if dense_below is not None:
            depth["dense_below"] = dense_below
        # the kernel reads the PDA's table and the bit sets of what may lie below each symbol
        self._c = module.Search(
            len(gnf.names),
            max(pda.n_classes, 1),
            pda.table,
            self.below_bits,
            max_states,
            -1 if max_work is None else max_work,
            **depth,
        )
        self._module = module
        self.twins: dict[int, int] = {}
        self.horizon: int | None = None

    def use_twins(self, twins: Mapping[int, int], horizon: int) -> None:
        """Never guess the symbols of ``twins``, for tokens of at most ``horizon`` bytes
        (:meth:`DisplacementSearch.use_twins`; the fallback does the same); forgets every table."""
        self._c.skip_guesses(sorted(twins))
        self.twins = dict(twins)
        self.horizon = horizon
        if self._fallback is not None:
            self._fallback.use_twins(twins, horizon)

    @property
    def expansions(self) -> int:
        """Steps computed so far (memo misses), the fallback's included."""
        extra = self._fallback.expansions if self._fallback is not None else 0
        return int(self._c.expansions) + extra

    @property
    def work(self) -> int:
        """Units of work so far (as :attr:`DisplacementSearch.work`), the fallback's included."""
        extra = self._fallback.work if self._fallback is not None else 0
        return int(self._c.work) + extra

    @property
    def max_work(self) -> int | None:
        """The work budget of the kernel's walks (``None``: none)."""
        w = int(self._c.max_work)
        return None if w < 0 else w

    @max_work.setter
    def max_work(self, value: int | None) -> None:
        self._c.max_work = -1 if value is None else value
        if self._fallback is not None:
            self._fallback.max_work = value

    def size(self) -> int:
        """Interned nodes plus memo entries of the kernel's tables; O(1)."""
        return int(self._c.size)

    def reset(self) -> None:
        """Forget every interned node and memo entry (O(1) apart from freeing the tables)."""
        self._c.reset()
        if self._fallback is not None:
            self._fallback.reset()

    def fallback(self) -> DisplacementSearch:
        """The Python search over the same grammar (built on first use, then kept).

        Returns
        -------
        DisplacementSearch
            With the same budgets (its work budget what is left of this one's).
        """
        if self._fallback is None:
            left = self.max_work
            if left is not None:
                left = max(left - int(self._c.work), 0)
            self._fallback = DisplacementSearch(
                self.gnf, max_states=self.max_states, max_work=left, memory_budget=self.memory_budget
            )
            if self.horizon is not None:
                self._fallback.use_twins(self.twins, self.horizon)
        return self._fallback

    def answered(self) -> DisplacementSearch | NativeSearch:
        """The search whose tables hold the last walk's domain roots: this one, or the fallback
        when the kernel handed that walk over."""
        if self._answered_by_fallback and self._fallback is not None:
            return self._fallback
        return self

    def edges(self, node: int) -> tuple[tuple[int, int], ...]:
        """The ``(symbol, child)`` root edges of a set, ascending (:meth:`DisplacementSearch.edges`); O(edges)."""
        out: tuple[tuple[int, int], ...] = self._c.edges(node)
        return out

    def is_final(self, node: int) -> bool:
        """Whether the empty string belongs to the set ``node``; O(1)."""
        return bool(self._c.is_final(node))

    def domain_arrays(self, roots: list[int], max_states: int, max_edges: int) -> tuple[int, list[bytes]]:
        """The kernel's construction of :func:`~formalgram_cfgzip.search.domains.domain_automaton`.

        Parameters
        ----------
        roots : list of int
            Class id -> domain root (a node of these tables, or ``-1``).
        max_states, max_edges : int
            The automaton's bounds.

        Returns
        -------
        (int, list of bytes)
            0 and the six int32 arrays of the automaton (``edge_start, edge_sym, edge_to,
            out, set_start, set_class``, native byte order); or 1 (past ``max_states``) or 2
            (past ``max_edges``) and no arrays.

        Raises
        ------
        ValueError
            If a root is not a node of these tables.

        Notes
        -----
        As the Python construction, without its objects: the reversed tries as offset
        tables, states and class sets hash-consed as int32 runs.
        """
        got: tuple[Any, ...] = self._c.domain_automaton(roots, max_states, max_edges)
        return int(got[0]), [bytes(b) for b in got[1:]]

    def popped(self, node: int) -> int:
        """The popped sequences of a set's displacement, reversed (:meth:`DisplacementSearch.popped`).

        Memoised per node; an iterative post-order over the ``σ_out`` part of the trie.
        """
        return int(self._c.popped(node))

    def walk(
        self,
        parents: list[npt.NDArray[np.int64]],
        labels: list[npt.NDArray[np.uint8]],
        end_positions: list[npt.NDArray[np.int64]],
        end_nodes: list[npt.NDArray[np.int64]],
        class_of: npt.NDArray[np.uint8],
        count: int,
        max_cells: int,
        domains: list[int] | None = None,
    ) -> npt.NDArray[np.int64] | None:
        """Displacement codes of the sequences of a trie (see :func:`~formalgram_cfgzip.search.driver.walk_trie`).

        Parameters
        ----------
        parents, labels, end_positions, end_nodes : list of numpy.ndarray
            The trie's levels (:class:`~formalgram_cfgzip.search.driver.SequenceTrie`).
        class_of : numpy.ndarray
            uint8: label -> byte class.
        count : int
            Number of sequences.
        max_cells : int
            Largest size of the tables during the walk (nodes plus memo entries).
        domains : list of int or None
            If a list (empty), it receives the domain root (:meth:`popped`) of each code, in
            order, as ``walk_trie`` fills it; when the walk is handed over, what the kernel
            put there is removed.

        Returns
        -------
        numpy.ndarray or None
            ``codes[i]``: a dense id of the displacement of sequence ``i`` (``-1`` for an
            empty one), numbered by first appearance level by level, as ``walk_trie``
            numbers them; ``None`` when the tables outgrew ``max_cells`` or the memory
            budget, or a union nested too deep: the caller then walks with :meth:`fallback`,
            which compacts its tables as it goes.

        Raises
        ------
        GrammarTooLarge
            When a set has more than ``max_states`` top symbols or the work passes its budget.

        Notes
        -----
        One kernel step per distinct (state, byte class) pair per level (memoised across
        walks), plus O(trie nodes) array work in C.
        """
        codes = np.full(count, -1, dtype=np.int64)
        budget = -1 if self.memory_budget is None else self.memory_budget
        status = int(
            self._c.walk(
                [np.ascontiguousarray(p, dtype=np.int64) for p in parents],
                [np.ascontiguousarray(x, dtype=np.uint8) for x in labels],
                [np.ascontiguousarray(x, dtype=np.int64) for x in end_positions],
                [np.ascontiguousarray(x, dtype=np.int64) for x in end_nodes],
                np.ascontiguousarray(class_of, dtype=np.uint8),
                codes,
                min(max_cells, _NO_LIMIT),
                budget,
                domains,
            )
        )
        m = self._module
        self._answered_by_fallback = status != m.OK
        if status == m.OK:
            return codes
        if status == m.STATES:
            raise GrammarTooLarge(
                "displacement search", self.max_states, "too many distinct stack tops for one token prefix"
            )
        if status == m.WORK:
            raise GrammarTooLarge("displacement search", self.max_work or 0, "units of work")
        if domains is not None:
            domains.clear()
        return None  # CELLS, MEMORY or DEEP: the Python search compacts its tables as it goes


def new_search(
    gnf: Grammar,
    *,
    native: bool = True,
    max_states: int = 200_000,
    max_work: int | None = None,
    memory_budget: int | None = None,
) -> DisplacementSearch | NativeSearch:
    """The displacement search of ``gnf``: in the C kernel when built and ``native``, else in Python.

    Parameters
    ----------
    gnf : Grammar
        A trimmed grammar in Greibach normal form.
    native : bool
        Whether the kernel may be used.
    max_states, max_work, memory_budget
        The budgets (:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch`).

    Returns
    -------
    DisplacementSearch or NativeSearch

    Raises
    ------
    GrammarError
        If ``gnf`` is not in Greibach normal form.

    Notes
    -----
    As the constructor of the search returned.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> gnf = to_gnf(parse_gbnf('root ::= "a"+'))
    >>> type(new_search(gnf, native=False)).__name__
    'DisplacementSearch'
    """
    module = c_module() if native else None
    if module is not None:
        try:
            return NativeSearch(
                gnf, module, max_states=max_states, max_work=max_work, memory_budget=memory_budget
            )
        except ValueError:
            pass
    return DisplacementSearch(gnf, max_states=max_states, max_work=max_work, memory_budget=memory_budget)


def answering(search: DisplacementSearch | NativeSearch) -> DisplacementSearch | NativeSearch:
    """The search whose tables hold what the last walk of ``search`` found (its domain roots).

    Parameters
    ----------
    search : DisplacementSearch or NativeSearch

    Returns
    -------
    DisplacementSearch or NativeSearch
        ``search`` itself, or for the kernel's search the fallback it handed that walk to
        (:meth:`NativeSearch.answered`).

    Notes
    -----
    O(1).

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> python = new_search(to_gnf(parse_gbnf('root ::= "a"+')), native=False)
    >>> answering(python) is python
    True
    """
    return search.answered() if isinstance(search, NativeSearch) else search
