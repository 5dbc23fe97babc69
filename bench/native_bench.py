"""Native mask engine against XGrammar over the class representatives, on the same walks.

The one benchmark of the native engine (``bench/online_bench.py`` covers XGrammar and
llguidance): the engine is compiled through ``engines.compile_grammar(..., engine="native")``
with its tables kept under ``--tables-dir``, and batches go through the engines' batch
protocol.

For each grammar (Llama-3 by default): the classes (``--classes-dir``, as
``bench/online_bench.py`` keeps them), the native tables (built once and kept under
``--tables-dir``), XGrammar over the full vocabulary and over the classes; walks recorded with
``bench.online_bench.record_walks`` (seeded, uniform over the allowed tokens); then every walk
is replayed in lockstep by all variants, each with its own matchers, and per step are timed:

* ``xgr-full``   XGrammar's full-vocabulary fill (the reference; also checked bit for bit);
* ``xgr-class``  XGrammar's class fill over the representatives;
* ``xgr-comp``   the same plus the expansion to the full vocabulary (the compressed adapter);
* ``nat-class``  the native class fill (walk of the graph-structured stack);
* ``nat-tok``    the native class fill plus the expansion (``MaskExpander``, row cache on);
* ``xgr-acc`` / ``nat-acc``  accepting the walk's token (XGrammar over classes / native).

Printed per grammar: medians (µs per step) and totals over all steps (ms: what a decoding run
pays), the ratios ``xgr-class / nat-class`` and ``xgr-comp / nat-tok`` (median and total),
and sizes: domain automaton, push trie, graph-structured stack nodes (largest at the end of a
walk), walk pairs per step.  Every native token mask is compared with XGrammar's full mask
and every class mask with XGrammar's class mask; mismatches are counted and the first few
are printed.

With ``--peers`` it compares the native engine with GLRMask and XGrammar instead, on the
grammars all three read (``bench/peers.py``: SynCode Go, C, Java, SQL, lark's json and csv,
the JSON schemas of ``tests/data/json_schemas``)::

    python -m bench.native_bench --peers --cache-dir DIR --walks 3 --steps 100 --repeats 3 --plot peers.png

Run from the repository root::

    python -m bench.native_bench --classes-dir /tmp/native-classes --tables-dir /tmp/native-classes \\
        --only c,JME_0,JME_32,go_syncode,sql_syncode,xml2rfc_v3 --walks 16 --steps 60 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.online_bench import GRAMMARS, load_or_compress, record_walks
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.engines import compile_full
from formalgram_cfgzip.engines import compile_grammar as compile_compressed
from formalgram_cfgzip.engines.native.matcher import NativeCompiled
from formalgram_cfgzip.vocabulary import Vocabulary

CASES = [
    ("c", "llama_cpp/c.gbnf"),
    ("JME_0", "derived/json_mode_eval_xgrammar/JME_0.gbnf"),
    ("JME_32", "derived/json_mode_eval_xgrammar/JME_32.gbnf"),
    ("go_syncode", "derived/lark_via_xgrammar/go_syncode.gbnf"),
    ("sql_syncode", "derived/lark_via_xgrammar/sql_syncode.gbnf"),
    ("xml2rfc_v3", "derived/lark_via_xgrammar/xml2rfc_v3.gbnf"),
]
COLUMNS = ["xgr-full", "xgr-class", "xgr-comp", "nat-class", "nat-tok", "xgr-acc", "nat-acc"]
PY_COLUMNS = ["py-class", "py-acc"]


def load_native(
    classes: TokenClasses, text: str, name: str, tables_dir: str | None
) -> tuple[NativeCompiled, float]:
    """The native engine through ``engines.compile_grammar(..., engine="native")``, its tables
    loaded from ``tables_dir/name-vocab-native`` or built (and saved there); and the seconds."""
    t0 = time.perf_counter()
    d = Path(tables_dir) / f"{name}-{classes.vocab.name}-native" if tables_dir else None
    compiled = compile_compressed(classes, text, engine="native", tables=d)
    assert isinstance(compiled, NativeCompiled)
    return compiled, time.perf_counter() - t0


def bits(row: Any) -> set[int]:
    return set(
        np.flatnonzero(np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")).tolist()
    )


def replay(
    full: Any,
    small: Any,
    native: NativeCompiled,
    walks: list[list[int]],
    check: bool,
    python: NativeCompiled | None = None,
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Per-step times of every variant over every walk (batch 1), plus sizes and mismatches.

    ``full`` / ``small`` ``None``: the XGrammar variants are left out; ``python``: the native
    engine's pure-Python kernel is timed too (``py-class``, ``py-acc``).
    """
    times: dict[str, list[float]] = {c: [] for c in COLUMNS + PY_COLUMNS}
    bm_full = native.allocate_token_bitmask(1)
    bm_comp = native.allocate_token_bitmask(1)
    bm_nat = native.allocate_token_bitmask(1)
    cm_x = small.allocate_class_bitmask(1) if small is not None else None
    cm_n = native.allocate_class_bitmask(1)
    pairs: list[int] = []
    nodes: list[int] = []
    class_pad = np.zeros(native.engine_words, dtype=np.int32)
    class_pad.view(np.uint8)[:] = np.packbits(
        np.arange(native.engine_words * 32) < native.engine_size, bitorder="little"
    )
    mismatches = {"class": 0, "token": 0, "accept": 0, "python": 0}
    examples: list[str] = []
    perf = time.perf_counter
    cm_p = native.allocate_class_bitmask(1)
    for w_index, walk in enumerate(walks):
        mf = full.matcher() if full is not None else None
        ms = small.matcher() if small is not None else None
        mn = native.matcher()
        mp = python.matcher() if python is not None else None
        mx_raw = getattr(mf, "_m", None)
        for step, tok in enumerate(walk):
            if mf is not None:
                t = perf()
                if mx_raw is not None:
                    mx_raw.fill_next_token_bitmask(bm_full, 0)
                else:
                    mf.fill_next_token_bitmask(bm_full, 0)
                times["xgr-full"].append(perf() - t)
            if ms is not None:
                t = perf()
                ms.fill_next_class_bitmask(cm_x, 0)
                times["xgr-class"].append(perf() - t)
                t = perf()
                ms.fill_next_token_bitmask(bm_comp, 0)
                times["xgr-comp"].append(perf() - t)
            t = perf()
            mn.fill_next_class_bitmask(cm_n, 0)
            times["nat-class"].append(perf() - t)
            pairs.append(mn.info()["last_pairs"])
            t = perf()
            mn.fill_next_token_bitmask(bm_nat, 0)
            times["nat-tok"].append(perf() - t)
            if mp is not None:
                t = perf()
                mp.fill_next_class_bitmask(cm_p, 0)
                times["py-class"].append(perf() - t)
                if not np.array_equal(cm_p, cm_n):
                    mismatches["python"] += 1
            # XGrammar sets some bits past the last class; only real classes are compared
            if check and cm_x is not None and not np.array_equal(cm_x[0] & class_pad, cm_n[0]):
                mismatches["class"] += 1
            if check and mf is not None and not np.array_equal(bm_full, bm_nat):
                mismatches["token"] += 1
                if len(examples) < 3:
                    a, b = bits(bm_full[0]), bits(bm_nat[0])
                    examples.append(
                        f"walk {w_index} step {step}: xgrammar-only {sorted(a - b)[:5]},"
                        f" native-only {sorted(b - a)[:5]}"
                    )
            ok = True
            if ms is not None:
                t = perf()
                ok = ms.accept_token(tok)
                times["xgr-acc"].append(perf() - t)
            if mf is not None:
                ok = mf.accept_token(tok) and ok
            t = perf()
            ok = mn.accept_token(tok) and ok
            times["nat-acc"].append(perf() - t)
            if mp is not None:
                t = perf()
                ok = mp.accept_token(tok) and ok
                times["py-acc"].append(perf() - t)
            if not ok:
                mismatches["accept"] += 1
                break
        nodes.append(mn.info()["nodes"])
    sizes = {
        "pairs_med": float(np.median(pairs)) if pairs else 0.0,
        "pairs_max": max(pairs) if pairs else 0,
        "nodes_max": max(nodes) if nodes else 0,
        "steps": len(times["nat-class"]),
        "mismatches": mismatches,
        "examples": examples,
    }
    return times, sizes


