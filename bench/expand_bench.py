"""Benchmark of class-mask -> token-mask expansion candidates (CPU).

For vocabulary sizes V (128k, 152k, 201k), class counts C (100, 600, 3000) and batch sizes
(1, 8, 16) it times, per sequence (median over steps, µs):

* ``auto``       the shipped :class:`MaskExpander` (big classes by vector OR + small-class
                 gather, or a plain gather, chosen per row by a cost model);
* ``gather``     ``np.take`` of a uint8 class table by token class (intp) + ``np.packbits``;
* ``naive``      unpack class bits, boolean fancy index, pack (the simple approach);
* ``or-all``     a precomputed bitmask per class, OR of the allowed ones (complement when
                 more than half are allowed);
* ``torch``      :class:`TorchMaskExpander` with the torch backend on the CPU (the CUDA
                 algorithm: unpack, ``index_select``, pack).

Class sizes follow two shapes: ``skewed`` (a few classes hold almost every token, as the
classes ``compress`` produces do: e.g. 71 classes for arithmetic.gbnf with Llama-3, the 7
largest holding 99.7% of the tokens) and ``zipf`` (sizes ~ 1/rank^1.1, much flatter).  The
fraction of allowed classes is drawn per step from {1%, 10%, 50%, 90%}.

Run: ``python bench/expand_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander

Array = npt.NDArray[np.int32]


def class_sizes(shape: str, width: int, classes: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    if shape == "skewed":
        big = np.array([0.55, 0.22, 0.12, 0.05, 0.03, 0.015])[: max(1, min(6, classes - 1))]
        p = np.concatenate([big, np.full(classes - big.size, (1 - big.sum()) / max(1, classes - big.size))])
    else:
        p = 1.0 / np.arange(1, classes + 1) ** 1.1
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


class OrAll:
    def __init__(self, tc: npt.NDArray[np.int64], classes: int) -> None:
        words = (tc.shape[0] + 31) // 32
        bools = np.zeros((classes, words * 32), dtype=np.uint8)
        bools[tc, np.arange(tc.shape[0])] = 1
        self.bits = np.packbits(bools, axis=1, bitorder="little").view(np.uint32)
        self.union = np.bitwise_or.reduce(self.bits, axis=0)
        self.classes = classes

    def expand(self, cm: Array, out: Array) -> None:
        for b in range(cm.shape[0]):
            allowed = np.unpackbits(cm[b].view(np.uint8), bitorder="little")[: self.classes].astype(bool)
            row = out[b].view(np.uint32)
            if allowed.sum() * 2 <= self.classes:
                ids = np.flatnonzero(allowed)
                row[:] = 0
                for k in ids:
                    np.bitwise_or(row, self.bits[k], out=row)
            else:
                acc = np.zeros_like(row)
                for k in np.flatnonzero(~allowed):
                    np.bitwise_or(acc, self.bits[k], out=acc)
                np.bitwise_and(self.union, ~acc, out=row)


def naive(tc: npt.NDArray[np.int64], classes: int) -> Callable[[Array, Array], None]:
    words = (tc.shape[0] + 31) // 32

    def run(cm: Array, out: Array) -> None:
        for b in range(cm.shape[0]):
            allowed = np.unpackbits(cm[b].view(np.uint8), bitorder="little")[:classes].astype(bool)
            tok = np.zeros(words * 32, dtype=bool)
            tok[: tc.shape[0]] = allowed[tc]
            out[b] = np.packbits(tok, bitorder="little").view(np.int32)

    return run


def real_cases() -> list[tuple[str, int, int, npt.NDArray[np.int64]]]:
    """Classes computed by compress() for small shared grammars (skipped when unavailable)."""
    from pathlib import Path

    out: list[tuple[str, int, int, npt.NDArray[np.int64]]] = []
    root = Path(__file__).resolve().parents[2] / "shared" / "grammars"
    try:
        from formalgram_cfgzip.classes import compress
        from formalgram_cfgzip.vocabulary import Vocabulary
    except ImportError:
        return out
    for rel, vname in [("llama_cpp/arithmetic.gbnf", "llama3"), ("llama_cpp/chess.gbnf", "o200k_harmony")]:
        path = root / rel
        if not path.exists():
            continue
        try:
            tc = compress(path.read_text(encoding="utf-8"), Vocabulary.builtin(vname), progress=False)
        except Exception as exc:
            print(f"(real classes for {rel}: {type(exc).__name__})")
            continue
        name = path.stem[:7]
        out.append((name, int(tc.token_class.shape[0]), tc.num_classes, tc.token_class.astype(np.int64)))
    return out


def gather_fn(ex: MaskExpander) -> Callable[[Array, Array], None]:
    def run(cm: Array, out: Array) -> None:
        ex.expand(cm, out)

    return run


def torch_fn(ex: TorchMaskExpander) -> Callable[[Array, Array], None]:
    import torch

    def run(cm: Array, out: Array) -> None:
        ex.expand(torch.from_numpy(cm), torch.from_numpy(out))

    return run


def median_us(fn: Callable[[Array, Array], None], masks: list[Array], out: Array) -> float:
    fn(masks[0], out)
    times = []
    for cm in masks:
        t = time.perf_counter()
        fn(cm, out)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e6 / int(out.shape[0])


def main() -> None:
    ap = argparse.ArgumentParser(description="class-mask expansion benchmark")
    ap.add_argument("--quick", action="store_true", help="fewer steps and sizes")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    widths = [128256] if args.quick else [128256, 151936, 201088]
    counts = [600] if args.quick else [100, 600, 3000]
    batches = [1, 8] if args.quick else [1, 8, 16]
    steps = 12 if args.quick else args.steps
    cols = ["auto", "gather", "naive", "or-all", "torch"]
    print("µs per sequence (median); ratio = best other / auto")
    print(
        f"{'shape':7} {'V':>7} {'C':>5} {'B':>3} "
        + " ".join(f"{c:>8}" for c in cols)
        + "   ratio  auto-paths"
    )
    cases: list[tuple[str, int, int, npt.NDArray[np.int64]]] = []
    for shape in ("skewed", "zipf"):
        for width in widths:
            for classes in counts:
                cases.append((shape, width, classes, class_sizes(shape, width, classes, rng)))
    cases += real_cases()
    for shape, width, classes, tc in cases:
        tc = tc.astype(np.int64)
        ex = MaskExpander(tc, classes)
        ga = MaskExpander(tc, classes, max_dense=0)
        orall = OrAll(tc, classes) if classes <= 600 else None
        tex = TorchMaskExpander(tc, classes, backend="torch")
        for batch in batches:
            masks = class_masks(rng, steps, batch, classes)
            out = np.zeros((batch, (width + 31) // 32), dtype=np.int32)
            paths: set[str] = set()

            def auto(cm: Array, o: Array, ex: MaskExpander = ex, paths: set[str] = paths) -> None:
                ex.expand(cm, o)
                paths.add(ex.last_strategy)

            res = {
                "auto": median_us(auto, masks, out),
                "gather": median_us(gather_fn(ga), masks, out),
                "naive": median_us(naive(tc, classes), masks, out) if batch == 1 else float("nan"),
                "or-all": median_us(orall.expand, masks, out) if orall and batch == 1 else float("nan"),
                "torch": median_us(torch_fn(tex), masks, out),
            }
            others = [v for k, v in res.items() if k != "auto" and not np.isnan(v)]
            ratio = min(others) / res["auto"]
            print(
                f"{shape:7} {width:>7} {classes:>5} {batch:>3} "
                + " ".join(f"{res[c]:>8.1f}" for c in cols)
                + f"  {ratio:>6.2f}  {','.join(sorted(paths))}"
            )


if __name__ == "__main__":
    main()
