"""The grammar side of the compression pipeline, defined once: grammar -> trimmed -> GNF -> the form searched.

:func:`read_source` reads a grammar argument (text with its start rule, or a
:class:`~formalgram.grammar.Grammar`) and fingerprints its text; :func:`searched_grammar`
trims it, converts it to Greibach normal form and decides whether its single-byte symbols are
specialised (:func:`specialization_plan`).  :func:`~formalgram_cfgzip.compress.compress` runs
these steps before its displacement search (whose constructor,
:func:`~formalgram_cfgzip.search.native.new_search`, builds the PDA and the stack
adjacency), and everything that derives the searched grammar again from finished classes --
cache verification (:mod:`formalgram_cfgzip.verify`) and the native engine's tables -- runs
the same steps through :func:`searched_gnf`, so the three cannot drift apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from formalgram.grammar import Grammar
from formalgram.transforms.gnf import to_gnf
from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram.transforms.useless import remove_useless
from formalgram_cfgzip.budgets import DEFAULT_BUDGETS
from formalgram_cfgzip.cache import fingerprint_text

__all__ = [
    "SPECIALIZE_LIMIT",
    "SPECIALIZE_MAX",
    "SPECIALIZE_SAMPLE",
    "SPECIALIZE_TRIAL",
    "SearchedGrammar",
    "read_source",
    "searched_gnf",
    "searched_grammar",
    "specialization_plan",
]

SPECIALIZE_LIMIT = 2500  # largest stack alphabet for which single-byte symbols are specialised at once
SPECIALIZE_TRIAL = 4  # above it, specialise if that costs at most this many times the plain search...
SPECIALIZE_SAMPLE = 8  # ...measured on every 8th searched token
SPECIALIZE_MAX = 50_000  # no trial (the plain GNF) when the specialised alphabet is larger than this


def read_source(grammar: Grammar | str, root: str = "root") -> tuple[Grammar, str]:
    """The grammar of a pipeline argument, and the fingerprint of its text.

    Parameters
    ----------
    grammar : Grammar or str
        A grammar, or GBNF / XGrammar EBNF text
        (:func:`~formalgram_cfgzip.grammar_text.read_grammar`).
    root : str
        The start rule of a text (a :class:`~formalgram.grammar.Grammar` keeps its own).

    Returns
    -------
    (Grammar, str)
        The grammar, and :func:`~formalgram_cfgzip.cache.fingerprint_text` of the text read
        from ``root`` (``""`` for a Grammar).

    Raises
    ------
    GrammarSyntaxError
        If the text does not parse, or has no rule ``root``.

    Notes
    -----
    The parse of the text, plus one hash of it.

    Examples
    --------
    >>> g, sha = read_source('start ::= "a" | "b"', "start")
    >>> g.names[g.start_id], len(sha), read_source(g)[1]
    ('start', 64, '')
    """
    if isinstance(grammar, str):
        from formalgram_cfgzip.grammar_text import read_grammar

        return read_grammar(grammar, root), fingerprint_text(grammar, root=root)
    return grammar, ""


def specialization_plan(plain_names: int, special_names: int, specialize: bool | None) -> str:
    """What the pipeline does with the specialised GNF: ``"special"`` (searched), ``"trial"``
    (:func:`~formalgram_cfgzip.search.driver.pick_specialization` decides) or ``"plain"``.

    ``specialize=True`` always specialises; by default a stack alphabet of at most
    :data:`SPECIALIZE_LIMIT` symbols (or four times the plain one) is specialised at once, one
    of at most :data:`SPECIALIZE_MAX` goes to the trial, and a larger one keeps the plain GNF
    (so large an alphabet costs seconds to set up before the trial's work count can even
    start: the outcome a lost trial would give).  (``specialize=False`` never gets here.)

    Examples
    --------
    >>> [specialization_plan(23, n, None) for n in (90, 3_200, 173_000)]
    ['special', 'trial', 'plain']
    >>> specialization_plan(23, 173_000, True)
    'special'
    """
    if specialize or special_names <= max(SPECIALIZE_LIMIT, 4 * plain_names):
        return "special"
    return "trial" if special_names <= SPECIALIZE_MAX else "plain"


@dataclass(frozen=True)
class SearchedGrammar:
    """What :func:`searched_grammar` gives the displacement search.

    Attributes
    ----------
    gnf : Grammar
        The GNF to search: specialised when ``specialized``.
    trial : Grammar or None
        The specialised GNF that a trial on a sample of tokens must weigh against ``gnf``
        (plan ``"trial"``), else ``None``.
    specialized : bool
        Whether ``gnf`` is the specialised form.
    trim_seconds, to_gnf_seconds, specialize_seconds : float
        The time of each step.
    """

    gnf: Grammar
    trial: Grammar | None
    specialized: bool
    trim_seconds: float
    to_gnf_seconds: float
    specialize_seconds: float


def searched_grammar(
    grammar: Grammar,
    *,
    gnf_budget: int = DEFAULT_BUDGETS.gnf_budget,
    strategy: str = "auto",
    specialize: bool | None = None,
) -> SearchedGrammar:
    """Trim ``grammar``, convert it to GNF and choose the form the displacement search runs on.

    Parameters
    ----------
    grammar : Grammar
        The grammar.
    gnf_budget : int, keyword-only
        Size budget of the GNF conversion.
    strategy : str, keyword-only
        The GNF construction (:func:`formalgram.to_gnf`'s ``strategy``).
    specialize : bool or None, keyword-only
        Copy single-byte symbols per occurrence
        (:func:`~formalgram.transforms.specialize.specialize_terminal_symbols`): ``True``
        always, ``False`` never, ``None`` as :func:`specialization_plan` decides.

    Returns
    -------
    SearchedGrammar

    Raises
    ------
    GrammarTooLarge
        If the GNF conversion exceeds ``gnf_budget``.
    EmptyLanguageError
        If the grammar generates nothing.

    Notes
    -----
    :func:`~formalgram.transforms.useless.remove_useless`, :func:`formalgram.to_gnf` (its
    cost bounded by ``gnf_budget``) and, unless ``specialize`` is ``False``, one
    specialisation (linear in the GNF).

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> g = parse_gbnf('root ::= "(" root ")" | [a-z]')
    >>> plain = searched_grammar(g, specialize=False)
    >>> special = searched_grammar(g)
    >>> plain.specialized, special.specialized, len(special.gnf.names) >= len(plain.gnf.names)
    (False, True, True)
    """
    t0 = time.perf_counter()
    trimmed = remove_useless(grammar)
    t1 = time.perf_counter()
    gnf = to_gnf(trimmed, budget=gnf_budget, strategy=strategy)
    t2 = time.perf_counter()
    trial: Grammar | None = None
    specialized = False
    if specialize is not False:
        special = specialize_terminal_symbols(gnf)
        plan = specialization_plan(len(gnf.names), len(special.names), specialize)
        if plan == "special":
            gnf, specialized = special, True
        elif plan == "trial":
            trial = special
    t3 = time.perf_counter()
    return SearchedGrammar(gnf, trial, specialized, t1 - t0, t2 - t1, t3 - t2)


def searched_gnf(
    grammar: Grammar | str,
    *,
    specialized: bool,
    strategy: str = "auto",
    root: str = "root",
    gnf_budget: int = DEFAULT_BUDGETS.gnf_budget,
) -> Grammar:
    """The GNF grammar that the search of finished classes ran on, derived again.

    Parameters
    ----------
    grammar : Grammar or str
        The grammar the classes were computed from (or its text, read from ``root``).
    specialized : bool, keyword-only
        ``classes.stats["specialized"]``: whether the searched form was specialised.
    strategy : str, keyword-only
        The GNF construction searched
        (:func:`~formalgram_cfgzip.classes.searched_strategy` of the classes).
    root : str, keyword-only
        The start rule of a text.
    gnf_budget : int, keyword-only
        Size budget of the conversion.

    Returns
    -------
    Grammar
        The very GNF :func:`searched_grammar` gave the search (the same steps, with the
        specialisation forced to what the classes record).

    Raises
    ------
    GrammarTooLarge, EmptyLanguageError, GrammarSyntaxError
        As :func:`~formalgram_cfgzip.compress.compress`.

    Notes
    -----
    As :func:`searched_grammar`, plus the parse of a text.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> text = 'root ::= "(" root ")" | [a-z]'
    >>> classes = compress(text, Vocabulary([b"(", b")", b"x"]), progress=False)
    >>> gnf = searched_gnf(text, specialized=bool(classes.stats["specialized"]))
    >>> len(gnf.names) == classes.stats["gnf_nonterminals"]
    True
    """
    g, _ = read_source(grammar, root)
    return searched_grammar(g, gnf_budget=gnf_budget, strategy=strategy, specialize=specialized).gnf
