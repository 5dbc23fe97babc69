"""The displacement search over a whole vocabulary: tokens advanced level by level, in one process or many.

:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch` maps one byte-class
sequence to an automaton state.  This module runs it over every searched token of a
vocabulary at once (:func:`run_levels`): at depth ``k`` the tokens still running are grouped
by (state, next byte class) with numpy, so each distinct pair costs one search step however
many tokens share it, and the search tables are compacted when they outgrow their budget.
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
from formalgram_cfgzip.search.displacement import DEAD, START, CanonicalKey, DisplacementSearch
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "TokenTable",
    "pick_specialization",
    "reset_size",
    "run_levels",
    "search_vocabulary",
    "token_table",
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
    """

    ids: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    flat: npt.NDArray[np.uint8]
    all_lengths: npt.NDArray[np.int64]


_TABLES: list[tuple[Vocabulary, TokenTable]] = []  # the last vocabulary seen, with its table


def token_table(vocab: Vocabulary) -> TokenTable:
    """Flat arrays of ``vocab``'s searched tokens; cached for the last vocabulary used.

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary.

    Returns
    -------
    TokenTable

    Notes
    -----
    O(total token bytes) numpy work the first time, O(1) for the same vocabulary object again.

    Examples
    --------
    >>> v = Vocabulary([b"ab", b"", b"c", b"<s>"], special_ids=[3])
    >>> t = token_table(v)
    >>> t.ids.tolist(), t.lengths.tolist(), bytes(t.flat)
    ([0, 2], [2, 1], b'abc<s>')
    """
    for v, table in _TABLES:
        if v is vocab:
            return table
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
    table = TokenTable(ids, starts[ids], lengths[ids], flat, all_lengths)
    _TABLES.clear()
    _TABLES.append((vocab, table))
    return table


