"""Grammar text front ends: GBNF / XGrammar EBNF parser and printer."""

from __future__ import annotations

from formalgram.syntax.gbnf import load, parse_gbnf
from formalgram.syntax.printer import to_gbnf

__all__ = ["load", "parse_gbnf", "to_gbnf"]
