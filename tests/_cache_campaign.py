"""The cache-corruption campaign: corrupted ``TokenClasses`` caches, each loaded in a child process.

A real cache is written for each *subject* (a small real grammar with the Llama-3
vocabulary, and a synthetic grammar over a small vocabulary with holes, padding, special
and stop tokens); then corrupted variants of it are built, one family at a time:

``zip bytes``
    bytes of ``arrays.npz`` flipped, the checksum left stale (or recomputed);
``npy header`` / ``npy data``
    a member's header rewritten (dtype, shape up to 2^40, order, lengths, magic, version)
    or its array values changed, the checksum recomputed;
``truncation``
    either file cut short, with and without a matching checksum;
``members``
    members renamed, swapped, dropped, duplicated, added, compressed, a zip bomb, a bare
    ``.npy``, an empty archive;
``json``
    every field of ``meta.json`` replaced by hostile values (wrong types, 1e999, NaN,
    huge integers, 100,000-deep nesting, 2 MiB strings), removed, duplicated; the file
    truncated, prefixed, suffixed, made invalid UTF-8;
``arrays``
    the arrays rewritten with every invariant intact (a member moved, classes merged or
    split, a valid token made invalid and back, classes renumbered, another
    representative, another grammar's cache with this one's fingerprints);
``file type``
    a file replaced by a FIFO, a link to a device, a directory, a dangling link, a link
    loop, a sparse 16 GiB file, an empty file, no file; the directory replaced by a file.

Each variant is loaded once per verification level (``none``, ``sample``, ``all``) in a
forked child with an address-space limit and a timeout.  Outcomes: ``refused`` (a
``CacheError``), ``identical`` (loaded, arrays equal to the original), ``equivalent``
(loaded, arrays differ, but every loaded class lies inside one original class and the
loaded invalid class inside the original one: the expanded masks are the same),
``wrong`` (loaded, and some mask would differ), ``untyped`` (any other exception),
``hang`` (killed at the timeout) and ``crash`` (the child died).  The oracle of ``wrong`` is
the original classes, which the engine tests check against XGrammar's full-vocabulary masks.

Usage (from the repository root, with the worktree on ``PYTHONPATH``)::

    python tests/_cache_campaign.py            # the full campaign, both subjects
    python tests/_cache_campaign.py --short    # the few dozen variants of the default tests
    python tests/_cache_campaign.py --json campaign.json
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import hashlib
import io
import json
import os
import random
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip import CacheError, TokenClasses, Vocabulary
from formalgram_cfgzip.cache import read_cache, write_cache
from formalgram_cfgzip.compress import compress, number_classes
from formalgram_cfgzip.search.driver import token_table

MODES: tuple[str, ...] = ("none", "sample", "all")
OUTCOMES: tuple[str, ...] = ("refused", "identical", "equivalent", "wrong", "untyped", "hang", "crash")
SYNTHETIC = 'root ::= "(" root ")" | "[" list "]" | word\nlist ::= word | word "," list\nword ::= [a-c]+'
SYNTHETIC_OTHER = (
    'root ::= "(" root ")" | "[" list "]" | word\nlist ::= word | word ";" list\nword ::= [a-c]+'
)
# the real grammars kept in the repository (tests/data/grammars): the full run needs no shared corpus
GRAMMARS = Path(__file__).resolve().parent / "data" / "grammars"


def synthetic_vocab() -> Vocabulary:
    """Text tokens, a hole, an empty token, a special and a stop token, two padding ids."""
    tokens: list[bytes | None] = [
        b"(", b"((", b")", b"))", b"[", b"]", b",", b"a", b"b", b"c", b"ab", b"ba", b"abc", b"a,",
        b",b", b"a]", b"(a)", b"[a", b",a,", None, b"", b"<tool>", b"</s>", b"y", b";", b"()",
    ]  # fmt: skip
    return Vocabulary(tokens, special_ids=[21, 22], stop_ids=[22], logit_width=len(tokens) + 2)


@dataclass
class Subject:
    """A grammar, its vocabulary, its classes, and another grammar's classes (for swaps)."""

    name: str
    grammar: str
    vocab: Vocabulary
    classes: TokenClasses
    other: TokenClasses


