r"""SentencePiece ``.model`` files -> Vocabulary (read directly; sentencepiece is not needed).

A ``.model`` file is a serialised ``ModelProto``: field 1 repeats the pieces (each a
message with the piece text in field 1 and its type in field 3) and field 2 holds the
trainer spec (``byte_fallback`` is its field 35).  SentencePiece decodes ``▁`` in a piece
as a space whatever its normalizer spec says (``escape_whitespaces`` only changes how text
is encoded), so the normalizer spec is not read.

Examples
--------
A model of four pieces, written by hand (length-delimited field = tag, length, payload):

>>> def message(number: int, payload: bytes) -> bytes:
...     return bytes([number << 3 | 2, len(payload)]) + payload
>>> def piece(text: str, kind: int) -> bytes:
...     return message(1, message(1, text.encode()) + bytes([3 << 3, kind]))
>>> raw = piece("<unk>", 2) + piece("</s>", 3) + piece("\u2581hi", 1) + piece("<0x0A>", 6)
>>> read_model(raw)
SentencePieceModel(pieces=[('<unk>', 2), ('</s>', 3), ('▁hi', 1), ('<0x0A>', 6)], byte_fallback=False)
>>> import tempfile
>>> from pathlib import Path
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = Path(tmp) / "tiny.model"
...     _ = path.write_bytes(raw)
...     vocab = load_sentencepiece(path, LoadOptions())
>>> vocab.tokens, sorted(vocab.special_ids), sorted(vocab.stop_ids)
((b'<unk>', b'</s>', b' hi', b'\n'), [0, 1], [1])
"""

from __future__ import annotations

import os
from typing import NamedTuple

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions, assemble, read_file_bytes
from formalgram_cfgzip.vocabulary.loaders._protobuf import WireFormatError, read_fields
from formalgram_cfgzip.vocabulary.model import Vocabulary
from formalgram_cfgzip.vocabulary.pieces import byte_piece_value, sentencepiece_decoder

__all__ = ["SentencePieceModel", "load_sentencepiece", "read_model"]

# SentencePiece.Type values.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class SentencePieceModel(NamedTuple):
    """What the vocabulary needs from a ``ModelProto``."""

    pieces: list[tuple[str, int]]
    """``(piece text, piece type)`` by id."""
    byte_fallback: bool
    """Trainer spec: unknown bytes are written as ``<0xHH>`` pieces."""


def _piece(payload: bytes) -> tuple[str, int]:
    text = ""
    kind = NORMAL
    for field, wire, value in read_fields(payload):
        if field == 1 and wire == 2 and isinstance(value, bytes):
            text = value.decode("utf-8")
        elif field == 3 and wire == 0 and isinstance(value, int):
            kind = value
    return text, kind


def _flag(payload: bytes, number: int, default: bool) -> bool:
    """The last value of varint field ``number`` of a message, as a bool (protobuf merges repeats)."""
    out = default
    for field, wire, value in read_fields(payload):
        if field == number and wire == 0:
            out = bool(value)
    return out


def read_model(raw: bytes) -> SentencePieceModel:
    """The pieces and the byte-fallback setting of a serialised SentencePiece ``ModelProto``.

    Parameters
    ----------
    raw : bytes
        The contents of a ``.model`` file.

    Returns
    -------
    SentencePieceModel

    Raises
    ------
    WireFormatError
        If the bytes are not a protobuf message.
    UnicodeDecodeError
        If a piece is not UTF-8.

    Notes
    -----
    O(len(raw)).  Fields this loader does not use are skipped.  See the module's
    Examples.
    """
    pieces: list[tuple[str, int]] = []
    byte_fallback = False
    for field, wire, value in read_fields(raw):
        if wire != 2 or not isinstance(value, bytes):
            continue
        if field == 1:
            pieces.append(_piece(value))
        elif field == 2:
            byte_fallback = _flag(value, 35, byte_fallback)
    return SentencePieceModel(pieces, byte_fallback)


def load_sentencepiece(path: str | os.PathLike[str], options: LoadOptions) -> Vocabulary:
    """Load a SentencePiece ``.model`` file.

    Parameters
    ----------
    path : path
        The file.
    options : LoadOptions
        Stop tokens, logit width and name (default: the file name).

    Returns
    -------
    Vocabulary
        Control and unknown pieces are special (their bytes are their text), unused
        pieces are holes, byte pieces ``<0xHH>`` are the byte ``HH`` (also normal pieces
        of that form when the model has byte fallback) and ``▁`` in other pieces is a
        space.  The stop token is ``</s>`` when it is a control piece.

    Raises
    ------
    VocabularyError
        If the file is missing or empty, is not a protobuf message, has a piece that is
        not UTF-8, an empty piece or no piece at all, or a byte piece that is not
        ``<0xHH>``.

    Notes
    -----
    O(file size).  See the module's Examples.
    """
    p, raw = read_file_bytes(path, "SentencePiece model")
    try:
        model = read_model(raw)
    except (WireFormatError, UnicodeDecodeError) as exc:
        raise VocabularyError(f"{str(p)!r} is not a SentencePiece model: {exc}") from None
    if not model.pieces or not all(text for text, _ in model.pieces):
        raise VocabularyError(f"{str(p)!r} is not a SentencePiece model: no pieces found")
    decoder = sentencepiece_decoder(byte_fallback=model.byte_fallback)
    tokens: list[bytes | None] = []
    special: list[int] = []
    by_content: dict[str, int] = {}
    for idx, (text, kind) in enumerate(model.pieces):
        by_content.setdefault(text, idx)
        if kind in (CONTROL, UNKNOWN):
            tokens.append(text.encode("utf-8"))
            special.append(idx)
        elif kind == UNUSED:
            tokens.append(None)
        elif kind == BYTE:
            value = byte_piece_value(text)
            if value is None:
                raise VocabularyError(f"{str(p)!r}: byte piece {idx} is {text!r}, not <0xNN>")
            tokens.append(bytes([value]))
        else:
            tokens.append(decoder.decode(text))
    eos = by_content.get("</s>")
    return assemble(
        tokens,
        special,
        by_content,
        options=options,
        configured_stops=[eos] if eos is not None and eos in special else None,
        logit_width=options.logit_width,
        default_name=p.name,
        source=str(p),
    )
