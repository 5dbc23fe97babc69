"""The names of the expansion plans: one vocabulary for both CPU kernels.

A *plan* is how one token-bitmask row was computed from its class-bitmask row.  Both
kernels report the plan of the last row they wrote under these names
(:attr:`MaskExpander.last_strategy <formalgram_cfgzip.expand.MaskExpander.last_strategy>`),
and the C kernel's cost-model corrections (``Kernel.info()["corrections"]``) are keyed by
them too.  The *head* classes are the largest ones, covered by subset tables (the 256
unions of the token bitmasks of 8 classes); the *tail* tokens are all the others.

==============  =======================================================  ============
name            what the row cost                                        reported by
==============  =======================================================  ============
``gather``      every logit index reads its class's bit                  C, numpy
``split``       one OR per subset table, then a gather of the tail       C, numpy
``set``         the tokens of the listed allowed classes are set         C
``clear``       every valid token, minus the listed disallowed classes   C
``delta``       a cached row with the tokens of the differing classes    C, numpy
                flipped (a token's bit is its class's bit)
``split/set``   subset tables, then ``set`` over the tail classes        C, numpy
``split/clear`` subset tables, then ``clear`` over the tail classes      C, numpy
``split/none``  subset tables only (no tail token is allowed)            numpy
``split/all``   subset tables, then every tail token                     numpy
``cache``       a copy of a cached row                                   C, numpy
==============  =======================================================  ============

A caller may force a plan by *strategy* (tests and benchmarks; forced rows bypass the row
cache): ``"gather"``, ``"split"``, or ``"sparse"`` (the listed plan with fewer classes:
the numpy kernel after its subset tables, the C kernel without them).
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
#: names; code 5 is only a request ("set or clear, whichever lists fewer classes"), run and
#: reported as 2 or 3
C_PLAN_NAMES: Final = (GATHER, SPLIT, SET, CLEAR, DELTA, "", SPLIT_SET, SPLIT_CLEAR, CACHE)

#: how a plan is forced: ``"auto"`` lets the kernel choose (through its row cache)
Strategy = Literal["auto", "split", "gather", "sparse"]

#: forced strategies -> the C kernel's plan codes
C_FORCED: Final = {"gather": 0, "split": 1, "sparse": 5}