def reset_size(memory_budget: int | None) -> int:
    """Search-table size (:meth:`DisplacementSearch.size`) above which :func:`run_levels` compacts.

    Parameters
    ----------
    memory_budget : int or None
        The search's memory budget in bytes (``None``: sized as for 8 GiB).

    Returns
    -------
    int
        ``budget / 1600`` cells, at least 200,000 (a 4 GiB budget peaked at 1.6 GiB on the
        largest shared grammar).

    Notes
    -----
    O(1).

    Examples
    --------
    >>> reset_size(4 << 30), reset_size(None), reset_size(1 << 20)
    (2684354, 5368709, 200000)
    """
    return max(200_000, (memory_budget or (8 << 30)) // 1600)


def _class_bytes(search: DisplacementSearch, toks: TokenTable) -> npt.NDArray[np.uint8]:
    """The byte class of every byte of ``toks.flat`` under ``search``'s partition."""
    return np.frombuffer(bytes(search.byte_class), dtype=np.uint8)[toks.flat]


def pick_specialization(
    plain: Grammar,
    special: Grammar,
    toks: TokenTable,
    max_states: int,
    memory_budget: int | None,
    factor: int,
    sample: int,
) -> tuple[Grammar, DisplacementSearch]:
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

    Returns
    -------
    (Grammar, DisplacementSearch)
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
    offsets = toks.offsets[::sample]
    lengths = toks.lengths[::sample]
    cells = reset_size(memory_budget)
    first = DisplacementSearch(plain, max_states=max_states, memory_budget=memory_budget)
    run_levels(first, _class_bytes(first, toks), offsets, lengths, False, cells, False)
    budget = factor * max(first.work, 1000)
    if first.size() > cells // 4:
        first.reset()  # do not hold both searches' tables at once (memory); redone if kept
    try:
        second = DisplacementSearch(
            special, max_states=max_states, memory_budget=memory_budget, max_work=budget
        )
        run_levels(second, _class_bytes(second, toks), offsets, lengths, False, cells, False)
    except GrammarTooLarge:
        return plain, first
    second.max_work = None
    return special, second


def search_vocabulary(
    gnf: Grammar,
    search: DisplacementSearch,
    toks: TokenTable,
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
) -> tuple[npt.NDArray[np.int64], int, int]:
    """Search every token of ``toks`` over ``gnf`` (with ``search`` when in this process).

    Parameters
    ----------
    gnf : Grammar
        The GNF grammar of ``search`` (sent to the worker processes).
    search : DisplacementSearch
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
    class_bytes = _class_bytes(search, toks)
    cells = reset_size(memory_budget)
    if workers > 1 and toks.ids.size > 2000:
        return _run_parallel(gnf, class_bytes, toks, workers, progress, max_states, memory_budget, cells)
    codes, _ = run_levels(search, class_bytes, toks.offsets, toks.lengths, progress, cells, False)
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
    """Displacement codes of byte-class sequences, all sequences advanced one byte at a time.

    Sequence ``i`` is ``class_bytes[offsets[i] : offsets[i] + lengths[i]]`` (non-empty).  At
    depth ``k`` the sequences still running are grouped by (current automaton state, next
    byte class): each distinct pair costs one :meth:`DisplacementSearch.step`, however many
    tokens share it (a walk of the vocabulary trie in which prefixes that reach the same
    state are merged), and the grouping itself is numpy work.

    Parameters
    ----------
    search : DisplacementSearch
        The search (its tables are kept, and compacted above ``reset_cells``).
    class_bytes : numpy.ndarray
        uint8 byte classes of the concatenated sequences.
    offsets, lengths : numpy.ndarray
        int64 start and length of each sequence.
    progress : bool
        Show a progress bar on stderr.
    reset_cells : int
        Search-table size (:meth:`DisplacementSearch.size`) above which the tables are
        compacted to the states still running.
    want_digests : bool
        Return the digest of every code (for merging the codes of several processes).

    Returns
    -------
    (numpy.ndarray, list of bytes)
        ``codes[i]`` is a dense id of the displacement of sequence ``i`` (equal ids <=> equal
        displacements; ``-1`` for an empty one).  ``digests[code]`` is its
        process-independent digest when ``want_digests`` is true or the search tables had to
        be compacted on the way (their node ids do not survive it); otherwise ``digests``
        is empty.

    Notes
    -----
    One step per distinct (state, byte class) pair per depth, plus O(total bytes) numpy work.

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
    m = int(lengths.size)
    codes = np.full(m, -1, dtype=np.int64)
    if m == 0:
        return codes, []
    ncls = search.num_byte_classes
    order = np.argsort(-lengths, kind="stable")  # longest first: the running ones are a prefix
    starts = offsets[order]
    neg = -lengths[order]
    depth = int(-neg[0])
    running = np.searchsorted(neg, -np.arange(depth + 1, dtype=np.int64), side="left").tolist()
    comp = np.zeros(m, dtype=np.int64)  # compact state index of each running sequence
    nodes: list[int] = [START]  # compact state index -> automaton node
    code_of_key: dict[int, int] = {}
    code_of_digest: dict[CanonicalKey, int] = {}
    digests: list[CanonicalKey] = []
    keys: list[int] = []  # code -> key node (valid until the tables are compacted)
    use_digests = want_digests
    step = search.step
    bar = _progress_bar(int(-neg.sum()), progress, "B")
    try:
        for k in range(depth):
            live = running[k]
            comp = comp[:live]
            pair = comp * ncls + class_bytes[starts[:live] + k]
            span = len(nodes) * ncls
            if span <= 4 * live + 65536:  # dense grouping, no sort
                seen = np.zeros(span, dtype=bool)
                seen[pair] = True
                uniq = np.flatnonzero(seen)
                slot = np.zeros(span, dtype=np.int64)
                slot[uniq] = np.arange(uniq.size, dtype=np.int64)
                inverse = slot[pair]
            else:
                uniq, inverse = np.unique(pair, return_inverse=True)
            nxt: list[int] = []
            for u in uniq.tolist():
                node = nodes[u // ncls]
                nxt.append(DEAD if node == DEAD else step(node, u % ncls))
            new_nodes, new_index = np.unique(np.asarray(nxt, dtype=np.int64), return_inverse=True)
            comp = new_index.reshape(-1)[inverse]
            nodes = new_nodes.tolist()
            # sequences of length k + 1 end here
            done = running[k + 1]
            if done < live:
                ending = np.unique(comp[done:live])
                code_of_comp = np.full(len(nodes), -1, dtype=np.int64)
                for j in ending.tolist():
                    node = nodes[j]
                    if node == DEAD:
                        continue
                    key = search.key_of(node)
                    if use_digests:
                        d = search.digest(key)
                        code = code_of_digest.get(d)
                        if code is None:
                            code = len(digests)
                            code_of_digest[d] = code
                            digests.append(d)
                    else:
                        code = code_of_key.get(key, -1)
                        if code < 0:
                            code = len(keys)
                            code_of_key[key] = code
                            keys.append(key)
                    code_of_comp[j] = code
                codes[order[done:live]] = code_of_comp[comp[done:live]]
            if bar is not None:
                bar.update(live)
            if k + 1 < depth and search.size() > reset_cells:
                if not use_digests:  # key node ids die with the compaction: switch to digests
                    for key in keys:
                        d = search.digest(key)
                        code_of_digest[d] = len(digests)
                        digests.append(d)
                    use_digests = True
                live = running[k + 1]
                comp = comp[:live]
                used = np.zeros(len(nodes), dtype=bool)
                used[comp] = True
                kept = [node if keep else DEAD for node, keep in zip(nodes, used.tolist(), strict=True)]
                nodes = search.compact(kept)
    finally:
        if bar is not None:
            bar.close()
    return codes, digests


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
