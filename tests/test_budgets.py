"""Budgets that bound: blow-up grammars end in GrammarTooLarge, small results of long chains convert.

Each reproducer runs in a child process under an address-space limit (``RLIMIT_AS``) and a
wall-clock timeout, so that a regression (a hang, a memory blow-up, a RecursionError) fails
its test instead of taking the test run down with it.  The timeout is a guard, far above the
few seconds each case takes.  Results are checked against the Earley recognizer of the
original grammar, the left-corner minimisation against a naive refinement, the unit closure
against a plain depth-first search and the shortest-yield analysis of ``sample`` against a
naive fixpoint.
"""

from __future__ import annotations

import random
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formalgram.grammar
from formalgram import (
    ByteSet,
    Grammar,
    GrammarTooLarge,
    Nonterminal,
    Production,
    parse_gbnf,
    remove_unit,
    to_gnf,
)
from formalgram.recognize import EarleyRecognizer, accepts, is_prefix
from formalgram.recognize.earley import DEFAULT_BUDGET as EARLEY_BUDGET
from formalgram.recognize.enumerate import _INF, _min_lengths
from formalgram.testing import grammars
from formalgram.transforms.budget import DEFAULT_BUDGET, WORK_PER_RULE, Meter, work_allowance
from formalgram.transforms.gnf import _LC_VARIANTS
from formalgram.transforms.gnf_left_corner import LeftCorner, Shared
from formalgram.transforms.gnf_minimise import minimise, partition, quotient_size
from formalgram.transforms.gnf_rules import Body, Builder

MEMORY_LIMIT = 3 << 29  # 1.5 GiB of address space for a child
TIMEOUT = 120.0  # seconds; a guard against hangs, not a speed requirement

