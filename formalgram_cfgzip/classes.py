"""Token equivalence classes: the result of :func:`compress`.

A :class:`TokenClasses` maps every logit index of a vocabulary to a class id.  Tokens in
one class are interchangeable for the grammar (equal displacement), so a grammar engine
may run over one representative per class and expand its class mask back.
"""

from __future__ import annotations

import hashlib
import os
import resource
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram_cfgzip.displacement import (
    DEAD,
    START,
    CanonicalKey,
    DisplacementSearch,
    specialize_terminal_symbols,
)
from formalgram_cfgzip.vocabulary import Vocabulary


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """Classes of interchangeable tokens for one (grammar, vocabulary) pair.

    Attributes
    ----------
    token_class : numpy.ndarray
        int32 array of shape ``(vocab.logit_width,)``: logit index -> class id.
    representatives : numpy.ndarray
        int32 array of shape ``(num_classes,)``: class id -> token id of its representative
        (the byte-wise shortest member; ``-1`` only for a class with no real token).
    invalid_class : int
        Class of tokens never valid in any context (holes, padding ids, special
        non-stop tokens, tokens the grammar rejects everywhere); ``-1`` if there is none.
    stop_class : int
        Class holding exactly the stop tokens; ``-1`` if the vocabulary has none.
    vocab : Vocabulary
        The vocabulary the classes were computed for.
    grammar_sha256 : str
        Fingerprint of the grammar text (or canonical grammar) they were computed from.
    stats : dict
        Free-form statistics (time, peak memory, ...), informational only.
    """

    token_class: npt.NDArray[np.int32]
    representatives: npt.NDArray[np.int32]
    invalid_class: int
    stop_class: int
    vocab: Vocabulary
    grammar_sha256: str
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def num_classes(self) -> int:
        """Number of classes (the engine's vocabulary size)."""
        return int(self.representatives.shape[0])

    @property
    def invalid(self) -> npt.NDArray[np.int32]:
        """Token ids (below ``vocab.size``) that are never valid anywhere, stop tokens excluded."""
        if self.invalid_class < 0:
            return np.zeros(0, dtype=np.int32)
        ids = np.flatnonzero(self.token_class[: self.vocab.size] == self.invalid_class)
        return ids.astype(np.int32)

    def members(self, class_id: int) -> npt.NDArray[np.int32]:
        """Token ids (logit indices) of one class."""
        return np.flatnonzero(self.token_class == class_id).astype(np.int32)

    # -- persistence ----------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the classes to ``directory`` (``arrays.npz`` + ``meta.json``, no pickle).

        The metadata carries the fingerprints of the grammar, the vocabulary and the
        algorithm version; :meth:`load` refuses a cache whose fingerprints do not match.
        """
        from formalgram_cfgzip.cache import write_cache

        meta: dict[str, object] = {
            "kind": "formalgram_cfgzip.TokenClasses",
            "algorithm": ALGORITHM_VERSION,
            "grammar_sha256": self.grammar_sha256,
            "vocab_sha256": self.vocab.fingerprint(),
            "vocab_name": self.vocab.name,
            "logit_width": self.vocab.logit_width,
            "num_classes": self.num_classes,
            "invalid_class": self.invalid_class,
            "stop_class": self.stop_class,
            "stats": {k: float(v) for k, v in self.stats.items()},
        }
        write_cache(
            directory,
            {"token_class": self.token_class, "representatives": self.representatives},
            meta,
        )

    @staticmethod
    def load(directory: str | os.PathLike[str], *, grammar: Grammar | str, vocab: Vocabulary) -> TokenClasses:
        """Load classes saved by :meth:`save`, checking they were computed for ``grammar`` and ``vocab``.

        Parameters
        ----------
        directory : path
            The cache directory.
        grammar : Grammar or str
            The grammar (object or GBNF text) the classes must belong to.
        vocab : Vocabulary
            The vocabulary they must belong to.

        Raises
        ------
        CacheError
            If the cache is missing, corrupted, truncated, from another grammar, vocabulary
            or algorithm version, or its arrays are inconsistent.
        """
        from formalgram_cfgzip.cache import read_cache
        from formalgram_cfgzip.errors import CacheError

        expect = {
            "kind": "formalgram_cfgzip.TokenClasses",
            "algorithm": ALGORITHM_VERSION,
            "grammar_sha256": grammar_fingerprint(grammar),
            "vocab_sha256": vocab.fingerprint(),
        }
        arrays, meta = read_cache(directory, expect=expect)
        try:
            token_class = np.asarray(arrays["token_class"])
            reps = np.asarray(arrays["representatives"])
            invalid_class = int(meta["invalid_class"])  # type: ignore[call-overload]
            stop_class = int(meta["stop_class"])  # type: ignore[call-overload]
            raw_stats = meta.get("stats", {})
        except (KeyError, TypeError, ValueError) as exc:
            raise CacheError(f"cache in {os.fspath(directory)!r} is incomplete: {exc}") from exc
        n = int(reps.shape[0]) if reps.ndim == 1 else -1
        if (
            token_class.dtype != np.int32
            or reps.dtype != np.int32
            or token_class.shape != (vocab.logit_width,)
            or n <= 0
            or int(token_class.min()) < 0
            or int(token_class.max()) >= n
            or not -1 <= invalid_class < n
            or not -1 <= stop_class < n
            or int(reps.max()) >= vocab.logit_width
        ):
            raise CacheError(f"cache in {os.fspath(directory)!r} has inconsistent arrays")
        stats = {str(k): float(v) for k, v in raw_stats.items()} if isinstance(raw_stats, dict) else {}
        return TokenClasses(
            token_class, reps, invalid_class, stop_class, vocab, expect["grammar_sha256"], stats
        )


ALGORITHM_VERSION = "cfgzip-displacement-1"
SPECIALIZE_LIMIT = 2500  # largest stack alphabet for which single-byte symbols are specialised at once
SPECIALIZE_TRIAL = 4  # above it, specialise if that costs at most this many times the plain search...
SPECIALIZE_SAMPLE = 8  # ...measured on every 8th searched token


def grammar_fingerprint(grammar: Grammar | str) -> str:
    """SHA-256 (hex) of a canonical form of a grammar: its start name and sorted productions.

    Formatting, comments and rule order of the source text do not matter; two texts that
    parse to equal grammars have the same fingerprint.

    Parameters
    ----------
    grammar : Grammar or str
        A grammar, or GBNF text (parsed with start rule ``root``).
    """
    if isinstance(grammar, str):
        from formalgram.syntax.gbnf import parse_gbnf

        g = parse_gbnf(grammar)
    else:
        g = grammar
    names = g.names
    masks = g.masks
    lines = []
    for lhs, rhs in g.rules:
        body = " ".join(f"N{names[s]!r}" if s >= 0 else f"T{masks[~s]:x}" for s in rhs)
        lines.append(f"{names[lhs]!r} -> {body}")
    lines.sort()
    text = f"start {names[g.start_id]!r}\n" + "\n".join(lines)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compress(
    grammar: Grammar | str,
    vocab: Vocabulary,
    *,
    workers: int = 1,
    progress: bool = True,
    gnf_budget: int = 2_000_000,
    max_states: int = 200_000,
    memory_budget: int | None = 4 << 30,
    specialize: bool | None = None,
) -> TokenClasses:
    """Compute classes of interchangeable tokens for ``grammar`` over ``vocab`` (CFGzip).

    The grammar is trimmed and converted to Greibach normal form; every text token of the
    vocabulary is run through the displacement automaton
    (:class:`~formalgram_cfgzip.displacement.DisplacementSearch`), and tokens with equal
    displacement share a class.  Tokens with an empty displacement, special tokens, holes
    and padding ids form the *invalid* class (never allowed); stop tokens form their own
    class.  The representative of a class is its byte-wise shortest member (lowest id on ties).

    Parameters
    ----------
    grammar : Grammar or str
        The grammar, or GBNF/XGrammar-EBNF text with start rule ``root``.
    vocab : Vocabulary
        The tokenizer vocabulary.
    workers : int
        Worker processes for the displacement search (1 = in this process).
    progress : bool
        Show a progress bar on stderr.
    gnf_budget : int
        Size budget of the GNF conversion (see :func:`formalgram.to_gnf`).
    max_states : int
        Largest number of search states for one token prefix.
    memory_budget : int or None
        Bytes the displacement search may add to each process's resident memory (counted
        from the search's start, so memory the caller already holds does not count);
        ``None`` for no limit.
    specialize : bool or None
        Copy single-byte nonterminals per occurrence before the search
        (:func:`~formalgram_cfgzip.displacement.specialize_terminal_symbols`): a sharper
        adjacency relation, hence fewer classes, usually at a higher search cost.  ``True``
        always; ``False`` never; ``None`` (default) at once while the stack alphabet stays
        small (``SPECIALIZE_LIMIT``), and above it only when a trial on every
        ``SPECIALIZE_SAMPLE``-th token shows that the specialised search costs at most
        ``SPECIALIZE_TRIAL`` times the plain one (a deterministic work count, so the choice
        does not depend on the machine; the trial's tables are reused).  Measured with
        Llama-3: xml2rfc 1,449 classes instead of 10,763, go 5,325 instead of 7,832.
        ``stats["specialized"]`` tells which was used, ``stats["specialize_trial"]`` the
        trial's outcome (-1: no trial, 0: plain kept, 1: specialised kept).

    Returns
    -------
    TokenClasses

    Raises
    ------
    GrammarTooLarge
        If the GNF conversion or the displacement search exceeds its budget.
    EmptyLanguageError
        If the grammar generates nothing.
    GrammarSyntaxError
        If ``grammar`` is text that does not parse.

    Complexity
    ----------
    O(total token bytes) numpy work, one Python step per distinct (automaton state, byte
    class) pair and token depth, plus one expansion per distinct (search state set, byte
    class) pair.

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> from formalgram_cfgzip import Vocabulary
    >>> g = parse_gbnf('root ::= "(" root ")" | "x"')
    >>> v = Vocabulary([b"(", b"((", b")", b"x", b"y"])
    >>> tc = compress(g, v, progress=False)
    >>> int(tc.token_class[0]) == int(tc.token_class[1]), tc.invalid.tolist()
    (False, [4])
    """
    from formalgram.analysis import generating
    from formalgram.transforms.gnf import to_gnf
    from formalgram.transforms.useless import remove_useless

    t0 = time.perf_counter()
    if isinstance(grammar, str):
        from formalgram.syntax.gbnf import parse_gbnf

        g = parse_gbnf(grammar)
    else:
        g = grammar
    fp = grammar_fingerprint(g)
    live = generating(g)
    dead = [g.names[a] for a in range(len(g.names)) if g.rules_by_lhs[a] and a not in live]
    if dead:
        warnings.warn(
            f"grammar has nonterminals that derive no string ({', '.join(sorted(dead)[:5])}); "
            "XGrammar 0.2.9 still treats prefixes entering them as viable, so its masks can allow "
            "tokens that no complete parse accepts, and compressed masks then differ from it there",
            stacklevel=2,
        )
    gnf = to_gnf(remove_useless(g), budget=gnf_budget)
    # Copying single-byte symbols per occurrence sharpens adjacency (fewer, larger classes) but
    # multiplies the stack alphabet.  By default: done at once while the alphabet stays small,
    # otherwise only if a trial on a sample of tokens finds it affordable (_pick_specialization).
    trial: Grammar | None = None
    specialized = False
    if specialize is not False:
        special = specialize_terminal_symbols(gnf)
        if specialize or len(special.names) <= max(SPECIALIZE_LIMIT, 4 * len(gnf.names)):
            gnf = special
            specialized = True
        else:
            trial = special
    t_gnf = time.perf_counter() - t0

    toks = _token_table(vocab)
    # trie merges recurse once per symbol of the longest σ_out·#·σ_in string
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20_000))
    trial_outcome = -1.0  # no trial
    t_pick = 0.0
    try:
        if trial is None:
            search = DisplacementSearch(gnf, max_states=max_states, memory_budget=memory_budget)
        else:
            gnf, search = _pick_specialization(gnf, trial, toks, max_states, memory_budget)
            specialized = gnf is trial
            trial_outcome = float(specialized)
            t_pick = time.perf_counter() - t0 - t_gnf
        codes, expansions, work = _search_all(gnf, search, toks, workers, progress, max_states, memory_budget)
    finally:
        sys.setrecursionlimit(old_limit)
    t_search = time.perf_counter() - t0 - t_gnf
    token_class, reps_arr, stop_class, invalid_class = _number_classes(vocab, toks, codes)
    stats: dict[str, float] = {
        "tokens": float(vocab.size),
        "classes": float(reps_arr.shape[0]),
        "invalid_tokens": float(int(np.count_nonzero(token_class[: vocab.size] == invalid_class))),
        "gnf_rules": float(len(gnf.rules)),
        "gnf_nonterminals": float(len(gnf.names)),
        "byte_classes": float(search.num_byte_classes),
        "expansions": float(expansions),
        "work": float(work),
        "specialized": float(specialized),
        "specialize_trial": trial_outcome,
        "specialize_trial_seconds": t_pick,
        "gnf_seconds": t_gnf,
        "search_seconds": t_search,
        "seconds": time.perf_counter() - t0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    return TokenClasses(token_class, reps_arr, invalid_class, stop_class, vocab, fp, stats)


@dataclass(frozen=True, eq=False)
class _TokenTable:
    """The searched tokens of a vocabulary as flat numpy arrays (built once per vocabulary).

    ``ids`` are the text tokens that are neither stop tokens nor empty; token ``ids[i]`` is
    ``flat[offsets[i] : offsets[i] + lengths[i]]``.  ``all_lengths`` holds the byte length of
    every token id below ``vocab.size`` (``-1`` for holes).
    """

    ids: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    flat: npt.NDArray[np.uint8]
    all_lengths: npt.NDArray[np.int64]


_TABLES: list[tuple[Vocabulary, _TokenTable]] = []  # the last vocabulary seen, with its table


def _token_table(vocab: Vocabulary) -> _TokenTable:
    """Flat arrays of ``vocab``'s searched tokens; cached for the last vocabulary used."""
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
    table = _TokenTable(ids, starts[ids], lengths[ids], flat, all_lengths)
    _TABLES.clear()
    _TABLES.append((vocab, table))
    return table


def _number_classes(
    vocab: Vocabulary, toks: _TokenTable, codes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], int, int]:
    """Class array, representatives, stop class and invalid class from displacement codes.

    ``codes[i]`` is the displacement code of token ``toks.ids[i]`` (dense, ``-1`` for an
    empty displacement).  The representative of a class is its byte-wise shortest member,
    lowest id on ties; classes are numbered by their representative's id, the stop class and
    the invalid class come last.
    """
    width = vocab.logit_width
    token_class = np.full(width, -1, dtype=np.int32)
    valid = codes >= 0
    ids = toks.ids[valid]
    cod = codes[valid]
    lens = toks.lengths[valid]
    reps: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
    if ids.size:
        k = int(cod.max()) + 1
        # smallest (length, id) per code, packed in one int64: length above bit 32, id below
        best = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(best, cod, (lens << 32) | ids)
        used = np.flatnonzero(best != np.iinfo(np.int64).max)  # codes some token has
        rep_of_used = best[used] & 0xFFFFFFFF
        order = np.argsort(rep_of_used, kind="stable")
        class_of_code = np.full(k, -1, dtype=np.int64)
        class_of_code[used[order]] = np.arange(used.size, dtype=np.int64)
        token_class[ids] = class_of_code[cod].astype(np.int32)
        reps = rep_of_used[order]
    rep_list: list[int] = reps.tolist()
    stop_class = -1
    stop = vocab.stop_ids
    if stop:
        stop_class = len(rep_list)
        token_class[np.asarray(sorted(stop), dtype=np.int64)] = stop_class
        rep_list.append(min(stop))
    invalid_class = -1
    rest = np.flatnonzero(token_class < 0)
    if rest.size:
        invalid_class = len(rep_list)
        token_class[rest] = invalid_class
        real = rest[rest < vocab.size]
        real = real[toks.all_lengths[real] >= 0]
        if real.size:
            best = np.lexsort((real, toks.all_lengths[real]))[0]
            rep_list.append(int(real[best]))
        else:
            rep_list.append(-1)
    return token_class, np.asarray(rep_list, dtype=np.int32), stop_class, invalid_class


