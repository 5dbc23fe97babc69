"""Which build of formalgram the tests import, and its C kernels (no tests here).

Two builds exist: the compiled one (``pip install .``: the core compiled with mypyc and
three C kernels) and the pure-Python one (``FORMALGRAM_NO_MYPYC=1``: no compiled module at
all).  A source tree with the kernels built in place counts as compiled for the kernels.

* :data:`PURE_PYTHON` -- no compiled module: the kernel tests skip, each with its reason.
* otherwise every kernel must be there: a missing one is a test failure, never a skip,
  whatever ``FORMALGRAM_NO_C*`` or ``FORMALGRAM_EXPECT_COMPILED`` says
  (:func:`require_kernel`, used by the ``ckernel`` marker of ``tests/conftest.py``).

Presence is read from the import system (``importlib.util.find_spec``), not from the
package's loaders, which an environment variable can switch off.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType
from typing import Any

import pytest

import formalgram.grammar

# kernel name -> (module, the loader that the package calls, the variable that switches it off);
# the modules are bench._checkout's, which names them in the build's description
_MODULES: dict[str, str] = importlib.import_module("bench._checkout").KERNEL_MODULES
KERNELS: dict[str, tuple[str, str, str]] = {
    "expand": (
        _MODULES["expand"],
        "formalgram_cfgzip.expand._c_kernel:load_c_module",
        "FORMALGRAM_NO_CEXPAND",
    ),
    "search": (
        _MODULES["search"],
        "formalgram_cfgzip.search.native:c_module",
        "FORMALGRAM_NO_CSEARCH",
    ),
    "native": (
        _MODULES["native"],
        "formalgram_cfgzip.engines.native.matcher:c_module",
        "FORMALGRAM_NO_CNATIVE",
    ),
}


def kernel_built(name: str) -> bool:
    """Whether the kernel ``name``'s extension module is importable (switches ignored)."""
    return importlib.util.find_spec(KERNELS[name][0]) is not None


CORE_COMPILED = not str(formalgram.grammar.__file__).endswith(".py")
BUILT = {name: kernel_built(name) for name in KERNELS}
PURE_PYTHON = not CORE_COMPILED and not any(BUILT.values())
PURE_REASON = "pure-Python build (FORMALGRAM_NO_MYPYC=1): no C kernel is built"


def describe() -> str:
    """One line naming the build the tests import (for the test report's header)."""
    return str(importlib.import_module("bench._checkout").describe())


def _load(name: str) -> Any:
    """The kernel ``name`` as the package's own loader returns it (``None``: switched off)."""
    home, attr = KERNELS[name][1].split(":")
    return getattr(importlib.import_module(home), attr)()


def require_kernel(name: str) -> ModuleType:
    """The kernel ``name`` as the package loads it; skips the test in the pure-Python build.

    Raises
    ------
    pytest.fail.Exception
        In a build with any compiled part, when the kernel is not built or is switched off
        by its environment variable.
    """
    module, _, switch = KERNELS[name]
    if PURE_PYTHON:
        pytest.skip(PURE_REASON)
    if not BUILT[name]:
        pytest.fail(f"the build is compiled ({describe()}) but {module} is not built", pytrace=False)
    loaded = _load(name)
    if loaded is None:
        pytest.fail(
            f"{module} is built but switched off ({switch}={os.environ.get(switch)!r})", pytrace=False
        )
    assert isinstance(loaded, ModuleType)
    return loaded


def kernel_module(name: str) -> Any:
    """The kernel ``name``'s module for module-level use, or ``None`` where it cannot be
    loaded; tests that use it carry ``pytest.mark.ckernel(name)``, which skips or fails them."""
    return _load(name) if BUILT[name] else None


def c_param(name: str, value: str = "c") -> Any:
    """A ``parametrize`` value for the C kernel ``name``: shown as skipped in the pure-Python
    build, a failure in a compiled build that lacks the kernel."""
    return pytest.param(value, marks=pytest.mark.ckernel(name), id=value)


def expected_kernels(python: str) -> list[str]:
    """The kernels a test that compares them in one run uses: ``python`` and, in any build
    with a compiled part, ``"c"`` (which then fails loudly where it is missing)."""
    return [python] if PURE_PYTHON else [python, "c"]
