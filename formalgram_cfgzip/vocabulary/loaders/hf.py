"""Hugging Face ``tokenizer.json`` files -> Vocabulary.

Supported: byte-level BPE (GPT-2, Llama 3, Qwen), SentencePiece-style BPE with byte
fallback (Llama 2, Mistral) and Unigram models.  WordPiece and WordLevel models, and
WordPiece/CTC decoders, join or drop text between tokens, so a token has no fixed bytes:
they are refused.  Reading is one function per step: the model's kind
(:func:`model_kind`), its pieces (:func:`model_pieces`), how pieces map to bytes
(:func:`~formalgram_cfgzip.vocabulary.loaders._hf_pipeline.piece_decoder`), the added
tokens (:func:`added_tokens`), the token bytes (:func:`decode_tokens`), the stop ids
(:func:`configured_stops`) and the logit width (:func:`logit_width`).

Examples
--------
>>> data = {
...     "model": {"type": "BPE", "byte_fallback": True, "merges": [],
...               "vocab": {"<unk>": 0, "</s>": 1, "<0x0A>": 2, "\u2581a": 3, "b": 4}},
...     "decoder": {"type": "Metaspace"},
...     "added_tokens": [{"id": 1, "content": "</s>", "special": True}],
... }
>>> vocab = vocabulary_from_hf_data(data, source="t", options=LoadOptions(), default_name="t")
>>> vocab.tokens, sorted(vocab.special_ids), sorted(vocab.stop_ids)
((b'<unk>', b'</s>', b'\\n', b' a', b'b'), [1], [1])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions, assemble, check_id, read_file_bytes
from formalgram_cfgzip.vocabulary.loaders._hf_config import config_logit_width, config_stop_ids
from formalgram_cfgzip.vocabulary.loaders._hf_pipeline import piece_decoder
from formalgram_cfgzip.vocabulary.loaders.tekken import is_tekken_data, load_tekken
from formalgram_cfgzip.vocabulary.model import Vocabulary
from formalgram_cfgzip.vocabulary.pieces import PieceDecoder, byte_piece_value

__all__ = [
    "AddedTokens",
    "DecodedTokens",
    "added_tokens",
    "configured_stops",
    "decode_tokens",
    "load_tokenizer_json",
    "logit_width",
    "model_kind",
    "model_pieces",
    "vocabulary_from_hf_data",
]


def model_kind(model: Mapping[str, Any], source: str) -> str:
    """The kind of a tokenizer.json model: ``"BPE"`` or ``"Unigram"``.

    Parameters
    ----------
    model : mapping
        The ``model`` section.
    source : str
        The file, for messages.

    Returns
    -------
    str
        The ``type`` field, or when it is absent the kind its shape shows: a ``vocab``
        mapping with ``merges`` is BPE, a ``vocab`` list is Unigram.

    Raises
    ------
    VocabularyError
        For WordPiece and WordLevel models (also recognised by shape) and any other type.

    Examples
    --------
    >>> model_kind({"vocab": {"a": 0}, "merges": []}, "t"), model_kind({"vocab": [["a", 0.0]]}, "t")
    ('BPE', 'Unigram')
    >>> model_kind({"vocab": {"a": 0}, "continuing_subword_prefix": "##"}, "t")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: t: WordPiece tokenizers are not supported: their decoding joins tokens with spaces (and strips '##'), so a token has no fixed byte string
    """
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
    if kind not in ("BPE", "Unigram"):
        raise VocabularyError(f"{source}: tokenizer model type {kind!r} is not supported (BPE or Unigram)")
    return str(kind)


def model_pieces(model: Mapping[str, Any], kind: str, source: str) -> dict[int, str]:
    """The token strings of the model, by id.

    Parameters
    ----------
    model : mapping
        The ``model`` section.
    kind : str
        Its kind (:func:`model_kind`).
    source : str
        The file, for messages.

    Returns
    -------
    dict of int to str

    Raises
    ------
    VocabularyError
        If a BPE ``vocab`` is not a mapping of piece to id, a Unigram ``vocab`` is not a
        list of ``[piece, score]``, or an id is invalid (negative, not an int, too large).

    Examples
    --------
    >>> model_pieces({"vocab": {"a": 0, "b": 2}}, "BPE", "t")
    {0: 'a', 2: 'b'}
    >>> model_pieces({"vocab": [["<unk>", 0.0], ["a", -1.5]]}, "Unigram", "t")
    {0: '<unk>', 1: 'a'}
    """
    vocab = model.get("vocab")
    pieces: dict[int, str] = {}
    if kind == "BPE":
        if not isinstance(vocab, dict):
            raise VocabularyError(f"{source}: BPE model without a vocab mapping")
        for piece, idx in vocab.items():
            pieces[check_id(idx, f"vocab entry {piece!r}", source)] = str(piece)
        return pieces
    if not isinstance(vocab, list):
        raise VocabularyError(f"{source}: Unigram model without a vocab list")
    for idx, entry in enumerate(vocab):
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
            raise VocabularyError(f"{source}: Unigram vocab entry {idx} is not [piece, score]")
        pieces[check_id(idx, "the Unigram vocab", source)] = entry[0]
    return pieces


class AddedTokens(NamedTuple):
    """The ``added_tokens`` of a tokenizer.json."""

    content: dict[int, str]
    """Text by id."""
    special: frozenset[int]
    """Ids of the added tokens marked ``special``."""


def added_tokens(data: Mapping[str, Any], source: str) -> AddedTokens:
    """The added tokens (text by id, and which are special).

    Parameters
    ----------
    data : mapping
        The parsed tokenizer.json.
    source : str
        The file, for messages.

    Returns
    -------
    AddedTokens

    Raises
    ------
    VocabularyError
        If ``added_tokens`` is not a list of objects with a string ``content`` and a
        valid ``id``.

    Examples
    --------
    >>> added_tokens({"added_tokens": [{"id": 5, "content": "<s>", "special": True}]}, "t")
    AddedTokens(content={5: '<s>'}, special=frozenset({5}))
    >>> added_tokens({"added_tokens": [{"id": "5", "content": "<s>"}]}, "t")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: t: added token '<s>' has an invalid token id '5'
    """
    raw = data.get("added_tokens") or []
    if not isinstance(raw, list):
        raise VocabularyError(f"{source}: 'added_tokens' is not a list")
    content: dict[int, str] = {}
    special: set[int] = set()
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise VocabularyError(f"{source}: malformed added token {entry!r}")
        idx = check_id(entry.get("id"), f"added token {entry['content']!r}", source)
        content[idx] = entry["content"]
        if entry.get("special") is True:
            special.add(idx)
    return AddedTokens(content, frozenset(special))


class DecodedTokens(NamedTuple):
    """Token bytes by id, with the text -> id map and the special ids."""

    tokens: list[bytes | None]
    by_content: dict[str, int]
    special: set[int]


def decode_tokens(
    pieces: Mapping[int, str], added: AddedTokens, decoder: PieceDecoder, source: str
) -> DecodedTokens:
    """The bytes of every token: model pieces, then added tokens over them.

    Parameters
    ----------
    pieces : mapping of int to str
        The model's pieces (:func:`model_pieces`).
    added : AddedTokens
        The added tokens (:func:`added_tokens`).
    decoder : PieceDecoder
        How pieces map to bytes.
    source : str
        The file, for messages.

    Returns
    -------
    DecodedTokens
        Ids neither piece nor added token are holes.  A special added token's bytes are its
        text (a label); other added tokens go through the decoder, as Hugging Face does.
        Byte pieces ``<0xHH>`` listed as special added tokens (some conversions do this)
        stay text bytes and are not special, as the model's decoder treats them.

    Raises
    ------
    VocabularyError
        If there is no token at all.

    Examples
    --------
    >>> from formalgram_cfgzip.vocabulary.pieces import sentencepiece_decoder
    >>> added = AddedTokens({0: "<s>", 1: "<0x0A>"}, frozenset({0, 1}))
    >>> decode_tokens({0: "<s>", 1: "<0x0A>", 2: "\u2581a"}, added, sentencepiece_decoder(), "t")
    DecodedTokens(tokens=[b'<s>', b'\\n', b' a'], by_content={'<s>': 0, '<0x0A>': 1, '▁a': 2}, special={0})
    """
    ids = set(pieces) | set(added.content)
    if not ids:
        raise VocabularyError(f"{source}: empty vocabulary")
    tokens: list[bytes | None] = [None] * (max(ids) + 1)
    by_content: dict[str, int] = {}
    special = set(added.special)
    for idx, piece in pieces.items():
        tokens[idx] = decoder.decode(piece)
        by_content.setdefault(piece, idx)
    for idx, content in added.content.items():
        if decoder.byte_fallback and idx in pieces and byte_piece_value(content) is not None:
            special.discard(idx)
            tokens[idx] = decoder.decode(content)
        elif idx in special:
            tokens[idx] = content.encode("utf-8", "surrogatepass")
        else:
            tokens[idx] = decoder.decode(content)
        by_content[content] = idx
    return DecodedTokens(tokens, by_content, special)


def _unknown_id(
    model: Mapping[str, Any], kind: str, pieces: Mapping[int, str], by_content: Mapping[str, int]
) -> int | None:
    """The model's unknown token (``unk_token`` of BPE, ``unk_id`` of Unigram), if it is a token."""
    if kind == "BPE":
        unk = model.get("unk_token")
        return by_content.get(unk) if isinstance(unk, str) else None
    unk_id = model.get("unk_id")
    return unk_id if isinstance(unk_id, int) and not isinstance(unk_id, bool) and unk_id in pieces else None


