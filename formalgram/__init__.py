"""formalgram: a typed formal-language toolkit over bytes.

Grammar model, GBNF/EBNF, Lark and regular-expression front ends, normal forms
(epsilon, unit, useless, left recursion, Greibach), one-state PDAs, stack adjacency and
an Earley oracle.
"""

from __future__ import annotations

# -- pda / adjacency --
from formalgram.adjacency import backtrack_pairs, can_be_below, stack_adjacency

# -- transforms (transforms/) --
from formalgram.analysis import generating, nullable, reachable, unreachable
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
from formalgram.pda import PDA

# -- recognizers (recognize/) --
from formalgram.recognize import EarleyRecognizer, accepts, enumerate_strings, is_prefix, sample

# -- parser (syntax/) --
from formalgram.syntax import load, parse_gbnf, parse_lark, parse_regex, to_gbnf
from formalgram.transforms import (
    byte_class_map,
    byte_classes,
    gnf_violation,
    is_gnf,
    remove_epsilon,
    remove_left_recursion,
    remove_unit,
    remove_useless,
    specialize_terminal_symbols,
    to_gnf,
)

__version__ = "0.1.0"

__all__ = [
    # pda / adjacency
    "PDA",
    "ByteSet",
    # recognizers
    "EarleyRecognizer",
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
    "accepts",
    "backtrack_pairs",
    # transforms
    "byte_class_map",
    "byte_classes",
    "can_be_below",
    "enumerate_strings",
    "generating",
    "gnf_violation",
    "is_gnf",
    "is_prefix",
    # parser
    "load",
    "nullable",
    "parse_gbnf",
    "parse_lark",
    "parse_regex",
    "reachable",
    "remove_epsilon",
    "remove_left_recursion",
    "remove_unit",
    "remove_useless",
    "sample",
    "specialize_terminal_symbols",
    "stack_adjacency",
    "to_gbnf",
    "to_gnf",
    "unreachable",
]
