"""The README's front-end example runs as printed, and its mask allows what XGrammar allows.

Oracle for the mask: XGrammar's own full-vocabulary matcher for the same text
(``engines.compile_full``), not the compressed adapter the example uses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _block_after(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    tail = text.split(heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", tail, re.S)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def test_front_end_example_runs_and_matches_the_full_engine() -> None:
    pytest.importorskip("xgrammar")
    pytest.importorskip("quicktok")
    from formalgram_cfgzip import engines

    scope: dict[str, Any] = {}
    exec(_block_after("### Lark, regular expressions and JSON Schema"), scope)
    full = engines.compile_full(scope["vocab"], scope["text"]).matcher()
    expected = full.compiled.allocate_token_bitmask(1)
    full.fill_next_token_bitmask(expected)
    assert np.array_equal(np.asarray(scope["mask"]), np.asarray(expected))
    tid = scope["vocab"].tokens.index(b'{"')
    assert (int(expected[0, tid // 32]) >> (tid % 32)) & 1


def test_per_request_example_runs_and_matches_xgrammar() -> None:
    """The README's per-request example: its first mask is XGrammar's own for the schema."""
    pytest.importorskip("xgrammar")
    pytest.importorskip("quicktok")
    import json

    import xgrammar

    from formalgram_cfgzip.engines.xgrammar import full_tokenizer_info

    scope: dict[str, Any] = {}
    exec(_block_after("### A JSON Schema per request"), scope)
    compiler = xgrammar.GrammarCompiler(full_tokenizer_info(scope["vocab"]), max_threads=1)
    own = xgrammar.GrammarMatcher(compiler.compile_json_schema(json.dumps(scope["schema"])))
    expected = xgrammar.allocate_token_bitmask(1, scope["vocab"].logit_width)
    own.fill_next_token_bitmask(expected)
    assert np.array_equal(np.asarray(scope["mask"]), np.asarray(expected))
