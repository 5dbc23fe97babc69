"""``python -m bench [-o DIR] [--quick]``: rerun the benchmarks and write the report.

The same as ``formalgram-cfgzip bench``; see :mod:`formalgram_cfgzip.report`.
"""

from __future__ import annotations

import argparse
import sys

from formalgram_cfgzip.report import run_report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("-o", "--output", default="bench-report", help="report directory (default bench-report)")
    ap.add_argument("--quick", action="store_true", help="small configuration (a few minutes)")
    args = ap.parse_args(argv)
    return run_report(output=args.output, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
