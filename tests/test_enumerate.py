"""Bounded enumeration and sampling, checked against brute force over all short strings."""

from __future__ import annotations

import pytest
from _counted import checks_at_least, gave_up
from _recognize_oracles import all_strings, generating, oracle_accepts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram import (
    ByteSet,
    EmptyLanguageError,
    Grammar,
    GrammarError,
    GrammarTooLarge,
    Nonterminal,
    Production,
)
from formalgram.recognize import accepts, default_alphabet, enumerate_strings, sample
from formalgram.testing import grammars

S, A, B = Nonterminal("S"), Nonterminal("A"), Nonterminal("B")


def lit(text: str) -> list[ByteSet]:
    return [ByteSet.single(b) for b in text.encode()]


def test_enumerate_balanced() -> None:
    g = Grammar([Production(S, [*lit("("), S, *lit(")"), S]), Production(S, [])], "S")
    assert enumerate_strings(g, 4) == [b"", b"()", b"(())", b"()()"]
    assert enumerate_strings(g, 4, b"(") == [b""]


def test_default_alphabet_classes() -> None:
    digit = ByteSet.from_range(48, 57)
    g = Grammar([Production(S, [digit, ByteSet.from_bytes(b"05"), ByteSet.single(200)])], "S")
    # classes: {0,5} (in both masks), other digits, {200}; bytes in no terminal are left out
    assert default_alphabet(g) == bytes([48, 49, 200])
    assert enumerate_strings(g, 3) == [b"00\xc8", b"10\xc8"]


def test_enumerate_limit_and_bad_length() -> None:
    g = Grammar([Production(S, [ByteSet.from_bytes(b"ab"), S]), Production(S, [])], "S")
    assert len(enumerate_strings(g, 10)) == 11  # [ab] is one class: represented by "a"
    assert len(enumerate_strings(g, 10, b"ab")) == 2**11 - 1
    with pytest.raises(GrammarTooLarge):
        enumerate_strings(g, 10, b"ab", limit=100)
    with pytest.raises(ValueError):
        enumerate_strings(g, -1)


def test_enumerate_prefix_budget() -> None:
    # (a|b)* followed by 40 c's: huge tree of viable prefixes, no member of length <= 20
    c40 = Nonterminal("C")
    g = Grammar(
        [
            Production(S, [ByteSet.from_bytes(b"ab"), S]),
            Production(S, [c40]),
            Production(c40, lit("c" * 40)),
        ],
        "S",
    )
    with pytest.raises(GrammarTooLarge):
        enumerate_strings(g, 20, b"abc", limit=100)


def test_sample_errors_and_determinism() -> None:
    dead = Grammar([Production(S, [*lit("a"), B])], "S")
    with pytest.raises(EmptyLanguageError):
        sample(dead, 3)
    long = Grammar([Production(S, lit("abcdef"))], "S")
    with pytest.raises(GrammarError, match="shortest has length 6"):
        sample(long, 3, max_len=5)
    g = Grammar(
        [
            Production(S, [S, S]),
            Production(S, [A]),
            Production(A, [S]),
            Production(S, lit("x")),
            Production(S, []),
        ],
        "S",
    )
    got = sample(g, 20, seed=7, max_len=10)
    assert got == sample(g, 20, seed=7, max_len=10)
    assert all(len(s) <= 10 and set(s) <= {ord("x")} for s in got)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(alphabet=b"ab"), st.integers(0, 5))
def test_enumerate_matches_brute_force(g: Grammar, n: int) -> None:
    expected = [w for w in all_strings(b"ab", n) if oracle_accepts(g, w)]
    assert enumerate_strings(g, n, b"ab") == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(alphabet=b"abc", byte_classes=True), st.integers(0, 4))
def test_default_alphabet_represents_every_member(g: Grammar, n: int) -> None:
    # mapping every byte to its class representative maps members of L(g) onto enumerated ones
    reps = default_alphabet(g)
    rep_of = {}
    for b in b"abc":
        sig = tuple((m >> b) & 1 for m in g.masks)
        rep_of[b] = next((r for r in reps if tuple((m >> r) & 1 for m in g.masks) == sig), None)
    listed = set(enumerate_strings(g, n))
    assert all(set(w) <= set(reps) for w in listed)
    for w in all_strings(b"abc", n):
        if oracle_accepts(g, w):
            assert bytes(rep_of[b] for b in w) in listed  # type: ignore[misc]


@checks_at_least(45)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(alphabet=b"ab"), st.integers(0, 2**32), st.integers(0, 8))
def test_sample_members_are_accepted(g: Grammar, seed: int, max_len: int) -> None:
    if g.start_id not in generating(g):
        with pytest.raises(EmptyLanguageError):
            sample(g, 3, seed=seed, max_len=max_len)
        return gave_up()
    try:
        got = sample(g, 5, seed=seed, max_len=max_len)
    except GrammarError:
        # only allowed when no member fits: check with brute force
        assert not any(oracle_accepts(g, w) for w in all_strings(b"ab", max_len))
        return gave_up()
    assert len(got) == 5
    for w in got:
        assert len(w) <= max_len
        assert accepts(g, w)
        if len(w) <= 6:
            assert oracle_accepts(g, w)
