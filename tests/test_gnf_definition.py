"""One definition of Greibach normal form, shared by every consumer.

``is_gnf``, ``PDA.from_gnf``, ``stack_adjacency`` and ``DisplacementSearch`` accept exactly
the same grammars (:func:`formalgram.gnf_violation`), including the case where the start
occurs on a right-hand side without an empty rule (``S -> a S B | a B``), and everything
``to_gnf`` produces.  Languages are checked against the Earley recognizer.
"""

from __future__ import annotations

import pytest
from _counted import checks_at_least, gave_up
from hypothesis import HealthCheck, given, settings
from test_pda_support import gnf_grammars

from formalgram import (
    PDA,
    ByteSet,
    EmptyLanguageError,
    Grammar,
    GrammarError,
    Nonterminal,
    Production,
    accepts,
    gnf_violation,
    is_gnf,
    is_prefix,
    stack_adjacency,
    to_gnf,
)
from formalgram.testing import grammars
from formalgram_cfgzip.search.displacement import DisplacementSearch

S, A, B = Nonterminal("S"), Nonterminal("A"), Nonterminal("B")
a, b = ByteSet.single(ord("a")), ByteSet.single(ord("b"))


def anbn() -> Grammar:
    """``S -> a S B | a B``, ``B -> b``: a^n b^n (n >= 1), the start on a right-hand side."""
    return Grammar([Production(S, [a, S, B]), Production(S, [a, B]), Production(B, [b])], "S")


# name -> (grammar, the clause gnf_violation names; "" for a grammar in GNF)
CASES = {
    "start on a right-hand side, no empty rule": (anbn(), ""),
    "start on a right-hand side with S -> ε": (
        Grammar([Production(S, []), Production(S, [a, S])], "S"),
        "start symbol S has an empty rule and appears on the right-hand side",
    ),
    "empty rule of a non-start": (
        Grammar([Production(S, [a, A]), Production(A, [])], "S"),
        "rule A -> ε: only the start symbol may have an empty rule",
    ),
    "leading nonterminal": (
        Grammar([Production(S, [A]), Production(A, [a])], "S"),
        "starts with nonterminal A, not with a terminal",
    ),
    "terminal after the first symbol": (
        Grammar([Production(S, [a, b])], "S"),
        "a rule of S has a terminal after its first symbol",
    ),
    "empty byte set (a rule that never fires)": (
        Grammar([Production(S, [ByteSet.empty(), A]), Production(S, [a]), Production(A, [b])], "S"),
        "",
    ),
    "only the empty string": (Grammar([Production(S, [])], "S"), ""),
}


def _accepted_by(g: Grammar) -> dict[str, bool]:
    """Which consumers accept ``g`` (none may fail with anything but GrammarError)."""
    out: dict[str, bool] = {"is_gnf": is_gnf(g)}
    for name, build in (
        ("PDA.from_gnf", PDA.from_gnf),
        ("stack_adjacency", stack_adjacency),
        ("DisplacementSearch", DisplacementSearch),
    ):
        try:
            build(g)
            out[name] = True
        except GrammarError as exc:
            assert "not in Greibach normal form" in str(exc) and gnf_violation(g) in str(exc)
            out[name] = False
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_consumer_uses_the_same_definition(name: str) -> None:
    """Every consumer accepts exactly the GNF cases; the others are refused naming the clause."""
    g, clause = CASES[name]
    assert _accepted_by(g) == dict.fromkeys(
        ("is_gnf", "PDA.from_gnf", "stack_adjacency", "DisplacementSearch"), clause == ""
    )
    violation = gnf_violation(g)
    assert (clause in violation) if clause else (violation == ""), violation


def test_start_on_a_right_hand_side_reads_right_everywhere() -> None:
    """``S -> a S B | a B``: the PDA and the search agree with Earley on a^n b^n."""
    g = anbn()
    pda = PDA.from_gnf(g)
    for n in range(6):
        for s in (b"a" * n + b"b" * n, b"a" * n + b"b" * (n + 1), b"a" * (n + 1) + b"b" * n):
            assert pda.accepts(s) == accepts(g, s), s
            assert pda.is_prefix(s) == is_prefix(g, s), s
    search = DisplacementSearch(g)
    key = {t: search.key_of(search.run(t)) for t in (b"ab", b"aabb", b"a", b"aa", b"b", b"bb")}
    # two tokens share a key exactly when no context below tells them apart (Earley)
    contexts = [b"", b"a", b"aa", b"aaa"]
    suffixes = [b"", b"b", b"bb", b"bbb", b"bbbb"]
    for t1, t2 in ((b"ab", b"aabb"), (b"a", b"aa"), (b"b", b"bb")):
        same = all(accepts(g, w + t1 + z) == accepts(g, w + t2 + z) for w in contexts for z in suffixes)
        assert (key[t1] == key[t2]) == same, (t1, t2)
    assert key[b"ab"] == key[b"aabb"] and key[b"a"] != key[b"aa"]


@given(gnf_grammars())
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_consumers_agree_on_random_gnf(g: Grammar) -> None:
    got = _accepted_by(g)
    assert len(set(got.values())) == 1, got


@checks_at_least(30)
@given(grammars(max_nonterminals=4))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_consumers_agree_on_random_grammars_and_on_their_gnf(g: Grammar) -> None:
    got = _accepted_by(g)
    assert len(set(got.values())) == 1, got
    try:
        h = to_gnf(g)
    except EmptyLanguageError:
        return gave_up()
    assert set(_accepted_by(h).values()) == {True}
