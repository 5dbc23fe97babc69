"""Online benchmark: per-step mask time, full-vocabulary engine vs representatives + expansion.

For each grammar: compute the classes with ``compress()`` (skipped with the reason when it
fails), record seeded random walks with the full-vocabulary engine, then replay them and
time, per decoding step, (a) the engine's full-vocabulary ``fill_next_token_bitmask`` and
(b) the compressed engine's class fill plus expansion (``fill_next_token_bitmask`` of the
adapter), at batch 1, 8 and 16 (batch: the engine's batch API + expansion per row).
Prints medians (µs per step for the whole batch) and the ratio full / compressed; rows
where the compressed path is slower are marked ``SLOWER``.

Run: ``python bench/online_bench.py [--engine xgrammar|llguidance] [--vocab llama3] [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from formalgram_cfgzip.classes import compress
from formalgram_cfgzip.engines import compile as compile_compressed
from formalgram_cfgzip.engines import compile_full
from formalgram_cfgzip.engines.base import CompiledGrammar, EngineMatcher
from formalgram_cfgzip.vocabulary import Vocabulary

GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
CASES = [
    ("json-schema", "derived/json_mode_eval_xgrammar"),
    ("c", "llama_cpp/c.gbnf"),
    ("go_syncode", "derived/lark_via_xgrammar/go_syncode.gbnf"),
    ("sql_syncode", "derived/lark_via_xgrammar/sql_syncode.gbnf"),
    ("xml2rfc_v3", "derived/lark_via_xgrammar/xml2rfc_v3.gbnf"),
    ("arithmetic", "llama_cpp/arithmetic.gbnf"),
]


def pick_file(rel: str) -> Path | None:
    p = GRAMMARS / rel
    if p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.suffix in (".gbnf", ".ebnf"))
        return files[0] if files else None
    return p if p.exists() else None


def record_walks(full: CompiledGrammar, n: int, steps: int, seed: int) -> list[list[int]]:
    """Token sequences of random walks (uniform over allowed tokens, restart at the end)."""
    rng = np.random.default_rng(seed)
    width = full.logit_width
    walks = []
    bm = full.allocate_token_bitmask(1)
    for _ in range(n):
        m = full.matcher()
        seq: list[int] = []
        while len(seq) < steps:
            m.fill_next_token_bitmask(bm)
            allowed = np.flatnonzero(np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:width])
            allowed = allowed[~np.isin(allowed, list(full.vocab.stop_ids))]
            if allowed.size == 0:
                break
            tok = int(rng.choice(allowed))
            m.accept_token(tok)
            seq.append(tok)
        walks.append(seq)
    return walks


def time_replay(compiled: CompiledGrammar, walks: list[list[int]], batch: int) -> float:
    """Median µs of one batched mask fill (all rows) while replaying the walks in lockstep."""
    matchers: list[EngineMatcher] = [compiled.matcher() for _ in range(batch)]
    seqs = [walks[i % len(walks)] for i in range(batch)]
    bm = compiled.allocate_token_bitmask(batch)
    length = min(len(s) for s in seqs)
    times = []
    for step in range(length):
        t = time.perf_counter()
        if batch == 1:
            matchers[0].fill_next_token_bitmask(bm, 0)
        else:
            compiled.fill_next_token_bitmask_batch(matchers, bm)
        times.append(time.perf_counter() - t)
        for m, s in zip(matchers, seqs, strict=True):
            m.accept_token(s[step])
    return float(np.median(times)) * 1e6 if times else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description="online mask benchmark")
    ap.add_argument("--engine", default="xgrammar", choices=["xgrammar", "llguidance"])
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    vocab = Vocabulary.builtin(args.vocab)
    batches = [1, 8] if args.quick else [1, 8, 16]
    steps = 25 if args.quick else args.steps
    print(f"engine={args.engine} vocab={args.vocab} ({vocab.size} tokens); µs per step (median, whole batch)")
    print(f"{'grammar':12} {'classes':>7} {'B':>3} {'full':>9} {'compressed':>10} {'ratio':>6}")
    only = set(args.only.split(",")) if args.only else None
    for name, rel in CASES:
        if only and name not in only:
            continue
        path = pick_file(rel)
        if path is None:
            print(f"{name:12} (grammar file absent)")
            continue
        text = path.read_text(encoding="utf-8")
        try:
            full = compile_full(vocab, text, engine=args.engine)
        except Exception as exc:
            print(f"{name:12} engine cannot compile: {str(exc)[:80]}")
            continue
        t0 = time.perf_counter()
        try:
            classes = compress(text, vocab, progress=False)
        except Exception as exc:
            print(f"{name:12} compress failed: {type(exc).__name__}: {str(exc)[:70]}")
            continue
        t_cmp = time.perf_counter() - t0
        small = compile_compressed(classes, text, engine=args.engine)
        walks = record_walks(full, 16, steps, seed=0)
        for batch in batches:
            tf = time_replay(full, walks, batch)
            tc = time_replay(small, walks, batch)
            flag = "  SLOWER" if tc > tf else ""
            print(
                f"{name:12} {classes.num_classes:>7} {batch:>3} {tf:>9.1f} {tc:>10.1f} {tf / tc:>6.2f}{flag}"
            )
        print(f"{'':12} (compress {t_cmp:.1f} s, file {path.relative_to(GRAMMARS)})")


if __name__ == "__main__":
    main()
