"""Grammar text as this package reads it: GBNF / XGrammar EBNF with XGrammar's own ``Regex`` automata.

Every grammar text that reaches :func:`~formalgram_cfgzip.compress.compress`, the engines,
cache verification and the command line is read by :func:`read_grammar`:
:func:`formalgram.parse_gbnf` with the ``Regex("...")`` macros of XGrammar's EBNF read from
XGrammar itself (:func:`~formalgram_cfgzip.xgrammar_regex.regex_automaton`).  The text
handed to an engine keeps its macros, so XGrammar enforces its own automaton and the classes
are computed for that very language (``docs/syntax.md``).
"""

from __future__ import annotations

from formalgram.grammar import Grammar
from formalgram.syntax.gbnf import parse_gbnf
from formalgram_cfgzip.xgrammar_regex import regex_automaton

__all__ = ["read_grammar"]


def read_grammar(text: str, start: str = "root", *, lookahead: str = "error") -> Grammar:
    """Parse GBNF / XGrammar EBNF text, its ``Regex(...)`` macros as XGrammar compiles them.

    Parameters
    ----------
    text : str
        The grammar text.
    start : str
        The start rule.
    lookahead : {"error", "drop"}
        As :func:`formalgram.parse_gbnf`.

    Returns
    -------
    Grammar

    Raises
    ------
    GrammarSyntaxError
        If the text does not parse (with line and column).
    UnsupportedConstruct
        For a construct that is refused, a ``Regex`` macro XGrammar refuses, or a macro met
        without XGrammar installed.

    Notes
    -----
    :func:`formalgram.parse_gbnf`'s cost, plus one small XGrammar compile per distinct macro.

    Examples
    --------
    >>> g = read_grammar('root ::= "id-" Regex("[0-9]{2,3}", json_string=true)')
    >>> g.accepts(b"id-042"), g.accepts(b"id-4")
    (True, False)
    """
    return parse_gbnf(text, start, lookahead=lookahead, regex=regex_automaton)
