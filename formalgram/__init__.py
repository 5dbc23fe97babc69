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
from formalgram.syntax import load, parse_gbnf, to_gbnf
# -- recognizers (recognize/) --
from formalgram.recognize import EarleyRecognizer, accepts, enumerate_strings, is_prefix, sample
# -- transforms (transforms/) --
from formalgram.analysis import generating, nullable, reachable, unreachable
from formalgram.transforms import (
    byte_class_map,
    byte_classes,
    is_gnf,
    remove_epsilon,
    remove_left_recursion,
    remove_unit,
    remove_useless,
    to_gnf,
)
# -- pda / adjacency --
from formalgram.adjacency import backtrack_pairs, can_be_below, stack_adjacency
from formalgram.pda import PDA

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
    # parser
    "load",
    "parse_gbnf",
    "to_gbnf",
    # transforms
    "byte_class_map",
    "byte_classes",
    "generating",
    "is_gnf",
    "nullable",
    "reachable",
    "remove_epsilon",
    "remove_left_recursion",
    "remove_unit",
    "remove_useless",
    "to_gnf",
    "unreachable",
    # recognizers
    "EarleyRecognizer",
    "accepts",
    "enumerate_strings",
    "is_prefix",
    "sample",
    # pda / adjacency
    "PDA",
    "backtrack_pairs",
    "can_be_below",
    "stack_adjacency",
]
