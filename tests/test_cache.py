"""Tests of formalgram_cfgzip.cache: checksummed, pickle-free array caches."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from formalgram_cfgzip.cache import fingerprint_text, read_cache, write_cache
from formalgram_cfgzip.errors import CacheError

META = {"grammar_sha256": "g" * 64, "vocab_sha256": "v" * 64, "algorithm": "cfgzip-1", "num_classes": 3}
EXPECT = {"grammar_sha256": "g" * 64, "vocab_sha256": "v" * 64, "algorithm": "cfgzip-1"}


def _arrays() -> dict[str, np.ndarray]:
    return {
        "token_class": np.array([0, 1, 1, 2, -1], dtype=np.int32),
        "representatives": np.array([0, 1, 3], dtype=np.int64),
        "mask": np.array([[True, False], [False, True]]),
        "empty": np.zeros((0,), dtype=np.uint8),
        "weights": np.linspace(0.0, 1.0, 7),
    }


def test_round_trip(tmp_path: Path) -> None:
    arrays = _arrays()
    write_cache(tmp_path / "c", arrays, META)
    got, meta = read_cache(tmp_path / "c", expect=EXPECT)
    assert meta == META
    assert set(got) == set(arrays)
    for key, arr in arrays.items():
        assert got[key].dtype == arr.dtype and got[key].shape == arr.shape
        assert np.array_equal(got[key], arr)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["arrays.npz", "meta.json"]
    record = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert record["format"] == "formalgram-cache" and record["version"] == 1
    assert record["npz_sha256"] == hashlib.sha256((tmp_path / "c" / "arrays.npz").read_bytes()).hexdigest()
    assert read_cache(tmp_path / "c")[1] == META  # no expectations


def test_overwrite(tmp_path: Path) -> None:
    write_cache(tmp_path, _arrays(), META)
    write_cache(tmp_path, {"x": np.arange(4)}, {"algorithm": "other"})
    got, meta = read_cache(tmp_path, expect={"algorithm": "other"})
    assert list(got) == ["x"] and meta == {"algorithm": "other"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arrays.npz", "meta.json"]


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("grammar_sha256", r"another grammar \(grammar_sha256 differs\)"),
        ("vocab_sha256", r"another vocabulary \(vocab_sha256 differs\)"),
        ("algorithm", r"another algorithm version \(algorithm differs\)"),
    ],
)
def test_mismatch_names_the_field(tmp_path: Path, field: str, message: str) -> None:
    write_cache(tmp_path, _arrays(), META)
    wrong = dict(EXPECT)
    wrong[field] = "something else"
    with pytest.raises(CacheError, match=message):
        read_cache(tmp_path, expect=wrong)


def test_missing_expected_field(tmp_path: Path) -> None:
    write_cache(tmp_path, _arrays(), {"algorithm": "cfgzip-1"})
    with pytest.raises(CacheError, match="lacks the field 'grammar_sha256'"):
        read_cache(tmp_path, expect=EXPECT)


def test_truncated_and_corrupted_npz(tmp_path: Path) -> None:
    write_cache(tmp_path, _arrays(), META)
    npz = tmp_path / "arrays.npz"
    data = npz.read_bytes()
    npz.write_bytes(data[: len(data) // 2])
    with pytest.raises(CacheError, match="corrupted or truncated"):
        read_cache(tmp_path, expect=EXPECT)
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x40
    npz.write_bytes(bytes(flipped))
    with pytest.raises(CacheError, match="corrupted or truncated"):
        read_cache(tmp_path)
    npz.unlink()
    with pytest.raises(CacheError, match=r"arrays\.npz is missing"):
        read_cache(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\xff garbage", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a formalgram-cache metadata file"),
        (b'{"format": "something-else", "version": 1}', "not a formalgram-cache metadata file"),
        (b'{"format": "formalgram-cache", "version": 99}', "version 99 is not supported"),
        (b'{"format": "formalgram-cache", "version": 1}', "checksum, size, array names or metadata missing"),
        (b'{"format": "formalgram-cache", "version": true}', "version True is not supported"),
    ],
)
def test_garbage_meta(tmp_path: Path, content: bytes, message: str) -> None:
    write_cache(tmp_path, _arrays(), META)
    (tmp_path / "meta.json").write_bytes(content)
    with pytest.raises(CacheError, match=message):
        read_cache(tmp_path, expect=EXPECT)


def test_missing_directory_and_meta(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match="does not exist"):
        read_cache(tmp_path / "nope")
    with pytest.raises(CacheError, match=r"meta\.json is missing"):
        read_cache(tmp_path)


def test_object_arrays_refused(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match="dtype object"):
        write_cache(tmp_path / "c", {"bad": np.array([{"a": 1}, None], dtype=object)}, META)
    assert not (tmp_path / "c" / "meta.json").exists()


def test_pickled_payload_refused_even_with_valid_checksum(tmp_path: Path) -> None:
    write_cache(tmp_path, _arrays(), META)
    buf = io.BytesIO()
    np.savez(buf, bad=np.array([{"a": 1}], dtype=object))  # object arrays are pickled by default
    payload = buf.getvalue()
    (tmp_path / "arrays.npz").write_bytes(payload)
    record = json.loads((tmp_path / "meta.json").read_text())
    record["npz_sha256"] = hashlib.sha256(payload).hexdigest()
    record["npz_size"] = len(payload)
    record["arrays"] = ["bad"]
    (tmp_path / "meta.json").write_text(json.dumps(record))
    with pytest.raises(CacheError, match=r"array .bad. .* has a malformed .npy header"):
        read_cache(tmp_path, expect=EXPECT)


def test_bad_names_and_meta(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match="unusable array name"):
        write_cache(tmp_path, {"a/b": np.arange(2)}, META)
    with pytest.raises(CacheError, match="not JSON-serialisable"):
        write_cache(tmp_path, {"a": np.arange(2)}, {"s": {1, 2}})
    with pytest.raises(CacheError, match="not JSON-serialisable"):
        write_cache(tmp_path, {"a": np.arange(2)}, {"x": float("nan")})


def test_fingerprint_text() -> None:
    assert fingerprint_text("") == hashlib.sha256(b"").hexdigest()
    assert fingerprint_text('root ::= "ü"') == hashlib.sha256('root ::= "ü"'.encode()).hexdigest()
    assert fingerprint_text("a") != fingerprint_text("a ")


_dtypes = st.sampled_from(
    [np.int8, np.int32, np.int64, np.uint8, np.uint16, np.float32, np.float64, np.bool_]
)


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
        _dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))),
        max_size=4,
    ),
    st.dictionaries(
        st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8), st.booleans()), max_size=4
    ),
)
def test_round_trip_property(arrays: dict[str, np.ndarray], meta: dict[str, object]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        write_cache(d, arrays, meta)
        got, got_meta = read_cache(d)
    assert got_meta == meta
    assert set(got) == set(arrays)
    for key, arr in arrays.items():
        assert got[key].dtype == arr.dtype
        assert np.array_equal(got[key], arr, equal_nan=arr.dtype.kind == "f")


def test_reserved_looking_names_and_determinism(tmp_path: Path) -> None:
    arrays: dict[str, np.ndarray] = {"file": np.arange(3), "allow_pickle": np.ones(2, dtype=np.uint8)}
    write_cache(tmp_path / "a", arrays, META)
    write_cache(tmp_path / "b", dict(reversed(list(arrays.items()))), META)
    got, _ = read_cache(tmp_path / "a")
    assert np.array_equal(got["file"], arrays["file"]) and np.array_equal(
        got["allow_pickle"], arrays["allow_pickle"]
    )
    assert (tmp_path / "a" / "arrays.npz").read_bytes() == (tmp_path / "b" / "arrays.npz").read_bytes()
    with np.load(tmp_path / "a" / "arrays.npz", allow_pickle=False) as npz:  # a standard .npz file
        assert sorted(npz.files) == ["allow_pickle", "file"]
