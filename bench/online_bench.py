"""Online benchmark: per-step mask time, full-vocabulary engine vs representatives + expansion.

For each grammar: compute the classes with ``compress()`` (or load them from
``--classes-dir``; skipped with the reason when it fails), record seeded random walks with
the full-vocabulary engine, then replay them in lockstep and time, per decoding step and
side by side in one run:

* ``xgr-full``  XGrammar's own ``fill_next_token_bitmask`` over the full vocabulary (its
  ``BatchGrammarMatcher`` for batches), no adapter: the baseline;
* ``full``      the same through the adapter (``compile_full``);
* ``comp``      the compressed adapter: class fill + expansion, row cache on (default);
* ``comp-nc``   the same with the expander's row cache off;
* ``class``     the class fill alone; ``exp`` / ``exp-nc`` the expansion alone of those
  very class masks, cache on / off;

at batch 1, 8 and 16.  Prints medians (µs per step for the whole batch), the cache hit
rate, the ratio baseline / ``comp`` and the expansion's share of the baseline; rows where
the compressed path is slower are marked ``SLOWER``.

The native engine (``engine="native"``) is measured by ``bench/native_bench.py`` on these
same walks (:func:`record_walks`), beside XGrammar over the full vocabulary and over the
classes, at batch 1, 8 and 64.

Run: ``python bench/online_bench.py [--engine xgrammar|llguidance] [--vocab llama3] [--quick]
[--only c,json-schema] [--classes-dir DIR]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines import compile_full, compile_grammar
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.expand import MaskExpander
from formalgram_cfgzip.vocabulary import Vocabulary

GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
CASES = [
    ("json-schema", "derived/json_mode_eval_xgrammar"),
    ("c", "llama_cpp/c.gbnf"),
    ("go_syncode", "derived/lark_via_xgrammar/go_syncode.gbnf"),
    ("sql_syncode", "derived/lark_via_xgrammar/sql_syncode.gbnf"),
    ("xml2rfc_v3", "derived/lark_via_xgrammar/xml2rfc_v3.gbnf"),
    ("arithmetic", "llama_cpp/arithmetic.gbnf"),
    # XGrammar's full-vocabulary fill takes ~0.5 s per step here: use few steps and walks
    ("smiles", "transformers_cfg/SMILES/acrylates.ebnf"),
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


class Variants:
    """The variants timed side by side, each with its own matchers, replayed in lockstep."""

    def __init__(
        self, full: CompiledGrammar, small: CompiledGrammar, small_nc: CompiledGrammar, batch: int
    ) -> None:
        self.full, self.small, self.small_nc, self.batch = full, small, small_nc, batch
        self.m_full: list[EngineMatcher] = []
        self.m_small: list[EngineMatcher] = []
        self.m_nc: list[EngineMatcher] = []
        self.new_round()
        self.bm = full.allocate_token_bitmask(batch)
        self.cm = small.allocate_class_bitmask(batch)
        self.raw_batch: Any = None
        self.raw_xgr = all(hasattr(m, "_m") and type(m).__name__ == "XGrammarMatcher" for m in self.m_full)
        assert small.expander is not None and small_nc.expander is not None
        small.expander.clear_cache()  # every batch size starts cold
        # expansion alone, on the very class masks of the compressed engine
        self.ex_cache = MaskExpander(small.expander.token_class, small.engine_size)
        self.ex_nocache = MaskExpander(small.expander.token_class, small.engine_size, cache_bytes=0)

    def new_round(self) -> None:
        """Fresh matchers (a new set of sequences); caches and expanders are kept."""
        self.m_full = [self.full.matcher() for _ in range(self.batch)]
        self.m_small = [self.small.matcher() for _ in range(self.batch)]
        self.m_nc = [self.small_nc.matcher() for _ in range(self.batch)]

    def fill(self, compiled: CompiledGrammar, matchers: list[EngineMatcher]) -> float:
        t = time.perf_counter()
        if self.batch == 1:
            matchers[0].fill_next_token_bitmask(self.bm, 0)
        else:
            compiled.fill_next_token_bitmask_batch(matchers, self.bm)
        return time.perf_counter() - t

    def raw(self) -> float:
        """XGrammar's own full-vocabulary fill, no adapter (NaN for other engines)."""
        if not self.raw_xgr:
            return float("nan")
        inner = [m._m for m in self.m_full]  # type: ignore[attr-defined]
        t = time.perf_counter()
        if self.batch == 1:
            inner[0].fill_next_token_bitmask(self.bm, 0)
        else:
            if self.raw_batch is None:
                import xgrammar

                self.raw_batch = xgrammar.BatchGrammarMatcher(1)
            self.raw_batch.batch_fill_next_token_bitmask(inner, self.bm)
        return time.perf_counter() - t

    def class_and_expand(self) -> tuple[float, float, float]:
        t = time.perf_counter()
        if self.batch == 1:
            self.m_small[0].fill_next_class_bitmask(self.cm, 0)
        else:
            self.small.fill_next_class_bitmask_batch(self.m_small, self.cm)
        t_class = time.perf_counter() - t
        t = time.perf_counter()
        self.ex_cache.expand(self.cm, self.bm)
        t_cache = time.perf_counter() - t
        t = time.perf_counter()
        self.ex_nocache.expand(self.cm, self.bm)
        return t_class, t_cache, time.perf_counter() - t

    def accept(self, tokens: list[int]) -> None:
        for group in (self.m_full, self.m_small, self.m_nc):
            for m, tok in zip(group, tokens, strict=True):
                m.accept_token(tok)


