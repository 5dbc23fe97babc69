"""The displacement search: the automaton over one GNF grammar, and the driver over a vocabulary.

:mod:`~formalgram_cfgzip.search.displacement` holds :class:`DisplacementSearch` (one token's
bytes -> an automaton state whose key identifies its displacement), over the canonical tries
of :mod:`~formalgram_cfgzip.search.trie`;
:mod:`~formalgram_cfgzip.search.driver` runs it over every token of a vocabulary, level by
level, in one process or several.
"""

from __future__ import annotations

from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.driver import TokenTable, search_vocabulary, token_table

__all__ = ["DisplacementSearch", "TokenTable", "search_vocabulary", "token_table"]
