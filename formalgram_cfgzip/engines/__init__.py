"""Grammar-engine adapters over token classes (XGrammar, llguidance).

Neither engine is imported until used: ``formalgram_cfgzip.engines.xgrammar`` and
``formalgram_cfgzip.engines.llguidance`` are loaded on first attribute access (or an
explicit import).  The protocol, errors and the special-token policy are in
:mod:`formalgram_cfgzip.engines.base`.

Example
-------
>>> from formalgram_cfgzip import engines
>>> # compiled = engines.xgrammar.compile(classes, grammar_text)
>>> # m = compiled.matcher(); m.fill_next_token_bitmask(bitmask)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from formalgram_cfgzip.engines.base import (
    BatchIndexError,
    ClassesMismatchError,
    CompiledGrammar,
    EngineError,
    EngineMatcher,
    Matcher,
    TokenIdError,
)

if TYPE_CHECKING:
    from formalgram_cfgzip.engines import llguidance, xgrammar

__all__ = [
    "BatchIndexError",
    "ClassesMismatchError",
    "CompiledGrammar",
    "EngineError",
    "EngineMatcher",
    "Matcher",
    "TokenIdError",
    "compile",
    "compile_full",
    "llguidance",
    "xgrammar",
]

ENGINES = ("xgrammar", "llguidance")


def __getattr__(name: str) -> Any:
    if name in ENGINES:
        return importlib.import_module(f"formalgram_cfgzip.engines.{name}")
    raise AttributeError(f"module 'formalgram_cfgzip.engines' has no attribute {name!r}")


def compile(classes: Any, grammar_text: str, *, engine: str = "xgrammar", **options: Any) -> CompiledGrammar:
    """Compile ``grammar_text`` over ``classes`` with ``engine`` (``"xgrammar"`` or ``"llguidance"``)."""
    if engine not in ENGINES:
        raise EngineError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    mod = importlib.import_module(f"formalgram_cfgzip.engines.{engine}")
    result: CompiledGrammar = mod.compile(classes, grammar_text, **options)
    return result


def compile_full(
    vocab: Any, grammar_text: str, *, engine: str = "xgrammar", **options: Any
) -> CompiledGrammar:
    """The uncompressed reference over every token of ``vocab`` with ``engine``."""
    if engine not in ENGINES:
        raise EngineError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    mod = importlib.import_module(f"formalgram_cfgzip.engines.{engine}")
    result: CompiledGrammar = mod.compile_full(vocab, grammar_text, **options)
    return result
