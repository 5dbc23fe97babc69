"""Token vocabularies: the :class:`Vocabulary` model and the readers of tokenizer formats.

Modules, in the order data flows through them:

- :mod:`~formalgram_cfgzip.vocabulary.pieces`: token strings -> bytes (the GPT-2 byte
  map, SentencePiece's ``▁`` and ``<0xHH>`` pieces);
- :mod:`~formalgram_cfgzip.vocabulary.loaders`: one reader per tokenizer format
  (``hf``, ``tiktoken``, ``sentencepiece``, ``tekken``, ``transformers``);
- :mod:`~formalgram_cfgzip.vocabulary.builtins`: the offline vocabularies by name;
- :mod:`~formalgram_cfgzip.vocabulary.sniff`: a file's format, and ``Vocabulary.load``;
- :mod:`~formalgram_cfgzip.vocabulary.model`: the immutable :class:`Vocabulary` and its
  fingerprint, whose ``from_*`` constructors hand over to the readers.
"""

from __future__ import annotations

from formalgram_cfgzip.vocabulary.builtins import BUILTIN_NAMES
from formalgram_cfgzip.vocabulary.loaders._common import COMMON_STOP_TOKENS
from formalgram_cfgzip.vocabulary.model import Vocabulary
from formalgram_cfgzip.vocabulary.pieces import byte_level_decode
from formalgram_cfgzip.vocabulary.pieces import gpt2_char_to_byte as _gpt2_char_to_byte  # noqa: F401

__all__ = ["BUILTIN_NAMES", "COMMON_STOP_TOKENS", "Vocabulary", "byte_level_decode"]
