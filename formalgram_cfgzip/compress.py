"""The CFGzip pipeline: grammar -> GNF -> displacement search over a vocabulary -> :class:`TokenClasses`.

:func:`compress` trims the grammar and converts it to Greibach normal form
(:func:`formalgram.to_gnf`), optionally specialises its single-byte symbols
(:func:`formalgram.specialize_terminal_symbols`, chosen by
:data:`~formalgram_cfgzip.pipeline.SPECIALIZE_LIMIT` or a trial) -- these steps are
:func:`~formalgram_cfgzip.pipeline.searched_grammar` --, runs every text token through the displacement search
(:mod:`formalgram_cfgzip.search`), and numbers the classes (:func:`number_classes`).

What depends on the vocabulary alone (its token table, the trie of its token bytes, the
order in which class representatives are chosen) is prepared once
(:class:`PreparedVocabulary`).  :class:`Compressor` holds one prepared vocabulary and
compresses grammar after grammar on top of it, with an in-memory LRU cache keyed by the
grammar's fingerprints and, optionally, a cache directory; :func:`compress` runs the same
pipeline on the prepared form of the last vocabulary it saw.
"""

from __future__ import annotations

import gc
import os
import resource
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from formalgram.analysis import generating
from formalgram.grammar import Grammar
from formalgram.transforms.gnf import STRATEGIES as GNF_STRATEGIES
from formalgram_cfgzip.budgets import DEFAULT_BUDGETS
from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.errors import CacheError
from formalgram_cfgzip.pipeline import SPECIALIZE_SAMPLE, SPECIALIZE_TRIAL, read_source, searched_grammar
from formalgram_cfgzip.search.domains import ClassDomains, class_domains, domain_roots, representative_texts
from formalgram_cfgzip.search.driver import (
    Search,
    SequenceTrie,
    TokenTable,
    pick_specialization,
    rep_order,
    search_vocabulary,
    token_table,
    token_trie,
)
from formalgram_cfgzip.search.native import NativeSearch, answering, new_search
from formalgram_cfgzip.search.symmetry import shift_twins
from formalgram_cfgzip.search.trie import DEAD
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "CollectorPaused",
    "Compressor",
    "PreparedVocabulary",
    "cache_entry_name",
    "compress",
    "number_classes",
]


class PreparedVocabulary:
    """Everything the pipeline needs from a vocabulary that no grammar changes, built once and
    kept here.

    :func:`compress` and :class:`Compressor` search over a preparation; the one
    :func:`compress` uses is :meth:`of` the vocabulary, which keeps the last vocabulary's
    preparation (:meth:`forget` drops it).  A caller that switches between vocabularies
    holds one preparation per vocabulary (or one :class:`Compressor` each).

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary.

    Attributes
    ----------
    vocab : Vocabulary
        The vocabulary.
    tokens : TokenTable
        Its searched tokens (:func:`~formalgram_cfgzip.search.driver.token_table`).

    Notes
    -----
    O(total token bytes) numpy work for the token table; the tries are built on first use.
    Thread-safe for readers once built; :class:`Compressor` serialises its own use.

    Examples
    --------
    >>> p = PreparedVocabulary(Vocabulary([b"bb", b"a", b"b"]))
    >>> p.trie.size, p.tokens.ids.tolist()
    (3, [0, 1, 2])
    """

    _last: ClassVar[list[PreparedVocabulary]] = []  # the preparation of(vocab) kept

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.tokens: TokenTable = token_table(vocab)
        self._tries: dict[int, SequenceTrie] = {}

    @classmethod
    def of(cls, vocab: Vocabulary) -> PreparedVocabulary:
        """The preparation of ``vocab``: the one kept when it is of this very vocabulary object,
        else a new one, which is kept instead.

        Parameters
        ----------
        vocab : Vocabulary
            The vocabulary.

        Returns
        -------
        PreparedVocabulary

        Notes
        -----
        O(1) for the vocabulary kept; otherwise the construction's cost.

        Examples
        --------
        >>> v = Vocabulary([b"a", b"b"])
        >>> PreparedVocabulary.of(v) is PreparedVocabulary.of(v)
        True
        >>> PreparedVocabulary.forget()
        >>> PreparedVocabulary.of(v) is PreparedVocabulary.of(Vocabulary([b"a", b"b"]))
        False
        """
        for kept in cls._last:
            if kept.vocab is vocab:
                return kept
        prepared = cls(vocab)
        cls._last[:] = [prepared]
        return prepared

    @classmethod
    def forget(cls) -> None:
        """Drop the preparation :meth:`of` keeps (its memory is freed once no compressor holds it); O(1)."""
        cls._last.clear()

    @property
    def trie(self) -> SequenceTrie:
        """The trie of the searched tokens' bytes (:meth:`sample_trie` of 1)."""
        return self.sample_trie(1)

    def sample_trie(self, every: int) -> SequenceTrie:
        """The trie of every ``every``-th searched token (built once per ``every``).

        Parameters
        ----------
        every : int
            The sampling step (1: every token).

        Returns
        -------
        SequenceTrie

        Notes
        -----
        :func:`~formalgram_cfgzip.search.driver.token_trie` (``1/every`` of the token bytes)
        the first time, O(1) afterwards.

        Examples
        --------
        >>> PreparedVocabulary(Vocabulary([b"a", b"b", b"c"])).sample_trie(2).size
        2
        """
        trie = self._tries.get(every)
        if trie is None:
            trie = token_trie(self.tokens, every)
            self._tries[every] = trie
        return trie


