"""Grammar transforms: useless-symbol, epsilon, unit and left-recursion removal, GNF, byte classes.

Each transform is a free function in its own module that returns a new grammar.
"""

from __future__ import annotations

from formalgram.transforms.byte_classes import byte_class_map, byte_classes
from formalgram.transforms.epsilon import remove_epsilon
from formalgram.transforms.gnf import to_gnf
from formalgram.transforms.gnf_check import gnf_violation, is_gnf
from formalgram.transforms.left_recursion import remove_left_recursion
from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram.transforms.unit import remove_unit
from formalgram.transforms.useless import remove_useless

__all__ = [
    "byte_class_map",
    "byte_classes",
    "gnf_violation",
    "is_gnf",
    "remove_epsilon",
    "remove_left_recursion",
    "remove_unit",
    "remove_useless",
    "specialize_terminal_symbols",
    "to_gnf",
]