def replay_batch(small: Any, native: NativeCompiled, walks: list[list[int]], batch: int) -> dict[str, float]:
    """Median µs per step for the whole batch (``batch`` matchers replaying the walks in lockstep)."""
    cols = ["xgr-class", "xgr-comp", "nat-class", "nat-tok", "nat-acc"]
    times: dict[str, list[float]] = {c: [] for c in cols}
    cm_n = native.allocate_class_bitmask(batch)
    bm = native.allocate_token_bitmask(batch)
    cm_x = small.allocate_class_bitmask(batch) if small is not None else None
    perf = time.perf_counter
    for r in range(max(1, len(walks) // batch)):
        seqs = [walks[(r * batch + i) % len(walks)] for i in range(batch)]
        mn = [native.matcher() for _ in range(batch)]
        ms = [small.matcher() for _ in range(batch)] if small is not None else []
        for step in range(min(len(q) for q in seqs)):
            if small is not None:
                t = perf()
                small.fill_next_class_bitmask_batch(ms, cm_x)
                times["xgr-class"].append(perf() - t)
                t = perf()
                small.fill_next_token_bitmask_batch(ms, bm)
                times["xgr-comp"].append(perf() - t)
            t = perf()
            native.fill_next_class_bitmask_batch(mn, cm_n)
            times["nat-class"].append(perf() - t)
            t = perf()
            native.fill_next_token_bitmask_batch(mn, bm)
            times["nat-tok"].append(perf() - t)
            toks = [q[step] for q in seqs]
            for m, tok in zip(ms, toks, strict=False):  # ms is empty without XGrammar
                m.accept_token(tok)
            t = perf()
            native.accept_token_batch(mn, toks)
            times["nat-acc"].append(perf() - t)
    return {c: float(np.median(v)) * 1e6 if v else float("nan") for c, v in times.items()}


def record_class_walks(full: Any, classes: TokenClasses, n: int, steps: int, seed: int) -> list[list[int]]:
    """Walks over XGrammar's full-vocabulary masks that pick a uniformly random allowed *class*
    (then a random member): structure-heavy text, unlike ``record_walks``, whose uniform choice
    over tokens mostly continues identifiers and strings (most tokens are word pieces)."""
    rng = np.random.default_rng(seed)
    width = full.logit_width
    token_class = np.asarray(classes.token_class)
    stops = sorted(classes.vocab.stop_ids)
    bm = full.allocate_token_bitmask(1)
    walks = []
    for _ in range(n):
        m = full.matcher()
        seq: list[int] = []
        while len(seq) < steps:
            m.fill_next_token_bitmask(bm)
            allowed = np.flatnonzero(np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:width])
            allowed = allowed[~np.isin(allowed, stops)]
            if allowed.size == 0:
                break
            k = int(rng.choice(np.unique(token_class[allowed])))
            tok = int(rng.choice(allowed[token_class[allowed] == k]))
            m.accept_token(tok)
            seq.append(tok)
        walks.append(seq)
    return walks


def cached_walks(
    text: str, name: str, classes: TokenClasses, n: int, steps: int, walks_dir: str | None, mode: str
) -> tuple[list[list[int]], Any, float]:
    """Seeded walks (seed 0) over XGrammar's full vocabulary, kept as JSON under ``walks_dir``:
    ``record_walks`` of ``bench/online_bench.py`` (``mode="tokens"``) or :func:`record_class_walks`.

    Returns the walks, the full-vocabulary grammar (``None`` when the walks were loaded) and
    the seconds spent.
    """
    t0 = time.perf_counter()
    vocab = classes.vocab
    stem = f"walks-{name}-{vocab.name}-{n}x{steps}-seed0" + ("" if mode == "tokens" else f"-{mode}")
    f = Path(walks_dir) / f"{stem}.json" if walks_dir else None
    key = {"grammar_sha256": classes.grammar_sha256, "vocab_sha256": vocab.fingerprint()}
    if f is not None and f.exists():
        data = json.loads(f.read_text())
        if data.get("key") == key:
            return [list(map(int, w)) for w in data["walks"]], None, time.perf_counter() - t0
    full = compile_full(vocab, text)
    if mode == "tokens":
        walks = record_walks(full, n, steps, seed=0)
    else:
        walks = record_class_walks(full, classes, n, steps, seed=0)
    if f is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"key": key, "walks": walks}))
    return walks, full, time.perf_counter() - t0


