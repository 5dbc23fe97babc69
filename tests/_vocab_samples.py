"""Texts and helpers shared by the vocabulary tests (the loaders' oracles are real tokenizers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from formalgram_cfgzip import VocabularyError
from formalgram_cfgzip.vocabulary import Vocabulary

TEXTS = [
    "Hello world",
    "Grüße aus Köln, 日本語のテキスト 🙂 and\n\ttabs  ",
    "def f(x):\n    return x**2  # ünïcödé ᚠᛇᚻ",
    'int main() { printf("%d\\n", 42); }',
    "  leading and trailing spaces  ",
]
TRAIN = [
    "Hello world, this is a test. Grüße aus Köln! 日本語のテキスト",
    "the quick brown fox jumps over the lazy dog\n\tend",
    "int x = 42; if (x > 3) { return x; } def f(y): return y",
] * 4


def concat(vocab: Vocabulary, ids: list[int]) -> bytes:
    """Our bytes of a token sequence (every id must be a token)."""
    parts = [vocab.tokens[i] for i in ids]
    assert all(p is not None for p in parts)
    return b"".join(p for p in parts if p is not None)


def assert_refused(path: Path, read: Callable[[Path], Vocabulary], message: str) -> None:
    """``read`` and ``Vocabulary.load`` both refuse the file with a VocabularyError naming it."""
    for reader in (read, Vocabulary.load):
        with pytest.raises(VocabularyError, match=message) as info:
            reader(path)
        assert str(path) in str(info.value)
