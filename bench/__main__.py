"""``python -m bench [-o DIR] [--quick]``: rerun the benchmarks and write the report
(:mod:`bench.report`)."""

from __future__ import annotations

import sys

from bench.report import main

if __name__ == "__main__":
    sys.exit(main())
