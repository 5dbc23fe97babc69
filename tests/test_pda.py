"""Tests of :mod:`formalgram.pda` (the one-state PDA of a GNF grammar).

Oracles: :class:`test_pda_support.DerivationOracle` (span-based derivation, no stacks) on
random GNF grammars, and the Earley recognizer (``formalgram.accepts`` / ``is_prefix``) on
``to_gnf`` of random and real grammars.
"""

from __future__ import annotations

import random

import pytest
from _counted import checks_at_least, gave_up
from _data import real_grammar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pda_support import ALPHABET, DerivationOracle, all_strings, gnf_grammars

from formalgram import (
    ByteSet,
    EmptyLanguageError,
    Grammar,
    GrammarError,
    GrammarTooLarge,
    Nonterminal,
    Production,
    load,
    to_gnf,
)
from formalgram.pda import PDA
from formalgram.recognize import accepts, is_prefix, sample
from formalgram.testing import grammars

S, A, B, X = (Nonterminal(n) for n in ("S", "A", "B", "X"))


def lit(c: str) -> ByteSet:
    return ByteSet.single(ord(c))


def anbn() -> Grammar:
    # S -> a S B | a B ; B -> b   (a^n b^n, n >= 1)
    return Grammar(
        [Production(S, [lit("a"), S, B]), Production(S, [lit("a"), B]), Production(B, [lit("b")])], "S"
    )


# -- construction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("productions", "message"),
    [
        ([Production(S, [A]), Production(A, [lit("a")])], "starts with nonterminal A"),
        ([Production(S, [lit("a"), lit("b")])], "terminal after its first symbol"),
        ([Production(S, [lit("a"), A]), Production(A, [])], "only the start symbol may have an empty rule"),
        (
            [Production(S, []), Production(S, [lit("a"), A]), Production(A, [lit("a"), S])],
            "appears on the right-hand side",
        ),
    ],
)
def test_from_gnf_rejects_non_gnf(productions: list[Production], message: str) -> None:
    with pytest.raises(GrammarError, match="not in Greibach normal form") as info:
        PDA.from_gnf(Grammar(productions, "S"))
    assert message in str(info.value)


def test_start_on_rhs_without_epsilon_is_allowed() -> None:
    pda = PDA.from_gnf(anbn())
    assert [pda.accepts(s) for s in (b"", b"ab", b"aabb", b"aab", b"abb")] == [
        False,
        True,
        True,
        False,
        False,
    ]
    assert [pda.is_prefix(s) for s in (b"", b"aa", b"aab", b"abb", b"b")] == [True, True, True, False, False]


def test_empty_input_policy() -> None:
    g = Grammar([Production(S, []), Production(S, [lit("a"), A]), Production(A, [lit("b")])], "S")
    pda = PDA.from_gnf(g)
    assert pda.accepts(b"") and pda.accepts(b"ab") and not pda.accepts(b"a")
    assert pda.initial_stacks == frozenset([(g.start_id,)])
    assert pda.stacks_after(b"") == {(g.start_id,)}
    only_eps = PDA.from_gnf(Grammar([Production(S, [])], "S"))
    assert only_eps.accepts(b"") and only_eps.is_prefix(b"") and not only_eps.is_prefix(b"a")
    empty_language = PDA.from_gnf(Grammar([Production(S, [lit("a"), S])], "S"))
    assert not empty_language.is_prefix(b"") and not empty_language.is_prefix(b"a")


def test_non_generating_rules_are_dropped_so_is_prefix_is_exact() -> None:
    """Lemma 2 of proofs/congruence.md."""
    # X is non-generating: "a" followed by anything from X can never complete.
    g = Grammar(
        [
            Production(S, [lit("a"), X]),
            Production(S, [lit("b"), B]),
            Production(X, [lit("a"), X]),
            Production(B, [lit("b")]),
        ],
        "S",
    )
    pda = PDA.from_gnf(g)
    assert pda.dropped_rules == 2
    assert not pda.is_prefix(b"a") and not pda.is_prefix(b"aa")
    assert pda.is_prefix(b"b") and pda.accepts(b"bb")