def compress(
    grammar: Grammar | str,
    vocab: Vocabulary,
    *,
    root: str = "root",
    workers: int = 1,
    progress: bool = True,
    gnf_budget: int = DEFAULT_BUDGETS.gnf_budget,
    max_states: int = DEFAULT_BUDGETS.max_states,
    memory_budget: int | None = DEFAULT_BUDGETS.memory_budget,
    specialize: bool | None = None,
    domains: bool = False,
    gnf_strategy: str = "auto",
    max_work: int | None = None,
) -> TokenClasses:
    """Compute classes of interchangeable tokens for ``grammar`` over ``vocab`` (CFGzip).

    The grammar is trimmed and converted to Greibach normal form; every text token of the
    vocabulary is run through the displacement automaton
    (:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch`), and tokens with
    equal displacement share a class.  Tokens with an empty displacement, special tokens,
    holes and padding ids form the *invalid* class (never allowed); stop tokens form their
    own class.  The representative of a class is its byte-wise shortest member (lowest id on
    ties).  To compress many grammars for one vocabulary, :class:`Compressor` keeps the
    vocabulary's preparation and a cache of results.

    Parameters
    ----------
    grammar : Grammar or str
        The grammar, or GBNF/XGrammar-EBNF text read from the start rule ``root``.
    vocab : Vocabulary
        The tokenizer vocabulary.
    root : str
        The start rule of a grammar text (a :class:`~formalgram.grammar.Grammar` has its
        own start), as every engine takes it: classes of ``compress(text, vocab,
        root="start")`` are compiled with ``compile_grammar(classes, text, root="start")``.
    workers : int
        Worker processes for the Python displacement search (1 = in this process).  The
        compiled build's search kernel always runs in this process (on the SynCode Go
        grammar 1.5 s, where two workers on the Python search take 12 s), so this matters
        only without it (``FORMALGRAM_NO_MYPYC=1`` builds, ``FORMALGRAM_NO_CSEARCH=1``).
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
        (:func:`~formalgram.transforms.specialize.specialize_terminal_symbols`): a sharper
        adjacency relation, hence fewer classes, usually at a higher search cost.  ``True``
        always; ``False`` never; ``None`` (default) at once while the stack alphabet stays
        small (:data:`~formalgram_cfgzip.pipeline.SPECIALIZE_LIMIT`), and above it only when a trial on every
        :data:`~formalgram_cfgzip.pipeline.SPECIALIZE_SAMPLE`-th token shows that the specialised search costs at most
        :data:`~formalgram_cfgzip.pipeline.SPECIALIZE_TRIAL` times the plain one (a deterministic work count, so the
        choice does not depend on the machine; the trial's tables are reused); never when
        the specialised stack alphabet has more than :data:`~formalgram_cfgzip.pipeline.SPECIALIZE_MAX` symbols (JSON
        schemas with large enumerations reach 100,000-180,000, where setting up the
        specialised search alone took seconds).  Per request, where the first mask matters
        more than the number of classes, ``False`` is the cheaper choice (MaskBench schemas:
        median 17 against 22 ms, 99th percentile 1.9 against 11.5 s).
        ``stats["specialized"]`` tells which was used, ``stats["specialize_trial"]`` the
        trial's outcome (-1: no trial, 0: plain kept, 1: specialised kept).
    domains : bool
        Also record, from this very search, the popped sequences of every class
        (:class:`~formalgram_cfgzip.search.domains.ClassDomains`, in ``classes.domains``):
        what the native engine (``engines.compile_grammar(..., engine="native")``) builds
        its tables from, so that its first compile needs no second search.  Costs the
        domain automaton's construction (``stats["domain_seconds"]``) and one
        :meth:`~formalgram_cfgzip.search.displacement.DisplacementSearch.popped` per distinct
        displacement; :meth:`TokenClasses.save` keeps the domains with the classes.
        With ``workers > 1`` the roots are taken by a search of the representatives in
        this process (the workers' tables stay in the workers).
    gnf_strategy : str
        The GNF construction (:func:`formalgram.to_gnf`'s ``strategy``): ``"auto"`` tries
        them all and keeps the smallest; ``"fast"`` runs one (a third of the conversion's
        time on JSON-schema grammars, and a search as cheap), what a compression per
        request wants.  Every strategy gives lossless classes.
    max_work : int or None
        Units of work the displacement search may take (a deterministic count: about 30-40 ns
        each on the compiled build); ``None`` for no limit.  A quick attempt before handing a
        grammar to a worker process (:mod:`formalgram_cfgzip.engines.progressive`) sets it.

    Returns
    -------
    TokenClasses
        With ``grammar_sha256`` the canonical fingerprint of the grammar and, when it was
        given as text, ``grammar_text_sha256`` the fingerprint of that text (with its root:
        :func:`~formalgram_cfgzip.cache.fingerprint_text`).  ``stats``
        holds the seconds of each stage (``parse_seconds``, ``trim_seconds``,
        ``to_gnf_seconds``, ``specialize_seconds``, ``search_setup_seconds``,
        ``search_seconds``, ``number_seconds``; ``gnf_seconds`` is everything before the
        search).

    Raises
    ------
    GrammarTooLarge
        If the GNF conversion or the displacement search exceeds its budget.
    EmptyLanguageError
        If the grammar generates nothing.
    GrammarSyntaxError
        If ``grammar`` is text that does not parse.

    Notes
    -----
    O(trie nodes) numpy work (the vocabulary's token trie is built once per vocabulary),
    one search step per distinct (automaton state, byte class) pair and token depth, plus
    one expansion per distinct (search state set, byte class) pair; the GNF conversion's
    cost is bounded by ``gnf_budget``.  The cyclic garbage collector is paused from the
    parse to the numbering (:class:`CollectorPaused`) and resumed afterwards, unless it was
    already paused.

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> g = parse_gbnf('root ::= "(" root ")" | "x"')
    >>> v = Vocabulary([b"(", b"((", b")", b"x", b"y"])
    >>> tc = compress(g, v, progress=False)
    >>> int(tc.token_class[0]) == int(tc.token_class[1]), tc.invalid.tolist()
    (False, [4])
    """
    t0 = time.perf_counter()
    with CollectorPaused():
        g, text_sha = read_source(grammar, root)
        return _run(
            g,
            grammar_fingerprint(g),
            text_sha,
            PreparedVocabulary.of(vocab),
            workers,
            progress,
            gnf_budget,
            max_states,
            memory_budget,
            specialize,
            t0,
            domains,
            gnf_strategy,
            max_work,
        )


