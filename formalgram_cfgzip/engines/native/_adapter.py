"""The native engine's one door into the rest of the package.

Everything the native engine takes from other modules -- the grammar pipeline of
:func:`~formalgram_cfgzip.compress.compress`, the displacement search and the internals of its
tries, the class data, the engine protocol's base classes, the mask expander, the on-disk
cache and the errors -- is imported
here and nowhere else in :mod:`formalgram_cfgzip.engines.native`, so that moving those
modules changes only the imports of this file.

The domain automaton (:mod:`formalgram_cfgzip.search.domains`) is built from the very trie
nodes the displacement search interned, which is what makes equal domains cost nothing to
detect; ``compress(..., domains=True)`` records it from its own search.
"""

from __future__ import annotations

from formalgram.analysis import generating, reachable
from formalgram.errors import FormalgramError, GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.pda import PDA
from formalgram.transforms.gnf import to_gnf
from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram.transforms.useless import remove_useless
from formalgram_cfgzip.cache import grammar_fingerprint, read_cache, write_cache
from formalgram_cfgzip.classes import TokenClasses, classes_fingerprint, searched_strategy
from formalgram_cfgzip.engines.arguments import prepare_compressed
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.engines.tokens import class_vocabulary
from formalgram_cfgzip.errors import CacheError, ClassesMismatchError, EngineError, TokenIdError
from formalgram_cfgzip.expand import MaskExpander
from formalgram_cfgzip.grammar_text import read_grammar
from formalgram_cfgzip.search.domains import (
    ClassDomains,
    DomainAutomaton,
    class_domains,
    domain_automaton,
    domain_roots,
    gnf_digest,
    representative_texts,
)
from formalgram_cfgzip.search.native import answering, new_search
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "PDA",
    "CacheError",
    "ClassDomains",
    "ClassesMismatchError",
    "CompiledGrammar",
    "DomainAutomaton",
    "EngineError",
    "EngineMatcher",
    "FormalgramError",
    "Grammar",
    "GrammarError",
    "GrammarTooLarge",
    "MaskExpander",
    "TokenClasses",
    "TokenIdError",
    "Vocabulary",
    "answering",
    "class_domains",
    "class_gnf",
    "class_vocabulary",
    "classes_fingerprint",
    "domain_automaton",
    "domain_roots",
    "gnf_digest",
    "grammar_fingerprint",
    "new_search",
    "parse_grammar",
    "prepare_compressed",
    "read_cache",
    "representative_texts",
    "searched_strategy",
    "write_cache",
]


def parse_grammar(grammar: Grammar | str) -> Grammar:
    """``grammar`` itself, or the grammar of GBNF text (start rule ``root``), as ``compress`` reads it."""
    return read_grammar(grammar) if isinstance(grammar, str) else grammar


def class_gnf(
    grammar: Grammar | str, *, specialized: bool, gnf_budget: int = 2_000_000, strategy: str = "auto"
) -> Grammar:
    """The GNF grammar ``compress`` searched: trimmed, converted, specialised when it was.

    Parameters
    ----------
    grammar : Grammar or str
        The grammar the classes were computed from.
    specialized : bool
        ``classes.stats["specialized"]``: whether single-byte symbols were copied per occurrence.
    gnf_budget : int, keyword-only
        Size budget of the conversion (``compress``'s default).
    strategy : str, keyword-only
        The GNF construction the search used (:func:`searched_strategy` of the classes).

    Returns
    -------
    Grammar
        A GNF grammar of the same language.  Every nonterminal reachable from its start is
        generating (checked; a :class:`GrammarError` otherwise).

    Raises
    ------
    GrammarTooLarge, EmptyLanguageError, GrammarSyntaxError
        As :func:`~formalgram_cfgzip.classes.compress`.
    """
    gnf = to_gnf(remove_useless(parse_grammar(grammar)), budget=gnf_budget, strategy=strategy)
    if specialized:
        gnf = specialize_terminal_symbols(gnf)
    live = generating(gnf)
    for a in reachable(gnf):
        if a not in live:
            raise GrammarError(f"GNF symbol {gnf.names[a]!r} is reachable but derives nothing")
    return gnf
