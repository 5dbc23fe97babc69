"""The displacement search over a whole vocabulary: tokens advanced level by level, in one process or many.

:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch` maps one byte-class
sequence to an automaton state.  This module runs it over every searched token of a
vocabulary at once: the tokens are stored once per vocabulary as a trie of their bytes
(:func:`build_trie`, :func:`token_trie`), and :func:`walk_trie` walks it level by level for
one grammar: at depth ``k`` the trie nodes are grouped by (state of their parent, byte class
of their byte) with numpy, so each distinct pair costs one search step however many tokens
share it, and the search tables are compacted when they outgrow their budget.
:func:`search_vocabulary` splits the work over worker processes when asked to, and
:func:`pick_specialization` decides between two GNF grammars by the work each takes on a
sample of tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.native import NativeSearch, new_search
from formalgram_cfgzip.search.trie import DEAD, START, CanonicalKey
from formalgram_cfgzip.vocabulary import Vocabulary

Search = DisplacementSearch | NativeSearch  # the Python search or the C kernel's
NATIVE_CELLS = 16  # a cell of the C kernel's tables takes about 1/16 of a Python search's

__all__ = [
    "Search",
    "SequenceTrie",
    "TokenTable",
    "build_trie",
    "pick_specialization",
    "reset_size",
    "run_levels",
    "search_vocabulary",
    "token_table",
    "token_trie",
    "walk_trie",
]


@dataclass(frozen=True, eq=False)
class TokenTable:
    """The searched tokens of a vocabulary as flat numpy arrays (built once per vocabulary).

    Attributes
    ----------
    ids : numpy.ndarray
        int64 token ids of the searched tokens: the non-empty text tokens that are neither
        special nor stop tokens.
    offsets, lengths : numpy.ndarray
        int64: token ``ids[i]`` is ``flat[offsets[i] : offsets[i] + lengths[i]]``.
    flat : numpy.ndarray
        uint8: the bytes of every token id below ``vocab.size``, concatenated.
    all_lengths : numpy.ndarray
        int64: the byte length of every token id below ``vocab.size`` (``-1`` for holes).
    by_length : numpy.ndarray or None
        int64 positions into ``ids``, shortest token first (lowest id on ties): the order in
        which a class's representative is chosen (:func:`rep_order`, which makes it when
        ``None``).
    """

    ids: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    flat: npt.NDArray[np.uint8]
    all_lengths: npt.NDArray[np.int64]
    by_length: npt.NDArray[np.int64] | None = None


def rep_order(toks: TokenTable) -> npt.NDArray[np.int64]:
    """Positions into ``toks.ids``, by byte length then id (``toks.by_length`` when kept).

    Examples
    --------
    >>> t = TokenTable(np.array([3, 5, 7]), np.zeros(3, np.int64), np.array([2, 1, 1]),
    ...                np.zeros(0, np.uint8), np.zeros(0, np.int64))
    >>> rep_order(t).tolist()
    [1, 2, 0]
    """
    if toks.by_length is not None:
        return toks.by_length
    order: npt.NDArray[np.int64] = np.lexsort((toks.ids, toks.lengths)).astype(np.int64)
    return order


def token_table(vocab: Vocabulary) -> TokenTable:
    """Flat arrays of ``vocab``'s searched tokens (kept, with the vocabulary's other preparations,
    by :class:`~formalgram_cfgzip.compress.PreparedVocabulary`).

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary.

    Returns
    -------
    TokenTable

    Notes
    -----
    O(total token bytes) numpy work.

    Examples
    --------
    >>> v = Vocabulary([b"ab", b"", b"c", b"<s>"], special_ids=[3])
    >>> t = token_table(v)
    >>> t.ids.tolist(), t.lengths.tolist(), bytes(t.flat)
    ([0, 2], [2, 1], b'abc<s>')
    """
    tokens = vocab.tokens
    n = len(tokens)
    holes = [i for i, t in enumerate(tokens) if t is None] if tokens.count(None) else []
    filled: Sequence[bytes] = (
        [b"" if t is None else t for t in tokens] if holes else cast("tuple[bytes, ...]", tokens)
    )
    lengths = np.fromiter(map(len, filled), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    flat = np.frombuffer(b"".join(filled), dtype=np.uint8)
    searched = lengths > 0
    excluded = sorted(vocab.special_ids | vocab.stop_ids)
    if excluded:
        searched[np.asarray(excluded, dtype=np.int64)] = False
    all_lengths = lengths.copy()
    if holes:
        all_lengths[np.asarray(holes, dtype=np.int64)] = -1
    ids = np.flatnonzero(searched).astype(np.int64)
    by_length = np.lexsort((ids, lengths[ids])).astype(np.int64)
    return TokenTable(ids, starts[ids], lengths[ids], flat, all_lengths, by_length)


@dataclass(frozen=True, eq=False)
class SequenceTrie:
    """Sequences of small integers (bytes, byte classes) as a trie stored level by level.

    Node ``j`` of depth ``k + 1`` is the prefix of length ``k + 1`` of some sequences; the
    nodes of one depth are numbered in increasing (parent, label) order, and depth 0 holds
    the root alone (node 0).

    Attributes
    ----------
    parents : tuple of numpy.ndarray
        ``parents[k][j]`` (int64): the node of depth ``k`` that node ``j`` of depth ``k + 1``
        extends.
    labels : tuple of numpy.ndarray
        ``labels[k][j]`` (uint8): the symbol by which it extends it.
    end_positions, end_nodes : tuple of numpy.ndarray
        int64: the sequences of length ``k + 1`` are ``end_positions[k]`` (indices into the
        sequences given to :func:`build_trie`) and end at nodes ``end_nodes[k]`` of depth
        ``k + 1``.
    size : int
        Number of nodes below the root (the numpy work of one :func:`walk_trie`).
    """

    parents: tuple[npt.NDArray[np.int64], ...]
    labels: tuple[npt.NDArray[np.uint8], ...]
    end_positions: tuple[npt.NDArray[np.int64], ...]
    end_nodes: tuple[npt.NDArray[np.int64], ...]
    size: int


def _group(
    keys: npt.NDArray[np.int64], span: int, live: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The distinct values of ``keys`` (all in ``0 .. span - 1``), sorted, and the index of
    each key among them: by marking a dense table when ``span`` is small next to the
    ``live`` keys (no sort), else by ``np.unique``."""
    if span <= 4 * live + 65536:
        seen = np.zeros(span, dtype=bool)
        seen[keys] = True
        uniq = np.flatnonzero(seen)
        slot = np.zeros(span, dtype=np.int64)
        slot[uniq] = np.arange(uniq.size, dtype=np.int64)
        return uniq, slot[keys]
    uniq, inverse = np.unique(keys, return_inverse=True)
    return uniq, inverse.reshape(-1)


