"""Class masks expanded on the GPU, on real walks: bit identity with the CPU and time per step.

The native engine fills a *class* mask on the CPU (tens to hundreds of bytes per row); the
device expands it, so the CPU never writes the 16 KiB token row.  This script checks and
times that path against the one XGrammar serves, on the walks of ``bench/peers.py`` (token
walks, GLRMask left out), at batch 1, 8 and 64 (the walks replayed in lockstep, row ``i``
replaying walk ``i mod n``):

* ``xgrammar``  the native engine's full-vocabulary rows (``fill_next_token_bitmask_batch``:
  class fill and CPU expansion), copied to the device, then
  ``xgrammar.apply_token_bitmask_inplace`` on the logits;
* ``rows``      the native class rows (``fill_next_class_bitmask_batch``), copied to the
  device, then one launch of :func:`rows_mask_kernel`: each program reads the class ids of
  ``BLOCK`` logit columns once and masks them in ``ROWS`` rows of the batch;
* ``triton``    the same class rows through the package's one-row-per-program Triton
  kernel (:meth:`~formalgram_cfgzip.expand.TorchMaskExpander.mask_logits`).

Every step of every batch is checked first: the device expansion (:func:`rows_expand_kernel`,
the same reads as the logits kernel) against the CPU token rows bit for bit, and the masked
logits of ``rows`` and ``triton`` against those of ``xgrammar`` (the same ``-inf`` positions,
every other value untouched).  Then each path is timed per step: the wall time of the whole
step (CPU fill, copy, kernel, synchronisation) and the device time of copy and kernel (CUDA
events).  Medians per step are printed, and a JSON summary with ``--json``.

Needs a CUDA device, PyTorch, Triton, XGrammar and the compiled C kernels (``python setup.py
build_ext --inplace``, or the project's compiled install); exits 0 with a message when CUDA
or Triton is missing.  Classes and native tables are kept under ``--cache-dir`` (the same
folder as ``python -m bench.native_bench --peers --cache-dir DIR``).  Sized to finish well
under 10 minutes on one H200 with 16 CPU cores::

    python -m bench.gpu_walks --cache-dir DIR --only go,c,schema:invoice --json gpu_walks.json

With ``--interpret`` the kernels run in Triton's CPU interpreter on CPU tensors (set before
Triton is imported: the correctness check of the kernels on a machine without a GPU; the
times then mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROWS = 8  # batch rows masked by one program
BLOCK = 1024  # logit columns per program
WORDS = 32  # token-bitmask words per program of the expansion kernel


def kernels() -> tuple[Any, Any]:
    """The two Triton kernels (defined here, on first use: Triton is imported only then)."""
    import triton
    import triton.language as tl

    @triton.jit
    def rows_mask_kernel(  # type: ignore[no-untyped-def]
        logits_ptr, logits_stride, n_cols, class_ptr, class_stride, token_class_ptr, logit_width, batch,
        ROWS: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        first = tl.program_id(1) * ROWS
        cls = tl.load(token_class_ptr + cols, mask=cols < logit_width, other=-1)
        valid = cls >= 0
        word = cls >> 5
        bit = cls & 31
        for r in tl.static_range(ROWS):
            row = first + r
            live = tl.full([BLOCK], row, tl.int32) < batch
            cword = tl.load(class_ptr + row * class_stride + word, mask=valid & live, other=0)
            allowed = ((cword >> bit) & 1) != 0
            ptrs = logits_ptr + row * logits_stride + cols
            tl.store(
                ptrs, tl.full([BLOCK], float("-inf"), tl.float32), mask=(cols < n_cols) & ~allowed & live
            )

    @triton.jit
    def rows_expand_kernel(  # type: ignore[no-untyped-def]
        class_ptr, class_stride, token_class_ptr, out_ptr, out_stride, num_words, batch,
        ROWS: tl.constexpr, WORDS: tl.constexpr,
    ):  # fmt: skip
        words = tl.program_id(0) * WORDS + tl.arange(0, WORDS)
        first = tl.program_id(1) * ROWS
        bits = tl.arange(0, 32)
        tokens = words[:, None] * 32 + bits[None, :]
        cls = tl.load(token_class_ptr + tokens, mask=words[:, None] < num_words, other=-1)
        valid = cls >= 0
        word = cls >> 5
        bit = cls & 31
        for r in tl.static_range(ROWS):
            row = first + r
            live = tl.full([WORDS], row, tl.int32) < batch
            cword = tl.load(class_ptr + row * class_stride + word, mask=valid & live[:, None], other=0)
            # distinct bits: their sum is their OR (int32 wraps at bit 31 without carries)
            packed = tl.sum(((cword >> bit) & 1) << bits[None, :], axis=1).to(tl.int32)
            tl.store(out_ptr + row * out_stride + words, packed, mask=(words < num_words) & live)

    return rows_mask_kernel, rows_expand_kernel


class DeviceRows:
    """The class ids of one grammar on the device, and the two launches over them."""

    def __init__(self, token_class: Any, num_words: int, device: Any) -> None:
        import torch

        self.torch = torch
        tc = np.full(num_words * 32, -1, dtype=np.int32)
        tc[: len(token_class)] = np.where(np.asarray(token_class) >= 0, token_class, -1)
        self.logit_width = len(token_class)
        self.num_words = num_words
        self.token_class = torch.from_numpy(tc).to(device)
        self.mask_kernel, self.expand_kernel = kernels()

    def mask_logits(self, logits: Any, class_rows: Any) -> None:
        """``-inf`` into every logit whose class bit is 0 (and past the logit width)."""
        import triton

        batch, n_cols = int(logits.shape[0]), int(logits.shape[1])
        grid = (triton.cdiv(n_cols, BLOCK), triton.cdiv(batch, ROWS))
        self.mask_kernel[grid](
            logits, logits.stride(0), n_cols, class_rows, class_rows.stride(0), self.token_class,
            self.logit_width, batch, ROWS=ROWS, BLOCK=BLOCK,
        )  # fmt: skip

    def expand(self, class_rows: Any, out: Any) -> None:
        """The token bitmask rows of the class rows (XGrammar's layout)."""
        import triton

        batch = int(class_rows.shape[0])
        grid = (triton.cdiv(self.num_words, WORDS), triton.cdiv(batch, ROWS))
        self.expand_kernel[grid](
            class_rows, class_rows.stride(0), self.token_class, out, out.stride(0), self.num_words, batch,
            ROWS=ROWS, WORDS=WORDS,
        )  # fmt: skip


def run_case(
    loaded: Any, walks: list[list[int]], batches: list[int], device: Any, interpret: bool
) -> dict[str, Any]:
    """Check, then time, the three paths on one grammar's walks at every batch size."""
    import torch

    from formalgram_cfgzip.engines.native.matcher import NativeCompiled
    from formalgram_cfgzip.expand import apply_token_bitmask_inplace

    native = loaded.native
    # one compiled grammar per path: none shares another's row cache or kernel state
    paths = ("xgrammar", "rows", "triton")
    compiled = {p: NativeCompiled(loaded.classes, native.tables) for p in paths}
    dev = DeviceRows(loaded.classes.token_class, native.token_words, device)
    texp = None if interpret else compiled["triton"].torch_expander(device)
    apply: Any = apply_token_bitmask_inplace  # the package's, in the interpreter
    if not interpret:
        import xgrammar

        apply = xgrammar.apply_token_bitmask_inplace
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    report: dict[str, Any] = {}
    for batch in batches:
        seqs = [walks[i % len(walks)] for i in range(batch)]
        steps = min(len(s) for s in seqs)
        tok_cpu = torch.zeros((batch, native.token_words), dtype=torch.int32, pin_memory=cuda)
        cls_cpu = {
            p: torch.zeros((batch, native.engine_words), dtype=torch.int32, pin_memory=cuda) for p in paths
        }
        tok_dev = torch.zeros((batch, native.token_words), dtype=torch.int32, device=device)
        cls_dev = {
            p: torch.zeros((batch, native.engine_words), dtype=torch.int32, device=device) for p in paths
        }
        expanded = torch.zeros_like(tok_dev)
        gen = torch.Generator(device="cpu").manual_seed(batch)
        base = torch.randn((batch, native.logit_width), generator=gen).to(device)
        mismatches = {"expand": 0, "rows": 0, "triton": 0}
        wall: dict[str, list[float]] = {p: [] for p in paths}
        on_device: dict[str, list[float]] = {p: [] for p in paths}
        for timed in (False, True):
            matchers = {p: [c.matcher() for _ in range(batch)] for p, c in compiled.items()}
            for step in range(steps):
                results = {}
                for path in paths:
                    c, ms = compiled[path], matchers[path]
                    logits = base.clone()
                    events = (
                        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        if cuda
                        else None
                    )
                    sync()
                    t0 = time.perf_counter()
                    if path == "xgrammar":
                        c.fill_next_token_bitmask_batch(ms, tok_cpu)
                    else:
                        c.fill_next_class_bitmask_batch(ms, cls_cpu[path])
                    if events is not None:
                        events[0].record()
                    if path == "xgrammar":
                        tok_dev.copy_(tok_cpu, non_blocking=True)
                        apply(logits, tok_dev)
                    else:
                        cls_dev[path].copy_(cls_cpu[path], non_blocking=True)
                        if path == "rows" or texp is None:
                            dev.mask_logits(logits, cls_dev[path])
                        else:
                            texp.mask_logits(logits, cls_dev[path])
                    if events is not None:
                        events[1].record()
                    sync()
                    if timed:
                        wall[path].append(time.perf_counter() - t0)
                        if events is not None:
                            on_device[path].append(events[0].elapsed_time(events[1]) * 1e3)
                    results[path] = logits
                if not timed:
                    dev.expand(cls_dev["rows"], expanded)
                    sync()
                    if not torch.equal(expanded.cpu(), tok_cpu):
                        mismatches["expand"] += 1
                    want = torch.isneginf(results["xgrammar"].float())
                    for path in ("rows", "triton"):
                        got = results[path]
                        if not (
                            torch.equal(torch.isneginf(got.float()), want)
                            and torch.equal(got[~want], base[~want])
                        ):
                            mismatches[path] += 1
                for ms in matchers.values():
                    for m, seq in zip(ms, seqs, strict=True):
                        m.accept_token(seq[step])
        line = {
            "steps": steps,
            "mismatches": mismatches,
            "wall_us": {p: float(np.median(v)) * 1e6 for p, v in wall.items() if v},
            "device_us": {p: float(np.median(v)) for p, v in on_device.items() if v},
        }
        report[str(batch)] = line
        print(
            f"  B={batch:>2} steps {steps}: mismatches {mismatches}; wall µs/step "
            + ", ".join(f"{p} {v:.1f}" for p, v in line["wall_us"].items())
            + "; device µs/step (copy + kernel) "
            + ", ".join(f"{p} {v:.1f}" for p, v in line["device_us"].items())
        )
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", required=True, help="classes and native tables (as native_bench --peers)")
    ap.add_argument("--only", default="go,c,schema:invoice", help="comma-separated cases of bench/peers.py")
    ap.add_argument("--grammars", help="grammar folder (default ../shared/grammars)")
    ap.add_argument("--grammar", action="append", help="NAME=PATH, as for --peers")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--walks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--interpret", action="store_true", help="Triton's CPU interpreter (correctness only)")
    args = ap.parse_args()
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        print(f"gpu_walks: {exc}; nothing to do")
        return 0
    if not args.interpret and not torch.cuda.is_available():
        print("gpu_walks: no CUDA device; nothing to do (--interpret checks the kernels on the CPU)")
        return 0
    device = torch.device("cpu" if args.interpret else "cuda")
    from bench.peers import CASES, case_source, load_case, record_peer_walks
    from formalgram_cfgzip.vocabulary import Vocabulary

    vocab = Vocabulary.builtin("llama3")
    root = Path(args.grammars or Path(__file__).resolve().parents[2] / "shared" / "grammars")
    overrides = dict(item.split("=", 1) for item in (args.grammar or []))
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in args.batches.split(",")]
    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "interpreter"
    }
    bad = 0
    for case in CASES:
        if case.name not in args.only.split(","):
            continue
        src = case_source(case, root, overrides)
        if src is None:
            print(f"{case.name}: grammar file absent")
            continue
        loaded = load_case(case, src[0], src[1], vocab, cache)
        walks = record_peer_walks(loaded.native, None, args.walks, args.steps, 0, "tokens")
        print(f"{case.name}: {loaded.classes.num_classes} classes, walks {[len(w) for w in walks]}")
        summary[case.name] = run_case(loaded, walks, batches, device, args.interpret)
        bad += sum(sum(r["mismatches"].values()) for r in summary[case.name].values())
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    print(f"gpu_walks: {'all rows bit-identical' if bad == 0 else f'{bad} mismatching steps'}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
