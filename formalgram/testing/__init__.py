"""Public test helpers: Hypothesis strategies of random grammars and test strings.

Import from here (``from formalgram.testing import grammars, grammar_and_strings``).  This
is the only part of formalgram that needs the ``hypothesis`` package, an optional
dependency: ``pip install "formalgram[testing]"``.
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
except ImportError as exc:
    raise ImportError(
        'formalgram.testing needs the hypothesis package: pip install "formalgram[testing]"'
    ) from exc

from formalgram.testing.strategies import grammar_and_strings, grammars

__all__ = ["grammar_and_strings", "grammars"]
