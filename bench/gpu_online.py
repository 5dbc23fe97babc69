"""End-to-end decoding step on a GPU: full-vocabulary engine versus classes + GPU expansion.

For each grammar, seeded random walks are recorded over the full vocabulary (XGrammar by
default), then replayed through two :class:`~formalgram_cfgzip.integrations.transformers.
GrammarLogitsProcessor` instances, one over the full vocabulary and one over the class
representatives, on logits that live on the device.  At every step:

* the masked logits of both processors must agree exactly (which tokens are ``-inf``, and
  every other value unchanged) — the lossless property, end to end through the GPU path;
* the wall time of one processor call (accepting the last token, filling the mask on the
  CPU, moving it to the device, masking the logits; synchronised) is recorded.

The table gives medians per step for batch sizes 1, 8 and 16 and the ratio full/compressed.

Run: ``python bench/gpu_online.py --grammar G.gbnf [--classes DIR] ...`` (``--device cpu``
works too; it then measures the CPU path).  Exits 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def record_walks(compiled: Any, vocab: Any, rows: int, steps: int, seed: int) -> list[list[int]]:
    """Seeded random walks over the full vocabulary (half the picks favour long tokens)."""
    rng = np.random.default_rng(seed)
    lengths = np.array([len(vocab.token_bytes(i) or b"") for i in range(vocab.logit_width)])
    walks = []
    mask = compiled.allocate_token_bitmask(1)
    for _ in range(rows):
        m = compiled.matcher()
        walk: list[int] = []
        for _ in range(steps):
            if m.is_terminated():
                break
            compiled.fill_next_token_bitmask_batch([m], mask)
            bits = np.unpackbits(mask[0].view(np.uint8), bitorder="little")[: vocab.logit_width]
            allowed = np.flatnonzero(bits)
            if allowed.size == 0:
                break
            if rng.random() < 0.5:
                long = allowed[lengths[allowed] >= np.quantile(lengths[allowed], 0.9)]
                allowed = long if long.size else allowed
            tok = int(rng.choice(allowed))
            if not m.accept_token(tok):
                raise RuntimeError(f"engine refused token {tok} it allowed")
            walk.append(tok)
        walks.append(walk)
    return walks


def replay(
    processor_full: Any, processor_small: Any, walks: list[list[int]], width: int, device: Any, pad: int
) -> tuple[list[float], list[float], int]:
    """Run both processors in lockstep; returns per-step times (µs) and the mismatch count."""
    import torch

    batch = len(walks)
    steps = max(len(w) for w in walks)
    ids = torch.full((batch, steps + 1), pad, dtype=torch.long)
    for b, w in enumerate(walks):
        ids[b, 1 : len(w) + 1] = torch.tensor(w, dtype=torch.long)
    gen = torch.Generator(device="cpu").manual_seed(0)
    base = torch.randn(batch, width, generator=gen).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t_full: list[float] = []
    t_small: list[float] = []
    mismatches = 0
    for t in range(steps):
        # rows whose walk ended keep a stop token or padding; the processors skip terminated rows
        prefix = ids[:, : t + 1].to(device)
        a = base.clone()
        b = base.clone()
        sync()
        t0 = time.perf_counter()
        processor_full(prefix, a)
        sync()
        t1 = time.perf_counter()
        processor_small(prefix, b)
        sync()
        t2 = time.perf_counter()
        t_full.append((t1 - t0) * 1e6)
        t_small.append((t2 - t1) * 1e6)
        live = [r for r, w in enumerate(walks) if t < len(w)]
        if live and not torch.equal(a[live], b[live]):
            mismatches += 1
    return t_full, t_small, mismatches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--grammar", type=Path, action="append", required=True, help="GBNF file (repeatable)")
    ap.add_argument(
        "--classes", type=Path, action="append", default=[], help="saved TokenClasses per grammar"
    )
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--engine", default="xgrammar", choices=["xgrammar", "llguidance"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.compress import compress
    from formalgram_cfgzip.engines import compile_full, compile_grammar
    from formalgram_cfgzip.errors import CfgzipError
    from formalgram_cfgzip.integrations.transformers import GrammarLogitsProcessor
    from formalgram_cfgzip.vocabulary import Vocabulary

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_online: CUDA is not available; use --device cpu")
        return 0
    vocab = Vocabulary.builtin(args.vocab)
    pad = min(vocab.stop_ids) if vocab.stop_ids else 0
    print(f"device {device}, vocabulary {args.vocab} ({vocab.logit_width} logits), engine {args.engine}")
    print(
        f"{'grammar':>12} {'classes':>7} {'B':>3} {'steps':>5} {'full µs':>9} {'compressed µs':>13} {'ratio':>6}  check"
    )
    rows: list[dict[str, Any]] = []
    failures = 0
    for i, path in enumerate(args.grammar):
        text = path.read_text(encoding="utf-8")
        classes = None
        if i < len(args.classes):
            try:
                classes = TokenClasses.load(args.classes[i], grammar=text, vocab=vocab)
            except CfgzipError as exc:
                print(f"  {path.name}: saved classes refused ({exc}); recomputing")
        if classes is None:
            classes = compress(text, vocab, progress=False)
        full = compile_full(vocab, text, engine=args.engine)
        small = compile_grammar(classes, text, engine=args.engine)
        max_batch = max(args.batches)
        walks = record_walks(full, vocab, max_batch, args.steps, seed=i)
        for batch in args.batches:
            proc_full = GrammarLogitsProcessor(full)
            proc_small = GrammarLogitsProcessor(small)
            # warm up (kernel compilation, first-call allocations), then measure on fresh processors
            replay(proc_full, proc_small, walks[:batch], vocab.logit_width, device, pad)
            proc_full = GrammarLogitsProcessor(full)
            proc_small = GrammarLogitsProcessor(small)
            tf, ts, bad = replay(proc_full, proc_small, walks[:batch], vocab.logit_width, device, pad)
            failures += bad
            mf, ms = float(np.median(tf)), float(np.median(ts))
            rows.append(
                {
                    "grammar": path.name,
                    "classes": classes.num_classes,
                    "batch": batch,
                    "steps": len(tf),
                    "full_us": mf,
                    "compressed_us": ms,
                    "mismatched_steps": bad,
                }
            )
            print(
                f"{path.stem[:12]:>12} {classes.num_classes:>7} {batch:>3} {len(tf):>5} {mf:>9.1f} {ms:>13.1f} "
                f"{mf / ms:>6.2f}  {'ok' if not bad else f'{bad} MISMATCHED STEPS'}",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(
            json.dumps({"device": str(device), "engine": args.engine, "rows": rows}, indent=1)
        )
    print(f"gpu_online: {'all steps equal' if not failures else f'{failures} MISMATCHED STEPS'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
