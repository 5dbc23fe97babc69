"""GPU check of the torch mask expansion: correctness against the CPU, then timing.

On a CUDA machine: for V = 128k and 200k and batch sizes 1..64, random class masks over
skewed class assignments are expanded on the GPU (:class:`TorchMaskExpander`, torch
backend) and compared bit for bit with the numpy :class:`MaskExpander`; the direct logits
path is compared with ``apply_token_bitmask_inplace`` of the CPU result.  Then the GPU
expansion and the logits path are timed with CUDA events (median µs per call, whole batch).
Exits 0 when everything matches, 1 on a mismatch, and 0 with a message when CUDA is absent.
Designed to finish well under 5 minutes.

Run: ``python bench/gpu_check.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GPU check of the mask expansion")
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_check: PyTorch is not installed; nothing to check")
        return 0
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; skipping (run it on a GPU machine)")
        return 0
    from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander, apply_token_bitmask_inplace

    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}")
    rng = np.random.default_rng(0)
    widths = [128256, 200064]
    batches = [1, 8, 64] if args.quick else [1, 2, 4, 8, 16, 32, 64]
    reps = 20 if args.quick else 100
    t_start = time.perf_counter()
    failures = 0
    print(f"{'V':>7} {'C':>5} {'B':>3} {'expand µs':>10} {'logits µs':>10} {'per-seq µs':>10}  check")
    for width in widths:
        for classes in (100, 600, 3000):
            p = 1.0 / np.arange(1, classes + 1) ** 1.3
            tc = rng.choice(classes, size=width, p=p / p.sum()).astype(np.int64)
            tc[rng.random(width) < 0.01] = -1
            cpu = MaskExpander(tc, classes)
            gpu = TorchMaskExpander(tc, classes, device=dev, backend="torch")
            for batch in batches:
                words = (classes + 31) // 32
                bits = rng.random((batch, words * 32)) < rng.random((batch, 1))
                cm = np.packbits(bits, axis=1, bitorder="little").view(np.int32).copy()
                want = cpu.expand(cm)
                cm_dev = torch.from_numpy(cm).to(dev)
                got = gpu.expand(cm_dev).cpu().numpy()
                ok = bool(np.array_equal(got, want))
                logits = torch.randn(batch, width + 64, device=dev)
                ref = logits.clone()
                gpu.mask_logits(logits, cm_dev)
                apply_token_bitmask_inplace(ref, torch.from_numpy(want).to(dev))
                ok &= bool(torch.equal(torch.isneginf(logits), torch.isneginf(ref)))
                failures += not ok
                out = torch.empty((batch, (width + 31) // 32), dtype=torch.int32, device=dev)
                for _ in range(3):
                    gpu.expand(cm_dev, out)
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                t_exp = []
                for _ in range(reps):
                    start.record()
                    gpu.expand(cm_dev, out)
                    end.record()
                    torch.cuda.synchronize()
                    t_exp.append(start.elapsed_time(end) * 1000)
                t_log = []
                for _ in range(reps):
                    start.record()
                    gpu.mask_logits(logits, cm_dev)
                    end.record()
                    torch.cuda.synchronize()
                    t_log.append(start.elapsed_time(end) * 1000)
                e, lg = float(np.median(t_exp)), float(np.median(t_log))
                print(
                    f"{width:>7} {classes:>5} {batch:>3} {e:>10.1f} {lg:>10.1f} {e / batch:>10.2f}  "
                    f"{'ok' if ok else 'MISMATCH'}"
                )
                if time.perf_counter() - t_start > 240:
                    print("gpu_check: time budget reached, stopping early")
                    return 1 if failures else 0
    print(
        f"gpu_check: {'all equal' if not failures else f'{failures} MISMATCHES'} "
        f"({time.perf_counter() - t_start:.0f} s)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