COLUMNS = ["xgr-full", "full", "comp", "comp-nc", "class", "exp", "exp-nc"]


def replay_variants(v: Variants, walks: list[list[int]]) -> dict[str, float]:
    """Median µs per step (whole batch) of every variant while replaying the walks in lockstep.

    Every walk is replayed once: ``len(walks) / batch`` rounds of ``batch`` walks each
    (at least one round), with fresh matchers per round.
    """
    times: dict[str, list[float]] = {c: [] for c in COLUMNS}
    for r in range(max(1, len(walks) // v.batch)):
        if r:
            v.new_round()
        seqs = [walks[(r * v.batch + i) % len(walks)] for i in range(v.batch)]
        for step in range(min(len(s) for s in seqs)):
            times["xgr-full"].append(v.raw())
            times["full"].append(v.fill(v.full, v.m_full))
            times["comp"].append(v.fill(v.small, v.m_small))
            times["comp-nc"].append(v.fill(v.small_nc, v.m_nc))
            t_class, t_exp, t_nc = v.class_and_expand()
            times["class"].append(t_class)
            times["exp"].append(t_exp)
            times["exp-nc"].append(t_nc)
            v.accept([s[step] for s in seqs])
    return {c: float(np.median(ts)) * 1e6 if ts else float("nan") for c, ts in times.items()}


def load_or_compress(
    text: str, vocab: Vocabulary, name: str, cache_dir: str | None, *, domains: bool = False
) -> TokenClasses:
    """``compress()`` (``domains``: also recording the classes' domains, for the native engine's
    tables), or a TokenClasses saved earlier under ``cache_dir/name-vocab``."""
    if cache_dir:
        d = Path(cache_dir) / f"{name}-{vocab.name or vocab.fingerprint()[:12]}"
        if d.exists():
            return TokenClasses.load(d, grammar=text, vocab=vocab)
    classes = compress(text, vocab, progress=False, domains=domains)
    if cache_dir:
        classes.save(d)
    return classes


def main() -> None:
    ap = argparse.ArgumentParser(description="online mask benchmark")
    ap.add_argument("--engine", default="xgrammar", choices=["xgrammar", "llguidance"])
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--walks", type=int, default=16)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--batches", default="1,8,16", help="comma-separated batch sizes")
    ap.add_argument("--classes-dir", help="reuse (or save) TokenClasses here, one folder per grammar")
    args = ap.parse_args()
    vocab = Vocabulary.builtin(args.vocab)
    batches = [1, 8] if args.quick else [int(b) for b in args.batches.split(",")]
    steps = 25 if args.quick else args.steps
    print(f"engine={args.engine} vocab={args.vocab} ({vocab.size} tokens); µs per step (median, whole batch)")
    print(
        "xgr-full: XGrammar's own full-vocabulary fill; full: the same through the adapter; comp: classes +\n"
        "expansion (row cache on), comp-nc: cache off; class: class fill alone; exp / exp-nc: expansion alone\n"
        "(cache on / off); ratio = xgr-full (else full) / comp; exp/full and nc/full: exp and exp-nc over\n"
        "xgr-full (else full); SLOWER marks rows where comp > xgr-full"
    )
    head = " ".join(f"{c:>8}" for c in COLUMNS)
    print(
        f"{'grammar':12} {'classes':>7} {'B':>3} {head} {'hit%':>5} {'ratio':>6} {'exp/full':>8} {'nc/full':>8}"
    )
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
            classes = load_or_compress(text, vocab, name, args.classes_dir)
        except Exception as exc:
            print(f"{name:12} compress failed: {type(exc).__name__}: {str(exc)[:70]}")
            continue
        t_cmp = time.perf_counter() - t0
        small = compile_grammar(classes, text, engine=args.engine)
        small_nc = compile_grammar(classes, text, engine=args.engine)
        assert small.expander is not None
        small_nc.expander = MaskExpander(small.expander.token_class, small.engine_size, cache_bytes=0)
        walks = record_walks(full, args.walks, steps, seed=0)
        for batch in batches:
            v = Variants(full, small, small_nc, batch)
            res = replay_variants(v, walks)
            base = res["xgr-full"] if not np.isnan(res["xgr-full"]) else res["full"]
            stats = v.ex_cache.cache_stats
            hit = 100.0 * stats["hits"] / max(1, stats["hits"] + stats["misses"])
            flag = "  SLOWER" if res["comp"] > base else ""
            cells = " ".join(f"{res[c]:>8.1f}" for c in COLUMNS)
            print(
                f"{name:12} {classes.num_classes:>7} {batch:>3} {cells} {hit:>5.0f} {base / res['comp']:>6.2f}"
                f" {res['exp'] / base:>8.2f} {res['exp-nc'] / base:>8.2f}{flag}"
            )
        print(f"{'':12} (classes {t_cmp:.1f} s, file {path.relative_to(GRAMMARS)})")


if __name__ == "__main__":
    main()