class CollectorPaused:
    """A context that pauses Python's cyclic garbage collector for a compression.

    Parsing, the GNF and the search allocate hundreds of thousands of small objects that
    form no cycles and die together, and the collector would traverse them (and the rest of
    the heap) again and again: in a benchmark's worker process holding the vocabulary and
    every engine, collections took 1.3 ms of a 20 ms compression at the median.  The
    collector is resumed on exit, also on error, unless it was already paused on entry (so
    contexts nest).  It is process-wide: another thread's garbage waits for the exit too.

    Examples
    --------
    >>> import gc
    >>> with CollectorPaused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """

    def __init__(self) -> None:
        self.paused = False

    def __enter__(self) -> None:
        self.paused = gc.isenabled()
        if self.paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.paused:
            gc.enable()


def _run(
    g: Grammar,
    fp: str,
    text_sha: str,
    prepared: PreparedVocabulary,
    workers: int,
    progress: bool,
    gnf_budget: int,
    max_states: int,
    memory_budget: int | None,
    specialize: bool | None,
    t0: float,
    domains: bool = False,
    gnf_strategy: str = "auto",
    max_work: int | None = None,
) -> TokenClasses:
    """The pipeline after parsing (``t0``: when the call started, parsing included); the
    callers run it, and the parse, under :class:`CollectorPaused`."""
    t_parse = time.perf_counter() - t0
    live = generating(g)
    dead = [g.names[a] for a in range(len(g.names)) if g.rules_by_lhs[a] and a not in live]
    if dead:
        warnings.warn(
            f"grammar has nonterminals that derive no string ({', '.join(sorted(dead)[:5])}); "
            "XGrammar 0.2.9 still treats prefixes entering them as viable, so its masks can allow "
            "tokens that no complete parse accepts, and compressed masks then differ from it there",
            stacklevel=3,
        )
    # Copying single-byte symbols per occurrence sharpens adjacency (fewer, larger classes) but
    # multiplies the stack alphabet.  By default: done at once while the alphabet stays small,
    # otherwise only if a trial on a sample of tokens finds it affordable.
    form = searched_grammar(g, gnf_budget=gnf_budget, strategy=gnf_strategy, specialize=specialize)
    gnf, trial, specialized = form.gnf, form.trial, form.specialized
    t4 = time.perf_counter()
    t_gnf = t4 - t0

    toks = prepared.tokens
    trial_outcome = -1.0  # no trial
    t_pick = 0.0
    # the C kernel (when built) searches in this process: several times faster than worker
    # processes running the Python search, so `workers` applies to the Python search only
    search: Search
    if trial is None:
        search = new_search(gnf, max_states=max_states, memory_budget=memory_budget)
    else:
        gnf, search = pick_specialization(
            gnf,
            trial,
            toks,
            max_states,
            memory_budget,
            SPECIALIZE_TRIAL,
            SPECIALIZE_SAMPLE,
            prepared.sample_trie(SPECIALIZE_SAMPLE),
            native=True,
        )
        specialized = gnf is trial
        trial_outcome = float(specialized)
        t_pick = time.perf_counter() - t4
    in_process = 1 if isinstance(search, NativeSearch) else workers
    if in_process == 1 and trial is None and toks.lengths.size:
        # the chain symbols of long counted repetitions need not be guessed (exact for
        # tokens no longer than the vocabulary's longest; the domains are closed below)
        horizon = int(toks.lengths.max())
        twins = shift_twins(search.pda, search.below_bits, horizon)
        if twins:
            search.use_twins(twins, horizon)
    t5 = time.perf_counter()
    if max_work is not None:
        search.max_work = max_work
    code_roots: list[int] | None = [] if domains else None
    codes, expansions, work = search_vocabulary(
        gnf, search, toks, in_process, progress, max_states, memory_budget, prepared.trie, code_roots
    )
    t6 = time.perf_counter()
    # the search that answered the walk (the kernel's, or the Python search it handed the
    # walk to): the domain roots are nodes of its tables
    tables = answering(search)
    vocab = prepared.vocab
    token_class, reps_arr, stop_class, invalid_class = number_classes(vocab, toks, codes)
    t7 = time.perf_counter()
    found: ClassDomains | None = None
    if code_roots is not None:
        roots = _class_roots(vocab, toks, codes, reps_arr, (stop_class, invalid_class), code_roots, tables)
        found = class_domains(tables, roots)
    t8 = time.perf_counter()
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
        # which GNF construction was searched (an index into formalgram.transforms.gnf.STRATEGIES):
        # what re-derives the search's grammar (native tables, cache verification) must use it
        "gnf_strategy": float(GNF_STRATEGIES.index(gnf_strategy)),
        "search_kernel": float(isinstance(tables, NativeSearch)),
        # chain symbols whose guesses the search skipped (formalgram_cfgzip.search.symmetry)
        "twins": float(len(tables.twins)),
        "specialize_trial": trial_outcome,
        "specialize_trial_seconds": t_pick,
        "parse_seconds": t_parse,
        "trim_seconds": form.trim_seconds,
        "to_gnf_seconds": form.to_gnf_seconds,
        "specialize_seconds": form.specialize_seconds,
        "gnf_seconds": t_gnf,
        "search_setup_seconds": t5 - t4 - t_pick if trial is None else t_pick,
        "search_seconds": t6 - t4,
        "number_seconds": t7 - t6,
        "seconds": time.perf_counter() - t0,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    if found is not None:
        stats["domain_seconds"] = t8 - t7
        stats["domain_states"] = float(found.automaton.num_states)
        stats["domain_edges"] = float(found.automaton.num_edges)
    return TokenClasses(
        token_class, reps_arr, invalid_class, stop_class, vocab, fp, stats, text_sha, domains=found
    )


