"""Tests of the Hugging Face readers: tokenizer.json files and loaded transformers tokenizers.

Oracles: Hugging Face ``tokenizers`` trained offline here (encoding a text and joining our
token bytes gives the text back; decoding each token alone gives its bytes) and
``transformers`` tokenizers built on them.  Bad input of every kind must give a
VocabularyError, checked on hand-written cases and on Hypothesis-generated JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _counted import checks_at_least, gave_up
from _vocab_samples import TEXTS, TRAIN, assert_refused, concat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram_cfgzip import Vocabulary, VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
from formalgram_cfgzip.vocabulary.loaders._hf_pipeline import pipeline_steps
from formalgram_cfgzip.vocabulary.loaders.hf import vocabulary_from_hf_data

# -- tokenizer.json ---------------------------------------------------------------------


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
        assert concat(v, tok.encode(text, add_special_tokens=False).ids) == text.encode()
    exact = 0
    for i in range(v.size):
        if i in v.special_ids:
            continue
        token = v.tokens[i]
        assert token is not None
        expected = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" not in expected:  # a token that is not a whole UTF-8 text decodes lossily
            assert token == expected.encode(), (i, tok.id_to_token(i))
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
        got = concat(v, ids)
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


@pytest.fixture
def model_folder(byte_level_json: Path, tmp_path: Path) -> Path:
    """A copy of the byte-level tokenizer.json alone in a folder named ``model``."""
    target = tmp_path / "model" / "tokenizer.json"
    target.parent.mkdir()
    target.write_bytes(byte_level_json.read_bytes())
    return target


def test_stop_and_width_from_config_files(model_folder: Path) -> None:
    target, folder = model_folder, model_folder.parent
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
        assert concat(v, fast.encode(text, add_special_tokens=False)) == text.encode()
    assert Vocabulary.from_transformers(fast, logit_width=len(fast) + 64).logit_width == len(fast) + 64
    with pytest.raises(VocabularyError, match="not a transformers tokenizer"):
        Vocabulary.from_transformers(object())


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


def test_slow_tokenizer_added_token_past_the_vocabulary() -> None:
    tok = _SlowByteLevelTokenizer()
    tok.added_tokens_decoder = {7: _Added("<|im_end|>", special=True), 1: _Added("Ġb", special=False)}
    v = Vocabulary.from_transformers(tok)
    assert v.tokens == (b"a", b" b", b"\n", b"<|endoftext|>", "í".encode(), None, None, b"<|im_end|>")
    assert v.special_ids == frozenset({3, 7}) and v.logit_width == 8
    assert v.stop_ids == frozenset({3})


# -- bad input ----------------------------------------------------------------------------

_BPE: dict[str, Any] = {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": []}, "no 'model' section"),
        ({"model": {**_BPE, "vocab": [["a", 0.0]]}}, "BPE model without a vocab mapping"),
        ({"model": {"type": "Unigram", "vocab": {"a": 0}}}, "Unigram model without a vocab list"),
        (
            {"model": {"type": "Unigram", "vocab": [[5, 0.0]]}},
            r"Unigram vocab entry 0 is not \[piece, score\]",
        ),
        ({"model": {"type": "Unigram", "vocab": ["a"]}}, r"Unigram vocab entry 0 is not"),
        ({"model": {"vocab": {"a": 0}}}, "WordLevel tokenizers are not supported"),
        ({"model": {**_BPE, "type": ["BPE"]}}, r"model type \['BPE'\] is not supported"),
        ({"model": {**_BPE, "vocab": {"a": 1.5}}}, "vocab entry 'a' has an invalid token id 1.5"),
        ({"model": {**_BPE, "vocab": {"a": True}}}, "invalid token id True"),
        ({"model": {**_BPE, "vocab": {"a": "0"}}}, "invalid token id '0'"),
        ({"model": {**_BPE, "vocab": {"a": 1 << 24}}}, "has token id 16777216, beyond the supported"),
        ({"model": _BPE, "added_tokens": "x"}, "'added_tokens' is not a list"),
        ({"model": _BPE, "added_tokens": [["<s>", 2]]}, "malformed added token"),
        ({"model": _BPE, "added_tokens": [{"id": 2}]}, "malformed added token"),
        ({"model": _BPE, "added_tokens": [{"id": -2, "content": "<s>"}]}, "'<s>' has an invalid token id -2"),
        ({"model": _BPE, "added_tokens": [{"id": None, "content": "<s>"}]}, "invalid token id None"),
        ({"model": _BPE, "added_tokens": [{"id": 10**30, "content": "<s>"}]}, "beyond the supported"),
        (
            {"model": _BPE, "decoder": {"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}},
            "decoder Replace with a regex pattern",
        ),
        ({"model": _BPE, "decoder": {"type": "Sequence", "decoders": [{"type": "CTC"}]}}, "WordPiece/CTC"),
    ],
)
def test_tokenizer_json_refused(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    assert_refused(path, Vocabulary.from_tokenizer_json, message)


def test_deeply_nested_json_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert_refused(path, Vocabulary.from_tokenizer_json, "not valid UTF-8 JSON")


def test_pipeline_nesting_needs_no_stack() -> None:
    node: dict[str, Any] = {"type": "Fuse"}
    for _ in range(100_000):
        node = {"type": "Sequence", "decoders": [node, {"type": "Strip"}]}
    steps = pipeline_steps(node)
    assert len(steps) == 100_001
    assert steps[0] == {"type": "Fuse"} and all(step == {"type": "Strip"} for step in steps[1:])


def test_bad_side_files(model_folder: Path) -> None:
    target, folder = model_folder, model_folder.parent
    base = Vocabulary.from_tokenizer_json(target)
    # Unreadable or ill-typed side files say nothing: the defaults stay.
    (folder / "config.json").write_text("[" * 100_000)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": ["x", True, None]}))
    (folder / "tokenizer_config.json").write_bytes(b"\xff\xfe not utf-8")
    assert Vocabulary.from_tokenizer_json(target) == base
    (folder / "config.json").write_text(json.dumps({"text_config": {"vocab_size": base.size + 8}}))
    assert Vocabulary.from_tokenizer_json(target).logit_width == base.size + 8
    (folder / "config.json").write_text(json.dumps({"vocab_size": 1 << 40}))
    with pytest.raises(
        VocabularyError, match=r"config\.json: vocab_size 1099511627776 is beyond the supported"
    ):
        Vocabulary.from_tokenizer_json(target)
    assert Vocabulary.from_tokenizer_json(target, logit_width=base.size).logit_width == base.size
    with pytest.raises(VocabularyError, match=r"tokenizer\.json: stop id -1 is out of range"):
        Vocabulary.from_tokenizer_json(target, stop_ids=[-1], logit_width=base.size)


# Hypothesis: tokenizer.json data of every shape gives a Vocabulary or a VocabularyError.

_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-3, 40)
    | st.sampled_from([1 << 24, 1 << 62])
    | st.text(max_size=6)
)
_json = st.recursive(
    _scalar | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_small = st.integers(0, 12)
_id = st.one_of(_small, _small, _small, _small, _scalar)  # mostly valid ids
_piece = st.text(alphabet="ab ▁Ġ<>0xA\u00ff", max_size=6) | st.sampled_from(["<0x0A>", "<0xff>", "▁", "</s>"])
_STEP_TYPES = [
    "ByteLevel",
    "Metaspace",
    "Replace",
    "ByteFallback",
    "Fuse",
    "Strip",
    "BPEDecoder",
    "WordPiece",
]
_step = st.fixed_dictionaries(
    {"type": st.sampled_from(_STEP_TYPES) | st.sampled_from(_STEP_TYPES) | _json},
    optional={
        "pattern": st.fixed_dictionaries({"String": _piece}) | _json,
        "content": _piece | _json,
        "replacement": _piece | _json,
        "suffix": _piece | _json,
    },
)
_section = st.recursive(
    st.none() | _step | _step | _json,
    lambda inner: st.fixed_dictionaries(
        {"type": st.just("Sequence")},
        optional={
            key: st.lists(inner, max_size=3) | _json for key in ("decoders", "pretokenizers", "normalizers")
        },
    ),
    max_leaves=6,
)
_bpe = st.fixed_dictionaries(
    {
        "type": st.just("BPE"),
        "vocab": st.dictionaries(_piece, _id, min_size=1, max_size=8),
        "merges": st.just([]),
    },
    optional={"byte_fallback": st.booleans() | _scalar, "unk_token": _piece | _scalar},
)
_unigram = st.fixed_dictionaries(
    {
        "type": st.just("Unigram"),
        "vocab": st.lists(st.one_of(*[st.tuples(_piece, st.floats(-9, 0)).map(list)] * 4, _json), max_size=8),
    },
    optional={"unk_id": _id, "byte_fallback": st.booleans()},
)
_other_model = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["BPE", "Unigram", "WordPiece", "WordLevel"]) | _json,
        "vocab": st.dictionaries(_piece, _id, max_size=4) | _json,
        "merges": st.just([]) | _json,
        "continuing_subword_prefix": st.just("##"),
    },
)
_added_entry = (
    st.fixed_dictionaries({"id": _id, "content": _piece}, optional={"special": st.booleans() | _scalar})
    | st.fixed_dictionaries({}, optional={"id": _scalar, "content": _piece | _scalar})
    | _json
)
_tokenizer = st.fixed_dictionaries(
    {"model": st.one_of(_bpe, _unigram, _bpe, _unigram, _bpe, _unigram, _other_model, _json)},
    optional={
        "added_tokens": st.lists(_added_entry, max_size=4) | _json,
        "decoder": _section,
        "pre_tokenizer": _section,
        "normalizer": _section,
    },
)


@checks_at_least(10)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tokenizer, st.lists(_scalar, max_size=3), st.none() | st.lists(st.text(max_size=4), max_size=2))
def test_any_tokenizer_json_data_is_read_or_refused(
    data: dict[str, Any], stop_ids: list[object], stop_tokens: list[str] | None
) -> None:
    options = LoadOptions(stop_tokens=stop_tokens, stop_ids=stop_ids or None)  # type: ignore[arg-type]
    try:
        vocab = vocabulary_from_hf_data(data, source="t.json", options=options, default_name="t")
    except VocabularyError as exc:
        assert str(exc).startswith("t.json")
        return gave_up()
    assert vocab.size >= 1 and vocab.logit_width >= vocab.size
    assert all(vocab.tokens[i] is not None for i in vocab.special_ids | vocab.stop_ids)


# -- transformers: bad objects -------------------------------------------------------------


class _Added:
    def __init__(self, content: str, *, special: bool) -> None:
        self.content = content
        self.special = special


class _Backend:
    def __init__(self, text: str) -> None:
        self.text = text

    def to_str(self) -> str:
        return self.text


def _tokenizer_with(**attributes: object) -> _SlowByteLevelTokenizer:
    tok = _SlowByteLevelTokenizer()
    for key, value in attributes.items():
        setattr(tok, key, value)
    return tok


class _Unsized:
    pass


class _HugeTokenizer(_SlowByteLevelTokenizer):
    def __len__(self) -> int:
        return 1 << 40


@pytest.mark.parametrize(
    ("tokenizer", "message"),
    [
        (_Unsized(), "_Unsized is not a transformers tokenizer"),
        (_tokenizer_with(all_special_ids=["x"]), "not a transformers tokenizer"),
        (_tokenizer_with(get_vocab=None), r"not a transformers tokenizer \(no get_vocab\)"),
        (_tokenizer_with(byte_decoder=None), "only byte-level BPE and SentencePiece"),
        (_tokenizer_with(vocab={"a": 1 << 40}), "token 'a' has token id 1099511627776, beyond the supported"),
        (_tokenizer_with(vocab={"a": -1}), "token 'a' has an invalid token id -1"),
        (_tokenizer_with(vocab={"a": "0"}), "invalid token id '0'"),
        (_tokenizer_with(added_tokens_decoder={-4: _Added("<x>", special=True)}), "invalid token id -4"),
        (_HugeTokenizer(), "1099511627776 tokens, beyond the supported"),
        (_tokenizer_with(backend_tokenizer=_Backend("{")), "did not serialise to tokenizer.json"),
        (
            _tokenizer_with(backend_tokenizer=_Backend(json.dumps({"model": {"type": "WordPiece"}}))),
            "transformers tokenizer 'slow': WordPiece tokenizers are not supported",
        ),
    ],
)
def test_transformers_refused(tokenizer: object, message: str) -> None:
    with pytest.raises(VocabularyError, match=message):
        Vocabulary.from_transformers(tokenizer)
