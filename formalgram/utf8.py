"""Code-point sets as exact UTF-8 byte-level alternatives.

A character class such as ``[^"\\\\]`` denotes a set of Unicode code points; the byte-level
grammar must accept exactly their UTF-8 encodings.  :func:`utf8_sequences` turns a set of
inclusive code-point ranges into a short list of alternatives, each a sequence of
:class:`~formalgram.byteset.ByteSet` (one set per byte position), such that a byte string
is matched by some alternative iff it is the encoding of a code point in the set.

Conventions (chosen to match XGrammar 0.2.9, see ``docs/syntax.md``):

* code points range over ``0 .. 0x10FFFF``; surrogates ``U+D800..U+DFFF`` are ordinary
  code points encoded with the generic three-byte pattern (``ED A0 80`` .. ``ED BF BF``);
* only shortest-form encodings are produced (no overlong forms, nothing above U+10FFFF).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from formalgram.byteset import ByteSet

__all__ = [
    "MAX_CODE_POINT",
    "complement_ranges",
    "decode_one",
    "encode_code_point",
    "normalize_ranges",
    "sequences_to_ranges",
    "utf8_sequences",
]

MAX_CODE_POINT = 0x10FFFF

# (smallest code point, largest code point) for encodings of 1, 2, 3 and 4 bytes
_LENGTH_BOUNDS = ((0x0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODE_POINT))


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort and merge inclusive code-point ranges; empty ranges (``lo > hi``) are dropped.

    Parameters
    ----------
    ranges : iterable of (lo, hi)
        Inclusive ranges inside ``0 .. 0x10FFFF``.

    Returns
    -------
    tuple of (lo, hi)
        Disjoint, non-adjacent ranges in increasing order.

    Raises
    ------
    ValueError
        If a bound is outside ``0 .. 0x10FFFF``.

    Notes
    -----
    O(r log r) for r ranges.

    Examples
    --------
    >>> normalize_ranges([(5, 9), (0, 4), (20, 19)])
    ((0, 9),)
    """
    items: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if lo > hi:
            continue
        if lo < 0 or hi > MAX_CODE_POINT:
            raise ValueError(f"code point range out of bounds: {lo:#x}-{hi:#x}")
        items.append((lo, hi))
    items.sort()
    out: list[tuple[int, int]] = []
    for lo, hi in items:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def complement_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The code points of ``0 .. 0x10FFFF`` not covered by ``ranges`` (normalized).

    Examples
    --------
    >>> complement_ranges([(0, 0x40)])
    ((65, 1114111),)
    """
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return tuple(out)


def encode_code_point(cp: int) -> bytes:
    """The shortest-form UTF-8 encoding of ``cp`` (surrogates encoded like any code point).

    Raises
    ------
    ValueError
        If ``cp`` is outside ``0 .. 0x10FFFF``.

    Examples
    --------
    >>> encode_code_point(0xD800)
    b'\\xed\\xa0\\x80'
    """
    if cp < 0 or cp > MAX_CODE_POINT:
        raise ValueError(f"code point out of range: {cp:#x}")
    if cp < 0x80:
        return bytes((cp,))
    if cp < 0x800:
        return bytes((0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)))
    if cp < 0x10000:
        return bytes((0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)))
    return bytes(
        (0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))
    )


def decode_one(data: bytes, pos: int = 0) -> tuple[int, int]:
    """Decode one shortest-form UTF-8 code point at ``data[pos:]`` (surrogates allowed).

    Returns
    -------
    (code_point, length), or ``(-1, 0)`` when the bytes at ``pos`` are not a complete,
    shortest-form encoding of a code point ``<= 0x10FFFF``.
    """
    n = len(data)
    if pos >= n:
        return (-1, 0)
    b0 = data[pos]
    if b0 < 0x80:
        return (b0, 1)
    if 0xC2 <= b0 <= 0xDF:
        length, cp = 2, b0 & 0x1F
    elif 0xE0 <= b0 <= 0xEF:
        length, cp = 3, b0 & 0x0F
    elif 0xF0 <= b0 <= 0xF4:
        length, cp = 4, b0 & 0x07
    else:
        return (-1, 0)
    if pos + length > n:
        return (-1, 0)
    for i in range(1, length):
        b = data[pos + i]
        if b & 0xC0 != 0x80:
            return (-1, 0)
        cp = (cp << 6) | (b & 0x3F)
    lo, hi = _LENGTH_BOUNDS[length - 1]
    if cp < lo or cp > hi:
        return (-1, 0)
    return (cp, length)


def _split_same_length(lo: int, hi: int, length: int, out: list[tuple[int, int]]) -> None:
    # Split [lo, hi] (all encoded with `length` bytes) into ranges whose encodings are a
    # product of contiguous byte ranges: for every suffix of k continuation bytes either
    # both ends agree on the prefix or the suffix spans its full 0..2^(6k)-1 range.
    stack = [(lo, hi)]
    while stack:
        a, b = stack.pop()
        done = True
        for k in range(1, length):
            mask = (1 << (6 * k)) - 1
            if (a & ~mask) != (b & ~mask):
                if a & mask != 0:
                    stack.append(((a | mask) + 1, b))
                    stack.append((a, a | mask))
                    done = False
                    break
                if b & mask != mask:
                    stack.append(((b & ~mask), b))
                    stack.append((a, (b & ~mask) - 1))
                    done = False
                    break
        if done:
            out.append((a, b))


def utf8_sequences(ranges: Iterable[tuple[int, int]]) -> list[tuple[ByteSet, ...]]:
    """Exact UTF-8 byte-level alternatives for a set of code points.

    Parameters
    ----------
    ranges : iterable of (lo, hi)
        Inclusive code-point ranges inside ``0 .. 0x10FFFF`` (any order, may overlap).

    Returns
    -------
    list of tuple of ByteSet
        Alternatives; a byte string is the UTF-8 encoding of a code point of the set iff
        it matches exactly one alternative position by position.  All one-byte code points
        are merged into a single one-element alternative; alternatives that differ only in
        their first byte set are merged.  The result is canonical: equal sets give equal lists.

    Raises
    ------
    ValueError
        If a bound is outside ``0 .. 0x10FFFF``.

    Notes
    -----
    O(r) alternatives and time for r normalized ranges (at most a few alternatives per range).

    Examples
    --------
    >>> [len(s) for s in utf8_sequences([(0, 0x10FFFF)])]
    [1, 2, 3, 3, 4, 4, 4]
    """
    norm = normalize_ranges(ranges)
    pieces: list[tuple[int, int]] = []
    for lo, hi in norm:
        for length in range(1, 5):
            blo, bhi = _LENGTH_BOUNDS[length - 1]
            a = max(lo, blo)
            b = min(hi, bhi)
            if a <= b:
                _split_same_length(a, b, length, pieces)
    # encode every piece as a product of byte ranges
    seqs: list[tuple[int, ...]] = []
    for a, b in pieces:
        ea = encode_code_point(a)
        eb = encode_code_point(b)
        seqs.append(tuple(ByteSet.from_range(x, y).mask for x, y in zip(ea, eb, strict=True)))
    # merge alternatives sharing everything but the first byte set
    merged: dict[tuple[int, ...], int] = {}
    tails: list[tuple[int, ...]] = []
    firsts: list[int] = []
    for s in seqs:
        tail = (len(s), *s[1:])
        idx = merged.get(tail, -1)
        if idx >= 0:
            firsts[idx] |= s[0]
            continue
        merged[tail] = len(tails)
        tails.append(s[1:])
        firsts.append(s[0])
    out: list[tuple[ByteSet, ...]] = []
    for i, t in enumerate(tails):
        out.append((ByteSet(firsts[i]), *(ByteSet(m) for m in t)))
    out.sort(key=_seq_key)
    return out


def _seq_key(seq: tuple[ByteSet, ...]) -> tuple[int, int]:
    return (len(seq), seq[0].min() if seq[0] else 0)


def sequences_to_ranges(
    seqs: Sequence[Sequence[ByteSet]], limit: int = 4096
) -> tuple[tuple[int, int], ...] | None:
    """Inverse of :func:`utf8_sequences`: the code-point set a list of alternatives encodes.

    Returns the normalized ranges when every alternative is a product of byte sets whose
    strings are all shortest-form UTF-8 encodings, and ``utf8_sequences`` of the result
    gives back exactly ``seqs`` (as a set); otherwise ``None``.

    Parameters
    ----------
    seqs : sequence of sequences of ByteSet
        Candidate alternatives.
    limit : int
        Give up (return ``None``) past this many byte-range combinations.

    Notes
    -----
    O(combinations of byte ranges), bounded by ``limit``.
    """
    ranges: list[tuple[int, int]] = []
    budget = limit
    for seq in seqs:
        k = len(seq)
        if k < 1 or k > 4:
            return None
        if k == 1:
            first = seq[0]
            if not first or first.mask >> 0x80:
                return None
            ranges.extend(first.ranges())
            continue
        per_pos = [s.ranges() for s in seq]
        if any(not r for r in per_pos):
            return None
        combos = 1
        for r in per_pos:
            combos *= len(r)
        budget -= combos
        if budget < 0:
            return None
        # enumerate combinations of byte ranges; each must decode to one code-point range
        idx = [0] * k
        while True:
            lows = bytes(per_pos[i][idx[i]][0] for i in range(k))
            highs = bytes(per_pos[i][idx[i]][1] for i in range(k))
            cp_lo, n_lo = decode_one(lows)
            cp_hi, n_hi = decode_one(highs)
            if n_lo != k or n_hi != k:
                return None
            # contiguous iff every position after the first non-singleton one is full
            seen_span = False
            for i in range(k):
                a, b = per_pos[i][idx[i]]
                if seen_span and (i == 0 or (a, b) != (0x80, 0xBF)):
                    return None
                if a != b:
                    seen_span = True
            ranges.append((cp_lo, cp_hi))
            j = k - 1
            while j >= 0:
                idx[j] += 1
                if idx[j] < len(per_pos[j]):
                    break
                idx[j] = 0
                j -= 1
            if j < 0:
                break
    norm = normalize_ranges(ranges)
    want = {tuple(s) for s in utf8_sequences(norm)}
    have = {tuple(s) for s in seqs}
    if want != have:
        return None
    return norm
