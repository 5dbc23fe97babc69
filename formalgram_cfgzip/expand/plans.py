"""The names of the expansion plans: one vocabulary for both CPU kernels.

A *plan* is how one token-bitmask row was computed from its class-bitmask row.  Both
kernels report the plan of the last row they wrote under these names
(:attr:`MaskExpander.last_strategy <formalgram_cfgzip.expand.MaskExpander.last_strategy>`),
and the C kernel's cost-model corrections (``Kernel.info()["corrections"]``) are keyed by
them too.  Both kernels precompute something for the largest (*dense*) classes: the C
kernel one full-vocabulary token row per class (combined 32 bytes at a time, up to 8 rows
per pass), the numpy kernel subset tables (the 256 unions of the token rows of 8 classes);
the *tail* tokens are those of all the other classes.

==============  =======================================================  ============
name            what the row cost                                        reported by
==============  =======================================================  ============
``gather``      every logit index reads its class's bit                  C, numpy
``split``       the dense classes' rows or tables, then a word-by-word   C, numpy
                gather of the tail tokens
``set``         the dense classes' rows, then the tokens of the allowed  C
                tail classes set
``clear``       the dense classes' rows, then every tail token minus     C
                the tokens of the disallowed tail classes
``delta``       a cached row with the tokens of the differing classes    C, numpy
                flipped (a token's bit is its class's bit)
``split/set``   subset tables, then ``set`` over the tail classes        numpy
``split/clear`` subset tables, then ``clear`` over the tail classes      numpy
``split/none``  subset tables only (no tail token is allowed)            numpy
``split/all``   subset tables, then every tail token                     numpy
``cache``       a copy of a cached row                                   C, numpy
==============  =======================================================  ============

In the C kernel's ``split``, ``set`` and ``clear`` the dense classes are the OR of the
allowed classes' rows or, when fewer are disallowed, the union of all dense classes
AND-NOT the disallowed ones' rows; its ``delta`` patches the nearest of the few most
recently used cached rows (XOR of the differing dense classes' rows).

A caller may force a plan by *strategy* (tests and benchmarks; forced rows bypass the row
cache): ``"gather"``, ``"split"``, or ``"sparse"`` (the listed plan with fewer tail
classes: ``set`` or ``clear`` in the C kernel, after the dense classes' rows; the numpy
kernel's after its subset tables).
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "CACHE",
    "CLEAR",
    "C_FORCED",
    "C_PLAN_NAMES",
    "DELTA",
    "GATHER",
    "PLANS",
    "SET",
    "SPLIT",
    "SPLIT_ALL",
    "SPLIT_CLEAR",
    "SPLIT_NONE",
    "SPLIT_SET",
    "Strategy",
]

GATHER: Final = "gather"
SPLIT: Final = "split"
SET: Final = "set"
CLEAR: Final = "clear"
DELTA: Final = "delta"
SPLIT_SET: Final = "split/set"
SPLIT_CLEAR: Final = "split/clear"
SPLIT_NONE: Final = "split/none"
SPLIT_ALL: Final = "split/all"
CACHE: Final = "cache"

#: every plan name, in the order of the table above
PLANS: Final = (GATHER, SPLIT, SET, CLEAR, DELTA, SPLIT_SET, SPLIT_CLEAR, SPLIT_NONE, SPLIT_ALL, CACHE)

#: the C kernel's plan codes (what ``Kernel.expand`` and ``Kernel.expand_rows`` return) ->
#: names; code 5 is only a request ("set or clear, whichever lists fewer tail classes"), run
#: and reported as 2 or 3; codes 6 and 7 are unused
C_PLAN_NAMES: Final = (GATHER, SPLIT, SET, CLEAR, DELTA, "", "", "", CACHE)

#: how a plan is forced: ``"auto"`` lets the kernel choose (through its row cache)
Strategy = Literal["auto", "split", "gather", "sparse"]

#: forced strategies -> the C kernel's plan codes
C_FORCED: Final = {"gather": 0, "split": 1, "sparse": 5}
