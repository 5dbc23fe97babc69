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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

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
SPECIALIZE_LIMIT = 2500  # largest stack alphabet for which single-byte symbols are specialised


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
        Resident memory in bytes for the search (per process); ``None`` for no limit.
    specialize : bool or None
        Copy single-byte nonterminals per occurrence before the search
        (:func:`~formalgram_cfgzip.displacement.specialize_terminal_symbols`): a sharper
        adjacency relation, hence fewer classes, at a higher search cost.  ``None`` (default)
        does it only while the stack alphabet stays small (``SPECIALIZE_LIMIT``); ``True``
        always (e.g. xml2rfc: 1,449 classes instead of 10,763, 20 s instead of 5 s); ``False``
        never.

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
    One dictionary step per token byte, plus one expansion per distinct
    (search state set, byte class) pair.

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
    # multiplies the stack alphabet; by default keep it only while the alphabet stays small.
    if specialize is not False:
        special = specialize_terminal_symbols(gnf)
        if specialize or len(special.names) <= max(SPECIALIZE_LIMIT, 4 * len(gnf.names)):
            gnf = special
    t_gnf = time.perf_counter() - t0

    search = DisplacementSearch(gnf, max_states=max_states, memory_budget=memory_budget)
    table = search.byte_class
    # group text tokens by their byte-class sequence (tokens with equal sequences share everything)
    groups: dict[bytes, list[int]] = {}
    invalid_ids: list[int] = []
    stop = vocab.stop_ids
    tokens = vocab.tokens
    for i in vocab.text_ids():
        if i in stop:
            continue
        tok = tokens[i]
        assert tok is not None
        if not tok:
            invalid_ids.append(i)  # empty tokens are treated as special (as XGrammar does)
            continue
        groups.setdefault(tok.translate(table), []).append(i)
    seqs = sorted(groups)

    # trie merges recurse once per symbol of the longest σ_out·#·σ_in string
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 20_000))
    try:
        seq_keys = _search_all(gnf, search, seqs, workers, progress, max_states, memory_budget)
    finally:
        sys.setrecursionlimit(old_limit)
    t_search = time.perf_counter() - t0 - t_gnf

    # group tokens by displacement key
    by_key: dict[CanonicalKey, list[int]] = {}
    for seq, key in zip(seqs, seq_keys, strict=True):
        if key is None:
            invalid_ids.extend(groups[seq])
        else:
            by_key.setdefault(key, []).extend(groups[seq])

    width = vocab.logit_width
    token_class = np.full(width, -1, dtype=np.int32)
    reps: list[int] = []

    def shortest(ids: list[int]) -> int:
        return min(ids, key=lambda j: (len(tokens[j] or b""), j))

    # classes numbered by their representative's (length, id), so numbering is deterministic
    ranked = sorted((shortest(members), members) for members in by_key.values())
    for rep, members in ranked:
        token_class[np.asarray(members, dtype=np.int64)] = len(reps)
        reps.append(rep)
    stop_class = -1
    if stop:
        stop_class = len(reps)
        token_class[np.asarray(sorted(stop), dtype=np.int64)] = stop_class
        reps.append(min(stop))
    invalid_class = -1
    rest = np.flatnonzero(token_class < 0)
    if rest.size:
        invalid_class = len(reps)
        token_class[rest] = invalid_class
        real = [int(j) for j in rest if int(j) < vocab.size and tokens[int(j)] is not None]
        reps.append(shortest(real) if real else -1)
    stats: dict[str, float] = {
        "tokens": float(vocab.size),
        "classes": float(len(reps)),
        "invalid_tokens": float(int(np.count_nonzero(token_class[: vocab.size] == invalid_class))),
        "gnf_rules": float(len(gnf.rules)),
        "gnf_nonterminals": float(len(gnf.names)),
        "byte_classes": float(search.num_byte_classes),
        "gnf_seconds": t_gnf,
        "search_seconds": t_search,
        "seconds": time.perf_counter() - t0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    return TokenClasses(
        token_class, np.asarray(reps, dtype=np.int32), invalid_class, stop_class, vocab, fp, stats
    )


def _search_all(
    gnf: Grammar,
    search: DisplacementSearch,
    seqs: list[bytes],
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
) -> list[CanonicalKey | None]:
    # reset the search tables when they hold more than about a quarter of the memory budget
    reset_size = max(200_000, (memory_budget or (8 << 30)) // 1600)
    if workers > 1 and len(seqs) > 2000:
        return _run_parallel(gnf, seqs, workers, progress, max_states, memory_budget, reset_size)
    return _run_sequences(search, seqs, progress, reset_size)


def _progress_bar(total: int, enabled: bool, desc: str) -> Any:
    """A tqdm bar over byte-class sequences (a no-op object when ``enabled`` is false)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="seq", mininterval=0.5, leave=False, disable=not enabled)


def _run_sequences(
    search: DisplacementSearch, seqs: list[bytes], progress: bool, reset_size: int
) -> list[CanonicalKey | None]:
    """Canonical displacement digest per byte-class sequence (None for an empty displacement).

    Sequences are sorted, so consecutive ones share prefixes: the walk keeps the trie ids
    along the previous sequence and resumes from the longest common prefix (a DFS over the
    vocabulary trie).  Results are process-independent digests, so the search can be reset
    whenever its tables outgrow ``reset_size`` (memory stays bounded) and worker results
    can be merged.
    """
    out: list[CanonicalKey | None] = []
    path: list[int] = [START]
    prev = b""
    digests: dict[int, CanonicalKey] = {}
    bar = _progress_bar(len(seqs), progress, "displacements")
    try:
        for n, seq in enumerate(seqs):
            if n & 255 == 0 and search.size() > reset_size:
                search.reset()
                digests.clear()
                path = [START]
                prev = b""
            common = 0
            limit = min(len(prev), len(seq))
            while common < limit and prev[common] == seq[common]:
                common += 1
            del path[common + 1 :]
            sid = path[-1]
            for c in seq[common:]:
                sid = search.step(sid, c) if sid != DEAD else DEAD
                path.append(sid)
            prev = seq
            if sid == DEAD:
                out.append(None)
            else:
                d = digests.get(sid)
                if d is None:
                    d = search.canonical(sid)
                    digests[sid] = d
                out.append(d)
            if n & 1023 == 1023:
                bar.update(1024)
    finally:
        bar.close()
    return out


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


def _worker(seqs: list[bytes]) -> list[CanonicalKey | None]:
    search, reset_size = _WORKER[-1]
    return _run_sequences(search, seqs, False, reset_size)


def _run_parallel(
    gnf: Grammar,
    seqs: list[bytes],
    workers: int,
    progress: bool,
    max_states: int,
    memory_budget: int | None,
    reset_size: int,
) -> list[CanonicalKey | None]:
    from concurrent.futures import ProcessPoolExecutor

    # contiguous slices of the sorted sequences keep shared prefixes together; each worker
    # process builds its search once (initializer) and keeps its memo across its slices
    chunks = max(workers * 4, 1)
    size = (len(seqs) + chunks - 1) // chunks
    parts = [seqs[i : i + size] for i in range(0, len(seqs), size)]
    init = (gnf.names, gnf.masks, gnf.start_id, gnf.rules, max_states, memory_budget, reset_size)
    out: list[CanonicalKey | None] = []
    bar = _progress_bar(len(seqs), progress, "displacements")
    try:
        with ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=init) as pool:
            for part, result in zip(parts, pool.map(_worker, parts), strict=True):
                out.extend(result)
                bar.update(len(part))
    finally:
        bar.close()
    return out
