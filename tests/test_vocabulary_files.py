"""Tests of the file readers other than tokenizer.json: tiktoken, SentencePiece (and its
protobuf reader), Mistral tekken, and format sniffing through ``Vocabulary.load``.

Oracles: quicktok's cl100k_base (a tiktoken file written from it), sentencepiece models
trained offline here, mistral-common's Tekkenizer, and a protobuf encoder written in this
file.  Bad files of every kind must give a VocabularyError that names the file.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from _counted import checks_at_least, gave_up
from _vocab_samples import TEXTS, TRAIN, assert_refused, concat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram_cfgzip import Vocabulary, VocabularyError
from formalgram_cfgzip.vocabulary.loaders._protobuf import WireFormatError, read_fields
from formalgram_cfgzip.vocabulary.loaders.sentencepiece import read_model
from formalgram_cfgzip.vocabulary.loaders.tiktoken import read_ranks

# -- tiktoken ------------------------------------------------------------------------------


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
        assert concat(v, enc.encode(text)) == text.encode()
    assert v == Vocabulary.builtin("cl100k_base")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x1c\n\x1d \x0b\n", "no '<base64 token> <rank>' line"),
        (b"YQ== -1\n", "line 1 has an invalid token id -1"),
        (b"YQ== 99999999999\n", "line 1 has token id 99999999999, beyond the supported"),
        (b"YQ== 1 2\n", "line 1 is not"),
        (b"YQ== 0x1\n", "line 1 is not"),
        (b"\x00\x01\x02\n", "line 1 is not"),
    ],
)
def test_more_bad_tiktoken(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.tiktoken"
    path.write_bytes(content)
    assert_refused(path, Vocabulary.from_tiktoken, message)


def test_tiktoken_bad_options(tmp_path: Path) -> None:
    path = tmp_path / "tiny.tiktoken"
    path.write_text("YQ== 0\nYg== 1\n")
    for special, message in [
        ({"<x>": -1}, "special token '<x>' has an invalid token id -1"),
        ({"<x>": True}, "invalid token id True"),
        ({"<x>": 1 << 30}, "beyond the supported"),
    ]:
        with pytest.raises(VocabularyError, match=message):
            Vocabulary.from_tiktoken(path, special)
    with pytest.raises(VocabularyError, match=r"tiny\.tiktoken.*: stop id 5 is out of range"):
        Vocabulary.from_tiktoken(path, stop_ids=[5])
    with pytest.raises(VocabularyError, match=r"tiny\.tiktoken.*: logit_width 1 is smaller"):
        Vocabulary.from_tiktoken(path, logit_width=1)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="YQWg=+/ 0123456789-\n\t\x0b\x1c", max_size=40))
def test_any_tiktoken_text_is_read_or_refused(text: str) -> None:
    """Text of tiktoken's characters in any order: a VocabularyError, never another exception
    (well-formed files, which random text almost never is, are read below)."""
    with contextlib.suppress(VocabularyError):
        read_ranks(text, "t")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=6), st.integers(0, 10**6)),
        min_size=1,
        max_size=8,
        unique_by=lambda entry: entry[1],
    ),
    st.lists(st.sampled_from(["", " ", "\t"]), min_size=8, max_size=8),
)
def test_well_formed_tiktoken_text_is_read(entries: list[tuple[bytes, int]], blanks: list[str]) -> None:
    """Lines ``<base64> <rank>`` (unique ranks, blank lines between some) read back as written."""
    lines = [
        f"{base64.b64encode(token).decode()} {rank}\n{blank}"
        for (token, rank), blank in zip(entries, blanks[: len(entries)], strict=True)
    ]
    assert read_ranks("\n".join(lines), "t") == {rank: token for token, rank in entries}


# -- protobuf wire format ------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _encode(fields: list[tuple[int, int, int | bytes]]) -> bytes:
    """The protobuf encoding of fields (an encoder independent of the reader under test)."""
    out = bytearray()
    for number, wire, value in fields:
        out += _varint(number << 3 | wire)
        if wire == 0:
            assert isinstance(value, int)
            out += _varint(value)
        elif wire == 2:
            assert isinstance(value, bytes)
            out += _varint(len(value)) + value
        else:
            assert isinstance(value, int)
            out += value.to_bytes(8 if wire == 1 else 4, "little")
    return bytes(out)


_field = st.integers(1, (1 << 29) - 1).flatmap(
    lambda number: st.one_of(
        st.tuples(st.just(number), st.just(0), st.integers(0, (1 << 64) - 1)),
        st.tuples(st.just(number), st.just(1), st.integers(0, (1 << 64) - 1)),
        st.tuples(st.just(number), st.just(2), st.binary(max_size=20)),
        st.tuples(st.just(number), st.just(5), st.integers(0, (1 << 32) - 1)),
    )
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_field, min_size=1, max_size=6), st.data())
def test_protobuf_fields_round_trip_and_truncation(
    fields: list[tuple[int, int, int | bytes]], data: st.DataObject
) -> None:
    raw = _encode(fields)
    assert read_fields(raw) == fields
    # Cut inside the last field (a tag byte and at least one more): the reader must refuse,
    # not read past the end.
    last = len(_encode(fields[:-1]))
    cut = data.draw(st.integers(last + 1, len(raw) - 1))
    with pytest.raises(WireFormatError):
        read_fields(raw[:cut])


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x08" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\x0b", "unsupported wire type 3"),
        (b"\x0c", "unsupported wire type 4"),
        (b"\x02\x00", "field number 0"),
        (b"\x09\x01\x02", "truncated field 1"),
        (b"\x0a\xff\xff\xff\xff\x0f", "truncated field 1"),
    ],
)
def test_protobuf_refusals(raw: bytes, message: str) -> None:
    with pytest.raises(WireFormatError, match=message):
        read_fields(raw)


# -- SentencePiece -------------------------------------------------------------------------


def _message(number: int, payload: bytes) -> bytes:
    return _encode([(number, 2, payload)])


def _piece(text: bytes, kind: int) -> bytes:
    return _message(1, _encode([(1, 2, text), (2, 5, 0), (3, 0, kind)]))


def _train_sentencepiece(model_type: str) -> bytes:
    spm = pytest.importorskip("sentencepiece")
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAIN * 5),
        model_writer=out,
        model_type=model_type,
        vocab_size=330,
        hard_vocab_limit=False,
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=["<think>"],
        control_symbols=["<ctl>"],
        minloglevel=3,
    )
    return out.getvalue()


# Appended to a model, this merges into its normalizer spec: escape_whitespaces = false.
_NO_ESCAPE = _message(3, _encode([(5, 0, 0)]))


@pytest.mark.parametrize(("model_type", "suffix"), [("bpe", b""), ("unigram", b""), ("bpe", _NO_ESCAPE)])
def test_sentencepiece_against_sentencepiece(tmp_path: Path, model_type: str, suffix: bytes) -> None:
    spm = pytest.importorskip("sentencepiece")
    raw = _train_sentencepiece(model_type) + suffix
    sp = spm.SentencePieceProcessor(model_proto=raw)
    path = tmp_path / "trained.model"
    path.write_bytes(raw)
    v = Vocabulary.from_sentencepiece(path)
    assert v.size == sp.vocab_size() and v.name == "trained.model"
    assert v.special_ids == {i for i in range(v.size) if sp.is_control(i) or sp.is_unknown(i)}
    assert v.stop_ids == {sp.eos_id()}
    # Each token decoded after an anchor (SentencePiece drops the first token's space).
    anchor = sp.piece_to_id("e")
    head = sp.decode([anchor]).encode()
    for i in range(v.size):
        if sp.is_byte(i):
            assert v.tokens[i] == bytes([int(sp.id_to_piece(i)[3:5], 16)])
        elif i not in v.special_ids:
            assert v.tokens[i] == sp.decode([anchor, i]).encode()[len(head) :], (i, sp.id_to_piece(i))
    for text in TEXTS:
        ids = sp.encode(text)
        ours, theirs = concat(v, ids), sp.decode(ids).encode()
        assert ours in (theirs, b" " + theirs)  # SentencePiece drops a leading space


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x0a\x05hello world", "not a SentencePiece model"),
        (_piece(b"\xff\xfe", 1), "not a SentencePiece model: 'utf-8' codec"),
        (_piece(b"", 1), "no pieces found"),
        (_message(2, _encode([(35, 0, 1)])), "no pieces found"),
        (_piece(b"a", 1) + b"\x0b", "unsupported wire type 3"),
        (_piece(b"<unk>", 5) + _piece(b"a", 5), "has no token"),
        (_piece(b"<unk>", 2) + _piece(b"abc", 6), r"byte piece 1 is 'abc', not <0xNN>"),
        (_message(1, b"\x0a\x10short"), "truncated field 1"),
    ],
)
def test_sentencepiece_refused(tmp_path: Path, raw: bytes, message: str) -> None:
    path = tmp_path / "bad.model"
    path.write_bytes(raw)
    assert_refused(path, Vocabulary.from_sentencepiece, message)


def test_sentencepiece_settings_by_hand(tmp_path: Path) -> None:
    # Byte fallback from the trainer spec turns normal <0xHH> pieces into bytes too.
    pieces = _piece(b"<unk>", 2) + _piece("\u2581a".encode(), 1) + _piece(b"<0x41>", 1) + _piece(b"x", 4)
    path = tmp_path / "hand.model"
    path.write_bytes(pieces)
    assert Vocabulary.from_sentencepiece(path).tokens == (b"<unk>", b" a", b"<0x41>", b"x")
    path.write_bytes(pieces + _message(2, _encode([(35, 0, 1)])))
    v = Vocabulary.from_sentencepiece(path, stop_tokens=["x"], logit_width=9, name="h")
    assert v.tokens == (b"<unk>", b" a", b"A", b"x")
    assert (v.stop_ids, v.logit_width, v.name) == ({3}, 9, "h")


@pytest.fixture(scope="module")
def trained_model() -> tuple[bytes, list[tuple[str, int]]]:
    raw = _train_sentencepiece("bpe")
    return raw, read_model(raw).pieces


def _field_ends(raw: bytes) -> list[int]:
    """Where each top-level field of a model ends (every one is length-delimited), read off
    the wire format here: a tag varint, a length varint, the payload."""

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = raw[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if byte < 0x80:
                return value, i

    ends: list[int] = []
    i = 0
    while i < len(raw):
        tag, i = varint(i)
        assert tag & 7 == 2, tag
        length, i = varint(i)
        i += length
        ends.append(i)
    assert i == len(raw)
    return ends


@checks_at_least(60)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_truncated_sentencepiece_models(
    trained_model: tuple[bytes, list[tuple[str, int]]], data: st.DataObject
) -> None:
    """A model cut anywhere is read as its whole fields or refused; cut after a whole field
    (half the cases), it is read."""
    raw, full = trained_model
    ends = _field_ends(raw)[:-1]
    cut = data.draw(st.sampled_from(ends) if data.draw(st.booleans()) else st.integers(1, len(raw) - 1))
    try:
        model = read_model(raw[:cut])
    except (WireFormatError, UnicodeDecodeError):
        assert cut not in ends, cut
        return gave_up()
    assert model.pieces == full[: len(model.pieces)]  # only whole fields were read


@checks_at_least(12)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.binary(max_size=64)
    | st.lists(
        st.sampled_from([_piece(b"a", 1), _piece(b"<0x0A>", 6), b"\x12\x03\xa8\x02\x01"]), max_size=4
    ).map(b"".join),
    st.binary(max_size=3),
)
def test_any_bytes_are_a_model_or_refused(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes, tail: bytes
) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.model"
    path.write_bytes(raw + tail)
    try:
        vocab = Vocabulary.from_sentencepiece(path)
    except VocabularyError as exc:
        assert str(path) in str(exc)
        return gave_up()
    assert vocab.size == len(read_model(raw + tail).pieces)


# -- Mistral tekken ------------------------------------------------------------------------

_MERGES = [b"ab", b" t", b" th", b" the"]


def _tekken(**config: object) -> dict[str, Any]:
    vocab = [
        {"rank": i, "token_bytes": base64.b64encode(bytes([i])).decode(), "token_str": None}
        for i in range(256)
    ]
    vocab += [
        {"rank": 256 + j, "token_bytes": base64.b64encode(m).decode(), "token_str": m.decode()}
        for j, m in enumerate(_MERGES)
    ]
    settings = {
        "pattern": r" ?[a-z]+|[^a-z]",
        "num_vocab_tokens": len(vocab),
        "default_vocab_size": 20 + len(vocab),
        "default_num_special_tokens": 20,
        "version": "v3",
        **config,
    }
    return {"config": settings, "vocab": vocab}


def test_small_tekken_file(tmp_path: Path) -> None:
    pytest.importorskip("mistral_common")
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = tmp_path / "tiny_tekken.json"
    path.write_text(json.dumps(_tekken()))
    tk = Tekkenizer.from_file(path)
    v = Vocabulary.load(path)
    assert v == Vocabulary.from_tokenizer_json(path)
    assert (v.size, len(v.special_ids), v.name) == (tk.n_words, tk.num_special_tokens, "tiny_tekken")
    assert v.stop_ids == {tk.eos_id}
    for text in ["ab the cat", "the\nthe", "x"]:
        assert concat(v, tk.encode(text, bos=False, eos=False)) == text.encode()
    assert Vocabulary.load(path, stop_tokens=["[INST]"], logit_width=300).stop_ids == {
        v.tokens.index(b"[INST]")
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _tekken(default_num_special_tokens=10**12),
            "default_num_special_tokens is 1000000000000, not an int",
        ),
        (_tekken(default_vocab_size=-1), "default_vocab_size is -1"),
        (_tekken(default_vocab_size="280"), "default_vocab_size is '280'"),
        (_tekken(version="v99"), "not a valid tekken file: Unknown version"),
        (_tekken(default_vocab_size=10_000), "not a valid tekken file"),
        ({**_tekken(), "vocab": [{"rank": 0}]}, "not a valid tekken file"),
        ({**_tekken(), "vocab": ["x"] * 300}, "not a valid tekken file"),
        ({**_tekken(), "audio": "x"}, "not a valid tekken file: .str. object has no attribute"),
        ({**_tekken(), "multimodal": "x"}, "not a valid tekken file"),
        ({**_tekken(), "special_tokens": [7]}, "not a valid tekken file"),
    ],
)
def test_tekken_refused(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    pytest.importorskip("mistral_common")
    path = tmp_path / "bad_tekken.json"
    path.write_text(json.dumps(data))
    assert_refused(path, Vocabulary.from_tokenizer_json, message)


# -- sniffing and Vocabulary.load -----------------------------------------------------------


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


def test_load_refusals(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="cannot read tokenizer"):
        Vocabulary.load("x" * 5000)
    with pytest.raises(VocabularyError, match="cannot be given for a built-in"):
        Vocabulary.load("cl100k_base", name="mine")
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Vocabulary.load("cl100k_base", colour="red")
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello world and more words\n")
    with pytest.raises(VocabularyError, match="is not a tokenizer file"):
        Vocabulary.load(unknown)


def test_load_sniffs_unnamed_files(tmp_path: Path) -> None:
    tiktoken_text = tmp_path / "ranks"
    tiktoken_text.write_text("YQ== 0\nYg== 1\n")
    assert Vocabulary.load(tiktoken_text).tokens == (b"a", b"b")
    hf = tmp_path / "tok"
    hf.write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}))
    assert Vocabulary.load(hf).tokens == (b"a",)
    sp = tmp_path / "spm"
    sp.write_bytes(_piece(b"<unk>", 2) + _piece("\u2581a".encode(), 1))
    assert Vocabulary.load(sp).tokens == (b"<unk>", b" a")
