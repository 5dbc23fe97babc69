"""Time of :func:`~formalgram.transforms.gnf.to_gnf` per request grammar, and which construction wins.

Per grammar of a folder of GBNF files (default: the shared ``derived/json_mode_eval_xgrammar``
corpus), the best-of-``--repeat`` time of ``to_gnf(remove_useless(g), budget=B)`` with the
budget per-request compression uses (``--budget``, default 2,000,000), then the median and
total over the corpus.  With ``--candidates`` it also lists, per grammar, the size (rules,
nonterminals) each construction of ``to_gnf`` reaches on its own (``strategy=NAME``) and the
one the default run keeps.

Run from the repository root::

    python bench/gnf_request_bench.py [--grammars DIR] [--repeat 5] [--budget N] [--candidates]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from formalgram import FormalgramError
from formalgram.syntax.gbnf import load
from formalgram.transforms.gnf import STRATEGIES, to_gnf
from formalgram.transforms.useless import remove_useless

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE.parents[1] / "shared" / "grammars" / "derived" / "json_mode_eval_xgrammar"


def _key(p: Path) -> tuple[int, str]:
    tail = p.stem.rsplit("_", 1)[-1]
    return (int(tail) if tail.isdigit() else -1, p.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--grammars", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--budget", type=int, default=2_000_000)
    ap.add_argument("--candidates", action="store_true")
    args = ap.parse_args(argv)
    if not args.grammars.is_dir():
        print(f"no grammar folder at {args.grammars}", file=sys.stderr)
        return 1
    times: list[float] = []
    for path in sorted(args.grammars.glob("*.gbnf"), key=_key):
        try:
            g = remove_useless(load(path))
        except FormalgramError as exc:
            print(f"{path.name}: {exc}", file=sys.stderr)
            continue
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = to_gnf(g, budget=args.budget)
            best = min(best, time.perf_counter() - t0)
        times.append(best)
        line = f"{path.name}\t{1000 * best:.2f} ms\t{len(out.rules)} rules"
        if args.candidates:
            sizes: list[str] = []
            for name in (*STRATEGIES[3:], "substitution"):
                try:
                    r = to_gnf(g, budget=args.budget, strategy=name)
                    t0 = time.perf_counter()
                    to_gnf(g, budget=args.budget, strategy=name)
                    dt = 1000 * (time.perf_counter() - t0)
                    sizes.append(f"{name.rsplit(':', 1)[-1]}={len(r.rules)}/{len(r.names)}({dt:.1f}ms)")
                except FormalgramError:
                    sizes.append(f"{name.rsplit(':', 1)[-1]}=fail")
            line += "\t" + " ".join(sizes)
        print(line, flush=True)
    if times:
        print(
            f"{len(times)} grammars: median {1000 * statistics.median(times):.2f} ms, "
            f"total {1000 * sum(times):.1f} ms (best of {args.repeat} each)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
