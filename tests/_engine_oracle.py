"""The engine tests' oracle: what the full-vocabulary engine allows, run alone.

A fresh full-vocabulary matcher is fed the tokens and fills one row; nothing of the
compressed path (classes, expanders, processors) is involved.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from formalgram_cfgzip.engines.base import CompiledGrammar


def mask_after(compiled: CompiledGrammar, tokens: list[int]) -> np.ndarray[Any, np.dtype[np.int32]]:
    """The token bitmask (one row) of a fresh matcher of ``compiled`` fed ``tokens``."""
    m = compiled.matcher()
    for t in tokens:
        assert m.accept_token(t), (tokens, t)
    out = compiled.allocate_token_bitmask(1)
    m.fill_next_token_bitmask(out)
    return out


def allowed_after(full: CompiledGrammar, tokens: list[int]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Which logits (``logit_width`` booleans) ``full`` allows after ``tokens``."""
    row = mask_after(full, tokens)[0]
    return np.unpackbits(row.view(np.uint8), bitorder="little")[: full.logit_width].astype(bool)
