"""A safe on-disk cache: numpy arrays plus JSON metadata, checksummed, never pickled.

A cache directory holds two files:

``arrays.npz``
    The arrays in numpy's ``.npz`` layout (object arrays are refused, so the file never
    contains pickled data) and read back with ``allow_pickle=False``.
``meta.json``
    ``{"format": "formalgram-cache", "version": 1, "npz_sha256": ..., "meta": {...}}``:
    the checksum detects a truncated or corrupted ``arrays.npz``; ``meta`` carries the
    caller's fingerprints (grammar, vocabulary, algorithm version) checked on load.

Both files are written to temporary names and renamed into place, ``meta.json`` last,
so a reader never sees a half-written cache as valid.  The checksum is integrity, not
authenticity: whoever can write the directory can write a matching checksum.

The fingerprints a cache carries are computed here too: :func:`grammar_fingerprint` (the
canonical one: the grammar's start and sorted rules) and :func:`fingerprint_text` (the
hash of a text, e.g. the grammar source: a check that needs no parse).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from formalgram_cfgzip.errors import CacheError

if TYPE_CHECKING:
    from formalgram.grammar import Grammar

__all__ = [
    "CACHE_FORMAT",
    "CACHE_VERSION",
    "fingerprint_text",
    "grammar_fingerprint",
    "read_cache",
    "write_cache",
]

CACHE_FORMAT = "formalgram-cache"
CACHE_VERSION = 1
_ARRAYS = "arrays.npz"
_META = "meta.json"


def fingerprint_text(text: str) -> str:
    """SHA-256 (hex) of the UTF-8 encoding of ``text``.

    Parameters
    ----------
    text : str
        Any text, e.g. the grammar source.

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
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def grammar_fingerprint(grammar: Grammar | str) -> str:
    """SHA-256 (hex) of a canonical form of a grammar: its start name and sorted productions.

    Formatting, comments and rule order of the source text do not matter; two texts that
    parse to equal grammars have the same fingerprint.

    Parameters
    ----------
    grammar : Grammar or str
        A grammar, or GBNF text (parsed with start rule ``root``).

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
        from formalgram.syntax.gbnf import parse_gbnf

        g = parse_gbnf(grammar)
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


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive (what :func:`numpy.savez` writes), byte-for-byte deterministic."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w", force_zip64=True) as fh:
                np.save(fh, arrays[key], allow_pickle=False)
    return buf.getvalue()


def write_cache(
    directory: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], meta: Mapping[str, object]
) -> None:
    """Write ``arrays`` and ``meta`` to ``directory`` (created if needed), atomically.

    Parameters
    ----------
    directory : path
        Target directory.
    arrays : mapping of str to numpy.ndarray
        Arrays to store; names must be valid identifiers-like keys (no ``/``), dtypes must
        not be ``object``.
    meta : mapping of str to JSON-serialisable values
        Metadata stored verbatim in ``meta.json`` (put fingerprints here).

    Raises
    ------
    CacheError
        If an array has dtype ``object`` (it would need pickle), a name is unusable, the
        metadata is not JSON-serialisable, or the directory cannot be written.

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
    clean: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if not isinstance(key, str) or not key or "/" in key or key.startswith("."):
            raise CacheError(f"unusable array name {key!r}")
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise CacheError(f"array {key!r} has dtype object, which cannot be stored without pickle")
        clean[key] = arr
    try:
        meta_copy = json.loads(json.dumps(dict(meta), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise CacheError(f"cache metadata is not JSON-serialisable: {exc}") from None
    payload = _npz_bytes(clean)
    record = {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "npz_sha256": hashlib.sha256(payload).hexdigest(),
        "npz_size": len(payload),
        "arrays": sorted(clean),
        "meta": meta_copy,
    }
    target = Path(directory)
    try:
        target.mkdir(parents=True, exist_ok=True)
        # The old meta.json goes first: a crash between the two renames leaves no
        # meta.json rather than an old one pointing at new arrays.
        with contextlib.suppress(FileNotFoundError):
            (target / _META).unlink()
        _atomic_write(target / _ARRAYS, payload)
        _atomic_write(target / _META, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    except OSError as exc:
        raise CacheError(f"cannot write cache directory {str(target)!r}: {exc}") from None


def read_cache(
    directory: str | os.PathLike[str], *, expect: Mapping[str, str] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Read and verify a cache written by :func:`write_cache`.

    Parameters
    ----------
    directory : path
        The cache directory.
    expect : mapping of str to str, optional
        Required metadata values (fingerprints); each key must be present in the stored
        metadata with exactly this value.

    Returns
    -------
    (arrays, meta)
        The arrays by name and the metadata given to :func:`write_cache`.

    Raises
    ------
    CacheError
        If the directory or a file is missing, ``meta.json`` is not a cache record of a
        supported version, ``arrays.npz`` does not match its checksum (truncated or
        corrupted) or cannot be read without pickle, or an expected field differs; the
        message names the field, e.g. ``cache was computed for another grammar
        (grammar_sha256 differs)``.

    Notes
    -----
    O(total array bytes).  Checks integrity (the checksum) and the expected fields; what
    the arrays mean is checked by their owner (``TokenClasses.load``).

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> write_cache(d, {"x": np.arange(3)}, {"grammar_sha256": "ab"})
    >>> read_cache(d, expect={"grammar_sha256": "cd"})
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.CacheError: cache was computed for another grammar (grammar_sha256 differs)
    """
    root = Path(directory)
    if not root.is_dir():
        raise CacheError(f"cache directory {str(root)!r} does not exist")
    meta_path = root / _META
    arrays_path = root / _ARRAYS
    try:
        raw_meta = meta_path.read_bytes()
    except FileNotFoundError:
        raise CacheError(f"{str(root)!r} is not a cache directory: {_META} is missing") from None
    except OSError as exc:
        raise CacheError(f"cannot read {str(meta_path)!r}: {exc}") from None
    try:
        record = json.loads(raw_meta.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CacheError(f"{str(meta_path)!r} is corrupted: not valid JSON") from None
    if not isinstance(record, dict) or record.get("format") != CACHE_FORMAT:
        raise CacheError(f"{str(meta_path)!r} is not a {CACHE_FORMAT} metadata file")
    version = record.get("version")
    if version != CACHE_VERSION:
        raise CacheError(
            f"cache format version {version!r} is not supported (expected {CACHE_VERSION}); "
            "recompute the cache"
        )
    digest = record.get("npz_sha256")
    user_meta = record.get("meta")
    if not isinstance(digest, str) or not isinstance(user_meta, dict):
        raise CacheError(f"{str(meta_path)!r} is corrupted: checksum or metadata missing")
    if expect:
        for key, want in expect.items():
            if key not in user_meta:
                raise CacheError(f"cache metadata lacks the field {key!r}; recompute the cache")
            if user_meta[key] != want:
                raise CacheError(f"cache was computed for {_describe(key)} ({key} differs)")
    try:
        payload = arrays_path.read_bytes()
    except FileNotFoundError:
        raise CacheError(f"cache {str(root)!r} is incomplete: {_ARRAYS} is missing") from None
    except OSError as exc:
        raise CacheError(f"cannot read {str(arrays_path)!r}: {exc}") from None
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CacheError(
            f"{str(arrays_path)!r} is corrupted or truncated (checksum mismatch, {len(payload)} bytes)"
        )
    arrays: dict[str, np.ndarray] = {}
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            for key in npz.files:
                arrays[key] = np.array(npz[key])
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise CacheError(f"{str(arrays_path)!r} cannot be read safely: {exc}") from None
    return arrays, dict(user_meta)


def _describe(key: str) -> str:
    lowered = key.lower()
    for word, what in (
        ("grammar", "another grammar"),
        ("vocab", "another vocabulary"),
        ("tokenizer", "another tokenizer"),
        ("algorithm", "another algorithm version"),
    ):
        if word in lowered:
            return what
    return "other inputs"
