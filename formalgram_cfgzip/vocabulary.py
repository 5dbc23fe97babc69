"""Token vocabularies: token id -> exact bytes, plus special, stop and padding ids.

A :class:`Vocabulary` is the tokenizer-side input of the compression: for every token id
the exact byte string the token stands for (``None`` for an unused id, a *hole*), which
ids are special (control tokens such as ``<|eot_id|>`` that never match grammar text),
which ids end generation (stop tokens), and the width of the model's logit vector, which
may exceed the tokenizer's size (ids past the tokenizer are padding and never valid).

Loaders turn the common tokenizer formats into this one model; they all decode token
strings back to the bytes the tokenizer emits, so that the grammar sees exactly what the
model writes.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import operator
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, final

from formalgram_cfgzip.errors import VocabularyError

__all__ = ["BUILTIN_NAMES", "COMMON_STOP_TOKENS", "Vocabulary", "byte_level_decode"]

_FINGERPRINT_TAG = b"formalgram-vocabulary-v1\x00"


def _check_ids(ids: Iterable[int], what: str, tokens: tuple[bytes | None, ...]) -> frozenset[int]:
    out: set[int] = set()
    size = len(tokens)
    for raw in ids:
        try:
            if isinstance(raw, bool):
                raise TypeError
            i = operator.index(raw)  # accepts numpy integers too
        except TypeError:
            raise VocabularyError(f"{what} ids must be integers, got {raw!r}") from None
        if i < 0 or i >= size:
            raise VocabularyError(
                f"{what} id {i} is out of range: the vocabulary has {size} tokens (ids 0-{size - 1})"
            )
        if tokens[i] is None:
            raise VocabularyError(f"{what} id {i} is a hole (no token has this id)")
        out.add(i)
    return frozenset(out)


@final
class Vocabulary:
    """An immutable token vocabulary: token id -> exact bytes.

    Parameters
    ----------
    tokens : sequence of bytes or None
        ``tokens[i]`` is the byte string of token ``i``; ``None`` marks a hole (an id that no
        token uses; never valid).  ``bytearray``/``memoryview`` entries are copied to ``bytes``.
    special_ids : iterable of int, keyword-only
        Control tokens; they never match grammar text (their stored bytes are only a label).
    stop_ids : iterable of int, keyword-only
        Tokens that end generation (usually special as well).
    logit_width : int or None, keyword-only
        Length of the model's logit vector, ``>= len(tokens)``; default ``len(tokens)``.
        Ids in ``[len(tokens), logit_width)`` are padding and never valid.
    name : str, keyword-only
        A label for messages and reports; not part of :meth:`fingerprint`.

    Raises
    ------
    VocabularyError
        If the vocabulary is empty or has no token at all, an entry is not bytes or None,
        a special or stop id is out of range or a hole, or ``logit_width < len(tokens)``.

    Notes
    -----
    Construction is O(total token bytes).  Equality and hashing compare everything but
    ``name``.

    Examples
    --------
    >>> v = Vocabulary([b"a", b"bc", None, b"</s>"], special_ids=[3], stop_ids=[3], logit_width=8)
    >>> v.size, v.logit_width, v.token_bytes(1)
    (4, 8, b'bc')
    >>> sorted(v.text_ids())
    [0, 1]
    """

    __slots__ = ("_fingerprint", "_logit_width", "_name", "_special_ids", "_stop_ids", "_tokens")

    def __init__(
        self,
        tokens: Sequence[bytes | None],
        *,
        special_ids: Iterable[int] = (),
        stop_ids: Iterable[int] = (),
        logit_width: int | None = None,
        name: str = "",
    ) -> None:
        if isinstance(tokens, (bytes, bytearray, str)):
            raise VocabularyError("tokens must be a sequence of byte strings, not a single string")
        converted: list[bytes | None] = []
        for i, tok in enumerate(tokens):
            if tok is None or type(tok) is bytes:
                converted.append(tok)
            elif isinstance(tok, (bytes, bytearray, memoryview)):
                converted.append(bytes(tok))
            else:
                raise VocabularyError(f"token {i} must be bytes or None, got {type(tok).__name__}")
        if not converted:
            raise VocabularyError("empty vocabulary: at least one token is needed")
        if all(t is None for t in converted):
            raise VocabularyError(f"vocabulary of {len(converted)} ids has no token (every id is a hole)")
        toks = tuple(converted)
        width = len(toks)
        if logit_width is not None:
            try:
                if isinstance(logit_width, bool):
                    raise TypeError
                width = operator.index(logit_width)
            except TypeError:
                raise VocabularyError(f"logit_width must be an integer, got {logit_width!r}") from None
            if width < len(toks):
                raise VocabularyError(
                    f"logit_width {width} is smaller than the number of token ids ({len(toks)})"
                )
        self._tokens: tuple[bytes | None, ...] = toks
        self._special_ids: frozenset[int] = _check_ids(special_ids, "special", toks)
        self._stop_ids: frozenset[int] = _check_ids(stop_ids, "stop", toks)
        self._logit_width: int = width
        self._name: str = str(name)
        self._fingerprint: str = ""

    # -- alternate constructors ---------------------------------------------------------
    @classmethod
    def from_bytes(
        cls,
        tokens: Sequence[bytes | None],
        *,
        special_ids: Iterable[int] = (),
        stop_ids: Iterable[int] = (),
        logit_width: int | None = None,
        name: str = "",
    ) -> Vocabulary:
        """Same as the constructor (a list of byte strings indexed by token id)."""
        return cls(tokens, special_ids=special_ids, stop_ids=stop_ids, logit_width=logit_width, name=name)

    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str],
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a Hugging Face ``tokenizer.json`` (byte-level BPE, or SentencePiece-style BPE/Unigram).

        Parameters
        ----------
        path : path
            The ``tokenizer.json`` file.
        stop_tokens, stop_ids : optional
            Stop tokens by text and/or id; when either is given it replaces detection.
            Otherwise the stop ids are read from sibling ``generation_config.json`` /
            ``config.json`` (``eos_token_id``) and ``tokenizer_config.json``
            (``eos_token``), and failing those from :data:`COMMON_STOP_TOKENS` by name.
        logit_width : int, optional
            Default: ``vocab_size`` of a sibling ``config.json`` when present, else the size.
        name : str, optional
            Default: the name of the folder holding the file.

        Returns
        -------
        Vocabulary
            Byte-level tokens are decoded through the GPT-2 byte map; SentencePiece-style
            tokens have the space marker (``▁`` or the ``Metaspace``/``Replace`` setting)
            turned into a space and ``<0xNN>`` byte-fallback tokens into the byte ``NN``.
            Added tokens marked ``special`` are special ids (their bytes are their text,
            a label only), as is the model's unknown token.

        Raises
        ------
        VocabularyError
            If the file is missing, empty, not JSON, not a tokenizer, a WordPiece or
            WordLevel tokenizer (no fixed bytes per token), or a stop token is unknown.

        Notes
        -----
        Per-token bytes ignore decoder steps that act on the whole text (a ``Strip`` after
        ``Fuse`` that removes the leading space of the first token).  O(vocabulary bytes).

        Examples
        --------
        >>> Vocabulary.from_tokenizer_json("tokenizer.json")  # doctest: +SKIP
        """
        return _load_tokenizer_json(
            path, stop_tokens=stop_tokens, stop_ids=stop_ids, logit_width=logit_width, name=name
        )

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, int] | None = None,
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a ``.tiktoken`` file (one ``<base64 token> <rank>`` per line; rank = id).

        Parameters
        ----------
        path : path
            The ``.tiktoken`` file.
        special_tokens : mapping of str to int, optional
            Special tokens (text -> id); their ids must not be ranks of the file.
        stop_tokens, stop_ids, logit_width, name : optional
            As for :meth:`from_tokenizer_json`; by default the stop tokens are the special
            tokens named in :data:`COMMON_STOP_TOKENS`.

        Returns
        -------
        Vocabulary
            Ids missing from the file and the special tokens are holes.

        Raises
        ------
        VocabularyError
            If the file is missing, empty, not ASCII, has a malformed line or a repeated
            rank, or a special id collides with a rank.

        Notes
        -----
        O(file size).
        """
        return _load_tiktoken(
            path,
            dict(special_tokens or {}),
            stop_tokens=stop_tokens,
            stop_ids=stop_ids,
            logit_width=logit_width,
            name=name,
        )

    @classmethod
    def from_sentencepiece(
        cls,
        path: str | os.PathLike[str],
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a SentencePiece ``.model`` file (read directly; the sentencepiece package is not needed).

        Control and unknown pieces are special, unused pieces are holes, byte pieces
        ``<0xNN>`` are the byte ``NN``, and ``▁`` in other pieces is a space.  The stop token
        is ``</s>`` when it is a control piece.  Raises VocabularyError on a file that is
        not a SentencePiece model.  O(file size).
        """
        return _load_sentencepiece(
            path, stop_tokens=stop_tokens, stop_ids=stop_ids, logit_width=logit_width, name=name
        )

    @classmethod
    def from_transformers(
        cls,
        tokenizer: object,
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Build a vocabulary from a loaded ``transformers`` tokenizer.

        A fast tokenizer is read through its ``tokenizer.json`` serialisation (same rules
        as :meth:`from_tokenizer_json`); a slow byte-level or SentencePiece tokenizer
        through ``get_vocab()``.  ``all_special_ids`` are special; the stop id defaults
        to ``eos_token_id``.  The logit width defaults to ``len(tokenizer)`` (pass the
        model config's ``vocab_size`` when it is larger).  Raises VocabularyError for an
        object that is not a supported tokenizer.
        """
        return _load_transformers(
            tokenizer, stop_tokens=stop_tokens, stop_ids=stop_ids, logit_width=logit_width, name=name
        )

    @classmethod
    def builtin(cls, name: str) -> Vocabulary:
        """One of the offline vocabularies (cached; see :data:`BUILTIN_NAMES`).

        ``llama3``, ``qwen3``, ``o200k_harmony``, ``o200k_base`` and ``cl100k_base`` come
        from the quicktok-v1 package, with the models' stop tokens and logit widths;
        ``mistral`` (Mistral 7B v0.3, 32768 tokens) and ``mistral-v1`` (32000 tokens) are
        SentencePiece byte-fallback vocabularies and ``mistral-tekken`` (Mistral NeMo,
        131072 tokens) a byte-level one, all shipped by mistral-common.  Raises
        VocabularyError for an unknown name or a missing package.
        """
        return _builtin(name)

    @classmethod
    def load(cls, spec: str | os.PathLike[str], **options: Any) -> Vocabulary:
        """Load a vocabulary from a CLI-style spec.

        ``spec`` is a path to a ``tokenizer.json`` (or a folder holding one), a
        ``.tiktoken`` file, a SentencePiece ``.model`` file, or a built-in name.
        ``options`` (``stop_tokens``, ``stop_ids``, ``logit_width``, ``name``) are passed to
        the file loaders.  Raises VocabularyError for anything else.

        >>> Vocabulary.load("no-such-tokenizer")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        formalgram_cfgzip.errors.VocabularyError: no tokenizer 'no-such-tokenizer': ...
        """
        allowed = {"stop_tokens", "stop_ids", "logit_width", "name"}
        unknown = set(options) - allowed
        if unknown:
            raise TypeError(f"unexpected options: {', '.join(sorted(unknown))}")
        kw = {key: options.get(key) for key in sorted(allowed)}
        return _load_spec(spec, **kw)

    # -- attributes ---------------------------------------------------------------------
    @property
    def tokens(self) -> tuple[bytes | None, ...]:
        """Byte string of every token id (``None`` for holes)."""
        return self._tokens

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of control tokens; they never match grammar text."""
        return self._special_ids

    @property
    def stop_ids(self) -> frozenset[int]:
        """Ids of tokens that end generation."""
        return self._stop_ids

    @property
    def logit_width(self) -> int:
        """Length of the logit vector (``>= size``; the excess ids are padding)."""
        return self._logit_width

    @property
    def size(self) -> int:
        """Number of token ids, holes included (``len(tokens)``)."""
        return len(self._tokens)

    @property
    def name(self) -> str:
        """Label of the vocabulary (not part of the fingerprint)."""
        return self._name

    def __len__(self) -> int:
        return len(self._tokens)

    def token_bytes(self, token_id: int) -> bytes | None:
        """Bytes of ``token_id`` (``None`` for a hole); raises VocabularyError if out of range."""
        if token_id < 0 or token_id >= len(self._tokens):
            raise VocabularyError(
                f"token id {token_id} is out of range (vocabulary size {len(self._tokens)})"
            )
        return self._tokens[token_id]

    def text_ids(self) -> list[int]:
        """Ids of the tokens that can match grammar text: not holes, not special, ascending."""
        special = self._special_ids
        return [i for i, t in enumerate(self._tokens) if t is not None and i not in special]

    def decode(self, ids: Iterable[int]) -> bytes:
        """Concatenated bytes of ``ids``; raises VocabularyError on a hole or an out-of-range id."""
        parts: list[bytes] = []
        for i in ids:
            tok = self.token_bytes(i)
            if tok is None:
                raise VocabularyError(f"token id {i} is a hole")
            parts.append(tok)
        return b"".join(parts)

    def max_token_length(self) -> int:
        """Length in bytes of the longest text token (0 if there is none)."""
        special = self._special_ids
        best = 0
        for i, t in enumerate(self._tokens):
            if t is not None and i not in special and len(t) > best:
                best = len(t)
        return best

    # -- identity -----------------------------------------------------------------------
    def fingerprint(self) -> str:
        """SHA-256 (hex) of a canonical encoding of tokens, special/stop ids and logit width.

        The name is not included.  Computed once, O(total token bytes).
        """
        if self._fingerprint:
            return self._fingerprint
        h = hashlib.sha256()
        h.update(_FINGERPRINT_TAG)
        h.update(struct.pack("<QQ", len(self._tokens), self._logit_width))
        for tok in self._tokens:
            if tok is None:
                h.update(b"\x00")
            else:
                h.update(b"\x01" + struct.pack("<Q", len(tok)))
                h.update(tok)
        for ids in (self._special_ids, self._stop_ids):
            ordered = sorted(ids)
            h.update(struct.pack("<Q", len(ordered)))
            h.update(b"".join(struct.pack("<Q", i) for i in ordered))
        self._fingerprint = h.hexdigest()
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (
            self._tokens == other._tokens
            and self._special_ids == other._special_ids
            and self._stop_ids == other._stop_ids
            and self._logit_width == other._logit_width
        )

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        label = f"{self._name!r}, " if self._name else ""
        return (
            f"Vocabulary({label}size={len(self._tokens)}, logit_width={self._logit_width}, "
            f"special={len(self._special_ids)}, stop={sorted(self._stop_ids)[:8]})"
        )


# =========================================================================================
# Loaders.  Every loader maps a tokenizer's token strings back to the exact bytes the
# tokenizer emits for them, marks control tokens special and finds the stop tokens.
# =========================================================================================

# Stop tokens recognised by name when a tokenizer says nothing about its end of generation.
COMMON_STOP_TOKENS: tuple[str, ...] = (
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<eos>",
    "<|eos|>",
    "[EOS]",
)

# Refuse absurd ids (a crafted file must not make us allocate gigabytes).
_MAX_TOKEN_ID = 1 << 24

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _gpt2_char_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte -> printable character map used by byte-level BPE."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shown = set(printable)
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in shown:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_GPT2_CHAR_TO_BYTE: dict[str, int] = _gpt2_char_to_byte()


def byte_level_decode(piece: str) -> bytes:
    """Bytes of a byte-level BPE token string (GPT-2 byte map).

    As Hugging Face's ``ByteLevel`` decoder does, a string with a character outside the
    map (e.g. an added token written as plain text) stands for its own UTF-8 encoding.

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


@final
class _PieceDecoder:
    """How the token strings of one tokenizer map to bytes."""

    __slots__ = ("byte_fallback", "byte_level", "replacements")

    def __init__(
        self, byte_level: bool, replacements: Sequence[tuple[str, str]], byte_fallback: bool
    ) -> None:
        self.byte_level = byte_level
        self.replacements = tuple(replacements)
        self.byte_fallback = byte_fallback

    def decode(self, piece: str) -> bytes:
        if self.byte_level:
            return byte_level_decode(piece)
        if self.byte_fallback:
            m = _BYTE_PIECE.fullmatch(piece)
            if m is not None:
                return bytes([int(m.group(1), 16)])
        for old, new in self.replacements:
            piece = piece.replace(old, new)
        return piece.encode("utf-8", "surrogatepass")


def _flatten(section: object) -> list[dict[str, Any]]:
    """Components of a tokenizer.json pipeline section, ``Sequence`` nodes flattened."""
    if not isinstance(section, dict):
        return []
    if section.get("type") == "Sequence":
        out: list[dict[str, Any]] = []
        for key in ("pretokenizers", "decoders", "normalizers", "processors"):
            items = section.get(key)
            if isinstance(items, list):
                for item in items:
                    out.extend(_flatten(item))
        return out
    return [section]


def _string_pattern(step: Mapping[str, Any]) -> str | None:
    pattern = step.get("pattern")
    if isinstance(pattern, dict) and isinstance(pattern.get("String"), str):
        return str(pattern["String"])
    return None


def _hf_piece_decoder(data: Mapping[str, Any], model: Mapping[str, Any], source: str) -> _PieceDecoder:
    pre = _flatten(data.get("pre_tokenizer"))
    dec = _flatten(data.get("decoder"))
    norm = _flatten(data.get("normalizer"))
    post = _flatten(data.get("post_processor"))
    kinds = {str(c.get("type")) for c in (*pre, *dec, *post)}
    if "WordPiece" in kinds or "CTC" in kinds:
        raise VocabularyError(
            f"{source}: WordPiece/CTC decoders are not supported: they insert or drop text between tokens, "
            "so a token has no fixed byte string"
        )
    byte_fallback = model.get("byte_fallback") is True or any(c.get("type") == "ByteFallback" for c in dec)
    if "ByteLevel" in kinds:
        return _PieceDecoder(True, (), byte_fallback)
    replacements: list[tuple[str, str]] = []
    # Per-token decoder steps run until a Fuse joins the tokens; later steps act on the
    # whole text (e.g. Strip of the first space) and do not change single tokens.
    for step in dec:
        kind = step.get("type")
        if kind == "Fuse":
            break
        if kind == "Replace":
            pat = _string_pattern(step)
            content = step.get("content")
            if pat is None or not isinstance(content, str):
                raise VocabularyError(f"{source}: decoder Replace with a regex pattern is not supported")
            replacements.append((pat, content))
        elif kind == "Metaspace":
            repl = step.get("replacement", "\u2581")
            if isinstance(repl, str) and repl:
                replacements.append((repl, " "))
        elif kind == "BPEDecoder":
            suffix = step.get("suffix", "</w>")
            if isinstance(suffix, str) and suffix:
                replacements.append((suffix, " "))
    if not replacements:
        # No decoder information: infer the space marker from the encoding side.
        for step in pre:
            if step.get("type") == "Metaspace":
                repl = step.get("replacement", "\u2581")
                if isinstance(repl, str) and repl:
                    replacements.append((repl, " "))
        for step in norm:
            if step.get("type") == "Replace" and _string_pattern(step) == " ":
                content = step.get("content")
                if isinstance(content, str) and content:
                    replacements.append((content, " "))
    return _PieceDecoder(False, replacements, byte_fallback)


def _read_json_quiet(path: Path) -> object:
    """Contents of an optional JSON side file, or None when absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _token_content(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _config_stops(directory: Path, by_content: Mapping[str, int]) -> list[int] | None:
    """Stop ids named by ``generation_config.json``/``tokenizer_config.json``/``config.json``."""
    found: list[int] = []
    seen_any = False
    gen = _read_json_quiet(directory / "generation_config.json")
    cfg = _read_json_quiet(directory / "config.json")
    for blob in (gen, cfg):
        if isinstance(blob, dict) and "eos_token_id" in blob:
            value = blob["eos_token_id"]
            values = value if isinstance(value, list) else [value]
            for v in values:
                if isinstance(v, int) and not isinstance(v, bool):
                    found.append(v)
                    seen_any = True
    tok_cfg = _read_json_quiet(directory / "tokenizer_config.json")
    if isinstance(tok_cfg, dict):
        content = _token_content(tok_cfg.get("eos_token"))
        if content is not None and content in by_content:
            found.append(by_content[content])
            seen_any = True
    return found if seen_any else None


def _config_logit_width(directory: Path) -> int | None:
    cfg = _read_json_quiet(directory / "config.json")
    if not isinstance(cfg, dict):
        return None
    for blob in (cfg, cfg.get("text_config")):
        if isinstance(blob, dict):
            value = blob.get("vocab_size")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _resolve_stops(
    by_content: Mapping[str, int],
    tokens: Sequence[bytes | None],
    *,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    configured: Iterable[int] | None,
    source: str,
) -> list[int]:
    """Stop ids: the caller's choice if given, else the configuration's, else common names."""
    if stop_tokens is not None or stop_ids is not None:
        out: list[int] = []
        if isinstance(stop_tokens, str):
            stop_tokens = [stop_tokens]
        for text in stop_tokens or ():
            if text not in by_content:
                raise VocabularyError(f"{source}: stop token {text!r} is not in the vocabulary")
            out.append(by_content[text])
        out.extend(stop_ids or ())
        return out
    if configured is not None:
        # Configuration files may name ids past the tokenizer (padding): keep real tokens.
        return [i for i in configured if 0 <= i < len(tokens) and tokens[i] is not None]
    return [by_content[name] for name in COMMON_STOP_TOKENS if name in by_content]


def _check_id(value: object, what: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise VocabularyError(f"{source}: {what} has an invalid token id {value!r}")
    if value >= _MAX_TOKEN_ID:
        raise VocabularyError(f"{source}: {what} has token id {value}, beyond the supported {_MAX_TOKEN_ID}")
    return value


def _vocab_from_hf_data(
    data: object,
    *,
    source: str,
    config_dir: Path | None,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    logit_width: int | None,
    name: str,
    extra_special: Iterable[int] = (),
    extra_stops: Iterable[int] | None = None,
    min_width: int = 0,
) -> Vocabulary:
    """Build a vocabulary from the parsed contents of a Hugging Face tokenizer.json."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise VocabularyError(f"{source} is not a Hugging Face tokenizer.json (no 'model' section)")
    model: dict[str, Any] = data["model"]
    vocab = model.get("vocab")
    kind = model.get("type")
    if kind is None:
        if isinstance(vocab, dict) and "merges" in model:
            kind = "BPE"
        elif isinstance(vocab, list):
            kind = "Unigram"
        elif isinstance(vocab, dict) and "continuing_subword_prefix" in model:
            kind = "WordPiece"
        elif isinstance(vocab, dict):
            kind = "WordLevel"
    if kind in ("WordPiece", "WordLevel"):
        raise VocabularyError(
            f"{source}: {kind} tokenizers are not supported: their decoding joins tokens with spaces "
            "(and strips '##'), so a token has no fixed byte string"
        )
    pieces: dict[int, str] = {}
    if kind == "BPE":
        if not isinstance(vocab, dict):
            raise VocabularyError(f"{source}: BPE model without a vocab mapping")
        for piece, idx in vocab.items():
            pieces[_check_id(idx, f"vocab entry {piece!r}", source)] = str(piece)
    elif kind == "Unigram":
        if not isinstance(vocab, list):
            raise VocabularyError(f"{source}: Unigram model without a vocab list")
        for idx, entry in enumerate(vocab):
            if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
                raise VocabularyError(f"{source}: Unigram vocab entry {idx} is not [piece, score]")
            _check_id(idx, "the Unigram vocab", source)
            pieces[idx] = entry[0]
    else:
        raise VocabularyError(f"{source}: tokenizer model type {kind!r} is not supported (BPE or Unigram)")
    decoder = _hf_piece_decoder(data, model, source)

    added: dict[int, str] = {}
    special: set[int] = set()
    raw_added = data.get("added_tokens") or []
    if not isinstance(raw_added, list):
        raise VocabularyError(f"{source}: 'added_tokens' is not a list")
    for entry in raw_added:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise VocabularyError(f"{source}: malformed added token {entry!r}")
        idx = _check_id(entry.get("id"), f"added token {entry['content']!r}", source)
        added[idx] = entry["content"]
        if entry.get("special") is True:
            special.add(idx)
    unk = model.get("unk_token") if kind == "BPE" else None
    unk_id = model.get("unk_id") if kind == "Unigram" else None

    all_ids = set(pieces) | set(added)
    if not all_ids:
        raise VocabularyError(f"{source}: empty vocabulary")
    size = max(all_ids) + 1
    tokens: list[bytes | None] = [None] * size
    by_content: dict[str, int] = {}
    for idx, piece in pieces.items():
        tokens[idx] = decoder.decode(piece)
        by_content.setdefault(piece, idx)
    for idx, content in added.items():
        if decoder.byte_fallback and idx in pieces and _BYTE_PIECE.fullmatch(content) is not None:
            # Some conversions list the <0xNN> byte tokens as special added tokens; they
            # are text (one byte each), as the model's decoder treats them.
            special.discard(idx)
            tokens[idx] = decoder.decode(content)
        elif idx in special:
            tokens[idx] = content.encode("utf-8", "surrogatepass")
        else:
            # Hugging Face runs added tokens through the decoder too (ByteLevel maps
            # them when every character is in its alphabet).
            tokens[idx] = decoder.decode(content)
        by_content[content] = idx
    if isinstance(unk, str) and unk in by_content:
        special.add(by_content[unk])
    if isinstance(unk_id, int) and not isinstance(unk_id, bool) and 0 <= unk_id < size and unk_id in pieces:
        special.add(unk_id)
    special.update(i for i in extra_special if 0 <= i < size and tokens[i] is not None)

    configured: list[int] | None = None
    width = logit_width
    if config_dir is not None:
        configured = _config_stops(config_dir, by_content)
        if width is None:
            found = _config_logit_width(config_dir)
            if found is not None and found >= size:
                width = found
    if configured is None and extra_stops is not None:
        configured = [i for i in extra_stops if 0 <= i < size and tokens[i] is not None] or None
    stops = _resolve_stops(
        by_content, tokens, stop_tokens=stop_tokens, stop_ids=stop_ids, configured=configured, source=source
    )
    if width is None:
        width = max(size, min_width)
    return Vocabulary(tokens, special_ids=special, stop_ids=stops, logit_width=width, name=name)


def _read_file_bytes(path: str | os.PathLike[str], what: str) -> tuple[Path, bytes]:
    p = Path(path)
    if p.is_dir():
        raise VocabularyError(f"{str(p)!r} is a directory, not a {what} file")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise VocabularyError(f"{what} file {str(p)!r} does not exist") from None
    except OSError as exc:
        raise VocabularyError(f"cannot read {what} file {str(p)!r}: {exc}") from None
    if not raw.strip():
        raise VocabularyError(f"{what} file {str(p)!r} is empty")
    return p, raw


def _load_tokenizer_json(
    path: str | os.PathLike[str],
    *,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    logit_width: int | None,
    name: str | None,
) -> Vocabulary:
    p, raw = _read_file_bytes(path, "tokenizer.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise VocabularyError(f"{str(p)!r} is not a tokenizer.json: not valid UTF-8 JSON") from None
    tekken = isinstance(data, dict) and "model" not in data and isinstance(data.get("vocab"), list)
    if tekken and isinstance(data.get("config"), dict):
        return _load_tekken(p, stop_tokens=stop_tokens, stop_ids=stop_ids, logit_width=logit_width, name=name)
    label = name if name is not None else (p.parent.name or p.stem)
    return _vocab_from_hf_data(
        data,
        source=str(p),
        config_dir=p.parent,
        stop_tokens=stop_tokens,
        stop_ids=stop_ids,
        logit_width=logit_width,
        name=label,
    )


def _load_tiktoken(
    path: str | os.PathLike[str],
    special_tokens: Mapping[str, int],
    *,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    logit_width: int | None,
    name: str | None,
) -> Vocabulary:
    p, raw = _read_file_bytes(path, ".tiktoken")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise VocabularyError(f"{str(p)!r} is not a .tiktoken file: it is not ASCII text") from None
    ranks: dict[int, bytes] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            token = base64.b64decode(parts[0], validate=True)
            rank = int(parts[1])
        except (ValueError, binascii.Error):
            raise VocabularyError(
                f"{str(p)!r} is not a .tiktoken file: line {lineno} is not '<base64 token> <rank>'"
            ) from None
        rank = _check_id(rank, f"line {lineno}", str(p))
        if rank in ranks:
            raise VocabularyError(f"{str(p)!r}: rank {rank} appears twice (line {lineno})")
        ranks[rank] = token
    by_content: dict[str, int] = {}
    special: set[int] = set()
    for text_tok, idx in special_tokens.items():
        idx = _check_id(idx, f"special token {text_tok!r}", str(p))
        if idx in ranks:
            raise VocabularyError(
                f"{str(p)!r}: special token {text_tok!r} reuses the id {idx} of a normal token"
            )
        by_content[text_tok] = idx
        special.add(idx)
    all_ids = set(ranks) | special
    size = max(all_ids) + 1
    tokens: list[bytes | None] = [None] * size
    for idx, tok in ranks.items():
        tokens[idx] = tok
    for text_tok, idx in by_content.items():
        tokens[idx] = text_tok.encode("utf-8")
    stops = _resolve_stops(
        by_content, tokens, stop_tokens=stop_tokens, stop_ids=stop_ids, configured=None, source=str(p)
    )
    label = name if name is not None else p.stem
    return Vocabulary(tokens, special_ids=special, stop_ids=stops, logit_width=logit_width, name=label)


# -- SentencePiece model files (a minimal protobuf reader; no sentencepiece needed) -----

_SP_NORMAL, _SP_UNKNOWN, _SP_CONTROL, _SP_USER_DEFINED, _SP_UNUSED, _SP_BYTE = 1, 2, 3, 4, 5, 6


def _pb_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _pb_fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every field of one protobuf message."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _pb_varint(buf, pos)
        field, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _pb_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise ValueError("truncated fixed64")
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            length, pos = _pb_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ValueError("truncated fixed32")
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if field == 0:
            raise ValueError("field number 0")
        out.append((field, wire, value))
    return out


def _load_sentencepiece(
    path: str | os.PathLike[str],
    *,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    logit_width: int | None,
    name: str | None,
) -> Vocabulary:
    p, raw = _read_file_bytes(path, "SentencePiece model")
    pieces: list[tuple[str, int]] = []
    byte_fallback = False
    escape_whitespace = True
    try:
        for field, wire, value in _pb_fields(raw):
            if field == 1 and wire == 2 and isinstance(value, bytes):
                piece = ""
                kind = _SP_NORMAL
                for f2, w2, v2 in _pb_fields(value):
                    if f2 == 1 and w2 == 2 and isinstance(v2, bytes):
                        piece = v2.decode("utf-8")
                    elif f2 == 3 and w2 == 0 and isinstance(v2, int):
                        kind = v2
                pieces.append((piece, kind))
            elif field == 2 and wire == 2 and isinstance(value, bytes):
                for f2, w2, v2 in _pb_fields(value):
                    if f2 == 35 and w2 == 0:
                        byte_fallback = bool(v2)
            elif field == 3 and wire == 2 and isinstance(value, bytes):
                for f2, w2, v2 in _pb_fields(value):
                    if f2 == 5 and w2 == 0:
                        escape_whitespace = bool(v2)
    except (ValueError, UnicodeDecodeError) as exc:
        raise VocabularyError(f"{str(p)!r} is not a SentencePiece model: {exc}") from None
    if not pieces or not all(piece for piece, _ in pieces):
        raise VocabularyError(f"{str(p)!r} is not a SentencePiece model: no pieces found")
    tokens: list[bytes | None] = []
    special: list[int] = []
    by_content: dict[str, int] = {}
    for idx, (piece, kind) in enumerate(pieces):
        by_content.setdefault(piece, idx)
        if kind in (_SP_CONTROL, _SP_UNKNOWN):
            tokens.append(piece.encode("utf-8"))
            special.append(idx)
        elif kind == _SP_UNUSED:
            tokens.append(None)
        elif kind == _SP_BYTE or (byte_fallback and _BYTE_PIECE.fullmatch(piece)):
            m = _BYTE_PIECE.fullmatch(piece)
            if m is None:
                raise VocabularyError(f"{str(p)!r}: byte piece {idx} is {piece!r}, not <0xNN>")
            tokens.append(bytes([int(m.group(1), 16)]))
        else:
            text = piece.replace("\u2581", " ") if escape_whitespace else piece
            tokens.append(text.encode("utf-8"))
    configured = [by_content["</s>"]] if "</s>" in by_content and by_content["</s>"] in special else None
    stops = _resolve_stops(
        by_content, tokens, stop_tokens=stop_tokens, stop_ids=stop_ids, configured=configured, source=str(p)
    )
    label = name if name is not None else p.name
    return Vocabulary(tokens, special_ids=special, stop_ids=stops, logit_width=logit_width, name=label)


# -- built-in offline vocabularies ------------------------------------------------------

# name -> (quicktok encoding, stop tokens by name, extra stop ids, logit width or None).
# Llama 3.1+ uses id 128008 as <|eom_id|>; quicktok's Llama-3 table names it
# <|reserved_special_token_4|>, so it is listed by id.  Logit widths are the models'
# config.json vocab_size (Qwen3 pads its 151669 tokens to 151936 logits).
_QUICKTOK_BUILTINS: dict[str, tuple[str, tuple[str, ...], tuple[int, ...], int | None]] = {
    "llama3": ("llama3", ("<|end_of_text|>", "<|eot_id|>"), (128008,), 128256),
    "qwen3": ("qwen3", ("<|im_end|>", "<|endoftext|>"), (), 151936),
    "o200k_harmony": ("o200k_harmony", ("<|return|>", "<|call|>", "<|endoftext|>"), (), 201088),
    "o200k_base": ("o200k_base", ("<|endoftext|>",), (), None),
    "cl100k_base": ("cl100k_base", ("<|endoftext|>",), (), None),
}

# name -> file shipped in mistral-common's data folder: SentencePiece byte-fallback
# models, and a tekken (byte-level, tiktoken-style) file of Mistral NeMo.
_MISTRAL_BUILTINS: dict[str, str] = {
    "mistral": "mistral_instruct_tokenizer_240323.model.v3",
    "mistral-v1": "tokenizer.model.v1",
    "mistral-tekken": "tekken_240911.json",
}

BUILTIN_NAMES: tuple[str, ...] = (*_QUICKTOK_BUILTINS, *_MISTRAL_BUILTINS)


def _builtin_quicktok(name: str) -> Vocabulary:
    encoding, stop_names, extra_stops, width = _QUICKTOK_BUILTINS[name]
    try:
        import quicktok
    except ImportError:
        raise VocabularyError(
            f"built-in vocabulary {name!r} needs the quicktok-v1 package (pip install 'formalgram[vocabs]')"
        ) from None
    enc = quicktok.get_encoding(encoding)
    n = int(enc.n_vocab)
    tokens: list[bytes | None] = []
    decode_one = enc.decode_single_token_bytes
    for i in range(n):
        try:
            tokens.append(bytes(decode_one(i)))
        except KeyError:
            tokens.append(None)
    special = sorted({int(enc.encode_single_token(text)) for text in enc.special_tokens_set})
    stops = [int(enc.encode_single_token(s)) for s in stop_names]
    stops.extend(extra_stops)
    for i in stops:
        if i >= n or i not in special:
            raise VocabularyError(
                f"built-in {name!r}: stop id {i} is not a special token of quicktok {encoding!r}"
            )
    return Vocabulary(tokens, special_ids=special, stop_ids=stops, logit_width=width, name=name)


def _builtin_mistral(name: str) -> Vocabulary:
    try:
        import mistral_common
    except ImportError:
        raise VocabularyError(
            f"built-in vocabulary {name!r} needs the mistral-common package (pip install 'formalgram[vocabs]')"
        ) from None
    path = Path(str(mistral_common.__file__)).parent / "data" / _MISTRAL_BUILTINS[name]
    if not path.is_file():
        raise VocabularyError(f"built-in vocabulary {name!r}: {path} is missing from mistral-common")
    if path.suffix == ".json":
        return _load_tekken(path, stop_tokens=None, stop_ids=None, logit_width=None, name=name)
    return _load_sentencepiece(path, stop_tokens=None, stop_ids=None, logit_width=None, name=name)


def _load_tekken(
    path: Path,
    *,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    logit_width: int | None,
    name: str | None,
) -> Vocabulary:
    """A Mistral ``tekken.json``, read through mistral-common (which knows its special tokens)."""
    try:
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError:
        raise VocabularyError(
            f"{str(path)!r} is a Mistral tekken file; reading it needs mistral-common "
            "(pip install 'formalgram[vocabs]')"
        ) from None
    try:
        tk: Any = Tekkenizer.from_file(path)
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise VocabularyError(f"{str(path)!r} is not a valid tekken file: {exc}") from None
    n = int(tk.n_words)
    tokens: list[bytes | None] = []
    special: list[int] = []
    by_content: dict[str, int] = {}
    for i in range(n):
        if tk.is_special(i):
            label = str(tk.id_to_piece(i))
            tokens.append(label.encode("utf-8"))
            special.append(i)
            by_content[label] = i
        else:
            tokens.append(bytes(tk.id_to_byte_piece(i)))
    eos = int(tk.eos_id)
    stops = _resolve_stops(
        by_content, tokens, stop_tokens=stop_tokens, stop_ids=stop_ids, configured=[eos], source=str(path)
    )
    label = name if name is not None else path.stem
    return Vocabulary(tokens, special_ids=special, stop_ids=stops, logit_width=logit_width, name=label)


@functools.lru_cache(maxsize=8)
def _builtin(name: str) -> Vocabulary:
    if name in _QUICKTOK_BUILTINS:
        return _builtin_quicktok(name)
    if name in _MISTRAL_BUILTINS:
        return _builtin_mistral(name)
    raise VocabularyError(f"unknown built-in vocabulary {name!r}; known: {', '.join(BUILTIN_NAMES)}")


# -- transformers tokenizers ------------------------------------------------------------


def _load_transformers(
    tokenizer: object,
    *,
    stop_tokens: Iterable[str] | None,
    stop_ids: Iterable[int] | None,
    logit_width: int | None,
    name: str | None,
) -> Vocabulary:
    tok: Any = tokenizer
    label = name if name is not None else str(getattr(tok, "name_or_path", "") or "")
    try:
        length = len(tok)
    except TypeError:
        raise VocabularyError(f"{type(tokenizer).__name__} is not a transformers tokenizer") from None
    special_ids = [int(i) for i in (getattr(tok, "all_special_ids", None) or [])]
    eos = getattr(tok, "eos_token_id", None)
    eos_ids = [int(eos)] if isinstance(eos, int) and not isinstance(eos, bool) else None
    backend = getattr(tok, "backend_tokenizer", None)
    to_str = getattr(backend, "to_str", None)
    if callable(to_str):
        try:
            data = json.loads(str(to_str()))
        except ValueError:
            raise VocabularyError("the tokenizer's backend did not serialise to tokenizer.json") from None
        return _vocab_from_hf_data(
            data,
            source=f"transformers tokenizer {label!r}",
            config_dir=None,
            stop_tokens=stop_tokens,
            stop_ids=stop_ids,
            logit_width=logit_width,
            name=label,
            extra_special=special_ids,
            extra_stops=eos_ids,
            min_width=length,
        )
    # A slow (Python) tokenizer: rebuild from its vocabulary.
    get_vocab = getattr(tok, "get_vocab", None)
    if not callable(get_vocab):
        raise VocabularyError(f"{type(tokenizer).__name__} is not a transformers tokenizer (no get_vocab)")
    vocab: Mapping[str, int] = get_vocab()
    byte_decoder = getattr(tok, "byte_decoder", None)
    decoder: _PieceDecoder
    if isinstance(byte_decoder, dict):
        decoder = _PieceDecoder(True, (), False)
    elif getattr(tok, "sp_model", None) is not None:
        decoder = _PieceDecoder(False, (("\u2581", " "),), True)
    else:
        raise VocabularyError(
            f"{type(tokenizer).__name__}: only byte-level BPE and SentencePiece tokenizers are supported"
        )
    size = max([length, *(int(i) + 1 for i in vocab.values())])
    tokens: list[bytes | None] = [None] * size
    by_content: dict[str, int] = {}
    special_set = set(special_ids)
    added = getattr(tok, "added_tokens_decoder", None) or {}
    for piece, idx in vocab.items():
        idx = _check_id(idx, f"token {piece!r}", label)
        by_content[piece] = idx
        tokens[idx] = piece.encode("utf-8") if idx in special_set else decoder.decode(piece)
    for idx, added_tok in dict(added).items():
        content = str(getattr(added_tok, "content", added_tok))
        if getattr(added_tok, "special", False):
            special_set.add(int(idx))
            tokens[int(idx)] = content.encode("utf-8")
        by_content[content] = int(idx)
    stops = _resolve_stops(
        by_content, tokens, stop_tokens=stop_tokens, stop_ids=stop_ids, configured=eos_ids, source=label
    )
    return Vocabulary(
        tokens,
        special_ids=[i for i in special_set if i < size and tokens[i] is not None],
        stop_ids=stops,
        logit_width=logit_width if logit_width is not None else size,
        name=label,
    )


def _sniff(path: Path) -> str:
    """'json', 'tiktoken', 'sentencepiece' or '' from a file's name and first bytes."""
    suffix = path.suffix.lower()
    name = path.name.lower()
    if suffix == ".json":
        return "json"
    if suffix == ".tiktoken":
        return "tiktoken"
    if suffix == ".model" or ".model." in name:
        return "sentencepiece"
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return ""
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        return "json"
    first = stripped.split(b"\n", 1)[0].split()
    if len(first) == 2 and first[1].isdigit():
        return "tiktoken"
    if head[:1] == b"\x0a":
        return "sentencepiece"
    return ""


def _load_spec(spec: str | os.PathLike[str], **kw: Any) -> Vocabulary:
    text = os.fspath(spec)
    path = Path(text)
    if path.is_dir():
        candidate = path / "tokenizer.json"
        if candidate.is_file():
            return _load_tokenizer_json(candidate, **kw)
        raise VocabularyError(f"directory {text!r} holds no tokenizer.json")
    if path.is_file():
        if path.stat().st_size == 0:
            raise VocabularyError(f"tokenizer file {text!r} is empty")
        kind = _sniff(path)
        if kind == "json":
            return _load_tokenizer_json(path, **kw)
        if kind == "tiktoken":
            return _load_tiktoken(path, {}, **kw)
        if kind == "sentencepiece":
            return _load_sentencepiece(path, **kw)
        raise VocabularyError(
            f"{text!r} is not a tokenizer file (expected a tokenizer.json, a .tiktoken or a SentencePiece .model)"
        )
    if isinstance(spec, str) and spec in BUILTIN_NAMES:
        if any(v is not None for v in kw.values()):
            raise VocabularyError("options (stop tokens, logit width, name) cannot be given for a built-in")
        return _builtin(spec)
    raise VocabularyError(
        f"no tokenizer {text!r}: not an existing file or directory, nor a built-in name "
        f"({', '.join(BUILTIN_NAMES)})"
    )
