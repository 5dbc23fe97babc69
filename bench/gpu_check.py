"""GPU check of the torch / Triton mask expansion: correctness against the CPU, then timing.

On a CUDA machine, for V = 128k and 200k logits, class assignments (skewed synthetic ones
with 100, 600 and 3,000 classes, a flat one with 44,000 classes, and, when
``--classes-npz`` names a file of real ``token_class`` arrays, real ones) and batch sizes
1..64:

1. *check*: random class masks (all-zero and all-one rows included) are expanded on the GPU
   by every backend (``triton`` when Triton imports, ``torch``) and compared bit for bit
   with the numpy :class:`~formalgram_cfgzip.expand.MaskExpander`; the direct logits path
   (``mask_logits``) is compared with ``apply_token_bitmask_inplace`` of the CPU result, in
   float32 and bfloat16;
2. *timing*: per backend, the median over repetitions of
   * ``gpu µs``: device time of one ``expand`` for the whole batch (CUDA events);
   * ``logits µs``: device time of one ``mask_logits`` for the whole batch;
   * ``host µs``: wall time of one ``expand`` call as the host sees it, launch included
     (the mean of 200 back-to-back calls followed by one synchronisation);
   * ``kernel µs`` / ``lg kernel``: device time of one ``expand`` / ``mask_logits`` with
     the launch cost removed (20 calls captured in a CUDA graph, replayed, divided by 20).

   The first two are bounded below by the host's launch cost (the GPU waits for the
   launch), so for small batches they measure Python/Triton launch overhead, not the
   kernel; the graph figures show what the GPU itself spends.

Exits 0 when everything matches, 1 on a mismatch, and 0 with a message when CUDA is absent.
Designed to finish in under 5 minutes (it stops early, reporting so, after ``--budget``
seconds).  Run: ``python bench/gpu_check.py [--quick] [--classes-npz FILE] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[Any]


def skewed(rng: np.random.Generator, width: int, classes: int) -> Array:
    """Zipf-like class sizes (as real vocabularies give), 1% invalid ids."""
    p = 1.0 / np.arange(1, classes + 1) ** 1.3
    tc = rng.choice(classes, size=width, p=p / p.sum()).astype(np.int64)
    tc[rng.random(width) < 0.01] = -1
    return tc


def flat(rng: np.random.Generator, width: int, classes: int) -> Array:
    """Classes of nearly equal size, in random token order (the worst case for the CPU)."""
    return rng.permutation(np.arange(width, dtype=np.int64) % classes)


def class_masks(rng: np.random.Generator, batch: int, classes: int) -> Array:
    words = (classes + 31) // 32
    density = rng.random((batch, 1))
    density[0, 0] = 0.0
    if batch > 1:
        density[1, 0] = 1.0
    bits = rng.random((batch, words * 32)) < density
    bits[:, classes:] = False
    return np.packbits(bits, axis=1, bitorder="little").view(np.int32).copy()


def cases(
    rng: np.random.Generator, widths: list[int], npz: Path | None, quick: bool
) -> list[tuple[str, Array, int]]:
    out: list[tuple[str, Array, int]] = []
    for width in widths:
        for classes in (100, 600) if quick else (100, 600, 3000):
            out.append((f"skewed-{classes}", skewed(rng, width, classes), classes))
        flat_classes = min(44000, max(1, width // 3))
        out.append((f"flat-{flat_classes}", flat(rng, width, flat_classes), flat_classes))
    if npz is not None and npz.exists():
        data = np.load(npz)
        for key in sorted(data.files):
            if key.endswith("__n"):
                continue
            tc = data[key].astype(np.int64)
            out.append((key, tc, int(data[key + "__n"][0])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GPU check of the mask expansion")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    ap.add_argument("--classes-npz", type=Path, default=None, help="real token_class arrays (key, key__n)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here as JSON")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds before stopping early")
    ap.add_argument("--widths", type=int, nargs="+", default=[128256, 200064], help="logit widths")
    ap.add_argument(
        "--device",
        default="cuda",
        help="torch device; 'cpu' with TRITON_INTERPRET=1 and small --widths dry-runs the script here",
    )
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_check: PyTorch is not installed; nothing to check")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; skipping (run it on a GPU machine)")
        return 0
    from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander, apply_token_bitmask_inplace
    from formalgram_cfgzip.expand.torch import _triton_kernels

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    dev_name = torch.cuda.get_device_name(dev) if cuda else str(dev)
    print(f"device: {dev_name}, torch {torch.__version__}", flush=True)
    backends = ["triton", "torch"] if _triton_kernels() is not None else ["torch"]
    if "triton" not in backends:
        print("gpu_check: Triton not importable; checking the torch backend only")
    rng = np.random.default_rng(0)
    batches = [1, 8, 64] if args.quick else [1, 4, 16, 64]
    reps = (20 if args.quick else 50) if cuda else 2
    t_start = time.perf_counter()
    failures = 0
    rows: list[dict[str, Any]] = []

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def device_us(fn: Any) -> float:
        times = []
        for _ in range(reps):
            if not cuda:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
                continue
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        return float(np.median(times))

    def graph_us(fn: Any, n: int = 20) -> float:
        """Device time of one call without launch gaps: n calls captured in a CUDA graph."""
        if not cuda:
            return float("nan")
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(n):
                    fn()
            graph.replay()
            torch.cuda.synchronize()
            return device_us(graph.replay) / n
        except Exception as exc:  # report and go on: the timing column is informative only
            print(f"gpu_check: CUDA graph timing failed: {exc}", flush=True)
            return float("nan")

    def host_us(fn: Any, n: int = 200 if cuda else 3) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t0) / n * 1e6

    header = (
        f"{'case':>26} {'V':>7} {'B':>3} {'backend':>7} {'gpu µs':>8} {'logits µs':>9} {'host µs':>8} "
        f"{'kernel µs':>9} {'lg kernel':>9}  check"
    )
    print(header, flush=True)
    stopped = False
    for name, tc, classes in cases(rng, args.widths, args.classes_npz, args.quick):
        width = int(tc.shape[0])
        cpu = MaskExpander(tc, classes)
        gpus = {b: TorchMaskExpander(tc, classes, device=dev, backend=b) for b in backends}  # type: ignore[arg-type]
        for batch in batches:
            cm = class_masks(rng, batch, classes)
            want = cpu.expand(cm)
            cm_dev = torch.from_numpy(cm).to(dev)
            want_dev = torch.from_numpy(want).to(dev)
            for backend, gpu in gpus.items():
                got = gpu.expand(cm_dev).cpu().numpy()
                ok = bool(np.array_equal(got, want))
                for dtype in (torch.float32, torch.bfloat16):
                    logits = torch.randn(batch, width + 64, device=dev).to(dtype)
                    ref = logits.clone()
                    gpu.mask_logits(logits, cm_dev)
                    apply_token_bitmask_inplace(ref, want_dev)
                    ok &= bool(torch.equal(logits, ref))
                failures += not ok
                out = torch.empty((batch, (width + 31) // 32), dtype=torch.int32, device=dev)
                logits = torch.randn(batch, width + 64, device=dev)
                for _ in range(3):
                    gpu.expand(cm_dev, out)
                    gpu.mask_logits(logits, cm_dev)
                e = device_us(lambda g=gpu, o=out, c=cm_dev: g.expand(c, o))
                lg = device_us(lambda g=gpu, x=logits, c=cm_dev: g.mask_logits(x, c))
                h = host_us(lambda g=gpu, o=out, c=cm_dev: g.expand(c, o))
                ke = graph_us(lambda g=gpu, o=out, c=cm_dev: g.expand(c, o))
                kl = graph_us(lambda g=gpu, x=logits, c=cm_dev: g.mask_logits(x, c))
                row = {"case": name, "V": width, "classes": classes, "batch": batch, "backend": backend}
                row.update(
                    {"gpu_us": e, "logits_us": lg, "host_us": h, "kernel_us": ke, "logits_kernel_us": kl}
                )
                row["ok"] = ok
                rows.append(row)
                print(
                    f"{name:>26} {width:>7} {batch:>3} {backend:>7} {e:>8.1f} {lg:>9.1f} {h:>8.1f} "
                    f"{ke:>9.2f} {kl:>9.2f}  "
                    f"{'ok' if ok else 'MISMATCH'}",
                    flush=True,
                )
            if time.perf_counter() - t_start > args.budget:
                stopped = True
                break
        if stopped:
            print(f"gpu_check: time budget of {args.budget:.0f} s reached, stopping early", flush=True)
            break
    if args.json is not None:
        args.json.write_text(json.dumps({"device": dev_name, "rows": rows}, indent=1))
    print(
        f"gpu_check: {'all equal' if not failures else f'{failures} MISMATCHES'} "
        f"over {len(rows)} checks ({time.perf_counter() - t_start:.0f} s)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
