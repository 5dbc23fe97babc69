"""Benchmark: Earley recognition of a ~2 KB C program with llama.cpp's ``c.gbnf``.

Run: ``python bench/earley_bench.py [--repeat N] [--size BYTES]``.  Prints a small table with
the median wall time of ``accepts`` (whole program), of ``is_prefix`` on the program minus
its last byte, and of byte-by-byte feeding with ``allowed_bytes`` queries.  Needs the shared
grammar corpus next to the repository (``../shared/grammars``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import formalgram
from formalgram import EarleyRecognizer, accepts, is_prefix

C_GBNF = Path(__file__).resolve().parents[2] / "shared" / "grammars" / "llama_cpp" / "c.gbnf"

# c.gbnf allows no whitespace between statements and needs whitespace after "(" of a
# parenthesised expression; this function body respects both.
_FUNCTION = (
    b"int f%d(int x){int y = x*2+3;while(y>0){y = y-1;}"
    b"for(int i = 0; i<10; i = i+1){y = y+( x*i )/2;}"
    b"if(y==3){return y;}else{return -y;}/* note */// comment\n}"
)


def c_program(size: int) -> bytes:
    """Concatenated function definitions, at least ``size`` bytes long."""
    out = b""
    k = 0
    while len(out) < size:
        out += _FUNCTION % k
        k += 1
    return out


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--size", type=int, default=2048)
    args = ap.parse_args(argv)
    if not C_GBNF.is_file():
        print(f"c.gbnf not found at {C_GBNF}", file=sys.stderr)
        return 1
    load = getattr(formalgram, "load", None)
    if load is None:
        print("formalgram.load is not available (parser missing)", file=sys.stderr)
        return 1
    g = load(C_GBNF)
    prog = c_program(args.size)
    assert accepts(g, prog), "benchmark program is not in L(c.gbnf)"

    def feed_all() -> None:
        r = EarleyRecognizer(g)
        for b in prog:
            r.allowed_bytes()
            r.feed(b)

    rows = [
        ("accepts", _median(lambda: accepts(g, prog), args.repeat)),
        ("is_prefix (n-1 bytes)", _median(lambda: is_prefix(g, prog[:-1]), args.repeat)),
        ("feed + allowed_bytes", _median(feed_all, args.repeat)),
    ]
    print(f"grammar: {C_GBNF.name} {g!r}")
    print(f"input: {len(prog)} bytes, median of {args.repeat} runs")
    print(f"{'operation':<24} {'median s':>10} {'us/byte':>10}")
    for name, t in rows:
        print(f"{name:<24} {t:>10.4f} {1e6 * t / len(prog):>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