def build_trie(
    symbols: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    alphabet: int = 256,
) -> SequenceTrie:
    """The trie of the sequences ``symbols[offsets[i] : offsets[i] + lengths[i]]`` (all non-empty).

    Parameters
    ----------
    symbols : numpy.ndarray
        uint8 symbols of the concatenated sequences, each below ``alphabet``.
    offsets, lengths : numpy.ndarray
        int64 start and length (at least 1) of each sequence.
    alphabet : int
        Number of distinct symbols (256 for bytes).

    Returns
    -------
    SequenceTrie

    Notes
    -----
    O(total length) numpy work: the sequences still running at depth ``k`` are grouped by
    (node of depth ``k``, next symbol), densely or by sorting, whichever is cheaper.

    Examples
    --------
    >>> seqs = [b"ab", b"a", b"b", b"ab"]
    >>> flat = np.frombuffer(b"".join(seqs), dtype=np.uint8)
    >>> t = build_trie(flat, np.array([0, 2, 3, 4]), np.array([2, 1, 1, 2]))
    >>> [p.tolist() for p in t.parents], [bytes(lab) for lab in t.labels], t.size
    ([[0, 0], [0]], [b'ab', b'b'], 3)
    >>> [e.tolist() for e in t.end_positions], [e.tolist() for e in t.end_nodes]
    ([[1, 2], [0, 3]], [[0, 1], [0, 0]])
    """
    m = int(lengths.size)
    parents: list[npt.NDArray[np.int64]] = []
    labels: list[npt.NDArray[np.uint8]] = []
    end_positions: list[npt.NDArray[np.int64]] = []
    end_nodes: list[npt.NDArray[np.int64]] = []
    if m == 0:
        return SequenceTrie((), (), (), (), 0)
    order = np.argsort(-lengths, kind="stable")  # longest first: the running ones are a prefix
    starts = offsets[order]
    neg = -lengths[order]
    depth = int(-neg[0])
    running = np.searchsorted(neg, -np.arange(depth + 1, dtype=np.int64), side="left").tolist()
    node = np.zeros(m, dtype=np.int64)  # node of each running sequence at the current depth
    width = 1  # nodes at the current depth
    size = 0
    for k in range(depth):
        live = running[k]
        key = node[:live] * alphabet + symbols[starts[:live] + k]
        uniq, node = _group(key, width * alphabet, live)
        parents.append(uniq // alphabet)
        labels.append((uniq % alphabet).astype(np.uint8))
        width = int(uniq.size)
        size += width
        done = running[k + 1]
        end_positions.append(order[done:live].astype(np.int64))
        end_nodes.append(node[done:live])
    return SequenceTrie(tuple(parents), tuple(labels), tuple(end_positions), tuple(end_nodes), size)


SMALL_LEVEL = 1024  # trie levels with at most this many nodes are walked without numpy


def token_trie(toks: TokenTable, sample: int = 1) -> SequenceTrie:
    """The trie of the bytes of every ``sample``-th token of ``toks`` (kept per vocabulary by
    :meth:`PreparedVocabulary.sample_trie <formalgram_cfgzip.compress.PreparedVocabulary.sample_trie>`).

    Parameters
    ----------
    toks : TokenTable
        The searched tokens (:func:`token_table`).
    sample : int
        Keep tokens ``0, sample, 2 * sample, ...`` of ``toks`` (sequence ``i`` of the trie is
        token ``toks.ids[i * sample]``).

    Returns
    -------
    SequenceTrie

    Notes
    -----
    :func:`build_trie` of ``1/sample`` of the token bytes.

    Examples
    --------
    >>> t = token_trie(token_table(Vocabulary([b"ab", b"a", b"b"])))
    >>> t.size, [e.tolist() for e in t.end_positions]
    (3, [[1, 2], [0]])
    """
    return build_trie(toks.flat, toks.offsets[::sample], toks.lengths[::sample])


def reset_size(memory_budget: int | None) -> int:
    """Search-table size (:meth:`DisplacementSearch.size`) above which :func:`run_levels` compacts.

    Parameters
    ----------
    memory_budget : int or None
        The search's memory budget in bytes (``None``: sized as for 8 GiB).

    Returns
    -------
    int
        ``budget / 1600`` cells, at least 200,000 (the peak memory this gives on the shared
        grammars: ``docs/benchmarks.md``, "Offline compression").

    Notes
    -----
    O(1).

    Examples
    --------
    >>> reset_size(4 << 30), reset_size(None), reset_size(1 << 20)
    (2684354, 5368709, 200000)
    """
    return max(200_000, (memory_budget or (8 << 30)) // 1600)


def _class_of(search: Search) -> npt.NDArray[np.uint8]:
    """Byte value -> byte class of ``search``, as a numpy table."""
    return np.frombuffer(bytes(search.byte_class), dtype=np.uint8)


def pick_specialization(
    plain: Grammar,
    special: Grammar,
    toks: TokenTable,
    max_states: int,
    memory_budget: int | None,
    factor: int,
    sample: int,
    trie: SequenceTrie | None = None,
    native: bool = False,
) -> tuple[Grammar, Search]:
    """Choose between a GNF and its specialisation by the work each takes on a sample of tokens.

    Parameters
    ----------
    plain, special : Grammar
        Two GNF grammars of one language (the second usually
        :func:`~formalgram.transforms.specialize.specialize_terminal_symbols` of the first).
    toks : TokenTable
        The vocabulary's searched tokens.
    max_states, memory_budget : int, int or None
        The budgets of each :class:`DisplacementSearch`.
    factor : int
        ``special`` is kept if its search finishes within ``factor`` times the work of the
        plain one (and within the memory budget).
    sample : int
        Both searches run on every ``sample``-th searched token.
    trie : SequenceTrie or None
        The trie of those tokens (``token_trie(toks, sample)``, built when ``None``).
    native : bool
        Search with the C kernel when it is built (:func:`~formalgram_cfgzip.search.native.new_search`;
        the same work, so the same choice).

    Returns
    -------
    (Grammar, DisplacementSearch or NativeSearch)
        The chosen grammar and its search, whose tables the full search then reuses.

    Notes
    -----
    The work measure (:attr:`DisplacementSearch.work`) is deterministic, so the choice does
    not depend on the machine or its load.  Costs two searches of ``1/sample`` of the tokens,
    the second bounded by ``factor`` times the first.

    Examples
    --------
    >>> from formalgram import parse_gbnf, specialize_terminal_symbols, to_gnf
    >>> plain = to_gnf(parse_gbnf('root ::= "(" "*" ")" | "*" root'))
    >>> toks = token_table(Vocabulary([b"(", b"*", b"*)", b"**"]))
    >>> special = specialize_terminal_symbols(plain)
    >>> pick_specialization(plain, special, toks, 1000, None, 0, 1)[0] is plain
    True
    >>> pick_specialization(plain, special, toks, 1000, None, 10, 1)[0] is special
    True
    """
    if trie is None:
        trie = token_trie(toks, sample)
    count = int(toks.lengths[::sample].size)
    cells = reset_size(memory_budget)
    first = new_search(plain, native=native, max_states=max_states, memory_budget=memory_budget)
    walk_trie(first, trie, _class_of(first), count, False, cells, False)
    budget = factor * max(first.work, 1000)
    if first.size() > cells // 4:
        first.reset()  # do not hold both searches' tables at once (memory); redone if kept
    try:
        second = new_search(
            special, native=native, max_states=max_states, memory_budget=memory_budget, max_work=budget
        )
        walk_trie(second, trie, _class_of(second), count, False, cells, False)
    except GrammarTooLarge:
        return plain, first
    second.max_work = None
    return special, second


def search_vocabulary(
    gnf: Grammar,
    search: Search,
    toks: TokenTable,
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
    trie: SequenceTrie | None = None,
    domains: list[int] | None = None,
) -> tuple[npt.NDArray[np.int64], int, int]:
    """Search every token of ``toks`` over ``gnf`` (with ``search`` when in this process).

    Parameters
    ----------
    gnf : Grammar
        The GNF grammar of ``search`` (sent to the worker processes).
    search : DisplacementSearch or NativeSearch
        The search over ``gnf``, used when the tokens are searched in this process.
    toks : TokenTable
        The tokens.
    workers : int
        Worker processes; with more than one and over 2,000 tokens, each worker builds its
        own search once and searches slices of tokens that share their first byte classes.
    progress : bool
        Show a progress bar on stderr.
    max_states, memory_budget : int, int or None
        The budgets of each worker's search.
    trie : SequenceTrie or None
        The trie of the tokens' bytes (``token_trie(toks)``, built when ``None``).
    domains : list of int or None
        Filled as by :func:`walk_trie` (one domain root of ``search`` per code) when the
        tokens are searched in this process; left empty when worker processes search them
        (their tables are theirs).

    Returns
    -------
    (numpy.ndarray, int, int)
        A dense displacement code per searched token (equal codes <=> equal displacements;
        ``-1``: empty displacement), and the expansions and work done (summed over workers).

    Raises
    ------
    GrammarTooLarge
        If a search exceeds its budget.

    Notes
    -----
    The cost of :func:`run_levels` over all tokens, shared among the workers.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> gnf = to_gnf(parse_gbnf('root ::= "(" root ")" | "x"'))
    >>> toks = token_table(Vocabulary([b"(", b"((", b")", b"x)", b"y"]))
    >>> codes, _, _ = search_vocabulary(gnf, DisplacementSearch(gnf), toks, 1, False, 1000, None)
    >>> codes.tolist()  # "(" and "((" differ, "y" is valid nowhere
    [0, 2, 1, 3, -1]
    """
    cells = reset_size(memory_budget)
    class_of = _class_of(search)
    if workers > 1 and toks.ids.size > 2000:
        class_bytes = class_of[toks.flat]
        return _run_parallel(gnf, class_bytes, toks, workers, progress, max_states, memory_budget, cells)
    count = int(toks.ids.size)
    if trie is None:
        trie = token_trie(toks)
    codes, _ = walk_trie(search, trie, class_of, count, progress, cells, False, domains)
    return codes, search.expansions, search.work


def _progress_bar(total: int, enabled: bool, unit: str) -> Any:
    """A tqdm bar (``None`` when ``enabled`` is false, so that tqdm is not even imported)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="displacements", unit=unit, mininterval=0.5, leave=False)


def run_levels(
    search: DisplacementSearch,
    class_bytes: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    progress: bool,
    reset_cells: int,
    want_digests: bool,
) -> tuple[npt.NDArray[np.int64], list[CanonicalKey]]:
    """Displacement codes of byte-class sequences: :func:`walk_trie` over their trie.

    Sequence ``i`` is ``class_bytes[offsets[i] : offsets[i] + lengths[i]]`` (non-empty).

    Parameters
    ----------
    search : DisplacementSearch
        The search (its tables are kept, and compacted above ``reset_cells``).
    class_bytes : numpy.ndarray
        uint8 byte classes of the concatenated sequences.
    offsets, lengths : numpy.ndarray
        int64 start and length of each sequence.
    progress, reset_cells, want_digests
        As in :func:`walk_trie`.

    Returns
    -------
    (numpy.ndarray, list of bytes)
        As :func:`walk_trie`, one code per sequence.

    Notes
    -----
    :func:`build_trie` plus :func:`walk_trie`.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> search = DisplacementSearch(to_gnf(parse_gbnf('root ::= "a"+ "b"')))
    >>> seqs = [search.byte_class[c] for c in b"aaaab"]
    >>> cb = np.asarray(seqs, dtype=np.uint8)
    >>> codes, _ = run_levels(search, cb, np.array([0, 1, 0, 4]), np.array([1, 1, 2, 1]), False, 10**6, False)
    >>> codes.tolist()
    [0, 0, 0, 1]
    """
    ncls = search.num_byte_classes
    trie = build_trie(class_bytes, offsets, lengths, ncls)
    identity = np.arange(ncls, dtype=np.uint8)
    return walk_trie(search, trie, identity, int(lengths.size), progress, reset_cells, want_digests)


def walk_trie(
    search: Search,
    trie: SequenceTrie,
    class_of: npt.NDArray[np.uint8],
    count: int,
    progress: bool,
    reset_cells: int,
    want_digests: bool,
    domains: list[int] | None = None,
) -> tuple[npt.NDArray[np.int64], list[CanonicalKey]]:
    """Displacement codes of the sequences of a trie, every node advanced once, depth by depth.

    The state of a node is ``search``'s state after reading its prefix (mapped through
    ``class_of``).  At depth ``k`` the nodes are grouped by (state of their parent, class of
    their label): each distinct pair costs one :meth:`DisplacementSearch.step`, however many
    nodes share it (prefixes that reach the same state are merged), and the grouping itself
    is numpy work.

    Parameters
    ----------
    search : DisplacementSearch or NativeSearch
        The search (its tables are kept, and compacted above ``reset_cells``).  The C
        kernel's search walks the whole trie in one call when no digests are asked for and
        its tables stay within ``NATIVE_CELLS * reset_cells`` cells (its cells are that much
        smaller) and its memory budget; otherwise its Python fallback
        (:meth:`NativeSearch.fallback`) walks it as described here.
    trie : SequenceTrie
        The sequences (:func:`build_trie`).
    class_of : numpy.ndarray
        uint8: label -> byte class of ``search`` (``search.byte_class`` for a trie of
        bytes, the identity for a trie of byte classes).
    count : int
        Number of sequences in the trie (the length of the result).
    progress : bool
        Show a progress bar on stderr.
    reset_cells : int
        Search-table size (:meth:`DisplacementSearch.size`) above which the tables are
        compacted to the states of the nodes that have children.
    want_digests : bool
        Return the digest of every code (for merging the codes of several processes).
    domains : list of int or None
        If a list (empty), it receives, for each code in order, the domain root of its
        displacement: :meth:`DisplacementSearch.popped` of the set, a node of ``search``'s
        tables as they are when the walk returns (the roots are kept through every
        compaction).  What :func:`~formalgram_cfgzip.search.domains.class_domains` reads.

    Returns
    -------
    (numpy.ndarray, list of bytes)
        ``codes[i]`` is a dense id of the displacement of sequence ``i`` (equal ids <=> equal
        displacements; ``-1`` for an empty one).  ``digests[code]`` is its
        process-independent digest when ``want_digests`` is true or the search tables had to
        be compacted on the way (their node ids do not survive it); otherwise ``digests``
        is empty.

    Raises
    ------
    ValueError
        If the trie is deeper than ``search.horizon`` (a search that skips the guesses of
        chain symbols is exact only up to it: :meth:`DisplacementSearch.use_twins`).

    Notes
    -----
    One step per distinct (state, byte class) pair per depth, plus O(trie nodes) numpy work.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> search = DisplacementSearch(to_gnf(parse_gbnf('root ::= "a"+ "b"')))
    >>> toks = token_table(Vocabulary([b"a", b"aa", b"ab", b"b", b"ba"]))
    >>> class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    >>> codes, _ = walk_trie(search, token_trie(toks), class_of, 5, False, 10**6, False)
    >>> codes.tolist()  # "a" and "aa" alike, "ab" (also at the start) unlike "b"; "ba" valid nowhere
    [0, 0, 2, 1, -1]
    """
    if search.horizon is not None and len(trie.parents) > search.horizon:
        raise ValueError(
            f"a trie {len(trie.parents)} deep for a search that skips the guesses of twins "
            f"(exact for tokens of at most {search.horizon} bytes)"
        )
    if isinstance(search, NativeSearch):
        if not want_digests:
            found = search.walk(
                list(trie.parents),
                list(trie.labels),
                list(trie.end_positions),
                list(trie.end_nodes),
                class_of,
                count,
                reset_cells * NATIVE_CELLS,
                domains,
            )
            if found is not None:
                return found, []
        search = search.fallback()
    codes = np.full(count, -1, dtype=np.int64)
    depth = len(trie.parents)
    if depth == 0:
        return codes, []
    ncls = search.num_byte_classes
    classes: list[int] = class_of.tolist()
    # compact state index of each node of the current depth: a numpy array on large levels,
    # a list on small ones (SMALL_LEVEL), whichever the level was computed as
    comp = np.zeros(1, dtype=np.int64)
    comp_list: list[int] = [0]
    small = False
    nodes: list[int] = [START]  # compact state index -> automaton node
    coder = _Coder(search, want_digests, domains)
    bar = _progress_bar(trie.size, progress, "node")
    try:
        for k in range(depth):
            parents = trie.parents[k]
            live = int(parents.size)
            # the state of each distinct (state, class) pair, numbered in order of first appearance
            index_of: dict[int, int] = {}
            if live <= SMALL_LEVEL:  # a few nodes: plain loops cost less than numpy calls
                prev = comp_list if small else comp.tolist()
                pair_index: dict[int, int] = {}
                comp_list = []
                for p, label in zip(parents.tolist(), trie.labels[k].tolist(), strict=True):
                    c = classes[label]
                    pair = prev[p] * ncls + c
                    j = pair_index.get(pair)
                    if j is None:
                        node = nodes[prev[p]]
                        if node != DEAD:
                            node = search.step(node, c)  # a native call when compiled
                        j = index_of.get(node)
                        if j is None:
                            j = len(index_of)
                            index_of[node] = j
                        pair_index[pair] = j
                    comp_list.append(j)
                small = True
                nodes = list(index_of)
                ending = trie.end_nodes[k]
                if ending.size > 2 * live:  # many sequences end on few nodes (a trie of classes)
                    ending_comp = np.asarray(comp_list, dtype=np.int64)[ending]
                    codes[trie.end_positions[k]] = _codes_of(coder, nodes, ending_comp)
                elif ending.size:
                    code_of: dict[int, int] = {}
                    got: list[int] = []
                    for e in ending.tolist():
                        j = comp_list[e]
                        code = code_of.get(j)
                        if code is None:
                            code = coder.code(nodes[j])
                            code_of[j] = code
                        got.append(code)
                    codes[trie.end_positions[k]] = np.asarray(got, dtype=np.int64)
            else:
                previous = np.asarray(comp_list, dtype=np.int64) if small else comp
                small = False
                pairs = previous[parents] * ncls + class_of[trie.labels[k]]
                uniq, inverse = _group(pairs, len(nodes) * ncls, live)
                new_index: list[int] = []
                for u in uniq.tolist():
                    node = nodes[u // ncls]
                    if node != DEAD:
                        node = search.step(node, u % ncls)
                    j = index_of.get(node)
                    if j is None:
                        j = len(index_of)
                        index_of[node] = j
                    new_index.append(j)
                comp = np.asarray(new_index, dtype=np.int64)[inverse]
                nodes = list(index_of)
                ending = trie.end_nodes[k]
                if ending.size:
                    codes[trie.end_positions[k]] = _codes_of(coder, nodes, comp[ending])
            if bar is not None:
                bar.update(live)
            if k + 1 < depth and search.size() > reset_cells:
                coder.use_digests()  # key node ids die with the compaction
                children = trie.parents[k + 1]
                used = np.zeros(len(nodes), dtype=bool)
                # the states of the nodes that have children
                used[np.asarray(comp_list, dtype=np.int64)[children] if small else comp[children]] = True
                kept = [node if keep else DEAD for node, keep in zip(nodes, used.tolist(), strict=True)]
                if domains is None:
                    nodes = search.compact(kept)
                else:  # the domain roots found so far survive the compaction too
                    moved = search.compact(kept + domains)
                    nodes = moved[: len(kept)]
                    domains[:] = moved[len(kept) :]
    finally:
        if bar is not None:
            bar.close()
    return codes, coder.digests


def _codes_of(coder: _Coder, nodes: list[int], ending_comp: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The codes of the compact states ``ending_comp`` (each distinct state coded once)."""
    code_of_comp = np.full(len(nodes), -1, dtype=np.int64)
    present = np.bincount(ending_comp, minlength=len(nodes))
    for j in np.flatnonzero(present).tolist():
        code_of_comp[j] = coder.code(nodes[j])
    return code_of_comp[ending_comp]


class _Coder:
    """Dense displacement codes of automaton nodes, by key node or, once asked to, by digest."""

    def __init__(self, search: DisplacementSearch, digests: bool, domains: list[int] | None = None) -> None:
        self.search = search
        self.by_digest = digests
        self.domains = domains  # code -> DisplacementSearch.popped of its set, when asked for
        self.of_key: dict[int, int] = {}
        self.of_digest: dict[CanonicalKey, int] = {}
        self.digests: list[CanonicalKey] = []
        self.keys: list[int] = []  # code -> key node (valid until the tables are compacted)

    def code(self, node: int) -> int:
        """The code of ``node``'s displacement (``-1`` for DEAD)."""
        if node == DEAD:
            return -1
        key = self.search.key_of(node)
        if self.by_digest:
            d = self.search.digest(key)
            code = self.of_digest.get(d)
            if code is None:
                code = len(self.digests)
                self.of_digest[d] = code
                self.digests.append(d)
                if self.domains is not None:
                    self.domains.append(self.search.popped(node))
            return code
        code = self.of_key.get(key, -1)
        if code < 0:
            code = len(self.keys)
            self.of_key[key] = code
            self.keys.append(key)
            if self.domains is not None:
                self.domains.append(self.search.popped(node))
        return code

    def use_digests(self) -> None:
        """Switch to digests (before the search's tables are compacted); codes are kept."""
        if not self.by_digest:
            for key in self.keys:
                d = self.search.digest(key)
                self.of_digest[d] = len(self.digests)
                self.digests.append(d)
            self.by_digest = True


_WORKER: list[tuple[DisplacementSearch, int]] = []  # this worker process's search and reset size


def _worker_init(
    names: tuple[str, ...],
    masks: tuple[int, ...],
    start: int,
    rules: tuple[tuple[int, tuple[int, ...]], ...],
    max_states: int,
    memory_budget: int | None,
    reset_cells: int,
) -> None:
    """Build the worker process's search once (the pool's initializer)."""
    gnf = Grammar.from_ids(names, masks, start, rules)
    _WORKER.append((DisplacementSearch(gnf, max_states=max_states, memory_budget=memory_budget), reset_cells))


def _worker(
    part: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]],
) -> tuple[npt.NDArray[np.int64], list[CanonicalKey], int, int]:
    """Codes and digests of one slice of tokens, with the expansions and work it took."""
    search, reset_cells = _WORKER[-1]
    class_bytes, offsets, lengths = part
    before = (search.expansions, search.work)
    codes, digests = run_levels(search, class_bytes, offsets, lengths, False, reset_cells, True)
    return codes, digests, search.expansions - before[0], search.work - before[1]


