"""Tests of :mod:`formalgram.adjacency` (stack adjacency of the PDA of a GNF grammar).

The soundness tests are the executable check of ``proofs/stack_adjacency.md`` (proof (c)):
every pair ``X`` directly above ``Y`` observed in any stack of any run on a valid prefix
must be in the computed relation.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from itertools import pairwise

import networkx as nx
import pytest
from _counted import checks_at_least, gave_up
from _data import real_grammar
from hypothesis import HealthCheck, given, settings
from test_pda_support import ALPHABET, gnf_grammars

from formalgram import (
    ByteSet,
    EmptyLanguageError,
    Grammar,
    GrammarError,
    GrammarTooLarge,
    Nonterminal,
    Production,
    load,
    sample,
    to_gnf,
)
from formalgram.adjacency import backtrack_pairs, below_bits, can_be_below, rightmost_graph, stack_adjacency
from formalgram.analysis import generating_rules, reachable
from formalgram.pda import PDA
from formalgram.testing import grammars

S, A, B, C, D, U, N = (Nonterminal(n) for n in ("S", "A", "B", "C", "D", "U", "N"))


def lit(c: str) -> ByteSet:
    return ByteSet.single(ord(c))


def named(g: Grammar, edges: Iterable[tuple[int, int]]) -> set[tuple[str, str]]:
    """Id pairs as name pairs."""
    return {(g.names[x], g.names[y]) for x, y in edges}


def hand_grammar() -> Grammar:
    """S -> s A B | t N B ; A -> a C ; C -> c ; B -> b D | b ; D -> d ; U -> u A D ; N -> n N.

    Reachable stacks (top last): (S), (B, A), (B, C), (B), (D), ().  ``U`` is unreachable and
    ``N`` is non-generating.
    """
    return Grammar(
        [
            Production(S, [lit("s"), A, B]),
            Production(S, [lit("t"), N, B]),
            Production(A, [lit("a"), C]),
            Production(C, [lit("c")]),
            Production(B, [lit("b"), D]),
            Production(B, [lit("b")]),
            Production(D, [lit("d")]),
            Production(U, [lit("u"), A, D]),
            Production(N, [lit("n"), N]),
        ],
        "S",
    )


def test_adjacency_tight_on_hand_example() -> None:
    """Theorem 5 of proofs/stack_adjacency.md (tightness).

    The relation is exactly the pairs computed by hand (not everything).
    """
    g = hand_grammar()
    adj = stack_adjacency(g)
    assert named(g, adj.edges) == {("A", "B"), ("C", "B")}
    assert set(adj.nodes) == set(range(len(g.names)))
    assert all(adj.nodes[i]["name"] == name for i, name in enumerate(g.names))
    ids = g.id_of
    assert backtrack_pairs(g) == frozenset({(ids("C"), ids("B"))})  # A has no rule A -> a
    below = can_be_below(g)
    assert below[ids("A")] == {ids("B")} and below[ids("C")] == {ids("B")}
    assert all(not below[ids(x)] for x in ("S", "B", "D", "U", "N"))
    # the flags widen the relation: unreachable U adds (A, D), (C, D); non-generating N adds (N, B)
    assert named(g, stack_adjacency(g, reachable_only=False).edges) == {
        ("A", "B"),
        ("C", "B"),
        ("A", "D"),
        ("C", "D"),
    }
    assert named(g, stack_adjacency(g, trim=False).edges) == {("A", "B"), ("C", "B"), ("N", "B")}


def test_observed_pairs_on_hand_example_match() -> None:
    """Theorem 5 of proofs/stack_adjacency.md.

    Exactness on the hand example: the relation equals the pairs seen in reachable stacks.
    """
    g = hand_grammar()
    seen = _observed_pairs_exhaustive(g, b"stabcdn", 6)
    assert seen == set(can_be_pairs(g))


def test_rightmost_graph() -> None:
    g = hand_grammar()
    h = rightmost_graph(g, reachable_only=False, trim=False)
    ids = g.id_of
    assert set(h.edges) == {
        (ids(a), ids(b)) for a, b in [("S", "B"), ("A", "C"), ("B", "D"), ("U", "D"), ("N", "N")]
    }


def test_rejects_non_gnf() -> None:
    g = Grammar([Production(S, [A]), Production(A, [lit("a")])], "S")
    with pytest.raises(GrammarError, match="not in Greibach normal form"):
        stack_adjacency(g)


def test_deep_propagation_through_rightmost_chain() -> None:
    """Theorems 4-5 of proofs/stack_adjacency.md.

    (W, Z) where W is several rightmost steps below the seed's upper symbol.
    """
    # S -> s A Z ; A -> a X Q ; Q -> q R ; R -> r ; X -> x ; Z -> z
    X, Q, R, Z = (Nonterminal(n) for n in "XQRZ")
    g = Grammar(
        [
            Production(S, [lit("s"), A, Z]),
            Production(A, [lit("a"), X, Q]),
            Production(Q, [lit("q"), R]),
            Production(R, [lit("r")]),
            Production(X, [lit("x")]),
            Production(Z, [lit("z")]),
        ],
        "S",
    )
    assert named(g, stack_adjacency(g).edges) == {("A", "Z"), ("X", "Q"), ("Q", "Z"), ("R", "Z")}
    ids = g.id_of
    assert backtrack_pairs(g) == {(ids("X"), ids("Q")), (ids("R"), ids("Z"))}
    assert _observed_pairs_exhaustive(g, b"saxqrz", 6) == set(can_be_pairs(g))


# -- comparison with the paper's appendix construction -----------------------------------


def paper_backtrack_pairs(g: Grammar, include_source: bool = True) -> set[tuple[int, int]]:
    """The appendix construction, written from its text: for every rule ``A -> a B1..Bn Z β``,
    BFS from ``Bn`` in H and add ``(Y, Z)`` for each reached ``Y`` with a rule ``Y -> y``."""
    h: dict[int, set[int]] = {}
    unary: set[int] = set()
    for lhs, rhs in g.rules:
        if len(rhs) == 1:
            unary.add(lhs)
        if len(rhs) > 1:
            h.setdefault(lhs, set()).add(rhs[-1])
    out: set[tuple[int, int]] = set()
    for _, rhs in g.rules:
        nts = rhs[1:]
        for k in range(len(nts) - 1):
            src, z = nts[k], nts[k + 1]
            seen = {src} if include_source else set()
            queue = deque([src])
            while queue:
                v = queue.popleft()
                for w in h.get(v, ()):
                    if w not in seen:
                        seen.add(w)
                        queue.append(w)
            out.update((y, z) for y in seen if y in unary)
    return out


@given(gnf_grammars())
@settings(max_examples=150, deadline=None)
def test_backtrack_pairs_equal_paper_construction_without_restrictions(g: Grammar) -> None:
    """Section 5 of proofs/stack_adjacency.md: the paper's construction is ours, unrestricted."""
    assert backtrack_pairs(g, reachable_only=False, trim=False) == paper_backtrack_pairs(g)
    # the default (reachable, trimmed) relation only removes pairs
    assert backtrack_pairs(g) <= paper_backtrack_pairs(g)


