"""Earley recognizer: known grammars and Hypothesis comparisons with a brute-force span oracle."""

from __future__ import annotations

import pytest
from _recognize_oracles import all_strings, oracle_accepts, oracle_is_prefix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram import ByteSet, Grammar, Nonterminal, Production
from formalgram.recognize import EarleyRecognizer, accepts, is_prefix
from formalgram.testing import grammar_and_strings, grammars

S, A, B, C, E, T, F = (Nonterminal(x) for x in "SABCETF")


def lit(text: str) -> list[ByteSet]:
    return [ByteSet.single(b) for b in text.encode()]


def cls(chars: str) -> ByteSet:
    return ByteSet.from_bytes(chars.encode())


# -- known grammars ------------------------------------------------------------------------


def balanced() -> Grammar:
    # S -> ( S ) S | ε
    return Grammar([Production(S, [*lit("("), S, *lit(")"), S]), Production(S, [])], "S")


def expr_left_recursive() -> Grammar:
    # E -> E + T | T ; T -> T * F | F ; F -> ( E ) | [0-9]
    return Grammar(
        [
            Production(E, [E, *lit("+"), T]),
            Production(E, [T]),
            Production(T, [T, *lit("*"), F]),
            Production(T, [F]),
            Production(F, [*lit("("), E, *lit(")")]),
            Production(F, [ByteSet.from_range(48, 57)]),
        ],
        "E",
    )


def ws_grammar() -> Grammar:
    # S -> ws "x" ws ; ws -> [ \t\n] ws | ε   (i.e. ws ::= [ \t\n]*)
    ws = Nonterminal("ws")
    return Grammar(
        [
            Production(S, [ws, *lit("x"), ws]),
            Production(ws, [cls(" \t\n"), ws]),
            Production(ws, []),
        ],
        "S",
    )


@pytest.mark.parametrize(
    ("data", "member", "prefix"),
    [
        (b"", True, True),
        (b"()", True, True),
        (b"(()())()", True, True),
        (b"((", False, True),
        (b"())", False, False),
        (b")", False, False),
        (b"(x", False, False),
    ],
)
def test_balanced(data: bytes, member: bool, prefix: bool) -> None:
    g = balanced()
    assert accepts(g, data) is member
    assert is_prefix(g, data) is prefix


@pytest.mark.parametrize(
    ("data", "member", "prefix"),
    [
        (b"1", True, True),
        (b"1+2*3", True, True),
        (b"(1+2)*3+4", True, True),
        (b"1+", False, True),
        (b"((1", False, True),
        (b"1++", False, False),
        (b"", False, True),
        (b"*", False, False),
        (b"(1))", False, False),
    ],
)
def test_left_recursive_expressions(data: bytes, member: bool, prefix: bool) -> None:
    g = expr_left_recursive()
    assert accepts(g, data) is member
    assert is_prefix(g, data) is prefix


@pytest.mark.parametrize(
    ("data", "member"),
    [(b"x", True), (b" \t x\n", True), (b"  ", False), (b"x x", False), (b"\n\nx", True)],
)
def test_nullable_whitespace(data: bytes, member: bool) -> None:
    g = ws_grammar()
    assert accepts(g, data) is member
    assert is_prefix(g, data) is (member or data.strip(b" \t\n") == b"")


def test_nullable_chain_and_hidden_left_recursion() -> None:
    # S -> A S b | a ; A -> B B ; B -> ε   (hidden left recursion through nullable A)
    g = Grammar(
        [
            Production(S, [A, S, *lit("b")]),
            Production(S, lit("a")),
            Production(A, [B, B]),
            Production(B, []),
        ],
        "S",
    )
    for k in range(5):
        assert accepts(g, b"a" + b"b" * k)
    assert not accepts(g, b"")
    assert not accepts(g, b"ba")


def test_unit_cycle_and_ambiguity() -> None:
    # S -> A | S S | x ; A -> S   (infinitely ambiguous)
    g = Grammar([Production(S, [A]), Production(A, [S]), Production(S, [S, S]), Production(S, lit("x"))], "S")
    assert accepts(g, b"xxxx")
    assert not accepts(g, b"")
    assert is_prefix(g, b"")


def test_nonterminal_without_rules_makes_prefix_exact() -> None:
    # S -> a B | a c ; B has no rules: "a" is a prefix only through "a c".
    g1 = Grammar([Production(S, [*lit("a"), B]), Production(S, lit("ac"))], "S")
    assert is_prefix(g1, b"a")
    assert EarleyRecognizer(g1).allowed_bytes() == ByteSet.single(ord("a"))
    r = EarleyRecognizer(g1)
    assert r.feed(ord("a"))
    assert r.allowed_bytes() == ByteSet.single(ord("c"))
    # S -> a B | b: "a" starts only a dead rule.
    g0 = Grammar([Production(S, [*lit("a"), B]), Production(S, lit("b"))], "S")
    assert not is_prefix(g0, b"a")
    assert EarleyRecognizer(g0).allowed_bytes() == ByteSet.single(ord("b"))
    # S -> a B only: nothing is viable, not even the empty prefix.
    g2 = Grammar([Production(S, [*lit("a"), B])], "S")
    assert not is_prefix(g2, b"")
    assert not is_prefix(g2, b"a")
    assert not EarleyRecognizer(g2).is_viable()
    # a start symbol with no rules at all
    g3 = Grammar([Production(A, lit("a"))], "S")
    assert not accepts(g3, b"") and not is_prefix(g3, b"")


