"""Budgets on blow-up grammars: each case in a fresh child process, its outcome, wall time and peak RSS.

Run: ``python bench/budget_cases.py [--only NAME,...] [--timeout 300]`` (as a script, so that an
installed, compiled ``formalgram`` is the one imported).  Prints a Markdown table: the case,
its outcome (``ok`` with the size of the result, or the typed error and its budget), the
seconds the operation took in the child (parsing the grammar excluded), the child's peak
resident memory, and the call.  A child killed by the timeout or a signal, or ending in an
untyped error, is reported as such.  These are the reproducers of ``tests/test_budgets.py``
(which run them under a 1.5 GiB address-space limit); docs/benchmarks.md has the results.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

# the grammar families of the budget tests (tests/_blowup_grammars.py), then the report (run in the child)
PRELUDE = (
    (Path(__file__).resolve().parents[1] / "tests" / "_blowup_grammars.py").read_text(encoding="utf-8")
    + r"""
import json, resource, sys, time
from formalgram import (FormalgramError, GrammarTooLarge, accepts, remove_epsilon, remove_left_recursion,
                        remove_unit, to_gnf)

def report(setup, op):
    g = setup()
    t = time.perf_counter()
    try:
        value = op(g)
        out = "ok: " + (f"{len(value.rules)} rules" if hasattr(value, "rules") else repr(value))
    except GrammarTooLarge as exc:
        out = f"GrammarTooLarge ({exc.what}, budget {exc.limit})"
    except FormalgramError as exc:
        out = f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"
    except Exception as exc:
        out = f"UNTYPED {type(exc).__name__}: {str(exc)[:80]}"
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    import formalgram.grammar
    print(json.dumps({"outcome": out, "seconds": seconds, "peak_mib": peak, "module": formalgram.grammar.__file__}))
"""
)

# name -> (grammar, operation on g); the operation is what the table names
CASES: dict[str, tuple[str, str]] = {
    # the parser: any depth under a raised limit, {m,n} linear in the expanded size
    "parse-nesting-35000": (
        """'root ::= ' + '(' * 35_000 + '"a"' + ')' * 35_000""",
        "parse_gbnf(g, max_depth=10**6)",
    ),
    "parse-nesting-600000": (
        """'root ::= ' + '(' * 600_000 + '"a"' + ')' * 600_000""",
        "parse_gbnf(g, max_depth=10**6)",
    ),
    "parse-nesting-35000-default": ("""'root ::= ' + '(' * 35_000 + '"a"' + ')' * 35_000""", "parse_gbnf(g)"),
    "parse-repeat-2000": ("""'root ::= "a"{0,2000}'""", "parse_gbnf(g)"),
    "parse-repeat-16000": ("""'root ::= "a"{0,16000}'""", "parse_gbnf(g)"),
    "parse-repeat-1-50000": ("""'root ::= "a"{1,50000}'""", "parse_gbnf(g)"),
    "parse-repeat-1-50001": ("""'root ::= "a"{1,50001}'""", "parse_gbnf(g)"),
    # the transforms and Earley
    "repeat-2000-b20k": ("""parse_gbnf('root ::= "a"{0,2000}')""", "to_gnf(g, budget=20_000)"),
    "repeat-2000": ("""parse_gbnf('root ::= "a"{0,2000}')""", "to_gnf(g)"),
    "unit-chain-5000": ('chain("unit", 5000)', "to_gnf(g)"),
    "right-chain-5000": ('chain("right", 5000)', "to_gnf(g)"),
    "left-chain-5000": ('chain("left", 5000)', "to_gnf(g)"),
    "doubling-60": ("doubling(60)", "to_gnf(g)"),
    "doubling-60-b20k": ("doubling(60)", "to_gnf(g, budget=20_000)"),
    "optional-chain-5000": ('chain("optional", 5000)', "to_gnf(g)"),
    "doubling-left-40": ("doubling_left(40)", 'to_gnf(g, strategy="substitution")'),
    "left-chain-20000-deep": ('chain("left", 20000)', 'to_gnf(g, strategy="left-corner:deep")'),
    "unit-chain-5000-unit": ('chain("unit", 5000)', "remove_unit(g)"),
    "unitloop-5000": ('chain("unitloop", 5000)', "remove_unit(g)"),
    "left-chain-5000-lr": ('chain("left", 5000)', "remove_left_recursion(g)"),
    "left-cycle-16": ("left_cycle(16)", "remove_left_recursion(g)"),
    "nullables-30000": ("nullables(30_000)", "remove_epsilon(g)"),
    "nullables-30000-b1000": ("nullables(30_000)", "remove_epsilon(g, budget=1_000)"),
    "nullables-30000-gnf": ("nullables(30_000)", "to_gnf(g)"),
    "earley-unit-chain-4000": ('chain("unit", 4000)', 'accepts(g, b"x")'),
    "earley-ambiguous-3000": ("""parse_gbnf('root ::= root root | "x"')""", 'accepts(g, b"x" * 3000)'),
    "earley-right-5000": ("""parse_gbnf('root ::= "x" root | "x"')""", 'accepts(g, b"x" * 5000)'),
}


def run_case(name: str, timeout: float) -> dict[str, object]:
    grammar, op = CASES[name]
    code = PRELUDE + f"report(lambda: {grammar}, lambda g: {op})\n"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {
            "outcome": f"HANG (killed after {timeout:.0f} s)",
            "seconds": timeout,
            "peak_mib": float("nan"),
        }
    wall = time.perf_counter() - start
    if done.returncode != 0 or not done.stdout.strip():
        peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        return {
            "outcome": f"CRASH (exit {done.returncode}) {tail[0][:80]}",
            "seconds": wall,
            "peak_mib": peak,
        }
    row: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--only", help="comma-separated case names (default: all)")
    ap.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per case before it counts as a hang"
    )
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown cases: {', '.join(unknown)}")
    import formalgram.grammar

    compiled = formalgram.grammar.__file__.endswith(".so")
    print(
        f"formalgram at {os.path.dirname(formalgram.grammar.__file__)} ({'compiled' if compiled else 'pure Python'})"
    )
    print()
    print("| case | outcome | s | peak MiB | call |")
    print("|---|---|---:|---:|---|")
    bad = 0
    modules: set[str] = set()
    for name in names:
        row = run_case(name, args.timeout)
        modules.add(str(row.get("module", "?")))
        outcome = str(row["outcome"])
        bad += outcome.startswith(("HANG", "CRASH", "UNTYPED"))
        grammar, op = CASES[name]
        print(
            f"| {name} | {outcome} | {float(str(row['seconds'])):.2f} | {float(str(row['peak_mib'])):.0f} | "
            f"`{op}` on `{grammar}` |",
            flush=True,
        )
    print()
    print("children imported formalgram.grammar from:", ", ".join(sorted(modules)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
