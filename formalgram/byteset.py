"""Immutable sets of byte values, the terminals of every formalgram grammar.

A :class:`ByteSet` is a subset of ``{0, ..., 255}`` stored as a 256-bit integer mask
(bit ``b`` set means byte ``b`` is in the set).  A literal such as ``"int"`` becomes
three single-byte sets; a character class such as ``[a-z]`` becomes one set.  Keeping
whole classes as single terminals is what keeps normal forms small.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import final

__all__ = ["FULL_MASK", "ByteSet"]


FULL_MASK = (1 << 256) - 1


@final
class ByteSet:
    """An immutable set of byte values (0-255).

    Parameters
    ----------
    mask : int
        Bit mask with bit ``b`` set when byte ``b`` belongs to the set; ``0 <= mask < 2**256``.

    Raises
    ------
    ValueError
        If ``mask`` is out of range.

    Notes
    -----
    Equality and hashing are structural and never equal to a raw ``int``, ``str`` or ``bytes``.
    Membership, union, intersection and complement are O(1) big-integer operations.

    Examples
    --------
    >>> ByteSet.from_range(ord("a"), ord("c")) == ByteSet.from_bytes(b"abc")
    True
    >>> ord("b") in ByteSet.from_bytes(b"abc")
    True
    """

    __slots__ = ("_mask",)

    def __init__(self, mask: int) -> None:
        if mask < 0 or mask > FULL_MASK:
            raise ValueError(f"ByteSet mask out of range: {mask!r}")
        self._mask = mask

    # -- constructors -------------------------------------------------------------------
    @staticmethod
    def single(value: int) -> ByteSet:
        """The set ``{value}``; raises ValueError unless ``0 <= value <= 255``."""
        if value < 0 or value > 255:
            raise ValueError(f"byte value out of range: {value}")
        return ByteSet(1 << value)

    @staticmethod
    def from_bytes(values: Iterable[int]) -> ByteSet:
        """The set of the given byte values (``bytes`` or any iterable of ints)."""
        mask = 0
        for v in values:
            if v < 0 or v > 255:
                raise ValueError(f"byte value out of range: {v}")
            mask |= 1 << v
        return ByteSet(mask)

    @staticmethod
    def from_range(lo: int, hi: int) -> ByteSet:
        """The set ``{lo, ..., hi}`` (inclusive); empty when ``lo > hi``."""
        if lo < 0 or hi > 255:
            raise ValueError(f"byte range out of bounds: {lo}-{hi}")
        if lo > hi:
            return ByteSet(0)
        return ByteSet(((1 << (hi - lo + 1)) - 1) << lo)

    @staticmethod
    def full() -> ByteSet:
        """All 256 byte values."""
        return ByteSet(FULL_MASK)

    @staticmethod
    def empty() -> ByteSet:
        """The empty set (matches no byte)."""
        return ByteSet(0)

    # -- queries ------------------------------------------------------------------------
    @property
    def mask(self) -> int:
        """The 256-bit membership mask."""
        return self._mask

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int) or value < 0 or value > 255:
            return False
        return (self._mask >> value) & 1 == 1

    def __iter__(self) -> Iterator[int]:
        m = self._mask
        while m:
            low = m & -m
            yield low.bit_length() - 1
            m ^= low

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def is_empty(self) -> bool:
        """True when the set has no element."""
        return self._mask == 0

    def is_single(self) -> bool:
        """True when the set has exactly one element."""
        m = self._mask
        return m != 0 and m & (m - 1) == 0

    def min(self) -> int:
        """The smallest element; raises ValueError on the empty set."""
        if self._mask == 0:
            raise ValueError("min() of an empty ByteSet")
        m = self._mask
        return (m & -m).bit_length() - 1

    def ranges(self) -> list[tuple[int, int]]:
        """Maximal inclusive ranges ``(lo, hi)`` covering the set, in increasing order."""
        out: list[tuple[int, int]] = []
        start = -1
        prev = -2
        for v in self:
            if v != prev + 1:
                if start >= 0:
                    out.append((start, prev))
                start = v
            prev = v
        if start >= 0:
            out.append((start, prev))
        return out

    # -- algebra ------------------------------------------------------------------------
    def __or__(self, other: ByteSet) -> ByteSet:
        return ByteSet(self._mask | other._mask)

    def __and__(self, other: ByteSet) -> ByteSet:
        return ByteSet(self._mask & other._mask)

    def __sub__(self, other: ByteSet) -> ByteSet:
        return ByteSet(self._mask & ~other._mask)

    def __invert__(self) -> ByteSet:
        return ByteSet(FULL_MASK ^ self._mask)

    def issubset(self, other: ByteSet) -> bool:
        """True when every element of ``self`` is in ``other``."""
        return self._mask & ~other._mask == 0

    # -- identity -----------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ByteSet):
            return NotImplemented
        return self._mask == other._mask

    def __hash__(self) -> int:
        return hash(("ByteSet", self._mask))

    def __lt__(self, other: ByteSet) -> bool:
        return self._mask < other._mask

    def __repr__(self) -> str:
        return f"ByteSet({self.describe()})"

    def describe(self) -> str:
        """A compact human-readable form such as ``[a-z_]`` or ``'x'``."""
        if self.is_single():
            return repr(bytes([self.min()]))[1:]
        parts = []
        for lo, hi in self.ranges():
            if lo == hi:
                parts.append(_show_byte(lo))
            else:
                parts.append(f"{_show_byte(lo)}-{_show_byte(hi)}")
        return "[" + "".join(parts) + "]"


def _show_byte(b: int) -> str:
    if 0x21 <= b <= 0x7E and chr(b) not in "[]-\\^":
        return chr(b)
    return f"\\x{b:02X}"