def test_empty_terminal_is_dead() -> None:
    g = Grammar([Production(S, [*lit("a"), ByteSet.empty()]), Production(S, lit("b"))], "S")
    assert not is_prefix(g, b"a")
    assert accepts(g, b"b")


def test_incremental_api() -> None:
    g = balanced()
    r = EarleyRecognizer(g)
    assert r.is_accepting() and r.is_viable() and r.position == 0
    assert r.allowed_bytes() == ByteSet.single(ord("("))
    assert r.feed(ord("("))
    snapshot = r.copy()
    assert not r.feed(ord("x"))  # refused: state unchanged
    assert r.position == 1 and not r.is_accepting()
    assert r.allowed_bytes() == cls("()")
    assert r.feed_bytes(b"))") is False  # all or nothing
    assert r.position == 1
    assert r.feed_bytes(b")(")
    assert r.position == 3 and snapshot.position == 1
    r.reset()
    assert r.position == 0 and r.is_accepting()
    with pytest.raises(ValueError):
        r.feed(256)


def test_long_input_no_recursion_limit() -> None:
    g = balanced()
    data = b"(" * 3000 + b")" * 3000
    assert accepts(g, data)
    assert not accepts(g, data + b")")
    g2 = expr_left_recursive()
    assert accepts(g2, b"+".join([b"1*2"] * 500))


# -- Hypothesis against the brute-force oracle -----------------------------------------------

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(grammar_and_strings(max_len=5))
def test_accepts_matches_span_oracle(gs: tuple[Grammar, list[bytes]]) -> None:
    g, strings = gs
    for w in strings:
        assert accepts(g, w) == oracle_accepts(g, w), w


@_SETTINGS
@given(grammar_and_strings(max_len=5))
def test_is_prefix_matches_prefix_oracle(gs: tuple[Grammar, list[bytes]]) -> None:
    g, strings = gs
    for w in strings:
        assert is_prefix(g, w) == oracle_is_prefix(g, w), w


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=3, alphabet=b"ab"), st.binary(max_size=3))
def test_is_prefix_implied_by_bounded_extension(g: Grammar, raw: bytes) -> None:
    # Sound direction only: if some extension z (|z| <= 3) puts w + z in L(g) (brute force), w must be
    # a prefix.  The converse needs a bound on the shortest completion, which for a prefix of length
    # n can reach (n + 1) * |N| * (max_rhs - 1) * max(minlen) bytes (one right context per spine node,
    # at most |N| spine nodes per origin) -- too long to enumerate, so the converse is checked
    # against the exact prefix oracle in the test above.
    w = bytes(b"ab"[x % 2] for x in raw)
    if any(oracle_accepts(g, w + z) for z in all_strings(b"ab", 3)):
        assert is_prefix(g, w)
    if not is_prefix(g, w):
        assert not any(oracle_accepts(g, w + z) for z in all_strings(b"ab", 3))


@_SETTINGS
@given(grammar_and_strings(max_len=5, alphabet=b"abc"))
def test_incremental_matches_oracle(gs: tuple[Grammar, list[bytes]]) -> None:
    g, strings = gs
    for w in strings:
        r = EarleyRecognizer(g)
        assert r.is_viable() == oracle_is_prefix(g, b"")
        for i, b in enumerate(w):
            expect_allowed = {x for x in b"abc" if oracle_is_prefix(g, w[:i] + bytes([x]))}
            allowed = r.allowed_bytes()
            assert set(allowed) == expect_allowed, (w[:i], allowed)
            assert r.is_accepting() == oracle_accepts(g, w[:i])
            copy = r.copy()
            ok = r.feed(b)
            assert ok == (b in expect_allowed)
            if not ok:
                assert r.position == copy.position == i
                break
            assert copy.position == i  # the copy is independent


@settings(max_examples=60, deadline=None)
@given(grammars(max_nonterminals=3), st.binary(max_size=4))
def test_feed_bytes_agrees_with_feed(g: Grammar, raw: bytes) -> None:
    w = bytes(b"ab"[x % 2] for x in raw)
    r1 = EarleyRecognizer(g)
    all_ok = r1.feed_bytes(w)
    r2 = EarleyRecognizer(g)
    ok = True
    for b in w:
        if not r2.feed(b):
            ok = False
            break
    assert all_ok == ok
    assert (all_ok and r1.is_viable()) == is_prefix(g, w)
    if not all_ok:
        assert r1.position == 0
