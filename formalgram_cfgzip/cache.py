"""A safe on-disk cache: numpy arrays plus JSON metadata, checksummed, never pickled.

A cache directory holds two regular files:

``arrays.npz``
    The arrays in numpy's ``.npz`` layout: a zip archive of uncompressed ``NAME.npy``
    members with plain (numeric, boolean or fixed-width string) dtypes, so the file never
    contains pickled data.
``meta.json``
    ``{"format": "formalgram-cache", "version": 1, "npz_sha256": ..., "npz_size": ...,
    "arrays": [...], "meta": {...}}``: the checksum and size detect a truncated or
    corrupted ``arrays.npz``; ``meta`` carries the caller's fingerprints (grammar,
    vocabulary, algorithm version) checked on load.  With a key, an ``hmac_sha256`` field
    authenticates the whole record, and through the checksum the arrays.

Both files are written to temporary names and renamed into place, ``meta.json`` last,
so a reader never sees a half-written cache as valid.

Reading treats both files as hostile: each must be a regular file (a FIFO, a device or a
link to one is refused before it is opened, and again on the open descriptor), is read
with a size cap, the JSON is parsed with a depth and duplicate-key guard, and every
``.npy`` header is checked (dtype, shape, byte count, and an optional expected
dtype and shape) before its data becomes an array.  Whatever the bytes, the reader raises
:class:`~formalgram_cfgzip.errors.CacheError` or returns the arrays; it never allocates
more than the capped file size.

The checksum is **integrity, not authenticity**: it catches accidents (truncation, bit
rot, a half-copied directory), but whoever can write the directory can write a matching
checksum.  A cache shared across a trust boundary should be written and read with a
secret ``key`` (an HMAC-SHA-256 over the record); what the arrays *mean* can also be
re-derived from the grammar by ``TokenClasses.load(..., verify=...)``.

The fingerprints a cache carries are computed here too: :func:`grammar_fingerprint` (the
canonical one: the grammar's start and sorted rules) and :func:`fingerprint_text` (the
hash of a text, e.g. the grammar source: a check that needs no parse).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import re
import stat
import struct
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn

import numpy as np

from formalgram_cfgzip.errors import CacheError

if TYPE_CHECKING:
    from formalgram.grammar import Grammar

__all__ = [
    "CACHE_FORMAT",
    "CACHE_VERSION",
    "MAX_ARRAYS_BYTES",
    "MAX_META_BYTES",
    "fingerprint_text",
    "grammar_fingerprint",
    "read_cache",
    "write_cache",
]

CACHE_FORMAT = "formalgram-cache"
CACHE_VERSION = 1
MAX_META_BYTES = 1 << 20  # largest meta.json read
MAX_ARRAYS_BYTES = 1 << 31  # default largest arrays.npz read (read_cache's max_bytes)
_ARRAYS = "arrays.npz"
_META = "meta.json"
_MAC_FIELD = "hmac_sha256"
_MAC_CONTEXT = b"formalgram-cache-hmac-v1\x00"
_MIN_KEY = 16
_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 10_000
# the header numpy.save writes for a plain array, e.g. {'descr': '<i4', 'fortran_order': False,
# 'shape': (3,), } padded with spaces and a newline: matched, never evaluated
_NPY_HEADER = re.compile(
    rb"\{'descr': '([<>|=]?[biufcSU][0-9]{1,5})', 'fortran_order': (True|False), "
    rb"'shape': \(((?:[0-9]{1,19}, ?)*(?:[0-9]{1,19})?)\), \} *\n"
)
# what zipfile and the dtype parser may raise on hostile bytes (a closed list: anything else is a bug)
_PARSE_ERRORS = (
    zipfile.BadZipFile,  # bad structure, bad CRC
    ValueError,  # zipfile's own checks, UnicodeDecodeError of member names
    TypeError,  # numpy.dtype of an unknown code
    EOFError,
    OSError,
    RuntimeError,  # zipfile's NotImplementedError (method) or encryption (refused before opening)
    struct.error,
)


def fingerprint_text(text: str, *, root: str = "root") -> str:
    """SHA-256 (hex) of a grammar text read from the start rule ``root``.

    Parameters
    ----------
    text : str
        Any text, e.g. the grammar source.
    root : str, keyword-only
        The start rule the text is read from: the fingerprint of ``text`` with ``"root"``
        (the default) is the SHA-256 of its UTF-8 encoding; another start rule is bound in,
        so that classes of one text read from two rules never pass for each other.

    Returns
    -------
    str
        64 lowercase hex digits.

    Notes
    -----
    O(len(text)).  Two texts that differ in formatting only have different text
    fingerprints; :func:`grammar_fingerprint` is the one that identifies a grammar.

    Examples
    --------
    >>> fingerprint_text("")[:16]
    'e3b0c44298fc1c14'
    >>> fingerprint_text("a ::= b", root="a") == fingerprint_text("a ::= b")
    False
    """
    if root != "root":
        text = f"{text}\0root={root}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def grammar_fingerprint(grammar: Grammar | str, *, start: str = "root") -> str:
    """SHA-256 (hex) of a canonical form of a grammar: its start name and sorted productions.

    Formatting, comments and rule order of the source text do not matter; two texts that
    parse to equal grammars have the same fingerprint.

    Parameters
    ----------
    grammar : Grammar or str
        A grammar, or GBNF text (parsed with start rule ``start``).
    start : str
        The start rule of a text (ignored for a ``Grammar``, which has its own).

    Returns
    -------
    str
        64 lowercase hex digits.

    Raises
    ------
    GrammarSyntaxError
        If ``grammar`` is text that does not parse.

    Notes
    -----
    O(|G| log |G|) after parsing (the rules are printed and sorted).

    Examples
    --------
    >>> a = grammar_fingerprint('root ::= "x" | "(" root ")"')
    >>> a == grammar_fingerprint('# same grammar\\nroot ::= "(" root ")" | "x"\\n')
    True
    >>> a == grammar_fingerprint('root ::= "y" | "(" root ")"')
    False
    """
    if isinstance(grammar, str):
        from formalgram_cfgzip.grammar_text import read_grammar

        g = read_grammar(grammar, start)
    else:
        g = grammar
    names = g.names
    masks = g.masks
    lines = []
    for lhs, rhs in g.rules:
        body = " ".join(f"N{names[s]!r}" if s >= 0 else f"T{masks[~s]:x}" for s in rhs)
        lines.append(f"{names[lhs]!r} -> {body}")
    lines.sort()
    text = f"start {names[g.start_id]!r}\n" + "\n".join(lines)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _plain_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is stored: a non-empty scalar dtype with no fields, subarray or objects."""
    return (
        not dtype.hasobject
        and dtype.fields is None
        and dtype.subdtype is None
        and dtype.itemsize > 0
        and dtype.kind in "biufcSU"
    )


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive (what :func:`numpy.savez` writes), byte-for-byte deterministic."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w", force_zip64=True) as fh:
                np.save(fh, arrays[key], allow_pickle=False)
    return buf.getvalue()


