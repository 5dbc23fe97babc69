"""Byte classes: the coarsest partition of the 256 byte values that no terminal splits.

Two bytes are in the same class when every terminal mask of the grammar contains
both or neither.  Bytes in one class are interchangeable everywhere in the grammar:
replacing one by the other in a string never changes membership in ``L(g)`` nor in
its prefix set.
"""

from __future__ import annotations

from formalgram.byteset import FULL_MASK, ByteSet
from formalgram.grammar import Grammar

__all__ = ["byte_class_map", "byte_classes"]


def _partition(g: Grammar) -> list[int]:
    """The blocks (256-bit masks) of the coarsest partition no terminal splits, by smallest byte."""
    blocks = [FULL_MASK]
    for m in g.masks:
        if m == 0 or m == FULL_MASK:
            continue
        nxt: list[int] = []
        for blk in blocks:
            inside = blk & m
            if inside == 0 or inside == blk:
                nxt.append(blk)
            else:
                nxt.append(inside)
                nxt.append(blk & ~m)
        blocks = nxt
    blocks.sort(key=lambda blk: (blk & -blk).bit_length())
    return blocks


def byte_classes(g: Grammar) -> tuple[ByteSet, ...]:
    """The classes of bytes that no terminal of ``g`` distinguishes.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    tuple of ByteSet
        A partition of ``{0..255}``, ordered by smallest member.  Two bytes share a class
        iff every terminal mask of ``g`` contains both or neither.

    Notes
    -----
    O(|terminals| * |classes|) big-integer operations (at most 256 classes): each
    mask refines the current blocks.  Linear in the grammar, so it takes no budget; raises
    nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.from_bytes(b"ab")])], "S")
    >>> [len(c) for c in byte_classes(g)]
    [254, 2]
    """
    return tuple(ByteSet(blk) for blk in _partition(g))


def byte_class_map(g: Grammar) -> bytes:
    """Byte value -> index of its class in :func:`byte_classes` (256 entries).

    The partition every consumer uses (the PDA's byte classes, the displacement search).

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    bytes
        256 class ids; classes are numbered by their smallest byte, so byte 0 is in class 0.

    Notes
    -----
    The partition's cost (see :func:`byte_classes`) plus O(256); no budget, raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> m = byte_class_map(Grammar([Production(S, [ByteSet.from_bytes(b"ab")])], "S"))
    >>> m[0], m[ord("a")], m[ord("b")], m[ord("c")]
    (0, 1, 1, 0)
    """
    out = bytearray(256)
    for i, blk in enumerate(_partition(g)):
        m = blk
        while m:
            low = m & -m
            out[low.bit_length() - 1] = i
            m ^= low
    return bytes(out)