def _run_parallel(
    gnf: Grammar,
    class_bytes: npt.NDArray[np.uint8],
    toks: TokenTable,
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
    reset_cells: int,
) -> tuple[npt.NDArray[np.int64], int, int]:
    """:func:`search_vocabulary` over ``workers`` processes; codes merged through their digests."""
    from concurrent.futures import ProcessPoolExecutor

    # order the tokens by their first byte classes, so that each worker's contiguous slices
    # keep shared prefixes together; each worker process builds its search once
    # (initializer) and keeps its memo across its slices
    offsets = toks.offsets
    lengths = toks.lengths
    m = int(lengths.size)
    sort_keys = []
    for j in range(3, -1, -1):
        at = np.minimum(offsets + j, class_bytes.size - 1)
        sort_keys.append(np.where(lengths > j, class_bytes[at].astype(np.int64), -1))
    order = np.lexsort(tuple(sort_keys))
    chunks = max(workers * 4, 1)
    size = (m + chunks - 1) // chunks
    pieces = [order[i : i + size] for i in range(0, m, size)]
    parts = []
    for piece in pieces:
        lens = lengths[piece]
        offs = np.zeros(piece.size, dtype=np.int64)
        if piece.size > 1:
            np.cumsum(lens[:-1], out=offs[1:])
        idx = np.repeat(offsets[piece] - offs, lens) + np.arange(int(lens.sum()), dtype=np.int64)
        parts.append((class_bytes[idx], offs, lens))
    init = (gnf.names, gnf.masks, gnf.start_id, gnf.rules, max_states, memory_budget, reset_cells)
    codes = np.full(m, -1, dtype=np.int64)
    code_of_digest: dict[CanonicalKey, int] = {}
    expansions = 0
    work = 0
    bar = _progress_bar(m, progress, "tok")
    try:
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=init) as pool:
            for piece, (part_codes, part_digests, spent, done) in zip(
                pieces, pool.map(_worker, parts), strict=True
            ):
                expansions += spent
                work += done
                local = np.asarray(
                    [code_of_digest.setdefault(d, len(code_of_digest)) for d in part_digests] + [-1],
                    dtype=np.int64,
                )
                codes[piece] = local[part_codes]  # -1 indexes the trailing -1
                if bar is not None:
                    bar.update(int(piece.size))
    finally:
        if bar is not None:
            bar.close()
    return codes, expansions, work