def _check_key(key: bytes | None) -> bytes | None:
    if key is None:
        return None
    if not isinstance(key, (bytes, bytearray)) or len(key) < _MIN_KEY:
        raise CacheError(
            f"a cache key must be bytes of at least {_MIN_KEY} bytes (e.g. secrets.token_bytes(32))"
        )
    return bytes(key)


def _mac(key: bytes, record: Mapping[str, object]) -> str:
    """HMAC-SHA-256 of ``record`` without its MAC field, over a canonical JSON form.

    The MAC covers the record as parsed (what the reader acts on), and through
    ``npz_sha256`` the arrays.
    """
    body = {k: v for k, v in record.items() if k != _MAC_FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hmac.new(key, _MAC_CONTEXT + text.encode("utf-8"), hashlib.sha256).hexdigest()


def write_cache(
    directory: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    meta: Mapping[str, object],
    *,
    key: bytes | None = None,
) -> None:
    """Write ``arrays`` and ``meta`` to ``directory`` (created if needed), atomically.

    Parameters
    ----------
    directory : path
        Target directory.
    arrays : mapping of str to numpy.ndarray
        Arrays to store; names must be non-empty, without ``/`` and not start with ``.``;
        dtypes must be plain (boolean, integer, float, complex, fixed-width bytes or
        text): no objects (they would need pickle), no structured or zero-width dtypes.
    meta : mapping of str to JSON-serialisable values
        Metadata stored verbatim in ``meta.json`` (put fingerprints here).
    key : bytes, optional
        A secret of at least 16 bytes: the record gets an HMAC-SHA-256 that
        :func:`read_cache` with the same key checks (authenticity across a trust boundary).

    Raises
    ------
    CacheError
        If an array's dtype is not plain, a name is unusable, the metadata is not
        JSON-serialisable, the key is too short, or the directory cannot be written.

    Notes
    -----
    O(total array bytes); the archive is built in memory once and hashed.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> write_cache(d, {"x": np.arange(3)}, {"vocab_sha256": "ab"})
    >>> read_cache(d, expect={"vocab_sha256": "ab"})[0]["x"].tolist()
    [0, 1, 2]
    """
    secret = _check_key(key)
    clean: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise CacheError(f"unusable array name {name!r}")
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise CacheError(f"array {name!r} has dtype object, which cannot be stored without pickle")
        if not _plain_dtype(arr.dtype):
            raise CacheError(
                f"array {name!r} has dtype {arr.dtype}: only plain boolean, numeric or "
                "fixed-width string dtypes are stored"
            )
        clean[name] = arr
    try:
        meta_copy = json.loads(json.dumps(dict(meta), allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise CacheError(f"cache metadata is not JSON-serialisable: {exc}") from None
    payload = _npz_bytes(clean)
    record: dict[str, object] = {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "npz_sha256": hashlib.sha256(payload).hexdigest(),
        "npz_size": len(payload),
        "arrays": sorted(clean),
        "meta": meta_copy,
    }
    if secret is not None:
        record[_MAC_FIELD] = _mac(secret, record)
    target = Path(directory)
    try:
        target.mkdir(parents=True, exist_ok=True)
        # The old meta.json goes first: a crash between the two renames leaves no
        # meta.json rather than an old one pointing at new arrays.
        with contextlib.suppress(FileNotFoundError):
            (target / _META).unlink()
        _atomic_write(target / _ARRAYS, payload)
        _atomic_write(target / _META, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise CacheError(f"cannot write cache directory {str(target)!r}: {exc}") from None


def read_cache(
    directory: str | os.PathLike[str],
    *,
    expect: Mapping[str, str] | None = None,
    spec: Mapping[str, tuple[np.dtype, tuple[int | None, ...]]] | None = None,
    max_bytes: int = MAX_ARRAYS_BYTES,
    key: bytes | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Read and verify a cache written by :func:`write_cache`, whatever the directory holds.

    Parameters
    ----------
    directory : path
        The cache directory.
    expect : mapping of str to str, optional
        Required metadata values (fingerprints); each key must be present in the stored
        metadata with exactly this value.
    spec : mapping of str to (dtype, shape), optional
        The arrays the cache must hold, exactly these names, each with this dtype and shape
        (``None`` for a dimension of any length); checked on each ``.npy`` header before
        its data is read.
    max_bytes : int
        Largest ``arrays.npz`` accepted (default :data:`MAX_ARRAYS_BYTES`); ``meta.json``
        is capped at :data:`MAX_META_BYTES`.
    key : bytes, optional
        The secret the cache was written with: the cache must carry a matching HMAC, or it
        is refused.  Without a key an HMAC present is not checked.

    Returns
    -------
    (arrays, meta)
        The arrays by name (writable, owning their data) and the metadata given to
        :func:`write_cache`.

    Raises
    ------
    CacheError
        If the directory or a file is missing, unreadable or not a regular file (a FIFO, a
        device, a link to one), a file is over its cap, ``meta.json`` is not a cache record
        of a supported version (not UTF-8 JSON, nested too deep, duplicate keys, a
        non-finite number, a field of the wrong type), the HMAC is missing or wrong (with a
        key), an expected field differs (the message names it, e.g. ``cache was computed
        for another grammar (grammar_sha256 differs)``), ``arrays.npz`` does not match its
        checksum and size, or it is not a zip of exactly the recorded members, each stored
        uncompressed as a ``.npy`` with a plain dtype whose header agrees with its data and
        with ``spec``.

    Notes
    -----
    O(total array bytes): each file is read once, with at most its cap (+1 byte) in
    memory.  Checks integrity (the checksum) and the expected fields, and authenticity when
    given a key; what the arrays mean is checked by their owner (``TokenClasses.load``).
    The checksum alone is not authenticity: whoever can write the directory can write a
    matching checksum.

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> write_cache(d, {"x": np.arange(3)}, {"grammar_sha256": "ab"})
    >>> read_cache(d, expect={"grammar_sha256": "cd"})
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.CacheError: cache was computed for another grammar (grammar_sha256 differs)
    >>> read_cache(d, spec={"x": (np.dtype(np.int32), (3,))})[0]["x"].tolist()
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.CacheError: array 'x' in ... has dtype int64 and shape (3,), expected int32 and shape (3,)
    """
    secret = _check_key(key)
    root = Path(directory)
    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise CacheError(f"cache directory {str(root)!r} does not exist") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise CacheError(f"cannot read cache directory {str(root)!r}: {exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise CacheError(f"cache directory {str(root)!r} is not a directory")
    meta_path = root / _META
    arrays_path = root / _ARRAYS
    raw_meta = _read_regular(
        meta_path, MAX_META_BYTES, f"{str(root)!r} is not a cache directory: {_META} is missing"
    )
    record = _parse_record(raw_meta, str(meta_path))
    if secret is not None:
        mac = record.get(_MAC_FIELD)
        if not isinstance(mac, str):
            raise CacheError(
                f"{str(meta_path)!r} carries no HMAC, but a key was given: the cache is not signed"
            )
        if not hmac.compare_digest(mac.encode("ascii", "replace"), _mac(secret, record).encode("ascii")):
            raise CacheError(
                f"{str(meta_path)!r} fails its HMAC check: written with another key, or modified"
            )
    digest = record["npz_sha256"]
    size = record["npz_size"]
    names = record["arrays"]
    user_meta = record["meta"]
    assert isinstance(digest, str) and isinstance(size, int)
    assert isinstance(names, list) and isinstance(user_meta, dict)
    if expect:
        for field, want in expect.items():
            if field not in user_meta:
                raise CacheError(f"cache metadata lacks the field {field!r}; recompute the cache")
            if user_meta[field] != want:
                raise CacheError(f"cache was computed for {_describe(field)} ({field} differs)")
    if spec is not None and sorted(spec) != names:
        raise CacheError(f"cache {str(root)!r} holds the arrays {names}, expected {sorted(spec)}")
    if size > max_bytes:
        raise CacheError(f"{str(arrays_path)!r} is recorded as {size} bytes, over the cap of {max_bytes}")
    payload = _read_regular(arrays_path, size, f"cache {str(root)!r} is incomplete: {_ARRAYS} is missing")
    if len(payload) != size or hashlib.sha256(payload).hexdigest() != digest:
        raise CacheError(
            f"{str(arrays_path)!r} is corrupted or truncated (checksum mismatch, {len(payload)} bytes)"
        )
    return _parse_npz(payload, names, spec, str(arrays_path)), dict(user_meta)


def _read_regular(path: Path, limit: int, missing: str) -> bytes:
    """The bytes of the regular file ``path`` (links followed), refused above ``limit`` bytes.

    The file is checked with :func:`os.stat` before it is opened (a FIFO would block the
    open, a device would read forever) and again with :func:`os.fstat` on the descriptor,
    opened non-blocking, so a file swapped in between is caught; it is read to at most
    ``limit + 1`` bytes, and must have exactly the size it had.
    """
    try:
        before = os.stat(path)
    except FileNotFoundError:
        raise CacheError(missing) from None
    except OSError as exc:
        raise CacheError(f"cannot read {str(path)!r}: {exc}") from None
    _check_regular(path, before, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise CacheError(missing) from None
    except OSError as exc:
        raise CacheError(f"cannot read {str(path)!r}: {exc}") from None
    try:
        now = os.fstat(fd)
        _check_regular(path, now, limit)
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise CacheError(f"{str(path)!r} was replaced while being opened")
        chunks: list[bytes] = []
        left = now.st_size + 1  # one more byte: a file that grew is caught
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise CacheError(f"cannot read {str(path)!r}: {exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) != now.st_size:
        raise CacheError(f"{str(path)!r} changed size while being read")
    return data


def _check_regular(path: Path, info: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise CacheError(f"{str(path)!r} is not a regular file")
    if info.st_size > limit:
        raise CacheError(f"{str(path)!r} has {info.st_size} bytes, over the cap of {limit}")


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _parse_record(raw: bytes, where: str) -> dict[str, object]:
    """The checked top-level record of ``meta.json``."""
    try:
        record = json.loads(
            raw.decode("utf-8"),
            parse_constant=_no_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise CacheError(f"{where!r} is corrupted: not valid JSON ({exc})") from None
    except RecursionError:
        raise CacheError(f"{where!r} is corrupted: JSON nested too deep") from None
    if not isinstance(record, dict) or record.get("format") != CACHE_FORMAT:
        raise CacheError(f"{where!r} is not a {CACHE_FORMAT} metadata file")
    version = record.get("version")
    if type(version) is not int or version != CACHE_VERSION:
        raise CacheError(
            f"cache format version {version!r} is not supported (expected {CACHE_VERSION}); "
            "recompute the cache"
        )
    digest = record.get("npz_sha256")
    size = record.get("npz_size")
    names = record.get("arrays")
    if (
        not isinstance(digest, str)
        or not isinstance(record.get("meta"), dict)
        or type(size) is not int
        or not isinstance(names, list)
    ):
        raise CacheError(f"{where!r} is corrupted: checksum, size, array names or metadata missing")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or size < 0:
        raise CacheError(f"{where!r} is corrupted: malformed checksum or size")
    if not all(isinstance(n, str) and n and "/" not in n for n in names) or names != sorted(set(names)):
        raise CacheError(f"{where!r} is corrupted: malformed array names")
    return record


def _parse_npz(
    payload: bytes,
    names: list[str],
    spec: Mapping[str, tuple[np.dtype, tuple[int | None, ...]]] | None,
    where: str,
) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` payload holding exactly ``names``, each checked before it is built."""
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as zf:
            infos = zf.infolist()
            members = [info.filename for info in infos]
            if sorted(members) != [f"{n}.npy" for n in names]:
                raise CacheError(f"{where!r} holds the members {sorted(members)[:8]}, expected {names}")
            for info in infos:
                name = info.filename[: -len(".npy")]
                if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                    raise CacheError(f"member {info.filename!r} of {where!r} is compressed or encrypted")
                if info.file_size != info.compress_size or info.file_size > len(payload):
                    raise CacheError(f"member {info.filename!r} of {where!r} has an impossible size")
                with zf.open(info) as fh:
                    arrays[name] = _read_npy(fh, info.file_size, name, spec, where)
    except _PARSE_ERRORS as exc:
        raise CacheError(f"{where!r} cannot be read safely: {type(exc).__name__}: {exc}") from None
    return arrays


def _read_npy(
    fh: IO[bytes],
    size: int,
    name: str,
    spec: Mapping[str, tuple[np.dtype, tuple[int | None, ...]]] | None,
    where: str,
) -> np.ndarray:
    """One ``.npy`` member of ``size`` bytes; its header is checked before the data is read.

    The header must be what :func:`numpy.save` writes for a plain array (format 1.0 or
    2.0, the keys in their written order, a short dtype code, a tuple of decimal sizes):
    parsed with a regular expression, never evaluated.
    """
    magic = fh.read(8)
    if magic not in (_NPY_MAGIC + b"\x01\x00", _NPY_MAGIC + b"\x02\x00"):
        raise CacheError(f"array {name!r} in {where!r} is not a .npy file of format 1.0 or 2.0")
    width = 2 if magic[6] == 1 else 4
    length = int.from_bytes(fh.read(width), "little")
    if length > _NPY_MAX_HEADER:
        raise CacheError(f"array {name!r} in {where!r} has a header of {length} bytes")
    match = _NPY_HEADER.fullmatch(fh.read(length))
    if match is None:
        raise CacheError(f"array {name!r} in {where!r} has a malformed .npy header")
    dtype = np.dtype(match.group(1).decode("ascii"))
    fortran = match.group(2) == b"True"
    shape = tuple(int(n) for n in match.group(3).replace(b",", b" ").split())
    if not _plain_dtype(dtype):
        raise CacheError(f"array {name!r} in {where!r} has dtype {dtype}, which is not stored")
    if spec is not None:
        want_dtype, want_shape = spec[name]
        if (
            dtype != want_dtype
            or len(shape) != len(want_shape)
            or any(w is not None and n != w for n, w in zip(shape, want_shape, strict=True))
        ):
            expected = "(" + ", ".join("any" if w is None else str(w) for w in want_shape) + ",)"
            raise CacheError(
                f"array {name!r} in {where!r} has dtype {dtype} and shape {shape}, "
                f"expected {np.dtype(want_dtype)} and shape {expected}"
            )
    count = 1
    for n in shape:
        count *= n
    data_size = size - 8 - width - length
    if count * dtype.itemsize != data_size:
        raise CacheError(
            f"array {name!r} in {where!r} declares {count} items of {dtype.itemsize} bytes, "
            f"but its member holds {data_size} bytes of data"
        )
    data = fh.read(data_size)
    if len(data) != data_size or fh.read(1):
        raise CacheError(f"array {name!r} in {where!r} has the wrong number of bytes")
    flat = np.frombuffer(data, dtype=dtype, count=count)
    return np.array(flat.reshape(shape, order="F" if fortran else "C"), order="C")


def _describe(key: str) -> str:
    lowered = key.lower()
    for word, what in (
        ("grammar", "another grammar"),
        ("vocab", "another vocabulary"),
        ("tokenizer", "another tokenizer"),
        ("algorithm", "another algorithm version"),
        ("classes", "other classes"),
    ):
        if word in lowered:
            return what
    return "other inputs"
