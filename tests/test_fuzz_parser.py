"""Fuzzing the grammar-text front ends in the suite: Hypothesis-generated and mutated texts.

Each input goes to the worker process of ``bench/fuzz_parser.py`` (a child process, so that
a crash or a hang is a failed example, not the end of the test run), which checks it:

* ``parse_gbnf`` / ``parse_regex`` raise only ``GrammarSyntaxError`` (or its subclass
  ``UnsupportedConstruct``), with a line and column inside the input;
* a grammar that parses prints with ``to_gbnf`` and parses back to an equal grammar;
* a pattern is refused exactly when Python's ``re`` refuses it (but for the documented
  limits), and otherwise agrees with ``re.fullmatch`` on random strings and sampled members.

The oracles are structural equality of the model, Python's ``re`` and the Earley
recognizer.  The default run draws a few hundred inputs; ``-m heavy`` draws thousands (the
100,000-input campaign is ``python bench/fuzz_parser.py``, results in docs/benchmarks.md).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz_parser import (
    _GBNF_TOKENS,
    _REGEX_FLAGS,
    _REGEX_TOKENS,
    SEED_GRAMMARS,
    SEED_PATTERNS,
    Worker,
    generated_gbnf,
    generated_regex,
    make_input,
    mutate,
)

GOOD = ("ok", "syntax", "unsupported")
SHORT = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=4000, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    w = Worker(timeout=300.0)  # a guard against hangs, far above the milliseconds an input takes
    yield w
    w.close()


def _check(worker: Worker, request: dict[str, Any]) -> str:
    verdict = worker.run(request)
    assert verdict["verdict"] in GOOD, f"{verdict['verdict']} on {request!r}:\n{verdict['detail']}"
    return str(verdict["verdict"])


# -- strategies --------------------------------------------------------------------------

_pieces = st.one_of(st.sampled_from(_GBNF_TOKENS), st.characters(codec="utf-8"), st.sampled_from(["\ud800"]))
gbnf_soup = st.lists(_pieces, max_size=40).map("".join)


@st.composite
def mutated_gbnf(draw: st.DrawFn) -> str:
    """A generated or seed grammar text with 1 to 5 random edits (bench/fuzz_parser.py)."""
    rng = draw(st.randoms(use_true_random=False))
    base = draw(st.sampled_from(["generated", *SEED_GRAMMARS]))
    text = generated_gbnf(rng) if base == "generated" else base
    return text if draw(st.booleans()) and base == "generated" else mutate(rng, text, _GBNF_TOKENS)


@st.composite
def mutated_regex(draw: st.DrawFn) -> tuple[str, int]:
    rng = draw(st.randoms(use_true_random=False))
    base = draw(st.sampled_from(["generated", *SEED_PATTERNS]))
    text = generated_regex(rng) if base == "generated" else base
    if draw(st.booleans()):
        text = mutate(rng, text, _REGEX_TOKENS)
    return text, draw(st.sampled_from(_REGEX_FLAGS))


def _gbnf(text: str, lookahead: str) -> dict[str, Any]:
    return {"kind": "gbnf", "text": text, "lookahead": lookahead}


# -- the short run (default) ---------------------------------------------------------------


@SHORT
@given(gbnf_soup, st.sampled_from(["error", "drop"]), st.booleans())
def test_gbnf_soup(worker: Worker, text: str, lookahead: str, prefixed: bool) -> None:
    _check(worker, _gbnf("root ::= " + text if prefixed else text, lookahead))


@SHORT
@given(mutated_gbnf(), st.sampled_from(["error", "drop"]))
def test_mutated_gbnf(worker: Worker, text: str, lookahead: str) -> None:
    _check(worker, _gbnf(text, lookahead))


@SHORT
@given(mutated_regex(), st.integers(0, 10**6))
def test_mutated_regex(worker: Worker, pattern: tuple[str, int], seed: int) -> None:
    _check(worker, {"kind": "regex", "text": pattern[0], "flags": pattern[1], "seed": seed})


def test_the_checks_can_fail(worker: Worker) -> None:
    """The worker's oracle sees a grammar that parses and one that does not, and a wrong
    answer would be reported: a pattern ``re`` refuses is answered ``syntax``."""
    assert _check(worker, _gbnf('root ::= "a" | b\nb ::= [^a-z]{1,3}', "error")) == "ok"
    assert _check(worker, _gbnf('root ::= "a', "error")) == "syntax"
    assert _check(worker, _gbnf('root ::= "a" (= "b")', "error")) == "unsupported"
    assert _check(worker, {"kind": "regex", "text": "a(b", "flags": 0, "seed": 0}) == "syntax"
    assert _check(worker, {"kind": "regex", "text": "a(?:b|c)*", "flags": 0, "seed": 0}) == "ok"


class _FakeWorker(Worker):
    """A worker running ``code`` instead of the checks (for testing the harness)."""

    def __init__(self, code: str, timeout: float) -> None:
        super().__init__(timeout)
        self.code = code

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code]


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        ("import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGSEGV)", "crash"),
        ("import sys, time; sys.stdin.readline(); time.sleep(3600)", "hang"),
    ],
)
def test_crash_and_hang_are_reported(code: str, verdict: str) -> None:
    """The harness itself: a worker that dies or stalls gives a ``crash`` or ``hang`` verdict
    (the stalling one sleeps an hour, a hang at any timeout; the dying one must die before a
    generous guard)."""
    w = _FakeWorker(code, timeout=2.0 if verdict == "hang" else 300.0)
    try:
        assert w.run(_gbnf('root ::= "a"', "error"))["verdict"] == verdict
    finally:
        w.close()


# -- the long run (-m heavy) -----------------------------------------------------------------


@pytest.mark.heavy
@LONG
@given(st.one_of(gbnf_soup.map(lambda t: "root ::= " + t), gbnf_soup, mutated_gbnf()))
def test_gbnf_long(worker: Worker, text: str) -> None:
    _check(worker, _gbnf(text, "drop"))


@pytest.mark.heavy
@LONG
@given(mutated_regex(), st.integers(0, 10**6))
def test_regex_long(worker: Worker, pattern: tuple[str, int], seed: int) -> None:
    _check(worker, {"kind": "regex", "text": pattern[0], "flags": pattern[1], "seed": seed})


@pytest.mark.heavy
def test_campaign_inputs(worker: Worker) -> None:
    """5,000 inputs of the campaign's own generator (seed 1), one by one."""
    rng = random.Random(1)
    for _ in range(5_000):
        _check(worker, make_input(rng))
