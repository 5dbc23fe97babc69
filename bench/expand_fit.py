"""Fit the C expansion kernel's cost constants (``_cexpand.c``) on real decoding rows.

For each grammar of ``bench/peers.py`` that is available (its classes and native tables
kept under ``--cache-dir`` by ``python -m bench.native_bench --peers``, or computed here),
the distinct class rows of seeded walks (the peers' token walks and class walks of the
native engine, GLRMask left out) and the same rows with a few classes flipped are expanded
by every forced plan of the kernel (warm: the minimum of ``--runs`` calls, row cache off),
and each row's counts are taken from the token -> class map: dense classes whose rows are
OR-ed or AND-NOT-ed, tail classes and tokens listed, classes that differ from the previous
row.  Least squares then give the constants, per plan family:

* ``set`` / ``clear`` / ``delta`` (jointly): fixed + per dense row + per listed tail class +
  per listed tail token;
* ``split``: the same fixed and row costs, plus per class (unpacking) and per tail token
  (the word-by-word gather);
* ``gather``: fixed + per class + per logit index (one vocabulary: the last two folded);
* the choice's pass over the class row: the kernel's own choice against the same plan forced.

Printed: the constants as ``#define`` lines for ``_cexpand.c``, each family's median and
90th-percentile relative error, and how often the model's cheapest plan was the measured
cheapest one.

Run from the repository root::

    python -m bench.expand_fit --cache-dir DIR [--only go,c,sql] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.peers import CASES, case_source, load_case, record_peer_walks
from formalgram_cfgzip.expand._c_kernel import load_c_module
from formalgram_cfgzip.vocabulary import Vocabulary

Array = npt.NDArray[np.int32]


def class_rows(native: Any, walks: list[list[int]]) -> list[Array]:
    """The distinct class rows the native engine fills along the walks, in walk order."""
    seen: dict[bytes, Array] = {}
    for walk in walks:
        m = native.matcher()
        for tok in walk:
            cm = native.allocate_class_bitmask(1)
            m.fill_next_class_bitmask(cm, 0)
            seen.setdefault(cm.tobytes(), cm[0].copy())
            m.accept_token(tok)
    return list(seen.values())


def perturbed(rows: list[Array], classes: int, rng: np.random.Generator) -> list[Array]:
    """Each row with 1 %, 5 % or 20 % of its classes flipped (bits past the classes clear)."""
    out = []
    for i, r in enumerate(rows):
        bits = np.unpackbits(r.view(np.uint8), bitorder="little").astype(bool)
        flip = rng.random(classes) < (0.01, 0.05, 0.2)[i % 3]
        bits[:classes] ^= flip
        bits[classes:] = False
        out.append(np.packbits(bits, bitorder="little").view(np.int32).copy())
    return out


def best_us(fn: Any, runs: int) -> float:
    best = 1e18
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e9  # ns


def measure(tc: npt.NDArray[np.int32], classes: int, rows: list[Array], runs: int) -> list[dict[str, float]]:
    """Per row: the counts the model uses and the time of every forced plan (ns)."""
    module = load_c_module()
    assert module is not None, "needs the C kernel (a compiled build)"
    kernel = module.Kernel(tc, classes, 32 << 20, -1, 0, 1, False)
    n_rows = int(kernel.info()["large"])  # the classes every plan combines by rows (the largest)
    sizes = np.bincount(tc[tc >= 0], minlength=classes)
    order = np.argsort(-sizes, kind="stable")
    dense = np.zeros(classes, dtype=bool)
    dense[order[:n_rows]] = True
    small = ~dense & (sizes > 0)
    nw = (tc.shape[0] + 31) // 32
    out = np.zeros(nw, dtype=np.int32)
    base_out = np.zeros(nw, dtype=np.int32)
    records = []
    prev: Array | None = None
    for r in rows:
        bits = np.unpackbits(r.view(np.uint8), bitorder="little")[:classes].astype(bool)
        rec: dict[str, float] = {
            "C": classes,
            "nw": nw,
            "n_rows": n_rows,
            "big_on": float((bits & dense).sum()),
            "big_off": float((~bits & dense).sum()),
            "small_on": float((bits & small).sum()),
            "small_off": float((~bits & small).sum()),
            "tok_on": float(sizes[bits & small].sum()),
            "tok_off": float(sizes[~bits & small].sum()),
            "small_tokens": float(sizes[small].sum()),
        }
        for name, plan, big in (("gather", 0, -1), ("split", 1, -1), ("set_or", 2, 0), ("set_andn", 2, 1),
                                ("clear_or", 3, 0), ("clear_andn", 3, 1)):  # fmt: skip
            rec[name] = best_us(lambda p=plan, b=big, r=r: kernel.expand(r, out, None, None, p, b), runs)
        rec["auto"] = best_us(lambda r=r: kernel.expand(r, out), runs)
        rec["auto_plan"] = float(kernel.expand(r, out))
        if prev is not None:
            kernel.expand(prev, base_out, None, None, 0)
            pbits = np.unpackbits(prev.view(np.uint8), bitorder="little")[:classes].astype(bool)
            diff = bits ^ pbits
            rec["d_big"] = float((diff & dense).sum())
            rec["d_small"] = float((diff & small).sum())
            rec["d_tok"] = float(sizes[diff & small].sum())
            rec["delta"] = best_us(lambda p=prev, r=r: kernel.expand(r, out, base_out, p, 4), runs)
        records.append(rec)
        prev = r
    return records


def fit(records: list[dict[str, float]]) -> None:
    """Least squares per plan family; prints the constants and the model's errors."""
    # set / clear / delta: fixed + row * rows + class * listed + token * listed tokens
    a, y, fam = [], [], []
    for r in records:
        for name, rows_, listed, toks in (
            ("set_or", r["big_on"], r["small_on"], r["tok_on"]),
            ("set_andn", r["big_off"], r["small_on"], r["tok_on"]),
            ("clear_or", r["big_on"], r["small_off"], r["tok_off"]),
            ("clear_andn", r["big_off"], r["small_off"], r["tok_off"]),
        ):
            a.append([1.0, rows_ * r["nw"], listed, toks])
            y.append(r[name])
            fam.append(name)
        if "delta" in r:
            a.append([1.0, r["d_big"] * r["nw"], r["d_small"], r["d_tok"]])
            y.append(r["delta"])
            fam.append("delta")
    am, ym = np.asarray(a), np.asarray(y)
    w = 1.0 / np.maximum(ym, 200.0)  # relative error
    coef, *_ = np.linalg.lstsq(am * w[:, None], ym * w, rcond=None)
    fixed, row_word, per_class, per_token = coef
    err = np.abs(am @ coef - ym) / ym
    # gather: fixed + per class + per index (one vocabulary: the last two are one intercept)
    g = np.asarray([[r["C"], 1.0] for r in records])
    gy = np.asarray([r["gather"] for r in records])
    gather_coef, *_ = np.linalg.lstsq(g, gy, rcond=None)
    unpack = gather_coef[0]
    # split: fixed + rows as above, + unpack * C (the gather's per-class cost: the class count
    # and the tail tokens grow together, so one of them is taken from the gather) + per tail
    # token + the word loop's intercept
    b, z = [], []
    for r in records:
        rows_ = min(r["big_on"], r["big_off"])
        b.append([r["small_tokens"], 1.0])
        z.append(r["split"] - fixed - row_word * rows_ * r["nw"] - unpack * r["C"])
    split_coef, *_ = np.linalg.lstsq(np.asarray(b), np.asarray(z), rcond=None)
    tail_token, tail_fixed = split_coef
    nw = records[0]["nw"]
    print(f"# {len(records)} rows; fitted constants (ns):")
    print(
        f"#define NS_FIXED {max(fixed, 0.0):.1f}          /* with NS_INIT_WORD * nw folded in at nw = {nw:.0f} */"
    )
    print(f"#define NS_ROW_WORD {row_word:.4f}")
    print(f"#define NS_CLASS {per_class:.3f}")
    print(f"#define NS_TOKEN {per_token:.3f}")
    print(f"#define NS_UNPACK_CLASS {unpack:.3f}")
    print(f"#define NS_TAIL_TOKEN {tail_token:.3f}")
    print(f"#define NS_TAIL_WORD {tail_fixed / nw:.3f}   /* the split's intercept per token word */")
    print(
        f"#   gather: {gather_coef[1]:.0f} ns + {unpack:.3f} ns per class: NS_GATHER_TOKEN = (intercept - NS_FIXED) / (32 nw)"
    )
    for name in ("set_or", "set_andn", "clear_or", "clear_andn", "delta"):
        e = err[np.asarray(fam) == name]
        if e.size:
            print(
                f"#   {name:10} relative error: median {np.median(e):.2f}, p90 {np.percentile(e, 90):.2f} ({e.size} rows)"
            )
    scan = [
        (r["auto"] - r[{0: "gather", 1: "split"}.get(int(r["auto_plan"]), "")]) / max(1.0, r["C"] / 32)
        for r in records
        if int(r["auto_plan"]) in (0, 1)
    ]
    if scan:
        print(
            f"#   the choice's pass: {np.median(scan):.3f} ns per class word (median over {len(scan)} rows)"
        )
    best = [
        min(("gather", "split", "set_or", "set_andn", "clear_or", "clear_andn"), key=lambda k: r[k])
        for r in records
    ]
    auto = [
        r["auto"] / min(r[k] for k in ("gather", "split", "set_or", "set_andn", "clear_or", "clear_andn"))
        for r in records
    ]
    print(
        f"#   the kernel's own choice / the best forced plan: median {np.median(auto):.2f}, p90 {np.percentile(auto, 90):.2f}, max {max(auto):.2f}"
    )
    print(f"#   best forced plans: {dict(zip(*np.unique(best, return_counts=True), strict=True))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", help="the peers benchmark's cache (classes, tables)")
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--only", help="comma-separated case names (default: every available one)")
    ap.add_argument("--grammars", help="grammar folder (default ../shared/grammars)")
    ap.add_argument("--grammar", action="append", help="NAME=PATH, as for --peers")
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--save", help="write the measured rows here (JSON), to refit with --load")
    ap.add_argument("--load", help="fit the rows of an earlier --save instead of measuring")
    args = ap.parse_args()
    if args.load:
        fit(json.loads(Path(args.load).read_text()))
        return
    vocab = Vocabulary.builtin(args.vocab)
    root = Path(args.grammars or Path(__file__).resolve().parents[2] / "shared" / "grammars")
    overrides = dict(item.split("=", 1) for item in (args.grammar or []))
    only = set(args.only.split(",")) if args.only else None
    rng = np.random.default_rng(0)
    records: list[dict[str, float]] = []
    for case in CASES:
        if only and case.name not in only:
            continue
        src = case_source(case, root, overrides)
        if src is None:
            continue
        loaded = load_case(case, src[0], src[1], vocab, Path(args.cache_dir))
        native = loaded.native
        walks = record_peer_walks(native, None, args.walks, args.steps, 0, "tokens")
        walks += record_peer_walks(native, None, args.walks, args.steps, 1, "classes")
        rows = class_rows(native, walks)
        rows += perturbed(rows, native.engine_size, rng)
        tc = np.asarray(loaded.classes.token_class, dtype=np.int32)
        recs = measure(tc, native.engine_size, rows, args.runs)
        print(f"{case.name}: {native.engine_size} classes, {len(rows)} rows, {int(recs[0]['n_rows'])} dense")
        records += recs
    if args.save:
        Path(args.save).write_text(json.dumps(records))
    fit(records)


if __name__ == "__main__":
    main()