def _class_roots(
    vocab: Vocabulary,
    toks: TokenTable,
    codes: npt.NDArray[np.int64],
    reps: npt.NDArray[np.int32],
    textless: tuple[int, int],
    code_roots: list[int],
    search: Search,
) -> list[int]:
    """Class id -> domain root in ``search`` (``-1`` for the stop and invalid classes).

    From the roots the search recorded per displacement code (``code_roots``), through each
    class's representative; when the codes were computed by worker processes (no roots
    recorded), by :func:`~formalgram_cfgzip.search.domains.domain_roots` over the
    representatives.  O(classes) plus, in that case, their search.
    """
    rep_list = reps.tolist()
    if not code_roots and bool(np.any(codes >= 0)):
        return domain_roots(search, representative_texts(vocab.tokens, rep_list, textless))
    searched = np.full(vocab.logit_width, -1, dtype=np.int64)
    searched[toks.ids] = np.arange(toks.ids.size, dtype=np.int64)
    roots: list[int] = []
    for k, r in enumerate(rep_list):
        at = int(searched[r]) if k not in textless and r >= 0 else -1
        code = int(codes[at]) if at >= 0 else -1
        root = code_roots[code] if code >= 0 else DEAD
        roots.append(root if root != DEAD else -1)
    return roots


