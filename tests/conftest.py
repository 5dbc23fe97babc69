"""Test-session set-up: which build is imported, the C-kernel marker, Hypothesis profiles.

**One build for ``pytest`` and ``python -m pytest``.**  ``python -m pytest`` puts the current
directory first on ``sys.path``; run from the checkout, the parent process would import the
checkout's pure-Python source while every child process (started with ``python -P``)
imports the installed, compiled build.  Here the checkout root is moved to the end of
``sys.path`` unless ``PYTHONPATH`` names it (the development loop: the source tree, with
its kernels built in place, on purpose).  So both invocations import the installed build
when there is one, and the checkout otherwise; the checkout stays importable for the
``bench`` package, which is not installed.  When the build imported is the checkout,
``PYTHONPATH`` is extended with it so that child processes import it too.  The report's
header names the build (``tests/_build.py``).

**C kernels.**  ``@pytest.mark.ckernel("expand" | "search" | "native")`` (or a parameter
made by ``_build.c_param``) skips a test in the pure-Python build, with its reason, and fails
it in a compiled build whose kernel is missing or switched off (``_build.require_kernel``).

**Engines.**  A test or parameter marked ``xgrammar`` or ``llguidance`` (``_needs.engine_param``)
is skipped, with its reason, where that package is not installed; the others still run.

**Hypothesis.**  The profile ``formalgram`` is loaded by default: derandomized (every run
draws the same examples, so a verdict does not depend on the run), no example database,
no deadline and no ``too_slow`` health check (wall-time checks that fail on a loaded
machine), and a failing example printed with its ``@reproduce_failure`` blob.
``pytest --hypothesis-profile=explore`` draws new random examples on each run.

**Optional packages.**  Where a test (or one of its fixtures) stops on an error that says an
optional package is missing, and that package is indeed not installed (:mod:`_optional`), the
test is reported as skipped with the error's text as the reason; where the package is
installed, the error stays a failure.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # for bench._checkout, the one definition of the rule below
    sys.path.append(str(_ROOT))
_checkout = importlib.import_module("bench._checkout")  # importing bench places the checkout
is_checkout, place_checkout = _checkout.is_checkout, _checkout.place_checkout
pythonpath_names_checkout = _checkout.pythonpath_names_checkout


def _place_checkout() -> None:
    """Move the checkout root to the end of ``sys.path`` unless ``PYTHONPATH`` asks for it
    (:func:`bench._checkout.place_checkout`, which importing :mod:`bench` runs too)."""
    loaded = sys.modules.get("formalgram")
    from_checkout = loaded is not None and is_checkout(str(Path(str(loaded.__file__)).parents[1]))
    if from_checkout and not pythonpath_names_checkout():
        raise pytest.UsageError(
            "formalgram was imported from the checkout before tests/conftest.py could put the "
            "installed build first; run `pytest` or `python -P -m pytest`"
        )
    place_checkout()


def _children_import_it() -> None:
    """Where the build imported is the checkout, child processes must see it too."""
    import formalgram

    home = Path(str(formalgram.__file__)).resolve().parents[1]
    if home == _ROOT and not pythonpath_names_checkout():
        requested = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *requested])


_place_checkout()
_children_import_it()

settings.register_profile(
    "formalgram",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("formalgram")


def pytest_report_header(config: pytest.Config) -> list[str]:
    import _build

    return [_build.describe()]


def pytest_runtest_setup(item: pytest.Item) -> None:
    import _build
    import _needs

    for mark in item.iter_markers("ckernel"):
        for name in mark.args:
            _build.require_kernel(name)
    for package in _needs.ENGINE_PACKAGES:
        if item.get_closest_marker(package) is not None:
            pytest.importorskip(package, reason=f"needs the {package} package (not installed)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.excinfo is not None and call.when in ("setup", "call"):
        # imported here, not at the top: it imports formalgram, which must come from the
        # build _place_checkout chose
        from _optional import missing_optional_package

        package = missing_optional_package(call.excinfo.value)
        if package is not None:
            path, line, _name = item.reportinfo()
            report.outcome = "skipped"
            reason = " ".join(str(call.excinfo.value).split())
            report.longrepr = (str(path), (line or 0) + 1, f"Skipped: optional package {package}: {reason}")
    return report
