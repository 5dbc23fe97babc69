"""Per-request benchmark: compressing a new grammar against XGrammar compiling it, side by side.

A JSON-schema grammar differs per request, so its classes must be computed when the request
arrives.  For each grammar of the shared JSON-schema corpus (``derived/json_mode_eval_xgrammar``,
80 grammars), in one run and interleaved grammar by grammar, this times:

* ``compress``  :meth:`Compressor.compress <formalgram_cfgzip.compress.Compressor.compress>` of
  the grammar text, cache off (a new grammar: parse, GNF, search, numbering; the vocabulary
  prepared once before the loop);
* ``plain``     the same with ``specialize=False`` (the plain GNF: no per-occurrence copies of
  single-byte symbols; more classes, a cheaper search);
* ``hit``       the same call again with the in-memory cache on (a repeated request);
* ``xgr``       XGrammar's ``GrammarCompiler.compile_grammar`` of the same text over the full
  vocabulary, a fresh compiler with ``cache_enabled=False`` and ``max_threads=1``;

each the minimum of ``--repeats`` runs.  With ``--walk N`` it also times, on the first N
grammars, a whole request at batch 8: ``comp-req`` = compress (cache off) + compile over the
classes (``engines.compile_grammar``) + a 200-step walk of 8 sequences through the compressed adapter
(``plain-req``: the same with the plain GNF),
against ``full-req`` = XGrammar's own full-vocabulary compile (as ``xgr``) + the same walk with
its own matchers and ``BatchGrammarMatcher`` (one thread), no adapter; with ``--native`` also
``nat-req`` / ``nat-plain-req``: the same request with ``Compressor(..., domains=True)`` and the
native engine (its tables from the compression's own search), default and plain GNF (the walks are recorded once beforehand with the full engine, restarting a
sequence when its document is complete, and replayed identically by both); the summary also
gives each request's compile and walk apart (from the fastest of the ``--repeats`` requests).  With ``--stages``
it breaks the compression down per stage (parse, trim, GNF, specialisation, PDA, stack adjacency
as sets (``can_be_below``) and as bit sets (``below_bits``), the whole search setup
(``new_search(gnf)``: the C kernel when built), the search cumulated up to token depths 1, 2, 4,
8, 16 and all, a second walk over the same tables = the walk's own work without steps, the
Python search's setup and walk for comparison, numbering).

Prints one line per grammar, then medians and totals.  Run from the repository root::

    python bench/request_bench.py [--vocab llama3] [--limit 80] [--repeats 3] [--walk 20] [--native] [--stages]
        [--grammars DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from formalgram_cfgzip.compress import Compressor
from formalgram_cfgzip.engines import EngineName, compile_full
from formalgram_cfgzip.engines import compile_grammar as compile_compressed
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.vocabulary import Vocabulary

GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
CORPUS = "derived/json_mode_eval_xgrammar"
WALK_STEPS = 200
WALK_BATCH = 8


def best_of(repeats: int, run: Callable[[], Any]) -> float:
    """Smallest wall time of ``repeats`` calls of ``run``, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best


def record_walk(full: CompiledGrammar, rows: int, steps: int, seed: int) -> list[list[int]]:
    """Per step, per row, the token to accept (``-1``: the document is complete, restart the row)."""
    rng = np.random.default_rng(seed)
    width = full.logit_width
    stops = sorted(full.vocab.stop_ids)
    matchers = [full.matcher() for _ in range(rows)]
    bm = full.allocate_token_bitmask(1)
    plan: list[list[int]] = []
    for _ in range(steps):
        row_plan = []
        for m in matchers:
            m.fill_next_token_bitmask(bm)
            allowed = np.flatnonzero(np.unpackbits(bm[0].view(np.uint8), bitorder="little")[:width])
            allowed = allowed[~np.isin(allowed, stops)]
            if allowed.size == 0 or m.is_terminated():
                m.reset()
                row_plan.append(-1)
                continue
            tok = int(rng.choice(allowed))
            if not m.accept_token(tok):
                raise AssertionError(f"the full engine refused token {tok} it allowed")
            row_plan.append(tok)
        plan.append(row_plan)
    return plan