def test_byte_classes_are_the_coarsest_partition() -> None:
    g = Grammar(
        [
            Production(S, [ByteSet.from_range(ord("a"), ord("z")), A]),
            Production(A, [ByteSet.from_bytes(b"xyz0")]),
            Production(A, [ByteSet.from_range(ord("0"), ord("9")), A]),
        ],
        "S",
    )
    pda = PDA.from_gnf(g)
    assert len(pda.byte_class_of) == 256

    def signature(b: int) -> frozenset[int]:
        return frozenset(t for t, m in enumerate(g.masks) if (m >> b) & 1)

    for b1 in range(256):
        for b2 in range(b1 + 1, 256):
            same = pda.byte_class_of[b1] == pda.byte_class_of[b2]
            assert same == (signature(b1) == signature(b2))
    # classes: a-w, x-z, 0, 1-9, everything else
    assert pda.n_classes == 5
    for c in range(pda.n_classes):
        assert all(pda.byte_class_of[b] == c for b in ByteSet(pda.class_bytes[c]))


@given(gnf_grammars())
@settings(max_examples=60, deadline=None)
def test_byte_classes_are_the_terminal_signatures(g: Grammar) -> None:
    """Two bytes share a PDA class iff the same terminals contain them; classes numbered by smallest byte."""
    pda = PDA.from_gnf(g)
    signature = [frozenset(t for t, m in enumerate(g.masks) if (m >> b) & 1) for b in range(256)]
    number: dict[frozenset[int], int] = {}
    for b in range(256):
        number.setdefault(signature[b], len(number))
    assert list(pda.byte_class_of) == [number[signature[b]] for b in range(256)]
    assert pda.n_classes == len(number)


@given(gnf_grammars())
@settings(max_examples=60, deadline=None)
def test_table_is_the_rules(g: Grammar) -> None:
    """Every usable rule shows up for every byte of its terminal, and nothing else does."""
    pda = PDA.from_gnf(g)
    expected: set[tuple[int, int, tuple[int, ...]]] = set()
    for lhs, rhs in g.rules:
        if rhs and pda.generating[lhs] and all(pda.generating[s] for s in rhs[1:]):
            for b in ByteSet(g.masks[~rhs[0]]):
                expected.add((b, lhs, rhs[1:]))
    got = {(b, a, p) for b in range(256) for a in range(len(g.names)) for p in pda.transitions(b, a)}
    assert got == expected


def test_step_pushes_first_symbol_on_top() -> None:
    g = Grammar([Production(S, [lit("a"), A, B]), Production(A, [lit("x")]), Production(B, [lit("y")])], "S")
    pda = PDA.from_gnf(g)
    a_id, b_id = g.id_of("A"), g.id_of("B")
    assert pda.step(pda.initial_stacks, ord("a")) == {(b_id, a_id)}  # top at the end
    assert pda.stacks_after(b"ax") == {(b_id,)}
    assert pda.stacks_after(b"ay") == set()
    assert pda.table[(pda.byte_class_of[ord("a")], g.start_id)] == ((a_id, b_id),)


def test_max_stacks_raises_grammar_too_large() -> None:
    # S -> a S A | a S B | a, A -> a, B -> a: 2^n distinct stacks after n bytes.
    g = Grammar(
        [
            Production(S, [lit("a"), S, A]),
            Production(S, [lit("a"), S, B]),
            Production(S, [lit("a")]),
            Production(A, [lit("a")]),
            Production(B, [lit("a")]),
        ],
        "S",
    )
    pda = PDA.from_gnf(g, max_stacks=50)
    assert pda.is_prefix(b"aaa")
    with pytest.raises(GrammarTooLarge, match="PDA simulation exceeded its budget of 50"):
        pda.stacks_after(b"a" * 12)
    # accepts / is_prefix use the graph-structured stack: no blow-up, no bound
    assert pda.accepts(b"a" * 41) and not pda.accepts(b"a" * 40) and pda.is_prefix(b"a" * 40)
    with pytest.raises(ValueError):
        PDA.from_gnf(g, max_stacks=0)


# -- agreement with the derivation oracle ------------------------------------------------


@given(gnf_grammars())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pda_agrees_with_derivation_oracle(g: Grammar) -> None:
    """Lemmas 1-2 of proofs/congruence.md (the PDA is the grammar; prefixes after trimming)."""
    pda = PDA.from_gnf(g)
    oracle = DerivationOracle(g)
    for s in all_strings(ALPHABET, 4):
        assert pda.accepts(s) == oracle.accepts(s), s
        assert pda.is_prefix(s) == oracle.is_prefix(s), s


