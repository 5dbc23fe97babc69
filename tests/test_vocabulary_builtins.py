"""Tests of the built-in vocabularies (quicktok-v1 and mistral-common).

Oracles: the packages' own tokenizers (quicktok encodings, sentencepiece on
mistral-common's model files, mistral-common's Tekkenizer): encoding a text and joining
our token bytes gives the text back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _vocab_samples import TEXTS, concat

from formalgram_cfgzip import Vocabulary, VocabularyError
from formalgram_cfgzip.vocabulary import BUILTIN_NAMES
from formalgram_cfgzip.vocabulary.builtins import builtin

# -- built-in vocabularies -------------------------------------------------------------

_EXPECTED = {
    # name: (tokenizer size, logit width, stop tokens, number of special tokens, holes)
    "llama3": (128256, 128256, {b"<|end_of_text|>", b"<|eot_id|>", b"<|reserved_special_token_4|>"}, 256, 0),
    "qwen3": (151669, 151936, {b"<|im_end|>", b"<|endoftext|>"}, 26, 0),
    "o200k_harmony": (201088, 201088, {b"<|return|>", b"<|call|>", b"<|endoftext|>"}, 1090, 0),
    "o200k_base": (200019, 200019, {b"<|endoftext|>"}, 2, 19),
    "cl100k_base": (100277, 100277, {b"<|endoftext|>"}, 5, 16),
}


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_quicktok_builtins(name: str) -> None:
    quicktok = pytest.importorskip("quicktok")
    enc = quicktok.get_encoding(name)
    v = Vocabulary.builtin(name)
    size, width, stops, n_special, holes = _EXPECTED[name]
    assert (v.size, v.logit_width, len(v.special_ids), v.tokens.count(None)) == (
        size,
        width,
        n_special,
        holes,
    )
    assert {v.tokens[i] for i in v.stop_ids} == stops
    assert v.stop_ids <= v.special_ids
    assert v.name == name
    for text in TEXTS:
        assert concat(v, enc.encode(text)) == text.encode(), text
    for i in v.special_ids:
        assert enc.is_special_token(i)
    assert Vocabulary.builtin(name) is v  # cached
    assert Vocabulary.load(name) is v


@pytest.mark.parametrize(
    ("name", "filename", "size"),
    [
        ("mistral", "mistral_instruct_tokenizer_240323.model.v3", 32768),
        ("mistral-v1", "tokenizer.model.v1", 32000),
    ],
)
def test_mistral_builtin(name: str, filename: str, size: int) -> None:
    mistral_common = pytest.importorskip("mistral_common")
    spm = pytest.importorskip("sentencepiece")
    path = Path(mistral_common.__file__).parent / "data" / filename
    sp = spm.SentencePieceProcessor(model_file=str(path))
    v = Vocabulary.builtin(name)
    assert v.size == sp.vocab_size() == size
    assert v.stop_ids == frozenset({sp.eos_id()})
    assert {i for i in range(v.size) if sp.is_control(i) or sp.is_unknown(i)} == set(v.special_ids)
    for text in TEXTS:
        assert concat(v, sp.encode(text)) == b" " + text.encode()
    for i in range(v.size):
        if sp.is_byte(i):
            assert v.tokens[i] == bytes([int(sp.id_to_piece(i)[3:5], 16)])
        elif i not in v.special_ids:
            assert v.tokens[i] == sp.id_to_piece(i).replace("▁", " ").encode()
    assert Vocabulary.load(path) == v and v.name == name


def test_builtin_names() -> None:
    assert {"llama3", "qwen3", "o200k_harmony", "o200k_base", "cl100k_base", "mistral"} <= set(BUILTIN_NAMES)
    with pytest.raises(VocabularyError, match="unknown built-in vocabulary 'gpt2'"):
        Vocabulary.builtin("gpt2")


def test_mistral_tekken_builtin() -> None:
    mistral_common = pytest.importorskip("mistral_common")
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    tk = Tekkenizer.from_file(path)
    v = Vocabulary.builtin("mistral-tekken")
    assert v.size == tk.n_words == 131072
    assert len(v.special_ids) == tk.num_special_tokens == 1000
    assert v.stop_ids == frozenset({tk.eos_id}) and v.tokens[tk.eos_id] == b"</s>"
    for text in TEXTS:
        assert concat(v, tk.encode(text, bos=False, eos=False)) == text.encode()
    assert Vocabulary.load(path, name="mistral-tekken") == v


@pytest.mark.parametrize(("name", "package"), [("cl100k_base", "quicktok"), ("mistral-v1", "mistral_common")])
def test_missing_package(monkeypatch: pytest.MonkeyPatch, name: str, package: str) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # makes "import package" fail
    with pytest.raises(VocabularyError, match=f"built-in vocabulary '{name}' needs the .* package"):
        builtin.__wrapped__(name)
