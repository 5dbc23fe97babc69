"""Hostile cache directories: every reproducer ends in ``CacheError``, fast, in bounded memory.

Each case below once escaped as another exception (OverflowError, RecursionError,
MemoryError, TypeError), blocked forever (a FIFO), read forever (a link to ``/dev/zero``)
or was accepted.  Most corruptions rewrite ``meta.json`` with a matching checksum, so that
the check under test is the one that must refuse.  Reads run under an alarm (a hang fails
the test) and, where an allocation was the failure, under :mod:`tracemalloc` (the peak
must stay far below what the hostile header declares).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import signal
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.lib import format as npy

from formalgram_cfgzip import CacheError, TokenClasses, Vocabulary
from formalgram_cfgzip.cache import MAX_META_BYTES, read_cache, write_cache
from formalgram_cfgzip.compress import compress

PAREN = 'root ::= "(" root ")" | "x"'


def vocab() -> Vocabulary:
    return Vocabulary(
        [b"(", b"((", b")", b"x", b"(x)", None, b"", b"<tool>", b"</s>", b"y"],
        special_ids=[7, 8],
        stop_ids=[8],
        logit_width=12,
    )


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A valid cache of the bracket grammar over :func:`vocab`."""
    compress(PAREN, vocab(), progress=False).save(tmp_path / "c")
    return tmp_path / "c"


def load(directory: Path, **kwargs: Any) -> TokenClasses:
    return TokenClasses.load(directory, grammar=PAREN, vocab=vocab(), **kwargs)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (TimeoutError) if the block runs longer than ``seconds``: a blocked read (a FIFO,
    a device) would otherwise hang the test run.  A guard against a hang, not a speed
    requirement: refusals take milliseconds, the guard minutes."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


HANG_GUARD = 300.0  # seconds; see deadline()