# grammar families shared by the child processes (tests/_blowup_grammars.py), then their helpers
FAMILIES = (
    (Path(__file__).resolve().parent / "_blowup_grammars.py").read_text(encoding="utf-8")
    + """
import time
from formalgram import GrammarTooLarge, is_gnf, remove_left_recursion, remove_unit, to_gnf
from formalgram.recognize import accepts

def outcome(f):
    t = time.perf_counter()
    try:
        value = f()
    except GrammarTooLarge as exc:
        print("TooLarge", exc.what, exc.limit)
        return None
    print("OK", round(time.perf_counter() - t, 2))
    return value
"""
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_limited(body: str) -> list[str]:
    """Run ``FAMILIES + body`` in a child process under the memory limit and the timeout.

    Returns the lines the child printed; fails the test on a timeout, a crash or any error
    that is not caught by the case itself (MemoryError and RecursionError included), and
    when the child imported another ``formalgram`` than the test process.
    """
    code = (
        "import formalgram.grammar\nprint(formalgram.grammar.__file__)\n" + FAMILIES + textwrap.dedent(body)
    )
    try:
        done = subprocess.run(
            # -P: no current directory on sys.path, so that the child imports the build the
            # test process imports (the installed, compiled one in CI), not the checkout's
            [sys.executable, "-P", "-c", code],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            preexec_fn=_limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer within {TIMEOUT} s")
    if done.returncode != 0:
        pytest.fail(f"child exited with {done.returncode}:\n{done.stderr[-2000:]}")
    lines = done.stdout.split("\n")
    assert lines[0] == formalgram.grammar.__file__, "the child imported another build"
    return lines[1:]


# -- to_gnf: long chains convert (their GNF is small), blow-ups end in GrammarTooLarge ------


def test_bounded_repetition_converts() -> None:
    """``"a"{0,2000}`` under a budget of 20,000 rules: a 4,000-rule GNF, not minutes of work."""
    out = run_limited(
        """
        g = parse_gbnf('root ::= "a"{0,2000}')
        h = outcome(lambda: to_gnf(g, budget=20_000))
        assert h is not None and is_gnf(h), "no GNF"
        for k in (0, 1, 2, 1999, 2000, 2001):
            assert accepts(h, b"a" * k) == (k <= 2000), k
        print("checked", len(h.rules))
        """
    )
    assert out[0].startswith("OK") and out[1].startswith("checked")


@pytest.mark.parametrize("kind", ["unit", "right", "left"])
def test_long_chains_convert(kind: str) -> None:
    """5,000-rule unit, right and left chains: no recursion limit, a GNF of the same language."""
    out = run_limited(
        f"""
        g = chain({kind!r}, 5000)
        h = outcome(lambda: to_gnf(g))
        assert h is not None and is_gnf(h)
        n = {1 if kind == "unit" else 5000}
        for k in (n - 1, n, n + 1):
            assert accepts(h, b"x" * k) == accepts(g, b"x" * k) == (k == n), k
        print("rules", len(h.rules))
        """
    )
    assert out[0].startswith("OK")
    assert out[1] == "rules 1" if kind == "unit" else int(out[1].split()[1]) <= 5000


def test_doubling_levels_default_budget() -> None:
    """``a_i ::= a_{i+1} a_{i+1} | "x" | ""`` over 60 levels: no MemoryError with the default budget."""
    out = run_limited(
        """
        g = doubling(60)
        h = outcome(lambda: to_gnf(g))
        if h is not None:
            from formalgram.pda import PDA
            pda = PDA.from_gnf(h)  # the GNF's own automaton: Earley on 10^5 rules is slow
            for k in (0, 1, 2, 3, 5):
                assert pda.accepts(b"x" * k), k
            assert not pda.accepts(b"xy")
            # parent sets of the shared stack grow quadratically here: bounded by the budget
            outcome(lambda: pda.accepts(b"x" * 64))
        """
    )
    assert out[0].startswith(("OK", "TooLarge GNF conversion"))
    if out[0].startswith("OK"):
        assert out[1].startswith(("OK", "TooLarge PDA simulation"))


def test_doubling_levels_small_budget() -> None:
    out = run_limited(
        """
        outcome(lambda: to_gnf(doubling(60), budget=20_000))
        """
    )
    assert out[0] == "TooLarge GNF conversion 20000"


@pytest.mark.parametrize(
    ("case", "what"),
    [
        ('to_gnf(chain("optional", 5000))', "GNF conversion"),
        ('to_gnf(doubling_left(40), strategy="substitution")', "GNF conversion"),
        ('to_gnf(chain("left", 20000), strategy="left-corner:deep")', "GNF conversion"),
        ("remove_left_recursion(left_cycle(16))", "left recursion removal"),
        ('remove_unit(chain("unitloop", 5000))', "unit rule removal"),
    ],
)
def test_blow_ups_end_in_grammar_too_large(case: str, what: str) -> None:
    """Quadratic or exponential constructions stop at the default budget, within the limits."""
    out = run_limited(f"outcome(lambda: {case})")
    assert out[0] == f"TooLarge {what} {DEFAULT_BUDGET}"


def test_small_budget_still_converts_small_busy_grammars() -> None:
    """The work allowance never falls below the default one: a tiny budget caps rules only."""
    g = parse_gbnf('root ::= "a"{0,50}')
    assert work_allowance(60) == work_allowance(DEFAULT_BUDGET)
    h = to_gnf(g, budget=200)
    assert len(h.rules) <= 200
    assert h.accepts(b"a" * 50) and not h.accepts(b"a" * 51)
    with pytest.raises(GrammarTooLarge, match="budget of 20"):
        to_gnf(g, budget=20)


def test_meter() -> None:
    m = Meter("example", 10, allowance=5)
    m.spend(5)
    with pytest.raises(GrammarTooLarge, match="more than 5 steps of work"):
        m.spend(1)
    assert Meter("x", 3 * DEFAULT_BUDGET).allowance == 3 * DEFAULT_BUDGET * WORK_PER_RULE


# -- remove_epsilon: linear splitting, a budget of rules and of work ---------------------------


def test_remove_epsilon_long_nullable_rule_is_linear() -> None:
    """A rule of 30,000 nullable items is cut into a chain of fresh ``root__tail`` names
    (drawn from per-base counters: a suffix search per name was quadratic, 20 s here)."""
    out = run_limited(
        """
        from formalgram import remove_epsilon
        n = 30_000
        g = parse_gbnf("root ::= " + "a " * n + '\\na ::= "x" | ""')
        h = outcome(lambda: remove_epsilon(g))
        tails = sorted(name for name in h.names if name.startswith("root__tail"))
        assert tails[:3] == ["root__tail", "root__tail_1", "root__tail_10"], tails[:3]
        assert len(tails) == len(set(tails)) == (n - 2) // 3, len(tails)
        assert not any(len(rhs) == 0 for lhs, rhs in h.rules if lhs != h.start_id)
        for k in (0, 1, 3):  # Earley on the 10,000-deep nullable chain is quadratic: short words
            assert accepts(h, b"x" * k), k
        assert not accepts(h, b"y")
        h = outcome(lambda: remove_epsilon(g, budget=1_000))
        """
    )
    assert out[0].startswith("OK")
    assert out[1] == "TooLarge epsilon removal 1000"


def test_remove_epsilon_budget_bounds_rules_and_work() -> None:
    """The rule count is checked while the result grows; the work allowance refuses a rule
    whose 16 variants would write 27 million symbols before any is written."""
    x, e = ByteSet.single(ord("x")), Nonterminal("e")
    S = Nonterminal("S")
    tiny = Grammar([Production(S, [e, e, x]), Production(e, [x]), Production(e, [])], "S")
    from formalgram import remove_epsilon

    # written: S -> e e x | e x | e x | x and e -> x (5 rules; the repeat is merged at the end)
    assert len(remove_epsilon(tiny, budget=5).rules) == 4
    with pytest.raises(
        GrammarTooLarge, match=r"epsilon removal exceeded its budget of 4 \(more than 4 rules\)"
    ):
        remove_epsilon(tiny, budget=4)
    wide = Grammar(
        [Production(S, [e, e, e, e, *([x] * 1_700_000)]), Production(e, [x]), Production(e, [])], "S"
    )
    with pytest.raises(GrammarTooLarge, match="steps of work"):
        remove_epsilon(wide, budget=20)


# -- the minimisation against a naive refinement ------------------------------------------------


def _naive_blocks(rules: dict[int, dict[Body, int]]) -> set[frozenset[int]]:
    """Coarsest stable partition by refining all nonterminals each round until nothing splits."""
    ids = sorted(rules)
    cls = dict.fromkeys(ids, 0)
    count = 1
    while True:
        keys: dict[object, int] = {}
        new: dict[int, int] = {}
        for a in ids:
            merged: dict[tuple[int, ...], int] = {}
            for tail, m in rules[a].items():
                k = tuple(cls[s] for s in tail)
                merged[k] = merged.get(k, 0) | m
            new[a] = keys.setdefault((cls[a], frozenset(merged.items())), len(keys))
        cls = new
        if len(keys) == count:
            break
        count = len(keys)
    blocks: dict[int, set[int]] = {}
    for a in ids:
        blocks.setdefault(cls[a], set()).add(a)
    return {frozenset(b) for b in blocks.values()}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_minimise_matches_naive_refinement(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 9))
    rules: dict[int, dict[Body, int]] = {}
    for a in range(n):
        tails = data.draw(st.lists(st.lists(st.integers(0, n - 1), max_size=3), min_size=1, max_size=4))
        rules[a] = {tuple(t): data.draw(st.sampled_from([1, 2, 3])) for t in tails}
    out, start, rep = minimise(rules, 0, Meter("test", DEFAULT_BUDGET))
    blocks: dict[int, set[int]] = {}
    for a in range(n):
        blocks.setdefault(rep[a], set()).add(a)
    assert {frozenset(b) for b in blocks.values()} == _naive_blocks(rules)
    assert start == 0 and rep[0] == 0
    assert set(out) == {rep[a] for a in range(n)}
    assert all(rep[a] == min(b) or 0 in b for b in blocks.values() for a in b)
    # the size used to score a construction is the size of the quotient
    reps, rep2 = partition(rules, 0, Meter("test", DEFAULT_BUDGET))
    assert rep2 == rep and reps == list(out)
    assert quotient_size(rules, reps, rep) == sum(len(tails) for tails in out.values())


@pytest.mark.parametrize(
    "rel",
    ["llama_cpp/json.gbnf", "json_schemas/calendar_event.gbnf", "derived/lark_via_xgrammar/c_syncode.gbnf"],
)
def test_left_corner_shared_tables_change_nothing(rel: str) -> None:
    """Each left-corner variant run after the others on one Shared gives the rules, names and
    charged work of the same variant run alone (the sharing replays what it saved)."""
    from formalgram.grammar import Grammar as G
    from formalgram.syntax.gbnf import load
    from formalgram.transforms.epsilon import remove_epsilon
    from formalgram.transforms.unit import merge_unit_cycles
    from formalgram.transforms.useless import remove_useless

    g = remove_useless(load(Path(__file__).resolve().parent / "data" / "grammars" / rel))
    start_name = g.names[g.start_id]
    g = remove_epsilon(g)
    g = G._trusted(g.names, g.masks, g.id_of(start_name), [r for r in g.rules if r[1]], unique=True)
    g = merge_unit_cycles(remove_useless(g))
    table: list[list[Body]] = [[] for _ in g.names]
    for lhs, rhs in g.rules:
        table[lhs].append(rhs)
    shared = Shared(table)
    for factor, distribute, cut, deep in _LC_VARIANTS.values():
        runs = []
        for tables in (None, shared):
            meter = Meter("test", DEFAULT_BUDGET)
            b = Builder(list(g.names), list(g.masks), DEFAULT_BUDGET, meter)
            out = LeftCorner(table, b, factor, distribute, cut, deep, tables).run(g.start_id)
            runs.append((out, b.names, b.masks, meter.work))
        assert runs[0] == runs[1]


def test_minimise_long_chain() -> None:
    """A chain of 20,000 distinct nonterminals is refined without quadratic rounds."""
    n = 20_000
    rules: dict[int, dict[Body, int]] = {a: {(a + 1,): 1} for a in range(n - 1)}
    rules[n - 1] = {(): 1}
    meter = Meter("test", DEFAULT_BUDGET)
    out, _, _ = minimise(rules, 0, meter)
    assert len(out) == n
    assert meter.work < 40 * n


# -- unit rules ---------------------------------------------------------------------------------


def _unit_closure_dfs(g: Grammar, a: int) -> list[tuple[int, ...]]:
    """Non-unit bodies of the nonterminals reached from ``a`` by unit rules, by plain DFS."""
    seen = {a}
    stack = [a]
    out: list[tuple[int, ...]] = []
    while stack:
        b = stack.pop()
        for ri in g.rules_by_lhs[b]:
            rhs = g.rules[ri][1]
            if not (len(rhs) == 1 and rhs[0] >= 0):
                out.append(rhs)
        for ri in g.rules_by_lhs[b]:
            rhs = g.rules[ri][1]
            if len(rhs) == 1 and rhs[0] >= 0 and rhs[0] not in seen:
                seen.add(rhs[0])
                stack.append(rhs[0])
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=6))
def test_remove_unit_matches_dfs_closure(g: Grammar) -> None:
    from formalgram.transforms.unit import merge_unit_cycles

    m = merge_unit_cycles(g)
    h = remove_unit(g)
    got: dict[str, set[tuple[object, ...]]] = {}
    for p in h.productions:
        got.setdefault(p.lhs.name, set()).add(tuple(p.rhs))
    for name in got:
        a = m.id_of(name)
        want = {tuple(m.symbol(s) for s in body) for body in _unit_closure_dfs(m, a)}
        assert got[name] == want