@given(gnf_grammars())
@settings(max_examples=100, deadline=None)
def test_shared_stack_agrees_with_explicit_stack_sets(g: Grammar) -> None:
    """accepts / is_prefix (graph-structured stack) agree with the explicit set of stacks."""
    pda = PDA.from_gnf(g)
    for s in all_strings(ALPHABET, 4)[1:]:
        stacks = pda.stacks_after(s)
        assert pda.accepts(s) == (() in stacks), s
        assert pda.is_prefix(s) == (pda.generating[g.start_id] and bool(stacks)), s


# -- agreement with Earley ------------------------------------------------------------------


def _mutations(s: bytes, rng: random.Random, alphabet: bytes, k: int) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(k):
        b = bytearray(s)
        op = rng.randrange(3)
        pos = rng.randrange(len(b) + 1)
        if op == 0 or not b:
            b.insert(pos, rng.choice(alphabet))
        elif op == 1:
            del b[min(pos, len(b) - 1)]
        else:
            b[min(pos, len(b) - 1)] = rng.choice(alphabet)
        out.append(bytes(b))
    return out


@given(gnf_grammars(), st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_pda_agrees_with_earley_on_random_gnf(g: Grammar, rng: random.Random) -> None:
    pda = PDA.from_gnf(g)
    strings = all_strings(ALPHABET, 3)
    strings += [m for s in strings[-6:] for m in _mutations(s, rng, ALPHABET, 3)]
    for s in strings:
        assert pda.accepts(s) == accepts(g, s), s
        assert pda.is_prefix(s) == is_prefix(g, s), s


@checks_at_least(20)
@given(grammars(alphabet=b"ab"), st.randoms(use_true_random=False))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pda_of_to_gnf_agrees_with_earley_on_random_grammars(g: Grammar, rng: random.Random) -> None:
    """Lemmas 1-2 of proofs/congruence.md on to_gnf output.

    PDA of ``to_gnf(g)`` vs Earley on ``g`` itself (enumerated, random and mutated strings).
    """
    alphabet = b"ab"
    if not is_prefix(g, b""):
        with pytest.raises(EmptyLanguageError):
            to_gnf(g)
        return gave_up()
    pda = PDA.from_gnf(to_gnf(g))
    strings = all_strings(alphabet, 5)
    members = [s for s in strings if accepts(g, s)]
    strings += [m for s in members[:10] for m in _mutations(s + s, rng, alphabet, 2)]
    for s in strings:
        assert pda.accepts(s) == accepts(g, s), s
        assert pda.is_prefix(s) == is_prefix(g, s), s


REAL_DEFAULT = ["llama_cpp/arithmetic.gbnf", "llama_cpp/list.gbnf", "llama_cpp/json.gbnf"]
REAL_HEAVY = [
    "llama_cpp/c.gbnf",
    "llama_cpp/chess.gbnf",
    "llama_cpp/json_arr.gbnf",
    "llama_cpp/english.gbnf",
    "llama_cpp/japanese.gbnf",
    "llguidance/vllm-sql.gbnf",
    "derived/lark_via_xgrammar/c_syncode.gbnf",
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    "derived/json_mode_eval_xgrammar/JME_1.gbnf",
]


def _real_grammar_check(rel: str, n_samples: int) -> None:
    g = load(real_grammar(rel))
    gnf = to_gnf(g)
    pda = PDA.from_gnf(gnf)
    rng = random.Random(0)
    alphabet = bytes(sorted({b for m in g.masks for b in ByteSet(m)}))
    try:
        samples = sample(g, n_samples, seed=1, max_len=48)
    except GrammarError:  # the shortest member is longer than 48 bytes
        samples = sample(g, n_samples, seed=1, max_len=400)
    for s in samples:
        assert pda.accepts(s), s
        cut = s[: rng.randrange(len(s) + 1)]
        assert pda.is_prefix(cut), cut
        for m in _mutations(s, rng, alphabet, 3):
            assert pda.accepts(m) == accepts(g, m), m
            assert pda.is_prefix(m) == is_prefix(g, m), m


@pytest.mark.parametrize("rel", REAL_DEFAULT)
def test_pda_agrees_with_earley_on_real_grammars(rel: str) -> None:
    _real_grammar_check(rel, 15)


@pytest.mark.heavy
@pytest.mark.parametrize("rel", REAL_DEFAULT + REAL_HEAVY)
def test_pda_agrees_with_earley_on_real_grammars_heavy(rel: str) -> None:
    _real_grammar_check(rel, 100)