def cache_entry_name(grammar_sha256: str, vocab_sha256: str, specialize: bool | None = None) -> str:
    """Name of the sub-directory that holds one (grammar, vocabulary) result in a cache directory.

    Parameters
    ----------
    grammar_sha256 : str
        The grammar's canonical fingerprint (:func:`~formalgram_cfgzip.cache.grammar_fingerprint`).
    vocab_sha256 : str
        The vocabulary's fingerprint (:meth:`Vocabulary.fingerprint`).
    specialize : bool or None
        The ``specialize`` option of :func:`compress` (it changes the classes).

    Returns
    -------
    str
        ``g<24 hex>-v<24 hex>``, with ``-specialized`` or ``-plain`` when ``specialize`` is
        forced.  The name only locates the entry: loading checks the full fingerprints.

    Notes
    -----
    O(1).

    Examples
    --------
    >>> cache_entry_name("ab" * 32, "cd" * 32)
    'gabababababababababababab-vcdcdcdcdcdcdcdcdcdcdcdcd'
    >>> cache_entry_name("ab" * 32, "cd" * 32, False)[-6:]
    '-plain'
    """
    suffix = "" if specialize is None else ("-specialized" if specialize else "-plain")
    return f"g{grammar_sha256[:24]}-v{vocab_sha256[:24]}{suffix}"


