"""How a Hugging Face tokenizer.json writes its tokens: its pipeline read into a PieceDecoder.

The ``pre_tokenizer``, ``normalizer``, ``decoder`` and ``post_processor`` sections tell
whether token strings are byte-level (a ``ByteLevel`` step anywhere), SentencePiece-style
(a space marker such as ``▁``, set by ``Metaspace`` or ``Replace`` steps, and ``<0xHH>``
byte-fallback pieces), or written by a WordPiece/CTC decoder, which joins or drops text
between tokens so that a token has no fixed bytes (refused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.pieces import SPACE_MARKER, PieceDecoder

__all__ = ["piece_decoder", "pipeline_steps"]

_SEQUENCE_KEYS = ("pretokenizers", "decoders", "normalizers", "processors")


def pipeline_steps(section: object) -> list[dict[str, Any]]:
    """The steps of one pipeline section, ``Sequence`` nodes flattened, in order.

    Parameters
    ----------
    section : object
        A section of a parsed tokenizer.json (``None``, a step, or a ``Sequence``).

    Returns
    -------
    list of dict
        The non-``Sequence`` steps, depth first; anything that is not an object is skipped.

    Notes
    -----
    O(size of the section); iterative, so deep nesting cannot exhaust the stack.

    Examples
    --------
    >>> seq = {"type": "Sequence", "decoders": [{"type": "Replace"},
    ...        {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, 3]}, {"type": "Fuse"}]}
    >>> [step["type"] for step in pipeline_steps(seq)]
    ['Replace', 'ByteFallback', 'Fuse']
    >>> pipeline_steps(None)
    []
    """
    out: list[dict[str, Any]] = []
    stack: list[object] = [section]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") != "Sequence":
            out.append(node)
            continue
        children: list[object] = []
        for key in _SEQUENCE_KEYS:
            items = node.get(key)
            if isinstance(items, list):
                children.extend(items)
        stack.extend(reversed(children))
    return out


def _string_pattern(step: Mapping[str, Any]) -> str | None:
    """The literal pattern of a ``Replace``/``Split`` step (None for a regex or a malformed one)."""
    pattern = step.get("pattern")
    if isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
        return str(pattern["String"])
    return None


def _space_marker(step: Mapping[str, Any]) -> str | None:
    """The space marker of a ``Metaspace`` step (default ``▁``), or None if it is not a string."""
    repl = step.get("replacement", SPACE_MARKER)
    return repl if isinstance(repl, str) and repl else None


def _decoder_replacements(steps: list[dict[str, Any]], source: str) -> list[tuple[str, str]]:
    """Replacements the decoder applies to each token, up to the ``Fuse`` that joins them.

    Later steps act on the whole text (e.g. ``Strip`` of the first space) and do not
    change single tokens.
    """
    out: list[tuple[str, str]] = []
    for step in steps:
        kind = step.get("type")
        if kind == "Fuse":
            break
        if kind == "Replace":
            pattern = _string_pattern(step)
            content = step.get("content")
            if pattern is None or not isinstance(content, str):
                raise VocabularyError(f"{source}: decoder Replace with a regex pattern is not supported")
            out.append((pattern, content))
        elif kind == "Metaspace":
            marker = _space_marker(step)
            if marker is not None:
                out.append((marker, " "))
        elif kind == "BPEDecoder":
            suffix = step.get("suffix", "</w>")
            if isinstance(suffix, str) and suffix:
                out.append((suffix, " "))
    return out


def _encoder_replacements(pre: list[dict[str, Any]], norm: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The space marker inferred from the encoding side, for a tokenizer without a decoder."""
    out: list[tuple[str, str]] = []
    for step in pre:
        marker = _space_marker(step) if step.get("type") == "Metaspace" else None
        if marker is not None:
            out.append((marker, " "))
    for step in norm:
        if step.get("type") == "Replace" and _string_pattern(step) == " ":
            content = step.get("content")
            if isinstance(content, str) and content:
                out.append((content, " "))
    return out


def piece_decoder(data: Mapping[str, Any], model: Mapping[str, Any], source: str) -> PieceDecoder:
    """How the token strings of a tokenizer.json map to bytes.

    Parameters
    ----------
    data : mapping
        The parsed tokenizer.json.
    model : mapping
        Its ``model`` section (for ``byte_fallback``).
    source : str
        The file, for messages.

    Returns
    -------
    PieceDecoder
        Byte-level when any pipeline step is ``ByteLevel``; otherwise the per-token
        replacements of the decoder (or, without one, the space marker of the
        pre-tokenizer or normalizer).  ``byte_fallback`` is set when the model or a
        ``ByteFallback`` decoder step says so (a byte-level decoder does not use it; the
        reader of added tokens does).

    Raises
    ------
    VocabularyError
        For a WordPiece or CTC decoder, or a decoder ``Replace`` with a regex pattern.

    Notes
    -----
    O(size of the pipeline sections).

    Examples
    --------
    >>> piece_decoder({"decoder": {"type": "ByteLevel"}}, {}, "t").byte_level
    True
    >>> sp = piece_decoder({"decoder": {"type": "Metaspace"}}, {"byte_fallback": True}, "t")
    >>> sp.decode("▁a"), sp.decode("<0x41>")
    (b' a', b'A')
    """
    pre = pipeline_steps(data.get("pre_tokenizer"))
    dec = pipeline_steps(data.get("decoder"))
    norm = pipeline_steps(data.get("normalizer"))
    post = pipeline_steps(data.get("post_processor"))
    kinds = {str(c.get("type")) for c in (*pre, *dec, *post)}
    if "WordPiece" in kinds or "CTC" in kinds:
        raise VocabularyError(
            f"{source}: WordPiece/CTC decoders are not supported: they insert or drop text between tokens, "
            "so a token has no fixed byte string"
        )
    byte_fallback = model.get("byte_fallback") is True or any(c.get("type") == "ByteFallback" for c in dec)
    if "ByteLevel" in kinds:
        return PieceDecoder(True, (), byte_fallback)
    replacements = _decoder_replacements(dec, source) or _encoder_replacements(pre, norm)
    return PieceDecoder(False, replacements, byte_fallback)