def test_bfs_that_skips_its_source_misses_pairs() -> None:
    """Section 5 of proofs/stack_adjacency.md; under-approximation example of proofs/congruence.md.

    If the BFS from ``Bn`` does not count ``Bn`` itself, a real pair is lost.

    S -> s A Z ; A -> a ; Z -> z.  After "sa" the PDA pops A by A -> a and then pops Z: the pair
    (A, Z) is needed for the backtrack of the token "az" in the context "s".
    """
    Z = Nonterminal("Z")
    g = Grammar([Production(S, [lit("s"), A, Z]), Production(A, [lit("a")]), Production(Z, [lit("z")])], "S")
    pair = (g.id_of("A"), g.id_of("Z"))
    assert pair in backtrack_pairs(g)
    assert pair in paper_backtrack_pairs(g, include_source=True)
    assert pair not in paper_backtrack_pairs(g, include_source=False)


# -- the propagation against a plain breadth-first search ---------------------------------


def bfs_relation(g: Grammar, reachable_only: bool, trim: bool) -> set[tuple[int, int]]:
    """The relation by its definition, written from the rules: one BFS in H per seed symbol.

    Usable rules: with ``trim``, those whose terminal matches a byte and whose nonterminals
    all generate (a fixpoint written here); with ``reachable_only``, those whose left side is
    reached from the start through usable rules (a BFS written here).
    """
    gen = _generating(g) if trim else [True] * len(g.names)
    rules = [
        (lhs, rhs)
        for lhs, rhs in g.rules
        if rhs and (not trim or (g.masks[~rhs[0]] != 0 and gen[lhs] and all(gen[s] for s in rhs[1:])))
    ]
    if reachable_only:
        seen_nt = {g.start_id}
        queue = deque([g.start_id])
        while queue:
            a = queue.popleft()
            for lhs, rhs in rules:
                if lhs == a:
                    for s in rhs[1:]:
                        if s not in seen_nt:
                            seen_nt.add(s)
                            queue.append(s)
        rules = [(lhs, rhs) for lhs, rhs in rules if lhs in seen_nt]
    h: dict[int, set[int]] = {}
    seeds: dict[int, set[int]] = {}
    for lhs, rhs in rules:
        push = rhs[1:]
        if push:
            h.setdefault(lhs, set()).add(push[-1])
        for x, z in pairwise(push):
            seeds.setdefault(x, set()).add(z)
    out: set[tuple[int, int]] = set()
    for x, zs in seeds.items():
        reached = {x}
        queue = deque([x])
        while queue:
            v = queue.popleft()
            for w in h.get(v, ()):
                if w not in reached:
                    reached.add(w)
                    queue.append(w)
        out.update((w, z) for w in reached for z in zs)
    return out


