"""Replay of real decoding walks' class rows through the expansion kernel's row cache.

The mask time of a JSON schema's walk is mostly the expansion of the class rows it has not
seen before (row-cache misses), and on schemas of tens of thousands of classes those cost
more than the class fill.  This benchmark takes MaskBench schemas (guidance-ai/jsonschemabench,
``maskbench/data``), compresses each as the native engine of ``bench.maskbench`` does, walks
its first valid instance with the native engine and records the class row of every step, in
order.  It then replays the rows through the C kernel's row cache (``Kernel.expand_rows``:
hits, misses, deltas, evictions, as a decoding loop meets them), built as the engine's
expander builds it, and with ``--baseline`` through another build of the kernel (a ``.so`` of
an earlier commit) on the same rows, the builds alternating pass by pass.  Every row of the
first two passes of each build is checked against the numpy kernel's expansion (the
pure-Python build's).

Each pass clears the cache of a kernel kept across passes (its memory already touched, as the
engine's expander, allocated from a warm heap, finds it).  Per schema and build: the median
over passes of each step's time, then p50 / p90 / p99 and the sum over the walk, µs.

Run::

    python -m bench.row_cache_replay DATA_DIR --schemas Github_ultra---o62058,Github_hard---o62060 \\
        [--baseline OLD/_cexpand.so] [--passes 7]
    python -m bench.row_cache_replay DATA_DIR --sample 2000 --seed 0 --min-classes 10000

``--sample/--seed`` draw the sample of ``bench.maskbench`` (the same schemas for the same
seed); ``--min-classes`` keeps the schemas of at least that many classes (compressing each
to find out).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.expand_bench import load_baseline
from bench.maskbench import PER_REQUEST, Case, load_cases

Array = npt.NDArray[np.int32]


def walk_rows(case: Case, compressor: Any, encoder: Any) -> tuple[npt.NDArray[np.int64], int, Array] | None:
    """(token -> class map, engine ids, the class rows of the walk in order) of one schema, or
    None when it does not compile or its instance is refused."""
    from formalgram_cfgzip import from_json_schema
    from formalgram_cfgzip.engines import compile_grammar

    try:
        text = from_json_schema(case.schema)
        classes = compressor.compress(text)
        compiled = compile_grammar(classes, text, engine="native")
    except Exception as exc:  # a schema the engine refuses: left out, named
        print(f"{case.name}: not compiled ({type(exc).__name__})")
        return None
    ex = compiled.expander
    assert ex is not None
    matcher = compiled.matcher()
    row = np.zeros((1, ex.class_words), dtype=np.int32)
    rows = []
    for token in [int(t) for t in encoder.encode_ordinary(json.dumps(case.valid[0]))]:
        matcher.fill_next_class_bitmask(row, 0)
        rows.append(row[0].copy())
        if not matcher.accept_token(token):
            print(f"{case.name}: instance refused")
            return None
    matcher.fill_next_class_bitmask(row, 0)
    rows.append(row[0].copy())
    return np.asarray(ex.token_class, dtype=np.int64), ex.num_classes, np.array(rows)


def replay(
    builds: dict[str, Any], tc: npt.NDArray[np.int64], classes: int, rows: Array, passes: int
) -> tuple[dict[str, npt.NDArray[np.float64]], dict[str, int]]:
    """Per build, the median over ``passes`` of each step's time (µs); the current build's
    cache counters of one pass.  Raises AssertionError when a row differs."""
    from formalgram_cfgzip.expand.row_cache import cache_capacity

    nw = (tc.shape[0] + 31) // 32
    cache_rows = cache_capacity(8 << 20, nw, rows.shape[1])  # MaskExpander's default cache
    kernels = {
        name: module.Kernel(tc.astype(np.int32), classes, 32 << 20, -1, cache_rows, 1, 1, -1)
        for name, module in builds.items()
    }
    times = {name: np.zeros((passes, len(rows))) for name in builds}
    from formalgram_cfgzip.expand import MaskExpander

    want = MaskExpander(tc, classes, cache_bytes=0, kernel="numpy").expand(rows)  # the other kernel
    out = np.zeros((1, nw), dtype=np.int32)
    views = [rows[i : i + 1] for i in range(len(rows))]
    counters: dict[str, int] = {}
    for p in range(passes):
        order = list(builds) if p % 2 == 0 else list(builds)[::-1]
        for name in order:
            kernel = kernels[name]
            kernel.clear_cache()
            t = times[name][p]
            for i, view in enumerate(views):
                t0 = time.perf_counter()
                kernel.expand_rows(view, out)
                t[i] = time.perf_counter() - t0
                if p < 2:
                    assert np.array_equal(out[0], want[i]), (name, i)
            if p == 0 and name == "current":
                counters = kernel.cache_info()
    return {name: np.median(t, axis=0) * 1e6 for name, t in times.items()}, counters


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "data", type=Path, help="MaskBench's data folder (guidance-ai/jsonschemabench, maskbench/data)"
    )
    ap.add_argument("--schemas", help="comma-separated schema names (file stems)")
    ap.add_argument("--sample", type=int, default=None, help="bench.maskbench's seeded sample of this many")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--min-classes", type=int, default=0, help="keep the schemas of at least this many classes"
    )
    ap.add_argument("--baseline", help="another build of _cexpand (.so) replayed beside the current one")
    ap.add_argument("--passes", type=int, default=7)
    args = ap.parse_args(argv)

    import quicktok

    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.expand._c_kernel import load_c_module
    from formalgram_cfgzip.vocabulary import Vocabulary

    module = load_c_module()
    if module is None:
        print("the C expansion kernel is not built (pure-Python install)")
        return 1
    builds: dict[str, Any] = {"current": module}
    if args.baseline:
        builds["baseline"] = load_baseline(args.baseline)
    cases = load_cases(args.data, args.sample, args.seed)
    if args.schemas:
        wanted = set(args.schemas.split(","))
        cases = [c for c in cases if c.name in wanted]
    vocab = Vocabulary.builtin("llama3")
    compressor = Compressor(vocab, cache_size=0, **PER_REQUEST)
    encoder = quicktok.get_encoding("llama3")
    print(
        f"{len(cases)} schemas; per build: p50 / p90 / p99 / sum of each step's median over {args.passes} passes"
    )
    head = f"{'schema':36} {'classes':>7} {'steps':>5} {'misses':>6}"
    print(head + "".join(f"  {name + ' p50 / p90 / p99 µs, sum ms':>38}" for name in builds))
    every: dict[str, list[float]] = {name: [] for name in builds}
    for case in cases:
        walked = walk_rows(case, compressor, encoder)
        if walked is None:
            continue
        tc, classes, rows = walked
        if classes < args.min_classes:
            continue
        med, counters = replay(builds, tc, classes, rows, args.passes)
        line = f"{case.name[:36]:36} {classes:>7} {len(rows):>5} {counters.get('misses', 0):>6}"
        for name, m in med.items():
            every[name].extend(m.tolist())
            p50, p90, p99 = np.percentile(m, [50, 90, 99])
            line += f"  {p50:>7.2f} / {p90:>6.2f} / {p99:>6.2f}, {m.sum() / 1e3:>7.2f}"
        print(line, flush=True)
    for name, values in every.items():
        if values:
            v = np.array(values)
            p50, p90, p99 = np.percentile(v, [50, 90, 99])
            print(
                f"all steps, {name}: {len(v)} steps, p50 {p50:.2f} / p90 {p90:.2f} / p99 {p99:.2f} µs,"
                f" sum {v.sum() / 1e3:.1f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
