"""formalgram: a typed formal-language toolkit over bytes.

Grammar model, GBNF/EBNF front end, normal forms (epsilon, unit, useless, left
recursion, Greibach), one-state PDAs, stack adjacency and an Earley oracle.
"""

from __future__ import annotations

from formalgram.byteset import ByteSet
from formalgram.errors import (
    EmptyLanguageError,
    FormalgramError,
    GrammarError,
    GrammarSyntaxError,
    GrammarTooLarge,
    UnsupportedConstruct,
)
from formalgram.grammar import Grammar, Nonterminal, Production, Symbol

# -- parser (syntax/) --
# -- recognizers (recognize/) --
# -- transforms (transforms/) --
# -- pda / adjacency --

__version__ = "0.1.0"

__all__ = [
    "ByteSet",
    "EmptyLanguageError",
    "FormalgramError",
    "Grammar",
    "GrammarError",
    "GrammarSyntaxError",
    "GrammarTooLarge",
    "Nonterminal",
    "Production",
    "Symbol",
    "UnsupportedConstruct",
    "__version__",
]
