"""The built-in offline vocabularies: names -> Vocabulary, from quicktok-v1 and mistral-common.

``llama3``, ``qwen3``, ``o200k_harmony``, ``o200k_base`` and ``cl100k_base`` come from the
quicktok-v1 package, with the models' stop tokens and logit widths; ``mistral`` (Mistral 7B
v0.3, 32768 tokens) and ``mistral-v1`` (32000 tokens) are SentencePiece byte-fallback
vocabularies and ``mistral-tekken`` (Mistral NeMo, 131072 tokens) a byte-level one, all
shipped in mistral-common's data folder.  Both packages are the ``vocabs`` extra.
"""

from __future__ import annotations

import functools
from pathlib import Path

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
from formalgram_cfgzip.vocabulary.loaders.sentencepiece import load_sentencepiece
from formalgram_cfgzip.vocabulary.loaders.tekken import load_tekken
from formalgram_cfgzip.vocabulary.model import Vocabulary

__all__ = ["BUILTIN_NAMES", "builtin"]

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

# name -> file in mistral-common's data folder: SentencePiece byte-fallback models, and a
# tekken (byte-level, tiktoken-style) file of Mistral NeMo.
_MISTRAL_BUILTINS: dict[str, str] = {
    "mistral": "mistral_instruct_tokenizer_240323.model.v3",
    "mistral-v1": "tokenizer.model.v1",
    "mistral-tekken": "tekken_240911.json",
}

BUILTIN_NAMES: tuple[str, ...] = (*_QUICKTOK_BUILTINS, *_MISTRAL_BUILTINS)
"""The names :func:`builtin` knows."""


def _missing(name: str, package: str) -> VocabularyError:
    return VocabularyError(
        f"built-in vocabulary {name!r} needs the {package} package (pip install 'formalgram[vocabs]')"
    )


def _quicktok(name: str) -> Vocabulary:
    encoding, stop_names, extra_stops, width = _QUICKTOK_BUILTINS[name]
    try:
        import quicktok
    except ImportError:
        raise _missing(name, "quicktok-v1") from None
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


def _mistral(name: str) -> Vocabulary:
    try:
        import mistral_common
    except ImportError:
        raise _missing(name, "mistral-common") from None
    path = Path(str(mistral_common.__file__)).parent / "data" / _MISTRAL_BUILTINS[name]
    if not path.is_file():
        raise VocabularyError(f"built-in vocabulary {name!r}: {path} is missing from mistral-common")
    options = LoadOptions(name=name)
    if path.suffix == ".json":
        return load_tekken(path, options, check=False)  # mistral-common's own file
    return load_sentencepiece(path, options)


@functools.lru_cache(maxsize=8)
def builtin(name: str) -> Vocabulary:
    """One of the offline vocabularies, by name (cached).

    Parameters
    ----------
    name : str
        One of :data:`BUILTIN_NAMES`.

    Returns
    -------
    Vocabulary
        The same object for the same name (up to 8 are kept).

    Raises
    ------
    VocabularyError
        For an unknown name, or when the package holding the vocabulary is missing.

    Notes
    -----
    The first call reads the tokenizer: O(vocabulary size), a second or so for the
    largest.

    Examples
    --------
    >>> vocab = builtin("cl100k_base")
    >>> vocab.size, sorted(vocab.stop_ids), vocab.token_bytes(15339)
    (100277, [100257], b'hello')
    >>> builtin("gpt-17")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: unknown built-in vocabulary 'gpt-17'; known: llama3, qwen3, o200k_harmony, o200k_base, cl100k_base, mistral, mistral-v1, mistral-tekken
    """
    if name in _QUICKTOK_BUILTINS:
        return _quicktok(name)
    if name in _MISTRAL_BUILTINS:
        return _mistral(name)
    raise VocabularyError(f"unknown built-in vocabulary {name!r}; known: {', '.join(BUILTIN_NAMES)}")
