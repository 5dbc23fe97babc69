"""Language preservation and shape of every grammar transform.

Each test names the proof it checks (``proofs/normal_forms.md``, section numbers).  The
oracle is the Earley recognizer and the bounded enumerator of ``formalgram.recognize``,
which share no code with the transforms.
"""

from __future__ import annotations

import pytest
from _counted import checks_at_least, gave_up
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram import (
    PDA,
    ByteSet,
    EmptyLanguageError,
    Grammar,
    GrammarTooLarge,
    Nonterminal,
    Production,
    generating,
    gnf_violation,
    is_gnf,
    nullable,
    reachable,
    remove_epsilon,
    remove_left_recursion,
    remove_unit,
    remove_useless,
    to_gnf,
    unreachable,
)
from formalgram.analysis import generating_rules
from formalgram.recognize import accepts, enumerate_strings
from formalgram.recognize.enumerate import _INF, _min_lengths, default_alphabet
from formalgram.testing import grammar_and_strings, grammars
from formalgram.transforms.gnf import STRATEGIES
from formalgram.transforms.useless import compact

MAX_LEN = 6
SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


def _alphabet(g: Grammar) -> bytes:
    """Representatives of g's byte classes plus one byte no terminal of g contains."""
    alpha = default_alphabet(g)
    used = 0
    for m in g.masks:
        used |= m
    outside = next((b for b in range(256) if not (used >> b) & 1), None)
    return alpha + (bytes([outside]) if outside is not None else b"")


def _same_language(g: Grammar, h: Grammar, n: int = MAX_LEN) -> None:
    alpha = _alphabet(g)
    got = set(enumerate_strings(h, n, alpha))
    want = set(enumerate_strings(g, n, alpha))
    assert got == want, (
        f"input {g.productions} start={g.start.name}; output {h.productions} start={h.start.name}"
    )


def _has_left_recursion(g: Grammar) -> bool:
    """True when some A =>+ A γ (edges A -> X for rules A -> α X β with α nullable)."""
    null = nullable(g)
    succ: dict[int, set[int]] = {}
    for lhs, rhs in g.rules:
        for s in rhs:
            if s < 0:
                break
            succ.setdefault(lhs, set()).add(s)
            if s not in null:
                break
    for a in range(len(g.names)):
        seen: set[int] = set()
        stack = list(succ.get(a, ()))
        while stack:
            x = stack.pop()
            if x == a:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(succ.get(x, ()))
    return False


def _epsilon_policy_ok(g: Grammar) -> bool:
    """Only the start may have an empty rule, and then it occurs on no right-hand side."""
    eps = [lhs for lhs, rhs in g.rules if not rhs]
    if not eps:
        return True
    if eps != [g.start_id]:
        return False
    return all(g.start_id not in rhs for _, rhs in g.rules)


# -- analyses (proofs §1) ---------------------------------------------------------------


def _brute_nullable(g: Grammar) -> set[int]:
    out: set[int] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            if lhs not in out and all(s >= 0 and s in out for s in rhs):
                out.add(lhs)
                changed = True
    return out


@SETTINGS
@given(grammars(allow_empty_terminal=True))
def test_analyses_match_definitions(g: Grammar) -> None:
    """proofs/normal_forms.md §1: nullable/generating agree with the enumerator."""
    assert set(nullable(g)) == _brute_nullable(g)
    for a in range(len(g.names)):
        sub = g.with_start(g.names[a])
        assert (a in nullable(g)) == (b"" in enumerate_strings(sub, 0))
    gen = generating(g)
    reach = reachable(g)
    assert g.start_id in reach
    for a in range(len(g.names)):
        if a in gen:
            continue
        sub = g.with_start(g.names[a])
        assert enumerate_strings(sub, 4, _alphabet(g)) == []
    assert unreachable(g) == {a for a in range(len(g.names)) if g.rules_by_lhs[a]} - reach


@SETTINGS
@given(grammars(allow_empty_terminal=True))
def test_generating_rules_match_shortest_lengths(g: Grammar) -> None:
    """A rule derives some string iff each item has a finite shortest yield (enumerator's tables)."""
    minlen, _ = _min_lengths(g)
    finite = {a for a, k in enumerate(minlen) if k < _INF}
    assert generating(g) == finite
    want = tuple(
        ri
        for ri, (_, rhs) in enumerate(g.rules)
        if all((s in finite) if s >= 0 else g.masks[~s] != 0 for s in rhs)
    )
    assert generating_rules(g) == want


