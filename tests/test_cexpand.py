"""The C expansion kernel (formalgram_cfgzip/expand/_cexpand.c): every plan, forced and chosen,
against an independent numpy oracle, on small and wide (>= 65535 classes) class ids; the
executable check of Lemma 1 of ``proofs/engine_adapter.md`` for this kernel.

Built by the compiled install (what CI tests); skipped in the pure-Python build, where
``tests/test_expand.py`` covers the numpy kernel, and failed in a compiled build without it
(``tests/_build.py``).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from _build import kernel_module
from _expand_oracle import expand_reference
from _lru_model import lru_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram_cfgzip.errors import BatchIndexError
from formalgram_cfgzip.expand import MaskExpander, plans
from formalgram_cfgzip.expand.plans import C_FORCED, C_PLAN_NAMES

cexpand: Any = kernel_module("expand")
pytestmark = pytest.mark.ckernel("expand")

PLANS = (0, 1, 2, 3, 4, 5)
BIG_MODES = (-1, 0, 1)  # dense classes: fewer rows, OR of the allowed, union AND-NOT the disallowed


def oracle_row(tc: npt.NDArray[np.int64], row: npt.NDArray[np.int32], classes: int) -> npt.NDArray[np.int32]:
    """Token row from a class row by numpy booleans (independent of both kernels)."""
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:classes].astype(bool)
    ok = tc >= 0
    allowed = np.zeros(((tc.shape[0] + 31) // 32) * 32, dtype=bool)
    allowed[: tc.shape[0]][ok] = bits[tc[ok]]
    return np.packbits(allowed, bitorder="little").view(np.int32)


def class_row(rng: np.random.Generator, classes: int, density: float, junk: bool) -> npt.NDArray[np.int32]:
    words = (classes + 31) // 32
    bits = np.zeros(words * 32, dtype=bool)
    bits[:classes] = rng.random(classes) < density
    if junk:  # bits past num_classes must be ignored
        bits[classes:] = True
    return np.packbits(bits, bitorder="little").view(np.int32).copy()


def skewed(
    rng: np.random.Generator, width: int, classes: int, skew: float, holes: float
) -> npt.NDArray[np.int64]:
    p = 1.0 / np.arange(1, classes + 1) ** skew
    tc = rng.choice(classes, size=width, p=p / p.sum()).astype(np.int64)
    tc[rng.random(width) < holes] = -1
    return tc


def check_all_plans(
    kernel: Any, tc: npt.NDArray[np.int64], classes: int, rng: np.random.Generator
) -> set[int]:
    nw = (tc.shape[0] + 31) // 32
    chosen: set[int] = set()
    for density in (0.0, 0.001, 0.05, 0.5, 0.95, 0.999, 1.0):
        row = class_row(rng, classes, density, junk=density > 0.9)
        base_row = class_row(rng, classes, min(1.0, density + 0.01), junk=False)
        want = oracle_row(tc, row, classes)
        base = oracle_row(tc, base_row, classes).copy()
        for plan in (-1, *PLANS):
            for big in BIG_MODES if plan in (1, 2, 3, 5) else (-1,):
                out = np.full(nw, -7, dtype=np.int32)
                used = kernel.expand(row, out, base, base_row, plan, big)
                assert np.array_equal(out, want), (plan, big, used, density)
                if plan == -1:
                    chosen.add(used)
        out = np.full(nw, 3, dtype=np.int32)
        chosen.add(kernel.expand(row, out))
        assert np.array_equal(out, want), density
        assert np.array_equal(oracle_row(tc, base_row, classes), base)  # base is never written
    return chosen


@pytest.mark.parametrize("width", [1, 31, 32, 33, 1000, 4097])
@pytest.mark.parametrize("classes", [1, 3, 32, 33, 200])
@pytest.mark.parametrize("rows", [-1, 0, 1, 5, 40])
def test_every_plan_equals_oracle(width: int, classes: int, rows: int) -> None:
    rng = np.random.default_rng(width * 7 + classes * 3 + rows)
    for skew in (0.0, 1.5):
        tc = skewed(rng, width, classes, skew, 0.05)
        kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 30, rows)
        check_all_plans(kernel, tc, classes, rng)


def test_wide_class_ids() -> None:
    """More than 65534 classes: the kernel stores class ids as uint32."""
    rng = np.random.default_rng(3)
    width, classes = 140_000, 70_000
    tc = rng.integers(0, classes, width).astype(np.int64)
    tc[:classes] = np.arange(classes)  # every class non-empty, including the top ids
    tc[rng.random(width) < 0.01] = -1
    for rows in (0, 3):
        kernel = cexpand.Kernel(tc.astype(np.int32), classes, 0, rows)
        check_all_plans(kernel, tc, classes, rng)


def test_auto_reaches_every_plan() -> None:
    """Across skewed and flat distributions and densities, the cost model picks each plan
    somewhere (so every path is exercised as it runs in production), always correctly.
    (Uncorrected model: with ``adapt`` the choice also depends on measured times.)"""
    rng = np.random.default_rng(8)
    chosen: set[int] = set()
    for width, classes, skew in ((60_000, 40, 2.0), (60_000, 2_000, 1.2), (60_000, 20_000, 0.0)):
        tc = skewed(rng, width, classes, skew, 0.01)
        kernel = cexpand.Kernel(tc.astype(np.int32), classes, 32 << 20, adapt=False)
        chosen |= check_all_plans(kernel, tc, classes, rng)
    # a few huge classes and thousands of one- or two-token ones: at half density listing the
    # tail classes costs more than gathering the tail tokens, so the split plan (1) wins
    tc = np.concatenate([rng.integers(0, 16, 50_000), np.arange(16, 8016), rng.integers(16, 8016, 2_000)])
    rng.shuffle(tc)
    kernel = cexpand.Kernel(tc.astype(np.int32), 8016, 32 << 20, adapt=False)
    chosen |= check_all_plans(kernel, tc, 8016, rng)
    assert chosen >= {0, 1, 2, 3}, chosen
    # plan 4 (delta) needs a base that differs in a few classes
    tc = skewed(rng, 60_000, 3_000, 0.0, 0.0)
    kernel = cexpand.Kernel(tc.astype(np.int32), 3_000, 32 << 20)
    base_row = class_row(rng, 3_000, 0.5, junk=False)
    row = base_row.copy()
    row[7] ^= np.int32(1 << 3)
    out = np.zeros((60_000 + 31) // 32, dtype=np.int32)
    assert kernel.expand(row, out, oracle_row(tc, base_row, 3_000), base_row) == 4
    assert np.array_equal(out, oracle_row(tc, row, 3_000))


@settings(max_examples=80, deadline=None)
@given(
    width=st.integers(1, 500),
    classes=st.integers(1, 100),
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(-1, 120),
    plan=st.sampled_from((-1, *PLANS)),
    big=st.sampled_from(BIG_MODES),
)
def test_hypothesis_plans(width: int, classes: int, seed: int, rows: int, plan: int, big: int) -> None:
    rng = np.random.default_rng(seed)
    tc = skewed(rng, width, classes, float(rng.random() * 3), float(rng.random() * 0.3))
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 30, rows)
    row = class_row(rng, classes, float(rng.random()), junk=bool(rng.random() < 0.5))
    base_row = class_row(rng, classes, float(rng.random()), junk=False)
    out = np.full((width + 31) // 32, -1, dtype=np.int32)
    kernel.expand(row, out, oracle_row(tc, base_row, classes).copy(), base_row, plan, big)
    assert np.array_equal(out, expand_reference(tc, row[None, :], width)[0])


def test_cost_corrections_are_learnt_from_chosen_rows_only() -> None:
    """With ``adapt`` the kernel times the rows whose plan it chooses and keeps, per plan, a
    running measured / modelled ratio; forced plans and ``adapt=False`` leave it at 1.  The
    rows stay exact whatever the corrections make it choose."""
    rng = np.random.default_rng(21)
    tc = skewed(rng, 60_000, 2_000, 1.2, 0.01)
    nw = (tc.shape[0] + 31) // 32
    fixed = cexpand.Kernel(tc.astype(np.int32), 2_000, 32 << 20, adapt=False)
    adaptive = cexpand.Kernel(tc.astype(np.int32), 2_000, 32 << 20)
    assert adaptive.info()["adapt"] == 1 and fixed.info()["adapt"] == 0
    out = np.zeros(nw, dtype=np.int32)
    for plan in PLANS:  # forced: nothing learnt
        if plan != 4:
            adaptive.expand(class_row(rng, 2_000, 0.5, junk=False), out, None, None, plan)
    assert set(adaptive.info()["corrections"].values()) == {1.0}
    used: set[int] = set()
    for step in range(200):
        row = class_row(rng, 2_000, (0.002, 0.3, 0.7, 0.998)[step % 4], junk=step % 3 == 0)
        want = oracle_row(tc, row, 2_000)
        for kernel in (fixed, adaptive):
            out[:] = -1
            plan = kernel.expand(row, out)
            assert np.array_equal(out, want), (plan, step)
            if kernel is adaptive:
                used.add(plan)
    assert set(fixed.info()["corrections"].values()) == {1.0}
    learnt = adaptive.info()["corrections"]
    assert set(learnt) == set(C_PLAN_NAMES) - {"", "cache"}  # keyed by the shared plan names
    moved = {C_PLAN_NAMES[p] for p in used if learnt[C_PLAN_NAMES[p]] != 1.0}
    assert moved, (used, learnt)  # every chosen plan was timed; a ratio of exactly 1.0 is all but impossible
    assert all(0.2 <= v <= 5.0 for v in learnt.values()), learnt


@pytest.fixture(params=[True, False], ids=["avx2", "portable"])
def avx2_paths(request: pytest.FixtureRequest) -> Any:
    """The kernel's AVX2 paths where the CPU has them, then the portable ones (the masks are the
    same; without AVX2 both runs take the portable paths)."""
    was = cexpand.avx2(request.param)
    yield request.param
    cexpand.avx2(was)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(  # the fixture is a switch of the process, the same for every input
    width=st.integers(1, 3_000),
    classes=st.integers(1, 2_500),
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(-1, 120),
    flips=st.integers(0, 70),
)
def test_patch_in_place_equals_the_oracle(
    avx2_paths: bool, width: int, classes: int, seed: int, rows: int, flips: int
) -> None:
    """``Kernel.patch``, the in-place step of the native engine's row update: a base token row
    with the classes that differ flipped where it lies equals the oracle's row of the new class
    row, whichever of the differing classes have precomputed rows (``rows``: none, some, all) and
    wherever they lie (up to 2,500 classes: the scan's groups of 64 class words, and a last vector
    of fewer than 8); past its lists (256 small, 64 large classes) or over the limit it writes
    nothing."""
    rng = np.random.default_rng(seed)
    tc = skewed(rng, width, classes, float(rng.random() * 3), float(rng.random() * 0.3))
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 30, rows)
    base_row = class_row(rng, classes, float(rng.random()), junk=False)
    row = base_row.copy()
    bits = row.view(np.uint32)
    flipped = rng.choice(classes, size=min(flips, classes), replace=False)
    for c in flipped:
        bits[c // 32] ^= np.uint32(1 << (c % 32))
    if rng.random() < 0.3:  # bits past num_classes are not classes
        bits[-1] |= np.uint32((0xFFFFFFFF << (classes % 32)) & 0xFFFFFFFF) if classes % 32 else np.uint32(0)
    base = oracle_row(tc, base_row, classes).copy()
    out = base.copy()
    differ = bool(np.isin(flipped, tc).any())  # a class with tokens differs
    # a limit of 0 ns refuses any patch that flips a token, and a refused patch writes nothing
    # (one that flips only classes without tokens may go through)
    refused = not kernel.patch(row, base_row, out, 0.0)
    assert np.array_equal(out, base) and (refused or np.array_equal(base, oracle_row(tc, row, classes)))
    assert refused or not differ
    if kernel.patch(row, base_row, out):
        assert np.array_equal(out, oracle_row(tc, row, classes))
    else:  # more differing classes with precomputed rows than one patch lists
        assert np.array_equal(out, base) and len(flipped) > 64


def test_patch_flips_precomputed_rows(avx2_paths: bool) -> None:
    """Every class with a precomputed row: the patch XORs those rows (a pass of up to eight),
    across more than one pass, and lists the tail's classes past one batch of 32."""
    rng = np.random.default_rng(11)
    tc = skewed(rng, 50_000, 400, 0.0, 0.02)
    for rows, flips in ((400, 20), (0, 200), (30, 60)):
        kernel = cexpand.Kernel(tc.astype(np.int32), 400, 1 << 30, rows)
        assert kernel.info()["rows"] == rows
        base_row = class_row(rng, 400, 0.5, junk=False)
        row = base_row.copy()
        for c in rng.choice(400, size=flips, replace=False):
            row.view(np.uint32)[c // 32] ^= np.uint32(1 << (c % 32))
        out = oracle_row(tc, base_row, 400).copy()
        assert kernel.patch(row, base_row, out)
        assert np.array_equal(out, oracle_row(tc, row, 400)), (rows, flips)


def test_patch_counts_its_classes_across_the_class_words(avx2_paths: bool) -> None:
    """The patch's scan counts the classes to flip over every group of 64 class words (5,000
    classes: 157 words, a last vector of 5): 256 small classes spread over all of them are
    patched, 257 are refused with nothing written; so are 65 classes with rows, 64 patched; the
    price is the modelled cost of the classes and their tokens against the limit."""
    rng = np.random.default_rng(5)
    classes, width = 5_000, 20_000
    tc = np.concatenate([np.arange(classes), rng.integers(0, classes, width - classes)]).astype(np.int64)
    base_row = class_row(rng, classes, 0.5, junk=False)
    base = oracle_row(tc, base_row, classes)

    def flipped(chosen: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        row = base_row.copy()
        for c in chosen:
            row.view(np.uint32)[c // 32] ^= np.uint32(1 << (c % 32))
        return row

    spread = np.linspace(0, classes - 1, 257).astype(np.int64)  # every group, the last word too
    small = cexpand.Kernel(tc.astype(np.int32), classes, 0, 0)  # no rows: every class listed
    for n, patched in ((256, True), (257, False)):
        row = flipped(spread[:n])
        out = base.copy()
        assert small.patch(row, base_row, out) is patched, n
        assert np.array_equal(out, oracle_row(tc, row, classes) if patched else base), n
    with_rows = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 30, classes)  # every class a row
    for n, patched in ((64, True), (65, False)):
        row = flipped(spread[:n])
        out = base.copy()
        assert with_rows.patch(row, base_row, out) is patched, n
        assert np.array_equal(out, oracle_row(tc, row, classes) if patched else base), n
    row = flipped(spread[:10])
    tokens = int(np.isin(tc, spread[:10]).sum())
    out = base.copy()
    assert not small.patch(row, base_row, out, 0.95 * 10)  # the classes alone reach the limit
    assert not small.patch(row, base_row, out, 0.95 * 10 + 0.48 * tokens * 0.5)  # with their tokens
    assert np.array_equal(out, base)
    assert small.patch(row, base_row, out, 0.95 * 10 + 0.48 * tokens * 2)
    assert np.array_equal(out, oracle_row(tc, row, classes))


@pytest.mark.parametrize("invalid", ["none", "few", "every word"])
def test_rows_from_the_valid_tokens_equal_the_oracle(invalid: str) -> None:
    """Plan 3 (the valid tokens less the disallowed classes) writes the valid tokens' row by
    hand when it is all ones but for at most 256 words, and copies it otherwise: every plan and
    mode equals the oracle either way."""
    rng = np.random.default_rng(21)
    width, classes = 40_000, 300
    tc = skewed(rng, width, classes, 1.0, 0.0)
    if invalid == "few":
        tc[[0, 5, 31, 32, 20_000, width - 1]] = -1
    elif invalid == "every word":  # 1,250 words, each with a token no class holds
        tc[::32] = -1
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 30, 20)
    for density in (0.2, 0.9, 0.99, 1.0):
        row = class_row(rng, classes, density, junk=True)
        want = oracle_row(tc, row, classes)
        for plan in (2, 3):
            for big in (0, 1):
                out = np.full((width + 31) // 32, 0x5A5A5A5A, dtype=np.int32)
                kernel.expand(row, out, None, None, plan, big)
                assert np.array_equal(out, want), (invalid, density, plan, big)


def test_delta_into_its_own_base() -> None:
    """``out`` may be the base row itself (patched in place)."""
    rng = np.random.default_rng(5)
    tc = skewed(rng, 3_000, 50, 1.0, 0.0)
    kernel = cexpand.Kernel(tc.astype(np.int32), 50, 1 << 20)
    base_row = class_row(rng, 50, 0.5, junk=False)
    row = base_row.copy()
    row[0] ^= np.int32(0b1011)
    buf = oracle_row(tc, base_row, 50).copy()
    assert kernel.expand(row, buf, buf, base_row, 4) == 4
    assert np.array_equal(buf, oracle_row(tc, row, 50))


def test_stub_names_the_parameters_the_kernel_takes() -> None:
    """``_cexpand.pyi`` is what mypy checks callers against: every keyword it names for
    ``Kernel(...)`` must be one the compiled constructor accepts, with the same defaults."""
    import ast
    from pathlib import Path

    import formalgram_cfgzip.expand as pkg

    stub = ast.parse((Path(pkg.__file__).parent / "_cexpand.pyi").read_text())
    init = next(
        f
        for c in stub.body
        if isinstance(c, ast.ClassDef) and c.name == "Kernel"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    names = [a.arg for a in init.args.args[1:]]
    defaults = [ast.literal_eval(d) for d in init.args.defaults]
    rng = np.random.default_rng(3)
    tc = skewed(rng, 100, 7, 1.0, 0.1)
    values: list[Any] = [tc.astype(np.int32), 7, 1 << 20, *defaults]
    kernel = cexpand.Kernel(**dict(zip(names, values, strict=True)))
    # the stub's defaults are the constructor's own: the same kernel as one built without them
    plain = cexpand.Kernel(*values[:3])
    assert kernel.info() == plain.info() and kernel.cache_info() == plain.cache_info()
    row = class_row(rng, 7, 0.5, junk=False)
    for k in (kernel, plain):
        out = np.zeros(4, dtype=np.int32)
        k.expand(row, out)
        assert np.array_equal(out, oracle_row(tc, row, 7))


def test_errors() -> None:
    tc = np.array([0, 1, 1, -1, 2], dtype=np.int32)
    kernel = cexpand.Kernel(tc, 3, 1 << 20)
    row = np.zeros(1, dtype=np.int32)
    out = np.zeros(1, dtype=np.int32)
    with pytest.raises(ValueError, match="class row must hold 1 int32 words"):
        kernel.expand(np.zeros(2, dtype=np.int32), out)
    with pytest.raises(ValueError, match="token row"):
        kernel.expand(row, np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match=r"plan must be -1 \(choose\) or 0..5"):
        kernel.expand(row, out, None, None, 9)
    with pytest.raises(ValueError, match="needs base_out and base_class"):
        kernel.expand(row, out, None, None, 4)
    with pytest.raises(TypeError):
        kernel.expand(row)
    with pytest.raises(BufferError):  # read-only output buffer
        kernel.expand(row, bytes(4))
    with pytest.raises(ValueError, match="num_classes"):
        cexpand.Kernel(np.array([0, 3], dtype=np.int32), 3, 0)
    with pytest.raises(ValueError, match="non-empty int32"):
        cexpand.Kernel(b"", 3, 0)
    with pytest.raises(ValueError, match="big must be"):
        kernel.expand(row, out, None, None, 2, 2)
    with pytest.raises(ValueError, match="row_budget"):
        cexpand.Kernel(tc, 3, -1)
    with pytest.raises(ValueError, match="num_classes or the logit width"):
        cexpand.Kernel(tc, 0, 0)
    with pytest.raises(RuntimeError, match="not initialised"):
        cexpand.Kernel.__new__(cexpand.Kernel).expand(row, out)
    with pytest.raises(RuntimeError, match="already initialised"):
        kernel.__init__(tc, 3, 0)
    info = kernel.info()
    assert info["valid_tokens"] == 4 and info["rows"] >= 0


def test_expander_uses_the_c_kernel_and_its_rows() -> None:
    """The C kernel keeps one row per dense class (the largest ones), no subset tables; the
    budget, ``max_dense`` and ``dense`` bound or force their number."""
    rng = np.random.default_rng(9)
    tc = skewed(rng, 50_000, 500, 1.5, 0.02)
    by_size = np.argsort(-np.bincount(tc[tc >= 0], minlength=500), kind="stable")
    ex = MaskExpander(tc, 500, kernel="c", cache_bytes=0)
    assert ex.kernel == "c" and ex.num_stored == 0 and ex.num_dense >= 1
    assert ex.num_small_tokens == int(np.isin(tc, by_size[ex.num_dense :]).sum())
    forced = MaskExpander(tc, 500, kernel="c", dense=17, cache_bytes=0)
    assert forced.num_dense == 17 and forced.num_small_tokens == int(np.isin(tc, by_size[17:]).sum())
    bounded = MaskExpander(tc, 500, kernel="c", max_dense=2, cache_bytes=0)
    assert bounded.num_dense == min(2, ex.num_dense)
    budget = MaskExpander(tc, 500, kernel="c", memory_budget=3 * 4 * 1568, cache_bytes=0)
    assert budget.num_dense == min(3, ex.num_dense)  # rows of 1563 words, padded to 64 bytes
    none = MaskExpander(tc, 500, kernel="c", max_dense=0, cache_bytes=0)
    assert none.num_dense == 0 and none.num_small_tokens == int((tc >= 0).sum())
    for density in (0.01, 0.5, 0.99):
        cm = class_row(rng, 500, density, junk=True)[None, :]
        want = expand_reference(tc, cm, 50_000)
        for e in (ex, forced, bounded, budget, none):
            for strategy in ("auto", "gather", "split", "sparse"):
                assert np.array_equal(e.expand(cm, strategy=strategy), want), (strategy, density)


@pytest.mark.parametrize(("capacity", "distinct"), [(1, 3), (2, 5), (7, 60), (31, 40), (64, 64)])
def test_row_cache_is_an_lru_under_churn(capacity: int, distinct: int) -> None:
    """Thousands of lookups over more keys than slots: the open-addressing table with
    backward-shift deletion must keep finding every live key (stats equal an LRU model,
    every row equals the oracle, hits included)."""
    rng = np.random.default_rng(capacity * 100 + distinct)
    width, classes = 700, 45
    tc = skewed(rng, width, classes, 1.0, 0.05)
    pool = np.stack([class_row(rng, classes, 0.5, junk=False) for _ in range(distinct)])
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 20, -1, capacity, 1, admit_all=True)
    wants = [oracle_row(tc, pool[i], classes) for i in range(distinct)]
    order = rng.integers(0, distinct, 3000)
    # bursts of the same few keys, as decoding revisits states
    order[1000:2000] = rng.integers(0, max(1, capacity // 2), 1000)
    out = np.zeros((1, (width + 31) // 32), dtype=np.int32)
    for i in order:
        kernel.expand_rows(pool[i], out)
        assert np.array_equal(out[0], wants[i]), i
    hits, misses, evictions = lru_model([pool[i].tobytes() for i in order], capacity)
    info = kernel.cache_info()
    assert (info["hits"], info["misses"], info["evictions"]) == (hits, misses, evictions)
    assert info["entries"] == min(capacity, len(set(order.tolist())))
    kernel.clear_cache()
    assert kernel.cache_info()["entries"] == 0 and kernel.cache_info()["hits"] == 0
    kernel.expand_rows(pool[0], out)
    assert np.array_equal(out[0], wants[0])


def test_a_cheap_row_is_cached_when_it_comes_back() -> None:
    """Admission (``admit_all=False``, the default): at 128k tokens a class row that the cost
    model finds cheap (one small class) is computed and not cached at its first miss, cached at
    its second and a hit at its third; a costly row (half the classes, hundreds of them listed)
    is cached at its first miss; ``clear_cache`` forgets the rows met once; with
    ``admit_all=True`` every miss is cached.  Every row equals the oracle."""
    rng = np.random.default_rng(8)
    width, classes = 128_000, 700
    tc = skewed(rng, width, classes, 1.0, 0.0)
    cheap = np.zeros((classes + 31) // 32, dtype=np.int32)
    cheap[(classes - 1) >> 5] = np.int32(1 << ((classes - 1) & 31))  # the smallest class
    costly = class_row(rng, classes, 0.5, junk=False)
    wants = {"cheap": oracle_row(tc, cheap, classes), "costly": oracle_row(tc, costly, classes)}
    rows = {"cheap": cheap, "costly": costly}
    out = np.zeros((1, (width + 31) // 32), dtype=np.int32)

    def run(kernel: Any, name: str) -> tuple[int, int, int]:
        plan = kernel.expand_rows(rows[name], out)
        assert np.array_equal(out[0], wants[name]), name
        info = kernel.cache_info()
        return plan, info["entries"], info["not_cached"]

    door = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 20, -1, 16, 1, adapt=False)  # by the model alone
    assert run(door, "cheap")[1:] == (0, 1)  # met once: computed, not cached
    assert run(door, "costly")[1:] == (1, 1)  # costly: cached at once
    assert run(door, "cheap")[1:] == (2, 1)  # back: cached
    assert run(door, "cheap")[0] == 8  # a hit
    assert run(door, "costly")[0] == 8
    door.clear_cache()
    assert run(door, "cheap")[1:] == (0, 1)  # forgotten with the cache
    every = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 20, -1, 16, 1, admit_all=True)
    assert run(every, "cheap")[1:] == (1, 0)
    assert run(every, "cheap")[0] == 8
    # timed plans (adapt, the default): a row the model finds cheap is cached at its first miss
    # when its plan took longer than the admission's bound (0.4 ns per token word) by the clock
    bound = 0.4 * ((width + 31) // 32)
    for seed in range(20):
        timed = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 20, -1, 16, 1)
        cheap = np.zeros_like(cheap)
        cheap[(classes - 1 - seed) >> 5] = np.int32(1 << ((classes - 1 - seed) & 31))
        rows["cheap"], wants["cheap"] = cheap, oracle_row(tc, cheap, classes)
        _, entries, not_cached = run(timed, "cheap")
        took = timed.info()["last_plan_ns"]
        assert took > 0 and (entries, not_cached) == ((1, 0) if took >= bound else (0, 1)), (took, entries)


def blocky_row(
    rng: np.random.Generator, classes: int, base: npt.NDArray[np.int32] | None
) -> npt.NDArray[np.int32]:
    """A class row as a grammar of thousands of classes makes them: runs of empty, full or
    (from ``base``) unchanged 32-class words, with a few classes flipped here and there."""
    words = (classes + 31) // 32
    row = np.zeros(words, dtype=np.int32) if base is None else base.copy()
    for _ in range(int(rng.integers(0, 4))):  # runs of words set, cleared or left
        a = int(rng.integers(0, words))
        b = min(words, a + int(rng.integers(1, 40)))
        row[a:b] = rng.choice((0, -1)) if rng.random() < 0.7 else rng.integers(-(2**31), 2**31, b - a)
    for c in rng.integers(0, classes, int(rng.integers(0, 80))):  # scattered classes flipped
        row[c >> 5] ^= np.int32(1 << (int(c) & 31)) if (c & 31) != 31 else np.int32(-(2**31))
    if rng.random() < 0.3:  # the top bit: past num_classes (ignored) unless classes % 32 == 0
        row[-1] |= np.int32(-(2**31))
    return row


@settings(max_examples=25, deadline=None)
@given(
    classes=st.integers(250, 5_000),
    seed=st.integers(0, 2**32 - 1),
    rows=st.sampled_from((-1, 0, 3, 20)),
    capacity=st.sampled_from((1, 3, 50)),
    delta=st.sampled_from((0, 1, 2)),
)
def test_sparse_and_dense_rows_of_many_classes(
    classes: int, seed: int, rows: int, capacity: int, delta: int
) -> None:
    """Rows of grammars of thousands of classes: blocks of class words skipped (all empty,
    all full, or equal to a cached row's), dense rows combined in several passes from a start
    row, small classes listed in batches, delta candidates dropped part-way through their
    scan.  Through the row cache (hits, evictions, deltas), by every plan forced, and patched
    over a base row: every row equals the oracle."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(classes, 4 * classes))
    tc = skewed(rng, width, classes, float(rng.random() * 2), 0.02)
    tc[:classes] = np.arange(classes)  # every class holds a token
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 30, rows, capacity, delta)
    nw = (width + 31) // 32
    out = np.zeros((1, nw), dtype=np.int32)
    seq: list[npt.NDArray[np.int32]] = []
    prev = None
    for _ in range(30):
        prev = blocky_row(rng, classes, None if prev is None or rng.random() < 0.15 else prev)
        seq.append(prev)
        if rng.random() < 0.3:  # revisits: hits
            seq.append(seq[int(rng.integers(0, len(seq)))])
    for row in seq:
        kernel.expand_rows(row, out)
        assert np.array_equal(out[0], oracle_row(tc, row, classes))
    for row, base_row in zip(seq[1:6], seq[:5], strict=True):
        want = oracle_row(tc, row, classes)
        for plan in (-1, *PLANS):
            got = np.full(nw, -3, dtype=np.int32)
            kernel.expand(row, got, oracle_row(tc, base_row, classes).copy(), base_row, plan)
            assert np.array_equal(got, want), plan


POOL_CHILD = """
import ctypes, importlib.machinery, importlib.util, resource, sys
import numpy as np
path, huge = sys.argv[1], sys.argv[2] == "huge"
if not huge:  # PR_SET_THP_DISABLE: this process's blocks in 4 KiB pages whatever their advice
    assert ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0) == 0
loader = importlib.machinery.ExtensionFileLoader("_cexpand", path)
spec = importlib.util.spec_from_file_location("_cexpand", path, loader=loader)
mod = importlib.util.module_from_spec(spec)
loader.exec_module(mod)
rng = np.random.default_rng(5)
width, classes, cap = 64_000, 3_000, 64
nw, cw = (width + 31) // 32, (classes + 31) // 32
tc = rng.integers(0, classes, width).astype(np.int32)
rows = [np.packbits(rng.random(cw * 32) < 0.01, bitorder="little").view(np.int32).copy() for _ in range(cap)]
out = np.zeros((1, nw), dtype=np.int32)
def faults_of_a_walk():
    kernel = mod.Kernel(tc, classes, 0, 0, cap, 0, admit_all=True)  # every row a miss into a new slot
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for row in rows:
        kernel.expand_rows(row, out)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
fresh = faults_of_a_walk()
pooled = faults_of_a_walk()
freed = mod.release_cache_pool()
released = faults_of_a_walk()
print(fresh, pooled, freed, released, cap * (nw + cw) * 4 // 4096, mod.cache_pool_info()["huge_page_advised"])
"""


def _pool_child(mode: str) -> tuple[int, ...]:
    """The page faults of three walks of misses in a child (see POOL_CHILD), in ``mode``
    ``"small"`` (transparent huge pages disabled for the child) or ``"huge"``."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}  # every block of 128 KiB+ mapped afresh
    res = subprocess.run(
        [sys.executable, "-c", POOL_CHILD, str(cexpand.__file__), mode],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    return tuple(int(x) for x in res.stdout.split())


def _thp_mode() -> str:
    """The system's transparent huge page mode (``always``, ``madvise``, ``never``; ``""``
    where it has none)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return ""
    return text[text.find("[") + 1 : text.find("]")]


def _thp_fallbacks() -> int:
    """Huge page faults the kernel could not serve with a huge page (system-wide, so far)."""
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("thp_fault_fallback "):
            return int(line.split()[1])
    return 0


LINUX_GLIBC = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="counts page faults of glibc's mmap-backed blocks (Linux, glibc)",
)


@LINUX_GLIBC
def test_a_dropped_kernels_row_cache_is_reused_with_its_pages_mapped() -> None:
    """A new kernel takes the row-cache block a dropped one left (at most four kept), so a walk's
    cache misses write mapped pages instead of faulting each one in; after release_cache_pool()
    the next block is new again.  Oracle: the operating system's page-fault count, in a child
    whose allocator maps every block of 128 KiB or more afresh (MALLOC_MMAP_THRESHOLD_) and
    whose pages are 4 KiB (huge pages disabled for it)."""
    fresh, pooled, freed, released, pages, _ = _pool_child("small")
    assert fresh >= pages // 2, (fresh, pages)  # a new block: its pages faulted in by the misses
    assert pooled <= pages // 10, (pooled, pages)  # the dropped kernel's block, already mapped
    assert freed >= pages * 4096
    assert released >= pages // 2, (released, pages)  # released: a new block again


@LINUX_GLIBC
@pytest.mark.skipif(
    _thp_mode() not in ("always", "madvise"), reason="the system offers no transparent huge pages"
)
def test_a_new_row_cache_block_is_mapped_in_huge_pages() -> None:
    """A new block is advised for huge pages, so the misses of a walk on it fault a few times
    per 2 MiB, not once per 4 KiB page.  Oracle: the page-fault count of the same walks as
    above with huge pages allowed, unless the kernel reports it could not find huge pages
    (``thp_fault_fallback``) meanwhile."""
    before = _thp_fallbacks()
    fresh, pooled, _, released, pages, advised = _pool_child("huge")
    assert advised >= 2  # the first block and the one after the release
    assert pooled <= pages // 10, (pooled, pages)
    if _thp_fallbacks() == before:
        assert fresh <= pages // 8, (fresh, pages)
        assert released <= pages // 8, (released, pages)


def test_row_cache_ignores_bits_past_num_classes() -> None:
    rng = np.random.default_rng(12)
    tc = skewed(rng, 300, 40, 1.0, 0.0)
    kernel = cexpand.Kernel(tc.astype(np.int32), 40, 1 << 20, -1, 4, 1)
    row = class_row(rng, 40, 0.5, junk=False)
    junk = row.copy()
    junk[-1] |= np.int32(-(1 << 8))  # bits 40..63 of the class row: past num_classes
    out = np.zeros((1, 10), dtype=np.int32)
    assert kernel.expand_rows(row, out) != 8
    assert kernel.expand_rows(junk, out) == 8  # the same key: a hit
    assert np.array_equal(out[0], oracle_row(tc, row, 40))


def test_expand_rows_batches_and_errors() -> None:
    rng = np.random.default_rng(13)
    tc = skewed(rng, 500, 70, 1.0, 0.02)
    kernel = cexpand.Kernel(tc.astype(np.int32), 70, 1 << 20, -1, 3, 2)
    cm = np.stack([class_row(rng, 70, 0.3, junk=False) for _ in range(5)])
    out = np.full((7, 16), -5, dtype=np.int32)
    kernel.expand_rows(cm, out, np.array([6, 0, 2, 3, 5], dtype=np.int64))
    for src, dst in enumerate([6, 0, 2, 3, 5]):
        assert np.array_equal(out[dst], oracle_row(tc, cm[src], 70))
    assert (out[1] == -5).all() and (out[4] == -5).all()
    assert kernel.cache_info()["deltas"] >= 1  # delta=2: every miss after the first patches
    with pytest.raises(IndexError, match="out of range"):
        kernel.expand_rows(cm, out, np.array([0, 1, 2, 3, 7], dtype=np.int64))
    with pytest.raises(ValueError, match="one int64 output index"):
        kernel.expand_rows(cm, out, np.array([0, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="whole rows"):
        kernel.expand_rows(np.ascontiguousarray(cm[:, :2]), out)
    with pytest.raises(ValueError, match="one int64 output index"):
        kernel.expand_rows(np.zeros((9, 3), dtype=np.int32), out)
    with pytest.raises(ValueError, match="delta must be"):
        cexpand.Kernel(tc.astype(np.int32), 70, 0, -1, 3, 5)
    with pytest.raises(ValueError, match="cache_rows must be"):
        cexpand.Kernel(tc.astype(np.int32), 70, 0, -1, -1)


def test_apply_bitmask_patterns_and_errors() -> None:
    """-inf patterns of every width written where bits are 0 and past the bits; errors."""
    rng = np.random.default_rng(14)
    bits = rng.integers(-(2**31), 2**31, 3, dtype=np.int64).astype(np.int32)
    allowed = np.unpackbits(bits.view(np.uint8), bitorder="little").astype(bool)
    for dtype in (np.float16, np.float32, np.float64):
        values = rng.standard_normal(100).astype(dtype)
        before = values.copy()
        unsigned = np.dtype(f"u{values.itemsize}")
        pattern = int(np.array(-np.inf, dtype=dtype).view(unsigned).item())
        cexpand.apply_bitmask(bits, values.view(unsigned), values.itemsize, pattern)
        assert np.array_equal(np.isneginf(values[:96]), ~allowed)
        assert np.isneginf(values[96:]).all()
        assert np.array_equal(values[:96][allowed], before[:96][allowed])
    with pytest.raises(ValueError, match="itemsize"):
        cexpand.apply_bitmask(bits, np.zeros(9, dtype=np.uint8), 3, 0)
    with pytest.raises(ValueError, match="whole items"):
        cexpand.apply_bitmask(bits, np.zeros(9, dtype=np.uint8), 2, 0)
    with pytest.raises(TypeError):
        cexpand.apply_bitmask(bits, np.zeros(8, dtype=np.uint16), 2)


def test_plan_codes_and_names() -> None:
    """The C kernel's plan codes map onto the shared vocabulary: the plan forced by a
    strategy is reported under its name, and every name is a name of the shared table."""
    assert set(C_PLAN_NAMES) - {""} <= set(plans.PLANS)
    rng = np.random.default_rng(15)
    tc = skewed(rng, 5_000, 300, 1.2, 0.01)
    kernel = cexpand.Kernel(tc.astype(np.int32), 300, 32 << 20)
    row = class_row(rng, 300, 0.5, junk=False)
    out = np.zeros((5_000 + 31) // 32, dtype=np.int32)
    assert C_PLAN_NAMES[kernel.expand(row, out, None, None, C_FORCED["gather"])] == "gather"
    assert C_PLAN_NAMES[kernel.expand(row, out, None, None, C_FORCED["split"])] == "split"
    assert C_PLAN_NAMES[kernel.expand(row, out, None, None, C_FORCED["sparse"])] in ("set", "clear")
    ex = MaskExpander(tc, 300, kernel="c")
    for strategy in ("gather", "split"):
        ex.expand(row, strategy=strategy)  # type: ignore[arg-type]
        assert ex.last_strategy == strategy
    ex.expand(row)
    ex.expand(row)
    assert ex.last_strategy == "cache"


def test_expander_index_errors_are_typed() -> None:
    """The kernel's own index check surfaces as a BatchIndexError (an IndexError), in the
    batch path and the one-row path alike; nothing is written."""
    rng = np.random.default_rng(16)
    tc = skewed(rng, 400, 20, 1.0, 0.0)
    ex = MaskExpander(tc, 20, kernel="c")
    cm = np.stack([class_row(rng, 20, 0.5, junk=False) for _ in range(2)])
    out = np.full((3, 13), -3, dtype=np.int32)
    with pytest.raises(BatchIndexError, match="out of range"):
        ex.expand(cm, out, indices=[0, 3])
    with pytest.raises(BatchIndexError, match="out of range"):
        ex.expand_at(cm[:1], out, -1)
    assert (out == -3).all()


def set_rows_of(sets: list[npt.NDArray[np.int64]], classes: int) -> npt.NDArray[np.int32]:
    """Class bitmask rows of class-id lists (numpy booleans, independent of the kernel)."""
    words = (classes + 31) // 32
    bits = np.zeros((len(sets), words * 32), dtype=bool)
    for i, s in enumerate(sets):
        bits[i, s] = True
    return np.packbits(bits, axis=1, bitorder="little").view(np.int32).copy()


def csr(sets: list[npt.NDArray[np.int64]]) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """The sets as ``keep_sets`` takes them: starts and the classes one set after another."""
    start = np.array([0, *np.cumsum([len(s) for s in sets])], dtype=np.int32)
    flat = np.concatenate([np.asarray(s) for s in sets]) if sets else np.zeros(0)
    return start, flat.astype(np.int32)


@settings(max_examples=30, deadline=None)
@given(
    width=st.integers(500, 9_000),
    classes=st.integers(2, 300),
    seed=st.integers(0, 2**32 - 1),
    n_sets=st.integers(1, 12),
    max_sets=st.integers(0, 12),
    cache=st.sampled_from([0, 1, 4]),
)
def test_rows_patched_from_kept_sets_equal_the_oracle(
    width: int, classes: int, seed: int, n_sets: int, max_sets: int, cache: int
) -> None:
    """Rows near the kept sets (a set with classes added and removed, two sets' union) go
    through the row cache, whose misses may be patched from a kept set's row: every row
    equals the oracle, also after the cache is cleared (the kept sets stay)."""
    rng = np.random.default_rng(seed)
    tc = skewed(rng, width, classes, 1.2, 0.05)
    sets = [rng.choice(classes, int(rng.integers(1, classes + 1)), replace=False) for _ in range(n_sets)]
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 16, -1, cache, 1, bool(seed & 1))
    kept = kernel.keep_sets(*csr(sets), max_sets, 0.0)  # classes in any order within a set
    assert 0 <= kept <= min(max_sets, n_sets) and kernel.info()["sets"] == kept
    out = np.zeros((1, (width + 31) // 32), dtype=np.int32)
    for step in range(60):
        if step == 30:
            kernel.clear_cache()
        a = sets[int(rng.integers(0, n_sets))]
        bits = np.zeros(classes, dtype=bool)
        bits[a] = True
        if rng.random() < 0.3:
            bits[sets[int(rng.integers(0, n_sets))]] = True
        flip = rng.integers(0, classes, int(rng.integers(0, 4)))
        bits[flip] = ~bits[flip]
        row = set_rows_of([np.flatnonzero(bits)], classes)
        if classes % 32 and step % 2:
            row[0, -1] |= np.int32(-(2**31))  # a bit past num_classes: ignored
        kernel.expand_rows(row, out)
        assert np.array_equal(out[0], oracle_row(tc, row[0], classes)), step
    assert kernel.info()["sets"] == kept


def test_a_miss_near_a_kept_set_is_patched_from_it() -> None:
    """With no cached row to patch, a row of a large kept set plus one class is its copy
    with that class set (plan 4, counted in set_deltas), and the sets outlive clear_cache;
    a budget of none, or a cost floor above every set, keeps none."""
    rng = np.random.default_rng(11)
    width, classes = 40_000, 400
    tc = skewed(rng, width, classes, 0.6, 0.0)
    big = np.arange(50, 390)
    sets = csr([big, np.arange(3), big[::-1]])  # the second copy of `big` is dropped
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 18, -1, 8, 1, False)
    assert kernel.keep_sets(*sets, 0, 0.0) == 0
    assert kernel.keep_sets(*sets, 5, 1e12) == 0
    assert kernel.keep_sets(*sets, 5, 0.0) == 2 and kernel.info()["set_bytes"] == 2 * 4 * (
        (width // 32 + 15) // 16 * 16
    )
    row = set_rows_of([np.append(big, 7)], classes)
    out = np.zeros((1, width // 32), dtype=np.int32)
    for _ in range(2):
        assert kernel.expand_rows(row, out) == 4
        assert kernel.cache_info()["set_deltas"] == 1
        assert np.array_equal(out[0], oracle_row(tc, row[0], classes))
        kernel.clear_cache()
    assert kernel.keep_sets(*csr([np.arange(3)]), 5, 0.0) == 1  # replaced: the large set is gone
    assert kernel.expand_rows(row, out) != 4 and kernel.cache_info()["set_deltas"] == 0
    assert np.array_equal(out[0], oracle_row(tc, row[0], classes))


def test_keep_sets_errors() -> None:
    tc = np.array([0, 1, 1, -1, 2], dtype=np.int32)
    kernel = cexpand.Kernel(tc, 3, 1 << 10)
    one = np.array([0, 2], dtype=np.int32), np.array([0, 2], dtype=np.int32)
    for start, cls, match in (
        (np.zeros(0, dtype=np.int32), one[1], "at least one"),
        (np.zeros(3, dtype=np.int8), one[1], "int32"),
        (np.array([0, 3], dtype=np.int32), one[1], "within"),
        (np.array([-1, 1], dtype=np.int32), one[1], "within"),
        (np.array([0, 2, 1], dtype=np.int32), one[1], "decrease"),
        (one[0], np.array([0, 3], dtype=np.int32), "class 3"),
        (one[0], np.array([-1, 0], dtype=np.int32), "class -1"),
    ):
        with pytest.raises(ValueError, match=match):
            kernel.keep_sets(start, cls, 1, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        kernel.keep_sets(*one, -1, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        kernel.keep_sets(*one, 1, float("nan"))
    with pytest.raises(TypeError):
        kernel.keep_sets(*one, 1)
    assert kernel.keep_sets(np.zeros(1, dtype=np.int32), np.zeros(0, dtype=np.int32), 4, 0.0) == 0
    assert kernel.keep_sets(np.zeros(3, dtype=np.int32), one[1], 4, 0.0) == 0  # empty sets: none
    assert (
        kernel.keep_sets(np.array([0, 1, 2], dtype=np.int32), np.array([2, 2], dtype=np.int32), 4, 0.0) == 1
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(  # the fixture is a switch of the process, the same for every input
    width=st.integers(500, 9_000),
    classes=st.integers(2, 300),
    seed=st.integers(0, 2**32 - 1),
    n_rows=st.integers(0, 10),
    max_rows=st.integers(0, 12),
    cache=st.sampled_from([1, 4]),
)
def test_rows_through_pinned_rows_equal_the_oracle(
    avx2_paths: bool, width: int, classes: int, seed: int, n_rows: int, max_rows: int, cache: int
) -> None:
    """Class rows pinned (some repeated, some with a bit past num_classes), then a walk over
    them and near them through the row cache: every row equals the oracle, before and after
    the cache is cleared (the pinned rows stay); a pinned row's miss is a hit, its lines
    gathered out of the pool (two at a time with AVX2: rows of an odd and an even number of
    lines)."""
    rng = np.random.default_rng(seed)
    tc = skewed(rng, width, classes, 1.2, 0.05)
    sets = [rng.choice(classes, int(rng.integers(1, classes + 1)), replace=False) for _ in range(n_rows)]
    rows = set_rows_of(sets + sets[:2], classes) if sets else np.zeros((0, (classes + 31) // 32), np.int32)
    if classes % 32 and len(rows):
        rows[-1, -1] |= np.int32(-(2**31))  # ignored: the same class row as the one it copies
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 16, -1, cache, 1, bool(seed & 1))
    pinned = kernel.pin_rows(rows, max_rows, 0.0)
    expected: set[bytes] = set()  # distinct class rows with a token, in order, up to max_rows
    for r in rows:
        key = oracle_row(tc, r, classes)
        if key.any() and len(expected) < max_rows:
            expected.add(
                set_rows_of(
                    [np.flatnonzero(np.unpackbits(r.view(np.uint8), bitorder="little")[:classes])], classes
                ).tobytes()
            )
    assert pinned == len(expected)
    assert kernel.info()["pinned"] == pinned
    out = np.zeros((1, (width + 31) // 32), dtype=np.int32)
    for step in range(40):
        if step == 20:
            kernel.clear_cache()
        bits = np.zeros(classes, dtype=bool)
        if sets:
            bits[sets[int(rng.integers(0, n_rows))]] = True
        if rng.random() < 0.4:
            flip = rng.integers(0, classes, int(rng.integers(1, 4)))
            bits[flip] = ~bits[flip]
        row = set_rows_of([np.flatnonzero(bits)], classes)
        kernel.expand_rows(row, out)
        assert np.array_equal(out[0], oracle_row(tc, row[0], classes)), step
    assert kernel.info()["pinned"] == pinned


def test_a_pinned_row_is_a_hit_that_outlives_the_cache() -> None:
    """A pinned class row's first request is a hit (plan 8) copying the pinned row, not a
    miss, also after clear_cache; a cost floor above the row, or a budget of none, pins
    nothing; a new call replaces the pinned rows."""
    rng = np.random.default_rng(5)
    width, classes = 40_000, 400
    tc = skewed(rng, width, classes, 0.6, 0.0)
    row = set_rows_of([np.arange(20, 330)], classes)
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 18, -1, 8, 1, False)
    assert kernel.pin_rows(row, 0, 0.0) == 0
    assert kernel.pin_rows(row, 4, 1e12) == 0
    assert kernel.pin_rows(np.concatenate([row, row]), 4, 0.0) == 1
    lines = distinct_lines([oracle_row(tc, row[0], classes)])
    assert kernel.info()["pinned_lines"] == lines
    assert kernel.info()["pinned_bytes"] == 64 * lines + 2 * ((width // 32 + 15) // 16)
    out = np.zeros((1, width // 32), dtype=np.int32)
    for _ in range(2):
        assert kernel.expand_rows(row, out) == 8
        info = kernel.cache_info()
        assert info["hits"] == 1 and info["misses"] == 0
        assert np.array_equal(out[0], oracle_row(tc, row[0], classes))
        kernel.clear_cache()
    assert kernel.pin_rows(set_rows_of([np.arange(3)], classes), 4, 0.0) == 1  # replaced
    assert kernel.expand_rows(row, out) != 8 and kernel.cache_info()["misses"] == 1
    assert np.array_equal(out[0], oracle_row(tc, row[0], classes))


def distinct_lines(rows: list[npt.NDArray[np.int32]]) -> int:
    """The distinct 64-byte lines of token rows, each padded with zero words to whole lines
    (numpy, independent of the kernel's pool)."""
    nw = rows[0].shape[0]
    padded = np.zeros((len(rows), (nw + 15) // 16 * 16), dtype=np.int32)
    padded[:, :nw] = np.stack(rows)
    return len(np.unique(padded.reshape(-1, 16), axis=0))


def test_pinned_rows_share_their_lines_and_stop_when_the_pool_is_full() -> None:
    """Pinned rows are kept as their distinct 64-byte lines: rows alike but for the classes of
    their first line take little more than one row, and each copies back bit for bit (oracle rows); random
    rows whose distinct lines would pass 65,536 are pinned up to the last that fits, those
    after it miss."""
    rng = np.random.default_rng(9)
    width, classes = 40_000, 400
    tc = skewed(rng, width, 20, 0.6, 0.05)
    tc[:380] = np.arange(20, 400)  # one-token classes in the first 12 words
    small = np.arange(20, 400)
    alike = set_rows_of(
        [np.concatenate([np.arange(20), rng.choice(small, 200, replace=False)]) for _ in range(30)], classes
    )
    kernel = cexpand.Kernel(tc.astype(np.int32), classes, 1 << 18, -1, 8, 1, False)
    pinned = kernel.pin_rows(alike, 64, 0.0)
    truth = [oracle_row(tc, r, classes) for r in alike]
    per_row = (width // 32 + 15) // 16
    assert pinned == len({t.tobytes() for t in truth}) == 30
    assert kernel.info()["pinned_lines"] == distinct_lines(truth) < 2 * per_row
    out = np.zeros((1, width // 32), dtype=np.int32)
    for r, t in zip(alike, truth, strict=True):
        assert kernel.expand_rows(r[None, :], out) == 8 and np.array_equal(out[0], t)
    # random rows: about 79 new lines each, so the pool fills after about 830 of them
    noisy = np.stack([class_row(rng, classes, 0.5, False) for _ in range(900)])
    kept = kernel.pin_rows(noisy, 1000, 0.0)
    truth = [oracle_row(tc, r, classes) for r in noisy]
    assert 780 < kept < 900 and distinct_lines(truth[:kept]) == kernel.info()["pinned_lines"] <= 65_536
    assert distinct_lines(truth[: kept + 1]) > 65_536
    kernel.clear_cache()
    for i in (0, kept // 2, kept - 1):
        assert kernel.expand_rows(noisy[i][None, :], out) == 8 and np.array_equal(out[0], truth[i])
    assert kernel.expand_rows(noisy[kept][None, :], out) != 8 and np.array_equal(out[0], truth[kept])


def test_pin_rows_errors() -> None:
    tc = np.array([0, 1, 1, -1, 2], dtype=np.int32)
    kernel = cexpand.Kernel(tc, 3, 1 << 10)
    one = np.array([[5]], dtype=np.int32)
    with pytest.raises(ValueError, match="whole class rows"):
        kernel.pin_rows(np.zeros(3, dtype=np.int8), 1, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        kernel.pin_rows(one, -1, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        kernel.pin_rows(one, 1, float("nan"))
    with pytest.raises(TypeError):
        kernel.pin_rows(one, 1)
    assert kernel.pin_rows(np.zeros((2, 1), dtype=np.int32), 4, 0.0) == 0  # empty rows: none
    assert kernel.pin_rows(np.zeros((0, 1), dtype=np.int32), 4, 0.0) == 0
