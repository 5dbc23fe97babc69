"""Parameters that carry what their case needs (no tests here).

``engine_param("xgrammar")`` is a ``parametrize`` value marked ``xgrammar``: the hook in
``tests/conftest.py`` skips it, with its reason, when that package is not installed, so a
test over several engines still runs the cases of the engines that are there.
"""

from __future__ import annotations

from typing import Any

import pytest

#: engines whose cases a mark of the same name guards (tests/conftest.py)
ENGINE_PACKAGES = ("xgrammar", "llguidance")


def engine_param(name: str, *values: Any, id: str | None = None) -> Any:
    """``pytest.param(name, *values)`` marked with what the engine ``name`` needs."""
    marks = [getattr(pytest.mark, name)] if name in ENGINE_PACKAGES else []
    return pytest.param(name, *values, marks=marks, id=id)


def engine_params(*names: str) -> list[Any]:
    """:func:`engine_param` of each name."""
    return [engine_param(n) for n in names]
