"""Public test helpers: Hypothesis strategies of random grammars and test strings.

Import from here (``from formalgram.testing import grammars, grammar_and_strings``); the
module needs the ``hypothesis`` package.
"""

from __future__ import annotations

from formalgram.testing.strategies import grammar_and_strings, grammars

__all__ = ["grammar_and_strings", "grammars"]