# -- the transforms (proofs §2-§6) ------------------------------------------------------


@checks_at_least(45)
@SETTINGS
@given(grammars(allow_empty_terminal=True))
def test_remove_useless(g: Grammar) -> None:
    """proofs/normal_forms.md §2: L preserved; every symbol useful; empty language raises."""
    if g.start_id not in generating(g):
        with pytest.raises(EmptyLanguageError):
            remove_useless(g)
        return gave_up()
    h = remove_useless(g)
    _same_language(g, h)
    assert generating(h) == frozenset(range(len(h.names)))
    assert reachable(h) == frozenset(range(len(h.names)))
    # trimmed and in compact's order already: given back as it is
    assert remove_useless(h) is h
    again = compact(h.names, h.masks, h.start_id, h.rules)
    assert (again.names, again.masks, again.start_id, again.rules) == (h.names, h.masks, h.start_id, h.rules)


@SETTINGS
@given(grammars(max_nonterminals=5, max_rhs=4))
def test_remove_epsilon(g: Grammar) -> None:
    """proofs/normal_forms.md §3: L preserved exactly with the ε policy."""
    h = remove_epsilon(g)
    _same_language(g, h)
    assert _epsilon_policy_ok(h)


@SETTINGS
@given(grammars())
def test_remove_unit(g: Grammar) -> None:
    """proofs/normal_forms.md §4: L preserved, no unit rule left."""
    h = remove_unit(g)
    _same_language(g, h)
    assert not any(len(rhs) == 1 and rhs[0] >= 0 for _, rhs in h.rules)


@SETTINGS
@given(grammars())
def test_remove_left_recursion(g: Grammar) -> None:
    """proofs/normal_forms.md §5: L preserved, no (hidden) left recursion left."""
    h = remove_left_recursion(g)
    _same_language(g, h)
    assert not _has_left_recursion(h)
    assert _epsilon_policy_ok(h)


@checks_at_least(40)
@SETTINGS
@given(grammars(max_nonterminals=5, allow_empty_terminal=True))
def test_to_gnf_enumeration(g: Grammar) -> None:
    """proofs/normal_forms.md §6: L(to_gnf(g)) == L(g) including ε, and the result is GNF."""
    if g.start_id not in generating(g):
        with pytest.raises(EmptyLanguageError):
            to_gnf(g)
        return gave_up()
    h = to_gnf(g)
    assert is_gnf(h)
    _assert_strict_gnf(h)
    _same_language(g, h)


def _assert_strict_gnf(h: Grammar) -> None:
    """What ``to_gnf`` promises beyond the GNF check: non-empty byte sets, start on no right-hand side."""
    assert gnf_violation(h) == ""
    assert all(h.masks[~rhs[0]] != 0 for _, rhs in h.rules if rhs)
    assert all(h.start_id not in rhs for _, rhs in h.rules)
    PDA.from_gnf(h)  # the PDA accepts what is_gnf accepts


@checks_at_least(35)
@SETTINGS
@given(grammars(max_nonterminals=5), st.sampled_from(STRATEGIES[1:]))
def test_every_gnf_strategy(g: Grammar, strategy: str) -> None:
    """proofs/normal_forms.md §6: each construction alone is exact (auto only picks the smallest)."""
    if g.start_id not in generating(g):
        return gave_up()
    h = to_gnf(g, strategy=strategy)
    assert is_gnf(h)
    _assert_strict_gnf(h)
    _same_language(g, h)


@checks_at_least(35)
@SETTINGS
@given(grammar_and_strings(max_nonterminals=5, max_len=7, max_strings=10))
def test_to_gnf_earley_on_mutations(case: tuple[Grammar, list[bytes]]) -> None:
    """proofs/normal_forms.md §6: members and one-byte mutations get the same verdict."""
    g, strings = case
    if g.start_id not in generating(g):
        return gave_up()
    h = to_gnf(g)
    for w in strings:
        assert accepts(h, w) == accepts(g, w), w


