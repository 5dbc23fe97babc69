"""Mask expansion: numpy (every strategy) and torch against a bit-by-bit reference.

The oracle is :func:`expand_reference` (a Python loop over logit indices) and, independently,
a per-token ``allowed[token_class]`` computed here with numpy booleans.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formalgram_cfgzip.expand import MaskExpander, bitmask_shape, expand_reference


def random_case(
    rng: np.random.Generator, width: int, classes: int, skew: float, hole_rate: float
) -> npt.NDArray[np.int64]:
    p = 1.0 / np.arange(1, classes + 1) ** skew
    tc = rng.choice(classes, size=width, p=p / p.sum()).astype(np.int64)
    tc[rng.random(width) < hole_rate] = -1
    return tc


def random_class_mask(
    rng: np.random.Generator, batch: int, classes: int, density: float
) -> npt.NDArray[np.int32]:
    words = (classes + 31) // 32
    bits = rng.random((batch, words * 32)) < density
    bits[:, classes:] = rng.random((batch, words * 32 - classes)) < 0.5  # junk past num_classes is ignored
    return np.packbits(bits, axis=1, bitorder="little").view(np.int32).copy()


def oracle(tc: npt.NDArray[np.int64], cm: npt.NDArray[np.int32], classes: int) -> npt.NDArray[np.int32]:
    bits = np.unpackbits(cm.view(np.uint8), axis=1, bitorder="little")[:, :classes].astype(bool)
    allowed = np.zeros((cm.shape[0], tc.shape[0]), dtype=bool)
    ok = tc >= 0
    allowed[:, ok] = bits[:, tc[ok]]
    words = (tc.shape[0] + 31) // 32
    padded = np.zeros((cm.shape[0], words * 32), dtype=bool)
    padded[:, : tc.shape[0]] = allowed
    return np.packbits(padded, axis=1, bitorder="little").view(np.int32)


def test_reference_matches_oracle() -> None:
    rng = np.random.default_rng(0)
    tc = random_case(rng, 77, 5, 1.0, 0.1)
    cm = random_class_mask(rng, 3, 5, 0.5)
    assert np.array_equal(expand_reference(tc, cm, 77), oracle(tc, cm, 5))


@pytest.mark.parametrize("width", [1, 31, 32, 33, 100, 1000, 4097])
@pytest.mark.parametrize("classes", [1, 3, 32, 33, 200])
def test_numpy_strategies_equal_oracle(width: int, classes: int) -> None:
    rng = np.random.default_rng(width * 1000 + classes)
    for skew in (0.0, 1.3, 3.0):
        tc = random_case(rng, width, classes, skew, 0.05)
        for kwargs in ({}, {"max_dense": 0}, {"max_dense": 2}, {"memory_budget": 0}):
            ex = MaskExpander(tc, classes, **kwargs)
            for density in (0.0, 0.02, 0.5, 0.97, 1.0):
                cm = random_class_mask(rng, 4, classes, density)
                want = oracle(tc, cm, classes)
                for strategy in ("auto", "split", "gather"):
                    got = ex.expand(cm, strategy=strategy)
                    assert np.array_equal(got, want), (strategy, kwargs, density, ex.last_strategy)


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(1, 300),
    classes=st.integers(1, 70),
    seed=st.integers(0, 2**32 - 1),
    density=st.floats(0, 1),
)
def test_hypothesis_against_reference(width: int, classes: int, seed: int, density: float) -> None:
    rng = np.random.default_rng(seed)
    tc = random_case(rng, width, classes, 1.0, 0.1)
    cm = random_class_mask(rng, 2, classes, density)
    want = expand_reference(tc, cm, width)
    for ex in (MaskExpander(tc, classes), MaskExpander(tc, classes, max_dense=0)):
        assert np.array_equal(ex.expand(cm), want)


def test_indices_out_and_errors() -> None:
    rng = np.random.default_rng(1)
    tc = random_case(rng, 70, 4, 1.0, 0.0)
    ex = MaskExpander(tc, 4)
    cm = random_class_mask(rng, 2, 4, 0.5)
    out = np.full(bitmask_shape(5, 70), -1, dtype=np.int32)
    ex.expand(cm, out, indices=[4, 1])
    want = oracle(tc, cm, 4)
    assert np.array_equal(out[4], want[0]) and np.array_equal(out[1], want[1])
    assert (out[0] == -1).all()
    with pytest.raises(IndexError, match="out of range"):
        ex.expand(cm, out, indices=[0, 5])
    with pytest.raises(ValueError, match="int32"):
        ex.expand(cm.astype(np.int64))
    with pytest.raises(ValueError, match="shape"):
        ex.expand(cm, np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="num_classes"):
        MaskExpander(np.array([0, 5]), 3)
    with pytest.raises(ValueError, match="1-D"):
        MaskExpander(np.zeros((2, 2), dtype=np.int64), 3)


def test_numpy_mask_logits() -> None:
    rng = np.random.default_rng(2)
    tc = random_case(rng, 99, 7, 1.0, 0.1)
    ex = MaskExpander(tc, 7)
    cm = random_class_mask(rng, 3, 7, 0.4)
    logits = rng.standard_normal((3, 104)).astype(np.float32)
    ex.mask_logits(logits, cm)
    bits = np.unpackbits(oracle(tc, cm, 7).view(np.uint8), axis=1, bitorder="little")[:, :99].astype(bool)
    assert np.array_equal(np.isneginf(logits[:, :99]), ~bits)
    assert np.isneginf(logits[:, 99:]).all()


# -- torch ------------------------------------------------------------------------------
torch: Any = pytest.importorskip("torch")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(("width", "classes"), [(1, 1), (33, 2), (1000, 33), (4099, 300)])
def test_torch_expander_equals_numpy(backend: str, width: int, classes: int) -> None:
    from formalgram_cfgzip.expand import TorchMaskExpander, apply_token_bitmask_inplace

    rng = np.random.default_rng(width + classes)
    tc = random_case(rng, width, classes, 1.2, 0.05)
    ex = TorchMaskExpander(tc, classes, backend=backend)  # type: ignore[arg-type]
    for batch in (1, 3, 16):
        cm = random_class_mask(rng, batch, classes, float(rng.random()))
        want = oracle(tc, cm, classes)
        got = ex.expand(torch.from_numpy(cm))
        assert np.array_equal(got.numpy(), want)
        out = torch.zeros((batch, want.shape[1]), dtype=torch.int32)
        assert ex.expand(torch.from_numpy(cm), out) is out and np.array_equal(out.numpy(), want)
        logits = torch.randn(batch, width + 3)
        ex.mask_logits(logits, torch.from_numpy(cm))
        ref = torch.randn(batch, width + 3)
        apply_token_bitmask_inplace(ref, torch.from_numpy(want))
        assert torch.equal(torch.isneginf(logits), torch.isneginf(ref))
        bits = np.unpackbits(want.view(np.uint8), axis=1, bitorder="little")[:, :width].astype(bool)
        assert np.array_equal(torch.isneginf(logits[:, :width]).numpy(), ~bits)


def test_apply_matches_xgrammar() -> None:
    xgr = pytest.importorskip("xgrammar")
    from formalgram_cfgzip.expand import apply_token_bitmask_inplace

    rng = np.random.default_rng(5)
    bm = torch.from_numpy(rng.integers(-(2**31), 2**31, (4, 5)).astype(np.int32))
    a = torch.randn(4, 150)
    b = a.clone()
    apply_token_bitmask_inplace(a, bm)
    xgr.apply_token_bitmask_inplace(b, bm, vocab_size=150)
    assert torch.equal(torch.isneginf(a), torch.isneginf(b))


def test_gpu_check_without_cuda_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/gpu_check.py runs on a CUDA machine; here (no CUDA) it must exit 0 with a message."""
    import importlib.util
    from pathlib import Path

    if torch.cuda.is_available():  # pragma: no cover - CPU-only CI
        pytest.skip("CUDA present: run bench/gpu_check.py itself")
    script = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick"]) == 0
    assert "CUDA is not available" in capsys.readouterr().out