def refused(call: Callable[[], object], match: str, *, seconds: float = HANG_GUARD) -> int:
    """Assert ``call`` raises CacheError matching ``match`` in time; the peak of traced allocations."""
    tracemalloc.start()
    try:
        with deadline(seconds), pytest.raises(CacheError, match=match):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def record(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((directory / "meta.json").read_text())
    return out


def write_record(directory: Path, rec: dict[str, Any]) -> None:
    (directory / "meta.json").write_text(json.dumps(rec))


def replace_arrays(directory: Path, payload: bytes, names: list[str] | None = None) -> None:
    """Put ``payload`` as arrays.npz with a matching checksum and size (and array names)."""
    (directory / "arrays.npz").write_bytes(payload)
    rec = record(directory)
    rec["npz_sha256"] = hashlib.sha256(payload).hexdigest()
    rec["npz_size"] = len(payload)
    if names is not None:
        rec["arrays"] = names
    write_record(directory, rec)


def members(directory: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(directory / "arrays.npz") as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def zip_of(items: list[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return buf.getvalue()


def npy_with_header(header: dict[str, object], data: bytes) -> bytes:
    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, header)
    return buf.getvalue() + data


# -- metadata -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1e999", "-1e999", "NaN", "Infinity", "1" * 5000])
def test_invalid_class_out_of_range_numbers(cache: Path, text: str) -> None:
    """``invalid_class: 1e999`` was an OverflowError; NaN, Infinity and huge integers likewise refused."""
    meta = cache / "meta.json"
    rec = record(cache)
    meta.write_text(
        json.dumps(rec).replace(
            f'"invalid_class": {rec["meta"]["invalid_class"]}', f'"invalid_class": {text}'
        )
    )
    assert text in meta.read_text()
    refused(lambda: load(cache), "not valid JSON")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("invalid_class", 1.0, "invalid_class is 1.0, not an int"),
        ("invalid_class", True, "invalid_class is True, not an int"),
        ("stop_class", "2", "stop_class is '2', not an int"),
        ("stop_class", None, "stop_class is None, not an int"),
        ("num_classes", 99, "num_classes is 99"),
        ("num_classes", [5], "num_classes is"),
        ("logit_width", 13, "logit_width differs"),
        ("stats", {"seconds": "fast"}, "stats must map names to numbers"),
        ("stats", {"seconds": [1.0]}, "stats must map names to numbers"),
        ("stats", {"seconds": {"a": 1}}, "stats must map names to numbers"),
        ("stats", {"seconds": None}, "stats must map names to numbers"),
        ("stats", [1, 2], "stats must map names to numbers"),
        ("grammar_sha256", 7, "lacks the grammar fingerprint"),
    ],
)
def test_metadata_values_of_the_wrong_type(cache: Path, field: str, value: object, message: str) -> None:
    """Non-numeric stats and ill-typed fields: CacheError, not TypeError/ValueError from float() or int()."""
    rec = record(cache)
    rec["meta"][field] = value
    write_record(cache, rec)
    refused(lambda: load(cache), message)


@pytest.mark.parametrize("where", ["top", "meta", "stats"])
def test_deeply_nested_json(cache: Path, where: str) -> None:
    """100,000-deep JSON was a RecursionError."""
    deep = "[" * 100_000 + "]" * 100_000
    if where == "top":
        text = deep
    else:
        rec = record(cache)
        if where == "meta":
            rec["meta"]["vocab_name"] = "DEEP"
        else:
            rec["meta"]["stats"]["seconds"] = "DEEP"
        text = json.dumps(rec).replace('"DEEP"', deep)
    (cache / "meta.json").write_text(text)
    refused(lambda: load(cache), "nested too deep")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"format": "formalgram-cache", "format": "formalgram-cache"}', "duplicate key"),
        ('{"format": "formalgram-cache", "version": 1.0}', "version 1.0 is not supported"),
        ("\ufeff{}", "not valid JSON"),
        ("", "not valid JSON"),
    ],
)
def test_ambiguous_or_odd_json(cache: Path, text: str, message: str) -> None:
    (cache / "meta.json").write_text(text)
    refused(lambda: load(cache), message)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("npz_sha256", "00" * 31, "malformed checksum"),
        ("npz_sha256", "G" * 64, "malformed checksum"),
        ("npz_size", -1, "malformed checksum or size"),
        ("npz_size", "12", "checksum, size, array names or metadata missing"),
        ("npz_size", 1 << 40, "over the cap"),
        ("arrays", ["token_class", "token_class"], "malformed array names"),
        ("arrays", ["representatives", "token_class", "x/y"], "malformed array names"),
        ("arrays", ["token_class", "representatives"], "malformed array names"),  # unsorted
        ("arrays", ["representatives"], "holds the arrays"),
    ],
)
def test_record_fields(cache: Path, field: str, value: object, message: str) -> None:
    rec = record(cache)
    rec[field] = value
    write_record(cache, rec)
    refused(lambda: load(cache), message)


