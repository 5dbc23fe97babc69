"""Benchmark of class-mask -> token-mask expansion on the CPU (numpy and torch).

For class distributions of several shapes and batch sizes 1, 8 and 16 it times, per
sequence (median over steps, µs), on the same class masks, interleaved:

* ``c``       :class:`MaskExpander` with the C kernel (compiled install), row cache off:
              the kernel's per-row choice among its plans (gather, split, listed, ...);
* ``c-gath``  the C kernel's plain gather forced; ``c-split`` its dense classes' rows + tail gather;
* ``numpy``   :class:`MaskExpander` with the numpy kernel (what the pure-Python build runs);
* ``np-gath`` the numpy plain gather (``np.take`` of a uint8 class table + ``np.packbits``);
* ``torch``   :class:`TorchMaskExpander` with the torch backend on the CPU (the device
              algorithm: unpack, ``index_select``, pack), one thread;
* ``hit``     a row-cache hit (the row was expanded before): what a revisited matcher
              state costs.

Shapes: ``skewed`` (a few classes hold almost every token, like ``compress`` output for
small grammars), ``zipf`` (sizes ~ 1/rank^1.1), ``flat`` (every class holds ~3 tokens:
the worst case, like sql_syncode's 44k classes) and the real classes of shared grammars
(``--classes-dir``: TokenClasses saved by ``TokenClasses.save`` in ``DIR/<name>``, for
the grammars of ``REAL``; small grammars are compressed on the fly when absent).  The
fraction of allowed classes cycles through 1%, 10%, 50% and 90% over the steps.

Run: ``python bench/expand_bench.py [--quick] [--classes-dir DIR]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander
from formalgram_cfgzip.expand._c_kernel import CKernel, load_c_module
from formalgram_cfgzip.expand.plans import C_PLAN_NAMES

Array = npt.NDArray[np.int32]
GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
# name -> (grammar file, vocabulary, compress on the fly when not saved)
REAL = {
    "c": ("llama_cpp/c.gbnf", "llama3", True),
    "JME_0": ("derived/json_mode_eval_xgrammar/JME_0.gbnf", "llama3", True),
    "go": ("derived/lark_via_xgrammar/go_syncode.gbnf", "llama3", False),
    "sql": ("derived/lark_via_xgrammar/sql_syncode.gbnf", "llama3", False),
    "xml": ("derived/lark_via_xgrammar/xml2rfc_v3.gbnf", "llama3", False),
}


def synthetic(shape: str, width: int, classes: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    if shape == "skewed":
        big = np.array([0.55, 0.22, 0.12, 0.05, 0.03, 0.015])[: max(1, min(6, classes - 1))]
        p = np.concatenate([big, np.full(classes - big.size, (1 - big.sum()) / max(1, classes - big.size))])
    elif shape == "zipf":
        p = 1.0 / np.arange(1, classes + 1) ** 1.1
    else:
        p = np.ones(classes)
    p = p / p.sum()
    tc = rng.choice(classes, size=width, p=p)
    tc[rng.permutation(width)[:classes]] = np.arange(classes)  # every class non-empty
    return tc.astype(np.int64)


def class_masks(rng: np.random.Generator, steps: int, batch: int, classes: int) -> list[Array]:
    out = []
    words = (classes + 31) // 32
    for s in range(steps):
        density = (0.01, 0.1, 0.5, 0.9)[s % 4]
        bits = np.zeros((batch, words * 32), dtype=bool)
        bits[:, :classes] = rng.random((batch, classes)) < density
        out.append(np.packbits(bits, axis=1, bitorder="little").view(np.int32).copy())
    return out


def real_classes(classes_dir: str | None) -> list[tuple[str, str, Any]]:
    """(name, grammar text, TokenClasses) of the real grammars that are available."""
    out: list[tuple[str, str, Any]] = []
    try:
        from formalgram_cfgzip.classes import TokenClasses
        from formalgram_cfgzip.compress import compress
        from formalgram_cfgzip.vocabulary import Vocabulary
    except ImportError:
        return out
    for name, (rel, vname, on_the_fly) in REAL.items():
        path = GRAMMARS / rel
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        saved = Path(classes_dir) / name if classes_dir else None
        try:
            if saved is not None and saved.exists():
                tcl = TokenClasses.load(saved, grammar=text, vocab=Vocabulary.builtin(vname))
            elif on_the_fly:
                tcl = compress(text, Vocabulary.builtin(vname), progress=False)
            else:
                print(
                    f"({name}: no saved classes; pass --classes-dir with {name}/ saved by TokenClasses.save)"
                )
                continue
        except Exception as exc:
            print(f"(real classes for {name}: {type(exc).__name__}: {str(exc)[:80]})")
            continue
        out.append((name, text, tcl))
    return out


def real_cases(classes_dir: str | None) -> list[tuple[str, npt.NDArray[np.int64], int]]:
    """(name, token_class, num_classes) of the real grammars that are available."""
    return [
        (name, np.asarray(tcl.token_class, dtype=np.int64), tcl.num_classes)
        for name, _, tcl in real_classes(classes_dir)
    ]


def walk_class_rows(text: str, tcl: Any, walks: int, steps: int, seed: int) -> tuple[Array, int]:
    """The distinct class rows that XGrammar (over the representatives) fills on seeded
    random walks (each step accepts a random token of a random allowed class), and the
    number of engine ids (the classes, and a dummy stop id when the engine needs one)."""
    from formalgram_cfgzip.engines import compile_grammar

    compiled = compile_grammar(tcl, text, engine="xgrammar")
    rng = np.random.default_rng(seed)
    tc = np.asarray(tcl.token_class)
    members = [np.flatnonzero(tc == c) for c in range(tcl.num_classes)]
    rows: dict[bytes, Array] = {}
    for _ in range(walks):
        m = compiled.matcher()
        for _ in range(steps):
            cm = np.zeros((1, compiled.engine_words), dtype=np.int32)
            m.fill_next_class_bitmask(cm)
            rows.setdefault(cm.tobytes(), cm[0].copy())
            bits = np.unpackbits(cm.view(np.uint8), bitorder="little")[: tcl.num_classes]
            allowed = [c for c in np.flatnonzero(bits) if members[c].size]
            if not allowed:
                break
            token = int(rng.choice(members[int(rng.choice(allowed))]))
            if not m.accept_token(token) or m.is_terminated():
                break
    return np.array(list(rows.values())), compiled.engine_size


def peers_rows(
    cache_dir: str, only: set[str] | None, walks: int, steps: int
) -> list[tuple[str, Any, int, Array]]:
    """(name, token_class, engine ids, distinct class rows) of the ``bench/peers.py`` grammars
    whose classes and tables are kept in ``cache_dir``: the rows the native engine fills on the
    peers' seeded token walks and class walks (GLRMask left out)."""
    from bench.expand_fit import class_rows
    from bench.peers import CASES, case_source, load_case, record_peer_walks
    from formalgram_cfgzip.vocabulary import Vocabulary

    vocab = Vocabulary.builtin("llama3")
    out = []
    for case in CASES:
        if only and case.name not in only:
            continue
        src = case_source(case, GRAMMARS, {})
        if src is None:
            continue
        loaded = load_case(case, src[0], src[1], vocab, Path(cache_dir))
        native = loaded.native
        w = record_peer_walks(native, None, walks, steps, 0, "tokens")
        w += record_peer_walks(native, None, walks, steps, 1, "classes")
        tc = np.asarray(loaded.classes.token_class, dtype=np.int64)
        out.append((case.name, tc, native.engine_size, np.array(class_rows(native, w))))
    return out


