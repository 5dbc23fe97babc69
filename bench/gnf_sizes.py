"""GNF sizes on every shared grammar: rules before/after, nonterminals, time, peak memory.

Usage::

    python bench/gnf_sizes.py [--grammars DIR] [--budget N] [--out bench/results/gnf_sizes.md]

Grammars that do not parse (Lark files, unsupported constructs) are listed with the
parser's error.  Time is the median of 3 conversions; peak memory is the tracemalloc
peak of one extra conversion.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from formalgram import FormalgramError, is_gnf, to_gnf
from formalgram.syntax.gbnf import load

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parents[1] / "shared" / "grammars"


def _files(root: Path) -> list[Path]:
    out = [p for p in root.rglob("*") if p.suffix in (".gbnf", ".ebnf") and p.is_file()]
    return sorted(out, key=lambda p: str(p.relative_to(root)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grammars", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--budget", type=int, default=200_000)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "gnf_sizes.md")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--objective", choices=["rules", "nonterminals"], default="rules")
    args = ap.parse_args(argv)
    if not args.grammars.is_dir():
        print(f"no grammar folder at {args.grammars}", file=sys.stderr)
        return 1
    lines = [
        "| grammar | rules before | nonterminals before | rules after GNF | nonterminals after | "
        "size after | time (ms, median) | peak MiB | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    tot_before = tot_after = 0
    for path in _files(args.grammars):
        rel = str(path.relative_to(args.grammars))
        try:
            g = load(path)
        except FormalgramError as exc:
            msg = str(exc).splitlines()[0][:70].replace("|", "/")
            lines.append(f"| {rel} | | | | | | | | parse: {msg} |")
            print(lines[-1], flush=True)
            continue
        times: list[float] = []
        h = None
        note = ""
        try:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                h = to_gnf(g, budget=args.budget, objective=args.objective)
                times.append(time.perf_counter() - t0)
            tracemalloc.start()
            to_gnf(g, budget=args.budget, objective=args.objective)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        except FormalgramError as exc:
            if tracemalloc.is_tracing():
                tracemalloc.stop()
            note = f"{type(exc).__name__}: {str(exc)[:60]}"
            lines.append(f"| {rel} | {len(g.rules)} | {len(g.names)} | | | | | | {note} |")
            print(lines[-1], flush=True)
            continue
        assert h is not None and is_gnf(h)
        tot_before += len(g.rules)
        tot_after += len(h.rules)
        st = h.stats()
        lines.append(
            f"| {rel} | {len(g.rules)} | {len(g.names)} | {len(h.rules)} | {len(h.names)} | {st['size']} | "
            f"{statistics.median(times) * 1000:.1f} | {peak:.1f} | {note} |"
        )
        print(lines[-1], flush=True)
    lines.append(f"| **total (converted)** | {tot_before} | | {tot_after} | | | | | |")
    text = (
        "# GNF sizes on the shared grammars\n\n"
        f"Produced by `python bench/gnf_sizes.py` (budget {args.budget} rules, objective {args.objective}). "
        "'size' = rules + total rhs length.\n\n" + "\n".join(lines) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(lines[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
