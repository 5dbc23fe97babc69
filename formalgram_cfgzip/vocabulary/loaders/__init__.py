"""Readers of tokenizer formats, one module each; every one returns a Vocabulary.

- :mod:`~formalgram_cfgzip.vocabulary.loaders.hf`: Hugging Face ``tokenizer.json``;
- :mod:`~formalgram_cfgzip.vocabulary.loaders.tiktoken`: ``.tiktoken`` rank files;
- :mod:`~formalgram_cfgzip.vocabulary.loaders.sentencepiece`: SentencePiece ``.model``
  files (through the protobuf reader :mod:`~formalgram_cfgzip.vocabulary.loaders._protobuf`);
- :mod:`~formalgram_cfgzip.vocabulary.loaders.tekken`: Mistral ``tekken.json`` (mistral-common);
- :mod:`~formalgram_cfgzip.vocabulary.loaders.transformers`: loaded ``transformers`` tokenizers.

What they share (options, file reading, id checks, stop tokens) is in
:mod:`~formalgram_cfgzip.vocabulary.loaders._common`.  Every reader refuses a bad file with
a :class:`~formalgram_cfgzip.errors.VocabularyError` naming it.
"""

from __future__ import annotations

__all__: list[str] = []