def replay(compiled: CompiledGrammar, plan: list[list[int]]) -> None:
    """Fill the batch mask and accept the planned tokens, step by step (what is timed)."""
    rows = len(plan[0])
    matchers: list[EngineMatcher] = [compiled.matcher() for _ in range(rows)]
    bm = compiled.allocate_token_bitmask(rows)
    for row_plan in plan:
        compiled.fill_next_token_bitmask_batch(matchers, bm)
        for m, tok in zip(matchers, row_plan, strict=True):
            if tok < 0:
                m.reset()
            elif not m.accept_token(tok):
                raise AssertionError(f"token {tok} of the recorded walk was refused")


def replay_xgrammar(compiled: Any, width: int, plan: list[list[int]]) -> None:
    """:func:`replay` on XGrammar itself: its matchers, its batch fill, no adapter."""
    import xgrammar

    rows = len(plan[0])
    matchers = [xgrammar.GrammarMatcher(compiled) for _ in range(rows)]
    batch = xgrammar.BatchGrammarMatcher(1)
    bm = xgrammar.allocate_token_bitmask(rows, width)
    for row_plan in plan:
        batch.batch_fill_next_token_bitmask(matchers, bm)
        for m, tok in zip(matchers, row_plan, strict=True):
            if tok < 0:
                m.reset()
            elif not m.accept_token(tok):
                raise AssertionError(f"token {tok} of the recorded walk was refused")


