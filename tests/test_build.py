"""The installed build: compiled with mypyc unless FORMALGRAM_NO_MYPYC=1 was set.

A build with any compiled part has all three C kernels (``tests/_build.py``); the kernel
checks skip only in the pure-Python build, and no environment variable turns a missing
kernel into a skip.
"""

from __future__ import annotations

import os

import _build
import pytest

import formalgram
import formalgram.byteset
import formalgram.grammar

# CI builds the compiled install and says so with FORMALGRAM_EXPECT_COMPILED=1; elsewhere the
# core may be pure Python (a development checkout, with or without its kernels built in place).
needs_compiled_core = pytest.mark.skipif(
    os.environ.get("FORMALGRAM_EXPECT_COMPILED") != "1" and not _build.CORE_COMPILED,
    reason="pure-Python core (a development checkout or FORMALGRAM_NO_MYPYC=1)",
)


@needs_compiled_core
def test_core_is_compiled() -> None:
    for mod in (formalgram.grammar, formalgram.byteset):
        assert mod.__file__ is not None
        assert not mod.__file__.endswith(".py"), f"{mod.__name__} is not compiled: {mod.__file__}"


def test_py_typed_shipped() -> None:
    assert formalgram.__file__ is not None
    assert os.path.exists(os.path.join(os.path.dirname(formalgram.__file__), "py.typed"))


def test_kernels_all_or_none() -> None:
    """Never a build with some kernels: every kernel, or (the pure-Python build) none."""
    if _build.PURE_PYTHON:
        assert not any(_build.BUILT.values())
    else:
        missing = [name for name, ok in _build.BUILT.items() if not ok]
        assert not missing, f"a compiled build without the C kernels {missing}: {_build.describe()}"


@pytest.mark.ckernel("expand")
def test_c_expansion_kernel_is_built() -> None:
    """The compiled install also builds the C mask-expansion kernel, and expanders use it."""
    import numpy as np

    from formalgram_cfgzip import expand
    from formalgram_cfgzip.expand._c_kernel import load_c_module

    assert load_c_module() is not None, "formalgram_cfgzip.expand._cexpand was not built"
    assert expand.MaskExpander(np.array([0, 1, 1]), 2).kernel == "c"


@pytest.mark.ckernel("native")
def test_c_native_kernel_is_built() -> None:
    """The compiled install also builds the native engine's C kernel, and the engine uses it."""
    from formalgram_cfgzip import Vocabulary, compress, engines
    from formalgram_cfgzip.engines.native.matcher import c_module

    assert c_module() is not None, "formalgram_cfgzip.engines.native._cnative was not built"
    text, vocab = 'root ::= "a"+', Vocabulary([b"a", b"aa"])
    compiled = engines.compile_grammar(compress(text, vocab, progress=False), text, engine="native")
    assert getattr(compiled, "kernel", None) == "c"


@pytest.mark.ckernel("search")
def test_c_search_kernel_is_built() -> None:
    """The compiled install also builds the displacement search's C kernel, and compress uses it."""
    from formalgram_cfgzip import Vocabulary, compress
    from formalgram_cfgzip.search.native import c_module

    assert c_module() is not None, "formalgram_cfgzip.search._csearch was not built"
    classes = compress('root ::= "a"+', Vocabulary([b"a", b"aa", b"b"]), progress=False)
    assert classes.stats["search_kernel"] == 1.0