@SETTINGS
@given(grammars(max_nonterminals=4), st.sampled_from([remove_epsilon, remove_unit, remove_left_recursion]))
def test_transforms_do_not_mutate(g: Grammar, transform: object) -> None:
    """Transforms return new grammars and leave their input untouched."""
    before = (g.names, g.masks, g.start_id, g.rules)
    assert callable(transform)
    transform(g)
    assert (g.names, g.masks, g.start_id, g.rules) == before


# -- regression cases -------------------------------------------------------------------

S, A, B, C, E = (Nonterminal(x) for x in "SABCE")
a, b, plus, lpar, rpar = (ByteSet.single(ord(x)) for x in "ab+()")


def test_expression_grammar_with_empty_string() -> None:
    """E -> E + E | ( E ) | a | ε : left recursive, nullable, start on a right-hand side."""
    g = Grammar(
        [
            Production(E, [E, plus, E]),
            Production(E, [lpar, E, rpar]),
            Production(E, [a]),
            Production(E, []),
        ],
        "E",
    )
    for t in (remove_epsilon, remove_unit, remove_left_recursion, to_gnf):
        _same_language(g, t(g), 7)
    h = to_gnf(g)
    assert is_gnf(h)
    assert b"" in enumerate_strings(h, 0)


def test_only_empty_string() -> None:
    g = Grammar([Production(S, [A]), Production(A, [])], "S")
    h = to_gnf(g)
    assert is_gnf(h)
    assert enumerate_strings(h, 3, b"ab") == [b""]


def test_unit_cycle() -> None:
    g = Grammar(
        [
            Production(S, [A]),
            Production(A, [B]),
            Production(B, [S]),
            Production(B, [a]),
            Production(A, [b, A]),
        ],
        "S",
    )
    for t in (remove_unit, remove_left_recursion, to_gnf):
        _same_language(g, t(g))


def test_indirect_left_recursion() -> None:
    g = Grammar(
        [
            Production(S, [A, a]),
            Production(A, [B, b]),
            Production(B, [S, plus]),
            Production(B, [C]),
            Production(C, [b]),
            Production(A, [a]),
        ],
        "S",
    )
    h = remove_left_recursion(g)
    assert not _has_left_recursion(h)
    _same_language(g, h, 8)
    _same_language(g, to_gnf(g), 8)


def test_hidden_left_recursion_through_nullable() -> None:
    """S -> A S a | b with A nullable hides S -> S a."""
    g = Grammar([Production(S, [A, S, a]), Production(S, [b]), Production(A, []), Production(A, [plus])], "S")
    h = remove_left_recursion(g)
    assert not _has_left_recursion(h)
    _same_language(g, h, 6)
    _same_language(g, to_gnf(g), 6)


def test_many_nullables_in_one_rule() -> None:
    """A rule with 9 nullable items is cut before expansion (no 2**9 blow-up)."""
    ws = Nonterminal("ws")
    items: list[Nonterminal | ByteSet] = []
    for _ in range(9):
        items.extend([ws, a])
    g = Grammar([Production(S, items[:-1]), Production(ws, [plus, ws]), Production(ws, [])], "S")
    h = remove_epsilon(g)
    assert len(h.rules) < 200
    _same_language(g, h, 10)
    assert is_gnf(to_gnf(g))


def test_empty_language_errors() -> None:
    g = Grammar([Production(S, [S, a])], "S")
    with pytest.raises(EmptyLanguageError, match="generates no string"):
        remove_useless(g)
    with pytest.raises(EmptyLanguageError):
        to_gnf(g)
    g2 = Grammar([Production(S, [ByteSet.empty()])], "S")
    with pytest.raises(EmptyLanguageError):
        to_gnf(g2)
    g3 = Grammar([], "S")
    with pytest.raises(EmptyLanguageError):
        to_gnf(g3)


def test_unreachable_ids_and_names() -> None:
    g = Grammar([Production(S, [a]), Production(A, [b]), Production(B, [A])], "S")
    assert unreachable(g) == frozenset({g.id_of("A"), g.id_of("B")})
    assert g.unreachable() == ("A", "B")
    assert remove_useless(g).names == ("S",)


# -- is_gnf and the budget --------------------------------------------------------------


