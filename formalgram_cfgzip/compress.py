"""The CFGzip pipeline: grammar -> GNF -> displacement search over a vocabulary -> :class:`TokenClasses`.

:func:`compress` trims the grammar and converts it to Greibach normal form
(:func:`formalgram.to_gnf`), optionally specialises its single-byte symbols
(:func:`formalgram.specialize_terminal_symbols`, chosen by :data:`SPECIALIZE_LIMIT` or a
trial), runs every text token through the displacement search
(:mod:`formalgram_cfgzip.search`), and numbers the classes (:func:`number_classes`).
"""

from __future__ import annotations

import resource
import time
import warnings

import numpy as np
import numpy.typing as npt

from formalgram.analysis import generating
from formalgram.grammar import Grammar
from formalgram.transforms.gnf import to_gnf
from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram.transforms.useless import remove_useless
from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.driver import TokenTable, pick_specialization, search_vocabulary, token_table
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["SPECIALIZE_LIMIT", "SPECIALIZE_SAMPLE", "SPECIALIZE_TRIAL", "compress", "number_classes"]

SPECIALIZE_LIMIT = 2500  # largest stack alphabet for which single-byte symbols are specialised at once
SPECIALIZE_TRIAL = 4  # above it, specialise if that costs at most this many times the plain search...
SPECIALIZE_SAMPLE = 8  # ...measured on every 8th searched token


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
    (:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch`), and tokens with
    equal displacement share a class.  Tokens with an empty displacement, special tokens,
    holes and padding ids form the *invalid* class (never allowed); stop tokens form their
    own class.  The representative of a class is its byte-wise shortest member (lowest id on
    ties).

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
        (:func:`~formalgram.transforms.specialize.specialize_terminal_symbols`): a sharper
        adjacency relation, hence fewer classes, usually at a higher search cost.  ``True``
        always; ``False`` never; ``None`` (default) at once while the stack alphabet stays
        small (:data:`SPECIALIZE_LIMIT`), and above it only when a trial on every
        :data:`SPECIALIZE_SAMPLE`-th token shows that the specialised search costs at most
        :data:`SPECIALIZE_TRIAL` times the plain one (a deterministic work count, so the
        choice does not depend on the machine; the trial's tables are reused).
        ``stats["specialized"]`` tells which was used, ``stats["specialize_trial"]`` the
        trial's outcome (-1: no trial, 0: plain kept, 1: specialised kept).

    Returns
    -------
    TokenClasses
        With ``grammar_sha256`` the canonical fingerprint of the grammar and, when it was
        given as text, ``grammar_text_sha256`` the fingerprint of that text.

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
    O(total token bytes) numpy work, one search step per distinct (automaton state, byte
    class) pair and token depth, plus one expansion per distinct (search state set, byte
    class) pair; the GNF conversion's cost is bounded by ``gnf_budget``.

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
    text_sha = ""
    if isinstance(grammar, str):
        from formalgram.syntax.gbnf import parse_gbnf

        text_sha = fingerprint_text(grammar)
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
    # otherwise only if a trial on a sample of tokens finds it affordable.
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

    toks = token_table(vocab)
    trial_outcome = -1.0  # no trial
    t_pick = 0.0
    if trial is None:
        search = DisplacementSearch(gnf, max_states=max_states, memory_budget=memory_budget)
    else:
        gnf, search = pick_specialization(
            gnf, trial, toks, max_states, memory_budget, SPECIALIZE_TRIAL, SPECIALIZE_SAMPLE
        )
        specialized = gnf is trial
        trial_outcome = float(specialized)
        t_pick = time.perf_counter() - t0 - t_gnf
    codes, expansions, work = search_vocabulary(
        gnf, search, toks, workers, progress, max_states, memory_budget
    )
    t_search = time.perf_counter() - t0 - t_gnf
    token_class, reps_arr, stop_class, invalid_class = number_classes(vocab, toks, codes)
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
    return TokenClasses(token_class, reps_arr, invalid_class, stop_class, vocab, fp, stats, text_sha)


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