# -- arrays.npz -----------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [31, 32, 36, 40])
def test_npy_header_declaring_huge_arrays(cache: Path, bits: int) -> None:
    """A header declaring 2^31..2^40 elements was a MemoryError after trying to allocate them.

    The header is well formed (numpy's own writer, padded); the data are the real 12 items.
    Nothing near the declared size is allocated: refused on the header, against the data's
    length (no expectation) and against the vocabulary (``TokenClasses.load``).
    """
    parts = members(cache)
    data = parts["token_class.npy"][-48:]  # 12 int32
    parts["token_class.npy"] = npy_with_header(
        {"descr": "<i4", "fortran_order": False, "shape": (1 << bits,)}, data
    )
    replace_arrays(cache, zip_of(sorted(parts.items())))
    peak = refused(
        lambda: load(cache), r"has dtype int32 and shape \(\d+,\), expected int32 and shape \(12,\)"
    )
    assert peak < 8 << 20
    peak = refused(
        lambda: read_cache(cache), rf"declares {1 << bits} items of 4 bytes, but its member holds 48"
    )
    assert peak < 8 << 20


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"descr": "<i4", "fortran_order": False, "shape": (3, 4)}, "expected int32 and shape"),
        ({"descr": "<i8", "fortran_order": False, "shape": (6,)}, "has dtype int64"),
        ({"descr": ">i4", "fortran_order": False, "shape": (12,)}, "has dtype >i4"),
        ({"descr": "|O", "fortran_order": False, "shape": (12,)}, "malformed .npy header"),
        ({"descr": "|V4", "fortran_order": False, "shape": (12,)}, "malformed .npy header"),
        ({"descr": "|S0", "fortran_order": False, "shape": (12,)}, "has dtype \\|S0, which is not stored"),
        ({"descr": [("a", "<i4")], "fortran_order": False, "shape": (12,)}, "malformed .npy header"),
        ({"descr": "<i4", "fortran_order": False, "shape": (-12,)}, "malformed .npy header"),
        ({"descr": "<i3", "fortran_order": False, "shape": (12,)}, "cannot be read safely: TypeError"),
        ({"descr": "<i4", "fortran_order": True, "shape": (12,)}, None),  # Fortran order: read as written
    ],
)
def test_npy_headers_that_disagree_with_the_data_or_the_vocabulary(
    cache: Path, header: dict[str, object], message: str | None
) -> None:
    parts = members(cache)
    parts["token_class.npy"] = npy_with_header(header, parts["token_class.npy"][-48:])
    replace_arrays(cache, zip_of(sorted(parts.items())))
    if message is None:
        assert load(cache).num_classes > 0
    else:
        refused(lambda: load(cache), message)


def test_npy_header_evaluation_is_never_attempted(cache: Path) -> None:
    """A header numpy would hand to ``ast.literal_eval`` (a MemoryError at 9,000 nested minus signs)."""
    parts = members(cache)
    text = b"{'descr': '<i4', 'fortran_order': False, 'shape': (" + b"-" * 9000 + b"12,), }\n"
    parts["token_class.npy"] = b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + bytes(48)
    replace_arrays(cache, zip_of(sorted(parts.items())))
    refused(lambda: read_cache(cache), "malformed .npy header")


def test_bare_npy_instead_of_the_zip(cache: Path) -> None:
    """A bare ``.npy`` as arrays.npz was a TypeError (numpy.load returned an array)."""
    buf = io.BytesIO()
    np.save(buf, np.zeros(12, dtype=np.int32))
    replace_arrays(cache, buf.getvalue())
    refused(lambda: load(cache), "cannot be read safely: BadZipFile")


def test_zip_bomb_member(cache: Path) -> None:
    """A deflated member expanding to 512 MiB is refused before any of it is inflated."""
    bomb = npy_with_header({"descr": "<i4", "fortran_order": False, "shape": (1 << 27,)}, bytes(1 << 29))
    payload = zip_of([("representatives.npy", bomb), ("token_class.npy", bomb)], zipfile.ZIP_DEFLATED)
    assert len(payload) < 2 << 20
    del bomb
    replace_arrays(cache, payload)
    peak = refused(lambda: read_cache(cache, max_bytes=4 << 20), "is compressed or encrypted")
    assert peak < 16 << 20


