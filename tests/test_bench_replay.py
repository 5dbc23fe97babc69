"""Smoke test of ``bench/row_cache_replay.py`` on a MaskBench-shaped folder written here.

No timing asserts: the replay runs, checks the rows of its first passes against the numpy
kernel's expansion (an AssertionError otherwise), reports the schemas it walked, and names the
ones it left out (an instance the schema refuses).  The baseline path loads a second copy of
the installed kernel, so both builds' rows are checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from formalgram_cfgzip.expand._c_kernel import load_c_module

pytestmark = pytest.mark.skipif(load_c_module() is None, reason="the C expansion kernel is not built")
quicktok = pytest.importorskip("quicktok", reason="quicktok (the llama3 vocabulary) not installed")

SCHEMA = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
        "kind": {"enum": ["alpha", "beta", "gamma", "delta"]},
        "count": {"type": "integer"},
    },
    "required": ["code", "kind"],
    "additionalProperties": False,
}


def test_replay_checks_rows_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import row_cache_replay

    instance = {"code": "AB123", "kind": "beta", "count": 7}
    good = {"schema": SCHEMA, "tests": [{"data": instance, "valid": True}]}
    # the benchmark takes the first valid-marked instance; this one breaks the pattern
    bad = {"schema": SCHEMA, "tests": [{"data": {"code": "ab", "kind": "beta"}, "valid": True}]}
    (tmp_path / "good.json").write_text(json.dumps(good), "utf-8")
    (tmp_path / "bad.json").write_text(json.dumps(bad), "utf-8")
    kernel = load_c_module()
    assert kernel is not None and kernel.__file__ is not None
    args = [str(tmp_path), "--passes", "2", "--baseline", kernel.__file__]
    assert row_cache_replay.main(args) == 0
    out = capsys.readouterr().out
    assert "bad: instance refused" in out
    lines = [line for line in out.splitlines() if line.startswith("good ")]
    assert len(lines) == 1
    classes, steps, misses = lines[0].split()[1:4]
    tokens = quicktok.get_encoding("llama3").encode_ordinary(json.dumps(instance))
    assert int(steps) == len(tokens) + 1  # a row per token, and the one after the last
    assert 1 <= int(misses) <= int(steps) and int(classes) > 1
    assert "all steps, current:" in out and "all steps, baseline:" in out
