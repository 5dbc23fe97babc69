"""Grammar text front ends: GBNF / XGrammar EBNF, Lark and regular expressions in, GBNF out.

Each front end parses its text into the shared syntax tree (:mod:`formalgram.syntax.nodes`)
that one lowering (:mod:`formalgram.syntax.lower`) turns into a byte-level grammar.
"""

from __future__ import annotations

from formalgram.syntax.gbnf import load, parse_gbnf
from formalgram.syntax.lark import parse_lark
from formalgram.syntax.printer import to_gbnf
from formalgram.syntax.regex import parse_regex

__all__ = ["load", "parse_gbnf", "parse_lark", "parse_regex", "to_gbnf"]
