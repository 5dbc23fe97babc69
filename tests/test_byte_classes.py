"""Byte classes (proofs/normal_forms.md §7) against a brute-force signature oracle."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from formalgram import ByteSet, Grammar, Nonterminal, Production, byte_class_map, byte_classes, parse_gbnf
from formalgram.recognize import accepts, is_prefix
from formalgram.testing import grammar_and_strings

masks_st = st.lists(st.integers(0, (1 << 256) - 1), max_size=6) | st.lists(
    st.sets(st.integers(0, 255), max_size=20).map(lambda s: sum(1 << b for b in s)), max_size=8
)


def _grammar_with(masks: list[int]) -> Grammar:
    S = Nonterminal("S")
    return Grammar([Production(S, [ByteSet(m)]) for m in masks], "S")


def _oracle(masks: list[int]) -> list[frozenset[int]]:
    groups: dict[tuple[bool, ...], set[int]] = {}
    for byte in range(256):
        sig = tuple(bool((m >> byte) & 1) for m in masks)
        groups.setdefault(sig, set()).add(byte)
    return sorted((frozenset(x) for x in groups.values()), key=min)


@settings(max_examples=200, deadline=None)
@given(masks_st)
def test_partition_matches_signatures(masks: list[int]) -> None:
    """proofs/normal_forms.md §7: same class iff every mask holds both or neither."""
    g = _grammar_with(masks)
    classes = byte_classes(g)
    assert [frozenset(c) for c in classes] == _oracle(list(g.masks))
    table = byte_class_map(g)
    assert len(table) == 256
    for i, c in enumerate(classes):
        for byte in c:
            assert table[byte] == i


def test_no_terminals_one_class() -> None:
    g = Grammar([Production(Nonterminal("S"), [])], "S")
    assert byte_classes(g) == (ByteSet.full(),)
    assert byte_class_map(g) == bytes(256)


@settings(max_examples=100, deadline=None)
@given(grammar_and_strings(alphabet=b"abc", max_len=5))
@example(case=(parse_gbnf('root ::= "a" [bc] | "c"'), [b"ab", b"ac", b"c", b"cb"]))  # a, {b, c}, rest
def test_class_members_are_interchangeable(case: tuple[Grammar, list[bytes]]) -> None:
    """proofs/normal_forms.md §7: replacing a byte by another byte of its class keeps the
    verdicts (membership and viability), at every position."""
    g, strings = case
    classes = byte_classes(g)
    table = byte_class_map(g)
    for w in strings:
        for i, byte in enumerate(w):
            members = list(classes[table[byte]])
            # the class's ends and its letters of the alphabet; a byte alone in its class has none
            mates = ({members[0], members[-1]} | (set(members) & set(b"abc"))) - {byte}
            for mate in mates:
                v = w[:i] + bytes([mate]) + w[i + 1 :]
                assert accepts(g, v) == accepts(g, w), (w, i, mate)
                assert is_prefix(g, v) == is_prefix(g, w), (w, i, mate)
