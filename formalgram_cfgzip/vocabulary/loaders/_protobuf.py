"""A minimal reader of the protobuf wire format: the fields of one message, without a schema.

Enough to read SentencePiece ``.model`` files without the sentencepiece or protobuf
packages: varints, 64- and 32-bit fixed fields and length-delimited fields (strings,
bytes, nested messages); groups (wire types 3 and 4) are refused.
"""

from __future__ import annotations

__all__ = ["WireFormatError", "read_fields", "read_varint"]


class WireFormatError(ValueError):
    """The bytes are not a well-formed protobuf message (truncated, or a bad tag)."""


_FIXED_SIZE = {1: 8, 5: 4}


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a base-128 varint.

    Parameters
    ----------
    buf : bytes
        The message.
    pos : int
        Where the varint starts.

    Returns
    -------
    (int, int)
        The value and the position after it.

    Raises
    ------
    WireFormatError
        If the buffer ends inside the varint or it is longer than 10 bytes (64 bits).

    Examples
    --------
    >>> read_varint(b"\\x96\\x01", 0)
    (150, 2)
    >>> read_varint(b"\\x96", 0)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.vocabulary.loaders._protobuf.WireFormatError: truncated varint at byte 0
    """
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= len(buf):
            raise WireFormatError(f"truncated varint at byte {start}")
        if shift > 63:
            raise WireFormatError(f"varint at byte {start} is longer than 10 bytes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def read_fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """Every field of one protobuf message, in order.

    Parameters
    ----------
    buf : bytes
        The encoded message.

    Returns
    -------
    list of (int, int, int or bytes)
        ``(field number, wire type, value)``: an int for varint (0) and fixed (1, 5)
        fields, the raw payload for length-delimited ones (2), to be read again with this
        function when it is a nested message.

    Raises
    ------
    WireFormatError
        On a truncated field, a field number 0 or a wire type other than 0, 1, 2 and 5.

    Notes
    -----
    O(len(buf)); nested messages are not descended into.

    Examples
    --------
    >>> read_fields(b"\\x08\\x96\\x01\\x12\\x02hi")
    [(1, 0, 150), (2, 2, b'hi')]
    >>> read_fields(b"\\x12\\x05hi")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.vocabulary.loaders._protobuf.WireFormatError: truncated field 2 at byte 2
    """
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise WireFormatError(f"field number 0 at byte {pos}")
        value: int | bytes
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            if length > end - pos:
                raise WireFormatError(f"truncated field {field} at byte {pos}")
            value, pos = buf[pos : pos + length], pos + length
        elif wire in _FIXED_SIZE:
            size = _FIXED_SIZE[wire]
            if size > end - pos:
                raise WireFormatError(f"truncated field {field} at byte {pos}")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise WireFormatError(f"unsupported wire type {wire} (field {field})")
        out.append((field, wire, value))
    return out