@given(gnf_grammars(max_nonterminals=12, max_push=4))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_propagation_equals_bfs_per_seed(g: Grammar) -> None:
    """The propagation over the components of H gives the relation's definition, BFS by BFS."""
    for reachable_only in (True, False):
        for trim in (True, False):
            expected = bfs_relation(g, reachable_only, trim)
            bits = below_bits(g, reachable_only=reachable_only, trim=trim)
            assert {
                (x, y) for x, b in enumerate(bits) for y in range(b.bit_length()) if (b >> y) & 1
            } == expected
            below = can_be_below(g, reachable_only=reachable_only, trim=trim)
            assert {(x, y) for x, ys in enumerate(below) for y in ys} == expected
            assert set(stack_adjacency(g, reachable_only=reachable_only, trim=trim).edges) == expected


def test_propagation_through_a_cycle_and_into_it() -> None:
    """A seed entering a cycle of H reaches every member; a cycle's own seed flows out of it."""
    # S -> s A Z ; A -> a B ; B -> b A | b C ; C -> c D Y ; D -> d ; Y -> y ; Z -> z
    X = {n: Nonterminal(n) for n in "BCDYZ"}
    g = Grammar(
        [
            Production(S, [lit("s"), A, X["Z"]]),
            Production(A, [lit("a"), X["B"]]),
            Production(X["B"], [lit("b"), A]),
            Production(X["B"], [lit("b"), X["C"]]),
            Production(X["C"], [lit("c"), X["D"], X["Y"]]),
            Production(X["D"], [lit("d")]),
            Production(X["Y"], [lit("y")]),
            Production(X["Z"], [lit("z")]),
        ],
        "S",
    )
    assert named(g, stack_adjacency(g).edges) == {
        ("A", "Z"),
        ("B", "Z"),
        ("C", "Z"),
        ("Y", "Z"),
        ("D", "Y"),
    }
    assert set(stack_adjacency(g).edges) == bfs_relation(g, True, True)


def test_reachable_through_given_rules() -> None:
    """``reachable(g, rule_ids)`` follows only the given rules (here: the generating ones)."""
    g = hand_grammar()
    assert {g.names[i] for i in reachable(g)} == {"S", "A", "B", "C", "D", "N"}
    assert {g.names[i] for i in reachable(g, generating_rules(g))} == {"S", "A", "B", "C", "D"}
    assert {g.names[i] for i in reachable(g, [])} == {"S"}


# -- soundness oracle ---------------------------------------------------------------------


def can_be_pairs(g: Grammar) -> list[tuple[int, int]]:
    return [(x, y) for x, ys in enumerate(can_be_below(g)) for y in ys]


def _generating(g: Grammar) -> list[bool]:
    gen = [False] * len(g.names)
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            if not gen[lhs] and all((gen[s] if s >= 0 else g.masks[~s] != 0) for s in rhs):
                gen[lhs] = True
                changed = True
    return gen


def _observed_pairs_exhaustive(g: Grammar, alphabet: bytes, max_len: int) -> set[tuple[int, int]]:
    """Pairs (X above Y) in the live stacks of a naive simulation written from the rules.

    The simulation here does not use :mod:`formalgram.pda`: it applies every rule (untrimmed)
    and then keeps only stacks whose symbols are all generating, i.e. stacks of runs on
    valid prefixes.
    """
    gen = _generating(g)
    rules = [(lhs, rhs) for lhs, rhs in g.rules if rhs]
    seen: set[tuple[int, int]] = set()
    frontier: set[tuple[int, ...]] = {(g.start_id,)}  # top at the end
    for _ in range(max_len):
        nxt: set[tuple[int, ...]] = set()
        for c in alphabet:
            for st in frontier:
                if not st:
                    continue
                for lhs, rhs in rules:
                    if lhs == st[-1] and (g.masks[~rhs[0]] >> c) & 1:
                        new = st[:-1] + tuple(reversed(rhs[1:]))
                        if all(gen[x] for x in new):
                            nxt.add(new)
        for st in nxt:
            for i in range(len(st) - 1):
                seen.add((st[i + 1], st[i]))  # st[i + 1] sits directly above st[i]
        frontier = nxt
    return seen


