"""The Triton kernels of ``bench/gpu_walks.py`` (several batch rows per program) against the
bit-by-bit oracle, in Triton's CPU interpreter.

On a CUDA machine ``bench/gpu_walks.py`` checks them compiled, on real walks, against the CPU
rows and XGrammar's ``apply_token_bitmask_inplace``; here they run with ``TRITON_INTERPRET=1``
(set before Triton is imported, so in a child process) on batches that do and do not fill
the last program's rows, class ids past 32 and the sign bit of a word included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

_CHILD = textwrap.dedent(
    """
    import json
    import numpy as np
    import torch
    from _expand_oracle import expand_reference
    from bench.gpu_walks import ROWS, DeviceRows

    rng = np.random.default_rng(5)
    results = []
    for width, classes, batch in ((33, 2, 1), (1100, 40, ROWS), (2100, 300, ROWS + 3), (3000, 70, 2 * ROWS + 1)):
        tc = rng.integers(-1, classes, size=width)
        tc[: width // 3] = classes - 1  # one large class, as real vocabularies have
        words = (width + 31) // 32
        cw = (classes + 31) // 32
        dev = DeviceRows(tc, words, torch.device("cpu"))
        rows = rng.integers(-(2**31), 2**31, size=(batch, cw + 2), dtype=np.int64).astype(np.int32)
        rows[0, :] = -1
        if batch > 1:
            rows[1, :] = 0
        cm = torch.from_numpy(rows)[:, :cw]  # a row stride that is not the row length
        want = expand_reference(tc, np.ascontiguousarray(rows[:, :cw]), width)
        out = torch.full((batch, words), 7, dtype=torch.int32)
        dev.expand(cm, out)
        logits = torch.randn(batch, width)
        before = logits.clone()
        dev.mask_logits(logits, cm)
        allowed = np.unpackbits(want.view(np.uint8), axis=1, bitorder="little")[:, :width].astype(bool)
        neg = torch.isneginf(logits).numpy()
        ok_logits = bool(np.array_equal(neg, ~allowed)) and bool(
            np.array_equal(logits.numpy()[allowed], before.numpy()[allowed])
        )
        results.append({"case": [width, classes, batch], "expand": bool(np.array_equal(out.numpy(), want)),
                        "logits": ok_logits})
    print(json.dumps(results))
    """
)


def test_rows_kernels_match_the_oracle_in_the_interpreter() -> None:
    here = Path(__file__).resolve().parent
    path = os.pathsep.join(p for p in (str(here), str(here.parent), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 4
    bad = [r for r in results if not (r["expand"] and r["logits"])]
    assert not bad, bad
