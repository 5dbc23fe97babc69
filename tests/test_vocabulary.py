"""Tests of formalgram_cfgzip.vocabulary: the Vocabulary model and its loaders.

Oracles: the real tokenizers (quicktok encodings, Hugging Face ``tokenizers`` trained
offline here, sentencepiece for mistral-common's models): encoding a text with the
tokenizer and concatenating our token bytes must give the text back exactly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formalgram.errors import FormalgramError
from formalgram_cfgzip import CfgzipError, Vocabulary, VocabularyError
from formalgram_cfgzip.vocabulary import BUILTIN_NAMES, byte_level_decode

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


# -- the model ----------------------------------------------------------------------------


def test_basic_attributes() -> None:
    v = Vocabulary([b"a", b"bc", None, b"</s>"], special_ids=[3], stop_ids=[3], logit_width=8, name="t")
    assert v.tokens == (b"a", b"bc", None, b"</s>")
    assert v.special_ids == frozenset({3}) and v.stop_ids == frozenset({3})
    assert (v.size, len(v), v.logit_width, v.name) == (4, 4, 8, "t")
    assert v.token_bytes(1) == b"bc" and v.token_bytes(2) is None
    assert v.text_ids() == [0, 1]
    assert v.decode([1, 0]) == b"bca"
    assert v.max_token_length() == 2
    assert Vocabulary([b"x"]).logit_width == 1
    loose: list[object] = [bytearray(b"x"), memoryview(b"yz")]
    assert Vocabulary.from_bytes(loose).tokens == (b"x", b"yz")  # type: ignore[arg-type]


def test_immutable() -> None:
    v = Vocabulary([b"a"])
    with pytest.raises(AttributeError):
        v.tokens = (b"b",)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        v.logit_width = 3  # type: ignore[misc]
    assert isinstance(v.special_ids, frozenset)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": []}, "empty vocabulary"),
        ({"tokens": [None, None]}, "every id is a hole"),
        ({"tokens": [b"a"], "special_ids": [1]}, "special id 1 is out of range"),
        ({"tokens": [b"a"], "stop_ids": [-1]}, "stop id -1 is out of range"),
        ({"tokens": [b"a", None], "stop_ids": [1]}, "stop id 1 is a hole"),
        ({"tokens": [b"a", None], "special_ids": [1]}, "special id 1 is a hole"),
        ({"tokens": [b"a", b"b"], "logit_width": 1}, "logit_width 1 is smaller"),
        ({"tokens": [b"a", "b"]}, "token 1 must be bytes or None"),
        ({"tokens": b"abc"}, "not a single string"),
        ({"tokens": [b"a"], "stop_ids": [True]}, "ids must be integers"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], message: str) -> None:
    tokens = kwargs.pop("tokens")
    with pytest.raises(VocabularyError, match=message) as info:
        Vocabulary(tokens, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, CfgzipError) and isinstance(info.value, FormalgramError)


def test_token_bytes_and_decode_errors() -> None:
    v = Vocabulary([b"a", None])
    with pytest.raises(VocabularyError, match="out of range"):
        v.token_bytes(2)
    with pytest.raises(VocabularyError, match="hole"):
        v.decode([0, 1])


_token = st.one_of(st.none(), st.binary(max_size=4))


@st.composite
def _vocab_fields(draw: st.DrawFn) -> tuple[tuple[bytes | None, ...], frozenset[int], frozenset[int], int]:
    tokens = draw(st.lists(_token, min_size=1, max_size=6))
    if all(t is None for t in tokens):
        tokens[0] = b""
    real = [i for i, t in enumerate(tokens) if t is not None]
    special = draw(st.frozensets(st.sampled_from(real)))
    stop = draw(st.frozensets(st.sampled_from(real)))
    width = len(tokens) + draw(st.integers(0, 3))
    return tuple(tokens), special, stop, width


@settings(max_examples=150, deadline=None)
@given(_vocab_fields(), _vocab_fields())
def test_fingerprint_and_equality_match_fields(
    a: tuple[tuple[bytes | None, ...], frozenset[int], frozenset[int], int],
    b: tuple[tuple[bytes | None, ...], frozenset[int], frozenset[int], int],
) -> None:
    va = Vocabulary(a[0], special_ids=a[1], stop_ids=a[2], logit_width=a[3], name="x")
    vb = Vocabulary(b[0], special_ids=b[1], stop_ids=b[2], logit_width=b[3], name="y")
    same = a == b
    assert (va.fingerprint() == vb.fingerprint()) == same
    assert (va == vb) == same
    assert len(va.fingerprint()) == 64
    assert va.tokens == a[0] and va.special_ids == a[1] and va.stop_ids == a[2] and va.logit_width == a[3]


def test_fingerprint_separates_boundaries() -> None:
    # Concatenation must not collide: [b"ab"] vs [b"a", b"b"] vs [b"a", None, b"b"].
    prints = {
        Vocabulary([b"ab"]).fingerprint(),
        Vocabulary([b"a", b"b"]).fingerprint(),
        Vocabulary([b"a", None, b"b"]).fingerprint(),
        Vocabulary([b"a", b"", b"b"]).fingerprint(),
        Vocabulary([b"a", b"b"], logit_width=3).fingerprint(),
        Vocabulary([b"a", b"b"], special_ids=[1]).fingerprint(),
        Vocabulary([b"a", b"b"], stop_ids=[1]).fingerprint(),
    }
    assert len(prints) == 7


# -- GPT-2 byte map ---------------------------------------------------------------------


def test_byte_level_map_against_tokenizers() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    pre = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    samples = [chr(c) for c in range(1, 0x800)] + ["日", "🙂", "\U0010fffd", "\x00"]
    for ch in samples:
        (mapped, _), *_ = pre.pre_tokenize_str(ch)
        assert byte_level_decode(mapped) == ch.encode(), ch
    alphabet = set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    decoded = {byte_level_decode(c) for c in alphabet}
    assert decoded == {bytes([b]) for b in range(256)}


# -- Hugging Face tokenizer.json --------------------------------------------------------


def _train_byte_level(directory: Path) -> Path:
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAIN, trainer)
    tok.add_tokens([tk.AddedToken("a b\n", special=False), tk.AddedToken("<think>", special=False)])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


def _train_sentencepiece_like(directory: Path, style: str) -> Path:
    tk = pytest.importorskip("tokenizers")
    if style == "unigram":
        tok = tk.Tokenizer(tk.models.Unigram())
        trainer = tk.trainers.UnigramTrainer(
            vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>"
        )
    else:
        tok = tk.Tokenizer(tk.models.BPE(byte_fallback=True))
        trainer = tk.trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"])
    if style == "llama2":
        tok.normalizer = tk.normalizers.Sequence(
            [tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")]
        )
        tok.decoder = tk.decoders.Sequence(
            [
                tk.decoders.Replace("▁", " "),
                tk.decoders.ByteFallback(),
                tk.decoders.Fuse(),
                tk.decoders.Strip(" ", 1, 0),
            ]
        )
    else:
        tok.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False)
        tok.decoder = tk.decoders.Sequence([tk.decoders.ByteFallback(), tk.decoders.Metaspace()])
    tok.train_from_iterator(TRAIN, trainer)
    data = json.loads(tok.to_str())
    if style != "unigram":
        # Real SentencePiece vocabularies hold the 256 byte tokens <0x00>..<0xFF>.
        vocab: dict[str, int] = data["model"]["vocab"]
        pieces = sorted(vocab, key=vocab.__getitem__)
        specials, rest = pieces[:3], pieces[3:]
        ordered = specials + [f"<0x{b:02X}>" for b in range(256)] + rest
        data["model"]["vocab"] = {p: i for i, p in enumerate(ordered)}
        data["model"]["byte_fallback"] = True
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def byte_level_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train_byte_level(tmp_path_factory.mktemp("bl") / "tiny-bl")


def _concat(vocab: Vocabulary, ids: list[int]) -> bytes:
    parts = [vocab.tokens[i] for i in ids]
    assert all(p is not None for p in parts)
    return b"".join(p for p in parts if p is not None)


def test_byte_level_tokenizer_json(byte_level_json: Path) -> None:
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer.from_file(str(byte_level_json))
    v = Vocabulary.from_tokenizer_json(byte_level_json)
    assert v.size == tok.get_vocab_size(with_added_tokens=True)
    assert v.name == "tiny-bl"
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    assert v.special_ids == frozenset({eot, im_end})
    assert v.stop_ids == frozenset({eot, im_end})  # by common name, no config files
    for text in [*TEXTS, "xx a b\n yy <think>"]:
        assert _concat(v, tok.encode(text, add_special_tokens=False).ids) == text.encode()
    exact = 0
    for i in range(v.size):
        if i in v.special_ids:
            continue
        token = v.tokens[i]
        assert token is not None
        try:
            expected = tok.decode([i], skip_special_tokens=False).encode()
        except Exception:  # pragma: no cover - tokenizers never raises here
            continue
        if "\ufffd" not in tok.decode([i]):
            assert token == expected, (i, tok.id_to_token(i))
            exact += 1
    assert exact > 200


@pytest.mark.parametrize("style", ["llama2", "metaspace", "unigram"])
def test_sentencepiece_style_tokenizer_json(tmp_path: Path, style: str) -> None:
    tk = pytest.importorskip("tokenizers")
    path = _train_sentencepiece_like(tmp_path / style, style)
    tok = tk.Tokenizer.from_file(str(path))
    v = Vocabulary.from_tokenizer_json(path, name="sp")
    assert v.name == "sp"
    unk, bos, eos = (tok.token_to_id(t) for t in ("<unk>", "<s>", "</s>"))
    assert {unk, bos, eos} <= v.special_ids
    assert v.stop_ids == frozenset({eos})
    texts = TEXTS if style != "unigram" else [t for t in TEXTS if all(c in "".join(TRAIN) + " " for c in t)]
    assert texts
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert unk not in ids
        got = _concat(v, ids)
        # The tokenizer marks the start of the text with a space (prefix "▁"); Metaspace
        # does not add one when the text already starts with a space.
        prefix = b"" if style != "llama2" and text.startswith(" ") else b" "
        assert got == prefix + text.encode(), (style, text, got)
    if style != "unigram":
        for b in range(256):
            assert v.tokens[tok.token_to_id(f"<0x{b:02X}>")] == bytes([b])
    # Decoders treat the first token of a text apart (they drop its space marker), so
    # each token is decoded after an anchor token and the anchor's text is cut off.
    anchor = tok.token_to_id("e")
    head = tok.decode([anchor])
    assert head == "e"
    checked = 0
    for i in range(v.size):
        piece = tok.id_to_token(i)
        if i in v.special_ids or piece.startswith("<0x"):
            continue
        decoded = tok.decode([anchor, i])
        assert decoded.startswith(head)
        assert v.tokens[i] == decoded[len(head) :].encode(), (i, piece)
        checked += 1
    assert checked > 50


def test_stop_and_width_from_config_files(byte_level_json: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    target = folder / "tokenizer.json"
    target.write_bytes(byte_level_json.read_bytes())
    base = Vocabulary.from_tokenizer_json(target)
    eot = next(i for i in base.special_ids if base.tokens[i] == b"<|endoftext|>")
    im_end = next(i for i in base.special_ids if base.tokens[i] == b"<|im_end|>")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|im_end|>"}}))
    assert Vocabulary.from_tokenizer_json(target).stop_ids == frozenset({im_end})
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [eot, 10**6]}))
    (folder / "config.json").write_text(json.dumps({"vocab_size": base.size + 60}))
    v = Vocabulary.from_tokenizer_json(target)
    assert v.stop_ids == frozenset({eot, im_end})
    assert v.logit_width == base.size + 60
    v2 = Vocabulary.from_tokenizer_json(
        target, stop_tokens=["<think>"], stop_ids=[eot], logit_width=base.size
    )
    assert v2.stop_ids == frozenset({eot, next(i for i, t in enumerate(v2.tokens) if t == b"<think>")})
    assert v2.logit_width == base.size
    with pytest.raises(VocabularyError, match="stop token '<nope>' is not in the vocabulary"):
        Vocabulary.from_tokenizer_json(target, stop_tokens=["<nope>"])


def test_wordpiece_refused(tmp_path: Path) -> None:
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer(tk.models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = tk.pre_tokenizers.Whitespace()
    tok.decoder = tk.decoders.WordPiece()
    tok.train_from_iterator(TRAIN, tk.trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_tokenizer_json(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"   \n", "is empty"),
        (b'{"hello": [1, 2, 3]}', "not a Hugging Face tokenizer.json"),
        (b"[1, 2, 3]", "not a Hugging Face tokenizer.json"),
        (bytes(range(256)) * 4, "not valid UTF-8 JSON"),
        (b'{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}', "invalid token id -1"),
        (b'{"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}}', "beyond the supported"),
        (b'{"model": {"type": "BPE", "vocab": {}, "merges": []}}', "empty vocabulary"),
        (b'{"model": {"type": "Mystery", "vocab": {"a": 0}}}', "not supported"),
    ],
)
def test_not_a_tokenizer_json(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_tokenizer_json(path)
    with pytest.raises(VocabularyError):
        Vocabulary.load(path)


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="does not exist"):
        Vocabulary.from_tokenizer_json(tmp_path / "nothing.json")
    with pytest.raises(VocabularyError, match="is a directory"):
        Vocabulary.from_tokenizer_json(tmp_path)
    with pytest.raises(VocabularyError, match=r"holds no tokenizer\.json"):
        Vocabulary.load(tmp_path)
    with pytest.raises(VocabularyError, match="not an existing file or directory, nor a built-in"):
        Vocabulary.load("llama-17")


def test_junk_files_through_load(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 3)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path in (junk, empty):
        with pytest.raises(VocabularyError):
            Vocabulary.load(path)
    fake_model = tmp_path / "tokenizer.model"
    fake_model.write_bytes(b"\x0a\x05hello world")
    with pytest.raises(VocabularyError, match="not a SentencePiece model"):
        Vocabulary.load(fake_model)


# -- transformers ----------------------------------------------------------------------


def test_from_transformers_matches_tokenizer_json(byte_level_json: Path) -> None:
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(byte_level_json), eos_token="<|im_end|>")
    v = Vocabulary.from_transformers(fast, name="tf")
    ref = Vocabulary.from_tokenizer_json(byte_level_json)
    assert v.tokens == ref.tokens
    assert v.special_ids >= ref.special_ids
    assert v.stop_ids == frozenset({fast.eos_token_id})
    assert v.logit_width == len(fast)
    for text in TEXTS:
        assert _concat(v, fast.encode(text, add_special_tokens=False)) == text.encode()
    assert Vocabulary.from_transformers(fast, logit_width=len(fast) + 64).logit_width == len(fast) + 64
    with pytest.raises(VocabularyError, match="not a transformers tokenizer"):
        Vocabulary.from_transformers(object())


# -- tiktoken --------------------------------------------------------------------------


def test_from_tiktoken(tmp_path: Path) -> None:
    ranks = {0: b"a", 1: b"b", 2: b"ab", 4: b"\xff\x00", 5: b" the"}
    path = tmp_path / "tiny.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in ranks.items()))
    v = Vocabulary.from_tiktoken(path, {"<|endoftext|>": 7, "<|fim|>": 8})
    assert v.tokens == (b"a", b"b", b"ab", None, b"\xff\x00", b" the", None, b"<|endoftext|>", b"<|fim|>")
    assert v.special_ids == frozenset({7, 8}) and v.stop_ids == frozenset({7})
    assert v.name == "tiny"
    assert Vocabulary.from_tiktoken(path, stop_ids=[2], logit_width=16).stop_ids == frozenset({2})
    assert Vocabulary.load(path).tokens[:6] == v.tokens[:6]
    with pytest.raises(VocabularyError, match="reuses the id"):
        Vocabulary.from_tiktoken(path, {"<|x|>": 2})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"YQ== 0\nnot-base64!! 1\n", "line 2 is not"),
        (b"YQ== 0\nYg== 0\n", "rank 0 appears twice"),
        (b"YQ==\n", "line 1 is not"),
        ("caf\u00e9 1\n".encode(), "not ASCII"),
    ],
)
def test_bad_tiktoken(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.tiktoken"
    path.write_bytes(content)
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_tiktoken(path)


def test_tiktoken_file_of_a_real_vocabulary(tmp_path: Path) -> None:
    quicktok = pytest.importorskip("quicktok")
    enc = quicktok.get_encoding("cl100k_base")
    lines = []
    specials = {}
    for i in range(enc.n_vocab):
        try:
            tok = enc.decode_single_token_bytes(i)
        except KeyError:
            continue
        if enc.is_special_token(i):
            specials[tok.decode()] = i
        else:
            lines.append(f"{base64.b64encode(tok).decode()} {i}\n")
    path = tmp_path / "cl100k_base.tiktoken"
    path.write_text("".join(lines))
    v = Vocabulary.from_tiktoken(path, specials)
    for text in TEXTS:
        assert _concat(v, enc.encode(text)) == text.encode()
    assert v == Vocabulary.builtin("cl100k_base")


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
        assert _concat(v, enc.encode(text)) == text.encode(), text
    for i in v.special_ids:
        assert enc.is_special_token(i)
    assert Vocabulary.builtin(name) is v  # cached
    assert Vocabulary.load(name) is v


@pytest.mark.parametrize(("name", "filename"), [("mistral", "mistral_instruct_tokenizer_240323.model.v3")])
def test_mistral_builtin(name: str, filename: str) -> None:
    mistral_common = pytest.importorskip("mistral_common")
    spm = pytest.importorskip("sentencepiece")
    path = Path(mistral_common.__file__).parent / "data" / filename
    sp = spm.SentencePieceProcessor(model_file=str(path))
    v = Vocabulary.builtin(name)
    assert v.size == sp.vocab_size() == 32768
    assert v.stop_ids == frozenset({sp.eos_id()})
    assert {i for i in range(v.size) if sp.is_control(i) or sp.is_unknown(i)} == set(v.special_ids)
    for text in TEXTS:
        assert _concat(v, sp.encode(text)) == b" " + text.encode()
    for i in range(v.size):
        if sp.is_byte(i):
            assert v.tokens[i] == bytes([int(sp.id_to_piece(i)[3:5], 16)])
        elif i not in v.special_ids:
            assert v.tokens[i] == sp.id_to_piece(i).replace("▁", " ").encode()
    assert Vocabulary.load(path) == v


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
        assert _concat(v, tk.encode(text, bos=False, eos=False)) == text.encode()
    assert Vocabulary.load(path, name="mistral-tekken") == v


class _SlowByteLevelTokenizer:
    """Stands in for a slow GPT-2 style transformers tokenizer (get_vocab + byte_decoder)."""

    def __init__(self) -> None:
        self.vocab = {"a": 0, "Ġb": 1, "Ċ": 2, "<|endoftext|>": 3, "ÃŃ": 4}
        self.byte_decoder = {"a": 97}
        self.all_special_ids = [3]
        self.eos_token_id = 3
        self.added_tokens_decoder: dict[int, object] = {}
        self.name_or_path = "slow"

    def __len__(self) -> int:
        return 5

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)


def test_from_transformers_slow_path() -> None:
    v = Vocabulary.from_transformers(_SlowByteLevelTokenizer())
    assert v.tokens == (b"a", b" b", b"\n", b"<|endoftext|>", "í".encode())
    assert v.special_ids == frozenset({3}) and v.stop_ids == frozenset({3})
    assert v.name == "slow" and v.logit_width == 5


def test_byte_tokens_listed_as_special_stay_bytes(tmp_path: Path) -> None:
    data = {
        "added_tokens": [
            {"id": 0, "content": "<s>", "special": True},
            {"id": 1, "content": "<0x0A>", "special": True},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "model": {
            "type": "BPE",
            "byte_fallback": True,
            "vocab": {"<s>": 0, "<0x0A>": 1, "▁a": 2, "a▁▁": 3},
            "merges": [],
        },
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    v = Vocabulary.from_tokenizer_json(path)
    assert v.tokens == (b"<s>", b"\n", b" a", b"a  ")
    assert v.special_ids == frozenset({0})
    assert v.stop_ids == frozenset()


def test_pickle_for_worker_processes() -> None:
    import pickle

    v = Vocabulary([b"a", None, b"</s>"], special_ids=[2], stop_ids=[2], logit_width=5, name="n")
    w = pickle.loads(pickle.dumps(v))
    assert w == v and w.name == "n" and w.fingerprint() == v.fingerprint()


def test_numpy_ids_accepted() -> None:
    import numpy as np

    v = Vocabulary(
        [b"a", b"b"],
        special_ids=np.array([1]),
        stop_ids=[np.int64(1)],  # type: ignore[list-item]
        logit_width=np.int32(4),  # type: ignore[arg-type]
    )
    assert v.logit_width == 4 and type(v.logit_width) is int
    assert v.stop_ids == frozenset({1}) and all(type(i) is int for i in v.special_ids)