class Compressor:
    """Compress grammar after grammar for one vocabulary, the vocabulary's work done once.

    The vocabulary is prepared at construction (:class:`PreparedVocabulary`: token table,
    trie of the token bytes); each :meth:`compress` then costs only what depends on the
    grammar, and gives what :func:`compress` gives for the same grammar, options and
    vocabulary, bit for bit.  Results are kept in an in-memory LRU cache keyed by the
    grammar's fingerprints (the text's, so that a repeated text is not even parsed, and the
    canonical one, so that a reformatted text is found too), and, with ``cache_dir``, in one
    sub-directory per grammar (:func:`cache_entry_name`), loaded with every fingerprint
    checked (:meth:`TokenClasses.load`).

    Parameters
    ----------
    vocab : Vocabulary or PreparedVocabulary
        The vocabulary, or its preparation (shared with other compressors).
    cache_size : int
        Most entries in the in-memory cache (a grammar given as text takes two: its text
        and its canonical fingerprint); 0 for none.
    cache_dir : path or None
        Directory of saved results (created when needed); ``None`` for none.
    workers, gnf_budget, max_states, memory_budget, specialize, domains, gnf_strategy, max_work
        As in :func:`compress` (with ``domains``, the cache directory's entries keep them).

    Attributes
    ----------
    prepared : PreparedVocabulary
        The vocabulary's preparation.
    hits, disk_hits, misses : int
        Results found in memory, found on disk, and computed.

    Raises
    ------
    CacheError
        If ``cache_size`` is negative.

    Notes
    -----
    Preparing costs O(total token bytes) numpy work (tenths of a second for a 128k-token
    vocabulary).  The cached :class:`TokenClasses` are shared between callers: do not
    modify their arrays.  Thread-safe: calls from several threads run one at a time (the
    pipeline holds the interpreter anyway), so a server can share one compressor between
    requests and background compressions
    (:func:`formalgram_cfgzip.engines.progressive.compile_progressive`).

    Examples
    --------
    >>> c = Compressor(Vocabulary([b"(", b"((", b")", b"x", b"y"]))
    >>> a = c.compress('root ::= "(" root ")" | "x"')
    >>> b = c.compress('root ::= "x" | "(" root ")"')  # the same grammar, written otherwise
    >>> a.token_class.tolist() == b.token_class.tolist(), c.misses, c.hits
    (True, 1, 1)
    """

    def __init__(
        self,
        vocab: Vocabulary | PreparedVocabulary,
        *,
        cache_size: int = 64,
        cache_dir: str | os.PathLike[str] | None = None,
        workers: int = 1,
        gnf_budget: int = DEFAULT_BUDGETS.gnf_budget,
        max_states: int = DEFAULT_BUDGETS.max_states,
        memory_budget: int | None = DEFAULT_BUDGETS.memory_budget,
        specialize: bool | None = None,
        domains: bool = False,
        gnf_strategy: str = "auto",
        max_work: int | None = None,
    ) -> None:
        if cache_size < 0:
            raise CacheError(f"cache_size must be at least 0, got {cache_size}")
        self.prepared = vocab if isinstance(vocab, PreparedVocabulary) else PreparedVocabulary.of(vocab)
        self.cache_size = cache_size
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.workers = workers
        self.gnf_budget = gnf_budget
        self.max_states = max_states
        self.memory_budget = memory_budget
        self.specialize = specialize
        self.domains = domains
        self.gnf_strategy = gnf_strategy
        self.max_work = max_work
        self.hits = 0
        self.disk_hits = 0
        self.misses = 0
        self._lru: OrderedDict[str, TokenClasses] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def vocab(self) -> Vocabulary:
        """The vocabulary (``prepared.vocab``)."""
        return self.prepared.vocab

    def compress(self, grammar: Grammar | str, *, root: str = "root", progress: bool = False) -> TokenClasses:
        """Classes of ``grammar`` over the vocabulary: from the caches, or computed.

        Parameters
        ----------
        grammar : Grammar or str
            The grammar, or GBNF/XGrammar-EBNF text read from the start rule ``root``.
        root : str
            The start rule of a grammar text, as in :func:`compress`.
        progress : bool
            Show a progress bar on stderr while searching.

        Returns
        -------
        TokenClasses
            Equal, bit for bit, to ``compress(grammar, vocab, ...)`` with this compressor's
            options (``stats`` aside: those of the computation that produced them).

        Raises
        ------
        GrammarSyntaxError, GrammarTooLarge, EmptyLanguageError
            As :func:`compress`.
        CacheError
            If the cache directory cannot be written.

        Notes
        -----
        A repeated text costs one hash of it; a new text its parse and canonical
        fingerprint, then the grammar's pipeline (:func:`compress`) unless a cache has it.
        """
        with self._lock:
            return self._compress(grammar, root, progress)

    def _compress(self, grammar: Grammar | str, root: str, progress: bool) -> TokenClasses:
        """:meth:`compress` under the compressor's lock."""
        t0 = time.perf_counter()
        text_sha = ""
        if isinstance(grammar, str):
            text_sha = fingerprint_text(grammar, root=root)
            known = self._recall("text:" + text_sha)
            if known is not None:
                self.hits += 1
                return known
        with CollectorPaused():  # the parse too: it allocates like the pipeline
            g, _ = read_source(grammar, root)
            fp = grammar_fingerprint(g)
            known = self._recall("grammar:" + fp)
            if known is not None:
                self.hits += 1
            else:
                known = self._load(g, fp)
                if known is not None:
                    self.disk_hits += 1
                else:
                    known = _run(
                        g,
                        fp,
                        text_sha,
                        self.prepared,
                        self.workers,
                        progress,
                        self.gnf_budget,
                        self.max_states,
                        self.memory_budget,
                        self.specialize,
                        t0,
                        self.domains,
                        self.gnf_strategy,
                        self.max_work,
                    )
                    self.misses += 1
                    if self.cache_dir is not None:
                        where = self._entry(fp)
                        known.save(where)
                        known = replace(known, cache_dir=str(where))
                self._remember("grammar:" + fp, known)
        if known.grammar_text_sha256 != text_sha:
            known = replace(known, grammar_text_sha256=text_sha)
        if text_sha:
            self._remember("text:" + text_sha, known)
        return known

    def clear(self) -> None:
        """Empty the in-memory cache (the cache directory is kept); O(entries)."""
        with self._lock:
            self._lru.clear()

    def _entry(self, fp: str) -> Path:
        assert self.cache_dir is not None
        return self.cache_dir / cache_entry_name(fp, self.prepared.vocab.fingerprint(), self.specialize)

    def _load(self, g: Grammar, fp: str) -> TokenClasses | None:
        """The saved result for ``g`` (fingerprint ``fp``), or None when absent or unusable."""
        if self.cache_dir is None:
            return None
        where = self._entry(fp)
        if not (where / "meta.json").is_file():
            return None
        try:
            return TokenClasses.load(where, grammar=g, vocab=self.prepared.vocab)
        except CacheError:
            return None  # corrupted or from elsewhere: recomputed and overwritten

    def _recall(self, key: str) -> TokenClasses | None:
        found = self._lru.get(key)
        if found is not None:
            self._lru.move_to_end(key)
        return found

    def _remember(self, key: str, classes: TokenClasses) -> None:
        if self.cache_size == 0:
            return
        self._lru[key] = classes
        self._lru.move_to_end(key)
        while len(self._lru) > self.cache_size:
            self._lru.popitem(last=False)