def test_remove_unit_long_chain_is_linear() -> None:
    """Closures are built for the nonterminals the result keeps only, chains walked once."""
    lines = [f"a{i} ::= a{i + 1}" for i in range(1, 20_000)] + ['a20000 ::= "x"']
    g = parse_gbnf("\n".join(lines), start="a1")
    assert remove_unit(g).to_gbnf() == 'a1 ::= "x"\n'
    # every a_i has a body of its own: 2 * 10^8 rules if every closure were written
    lines = [f'a{i} ::= a{i + 1} | "y"' for i in range(1, 20_000)] + ['a20000 ::= "x"']
    h = remove_unit(parse_gbnf("\n".join(lines), start="a1"))
    assert sorted(h.to_gbnf().split("\n")) == ["", 'a1 ::= "y" | "x"']


# -- Earley: a work budget, linear prediction on unit chains ------------------------------------


def test_earley_unit_chain_is_cheap() -> None:
    lines = [f"a{i} ::= a{i + 1}" for i in range(1, 4000)] + ['a4000 ::= "x"']
    g = parse_gbnf("\n".join(lines), start="a1")
    r = EarleyRecognizer(g)
    assert r.feed_bytes(b"x") and r.is_accepting()
    assert r.work < 10 * 4000


def test_earley_cubic_input_hits_budget() -> None:
    """3,000 bytes of an ambiguous grammar: minutes unbounded, a typed error with the default."""
    out = run_limited(
        """
        from formalgram.recognize import accepts
        outcome(lambda: accepts(parse_gbnf('root ::= root root | "x"'), b"x" * 3000))
        outcome(lambda: accepts(parse_gbnf('root ::= "x" root | "x"'), b"x" * 5000))
        """
    )
    assert out[:2] == [f"TooLarge Earley recognition {EARLEY_BUDGET}"] * 2


