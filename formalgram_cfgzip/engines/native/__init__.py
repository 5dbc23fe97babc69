"""A native mask engine: masks read off the classes' displacements, no parser per token.

After a prefix ``w`` the state is the set of stacks the one-state PDA of the grammar's GNF
may hold, kept as a graph-structured stack (:mod:`~formalgram_cfgzip.engines.native.gss`).
A class is allowed next exactly when some stack starts with one of its popped sequences;
all classes' popped sequences form one automaton read top of stack first
(:mod:`~formalgram_cfgzip.search.domains`), so one walk of the stack graph through
it gives the whole class mask.  The proof is ``proofs/native_engine.md``.

This package is the ``engine="native"`` backend of :func:`formalgram_cfgzip.engines.compile_grammar`
(:mod:`~formalgram_cfgzip.engines.native.matcher`).
"""

from __future__ import annotations

from formalgram_cfgzip.engines.native.gss import BOTTOM, PyState
from formalgram_cfgzip.engines.native.matcher import (
    NativeCompiled,
    NativeMatcher,
    compile_full,
    compile_grammar,
    resolve_tables,
)
from formalgram_cfgzip.engines.native.tables import NativeTables, build_tables

__all__ = [
    "BOTTOM",
    "NativeCompiled",
    "NativeMatcher",
    "NativeTables",
    "PyState",
    "build_tables",
    "compile_full",
    "compile_grammar",
    "resolve_tables",
]