def number_classes(
    vocab: Vocabulary, toks: TokenTable, codes: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], int, int]:
    """Class array, representatives, stop class and invalid class from displacement codes.

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary.
    toks : TokenTable
        Its searched tokens (:func:`~formalgram_cfgzip.search.driver.token_table`).
    codes : numpy.ndarray
        ``codes[i]`` is the displacement code of token ``toks.ids[i]`` (equal codes <=>
        equal displacements; ``-1`` for an empty displacement).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, int, int)
        ``token_class`` (int32, one per logit index), ``representatives`` (int32),
        ``stop_class`` and ``invalid_class`` (``-1`` when absent).  The representative of a
        class is its byte-wise shortest member, lowest id on ties; classes are numbered by
        their representative's id, the stop class and the invalid class come last (the
        invalid class's representative is ``-1`` when it holds no real token).

    Notes
    -----
    O(vocab.logit_width) numpy work.

    Examples
    --------
    >>> v = Vocabulary([b"bb", b"a", b"b", b"?", b"<eos>"], stop_ids=[4], logit_width=6)
    >>> toks = token_table(v)
    >>> tc, reps, stop, inv = number_classes(v, toks, np.array([0, 0, 0, -1]))
    >>> tc.tolist(), reps.tolist(), stop, inv
    ([0, 0, 0, 2, 1, 2], [1, 4, 3], 1, 2)
    """
    width = vocab.logit_width
    token_class = np.full(width, -1, dtype=np.int32)
    reps: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
    if codes.size:
        # slot code + 1 of each token (slot 0: the empty displacement, no class); the first
        # token of each slot in (length, id) order is its class's representative: scattered
        # in reverse order, the first one is the last write
        k = int(codes.max()) + 2
        n = int(codes.size)
        by_length = rep_order(toks)
        first = np.full(k, n, dtype=np.int64)
        first[codes[by_length[::-1]] + 1] = np.arange(n - 1, -1, -1, dtype=np.int64)
        first[0] = n
        used = np.flatnonzero(first < n)  # codes some token has
        rep_of_used = toks.ids[by_length[first[used]]]
        order = np.argsort(rep_of_used, kind="stable")
        class_of_slot = np.full(k, -1, dtype=np.int32)
        class_of_slot[used[order]] = np.arange(used.size, dtype=np.int32)
        token_class[toks.ids] = class_of_slot[codes + 1]
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
