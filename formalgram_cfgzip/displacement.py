"""Former home of the displacement search, kept so that old imports keep working.

The search lives in :mod:`formalgram_cfgzip.search.displacement`, and
:func:`~formalgram.transforms.specialize.specialize_terminal_symbols` in
:mod:`formalgram.transforms.specialize`.
"""

from __future__ import annotations

from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram_cfgzip.search.displacement import (
    DEAD,
    EXPANSION_WORK,
    START,
    CanonicalKey,
    DisplacementSearch,
    current_rss,
)

__all__ = [
    "DEAD",
    "EXPANSION_WORK",
    "START",
    "CanonicalKey",
    "DisplacementSearch",
    "current_rss",
    "specialize_terminal_symbols",
]