@given(gnf_grammars())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_adjacency_sound_on_random_gnf(g: Grammar) -> None:
    """Proof (c), proofs/stack_adjacency.md: no observed adjacent pair is missing."""
    relation = set(can_be_pairs(g))
    observed = _observed_pairs_exhaustive(g, ALPHABET, 6)
    assert observed <= relation
    assert set(stack_adjacency(g).edges) == relation


@checks_at_least(20)
@given(grammars(alphabet=b"ab"))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_adjacency_sound_on_to_gnf_of_random_grammars(g: Grammar) -> None:
    """Proof (c), proofs/stack_adjacency.md, on GNFs produced by ``to_gnf``."""
    try:
        gnf = to_gnf(g)
    except EmptyLanguageError:
        return gave_up()
    assert _observed_pairs_exhaustive(gnf, b"ab", 6) <= set(can_be_pairs(gnf))


def _observe(cur: set[tuple[int, ...]], seen: set[tuple[int, int]]) -> None:
    for st in cur:
        for i in range(len(st) - 1):
            seen.add((st[i + 1], st[i]))  # top at the end: st[i + 1] lies directly on st[i]


def _pairs_on_walks(pda: PDA, rng: random.Random, walks: int, length: int) -> set[tuple[int, int]]:
    """Pairs observed on random walks of valid prefixes.

    Each step picks a byte whose successor stack set is non-empty, so every visited prefix is
    valid (the PDA is exact on prefixes, proofs/congruence.md Lemma 2).  A walk stops early when
    the stack set outgrows the PDA's ``max_stacks`` (deep nesting makes GNF stack sets grow
    exponentially); the pairs seen so far still count.
    """
    seen: set[tuple[int, int]] = set()
    byte_of_class = [ByteSet(m).min() for m in pda.class_bytes]
    for _ in range(walks):
        cur = set(pda.initial_stacks)
        try:
            for _ in range(length):
                options = [b for b in byte_of_class if pda.step(cur, b)]
                if not options:
                    break
                cur = pda.step(cur, rng.choice(options))
                _observe(cur, seen)
        except GrammarTooLarge:
            continue
    return seen


REAL = ["llama_cpp/arithmetic.gbnf", "llama_cpp/json.gbnf", "llama_cpp/list.gbnf"]
REAL_HEAVY = [
    "llama_cpp/c.gbnf",
    "llama_cpp/chess.gbnf",
    "llama_cpp/json_arr.gbnf",
    "llguidance/vllm-sql.gbnf",
    "derived/lark_via_xgrammar/c_syncode.gbnf",
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
]


def _real_soundness(rel: str, walks: int, samples: int) -> None:
    g = load(real_grammar(rel))
    gnf = to_gnf(g)
    pda = PDA.from_gnf(gnf, max_stacks=2000)
    relation = set(can_be_pairs(gnf))
    observed = _pairs_on_walks(pda, random.Random(0), walks, 60)
    try:
        strings = sample(g, samples, seed=3, max_len=64)
    except GrammarError:  # the shortest member is longer than 64 bytes
        strings = sample(g, samples, seed=3, max_len=400)
    for s in strings:
        cur = set(pda.initial_stacks)
        try:
            for b in s:
                cur = pda.step(cur, b)
                _observe(cur, observed)
        except GrammarTooLarge:
            continue
    assert observed
    missing = observed - relation
    assert not missing, [(gnf.names[x], gnf.names[y]) for x, y in sorted(missing)[:10]]
    assert nx.number_of_edges(stack_adjacency(gnf)) == len(relation)


@pytest.mark.parametrize("rel", REAL)
def test_adjacency_sound_on_real_grammars(rel: str) -> None:
    """Proof (c), proofs/stack_adjacency.md, on the GNF of real grammars."""
    _real_soundness(rel, walks=40, samples=20)


@pytest.mark.heavy
@pytest.mark.parametrize("rel", REAL + REAL_HEAVY)
def test_adjacency_sound_on_real_grammars_heavy(rel: str) -> None:
    _real_soundness(rel, walks=400, samples=200)
