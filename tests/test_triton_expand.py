"""The Triton expansion kernels against the bit-by-bit oracle, in Triton's CPU interpreter.

On a CUDA machine ``bench/gpu_check.py`` runs the same kernels compiled; here they run with
``TRITON_INTERPRET=1``, which must be set before Triton is imported, so the check runs in a
child process and reports a JSON summary.  (Proof: proofs/engine_adapter.md, lemma 1.)
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
    from formalgram_cfgzip.expand import TorchMaskExpander

    rng = np.random.default_rng(11)
    results = []
    cases = [(1, 1, 1), (31, 2, 2), (32, 1, 1), (33, 33, 3), (1000, 40, 4), (4133, 300, 2), (2100, 64, 5)]
    for width, classes, batch in cases:
        tc = rng.integers(-1, classes, size=width)
        if width > 100:
            tc[: width // 3] = 0  # one large class, as real vocabularies have
        ex = TorchMaskExpander(tc, classes, backend="triton")
        cw = (classes + 31) // 32
        # rows of a wider buffer: a row stride that is not the row length
        wide = rng.integers(-(2**31), 2**31, size=(batch, cw + 3), dtype=np.int64).astype(np.int32)
        wide[0, :] = 0
        if batch > 1:
            wide[1, :] = -1
        cm = torch.from_numpy(wide)[:, :cw]
        want = expand_reference(tc, np.ascontiguousarray(wide[:, :cw]), width)
        got = ex.expand(cm).numpy()
        ok_expand = bool(np.array_equal(got, want))
        allowed = np.unpackbits(want.view(np.uint8), axis=1, bitorder="little")[:, :width].astype(bool)
        ok_logits = True
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            logits = torch.randn(batch, width + 5).to(dtype)
            before = logits.clone()
            ex.mask_logits(logits, cm)
            neg = torch.isneginf(logits.float()).numpy()
            kept = logits.float().numpy()[:, :width][allowed]
            ok_logits &= bool(np.array_equal(neg[:, :width], ~allowed) and neg[:, width:].all())
            ok_logits &= bool(np.array_equal(kept, before.float().numpy()[:, :width][allowed]))
        results.append({"case": [width, classes, batch], "expand": ok_expand, "logits": ok_logits})
    print(json.dumps(results))
    """
)


def test_triton_kernels_match_the_oracle_in_the_interpreter() -> None:
    tests = str(Path(__file__).resolve().parent)  # where the oracle lives
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)
    proc = subprocess.run(
        # -P: the build this process imports, not the checkout in the current directory
        [sys.executable, "-P", "-c", _CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 7
    bad = [r for r in results if not (r["expand"] and r["logits"])]
    assert not bad, bad


def test_triton_backend_refused_on_cpu_without_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from formalgram_cfgzip.expand import TorchMaskExpander

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # whatever the caller set
    with pytest.raises(ValueError, match="CUDA device"):  # an EngineError
        TorchMaskExpander(np.array([0, 1, 0]), 2, backend="triton")


def test_auto_backend_on_cpu_is_numpy() -> None:
    import numpy as np

    from formalgram_cfgzip.expand import TorchMaskExpander

    assert TorchMaskExpander(np.array([0, 1, 0]), 2).backend == "numpy"