def test_member_declaring_a_size_past_the_archive(cache: Path) -> None:
    payload = bytearray((cache / "arrays.npz").read_bytes())
    central = payload.rfind(b"PK\x01\x02")  # last central directory entry
    payload[central + 24 : central + 28] = (0x7FFFFFFF).to_bytes(4, "little")  # uncompressed size
    replace_arrays(cache, bytes(payload))
    refused(lambda: load(cache), "impossible size|cannot be read safely")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("extra", "holds the members"),
        ("missing", "holds the members"),
        ("duplicate", "holds the members"),
        ("renamed", "holds the members"),
        ("swapped", "expected int32 and shape"),
        ("directory entry", "holds the members"),
    ],
)
def test_extra_missing_or_swapped_members(cache: Path, change: str, message: str) -> None:
    parts = members(cache)
    items = sorted(parts.items())
    if change == "extra":
        items.append(("x.npy", parts["representatives.npy"]))
    elif change == "missing":
        items = items[:1]
    elif change == "duplicate":
        items.append(items[0])
    elif change == "renamed":
        items = [(name.upper(), data) for name, data in items]
    elif change == "swapped":
        items = [
            ("representatives.npy", parts["token_class.npy"]),
            ("token_class.npy", parts["representatives.npy"]),
        ]
    else:
        items.append(("sub/", b""))
    with pytest.warns(UserWarning) if change == "duplicate" else contextlib.nullcontext():
        payload = zip_of(items)
    replace_arrays(cache, payload)
    refused(lambda: load(cache), message)


def test_object_arrays_never_unpickled(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object array (pickled data) with a valid checksum: refused on its header, pickle never called."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("pickle was called")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}] * 12, dtype=object), allow_pickle=True)
    parts = members(cache)
    parts["token_class.npy"] = buf.getvalue()
    replace_arrays(cache, zip_of(sorted(parts.items())))
    refused(lambda: load(cache), "malformed .npy header")  # '|O' is no dtype code the reader knows
    with pytest.raises(CacheError, match="dtype object"):
        write_cache(cache / "w", {"x": np.array([None], dtype=object)}, {})


@pytest.mark.parametrize("dtype", ["datetime64[s]", "V4", [("a", "<i4")], object])
def test_write_refuses_dtypes_it_would_not_read(tmp_path: Path, dtype: Any) -> None:
    with pytest.raises(CacheError, match="dtype"):
        write_cache(tmp_path, {"x": np.zeros(3, dtype=dtype)}, {})


# -- the files themselves -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["arrays.npz", "meta.json"])
def test_fifo(cache: Path, name: str) -> None:
    """A FIFO blocked ``open`` forever (no writer): refused before it is opened."""
    (cache / name).unlink()
    os.mkfifo(cache / name)
    refused(lambda: load(cache), "is not a regular file")


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "/dev/null"])
@pytest.mark.parametrize("name", ["arrays.npz", "meta.json"])
def test_link_to_a_device(cache: Path, name: str, target: str) -> None:
    """A link to /dev/zero read forever (MemoryError at last): devices are refused unopened."""
    (cache / name).unlink()
    (cache / name).symlink_to(target)
    refused(lambda: load(cache), "is not a regular file")


@pytest.mark.parametrize("name", ["arrays.npz", "meta.json"])
@pytest.mark.parametrize("kind", ["directory", "dangling link", "link loop", "sparse giant"])
def test_other_file_types(cache: Path, name: str, kind: str) -> None:
    path = cache / name
    path.unlink()
    if kind == "directory":
        path.mkdir()
        message = "is not a regular file"
    elif kind == "dangling link":
        path.symlink_to(cache / "nowhere")
        message = "is missing"
    elif kind == "link loop":
        path.symlink_to(path)
        message = "cannot read"
    else:
        with path.open("wb") as fh:
            fh.truncate((MAX_META_BYTES + 1) if name == "meta.json" else (16 << 30))
        message = "over the cap|corrupted or truncated"
    peak = refused(lambda: load(cache), message)
    assert peak < 4 << 20


def test_links_to_regular_files_are_followed(cache: Path, tmp_path: Path) -> None:
    """A cache whose files are links to regular files (a deployment layout) still loads."""
    for name in ("arrays.npz", "meta.json"):
        (cache / name).rename(tmp_path / name)
        (cache / name).symlink_to(tmp_path / name)
    assert load(cache).num_classes > 0


