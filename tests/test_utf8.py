"""Tests of formalgram.utf8: code-point sets -> exact UTF-8 byte-set alternatives.

Oracle: Python's own UTF-8 codec (``surrogatepass`` so that surrogates encode with the
generic three-byte pattern, as XGrammar does) and a brute-force decoder of byte strings.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formalgram.byteset import ByteSet
from formalgram.utf8 import (
    MAX_CODE_POINT,
    complement_ranges,
    decode_one,
    encode_code_point,
    normalize_ranges,
    sequences_to_ranges,
    utf8_sequences,
)

_EDGES = (0x0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF)
_EDGES_4 = (0x10000, 0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF, 0x22, 0x5C)
BOUNDARIES = sorted({b + d for b in (*_EDGES, *_EDGES_4) for d in (-1, 0, 1) if 0 <= b + d <= MAX_CODE_POINT})


def _py_encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def _matches(seqs: list[tuple[ByteSet, ...]], data: bytes) -> int:
    """Number of alternatives matching ``data`` exactly (must be 0 or 1)."""
    return sum(1 for s in seqs if len(s) == len(data) and all(b in bs for b, bs in zip(data, s, strict=True)))


def _oracle_decode(data: bytes) -> int:
    """Independent decoder: the code point if ``data`` is one shortest-form char, else -1."""
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return -1
    return ord(text) if len(text) == 1 else -1


def test_encode_matches_python_codec_everywhere() -> None:
    for cp in range(0, MAX_CODE_POINT + 1, 7):
        assert encode_code_point(cp) == _py_encode(cp)
    for cp in BOUNDARIES:
        assert encode_code_point(cp) == _py_encode(cp)
        assert decode_one(_py_encode(cp)) == (cp, len(_py_encode(cp)))
    with pytest.raises(ValueError):
        encode_code_point(MAX_CODE_POINT + 1)


def test_full_range_matches_every_code_point_exactly_once() -> None:
    seqs = utf8_sequences([(0, MAX_CODE_POINT)])
    assert [len(s) for s in seqs] == [1, 2, 3, 3, 4, 4, 4]
    # the alternatives are disjoint and cover exactly 0x110000 strings
    total = 0
    for s in seqs:
        n = 1
        for bs in s:
            n *= len(bs)
        total += n
    assert total == MAX_CODE_POINT + 1
    for cp in range(0, MAX_CODE_POINT + 1, 97):
        assert _matches(seqs, _py_encode(cp)) == 1
    for cp in BOUNDARIES:
        assert _matches(seqs, _py_encode(cp)) == 1


@pytest.mark.heavy
def test_full_range_exhaustive() -> None:
    seqs = utf8_sequences([(0, MAX_CODE_POINT)])
    for cp in range(MAX_CODE_POINT + 1):
        assert _matches(seqs, _py_encode(cp)) == 1


def test_invalid_sequences_rejected() -> None:
    seqs = utf8_sequences([(0, MAX_CODE_POINT)])
    invalid = [
        b"\x80",
        b"\xbf",
        b"\xc0\x80",  # overlong NUL
        b"\xc1\xbf",  # overlong
        b"\xe0\x80\x80",  # overlong 3-byte
        b"\xe0\x9f\xbf",
        b"\xf0\x80\x80\x80",  # overlong 4-byte
        b"\xf0\x8f\xbf\xbf",
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xf5\x80\x80\x80",
        b"\xff",
        b"\xfe",
        b"\xc3",  # truncated
        b"\xe2\x82",
        b"\xc3\xa9\x80",  # trailing continuation
    ]
    for data in invalid:
        assert _matches(seqs, data) == 0, data
    rng = random.Random(1234)
    for _ in range(20000):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        want = 1 if _oracle_decode(data) >= 0 else 0
        assert _matches(seqs, data) == want, data


def test_surrogates_are_ordinary_code_points() -> None:
    seqs = utf8_sequences([(0xD800, 0xDFFF)])
    assert seqs == [(ByteSet.single(0xED), ByteSet.from_range(0xA0, 0xBF), ByteSet.from_range(0x80, 0xBF))]


def test_negated_quote_backslash_is_small() -> None:
    ranges = complement_ranges([(0x22, 0x22), (0x5C, 0x5C)])
    seqs = utf8_sequences(ranges)
    assert len(seqs) == 7
    assert seqs[0] == (ByteSet.from_range(0, 0x7F) - ByteSet.from_bytes(b'"\\'),)
    assert _matches(seqs, b'"') == 0
    assert _matches(seqs, "é".encode()) == 1


range_lists = st.lists(
    st.tuples(
        st.one_of(st.sampled_from(BOUNDARIES), st.integers(0, MAX_CODE_POINT)),
        st.one_of(st.sampled_from(BOUNDARIES), st.integers(0, MAX_CODE_POINT)),
    ).map(lambda t: (min(t), max(t))),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(range_lists, st.randoms(use_true_random=False))
def test_random_sets_exact(ranges: list[tuple[int, int]], rnd: random.Random) -> None:
    norm = normalize_ranges(ranges)
    seqs = utf8_sequences(ranges)

    def member(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in norm)

    probes = set(BOUNDARIES)
    for lo, hi in norm:
        probes.update((lo, hi, max(0, lo - 1), min(MAX_CODE_POINT, hi + 1)))
        probes.update(rnd.randint(lo, hi) for _ in range(5))
    probes.update(rnd.randint(0, MAX_CODE_POINT) for _ in range(50))
    for cp in probes:
        assert _matches(seqs, _py_encode(cp)) == (1 if member(cp) else 0), hex(cp)
    for _ in range(200):
        data = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
        cp = _oracle_decode(data)
        assert _matches(seqs, data) == (1 if cp >= 0 and member(cp) else 0), data
    # canonical and invertible
    assert sequences_to_ranges(seqs) == norm
    assert utf8_sequences(norm) == seqs
    # complement is disjoint and covers the rest
    comp = complement_ranges(norm)
    assert not any(lo <= c <= hi for c in probes for lo, hi in comp if member(c))


def test_sequences_to_ranges_rejects_non_canonical() -> None:
    cont = ByteSet.from_range(0x80, 0xBF)
    assert sequences_to_ranges([(ByteSet.from_range(0xC2, 0xDF), cont)]) == ((0x80, 0x7FF),)
    # overlong lead bytes
    assert sequences_to_ranges([(ByteSet.from_range(0xC0, 0xDF), cont)]) is None
    # a lone continuation byte
    assert sequences_to_ranges([(cont,)]) is None
    # valid strings but split differently from the canonical form
    assert sequences_to_ranges([(ByteSet.single(0xC3), cont), (ByteSet.single(0xC4), cont)]) is None
    assert sequences_to_ranges([]) == ()