def _pick_specialization(
    plain: Grammar,
    special: Grammar,
    toks: _TokenTable,
    max_states: int,
    memory_budget: int | None,
    factor: int = SPECIALIZE_TRIAL,
) -> tuple[Grammar, DisplacementSearch]:
    """Choose between a GNF and its specialisation by the work each takes on a sample of tokens.

    Both searches run on every ``SPECIALIZE_SAMPLE``-th searched token; the specialised one
    is kept if it finishes within ``factor`` (default ``SPECIALIZE_TRIAL``) times the work of
    the plain one (and within the memory budget).  The work measure (:attr:`DisplacementSearch.work`) is
    deterministic, so the choice does not depend on the machine or its load.  The chosen
    search is returned with its tables, which the full search then reuses.
    """
    offsets = toks.offsets[::SPECIALIZE_SAMPLE]
    lengths = toks.lengths[::SPECIALIZE_SAMPLE]
    reset_size = max(200_000, (memory_budget or (8 << 30)) // 1600)
    first = DisplacementSearch(plain, max_states=max_states, memory_budget=memory_budget)
    class_bytes = np.frombuffer(bytes(first.byte_class), dtype=np.uint8)[toks.flat]
    _run_levels(first, class_bytes, offsets, lengths, False, reset_size, False)
    budget = factor * max(first.work, 1000)
    if first.size() > reset_size // 4:
        first.reset()  # do not hold both searches' tables at once (memory); redone if kept
    try:
        second = DisplacementSearch(
            special, max_states=max_states, memory_budget=memory_budget, max_work=budget
        )
        class_bytes = np.frombuffer(bytes(second.byte_class), dtype=np.uint8)[toks.flat]
        _run_levels(second, class_bytes, offsets, lengths, False, reset_size, False)
    except GrammarTooLarge:
        return plain, first
    second.max_work = None
    return special, second


def _search_all(
    gnf: Grammar,
    search: DisplacementSearch,
    toks: _TokenTable,
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
) -> tuple[npt.NDArray[np.int64], int, int]:
    """Search every token of ``toks`` over ``gnf`` (with ``search`` when in this process).

    Returns a dense displacement code per searched token (``-1``: empty displacement), and
    the expansions and work done (summed over workers).
    """
    # byte class of every token byte
    class_bytes = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)[toks.flat]
    # reset the search tables above budget / 1600 cells (sql_syncode: peak 1.6 GiB for a 4 GiB budget)
    reset_size = max(200_000, (memory_budget or (8 << 30)) // 1600)
    if workers > 1 and toks.ids.size > 2000:
        return _run_parallel(gnf, class_bytes, toks, workers, progress, max_states, memory_budget, reset_size)
    codes, _ = _run_levels(search, class_bytes, toks.offsets, toks.lengths, progress, reset_size, False)
    return codes, search.expansions, search.work


def _progress_bar(total: int, enabled: bool, unit: str) -> Any:
    """A tqdm bar (``None`` when ``enabled`` is false, so that tqdm is not even imported)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="displacements", unit=unit, mininterval=0.5, leave=False)


def _run_levels(
    search: DisplacementSearch,
    class_bytes: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    progress: bool,
    reset_size: int,
    want_digests: bool,
) -> tuple[npt.NDArray[np.int64], list[CanonicalKey]]:
    """Displacement codes of byte-class sequences, all sequences advanced one byte at a time.

    Sequence ``i`` is ``class_bytes[offsets[i] : offsets[i] + lengths[i]]`` (non-empty).  At
    depth ``k`` the sequences still running are grouped by (current automaton state, next
    byte class): each distinct pair costs one :meth:`DisplacementSearch.step`, however many
    tokens share it (a walk of the vocabulary trie in which prefixes that reach the same
    state are merged), and the grouping itself is numpy work.

    Returns ``(codes, digests)``: ``codes[i]`` is a dense id of the displacement of sequence
    ``i`` (equal ids <=> equal displacements; ``-1`` for an empty one).  ``digests[code]`` is
    its process-independent digest when ``want_digests`` is true or the search tables had to
    be reset on the way (their node ids do not survive a reset); otherwise ``digests`` is empty.

    Complexity: one step per distinct (state, byte class) pair per depth, plus
    O(total bytes) numpy work.
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
    keys: list[int] = []  # code -> key node (valid until a reset)
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
                        d = search.canonical(node)
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
            if k + 1 < depth and search.size() > reset_size:
                if not use_digests:  # key node ids die with the reset: switch to digests
                    for key in keys:
                        d = search._digest_of(key)
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


_WORKER: list[tuple[DisplacementSearch, int]] = []


def _worker_init(
    names: tuple[str, ...],
    masks: tuple[int, ...],
    start: int,
    rules: tuple[tuple[int, tuple[int, ...]], ...],
    max_states: int,
    memory_budget: int | None,
    reset_size: int,
) -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))
    gnf = Grammar.from_ids(names, masks, start, rules)
    _WORKER.append((DisplacementSearch(gnf, max_states=max_states, memory_budget=memory_budget), reset_size))


def _worker(
    part: tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]],
) -> tuple[npt.NDArray[np.int64], list[CanonicalKey], int, int]:
    search, reset_size = _WORKER[-1]
    class_bytes, offsets, lengths = part
    before = (search.expansions, search.work)
    codes, digests = _run_levels(search, class_bytes, offsets, lengths, False, reset_size, True)
    return codes, digests, search.expansions - before[0], search.work - before[1]


def _run_parallel(
    gnf: Grammar,
    class_bytes: npt.NDArray[np.uint8],
    toks: _TokenTable,
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
    reset_size: int,
) -> tuple[npt.NDArray[np.int64], int, int]:
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
    init = (gnf.names, gnf.masks, gnf.start_id, gnf.rules, max_states, memory_budget, reset_size)
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