def load_baseline(path: str) -> Any:
    """Another build of ``_cexpand`` (e.g. of an earlier commit), loaded beside this one."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader("formalgram_cfgzip.expand._cexpand", path)
    spec = importlib.util.spec_from_file_location("formalgram_cfgzip.expand._cexpand", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def real_rows_report(
    classes_dir: str | None,
    only: set[str] | None,
    walks: int,
    steps: int,
    flush_mb: int = 0,
    peers_cache: str | None = None,
    baseline: str | None = None,
) -> None:
    """Per real grammar, the C kernel's automatic choice against every forced plan on the
    class rows of real walks (row cache off), the numpy kernel's choice, and with ``baseline``
    the automatic choice of another build of the C kernel on the same rows.  With
    ``flush_mb``, a buffer of that many MiB is rewritten before every timed call, so the
    kernel's tables are cold, as after a large grammar's engine fill in a decoding loop."""
    kernel_module = load_c_module()
    if kernel_module is None:
        print("(--real-rows needs the C kernel: a compiled install)")
        return
    plans = {C_PLAN_NAMES[code]: code for code in (0, 1, 2, 3)}
    base_module = load_baseline(baseline) if baseline else None
    if flush_mb:
        print(f"(caches flushed: {flush_mb} MiB rewritten before every timed call)")
    print(
        "µs per row on the distinct class rows of seeded walks (min of 5 runs per row); auto = the C"
        " kernel's choice, best = the fastest forced plan of each row, numpy = the numpy kernel's"
        " choice, base = the baseline build's choice"
    )
    print(
        f"{'case':7} {'C':>6} {'rows':>5} {'auto':>6} {'p50':>6} {'max':>6} {'best':>6} {'gather':>7}"
        f" {'split':>6} {'numpy':>6} {'base':>6} {'b-max':>6}  auto/best  c-plans"
    )
    if peers_cache:
        cases = peers_rows(peers_cache, only, walks, steps)
    else:
        cases = []
        for name, text, tcl in real_classes(classes_dir):
            if only and name not in only:
                continue
            rows, classes = walk_class_rows(text, tcl, walks, steps, seed=0)
            cases.append((name, np.asarray(tcl.token_class, dtype=np.int64), classes, rows))
    for name, tc, classes, rows in cases:
        npx = MaskExpander(tc, classes, cache_bytes=0, delta=False, kernel="numpy")
        # the compiled kernel itself (its numbered plans are forced below), built as
        # MaskExpander(cache_bytes=0, delta=False, kernel="c") builds it
        kernel = CKernel(
            kernel_module, tc, classes, memory_budget=32 << 20, max_dense=None, dense=None,
            cache_rows=0, delta=False, adapt=True, cache_admission="costly",
        ).raw  # fmt: skip
        base = None
        if base_module is not None:  # positional: (token_class, classes, budget, -1, cache 0, delta 0, adapt)
            base = base_module.Kernel(tc.astype(np.int32), classes, 32 << 20, -1, 0, 0, True)
        out = np.zeros((1, npx.num_words), dtype=np.int32)
        names = ["auto", "numpy", *plans] + (["base"] if base is not None else [])
        times: dict[str, list[float]] = {k: [] for k in names}
        flush = np.zeros(flush_mb << 18, dtype=np.float32)
        chosen: dict[str, int] = {}
        label = ""
        for row in rows:
            r = np.ascontiguousarray(row)
            best: dict[str, float] = {k: 1e18 for k in times}
            for _ in range(5):
                for k in times:
                    if flush_mb:
                        flush += 1.0
                    t = time.perf_counter()
                    if k == "numpy":
                        npx.expand(r[None, :], out)
                    elif k == "base":
                        base.expand(r, out[0])
                    else:
                        used = kernel.expand(r, out[0], None, None, -1 if k == "auto" else plans[k])
                    best[k] = min(best[k], time.perf_counter() - t)
                    if k == "auto":
                        label = C_PLAN_NAMES[used]
            chosen[label] = chosen.get(label, 0) + 1
            for k, v in best.items():
                times[k].append(v * 1e6)
        arr = {k: np.array(v) for k, v in times.items()}
        oracle = np.minimum.reduce([arr[k] for k in plans])
        b_mean = arr["base"].mean() if "base" in arr else float("nan")
        b_max = arr["base"].max() if "base" in arr else float("nan")
        print(
            f"{name:7} {classes:>6} {len(rows):>5} {arr['auto'].mean():>6.1f} {np.median(arr['auto']):>6.1f}"
            f" {arr['auto'].max():>6.1f} {oracle.mean():>6.1f} {arr['gather'].mean():>7.1f}"
            f" {arr['split'].mean():>6.1f} {arr['numpy'].mean():>6.1f} {b_mean:>6.1f} {b_max:>6.1f}"
            f"  {arr['auto'].mean() / oracle.mean():>9.2f}"
            f"  {','.join(f'{k}:{v}' for k, v in sorted(chosen.items()))}"
        )


def median_us(fn: Callable[[Array, Array], None], masks: list[Array], out: Array) -> float:
    fn(masks[0], out)
    times = []
    for cm in masks:
        t = time.perf_counter()
        fn(cm, out)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e6 / int(out.shape[0])


def interleaved(
    fns: dict[str, Callable[[Array, Array], None]], masks: list[Array], out: Array, seed: int = 0
) -> dict[str, float]:
    """Median µs per sequence of each function, all run on each mask in a shuffled order.

    The order changes per mask so that no variant always runs right after the one that
    evicted the caches (the torch path touches several MB).
    """
    rng = np.random.default_rng(seed)
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn(masks[0], out)
    for cm in masks:
        for j in rng.permutation(len(names)):
            fn = fns[names[j]]
            t = time.perf_counter()
            fn(cm, out)
            times[names[j]].append(time.perf_counter() - t)
    return {k: float(np.median(v)) * 1e6 / int(out.shape[0]) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description="class-mask expansion benchmark")
    ap.add_argument("--quick", action="store_true", help="fewer steps and sizes")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--classes-dir", help="folder of saved TokenClasses, one sub-folder per REAL name")
    ap.add_argument("--only", help="comma-separated case names (shape or real grammar name)")
    ap.add_argument(
        "--real-rows",
        action="store_true",
        help="time the plans on the class rows of real decoding walks instead (C kernel)",
    )
    ap.add_argument("--walks", type=int, default=8, help="with --real-rows: walks per grammar")
    ap.add_argument(
        "--flush-mb",
        type=int,
        default=0,
        help="with --real-rows: rewrite this many MiB before every timed call (cold caches)",
    )
    ap.add_argument(
        "--peers-cache", help="with --real-rows: the grammars of bench/peers.py kept in this folder"
    )
    ap.add_argument("--baseline", help="with --real-rows: another build of _cexpand (.so) to time beside")
    args = ap.parse_args()
    if args.real_rows:
        only_real = set(args.only.split(",")) if args.only else None
        steps = 12 if args.quick else args.steps
        real_rows_report(
            args.classes_dir, only_real, args.walks, steps, args.flush_mb, args.peers_cache, args.baseline
        )
        return
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    widths = [128256] if args.quick else [128256, 151936, 201088]
    batches = [1, 8] if args.quick else [1, 8, 16]
    steps = 12 if args.quick else args.steps
    cases: list[tuple[str, npt.NDArray[np.int64], int]] = []
    for shape, counts in (("skewed", [600]), ("zipf", [600, 3000]), ("flat", [7800, 43000])):
        for width in widths:
            for classes in counts if not args.quick else counts[-1:]:
                cases.append((shape, synthetic(shape, width, classes, rng), classes))
    cases += real_cases(args.classes_dir)
    only = set(args.only.split(",")) if args.only else None
    cols = ["c", "c-gath", "c-split", "numpy", "np-gath", "torch", "hit"]
    have_c = load_c_module() is not None
    print(
        "µs per sequence (median over steps, row cache off except 'hit'); c = the C kernel's own"
        " choice, numpy = the numpy kernel's; ratio = numpy / c"
    )
    if not have_c:
        print("(C kernel not built: pure-Python install; its columns are empty)")
    print(f"{'case':7} {'V':>7} {'C':>6} {'B':>3} " + " ".join(f"{c:>7}" for c in cols) + "  ratio  c-plans")
    for name, tc, classes in cases:
        if only and name not in only:
            continue
        width = int(tc.shape[0])
        builds: dict[str, float] = {}
        expanders: dict[str, MaskExpander] = {}
        for kernel in ("c", "numpy") if have_c else ("numpy",):
            t0 = time.perf_counter()
            expanders[kernel] = MaskExpander(tc, classes, cache_bytes=0, kernel=kernel)
            builds[kernel] = (time.perf_counter() - t0) * 1e3
        entry = 4 * ((width + 31) // 32) + 4 * ((classes + 31) // 32) + 100
        cached = MaskExpander(tc, classes, cache_bytes=(steps * max(batches) + 1) * entry)
        tex = TorchMaskExpander(tc, classes, backend="torch")
        for batch in batches:
            masks = class_masks(rng, steps, batch, classes)
            out = np.zeros((batch, (width + 31) // 32), dtype=np.int32)
            paths: set[str] = set()

            def chosen(
                kernel: str, paths: set[str] = paths, expanders: dict[str, MaskExpander] = expanders
            ) -> Callable[[Array, Array], None]:
                ex = expanders[kernel]

                def run(mask: Array, o: Array) -> None:
                    for i in range(mask.shape[0]):
                        ex.expand_row(mask[i], o[i])
                        if kernel == "c":
                            paths.add(ex.last_strategy)

                return run

            def forced(
                kernel: str, strategy: str, expanders: dict[str, MaskExpander] = expanders
            ) -> Callable[[Array, Array], None]:
                ex = expanders[kernel]

                def run(mask: Array, o: Array) -> None:
                    ex.expand(mask, o, strategy=strategy)  # type: ignore[arg-type]

                return run

            def torch_run(cm: Array, o: Array, tex: TorchMaskExpander = tex) -> None:
                tex.expand(torch.from_numpy(cm), torch.from_numpy(o))

            fns = {"numpy": chosen("numpy"), "np-gath": forced("numpy", "gather"), "torch": torch_run}
            if have_c:
                fns |= {"c": chosen("c"), "c-gath": forced("c", "gather"), "c-split": forced("c", "split")}
            res = interleaved(fns, masks, out)

            def hit(mask: Array, o: Array, cached: MaskExpander = cached) -> None:
                cached.expand(mask, o)

            for cm in masks:  # warm the cache, then time hits only
                hit(cm, out)
            res["hit"] = median_us(hit, masks, out)
            ratio = f"{res['numpy'] / res['c']:>5.2f}" if have_c else "    -"
            print(
                f"{name:7} {width:>7} {classes:>6} {batch:>3} "
                + " ".join(f"{res[c]:>7.1f}" if c in res else f"{'-':>7}" for c in cols)
                + f"  {ratio}  {','.join(sorted(paths))}"
            )
        for kernel, ex in expanders.items():
            print(
                f"{'':7} ({kernel}: build {builds[kernel]:.0f} ms; {ex.num_stored} subset tables for"
                f" {ex.num_dense} classes, {ex.num_small_tokens} tail tokens)"
            )


if __name__ == "__main__":
    main()