def load_average() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "uptime unavailable"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--walks", type=int, default=16)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=1, help="replays of all walks (medians per replay)")
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--classes-dir", help="reuse (or save) TokenClasses here (as bench/online_bench.py)")
    ap.add_argument("--tables-dir", help="reuse (or save) the native tables here")
    ap.add_argument("--no-check", action="store_true", help="skip the mask comparisons")
    ap.add_argument("--walks-dir", help="reuse (or save) the recorded walks here (JSON)")
    ap.add_argument(
        "--walk-mode",
        default="tokens",
        choices=["tokens", "classes"],
        help="walks uniform over allowed tokens (bench/online_bench.py's) or over allowed classes",
    )
    ap.add_argument("--native-only", action="store_true", help="time the native engine only (no XGrammar)")
    ap.add_argument("--python", action="store_true", help="also time the pure-Python kernel")
    ap.add_argument("--batches", default="1", help="comma-separated batch sizes (batch > 1: medians only)")
    ap.add_argument(
        "--grammars", help="grammar folder (default $FORMALGRAM_GRAMMARS, else ../shared/grammars)"
    )
    peers = ap.add_argument_group("--peers: the native engine against GLRMask and XGrammar (bench/peers.py)")
    peers.add_argument("--peers", action="store_true", help="run the comparison with GLRMask and XGrammar")
    peers.add_argument("--cache-dir", help="keep classes, tables, GLRMask constraints and walks here")
    peers.add_argument("--grammar", action="append", help="NAME=PATH: a case's grammar file (e.g. java=...)")
    peers.add_argument("--glrmask-timeout", type=float, default=600.0, help="seconds for one GLRMask compile")
    peers.add_argument("--plot", help="write the per-step times per engine to this image (matplotlib)")
    peers.add_argument("--warm", action="store_true", help="passes keep the engines' caches (default: cold)")
    peers.add_argument(
        "--evict",
        type=float,
        default=0.0,
        help="MiB rewritten (untimed) before every timed mask: the rest of a serving step (default 0)",
    )
    peers.add_argument(
        "--prewarm",
        type=int,
        default=0,
        metavar="ROWS",
        help="pin the token rows of up to ROWS class masks met first (NativeCompiled.prewarm), timed "
        "into the compile; pinned rows outlive the cold passes' emptied row caches (default 0: none)",
    )
    peers.add_argument(
        "--prefixes",
        type=int,
        default=1024,
        metavar="PATHS",
        help="with --prewarm: the paths of token classes from the start whose class masks the "
        "prefix memo holds (max_prefixes; 1: the start's only; default 1024)",
    )
    peers.add_argument(
        "--kinds",
        action="store_true",
        help="also break the update's steps down by what its call did (an untimed replay after the passes)",
    )
    args = ap.parse_args()
    if args.peers:
        from bench.peers import main_peers

        main_peers(args)
        return
    vocab = Vocabulary.builtin(args.vocab)
    root = Path(args.grammars or os.environ.get("FORMALGRAM_GRAMMARS") or GRAMMARS)
    print(f"# {load_average()}")
    print(
        f"# vocab={args.vocab} ({vocab.size} tokens), walks={args.walks} x {args.steps} steps "
        f"({args.walk_mode}-uniform), seed 0"
    )
    print(f"# native kernel: {'C' if _kernel_name() == 'c' else 'pure Python'}")
    only = set(args.only.split(",")) if args.only else None
    batches = [int(b) for b in args.batches.split(",")]
    summary: list[str] = []
    for name, rel in CASES:
        if only and name not in only:
            continue
        path = root / rel
        if not path.exists():
            print(f"{name}: grammar file absent under {root}")
            continue
        text = path.read_text(encoding="utf-8")
        classes = load_or_compress(text, vocab, name, args.classes_dir, domains=True)
        native, t_tables = load_native(classes, text, name, args.tables_dir)
        tables = native.tables
        python = NativeCompiled(classes, tables, kernel="python") if args.python else None
        walks, full, t_rec = cached_walks(
            text, name, classes, args.walks, args.steps, args.walks_dir, args.walk_mode
        )
        recorded = full is not None
        small = None
        if not args.native_only:
            full = full if full is not None else compile_full(vocab, text)
            small = compile_compressed(classes, text)
        else:
            full = None
        st = tables.stats
        print(
            f"\n{name}: {classes.num_classes} classes, {int(st.get('domain_groups', 0))} domain groups; "
            f"domain automaton {tables.domains.num_states} states / {tables.domains.num_edges} edges / "
            f"{tables.domains.num_sets} class sets ({int(tables.domains.set_class.shape[0])} entries); "
            f"push trie {tables.trie_sym.shape[0]} nodes, {tables.trans_push.shape[0]} transitions, "
            f"{tables.num_symbols} symbols; tables {t_tables:.1f} s ({'loaded' if t_tables < 5 else 'built'}), "
            f"walks {'recorded' if recorded else 'loaded'} in {t_rec:.1f} s; kernel {native.kernel}"
        )
        cols = [c for c in COLUMNS if small is not None or c.startswith("nat")]
        cols += PY_COLUMNS if python is not None else []
        print(f"{'rep':>3} {'steps':>5} " + " ".join(f"{c:>10}" for c in cols) + "   (median µs per step)")
        meds: list[dict[str, float]] = []
        per_step: dict[str, list[list[float]]] = {c: [] for c in cols}
        for r in range(args.repeats):
            # XGrammar's full-vocabulary fill (slow: up to 0.2 s per step) only in the checked replay
            times, sizes = replay(
                full if r == 0 else None, small, native, walks, not args.no_check and r == 0, python
            )
            med = {c: float(np.median(v)) * 1e6 for c, v in times.items() if v}
            tot = {c: float(np.sum(v)) * 1e3 for c, v in times.items() if v}
            for c in cols:
                if times[c]:
                    per_step[c].append(times[c])
            meds.append(med)
            print(
                f"{r:>3} {sizes['steps']:>5} " + " ".join(f"{med.get(c, float('nan')):>10.1f}" for c in cols)
            )
            print(
                f"{'':>3} {'total':>5} "
                + " ".join(f"{tot.get(c, float('nan')):>10.1f}" for c in cols)
                + "   (ms, all steps)"
            )
            if r == 0:
                print(
                    f"    walk pairs median {sizes['pairs_med']:.0f}, max {sizes['pairs_max']}; largest GSS "
                    f"{sizes['nodes_max']} nodes; mismatches {sizes['mismatches']}"
                )
                for e in sizes["examples"]:
                    print(f"    {e}")
        # the same step replayed r times: its minimum drops the preemptions of a loaded machine
        floor: dict[str, float] = {}
        for c, reps in per_step.items():
            if reps and all(len(x) == len(reps[0]) for x in reps):
                floor[c] = float(np.sum(np.min(np.asarray(reps), axis=0))) * 1e3
        print(
            f"{'':>3} {'floor':>5} "
            + " ".join(f"{floor.get(c, float('nan')):>10.1f}" for c in cols)
            + "   (ms, all steps, each step's minimum over the replays)"
        )
        for batch in batches:
            if batch == 1:
                continue
            res = replay_batch(small, native, walks, batch)
            print(
                f"  batch {batch:>3}: "
                + ", ".join(f"{c} {v:.1f}" for c, v in res.items() if not np.isnan(v))
                + "  (median µs per step, whole batch)"
            )

        def agg(rows: list[dict[str, float]], col: str) -> tuple[float, float, float]:
            xs = [row[col] for row in rows]
            return float(np.median(xs)), min(xs), max(xs)

        m_nc, lo_nc, hi_nc = agg(meds, "nat-class")
        m_nt, lo_nt, hi_nt = agg(meds, "nat-tok")
        m_na, _, _ = agg(meds, "nat-acc")
        t_nc, t_nt = floor["nat-class"], floor["nat-tok"]
        line = (
            f"{name:12} classes {classes.num_classes:>5} | native: class {m_nc:.1f} [{lo_nc:.1f}-{hi_nc:.1f}] "
            f"token {m_nt:.1f} [{lo_nt:.1f}-{hi_nt:.1f}] accept {m_na:.1f} µs; totals class {t_nc:.1f} "
            f"token {t_nt:.1f} ms"
        )
        if small is not None:
            m_xc, _, _ = agg(meds, "xgr-class")
            m_xt, _, _ = agg(meds, "xgr-comp")
            m_xa, _, _ = agg(meds, "xgr-acc")
            t_xc, t_xt = floor["xgr-class"], floor["xgr-comp"]
            line += (
                f" | xgr: class {m_xc:.1f} token {m_xt:.1f} accept {m_xa:.1f} µs; totals class {t_xc:.1f} "
                f"token {t_xt:.1f} ms | ratios median class {m_xc / m_nc:.1f}x token {m_xt / m_nt:.1f}x, "
                f"total class {t_xc / t_nc:.1f}x token {t_xt / t_nt:.1f}x"
            )
        if python is not None:
            m_pc, _, _ = agg(meds, "py-class")
            m_pa, _, _ = agg(meds, "py-acc")
            line += f" | python kernel: class {m_pc:.1f} accept {m_pa:.1f} µs"
        summary.append(line)
    print(
        f"\n# summary, batch 1: medians over {args.repeats} replays ([min-max] of the native medians); "
        "totals: sum over the steps of each step's minimum over the replays"
    )
    for line in summary:
        print(line)
    print(f"# {load_average()}")


def _kernel_name() -> str:
    from formalgram_cfgzip.engines.native.matcher import c_module

    return "c" if c_module() is not None else "python"


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