def configured_stops(
    decoded: DecodedTokens, config_dir: Path | None, extra_stops: Iterable[int] | None
) -> list[int] | None:
    """The stop ids the tokenizer's own configuration names.

    Parameters
    ----------
    decoded : DecodedTokens
        The tokens (:func:`decode_tokens`).
    config_dir : Path or None
        The folder of the tokenizer.json, whose side files are read
        (:func:`~formalgram_cfgzip.vocabulary.loaders._hf_config.config_stop_ids`).
    extra_stops : iterable of int or None
        Ids named elsewhere (a transformers tokenizer's ``eos_token_id``), used when the
        side files name none; those on holes or past the tokenizer are dropped.

    Returns
    -------
    list of int or None
        None when nothing names a stop token.

    Examples
    --------
    >>> decoded = DecodedTokens([b"a", b"</s>"], {"a": 0, "</s>": 1}, {1})
    >>> configured_stops(decoded, None, [1, 7]), configured_stops(decoded, None, None)
    ([1], None)
    """
    found = config_stop_ids(config_dir, decoded.by_content) if config_dir is not None else None
    if found is None and extra_stops is not None:
        tokens = decoded.tokens
        found = [i for i in extra_stops if 0 <= i < len(tokens) and tokens[i] is not None] or None
    return found


