"""Build script: compiles the core modules with mypyc, the C mask-expansion kernel
(formalgram_cfgzip/expand/_cexpand.c), the displacement search's kernel
(formalgram_cfgzip/search/_csearch.c) and the native engine's kernel
(formalgram_cfgzip/engines/native/_cnative.c), unless FORMALGRAM_NO_MYPYC=1 (the pure-Python
build, which expands masks with numpy and runs the Python search and the native engine's
Python kernel)."""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup

# Modules compiled with mypyc when installed normally (pure-Python otherwise).
COMPILED = [
    "formalgram/byteset.py",
    "formalgram/grammar.py",
    "formalgram/analysis.py",
    "formalgram/utf8.py",
    "formalgram/syntax/nodes.py",
    "formalgram/syntax/lower.py",
    "formalgram/syntax/gbnf.py",
    "formalgram/syntax/regex.py",
    "formalgram/syntax/lark_lex.py",
    "formalgram/syntax/lark.py",
    "formalgram/transforms/budget.py",
    "formalgram/transforms/useless.py",
    "formalgram/transforms/epsilon.py",
    "formalgram/transforms/unit.py",
    "formalgram/transforms/left_recursion.py",
    "formalgram/transforms/gnf_check.py",
    "formalgram/transforms/gnf_rules.py",
    "formalgram/transforms/gnf_left_corner.py",
    "formalgram/transforms/gnf_substitution.py",
    "formalgram/transforms/gnf_minimise.py",
    "formalgram/transforms/gnf.py",
    "formalgram/transforms/byte_classes.py",
    "formalgram/transforms/specialize.py",
    "formalgram/pda.py",
    "formalgram/adjacency.py",
    "formalgram/recognize/earley.py",
    "formalgram_cfgzip/search/trie.py",
    "formalgram_cfgzip/search/displacement.py",
    "formalgram_cfgzip/search/domains.py",
    "formalgram_cfgzip/search/driver.py",
    "formalgram_cfgzip/search/native.py",
    "formalgram_cfgzip/classes.py",
    "formalgram_cfgzip/pipeline.py",
    "formalgram_cfgzip/verify.py",
    "formalgram_cfgzip/compress.py",
]


def _c_extensions() -> list[Extension]:
    """The hand-written C kernels (mask expansion, the displacement search, the native engine's stack and mask walk);
    plain C99 with the CPython API only.  Without them (``FORMALGRAM_NO_MYPYC=1``) the
    package runs its numpy / pure-Python kernels, with identical results."""
    args = [] if sys.platform == "win32" else ["-O3"]
    return [
        Extension(
            "formalgram_cfgzip.expand._cexpand",
            ["formalgram_cfgzip/expand/_cexpand.c"],
            depends=["formalgram_cfgzip/_cexpand_api.h"],
            extra_compile_args=args,
        ),
        Extension(
            "formalgram_cfgzip.search._csearch",
            ["formalgram_cfgzip/search/_csearch.c"],
            depends=["formalgram_cfgzip/_cgrow.h"],
            extra_compile_args=args,
        ),
        Extension(
            "formalgram_cfgzip.engines.native._cnative",
            ["formalgram_cfgzip/engines/native/_cnative.c"],
            depends=["formalgram_cfgzip/_cgrow.h", "formalgram_cfgzip/_cexpand_api.h"],
            extra_compile_args=args,
        ),
    ]


def _ext_modules() -> list[object]:
    if os.environ.get("FORMALGRAM_NO_MYPYC", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    present = [m for m in COMPILED if os.path.exists(m)]
    return [*mypycify(present, opt_level="3", debug_level="0"), *_c_extensions()]


setup(ext_modules=_ext_modules())