def stage_times(text: str, compressor: Compressor) -> dict[str, float]:
    """Seconds of each stage of one compression, done step by step outside ``compress``."""
    from formalgram.adjacency import below_bits, can_be_below
    from formalgram.pda import PDA
    from formalgram.syntax.gbnf import parse_gbnf
    from formalgram.transforms.gnf import to_gnf
    from formalgram.transforms.specialize import specialize_terminal_symbols
    from formalgram.transforms.useless import remove_useless
    from formalgram_cfgzip.compress import number_classes
    from formalgram_cfgzip.search.displacement import DisplacementSearch
    from formalgram_cfgzip.search.driver import build_trie, walk_trie
    from formalgram_cfgzip.search.native import new_search

    prep = compressor.prepared
    toks = prep.tokens
    out: dict[str, float] = {}

    def timed(name: str, run: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        result = run()
        out[name] = time.perf_counter() - t
        return result

    g = timed("parse", lambda: parse_gbnf(text))
    trimmed = timed("trim", lambda: remove_useless(g))
    gnf = timed("to_gnf", lambda: to_gnf(trimmed))
    gnf = timed("specialize", lambda: specialize_terminal_symbols(gnf))
    timed("pda", lambda: PDA.from_gnf(gnf))
    timed("adjacency", lambda: can_be_below(gnf))
    timed("below_bits", lambda: below_bits(gnf))
    search = timed("search_setup", lambda: new_search(gnf))  # the C kernel when built
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    count = int(toks.ids.size)
    for depth in (1, 2, 4, 8, 16):
        cut = build_trie(toks.flat, toks.offsets, np.minimum(toks.lengths, depth))
        fresh = new_search(gnf)
        timed(
            f"search<={depth}", lambda c=cut, s=fresh: walk_trie(s, c, class_of, count, False, 1 << 40, False)
        )
    codes, _ = timed("search", lambda: walk_trie(search, prep.trie, class_of, count, False, 1 << 40, False))
    timed("search_again", lambda: walk_trie(search, prep.trie, class_of, count, False, 1 << 40, False))
    python = timed("python_setup", lambda: DisplacementSearch(gnf))
    timed("python_search", lambda: walk_trie(python, prep.trie, class_of, count, False, 1 << 40, False))
    timed("number", lambda: number_classes(prep.vocab, toks, codes))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default="llama3", help="built-in vocabulary (default llama3)")
    ap.add_argument("--limit", type=int, default=80, help="grammars of the corpus to time (default all 80)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement, the fastest kept")
    ap.add_argument("--walk", type=int, default=0, help="also time whole requests on the first N grammars")
    ap.add_argument("--stages", action="store_true", help="also break the compression down per stage")
    ap.add_argument(
        "--native",
        action="store_true",
        help="with --walk, also whole requests with the native engine (compress(domains=True), default and plain GNF)",
    )
    ap.add_argument(
        "--grammars",
        type=Path,
        default=GRAMMARS,
        help="the shared grammar corpus (default: ../shared/grammars beside the repository)",
    )
    args = ap.parse_args(argv)

    import xgrammar

    from formalgram_cfgzip.engines.xgrammar import full_tokenizer_info

    files = sorted((args.grammars / CORPUS).glob("*.gbnf"), key=lambda p: int(p.stem.split("_")[1]))
    files = files[: args.limit]
    vocab = Vocabulary.builtin(args.vocab)
    t = time.perf_counter()
    cold = Compressor(vocab, cache_size=0)
    prepare_s = time.perf_counter() - t
    plain = Compressor(cold.prepared, cache_size=0, specialize=False)
    # the native engine's requests: the classes' domains recorded by the same search
    requests: list[tuple[str, Compressor, EngineName]] = [
        ("comp", cold, "xgrammar"),
        ("plain", plain, "xgrammar"),
    ]
    if args.native:
        requests += [
            ("nat", Compressor(cold.prepared, cache_size=0, domains=True), "native"),
            ("nat-plain", Compressor(cold.prepared, cache_size=0, specialize=False, domains=True), "native"),
        ]
    warm = Compressor(vocab)
    info = full_tokenizer_info(vocab)
    import formalgram_cfgzip.search.displacement as displacement_module

    build = "compiled (mypyc)" if displacement_module.__file__.endswith(".so") else "pure Python"
    print(f"build: {build}, from {Path(displacement_module.__file__).parents[2]}")
    print(f"vocabulary {args.vocab}: {vocab.size} tokens, prepared once in {prepare_s * 1e3:.0f} ms")
    print(f"{len(files)} grammars of {CORPUS}, best of {args.repeats} runs each, times in ms")
    rows: list[dict[str, float]] = []
    header = f"{'grammar':<10} {'compress':>9} {'plain':>7} {'hit':>7} {'xgr':>7} {'ratio':>6} {'classes':>8} {'plain':>6}"
    if args.walk:
        header += (
            "".join(f" {name + '-req':>13}" for name, _, _ in requests) + f" {'full-req':>9} {'ratio':>6}"
        )
    print(header)
    for i, path in enumerate(files):
        text = path.read_text(encoding="utf-8")
        row: dict[str, float] = {}
        classes = cold.compress(text)  # also warms the allocator for this grammar's size
        row["compress"] = best_of(args.repeats, lambda tx=text: cold.compress(tx))
        plain_classes = plain.compress(text)
        row["plain"] = best_of(args.repeats, lambda tx=text: plain.compress(tx))
        row["plain_classes"] = float(plain_classes.num_classes)
        warm.compress(text)
        row["hit"] = best_of(args.repeats, lambda tx=text: warm.compress(tx))
        row["xgr"] = best_of(
            args.repeats,
            lambda tx=text: xgrammar.GrammarCompiler(
                info, max_threads=1, cache_enabled=False
            ).compile_grammar(tx),
        )
        row["classes"] = float(classes.num_classes)
        line = (
            f"{path.stem:<10} {row['compress'] * 1e3:9.1f} {row['plain'] * 1e3:7.1f} {row['hit'] * 1e3:7.3f} "
            f"{row['xgr'] * 1e3:7.1f} {row['compress'] / row['xgr']:6.2f} {classes.num_classes:8d} "
            f"{plain_classes.num_classes:6d}"
        )
        if i < args.walk:
            plan = record_walk(compile_full(vocab, text), WALK_BATCH, WALK_STEPS, seed=i)
            parts = {name: [float("inf")] * 3 for name, _, _ in requests}
            full_parts = [float("inf")] * 2
            for _ in range(args.repeats):
                for name, compressor, engine in requests:
                    t0 = time.perf_counter()
                    small = compressor.compress(text)
                    t1 = time.perf_counter()
                    compiled = compile_compressed(small, text, engine=engine)
                    t2 = time.perf_counter()
                    replay(compiled, plan)
                    t3 = time.perf_counter()
                    if t3 - t0 < sum(parts[name]):
                        parts[name] = [t1 - t0, t2 - t1, t3 - t2]
                t0 = time.perf_counter()
                own = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False).compile_grammar(text)
                t1 = time.perf_counter()
                replay_xgrammar(own, vocab.logit_width, plan)
                t2 = time.perf_counter()
                if t2 - t0 < sum(full_parts):
                    full_parts = [t1 - t0, t2 - t1]
            for name, _, _ in requests:
                row[f"{name}_req"] = sum(parts[name])
                row[f"{name}_req_compile"] = parts[name][1]
                row[f"{name}_req_walk"] = parts[name][2]
            row["full_req"] = sum(full_parts)
            row["full_req_compile"] = full_parts[0]
            row["full_req_walk"] = full_parts[1]
            line += "".join(f" {row[name + '_req'] * 1e3:13.1f}" for name, _, _ in requests)
            line += f" {row['full_req'] * 1e3:9.1f} {row['comp_req'] / row['full_req']:6.2f}"
        if args.stages:
            row.update({f"stage:{k}": v for k, v in stage_times(text, cold).items()})
        rows.append(row)
        print(line, flush=True)

    def column(key: str) -> list[float]:
        return [r[key] for r in rows if key in r]

    print("\nsummary (ms)            median     total")
    for key in (
        "compress",
        "plain",
        "hit",
        "xgr",
        "comp_req",
        "comp_req_compile",
        "comp_req_walk",
        "plain_req",
        "plain_req_compile",
        "plain_req_walk",
        "nat_req",
        "nat_req_compile",
        "nat_req_walk",
        "nat-plain_req",
        "nat-plain_req_compile",
        "nat-plain_req_walk",
        "full_req",
        "full_req_compile",
        "full_req_walk",
    ):
        vals = column(key)
        if vals:
            print(f"  {key:<20} {statistics.median(vals) * 1e3:9.2f} {sum(vals) * 1e3:9.1f}")
    ratios = [r["compress"] / r["xgr"] for r in rows]
    print(
        f"  compress / xgr: median {statistics.median(ratios):.2f}x, totals {sum(column('compress')) / sum(column('xgr')):.2f}x"
    )
    print(f"  grammars where compress <= xgr: {sum(q <= 1.0 for q in ratios)} of {len(rows)}")
    plain_ratios = [r["plain"] / r["xgr"] for r in rows]
    print(
        f"  plain / xgr: median {statistics.median(plain_ratios):.2f}x; classes median "
        f"{statistics.median(column('classes')):.0f} specialised, {statistics.median(column('plain_classes')):.0f} plain"
    )
    if args.walk:
        for name, _, _ in requests:
            req = [r[f"{name}_req"] / r["full_req"] for r in rows if f"{name}_req" in r]
            total = sum(column(f"{name}_req")) / sum(column("full_req"))
            print(
                f"  {name}-req / full-req: median {statistics.median(req):.2f}x, totals {total:.2f}x, "
                f"cheaper on {sum(q < 1.0 for q in req)} of {len(req)}"
            )
    if args.stages:
        print("\nstages (ms, median over the grammars)")
        keys = [k for k in rows[0] if k.startswith("stage:")]
        for key in keys:
            print(f"  {key[6:]:<14} {statistics.median(column(key)) * 1e3:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
