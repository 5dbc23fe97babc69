"""Cache verification: whether token classes are what the pipeline derives from their grammar.

:meth:`TokenClasses.load(..., verify=...) <formalgram_cfgzip.classes.TokenClasses.load>`
calls :func:`mismatch`: it checks the classes' numbering against
:func:`~formalgram_cfgzip.compress.number_classes`, derives the searched grammar again
(:func:`~formalgram_cfgzip.pipeline.searched_gnf`, under :data:`~formalgram_cfgzip.budgets.DEFAULT_BUDGETS`)
and runs the displacement search over every token or a random sample of them with the
representatives of their classes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from formalgram.grammar import Grammar
from formalgram_cfgzip.budgets import DEFAULT_BUDGETS
from formalgram_cfgzip.classes import TokenClasses, searched_strategy
from formalgram_cfgzip.compress import PreparedVocabulary, number_classes
from formalgram_cfgzip.pipeline import searched_gnf
from formalgram_cfgzip.search.driver import TokenTable, search_vocabulary
from formalgram_cfgzip.search.native import new_search

__all__ = ["mismatch"]


def _same(got: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], int, int], tc: TokenClasses) -> int:
    """-1 if ``got`` (:func:`number_classes`' output) equals ``tc``, else a token id where they differ."""
    token_class, reps, stop, inv = got
    differ = np.flatnonzero(token_class != tc.token_class)
    if differ.size:
        return int(differ[0])
    if reps.shape != tc.representatives.shape:
        return 0
    changed = np.flatnonzero(reps != tc.representatives)
    if changed.size:
        return max(int(tc.representatives[int(changed[0])]), 0)
    return -1 if (stop, inv) == (tc.stop_class, tc.invalid_class) else 0


def _describe_token(tc: TokenClasses, token: int) -> str:
    """``token N (b'...')``: a token id and the start of its bytes, for messages."""
    text = tc.vocab.tokens[token] if 0 <= token < tc.vocab.size else None
    shown = "" if text is None else f" ({text[:24]!r})"
    return f"token {token}{shown}"


def mismatch(tc: TokenClasses, grammar: Grammar | str, sample: int, seed: int, *, root: str = "root") -> str:
    """Why ``tc`` is not what ``compress(grammar, tc.vocab, root=root)`` gives, from a search over ``sample`` tokens.

    Parameters
    ----------
    tc : TokenClasses
        The classes to check.
    grammar : Grammar or str
        Their grammar (a text is read from ``root``).
    sample : int
        How many text tokens to draw; ``-1`` (or at least all of them) searches every token
        and compares the whole partition.
    seed : int
        Seed of the drawn tokens.
    root : str, keyword-only
        The start rule of a text.

    Returns
    -------
    str
        ``""`` if no difference was found, else the first difference, in words.

    Raises
    ------
    GrammarError, GrammarTooLarge
        If the grammar does not parse or its GNF or search exceeds the default budgets.

    Notes
    -----
    The grammar's side of :func:`~formalgram_cfgzip.compress.compress` (GNF conversion,
    search tables), the vocabulary's token table, and one search over the drawn tokens and
    their representatives (all tokens for ``sample = -1``).

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> text = 'root ::= "(" root ")" | "x"'
    >>> tc = compress(text, Vocabulary([b"(", b")", b"x", b"y"]), progress=False)
    >>> mismatch(tc, text, -1, 0), mismatch(tc, 'root ::= "(" root ")" | "y"', -1, 0)[:32]
    ('', 'the search derives other classes')
    """
    vocab = tc.vocab
    toks = PreparedVocabulary.of(vocab).tokens  # shared with compress()
    # 1. the numbering and representatives compress gives to this partition
    relabel = tc.token_class[toks.ids].astype(np.int64)
    if tc.invalid_class >= 0:
        relabel[relabel == tc.invalid_class] = -1
    first = _same(number_classes(vocab, toks, relabel), tc)
    if first >= 0:
        return (
            f"its classes are not numbered as compress numbers them (first at {_describe_token(tc, first)}): "
            "each representative must be its class's shortest member, classes in the order of their "
            "representatives, then the stop and the invalid class"
        )
    # 2. the search compress ran, on the form of the grammar it used
    specialized = tc.stats.get("specialized")
    if specialized not in (0.0, 1.0):
        return "its stats do not say which form of the grammar was searched ('specialized' is missing)"
    gnf = searched_gnf(
        grammar, specialized=bool(specialized), strategy=searched_strategy(tc.stats), root=root
    )
    # the search kernel when built (the same classes as the Python search, array for array)
    budgets = DEFAULT_BUDGETS
    search = new_search(gnf, max_states=budgets.max_states, memory_budget=budgets.memory_budget)
    m = int(toks.ids.size)
    if sample < 0 or sample >= m:
        codes, _, _ = search_vocabulary(
            gnf, search, toks, 1, False, budgets.max_states, budgets.memory_budget
        )
        first = _same(number_classes(vocab, toks, codes), tc)
        if first >= 0:
            return f"the search derives other classes (first at {_describe_token(tc, first)})"
        return ""
    # 3. a sample of tokens and the representatives of their classes
    rng = np.random.default_rng(seed)
    drawn = np.sort(rng.choice(m, size=sample, replace=False)).astype(np.int64)
    ids = toks.ids[drawn]
    cls = tc.token_class[ids].astype(np.int64)
    text = cls != tc.invalid_class
    rep_ids = tc.representatives[cls[text]].astype(np.int64)
    at = np.union1d(drawn, np.searchsorted(toks.ids, rep_ids))
    sub = TokenTable(toks.ids[at], toks.offsets[at], toks.lengths[at], toks.flat, toks.all_lengths)
    sub_codes, _, _ = search_vocabulary(gnf, search, sub, 1, False, budgets.max_states, budgets.memory_budget)
    code = np.full(vocab.logit_width, -2, dtype=np.int64)
    code[sub.ids] = sub_codes
    own = code[ids]
    want = np.full(ids.size, -1, dtype=np.int64)
    want[text] = code[rep_ids]
    bad = np.flatnonzero((own != want) | (text & (want < 0)))
    if bad.size:
        j = int(bad[0])
        if not text[j]:
            return f"{_describe_token(tc, int(ids[j]))} is in the invalid class but the grammar allows it somewhere"
        rep = int(tc.representatives[int(cls[j])])
        if want[j] < 0:
            return f"class {int(cls[j])} has representative {rep}, which the grammar allows nowhere"
        return (
            f"{_describe_token(tc, int(ids[j]))} is in class {int(cls[j])}, but its displacement "
            f"differs from that of the representative {rep}"
        )
    classes = np.unique(cls[text])
    rep_codes = code[tc.representatives[classes].astype(np.int64)]
    if np.unique(rep_codes).size != classes.size:
        _, index, counts = np.unique(rep_codes, return_index=True, return_counts=True)
        c = int(classes[int(index[int(np.flatnonzero(counts > 1)[0])])])
        return f"class {c} has the displacement of another class (they would be one class)"
    return ""
