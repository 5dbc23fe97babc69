"""The cache-corruption campaign (``tests/_cache_campaign.py``): a short run by default, the full one heavy.

The rules: every corrupted cache is refused with ``CacheError`` or loads; nothing raises
another exception, hangs or kills the process; and with ``verify="all"`` no cache that
would give a wrong mask loads.  Without verification, caches rewritten with their
invariants intact do load with wrong masks (the documented limit of a checksum); the
short run checks that it still sees some, so that its oracle is seen to work.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from _cache_campaign import Report, run_campaign, run_child, subjects

from formalgram_cfgzip import TokenClasses

# seconds a load may take before it counts as a hang: a guard (loads take milliseconds), far
# above what a loaded machine needs
HANG_GUARD = 300.0


def _check(report: Report) -> None:
    bad = report.failures()
    assert not bad, "\n".join(
        f"{r['subject']} / {r['variant']} / {r['mode']}: {r['outcome']} {r['message']}" for r in bad
    )


def test_short_campaign() -> None:
    report = run_campaign(short=True, timeout=HANG_GUARD)
    assert report.variants >= 40
    _check(report)
    assert report.counts("none")["wrong"] > 0  # tampering a checksum cannot see: the oracle works
    for mode in ("sample", "all"):  # the synthetic vocabulary is smaller than a sample: both search all
        counts = report.counts(mode)
        assert counts["wrong"] == 0 and counts["equivalent"] == 0, counts
        assert counts["identical"] >= 1


def _sleep(*args: object, **kwargs: object) -> TokenClasses:
    time.sleep(3600)
    raise AssertionError("not reached")


def _segfault(*args: object, **kwargs: object) -> TokenClasses:
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("not reached")


def _allocate(*args: object, **kwargs: object) -> TokenClasses:
    np.ones(1 << 31, dtype=np.uint8)  # 2 GiB: over the child's limit
    raise AssertionError("not reached")


def _untyped(*args: object, **kwargs: object) -> TokenClasses:
    raise OverflowError("cannot convert float infinity to integer")


@pytest.mark.parametrize(
    ("load", "outcome"),
    [(_sleep, "hang"), (_segfault, "crash"), (_allocate, "untyped"), (_untyped, "untyped")],
)
def test_the_child_harness_reports_every_failure(tmp_path: Path, load: object, outcome: str) -> None:
    sub = subjects(short=True)[0]
    # the sleeping load is a hang at any timeout; the others must end before the guard
    timeout = 2.0 if outcome == "hang" else HANG_GUARD
    got = run_child(sub, tmp_path, "none", timeout=timeout, memory=1 << 30, load=load)  # type: ignore[arg-type]
    assert got["outcome"] == outcome, got
    if load is _allocate:
        assert got["message"].startswith("MemoryError"), got


@pytest.mark.heavy
def test_full_campaign() -> None:
    report = run_campaign(short=False, timeout=120.0)
    assert report.variants >= 442
    _check(report)
