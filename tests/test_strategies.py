"""The public Hypothesis strategies: parameters are respected and the advertised shapes occur."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _recognize_oracles import generating
from hypothesis import HealthCheck, find, given, settings

from formalgram import Grammar
from formalgram.testing import grammar_and_strings, grammars


def _nullable(g: Grammar) -> set[int]:
    out: set[int] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            if lhs not in out and all(s >= 0 and s in out for s in rhs):
                out.add(lhs)
                changed = True
    return out


def _reachable(g: Grammar) -> set[int]:
    seen = {g.start_id}
    todo = [g.start_id]
    while todo:
        a = todo.pop()
        for r in g.rules_by_lhs[a]:
            for s in g.rules[r][1]:
                if s >= 0 and s not in seen:
                    seen.add(s)
                    todo.append(s)
    return seen


def _left_edges(g: Grammar) -> dict[int, set[int]]:
    """A -> B when some rule A -> α B β has a nullable α."""
    nul = _nullable(g)
    edges: dict[int, set[int]] = {a: set() for a in range(len(g.names))}
    for lhs, rhs in g.rules:
        for s in rhs:
            if s < 0:
                break
            edges[lhs].add(s)
            if s not in nul:
                break
    return edges


def _left_recursive(g: Grammar, direct: bool) -> bool:
    edges = _left_edges(g)
    if direct:
        return any(rhs[:1] == (lhs,) for lhs, rhs in g.rules)
    for a in edges:
        seen: set[int] = set()
        todo = [b for b in edges[a] if b != a]
        while todo:
            b = todo.pop()
            if b == a:
                return True
            if b not in seen:
                seen.add(b)
                todo.extend(edges[b])
    return False


def _unit_cycle(g: Grammar) -> bool:
    unit: dict[int, set[int]] = {a: set() for a in range(len(g.names))}
    for lhs, rhs in g.rules:
        if len(rhs) == 1 and rhs[0] >= 0:
            unit[lhs].add(rhs[0])
    for a in unit:
        seen: set[int] = set()
        todo = list(unit[a])
        while todo:
            b = todo.pop()
            if b == a:
                return True
            if b not in seen:
                seen.add(b)
                todo.extend(unit[b])
    return False


FEATURES: dict[str, Callable[[Grammar], bool]] = {
    "empty rule": lambda g: any(not rhs for _, rhs in g.rules),
    "nullable non-empty rule": lambda g: any(
        rhs and all(s >= 0 and s in _nullable(g) for s in rhs) for _, rhs in g.rules
    ),
    "direct left recursion": lambda g: _left_recursive(g, direct=True),
    "indirect left recursion": lambda g: _left_recursive(g, direct=False),
    "unit cycle": _unit_cycle,
    "nonterminal without rules": lambda g: any(not rs for rs in g.rules_by_lhs),
    "rule using a non-generating symbol": lambda g: any(
        lhs in generating(g) and any(s >= 0 and s not in generating(g) for s in rhs) for lhs, rhs in g.rules
    ),
    "unreachable rule": lambda g: any(lhs not in _reachable(g) for lhs, _ in g.rules),
    "multi-byte terminal": lambda g: any(m & (m - 1) for m in g.masks),
    "empty language": lambda g: g.start_id not in generating(g),
}


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_feature_occurs(name: str) -> None:
    """Each shape is drawn within 2,000 examples: ``find`` raises ``NoSuchExample`` otherwise
    (the example it returns satisfies the predicate by construction, so nothing is asserted on it)."""
    find(
        grammars(),
        FEATURES[name],
        settings=settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck)),
    )


@settings(max_examples=100, deadline=None)
@given(
    grammars(
        max_nonterminals=2,
        max_rules_per_nt=2,
        max_rhs=2,
        alphabet=b"xyz",
        byte_classes=False,
        allow_epsilon=False,
    )
)
def test_parameters_respected(g: Grammar) -> None:
    assert g.start.name == "S"
    assert len(g.names) <= 2
    assert all(len(rs) <= 2 for rs in g.rules_by_lhs)
    assert all(1 <= len(rhs) <= 2 for _, rhs in g.rules)
    allowed = sum(1 << b for b in b"xyz")
    assert all(m and m & (m - 1) == 0 and m & ~allowed == 0 for m in g.masks)


@settings(max_examples=50, deadline=None)
@given(grammars(allow_empty_terminal=True))
def test_empty_terminal_option(g: Grammar) -> None:
    allowed = sum(1 << b for b in b"ab")
    assert all(m & ~allowed == 0 for m in g.masks)


def test_empty_terminal_occurs() -> None:
    """With ``allow_empty_terminal``, a terminal matching no byte is drawn (``find`` raises otherwise)."""
    find(
        grammars(allow_empty_terminal=True),
        lambda g: 0 in g.masks,
        settings=settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammar_and_strings(alphabet=b"abc", max_len=4, max_strings=5))
def test_grammar_and_strings_shape(gs: tuple[Grammar, list[bytes]]) -> None:
    _g, strings = gs
    assert 1 <= len(strings) <= 5
    for s in strings:
        assert set(s) <= set(b"abc")
        assert len(s) <= 5  # members <= max_len, plus one inserted byte for mutations


def test_bad_parameters() -> None:
    for bad in (grammars(max_nonterminals=0), grammars(alphabet=b"")):
        with pytest.raises(ValueError, match="grammars"):  # raised when the first example is drawn
            find(bad, lambda g: True, settings=settings(database=None))
