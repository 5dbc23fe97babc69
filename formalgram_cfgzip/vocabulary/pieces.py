"""Token strings -> bytes: the one definition of each piece encoding the loaders meet.

Tokenizers store their tokens as strings that are not the bytes the model writes:
byte-level BPE (GPT-2 and its successors) shows every byte as a printable character,
SentencePiece writes a space as ``▁`` (U+2581) and stores raw bytes as pieces ``<0xHH>``
(*byte fallback*).  This module turns such a piece back into its bytes; the loaders of
:mod:`formalgram_cfgzip.vocabulary.loaders` choose which rules a tokenizer uses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import final

__all__ = [
    "BYTE_LEVEL",
    "SPACE_MARKER",
    "PieceDecoder",
    "byte_level_decode",
    "byte_piece_value",
    "gpt2_char_to_byte",
    "sentencepiece_decoder",
]

SPACE_MARKER = "\u2581"
"""SentencePiece's stand-in for a space (``▁``, U+2581)."""

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def gpt2_char_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte -> printable character map used by byte-level BPE.

    Returns
    -------
    dict of str to int
        256 entries: printable Latin-1 bytes stand for themselves; the other bytes (controls,
        space, ``0x7F``-``0xA0``, ``0xAD``) are shifted to ``U+0100`` onwards, in byte order.

    Notes
    -----
    O(256).  :func:`byte_level_decode` uses one table built at import time.

    Examples
    --------
    >>> table = gpt2_char_to_byte()
    >>> len(table), table["a"], table["Ġ"], table["Ċ"]
    (256, 97, 32, 10)
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shown = set(printable)
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in shown:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_GPT2_CHAR_TO_BYTE: dict[str, int] = gpt2_char_to_byte()


def byte_level_decode(piece: str) -> bytes:
    """Bytes of a byte-level BPE token string (GPT-2 byte map).

    Parameters
    ----------
    piece : str
        A token string of a byte-level tokenizer.

    Returns
    -------
    bytes
        One byte per character.  As Hugging Face's ``ByteLevel`` decoder does, a string
        with a character outside the map (e.g. an added token written as plain text) stands
        for its own UTF-8 encoding.

    Notes
    -----
    O(len(piece)).

    Examples
    --------
    >>> byte_level_decode("Ġhello"), byte_level_decode("Ċ"), byte_level_decode("a b")
    (b' hello', b'\\n', b'a b')
    """
    table = _GPT2_CHAR_TO_BYTE
    out = bytearray()
    for ch in piece:
        b = table.get(ch)
        if b is None:
            return piece.encode("utf-8", "surrogatepass")
        out.append(b)
    return bytes(out)


def byte_piece_value(piece: str) -> int | None:
    """The byte a SentencePiece byte piece ``<0xHH>`` stands for, or None for other pieces.

    Parameters
    ----------
    piece : str
        A token string.

    Returns
    -------
    int or None
        ``HH`` read as hexadecimal (either case), when ``piece`` is exactly ``<0xHH>``.

    Examples
    --------
    >>> byte_piece_value("<0x0A>"), byte_piece_value("<0xff>"), byte_piece_value("<0x0A>x")
    (10, 255, None)
    """
    m = _BYTE_PIECE.fullmatch(piece)
    return None if m is None else int(m.group(1), 16)


@final
class PieceDecoder:
    """How the token strings of one tokenizer map to bytes.

    Parameters
    ----------
    byte_level : bool
        Token strings are GPT-2 byte-level strings (:func:`byte_level_decode`); the other
        two settings are then ignored.
    replacements : sequence of (str, str)
        Substring replacements applied in order to any other piece (e.g. ``("▁", " ")``)
        before it is encoded as UTF-8.
    byte_fallback : bool
        A piece ``<0xHH>`` is the single byte ``HH``.

    Examples
    --------
    >>> sp = PieceDecoder(False, [(SPACE_MARKER, " ")], True)
    >>> sp.decode("▁hello"), sp.decode("<0x0A>"), sp.decode("<s>")
    (b' hello', b'\\n', b'<s>')
    >>> BYTE_LEVEL.decode("Ġworld")
    b' world'
    """

    __slots__ = ("byte_fallback", "byte_level", "replacements")

    def __init__(
        self, byte_level: bool, replacements: Sequence[tuple[str, str]], byte_fallback: bool
    ) -> None:
        self.byte_level = byte_level
        self.replacements = tuple(replacements)
        self.byte_fallback = byte_fallback

    def decode(self, piece: str) -> bytes:
        """Bytes of one token string under these rules; O(len(piece))."""
        if self.byte_level:
            return byte_level_decode(piece)
        if self.byte_fallback:
            value = byte_piece_value(piece)
            if value is not None:
                return bytes([value])
        for old, new in self.replacements:
            piece = piece.replace(old, new)
        return piece.encode("utf-8", "surrogatepass")

    def __repr__(self) -> str:
        return (
            f"PieceDecoder(byte_level={self.byte_level}, replacements={list(self.replacements)}, "
            f"byte_fallback={self.byte_fallback})"
        )


BYTE_LEVEL = PieceDecoder(True, (), False)
"""The decoder of byte-level BPE tokenizers."""


def sentencepiece_decoder(*, byte_fallback: bool = True) -> PieceDecoder:
    """The decoder of a SentencePiece vocabulary: ``▁`` is a space, ``<0xHH>`` a byte.

    Parameters
    ----------
    byte_fallback : bool, keyword-only
        Pieces ``<0xHH>`` are single bytes.

    Returns
    -------
    PieceDecoder

    Examples
    --------
    >>> sentencepiece_decoder().decode("▁the"), sentencepiece_decoder().decode("<0x41>")
    (b' the', b'A')
    >>> sentencepiece_decoder(byte_fallback=False).decode("<0x41>")
    b'<0x41>'
    """
    return PieceDecoder(False, ((SPACE_MARKER, " "),), byte_fallback)
