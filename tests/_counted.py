"""Property tests that count the cases they really check (no tests here).

A Hypothesis test that gives up on some inputs (a grammar with an empty language, a text a
reader refuses) could pass having checked almost nothing.  Such a test calls
:func:`gave_up` where it returns early (``return gave_up()``) and carries
``@checks_at_least(n)`` above its ``@settings``/``@given``: the examples that ran to the end
of the body without giving up (and without ``assume`` rejecting them) are counted, and the
test fails when fewer than ``n`` were.  ``FORMALGRAM_PRINT_CHECKED=1`` prints the counts.

Hypothesis documents ``test.hypothesis.inner_test`` as the place to wrap the body of a
``@given`` test; the counting wrapper is installed there.
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_GAVE_UP: contextvars.ContextVar[bool] = contextvars.ContextVar("gave_up", default=False)


def gave_up() -> None:
    """Mark the running example as not checked (call it where the test returns early)."""
    _GAVE_UP.set(True)


def checks_at_least(minimum: int) -> Callable[[F], F]:
    """Fail the ``@given`` test below when fewer than ``minimum`` examples were checked.

    Parameters
    ----------
    minimum : int
        Examples that must reach the end of the test body without :func:`gave_up`.
    """

    def wrap(test: F) -> F:
        handle = test.hypothesis  # type: ignore[attr-defined]
        inner = handle.inner_test
        checked = [0]

        @functools.wraps(inner)
        def counting(*args: Any, **kwargs: Any) -> None:
            token = _GAVE_UP.set(False)
            try:
                inner(*args, **kwargs)
                if not _GAVE_UP.get():
                    checked[0] += 1
            finally:
                _GAVE_UP.reset(token)

        handle.inner_test = counting

        @functools.wraps(test)
        def run(*args: Any, **kwargs: Any) -> None:
            checked[0] = 0
            test(*args, **kwargs)
            if os.environ.get("FORMALGRAM_PRINT_CHECKED") == "1":
                print(f"\n{test.__name__}: {checked[0]} examples checked (at least {minimum} wanted)")
            assert checked[0] >= minimum, (
                f"{test.__name__} checked only {checked[0]} examples; at least {minimum} must be "
                "checked (the others gave up): the property would pass almost vacuously"
            )

        return run  # type: ignore[return-value]

    return wrap
