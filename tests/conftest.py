"""Test-session set-up: the checkout's ``bench`` package is importable.

The benchmark code (``bench/``) is not installed; ``tests/test_report.py`` imports it from
the checkout.  The repository root is appended to ``sys.path``, not put first, so that an
installed (mypyc-compiled) ``formalgram`` still wins over the source tree next to it.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