def test_earley_budget_semantics() -> None:
    g = parse_gbnf('root ::= root root | "x"')
    assert accepts(g, b"x" * 30, budget=None)
    with pytest.raises(GrammarTooLarge, match="Earley recognition exceeded its budget of 1000"):
        accepts(g, b"x" * 30, budget=1000)
    with pytest.raises(GrammarTooLarge):
        is_prefix(g, b"x" * 30, budget=1000)
    with pytest.raises(ValueError, match="budget"):
        EarleyRecognizer(g, budget=-1)
    r = EarleyRecognizer(g, budget=2000)
    assert r.budget == 2000
    fed = 0
    with pytest.raises(GrammarTooLarge):
        for _ in range(100):
            assert r.feed(ord("x"))
            fed += 1
    # the refused byte left the state as it was; copies carry the work spent
    assert r.position == fed and r.is_accepting()
    twin = r.copy()
    assert twin.work == r.work and twin.budget == 2000
    with pytest.raises(GrammarTooLarge):
        r.feed_bytes(b"xx")
    assert r.position == fed
    r.reset()
    assert r.position == 0 and r.work < 10


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4), st.binary(max_size=8))
def test_earley_budget_does_not_change_answers(g: Grammar, raw: bytes) -> None:
    letters = bytes(sorted({b for m in g.masks for b in range(256) if (m >> b) & 1})) or b"a"
    data = bytes(letters[b % len(letters)] for b in raw)
    unbounded = EarleyRecognizer(g, budget=None)
    ok = unbounded.feed_bytes(data)
    bounded = EarleyRecognizer(g, budget=unbounded.work)
    assert bounded.feed_bytes(data) == ok
    assert bounded.is_accepting() == unbounded.is_accepting()
    assert accepts(g, data) == accepts(g, data, budget=None)