def test_is_gnf_rejects() -> None:
    """proofs/normal_forms.md §6: each clause of the definition is checked."""
    ok = Grammar([Production(S, [a, A]), Production(A, [b]), Production(S, [])], "S")
    assert is_gnf(ok)
    assert not is_gnf(Grammar([Production(S, [A]), Production(A, [b])], "S"))  # leading nonterminal
    assert not is_gnf(Grammar([Production(S, [a, b])], "S"))  # terminal after the first
    assert not is_gnf(Grammar([Production(S, [a, A]), Production(A, [])], "S"))  # ε not on start
    assert not is_gnf(Grammar([Production(S, [a, S]), Production(S, [])], "S"))  # start on rhs, S -> ε
    assert not is_gnf(Grammar([Production(S, []), Production(S, [a, A]), Production(A, [a, S])], "S"))
    assert is_gnf(Grammar([Production(S, [a, S]), Production(S, [b])], "S"))  # start on rhs, no ε
    assert is_gnf(Grammar([Production(S, [ByteSet.empty()])], "S"))  # a terminal that never fires
    assert is_gnf(Grammar([Production(S, [])], "S"))  # only the empty string


def _exponential_family(n: int) -> Grammar:
    """A_i -> A_{i+1} a | A_{i+1} b, A_n -> + : leftmost substitution doubles at every level."""
    names = [Nonterminal(f"A{i}") for i in range(n + 1)]
    prods = [Production(names[n], [plus])]
    for i in range(n):
        prods.append(Production(names[i], [names[i + 1], a]))
        prods.append(Production(names[i], [names[i + 1], b, b]))
    return Grammar(prods, "A0")


def test_budget_exceeded_raises() -> None:
    """A budget smaller than the result stops the conversion with GrammarTooLarge."""
    g = _exponential_family(40)
    with pytest.raises(GrammarTooLarge, match="GNF conversion"):
        to_gnf(g, budget=30)
    with pytest.raises(GrammarTooLarge):
        to_gnf(g, budget=20_000, strategy="substitution")
    with pytest.raises(GrammarTooLarge):
        remove_left_recursion(_nested_left_recursion(12), budget=2_000)


def _nested_left_recursion(n: int) -> Grammar:
    """A cycle A0 -> A1 x | y, ..., A_{n-1} -> A0 x_i | A0 y_i: Paull substitution doubles."""
    names = [Nonterminal(f"A{i}") for i in range(n)]
    prods = []
    for i in range(n):
        nxt = names[(i + 1) % n]
        prods.append(Production(names[i], [nxt, a]))
        prods.append(Production(names[i], [nxt, b]))
        prods.append(Production(names[i], [plus]))
    return Grammar(prods, "A0")


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown GNF strategy"):
        to_gnf(Grammar([Production(S, [a])], "S"), strategy="nope")
    with pytest.raises(ValueError, match="unknown objective"):
        to_gnf(Grammar([Production(S, [a])], "S"), objective="nope")


@checks_at_least(12)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=5))
def test_to_gnf_objective_nonterminals(g: Grammar) -> None:
    """proofs/normal_forms.md §6: the other objective only changes which exact result is kept."""
    if g.start_id not in generating(g):
        return gave_up()
    h = to_gnf(g, objective="nonterminals")
    assert is_gnf(h)
    assert len(h.names) <= len(to_gnf(g).names) + 1  # +1: a fresh start may differ
    _same_language(g, h)


def test_budget_small_family_ok() -> None:
    g = _exponential_family(5)
    h = to_gnf(g)
    assert is_gnf(h)
    _same_language(g, h, 17)


def test_fast_strategy_falls_back_to_the_plain_construction_on_long_left_chains() -> None:
    """The deep cut is quadratic on a long left chain: "fast" gives it a bounded share of work,
    then builds the plain construction; the language is kept either way."""
    from formalgram import parse_gbnf
    from formalgram.transforms.gnf import to_gnf

    text = (
        "root ::= a0\n" + "".join(f'a{i} ::= a{i + 1} "x" | "y"\n' for i in range(3000)) + 'a3000 ::= "z"\n'
    )
    g = parse_gbnf(text)
    h = to_gnf(g, strategy="fast")
    assert is_gnf(h)
    assert len(h.rules) == len(to_gnf(g, strategy="left-corner:plain").rules)
    for w in (b"z" + b"x" * 3000, b"y", b"yxx", b"z" + b"x" * 2999, b"zx", b"x"):
        assert accepts(h, w) == accepts(g, w)