def logit_width(options: LoadOptions, config_dir: Path | None, size: int, min_width: int = 0) -> int:
    """The logit width: the caller's, else the side ``config.json``'s, else the size.

    Parameters
    ----------
    options : LoadOptions
        ``logit_width`` wins when set.
    config_dir : Path or None
        The folder of the tokenizer.json; its ``config.json`` ``vocab_size`` counts when
        at least ``size``.
    size : int
        The number of token ids.
    min_width : int
        A lower bound for the default (a transformers tokenizer's ``len()``).

    Returns
    -------
    int

    Raises
    ------
    VocabularyError
        If ``config.json`` names an absurd width
        (:func:`~formalgram_cfgzip.vocabulary.loaders._hf_config.config_logit_width`).

    Examples
    --------
    >>> logit_width(LoadOptions(), None, 10), logit_width(LoadOptions(logit_width=64), None, 10)
    (10, 64)
    """
    if options.logit_width is not None:
        return options.logit_width
    found = config_logit_width(config_dir) if config_dir is not None else None
    if found is not None and found >= size:
        return found
    return max(size, min_width)


def vocabulary_from_hf_data(
    data: object,
    *,
    source: str,
    options: LoadOptions,
    default_name: str,
    config_dir: Path | None = None,
    extra_special: Iterable[int] = (),
    extra_stops: Iterable[int] | None = None,
    min_width: int = 0,
) -> Vocabulary:
    """Build a vocabulary from the parsed contents of a tokenizer.json.

    Parameters
    ----------
    data : object
        The parsed JSON.
    source : str
        What was read, for messages.
    options : LoadOptions
        The caller's stop tokens, logit width and name.
    default_name : str
        The name when ``options.name`` is not set.
    config_dir : Path, optional
        The folder whose side files name stop ids and the logit width.
    extra_special : iterable of int
        More special ids (a transformers tokenizer's ``all_special_ids``); those on holes
        or past the tokenizer are ignored.
    extra_stops : iterable of int, optional
        Stop ids used when the side files name none (see :func:`configured_stops`).
    min_width : int
        Lower bound of the default logit width.

    Returns
    -------
    Vocabulary
        The model's unknown token is special, as are the added tokens marked special.

    Raises
    ------
    VocabularyError
        If the data is not a tokenizer.json, or any step refuses it (see the module).

    Notes
    -----
    O(size of the data).  See the module's Examples.
    """
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise VocabularyError(f"{source} is not a Hugging Face tokenizer.json (no 'model' section)")
    model: dict[str, Any] = data["model"]
    kind = model_kind(model, source)
    pieces = model_pieces(model, kind, source)
    decoder = piece_decoder(data, model, source)
    decoded = decode_tokens(pieces, added_tokens(data, source), decoder, source)
    tokens = decoded.tokens
    special = decoded.special
    unknown = _unknown_id(model, kind, pieces, decoded.by_content)
    if unknown is not None:
        special.add(unknown)
    special.update(i for i in extra_special if 0 <= i < len(tokens) and tokens[i] is not None)
    return assemble(
        tokens,
        special,
        decoded.by_content,
        options=options,
        configured_stops=configured_stops(decoded, config_dir, extra_stops),
        logit_width=logit_width(options, config_dir, len(tokens), min_width),
        default_name=default_name,
        source=source,
    )


def load_tokenizer_json(path: str | os.PathLike[str], options: LoadOptions) -> Vocabulary:
    """Load a tokenizer.json file (or a Mistral tekken file given under that name).

    Parameters
    ----------
    path : path
        The file.  Its folder's side files (``config.json``, ``generation_config.json``,
        ``tokenizer_config.json``) supply stop ids and the logit width.
    options : LoadOptions
        Stop tokens, logit width and name (default: the folder's name).

    Returns
    -------
    Vocabulary

    Raises
    ------
    VocabularyError
        If the file is missing, empty, not UTF-8 JSON (or nested too deeply), or not a
        tokenizer this loader reads.

    Notes
    -----
    O(file size).
    """
    p, raw = read_file_bytes(path, "tokenizer.json")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise VocabularyError(f"{str(p)!r} is not a tokenizer.json: not valid UTF-8 JSON") from None
    if is_tekken_data(data):
        return load_tekken(p, options, data)
    return vocabulary_from_hf_data(
        data, source=str(p), options=options, default_name=p.parent.name or p.stem, config_dir=p.parent
    )
