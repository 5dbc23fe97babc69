"""Which build of formalgram a benchmark (or a test) imports: the installed one before the
checkout's source.

``python -m bench.maskbench`` run from the checkout puts the checkout first on ``sys.path``,
so ``import formalgram_cfgzip`` would load the source tree: pure Python, but for the C
kernels built in place, while the installed build has its core compiled with mypyc.  On 40
MaskBench schemas the source tree's compression and native compile took 1.34x the
installed build's time (21.0 against 15.7 ms at the median), so a benchmark run that way
measures a build nobody serves.  Importing :mod:`bench` therefore moves the checkout root
to the end of ``sys.path`` (it stays importable for :mod:`bench` itself), unless
``PYTHONPATH`` names it: the development loop, the source tree on purpose.  The test
session does the same (``tests/conftest.py``), and both name the build they import
(:func:`describe`).

No formalgram module may be imported before :func:`place_checkout` runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["ROOT", "describe", "is_checkout", "place_checkout", "pythonpath_names_checkout"]

#: The checkout's root (the folder holding ``bench/``).
ROOT = Path(__file__).resolve().parents[1]

# kernel name -> its extension module
KERNEL_MODULES = {
    "expand": "formalgram_cfgzip.expand._cexpand",
    "search": "formalgram_cfgzip.search._csearch",
    "native": "formalgram_cfgzip.engines.native._cnative",
}


def is_checkout(entry: str) -> bool:
    """Whether the ``sys.path`` entry ``entry`` (``""``: the current folder) is the checkout."""
    try:
        return Path(entry or os.curdir).resolve() == ROOT
    except OSError:
        return False


def pythonpath_names_checkout() -> bool:
    """Whether ``PYTHONPATH`` names the checkout (the source tree asked for on purpose)."""
    return any(is_checkout(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)


def place_checkout() -> bool:
    """Move the checkout root to the end of ``sys.path`` unless ``PYTHONPATH`` names it.

    Returns
    -------
    bool
        Whether it was moved (``False``: ``PYTHONPATH`` asks for the source tree).
    """
    if pythonpath_names_checkout():
        return False
    sys.path[:] = [p for p in sys.path if not is_checkout(p)]
    sys.path.append(str(ROOT))
    return True


def describe() -> str:
    """One line naming the build imported: where from, whether its core is compiled, and
    which C kernels are built (read from the import system, not from the package's loaders,
    which an environment variable can switch off)."""
    import formalgram.grammar

    where = os.path.dirname(os.path.dirname(str(formalgram.grammar.__file__)))
    compiled = not str(formalgram.grammar.__file__).endswith(".py")
    core = "mypyc-compiled core" if compiled else "pure-Python core"
    kernels = ", ".join(
        f"{name} {'built' if importlib.util.find_spec(module) is not None else 'MISSING'}"
        for name, module in KERNEL_MODULES.items()
    )
    return f"formalgram from {where}: {core}; C kernels: {kernels}"
