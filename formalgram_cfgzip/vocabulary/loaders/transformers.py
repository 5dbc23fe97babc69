"""Loaded ``transformers`` tokenizer objects -> Vocabulary (the package itself is not imported).

A fast tokenizer is read through its ``tokenizer.json`` serialisation (the rules of
:mod:`~formalgram_cfgzip.vocabulary.loaders.hf`); a slow byte-level (GPT-2 style, with a
``byte_decoder``) or SentencePiece (with an ``sp_model``) tokenizer through
``get_vocab()`` and ``added_tokens_decoder``.  ``all_special_ids`` are special, and the stop
id defaults to ``eos_token_id``.

Examples
--------
Any object with the attributes of a slow tokenizer will do:

>>> class SlowTokenizer:
...     byte_decoder = {}
...     all_special_ids = [2]
...     eos_token_id = 2
...     name_or_path = "slow"
...     def __len__(self):
...         return 3
...     def get_vocab(self):
...         return {"a": 0, "\u0120b": 1, "<|endoftext|>": 2}
>>> vocab = load_transformers(SlowTokenizer(), LoadOptions())
>>> vocab.tokens, sorted(vocab.stop_ids), vocab.name
((b'a', b' b', b'<|endoftext|>'), [2], 'slow')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import MAX_TOKEN_ID, LoadOptions, assemble, check_id
from formalgram_cfgzip.vocabulary.loaders.hf import vocabulary_from_hf_data
from formalgram_cfgzip.vocabulary.model import Vocabulary
from formalgram_cfgzip.vocabulary.pieces import BYTE_LEVEL, PieceDecoder, sentencepiece_decoder

__all__ = ["load_transformers"]


class _Described(NamedTuple):
    """What every tokenizer object tells about itself."""

    label: str
    source: str
    length: int
    special_ids: list[int]
    eos_ids: list[int] | None


def _describe(tok: Any, options: LoadOptions) -> _Described:
    kind = type(tok).__name__
    label = options.label(str(getattr(tok, "name_or_path", "") or ""))
    source = f"transformers tokenizer {label!r}"
    try:
        length = len(tok)
        special_ids = [int(i) for i in (getattr(tok, "all_special_ids", None) or [])]
    except (TypeError, ValueError):
        raise VocabularyError(f"{kind} is not a transformers tokenizer") from None
    if length > MAX_TOKEN_ID:
        raise VocabularyError(f"{source}: {length} tokens, beyond the supported {MAX_TOKEN_ID}")
    eos = getattr(tok, "eos_token_id", None)
    eos_ids = [int(eos)] if isinstance(eos, int) and not isinstance(eos, bool) else None
    return _Described(label, source, length, special_ids, eos_ids)


def _slow_decoder(tok: Any) -> PieceDecoder:
    """Byte-level for a GPT-2 style tokenizer, SentencePiece rules for one with an ``sp_model``."""
    if isinstance(getattr(tok, "byte_decoder", None), dict):
        return BYTE_LEVEL
    if getattr(tok, "sp_model", None) is not None:
        return sentencepiece_decoder()
    raise VocabularyError(
        f"{type(tok).__name__}: only byte-level BPE and SentencePiece tokenizers are supported"
    )


def _slow_vocabulary(tok: Any, about: _Described, options: LoadOptions) -> Vocabulary:
    """A slow (pure Python) tokenizer, rebuilt from ``get_vocab()``."""
    get_vocab = getattr(tok, "get_vocab", None)
    if not callable(get_vocab):
        raise VocabularyError(f"{type(tok).__name__} is not a transformers tokenizer (no get_vocab)")
    decoder = _slow_decoder(tok)
    source = about.source
    vocab: Mapping[str, object] = get_vocab()
    pieces = {str(piece): check_id(idx, f"token {piece!r}", source) for piece, idx in vocab.items()}
    added: dict[int, Any] = {
        check_id(idx, "added_tokens_decoder", source): entry
        for idx, entry in dict(getattr(tok, "added_tokens_decoder", None) or {}).items()
    }
    size = max([about.length, *(i + 1 for i in pieces.values()), *(i + 1 for i in added)])
    tokens: list[bytes | None] = [None] * size
    by_content: dict[str, int] = {}
    special = set(about.special_ids)
    for piece, idx in pieces.items():
        by_content[piece] = idx
        tokens[idx] = piece.encode("utf-8", "surrogatepass") if idx in special else decoder.decode(piece)
    for idx, entry in added.items():
        content = str(getattr(entry, "content", entry))
        if getattr(entry, "special", False):
            special.add(idx)
            tokens[idx] = content.encode("utf-8", "surrogatepass")
        by_content[content] = idx
    return assemble(
        tokens,
        [i for i in special if 0 <= i < size and tokens[i] is not None],
        by_content,
        options=options,
        configured_stops=about.eos_ids,
        logit_width=options.logit_width if options.logit_width is not None else size,
        default_name=about.label,
        source=source,
    )


def load_transformers(tokenizer: object, options: LoadOptions) -> Vocabulary:
    """Build a vocabulary from a loaded ``transformers`` tokenizer.

    Parameters
    ----------
    tokenizer : object
        A ``PreTrainedTokenizerFast`` or a slow byte-level or SentencePiece tokenizer.
    options : LoadOptions
        Stop tokens (default: ``eos_token_id``), logit width (default: ``len(tokenizer)``;
        pass the model config's ``vocab_size`` when it is larger) and name (default:
        ``name_or_path``).

    Returns
    -------
    Vocabulary

    Raises
    ------
    VocabularyError
        For an object that is not a supported tokenizer, a fast tokenizer whose
        serialisation is not a supported tokenizer.json, or invalid token ids.

    Notes
    -----
    O(vocabulary size).  See the module's Examples.
    """
    tok: Any = tokenizer
    about = _describe(tok, options)
    to_str = getattr(getattr(tok, "backend_tokenizer", None), "to_str", None)
    if not callable(to_str):
        return _slow_vocabulary(tok, about, options)
    try:
        data = json.loads(str(to_str()))
    except (ValueError, RecursionError):
        raise VocabularyError(f"{about.source}: the backend did not serialise to tokenizer.json") from None
    return vocabulary_from_hf_data(
        data,
        source=about.source,
        options=options,
        default_name=about.label,
        extra_special=about.special_ids,
        extra_stops=about.eos_ids,
        min_width=about.length,
    )