# -- sample: shortest yields against a naive fixpoint, exponential empty derivations ------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=6))
def test_min_lengths_match_fixpoint(g: Grammar) -> None:
    n = len(g.names)
    want = [_INF] * n
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            total = sum(want[s] if s >= 0 else (1 if g.masks[~s] else _INF) for s in rhs)
            if total < want[lhs]:
                want[lhs], changed = min(total, _INF), True
    minlen, short = _min_lengths(g)
    assert minlen == want
    for a in range(n):
        if want[a] >= _INF:
            assert short[a] == -1
            continue
        lhs, rhs = g.rules[short[a]]
        assert lhs == a and sum(want[s] if s >= 0 else 1 for s in rhs) == want[a]


def test_sample_exponential_empty_derivation() -> None:
    """Shortest rules ``a_i -> a_{i+1} a_{i+1}`` over 60 levels derive ε through 2^60 nodes."""
    from formalgram.recognize import sample

    lines = [f"a{i} ::= a{i + 1} a{i + 1}" for i in range(60)] + ['a60 ::= "" | "x"']
    g = parse_gbnf("\n".join(lines), start="a0")
    got = sample(g, 20, seed=3, max_len=12)
    assert all(set(s) <= {ord("x")} and len(s) <= 12 for s in got)


def test_sample_long_chain() -> None:
    from formalgram.recognize import sample

    lines = [f'a{i} ::= a{i + 1} | "y"' for i in range(1, 20_000)] + ['a20000 ::= "x"']
    g = parse_gbnf("\n".join(lines), start="a1")
    assert set(sample(g, 10, seed=1, max_len=3)) <= {b"x", b"y"}


def test_terminals_hashing_alike_stay_fast() -> None:
    """Bodies over the terminals ~0 and ~1 (whose ids hash alike) dedupe in linear time."""
    from formalgram.transforms.left_recursion import body_key, distinct_bodies

    rng = random.Random(0)
    bodies = [tuple(rng.choice((-1, -2)) for _ in range(16)) for _ in range(20_000)]
    # the oracle keys bodies by their text, which hashes well
    seen: set[str] = set()
    want = []
    for body in bodies:
        if repr(body) not in seen:
            seen.add(repr(body))
            want.append(body)
    assert distinct_bodies(bodies) == want
    assert len({hash(body_key(b)) for b in bodies}) == len({repr(b) for b in bodies})
    a, b = ByteSet.single(97), ByteSet.single(98)
    S = Nonterminal("S")
    g = Grammar([Production(S, [S, a]), Production(S, [S, b]), Production(S, [a])], "S")
    assert to_gnf(g).accepts(b"abba")


def test_pda_budget() -> None:
    """The shared-stack simulation is bounded like Earley, and agrees with it within budget."""
    from formalgram.pda import PDA

    g = parse_gbnf('root ::= root root | "(" root ")" | "x"')
    pda = PDA.from_gnf(to_gnf(g))
    data = b"(x" * 40 + b"x" + b")" * 40
    assert pda.accepts(data, budget=None) == accepts(g, data, budget=None) is True
    assert pda.is_prefix(data[:50]) and not pda.is_prefix(b"x)")
    with pytest.raises(GrammarTooLarge, match="PDA simulation exceeded its budget of 500"):
        pda.accepts(data, budget=500)
    with pytest.raises(GrammarTooLarge, match="PDA simulation"):
        pda.is_prefix(data, budget=500)