def test_cache_directory_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a directory")
    refused(lambda: load(tmp_path / "file"), "is not a directory")
    refused(lambda: compress(PAREN, vocab(), progress=False).save(tmp_path / "file"), "cannot write")


def test_unreadable_files(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Permission denied on a file is a CacheError (emulated where the tests run as root)."""
    for name in ("meta.json", "arrays.npz"):
        path = cache / name
        path.chmod(0)
        try:
            enforced = True
            try:
                os.close(os.open(path, os.O_RDONLY))
                enforced = False  # root reads anything: make the open fail instead
            except PermissionError:
                pass
            with monkeypatch.context() as m:
                if not enforced:
                    real_open = os.open

                    def deny(
                        p: Any, flags: int, *args: Any, _target: Path = path, _open: Any = real_open
                    ) -> int:
                        if Path(p) == _target:
                            raise PermissionError(13, "Permission denied", str(p))
                        return int(_open(p, flags, *args))

                    m.setattr(os, "open", deny)
                refused(lambda: load(cache), "cannot read .*Permission denied")
        finally:
            path.chmod(0o644)
    assert load(cache).num_classes > 0


# -- the key --------------------------------------------------------------------------------

KEY = b"k" * 32


def test_signed_cache_round_trip_and_refusals(tmp_path: Path) -> None:
    tc = compress(PAREN, vocab(), progress=False)
    tc.save(tmp_path / "signed", key=KEY)
    tc.save(tmp_path / "plain")
    assert load(tmp_path / "signed", key=KEY).num_classes == tc.num_classes
    assert load(tmp_path / "signed").num_classes == tc.num_classes  # without a key: integrity only
    refused(lambda: load(tmp_path / "signed", key=b"x" * 32), "fails its HMAC check")
    refused(lambda: load(tmp_path / "plain", key=KEY), "not signed")
    refused(lambda: load(tmp_path / "signed", key=b"short"), "at least 16 bytes")
    with pytest.raises((CacheError, TypeError), match=r"at least 16 bytes|expected"):  # TypeError: compiled
        tc.save(tmp_path / "x", key="k" * 32)  # type: ignore[arg-type]
    # re-signing with a valid checksum but without the key: any change to the record shows
    rec = record(tmp_path / "signed")
    rec["meta"]["stats"]["seconds"] = 0.0
    write_record(tmp_path / "signed", rec)
    refused(lambda: load(tmp_path / "signed", key=KEY), "fails its HMAC check")


def test_signed_cache_with_tampered_arrays(tmp_path: Path) -> None:
    """Arrays rewritten with a matching checksum, the old MAC kept: refused with the key."""
    tc = compress(PAREN, vocab(), progress=False)
    tc.save(tmp_path, key=KEY)
    arrays, meta = read_cache(tmp_path)
    mac = record(tmp_path)["hmac_sha256"]
    write_cache(tmp_path, arrays, meta)  # same arrays, fresh checksum, no MAC
    rec = record(tmp_path)
    rec["hmac_sha256"] = mac  # the old MAC still names the same record: accepted (nothing changed)
    write_record(tmp_path, rec)
    assert load(tmp_path, key=KEY).num_classes == tc.num_classes
    arrays["token_class"] = arrays["token_class"].copy()
    arrays["token_class"][[0, 1]] = arrays["token_class"][[1, 0]]  # "(" and "((" swapped
    write_cache(tmp_path, arrays, meta)
    rec = record(tmp_path)
    rec["hmac_sha256"] = mac
    write_record(tmp_path, rec)
    refused(lambda: load(tmp_path, key=KEY), "fails its HMAC check")


def test_path_with_a_nul_byte(tmp_path: Path) -> None:
    refused(lambda: load(Path(str(tmp_path) + "/a\0b")), "cannot read cache directory")
    refused(lambda: compress(PAREN, vocab(), progress=False).save(str(tmp_path) + "/a\0b"), "cannot write")