def subjects(short: bool) -> list[Subject]:
    """The synthetic subject, and (not in the short campaign) arithmetic.gbnf with Llama-3."""
    v = synthetic_vocab()
    out = [
        Subject(
            "synthetic",
            SYNTHETIC,
            v,
            compress(SYNTHETIC, v, progress=False),
            compress(SYNTHETIC_OTHER, v, progress=False),
        )
    ]
    if not short:
        llama3 = Vocabulary.builtin("llama3")
        arith = (GRAMMARS / "llama_cpp" / "arithmetic.gbnf").read_text(encoding="utf-8")
        other = (GRAMMARS / "llama_cpp" / "list.gbnf").read_text(encoding="utf-8")
        out.append(
            Subject(
                "arithmetic+llama3",
                arith,
                llama3,
                compress(arith, llama3, progress=False),
                compress(other, llama3, progress=False),
            )
        )
    return out


# ---------------------------------------------------------------------------------------
# building variants

Build = Callable[[Path], None]  # corrupts a copy of the valid cache directory in place


@dataclass(frozen=True)
class Variant:
    family: str
    name: str
    build: Build


def _record(d: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((d / "meta.json").read_text())
    return out


def _fix_checksum(d: Path, names: list[str] | None = None) -> None:
    payload = (d / "arrays.npz").read_bytes()
    rec = _record(d)
    rec["npz_sha256"] = hashlib.sha256(payload).hexdigest()
    rec["npz_size"] = len(payload)
    if names is not None:
        rec["arrays"] = names
    (d / "meta.json").write_text(json.dumps(rec, indent=2, sort_keys=True))


def _members(d: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(d / "arrays.npz") as zf:
        return [(info.filename, zf.read(info)) for info in zf.infolist()]


def _write_zip(d: Path, items: list[tuple[str, bytes]], method: int = zipfile.ZIP_STORED) -> None:
    buf = io.BytesIO()
    with _quiet(), zipfile.ZipFile(buf, "w", compression=method) as zf:  # duplicate names warn
        for name, data in items:
            zf.writestr(name, data)
    (d / "arrays.npz").write_bytes(buf.getvalue())


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _npy(header: str, data: bytes, version: bytes = b"\x01\x00") -> bytes:
    """A .npy member with ``header`` (the dict text) padded as numpy pads it."""
    width = 2 if version == b"\x01\x00" else 4
    text = header.encode("latin1")
    pad = 64 - (8 + width + len(text) + 1) % 64
    text += b" " * (pad % 64) + b"\n"
    return b"\x93NUMPY" + version + len(text).to_bytes(width, "little") + text + data


def _header(descr: str = "<i4", fortran: str = "False", shape: str = "(12,)") -> str:
    return f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"


def _replace_member(d: Path, member: str, data: bytes) -> None:
    items = [(n, data if n == member else b) for n, b in _members(d)]
    _write_zip(d, items)
    _fix_checksum(d)


def _data_of(d: Path, member: str) -> tuple[bytes, bytes]:
    """(header bytes, data bytes) of a member."""
    raw = dict(_members(d))[member]
    length = int.from_bytes(raw[8:10], "little")
    return raw[: 10 + length], raw[10 + length :]


def zip_byte_variants(rng: random.Random, size: int, count: int) -> list[Variant]:
    out: list[Variant] = []
    for i in range(count):
        pos = rng.randrange(size)
        bit = 1 << rng.randrange(8)
        fix = i % 3 != 0  # two in three reach the archive reader

        def build(d: Path, pos: int = pos, bit: int = bit, fix: bool = fix) -> None:
            data = bytearray((d / "arrays.npz").read_bytes())
            data[pos] ^= bit
            (d / "arrays.npz").write_bytes(bytes(data))
            if fix:
                _fix_checksum(d)

        out.append(Variant("zip bytes", f"flip bit {bit:#x} at {pos}{' +checksum' if fix else ''}", build))
    return out


def npy_header_variants(n_classes: int, width: int) -> list[Variant]:
    out: list[Variant] = []
    for member, n in (("token_class.npy", width), ("representatives.npy", n_classes)):
        cases: list[tuple[str, str, bytes]] = []
        for descr in ("<i8", ">i4", "<u4", "<f4", "|b1", "|S4", "<U1", "<i2", "|O", "|V4", "<i3", "<M8"):
            cases.append((f"descr {descr}", _header(descr=descr, shape=f"({n},)"), b"\x01\x00"))
        for shape in (
            "(0,)", "(1,)", f"({n - 1},)", f"({n + 1},)", f"({2 * n},)", f"({n}, 1)", "()", "(-1,)",
            f"({1 << 31},)", f"({1 << 32},)", f"({1 << 36},)", f"({1 << 40},)", f"({1 << 62}, {1 << 62})",
            f"({'9' * 30},)", f"({n}, 0)",
        ):  # fmt: skip
            cases.append((f"shape {shape[:24]}", _header(shape=shape), b"\x01\x00"))
        cases.append(("fortran order", _header(fortran="True", shape=f"({n},)"), b"\x01\x00"))
        cases.append(("fortran 1", _header(fortran="1", shape=f"({n},)"), b"\x01\x00"))
        cases.append(("version 2.0", _header(shape=f"({n},)"), b"\x02\x00"))
        cases.append(("version 3.0", _header(shape=f"({n},)"), b"\x03\x00"))
        cases.append(
            ("keys reordered", f"{{'shape': ({n},), 'fortran_order': False, 'descr': '<i4', }}", b"\x01\x00")
        )
        cases.append(("literal to evaluate", _header(shape="(" + "-" * 9000 + f"{n},)"), b"\x01\x00"))
        cases.append(("not a dict", "[1, 2, 3]", b"\x01\x00"))
        for label, header, version in cases:

            def build(d: Path, member: str = member, header: str = header, version: bytes = version) -> None:
                _, data = _data_of(d, member)
                _replace_member(d, member, _npy(header, data, version))

            out.append(Variant("npy header", f"{member[:-4]}: {label}", build))
        for label, mangle in (
            ("magic", lambda raw: b"\x93NUMPZ" + raw[6:]),
            ("header length +1", lambda raw: raw[:8] + (int.from_bytes(raw[8:10], "little") + 1).to_bytes(2, "little") + raw[10:]),
            ("header length -1", lambda raw: raw[:8] + (int.from_bytes(raw[8:10], "little") - 1).to_bytes(2, "little") + raw[10:]),
            ("header length 65535", lambda raw: raw[:8] + b"\xff\xff" + raw[10:]),
            ("header length 0", lambda raw: raw[:8] + b"\x00\x00" + raw[10:]),
            ("no newline", lambda raw: raw.replace(b" \n", b"  ", 1)),
        ):  # fmt: skip

            def build2(d: Path, member: str = member, mangle: Callable[[bytes], bytes] = mangle) -> None:
                raw = dict(_members(d))[member]
                _replace_member(d, member, mangle(raw))

            out.append(Variant("npy header", f"{member[:-4]}: {label}", build2))
    return out


def npy_data_variants(rng: random.Random, sub: Subject, count: int) -> list[Variant]:
    tc = sub.classes
    n, width = tc.num_classes, sub.vocab.logit_width
    out: list[Variant] = []
    values = [-1, -(1 << 31), (1 << 31) - 1, n, n - 1, 0, width, width - 1]
    for member, size in (("token_class.npy", width), ("representatives.npy", n)):
        for v in values:
            for where in (0, size - 1, rng.randrange(size)):

                def build(d: Path, member: str = member, v: int = v, where: int = where) -> None:
                    head, data = _data_of(d, member)
                    arr = np.frombuffer(data, dtype="<i4").copy()
                    arr[where] = v
                    _replace_member(d, member, head + arr.tobytes())

                out.append(Variant("npy data", f"{member[:-4]}[{where}] = {v}", build))
    for _ in range(count):
        member = rng.choice(["token_class.npy", "representatives.npy"])
        flips = rng.randrange(1, 4)
        seed = rng.randrange(1 << 30)

        def build2(d: Path, member: str = member, flips: int = flips, seed: int = seed) -> None:
            local = random.Random(seed)
            head, data = _data_of(d, member)
            buf = bytearray(data)
            for _ in range(flips):
                buf[local.randrange(len(buf))] ^= 1 << local.randrange(8)
            _replace_member(d, member, head + bytes(buf))

        out.append(Variant("npy data", f"{member[:-4]}: {flips} random bit flips (seed {seed})", build2))
    return out


def truncation_variants(size: int, meta_size: int) -> list[Variant]:
    out: list[Variant] = []
    for cut in sorted({0, 1, 4, 22, 30, 64, 100, size // 3, size // 2, size - 22, size - 1}):
        for fix in (False, True):

            def build(d: Path, cut: int = cut, fix: bool = fix) -> None:
                data = (d / "arrays.npz").read_bytes()
                (d / "arrays.npz").write_bytes(data[:cut])
                if fix:
                    _fix_checksum(d)

            out.append(Variant("truncation", f"arrays.npz cut at {cut}{' +checksum' if fix else ''}", build))
    for cut in sorted({0, 1, 10, meta_size // 2, meta_size - 2}):

        def build2(d: Path, cut: int = cut) -> None:
            data = (d / "meta.json").read_bytes()
            (d / "meta.json").write_bytes(data[:cut])

        out.append(Variant("truncation", f"meta.json cut at {cut}", build2))
    return out


def member_variants() -> list[Variant]:
    def rename(mapping: dict[str, str]) -> Build:
        def build(d: Path) -> None:
            _write_zip(d, [(mapping.get(n, n), b) for n, b in _members(d)])
            _fix_checksum(d)

        return build

    def edit(
        change: Callable[[list[tuple[str, bytes]]], list[tuple[str, bytes]]], method: int = zipfile.ZIP_STORED
    ) -> Build:
        def build(d: Path) -> None:
            _write_zip(d, change(_members(d)), method)
            _fix_checksum(d)

        return build

    def raw(payload: Callable[[Path], bytes], names: list[str] | None = None) -> Build:
        def build(d: Path) -> None:
            (d / "arrays.npz").write_bytes(payload(d))
            _fix_checksum(d, names)

        return build

    def bare_npy(d: Path) -> bytes:
        return dict(_members(d))["token_class.npy"]

    def bomb(d: Path) -> bytes:  # each member inflates to 256 MiB; written in 1 MiB pieces
        buf = io.BytesIO()
        zero = bytes(1 << 20)
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for name in ("representatives.npy", "token_class.npy"):
                with zf.open(zipfile.ZipInfo(name), "w", force_zip64=True) as fh:
                    fh.write(_npy(_header(shape=f"({1 << 26},)"), b""))
                    for _ in range(256):
                        fh.write(zero)
        return buf.getvalue()

    def empty_zip(d: Path) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w"):
            pass
        return buf.getvalue()

    def pickled(d: Path) -> bytes:
        buf = io.BytesIO()
        np.save(buf, np.array([{"a": 1}] * 3, dtype=object), allow_pickle=True)
        items = [(n, buf.getvalue() if n == "token_class.npy" else b) for n, b in _members(d)]
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as zf:
            for n, b in items:
                zf.writestr(n, b)
        return out.getvalue()

    def nested(d: Path) -> bytes:
        inner = (d / "arrays.npz").read_bytes()
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as zf:
            zf.writestr("token_class.npy", inner)
            zf.writestr("representatives.npy", inner)
        return out.getvalue()

    def commented(d: Path) -> bytes:
        return (d / "arrays.npz").read_bytes() + b"trailing bytes after the archive"

    return [
        Variant("members", "names swapped", rename({"token_class.npy": "representatives.npy", "representatives.npy": "token_class.npy"})),
        Variant("members", "renamed .npz", rename({"token_class.npy": "token_class.npz"})),
        Variant("members", "renamed upper", rename({"token_class.npy": "TOKEN_CLASS.npy"})),
        Variant("members", "path traversal name", rename({"token_class.npy": "../token_class.npy"})),
        Variant("members", "dropped", edit(lambda items: items[:1])),
        Variant("members", "all dropped", edit(lambda items: [])),
        Variant("members", "duplicated", edit(lambda items: [*items, items[0]])),
        Variant("members", "extra member", edit(lambda items: [*items, ("extra.npy", items[0][1])])),
        Variant("members", "directory entry", edit(lambda items: [*items, ("sub/", b"")])),
        Variant("members", "reordered", edit(lambda items: items[::-1])),
        Variant("members", "deflated", edit(lambda items: items, zipfile.ZIP_DEFLATED)),
        Variant("members", "bzip2", edit(lambda items: items, zipfile.ZIP_BZIP2)),
        Variant("members", "lzma", edit(lambda items: items, zipfile.ZIP_LZMA)),
        Variant("members", "zip bomb (2 x 256 MiB deflated)", raw(bomb)),
        Variant("members", "bare .npy", raw(bare_npy)),
        Variant("members", "empty archive", raw(empty_zip)),
        Variant("members", "pickled object array", raw(pickled)),
        Variant("members", "archive inside the archive", raw(nested)),
        Variant("members", "bytes after the archive", raw(commented)),
        Variant("members", "record names an extra array", raw(lambda d: (d / "arrays.npz").read_bytes(), ["extra", "representatives", "token_class"])),
    ]  # fmt: skip


_HOSTILE_JSON: tuple[tuple[str, str], ...] = (
    ("null", "null"),
    ("true", "true"),
    ("0", "0"),
    ("-1", "-1"),
    ("1", "1"),
    ("2^64", "18446744073709551616"),
    ("5000 digits", "9" * 5000),
    ("1e999", "1e999"),
    ("-1e999", "-1e999"),
    ("NaN", "NaN"),
    ("-Infinity", "-Infinity"),
    ("-0.0", "-0.0"),
    ("0.5", "0.5"),
    ("string", '"x"'),
    ("empty string", '""'),
    ("lone surrogate", '"\\ud800"'),
    ("list", "[1, 2]"),
    ("object", '{"a": 1}'),
    ("100,000 deep", "[" * 100_000 + "]" * 100_000),
    ("2 MiB string", '"' + "a" * (2 << 20) + '"'),
)
_JSON_PATHS: tuple[tuple[str, ...], ...] = (
    ("format",),
    ("version",),
    ("npz_sha256",),
    ("npz_size",),
    ("arrays",),
    ("meta",),
    ("meta", "kind"),
    ("meta", "algorithm"),
    ("meta", "grammar_sha256"),
    ("meta", "grammar_text_sha256"),
    ("meta", "vocab_sha256"),
    ("meta", "vocab_name"),
    ("meta", "logit_width"),
    ("meta", "num_classes"),
    ("meta", "invalid_class"),
    ("meta", "stop_class"),
    ("meta", "stats"),
    ("meta", "stats", "specialized"),
)
_SENTINEL = "\u0001hostile\u0001"


def json_variants(short: bool) -> list[Variant]:
    out: list[Variant] = []
    values = _HOSTILE_JSON[::4] if short else _HOSTILE_JSON
    paths = _JSON_PATHS[::3] if short else _JSON_PATHS
    for path in paths:
        for label, text in values:

            def build(d: Path, path: tuple[str, ...] = path, text: str = text) -> None:
                rec = _record(d)
                node = rec
                for key in path[:-1]:
                    node = node[key]
                node[path[-1]] = _SENTINEL
                dumped = json.dumps(rec, sort_keys=True).replace(json.dumps(_SENTINEL), text)
                (d / "meta.json").write_text(dumped)

            out.append(Variant("json", f"{'.'.join(path)} = {label}", build))

        def delete(d: Path, path: tuple[str, ...] = path) -> None:
            rec = _record(d)
            node = rec
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]
            (d / "meta.json").write_text(json.dumps(rec))

        out.append(Variant("json", f"{'.'.join(path)} removed", delete))

    def text_edit(change: Callable[[bytes], bytes]) -> Build:
        def build(d: Path) -> None:
            (d / "meta.json").write_bytes(change((d / "meta.json").read_bytes()))

        return build

    out += [
        Variant(
            "json",
            "duplicate key",
            text_edit(lambda b: b.replace(b'"format"', b'"format": "x", "format"', 1)),
        ),
        Variant("json", "byte order mark", text_edit(lambda b: b"\xef\xbb\xbf" + b)),
        Variant("json", "trailing garbage", text_edit(lambda b: b + b"}")),
        Variant("json", "invalid UTF-8", text_edit(lambda b: b.replace(b'"meta"', b'"m\xffta"', 1))),
        Variant("json", "UTF-16", text_edit(lambda b: b.decode().encode("utf-16"))),
        Variant("json", "compact (same record)", text_edit(lambda b: json.dumps(json.loads(b)).encode())),
        Variant("json", "top level list", text_edit(lambda b: b"[" + b + b"]")),
    ]
    return out


def _codes(tc: TokenClasses) -> npt.NDArray[np.int64]:
    toks = token_table(tc.vocab)
    codes = tc.token_class[toks.ids].astype(np.int64)
    codes[codes == tc.invalid_class] = -1
    return codes


def _save_arrays(
    d: Path,
    token_class: npt.NDArray[np.int32],
    reps: npt.NDArray[np.int32],
    meta_edit: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    arrays, meta = read_cache(d)
    arrays["token_class"], arrays["representatives"] = token_class.astype(np.int32), reps.astype(np.int32)
    meta["num_classes"] = int(reps.shape[0])
    if meta_edit is not None:
        meta_edit(meta)
    write_cache(d, arrays, meta)


def array_variants(rng: random.Random, sub: Subject, count: int) -> list[Variant]:
    """Rewritten arrays that keep every invariant (most numbered as compress numbers them)."""
    tc = sub.classes
    vocab = sub.vocab
    toks = token_table(vocab)
    codes = _codes(tc)
    text_classes = sorted(set(codes[codes >= 0].tolist()))
    sizes = np.bincount(codes[codes >= 0])
    out: list[Variant] = []

    def canonical(new_codes: npt.NDArray[np.int64]) -> Build:
        def build(d: Path) -> None:
            token_class, reps, stop, inv = number_classes(vocab, toks, new_codes)

            def edit(meta: dict[str, Any]) -> None:
                meta["invalid_class"], meta["stop_class"] = inv, stop

            _save_arrays(d, token_class, reps, edit)

        return build

    for i in range(count):
        new = codes.copy()
        kind = i % 5
        if kind == 0:  # one member moved to another class
            src = rng.choice([c for c in text_classes if sizes[c] > 1] or text_classes)
            dst = rng.choice([c for c in text_classes if c != src])
            new[rng.choice(np.flatnonzero(codes == src).tolist())] = dst
            label = "member moved"
        elif kind == 1:  # two classes merged
            a, b = rng.sample(text_classes, 2)
            new[codes == b] = a
            label = "classes merged"
        elif kind == 2:  # a class split in two
            big = [c for c in text_classes if sizes[c] > 1]
            if not big:
                continue
            c = rng.choice(big)
            members = np.flatnonzero(codes == c)
            new[members[rng.randrange(len(members))]] = int(codes.max()) + 1
            label = "class split"
        elif kind == 3:  # a valid token made invalid
            new[rng.choice(np.flatnonzero(codes >= 0).tolist())] = -1
            label = "valid token made invalid"
        else:  # an invalid text token put in a text class
            invalid = np.flatnonzero(codes < 0)
            if not invalid.size:
                continue
            new[rng.choice(invalid.tolist())] = rng.choice(text_classes)
            label = "invalid token made valid"
        out.append(Variant("arrays", f"{label} #{i}", canonical(new)))

    def relabel(d: Path) -> None:  # two text classes swap ids, representatives with them
        a, b = (
            int(x)
            for x in rng.sample(
                [c for c in range(tc.num_classes) if c not in (tc.invalid_class, tc.stop_class)], 2
            )
        )
        cls = tc.token_class.copy()
        cls[tc.token_class == a], cls[tc.token_class == b] = b, a
        reps = tc.representatives.copy()
        reps[[a, b]] = reps[[b, a]]
        _save_arrays(d, cls, reps)

    def permuted(d: Path) -> None:  # every class renumbered (stop and invalid included)
        perm = np.random.default_rng(rng.randrange(1 << 30)).permutation(tc.num_classes)
        cls = perm[tc.token_class]
        reps = np.empty_like(tc.representatives)
        reps[perm] = tc.representatives

        def edit(meta: dict[str, Any]) -> None:
            meta["invalid_class"] = int(perm[tc.invalid_class]) if tc.invalid_class >= 0 else -1
            meta["stop_class"] = int(perm[tc.stop_class]) if tc.stop_class >= 0 else -1

        _save_arrays(d, cls, reps, edit)

    def other_rep(d: Path) -> None:  # a class represented by a longer member
        big = [
            c
            for c in range(tc.num_classes)
            if c not in (tc.invalid_class, tc.stop_class) and int(np.count_nonzero(tc.token_class == c)) > 1
        ]
        c = rng.choice(big)
        reps = tc.representatives.copy()
        reps[c] = [t for t in tc.members(c).tolist() if t != reps[c]][-1]
        _save_arrays(d, tc.token_class, reps)

    def other_grammar(d: Path) -> None:  # another grammar's classes under this grammar's fingerprints
        o = sub.other

        def edit(meta: dict[str, Any]) -> None:
            meta["invalid_class"], meta["stop_class"] = o.invalid_class, o.stop_class
            meta["stats"]["specialized"] = o.stats["specialized"]

        _save_arrays(d, o.token_class, o.representatives, edit)

    def same(d: Path) -> None:  # the same arrays, written again
        _save_arrays(d, tc.token_class, tc.representatives)

    out += [
        Variant("arrays", "two classes swap ids", relabel),
        Variant("arrays", "all classes renumbered", permuted),
        Variant("arrays", "a longer representative", other_rep),
        Variant("arrays", "another grammar's classes", other_grammar),
        Variant("arrays", "rewritten unchanged", same),
    ]
    return out


def file_type_variants() -> list[Variant]:
    out: list[Variant] = []
    for name in ("arrays.npz", "meta.json"):

        def fifo(d: Path, name: str = name) -> None:
            (d / name).unlink()
            os.mkfifo(d / name)

        def link(target: str, name: str = name) -> Build:
            def build(d: Path) -> None:
                (d / name).unlink()
                (d / name).symlink_to(target)

            return build

        def directory(d: Path, name: str = name) -> None:
            (d / name).unlink()
            (d / name).mkdir()

        def loop(d: Path, name: str = name) -> None:
            (d / name).unlink()
            (d / name).symlink_to(d / name)

        def sparse(d: Path, name: str = name) -> None:
            with (d / name).open("r+b") as fh:
                fh.truncate(16 << 30)

        def empty(d: Path, name: str = name) -> None:
            (d / name).write_bytes(b"")

        def missing(d: Path, name: str = name) -> None:
            (d / name).unlink()

        def unreadable(d: Path, name: str = name) -> None:
            (d / name).chmod(0)  # refused unless the campaign runs as root (then it loads)

        out += [
            Variant("file type", f"{name}: FIFO", fifo),
            Variant("file type", f"{name}: link to /dev/zero", link("/dev/zero")),
            Variant("file type", f"{name}: link to /dev/urandom", link("/dev/urandom")),
            Variant("file type", f"{name}: link to /dev/null", link("/dev/null")),
            Variant("file type", f"{name}: link to /proc/self/mem", link("/proc/self/mem")),
            Variant("file type", f"{name}: directory", directory),
            Variant("file type", f"{name}: dangling link", link("/nonexistent/cache/file")),
            Variant("file type", f"{name}: link loop", loop),
            Variant("file type", f"{name}: sparse 16 GiB", sparse),
            Variant("file type", f"{name}: empty", empty),
            Variant("file type", f"{name}: missing", missing),
            Variant("file type", f"{name}: unreadable", unreadable),
        ]

    def dir_is_file(d: Path) -> None:
        shutil.rmtree(d)
        d.write_bytes(b"a file, not a cache directory")

    def dir_missing(d: Path) -> None:
        shutil.rmtree(d)

    out += [
        Variant("file type", "directory is a file", dir_is_file),
        Variant("file type", "directory missing", dir_missing),
    ]
    return out


def variants(sub: Subject, base: Path, short: bool, seed: int) -> list[Variant]:
    rng = random.Random(f"{seed}:{sub.name}")
    size = (base / "arrays.npz").stat().st_size
    meta_size = (base / "meta.json").stat().st_size
    n, width = sub.classes.num_classes, sub.vocab.logit_width
    if short:
        picked: list[Variant] = []
        picked += zip_byte_variants(rng, size, 4)
        picked += npy_header_variants(n, width)[::12]
        picked += npy_data_variants(rng, sub, 2)[::8]
        picked += truncation_variants(size, meta_size)[::6]
        picked += member_variants()[::4]
        picked += json_variants(short=True)[::4]
        picked += array_variants(rng, sub, 5)
        picked += file_type_variants()[::3]
        return picked
    return (
        zip_byte_variants(rng, size, 60)
        + npy_header_variants(n, width)
        + npy_data_variants(rng, sub, 30)
        + truncation_variants(size, meta_size)
        + member_variants()
        + json_variants(short=False)
        + array_variants(rng, sub, 40)
        + file_type_variants()
    )


# ---------------------------------------------------------------------------------------
# loading in a child process


def judge(sub: Subject, loaded: TokenClasses) -> str:
    """identical / equivalent / wrong: the loaded classes against the original ones."""
    tc = sub.classes
    if (
        np.array_equal(loaded.token_class, tc.token_class)
        and np.array_equal(loaded.representatives, tc.representatives)
        and (loaded.invalid_class, loaded.stop_class) == (tc.invalid_class, tc.stop_class)
    ):
        return "identical"
    new = loaded.token_class.astype(np.int64)
    old = tc.token_class.astype(np.int64)
    inside_one = np.unique(new * (int(old.max()) + 1) + old).size == np.unique(new).size
    invalid_ok = loaded.invalid_class < 0 or bool(
        np.all(old[new == loaded.invalid_class] == tc.invalid_class)
    )
    stop_ok = (
        np.array_equal(new == loaded.stop_class, old == tc.stop_class)
        if tc.stop_class >= 0
        else loaded.stop_class < 0
    )
    return "equivalent" if inside_one and invalid_ok and stop_ok else "wrong"


def _vm_size() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


Loader = Callable[..., TokenClasses]


def run_child(
    sub: Subject,
    directory: Path,
    mode: str,
    timeout: float,
    memory: int,
    load: Loader = TokenClasses.load,
) -> dict[str, str]:
    """Load ``directory`` in a forked child under an address-space limit; its outcome and message.

    ``memory`` bytes may be added to the child's address space (beyond what it inherits).
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: load, judge, report, leave without cleanup
        status = 0
        try:
            os.close(r)
            faulthandler.disable()  # pytest's dump would be noise: the exit status tells the crash
            limit = _vm_size() + memory
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                loaded = load(directory, grammar=sub.grammar, vocab=sub.vocab, verify=mode, seed=0)
                result = {"outcome": judge(sub, loaded), "message": ""}
            except CacheError as exc:
                result = {"outcome": "refused", "message": str(exc)}
            except BaseException as exc:
                result = {"outcome": "untyped", "message": f"{type(exc).__name__}: {exc}"}
            result["message"] = result["message"][:400]
            os.write(w, json.dumps(result).encode())
        except BaseException:
            status = 3
        finally:
            os._exit(status)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    hung = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            hung = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if not ready:
            hung = True
            break
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    if hung:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return {"outcome": "hang", "message": f"killed after {timeout} s"}
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not chunks:
        return {"outcome": "crash", "message": f"child exit status {code}"}
    out: dict[str, str] = json.loads(b"".join(chunks))
    return out


# ---------------------------------------------------------------------------------------
# the campaign


@dataclass
class Report:
    rows: list[dict[str, str]] = field(default_factory=list)

    def counts(self, mode: str) -> Counter[str]:
        return Counter(row["outcome"] for row in self.rows if row["mode"] == mode)

    @property
    def variants(self) -> int:
        return len({(row["subject"], row["index"]) for row in self.rows})

    def failures(self) -> list[dict[str, str]]:
        """Rows that break the campaign's rules: untyped, hang, crash, and wrong masks with verify on."""
        return [
            row
            for row in self.rows
            if row["outcome"] in ("untyped", "hang", "crash")
            or (row["outcome"] == "wrong" and row["mode"] == "all")
        ]

    def table(self) -> str:
        lines = [f"{self.variants} variants, {len(self.rows)} loads", ""]
        lines.append(f"{'verify':8s}" + "".join(f"{o:>11s}" for o in OUTCOMES))
        for mode in MODES:
            c = self.counts(mode)
            if c:
                lines.append(f"{mode:8s}" + "".join(f"{c[o]:11d}" for o in OUTCOMES))
        lines.append("")
        fams = sorted({(row["subject"], row["family"]) for row in self.rows})
        lines.append(f"{'subject / family (verify=none)':40s}{'variants':>9s}  outcomes")
        for sub, fam in fams:
            rows = [
                r for r in self.rows if r["subject"] == sub and r["family"] == fam and r["mode"] == MODES[0]
            ]
            c = Counter(r["outcome"] for r in rows)
            lines.append(
                f"{sub + ' / ' + fam:40s}{len(rows):9d}  "
                + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
            )
        return "\n".join(lines)


def run_campaign(
    short: bool = False,
    seed: int = 0,
    modes: tuple[str, ...] = MODES,
    timeout: float = 60.0,
    memory: int = 1 << 30,
    progress: bool = False,
) -> Report:
    """Build every variant of every subject and load each under each verification level."""
    report = Report()
    with tempfile.TemporaryDirectory(prefix="cache-campaign-") as tmp:
        root = Path(tmp)
        for sub in subjects(short):
            base = root / f"{sub.name}-base"
            sub.classes.save(base)
            # warm the caches every child shares (fingerprint, token table, invariant data)
            TokenClasses.load(base, grammar=sub.grammar, vocab=sub.vocab)
            token_table(sub.vocab)
            for i, variant in enumerate(variants(sub, base, short, seed)):
                d = root / f"v{i}"
                shutil.copytree(base, d)
                variant.build(d)
                for mode in modes:
                    got = run_child(sub, d, mode, timeout, memory)
                    report.rows.append(
                        {
                            "subject": sub.name,
                            "index": str(i),
                            "family": variant.family,
                            "variant": variant.name,
                            "mode": mode,
                            **got,
                        }
                    )
                    if progress and got["outcome"] in ("untyped", "hang", "crash", "wrong"):
                        print(f"{sub.name} / {variant.name} / {mode}: {got}", file=sys.stderr)
                _remove(d)
    return report


def _remove(d: Path) -> None:
    if d.is_dir() and not d.is_symlink():
        shutil.rmtree(d, ignore_errors=True)  # removing a file needs no permission on the file
    else:
        with contextlib.suppress(OSError):
            d.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="the few dozen variants of the default tests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per load before it counts as a hang")
    ap.add_argument("--json", help="write every row (subject, family, variant, mode, outcome, message) here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = run_campaign(short=args.short, seed=args.seed, timeout=args.timeout, progress=True)
    print(report.table())
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report.rows, indent=1))
    bad = report.failures()
    for row in bad:
        print(f"FAIL {row}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
