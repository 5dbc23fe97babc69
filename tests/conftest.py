"""Test-session set-up: the checkout's ``bench`` package is importable, and a test stopped by
a missing optional package is reported as skipped, with the package's own message.

The benchmark code (``bench/``) is not installed; ``tests/test_report.py`` imports it from
the checkout.  The repository root is appended to ``sys.path``, not put first, so that an
installed (mypyc-compiled) ``formalgram`` still wins over the source tree next to it.

Where a test (or one of its fixtures) stops on an error that says an optional package is
missing, and that package is indeed not installed (:mod:`_optional`), the test is reported
as skipped with the error's text as the reason; where the package is installed, the error
stays a failure.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from _optional import missing_optional_package  # noqa: E402  (tests/ is on sys.path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.excinfo is not None and call.when in ("setup", "call"):
        package = missing_optional_package(call.excinfo.value)
        if package is not None:
            path, line, _name = item.reportinfo()
            report.outcome = "skipped"
            reason = " ".join(str(call.excinfo.value).split())
            report.longrepr = (str(path), (line or 0) + 1, f"Skipped: optional package {package}: {reason}")
    return report
