"""Mask expansion: numpy (every strategy), the C kernel (every plan) and torch against a
bit-by-bit reference; the bitmask layout's argument checks; the reference itself.

The oracle is :func:`expand_reference` (``tests/_expand_oracle.py``: a Python loop over
logit indices), checked here against a computation written differently (Python integers),
and, independently, a per-token ``allowed[token_class]`` computed here with numpy booleans.
Tests of behaviour common to both CPU kernels run for each kernel that is built (the C
kernel is built by the compiled install, which CI tests; ``tests/test_build.py`` checks it
is there).  Only the torch tests need PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from _build import c_param, expected_kernels
from _expand_oracle import expand_reference
from _lru_model import lru_model
from hypothesis import example, given, settings
from hypothesis import strategies as st

from formalgram_cfgzip.errors import BatchIndexError, EngineError
from formalgram_cfgzip.expand import MaskExpander, bitmask_shape, plans
from formalgram_cfgzip.expand._c_kernel import load_c_module
from formalgram_cfgzip.expand.layout import (
    allocate_bitmask,
    as_int32_rows,
    check_int32_rows,
    check_logits_shape,
    check_row_index,
)

# parametrized tests: the C kernel's cases are skipped (with a reason) in the pure-Python build;
# tests that compare the kernels in one run use every kernel the build must have
KERNELS: list[Any] = ["numpy", c_param("expand")]
BOTH = expected_kernels("numpy")


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


STRATEGIES: tuple[Any, ...] = ("auto", "split", "gather", "sparse")
EXPANDER_KWARGS: tuple[dict[str, Any], ...] = (
    {},
    {"max_dense": 0},
    {"max_dense": 2},
    {"memory_budget": 0},
    {"dense": 1},
    {"dense": 20},
    {"dense": 10_000},
    {"cache_bytes": 0},
    {"cache_bytes": 1},
)


# -- the oracle ---------------------------------------------------------------------------
def allowed_by_integers(token_class: list[int], class_words: list[int]) -> list[bool]:
    """Token ``i`` allowed, computed without numpy: the class row as one Python integer
    (word ``k`` holds classes ``32k .. 32k + 31``), one shift per token."""
    row = 0
    for k, word in enumerate(class_words):
        row |= (word % 2**32) << (32 * k)
    return [c >= 0 and (row >> c) & 1 == 1 for c in token_class]


def bits_of_words(words: list[int]) -> list[bool]:
    """The bits of a row of int32 words as a flat list, least significant bit of word 0 first
    (through binary digit strings)."""
    return [digit == "1" for word in words for digit in reversed(format(word % 2**32, "032b"))]


@st.composite
def expansion_cases(draw: st.DrawFn) -> tuple[list[int], int, list[list[int]]]:
    """A class map (negative ids included), its number of classes, and a batch of class
    rows of random int32 words (so with junk bits past ``num_classes``)."""
    num_classes = draw(st.integers(1, 100))
    width = draw(st.integers(1, 200))
    token_class = draw(st.lists(st.integers(-5, num_classes - 1), min_size=width, max_size=width))
    words = (num_classes + 31) // 32
    word = st.integers(-(2**31), 2**31 - 1)
    rows = draw(st.lists(st.lists(word, min_size=words, max_size=words), min_size=1, max_size=4))
    return token_class, num_classes, rows


@settings(max_examples=200, deadline=None)
@given(case=expansion_cases())
@example(case=([0], 1, [[-1]]))  # one token, junk in 31 bits past the only class
@example(case=([-1] * 33, 2, [[-1], [0]]))  # never-allowed tokens only, a pad word
@example(case=(list(range(64)), 64, [[-1, 0], [0, -1]]))  # widths that are multiples of 32
def test_oracle_equals_per_token_integers(case: tuple[list[int], int, list[list[int]]]) -> None:
    """The oracle against :func:`allowed_by_integers` on random class maps and rows: every
    token's bit, pad bits zero, junk bits past ``num_classes`` without effect."""
    token_class, num_classes, rows = case
    width = len(token_class)
    got = expand_reference(np.array(token_class, dtype=np.int64), np.array(rows, dtype=np.int32), width)
    assert got.dtype == np.int32 and got.shape == (len(rows), (width + 31) // 32)
    junk_free = np.array(rows, dtype=np.int32)
    tail = num_classes % 32
    if tail:
        junk_free[:, -1] &= np.int32((1 << tail) - 1)
    assert np.array_equal(expand_reference(np.array(token_class), junk_free, width), got)
    for b, row in enumerate(rows):
        bits = bits_of_words(got[b].tolist())
        assert bits[:width] == allowed_by_integers(token_class, row)
        assert not any(bits[width:])


def test_oracle_equals_numpy_booleans() -> None:
    """The oracle against the numpy-boolean ``oracle`` on larger cases (batches, holes,
    skewed and flat maps, widths around multiples of 32)."""
    rng = np.random.default_rng(0)
    for width, classes in ((77, 5), (96, 40), (1025, 300), (3000, 33)):
        for skew in (0.0, 1.5):
            tc = random_case(rng, width, classes, skew, 0.1)
            cm = random_class_mask(rng, 3, classes, float(rng.random()))
            assert np.array_equal(expand_reference(tc, cm, width), oracle(tc, cm, classes))


@pytest.mark.parametrize("width", [1, 31, 32, 33, 100, 1000, 4097])
@pytest.mark.parametrize("classes", [1, 3, 32, 33, 200])
def test_numpy_strategies_equal_oracle(width: int, classes: int) -> None:
    rng = np.random.default_rng(width * 1000 + classes)
    for skew in (0.0, 1.3, 3.0):
        tc = random_case(rng, width, classes, skew, 0.05)
        for kwargs in EXPANDER_KWARGS:
            ex = MaskExpander(tc, classes, kernel="numpy", **kwargs)
            for density in (0.0, 0.02, 0.5, 0.97, 1.0):
                cm = random_class_mask(rng, 4, classes, density)
                want = oracle(tc, cm, classes)
                for strategy in STRATEGIES:
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
    for kernel in BOTH:
        for ex in (
            MaskExpander(tc, classes, kernel=kernel),
            MaskExpander(tc, classes, max_dense=0, kernel=kernel),
        ):
            assert np.array_equal(ex.expand(cm), want)


@pytest.mark.parametrize(("width", "classes"), [(20_000, 5_000), (9_999, 40), (3_001, 1_500)])
def test_flat_and_skewed_large_all_paths(width: int, classes: int) -> None:
    """Flat (a few tokens per class) and skewed distributions where every row plan is reachable."""
    rng = np.random.default_rng(width + classes)
    for skew in (0.0, 2.0):
        tc = random_case(rng, width, classes, skew, 0.02)
        options: list[dict[str, Any]] = [{}, {"dense": 24}, {"cache_bytes": 0}]
        for kwargs in options:
            ex = MaskExpander(tc, classes, kernel="numpy", **kwargs)
            seen: set[str] = set()
            for density in (0.0, 0.001, 0.01, 0.3, 0.5, 0.7, 0.99, 0.999, 1.0):
                cm = random_class_mask(rng, 2, classes, density)
                want = oracle(tc, cm, classes)
                for strategy in STRATEGIES:
                    assert np.array_equal(ex.expand(cm, strategy=strategy), want), (
                        skew,
                        kwargs,
                        density,
                        strategy,
                    )
                    seen.add(ex.last_strategy)
            assert {plans.GATHER, plans.SPLIT} <= seen <= set(plans.PLANS), seen


def test_sparse_and_complement_plans_are_exercised() -> None:
    """A row with one allowed small class and a row with one disallowed one (flat classes)."""
    rng = np.random.default_rng(11)
    width, classes = 30_000, 10_000
    tc = random_case(rng, width, classes, 0.0, 0.0)
    ex = MaskExpander(tc, classes, cache_bytes=0, kernel="numpy")
    words = (classes + 31) // 32
    a, b = int(tc[0]), int(tc[1])  # two non-empty classes
    bits = np.zeros((2, words * 32), dtype=bool)
    bits[0, a] = True
    bits[1, :] = True
    bits[1, b] = False
    one, all_but_one = np.packbits(bits, axis=1, bitorder="little").view(np.int32)[:, None, :]
    used = []
    for cm in (one, all_but_one):
        want = expand_reference(tc, cm, width)
        assert np.array_equal(ex.expand(cm), want)
        used.append(ex.last_strategy)
        assert np.array_equal(ex.expand(cm, strategy="sparse"), want)
    assert used == [plans.SPLIT_SET, plans.SPLIT_CLEAR]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("delta", [None, True, False])
@pytest.mark.parametrize("capacity", [1, 2, 3, 50])
def test_cache_hits_misses_evictions(capacity: int, delta: bool | None, kernel: Any) -> None:
    rng = np.random.default_rng(capacity)
    width, classes = 1_000, 37
    tc = random_case(rng, width, classes, 1.2, 0.05)
    pool = random_class_mask(rng, 6, classes, 0.4)
    per_entry = 4 * ((width + 31) // 32) + 4 * ((classes + 31) // 32) + 100
    ex = MaskExpander(
        tc, classes, cache_bytes=capacity * per_entry, delta=delta, kernel=kernel, cache_admission="always"
    )
    assert ex.cache_stats["capacity"] == capacity
    order = rng.integers(0, pool.shape[0], 80)
    out = np.zeros(bitmask_shape(1, width), dtype=np.int32)
    for i in order:
        ex.expand(pool[i], out)
        assert np.array_equal(out, expand_reference(tc, pool[i : i + 1], width)), (capacity, i)
        out[:] = -1  # the cached copy must not alias the caller's buffer
    hits, misses, evictions = lru_model([pool[i].tobytes() for i in order], capacity)
    stats = ex.cache_stats
    assert (stats["hits"], stats["misses"], stats["evictions"]) == (hits, misses, evictions)
    assert stats["entries"] == min(capacity, len(set(order.tolist())))
    if delta:  # every miss but the first patches a cached row
        assert stats["deltas"] == misses - 1
    elif delta is False:
        assert stats["deltas"] == 0
    ex.clear_cache()
    assert ex.cache_stats["entries"] == 0 and ex.cache_stats["hits"] == 0
    ex.expand(pool[0], out)
    assert np.array_equal(out, expand_reference(tc, pool[:1], width))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("flip_size", [1, 5, 50, 1000])
def test_delta_patch_of_cached_rows(flip_size: int, kernel: Any) -> None:
    """A miss whose class row differs from the last one in a class of ``flip_size`` tokens."""
    rng = np.random.default_rng(flip_size)
    width, classes = 5_003, 100
    tc = rng.integers(2, 64, width).astype(np.int64)  # classes 64..99 stay empty
    tc[rng.permutation(width)[:flip_size]] = 1  # class 1 holds exactly flip_size tokens
    tc[rng.random(width) < 0.02] = -1
    ex = MaskExpander(tc, classes, delta=True, kernel=kernel)
    cm = random_class_mask(rng, 1, classes, 0.5)
    for step in range(6):
        cm = cm.copy()
        cm[0, 0] ^= np.int32(0b10)  # flip class 1
        cm[0, 2] = step  # empty classes 64..95: every row is new
        if step % 3 == 2:
            cm[0, 1] ^= np.int32(1 << int(rng.integers(0, 32)))  # and a class 32..63
        got = ex.expand(cm)
        assert np.array_equal(got, expand_reference(tc, cm, width)), step
        assert step == 0 or ex.last_strategy == "delta"
    assert ex.cache_stats["deltas"] == 5


@pytest.mark.parametrize("kernel", KERNELS)
def test_kept_sets_through_the_expander(kernel: Any) -> None:
    """``keep_sets``: the C kernel keeps the large sets within the budget (none with a budget
    below one row) and patches misses from them, the numpy kernel keeps none; rows near the
    sets equal the oracle either way, and bad arguments get the typed error from both."""
    rng = np.random.default_rng(8)
    width, classes = 20_000, 300
    tc = random_case(rng, width, classes, 0.8, 0.05)
    ex = MaskExpander(tc, classes, kernel=kernel)
    sets = random_class_mask(rng, 6, classes, 0.7)
    members = [np.flatnonzero(np.unpackbits(r.view(np.uint8), bitorder="little")[:classes]) for r in sets]
    start = np.cumsum([0] + [len(m) for m in members])  # int64: converted
    flat = np.concatenate(members)
    assert ex.keep_sets(start, flat, memory_budget=4 * width // 32 - 1, min_cost_ns=0.0) == 0
    kept = ex.keep_sets(start, flat, min_cost_ns=0.0)
    assert kept == ex.num_kept_sets == (6 if kernel == "c" else 0)
    for i in range(6):
        cm = sets[i : i + 1].copy()
        cm[0, 0] ^= np.int32(0b101)
        assert np.array_equal(ex.expand(cm), oracle(tc, cm, classes)), i
    assert ex.cache_stats.get("set_deltas", 0) == (6 if kernel == "c" else 0)
    for bad in ({"memory_budget": -1}, {"min_cost_ns": -1.0}, {"min_cost_ns": float("nan")}):
        with pytest.raises(EngineError):
            ex.keep_sets(start, flat, **bad)
    for s_, f_ in (
        ([], flat),
        (start[::-1], flat),
        (start, np.append(flat[1:], classes)),
        (start, flat.astype(float)),
        (start.reshape(1, -1), flat),
        ([0, len(flat) + 1], flat),
    ):
        with pytest.raises(EngineError):
            ex.keep_sets(s_, f_)
    assert ex.num_kept_sets == (6 if kernel == "c" else 0)  # a refused call keeps what was kept


@pytest.mark.parametrize("kernel", KERNELS)
def test_pinned_rows_through_the_expander(kernel: Any) -> None:
    """``pin_rows``: the C kernel pins the distinct class rows within the budget (none with a
    budget below one row) and answers their misses as hits, also after ``clear_cache``; the
    numpy kernel pins none; every row equals the oracle either way, and bad arguments get the
    typed error from both."""
    rng = np.random.default_rng(18)
    width, classes = 20_000, 300
    tc = random_case(rng, width, classes, 0.8, 0.05)
    ex = MaskExpander(tc, classes, kernel=kernel)
    rows = random_class_mask(rng, 5, classes, 0.7)
    twice = np.concatenate([rows, rows[:2]]).astype(np.int64)  # converted; repeats pinned once
    assert ex.pin_rows(twice, memory_budget=4 * width // 32 - 1, min_cost_ns=0.0) == 0
    pinned = ex.pin_rows(twice, min_cost_ns=0.0)
    assert pinned == ex.num_pinned_rows == (5 if kernel == "c" else 0)
    for _ in range(2):
        ex.clear_cache()
        for i in range(5):
            assert np.array_equal(ex.expand(rows[i : i + 1]), oracle(tc, rows[i : i + 1], classes)), i
        assert ex.cache_stats["hits"] == (5 if kernel == "c" else 0)
    for bad_kw in ({"memory_budget": -1}, {"min_cost_ns": -1.0}, {"min_cost_ns": float("nan")}):
        with pytest.raises(EngineError):
            ex.pin_rows(rows, **bad_kw)
    for bad in (rows[0], rows[:, :-1], rows.astype(float)):
        with pytest.raises(EngineError):
            ex.pin_rows(bad)
    assert ex.num_pinned_rows == (5 if kernel == "c" else 0)  # a refused call keeps what was pinned


@pytest.mark.parametrize("kernel", KERNELS)
def test_cache_in_batches_with_duplicate_rows(kernel: Any) -> None:
    rng = np.random.default_rng(4)
    width, classes = 4_099, 300
    tc = random_case(rng, width, classes, 1.5, 0.1)
    ex = MaskExpander(tc, classes, cache_bytes=1 << 20, kernel=kernel)
    pool = random_class_mask(rng, 3, classes, 0.5)
    for step in range(5):
        cm = pool[rng.integers(0, 3, 16)]
        out = np.full(bitmask_shape(20, width), 7, dtype=np.int32)
        rows = rng.permutation(20)[:16].tolist()
        ex.expand(cm, out, indices=rows)
        want = oracle(tc, cm, classes)
        for src, dst in enumerate(rows):
            assert np.array_equal(out[dst], want[src]), (step, src)
        assert all((out[r] == 7).all() for r in set(range(20)) - set(rows))
    assert ex.cache_stats["misses"] == 3 and ex.cache_stats["hits"] == 5 * 16 - 3


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 400),
    classes=st.integers(1, 90),
    seed=st.integers(0, 2**32 - 1),
    capacity=st.integers(0, 4),
    dense=st.sampled_from([None, 0, 8, 16, 100]),
    delta=st.sampled_from([None, True]),
    kernel=st.sampled_from(BOTH),
)
def test_hypothesis_cached_sequences(
    width: int, classes: int, seed: int, capacity: int, dense: int | None, delta: bool | None, kernel: Any
) -> None:
    """Random walks over a small pool of class masks (so rows repeat), any cache size."""
    rng = np.random.default_rng(seed)
    tc = random_case(rng, width, classes, float(rng.random() * 3), 0.1)
    per_entry = 4 * ((width + 31) // 32) + 4 * ((classes + 31) // 32) + 100
    ex = MaskExpander(tc, classes, cache_bytes=capacity * per_entry, dense=dense, delta=delta, kernel=kernel)
    pool = random_class_mask(rng, 5, classes, float(rng.random()))
    for i in rng.integers(0, 5, 12):
        assert np.array_equal(ex.expand(pool[i]), expand_reference(tc, pool[i : i + 1], width))


@pytest.mark.parametrize("kernel", KERNELS)
def test_indices_out_and_errors(kernel: Any) -> None:
    rng = np.random.default_rng(1)
    tc = random_case(rng, 70, 4, 1.0, 0.0)
    ex = MaskExpander(tc, 4, kernel=kernel)
    assert ex.kernel == kernel
    cm = random_class_mask(rng, 2, 4, 0.5)
    out = np.full(bitmask_shape(5, 70), -1, dtype=np.int32)
    ex.expand(cm, out, indices=[4, 1])
    want = oracle(tc, cm, 4)
    assert np.array_equal(out[4], want[0]) and np.array_equal(out[1], want[1])
    assert (out[0] == -1).all()
    before = out.copy()
    for strategy in ("auto", "gather"):  # every index is checked before a row is written
        with pytest.raises(BatchIndexError, match="out of range"):
            ex.expand(cm, out, indices=[0, 5], strategy=strategy)
        assert np.array_equal(out, before)
    with pytest.raises(EngineError, match="int32"):
        ex.expand(cm.astype(np.int64))
    with pytest.raises(EngineError, match="shape"):
        ex.expand(cm, np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(EngineError, match="C-contiguous"):
        ex.expand(cm, np.zeros((5, 6), dtype=np.int32)[:, ::2])
    read_only = np.zeros((2, 3), dtype=np.int32)
    read_only.flags.writeable = False
    with pytest.raises(EngineError, match="writable"):
        ex.expand(cm, read_only)
    with pytest.raises(EngineError, match="num_classes"):
        MaskExpander(np.array([0, 5]), 3)
    with pytest.raises(EngineError, match="1-D"):
        MaskExpander(np.zeros((2, 2), dtype=np.int64), 3)
    with pytest.raises(EngineError, match="integers"):
        MaskExpander(np.array([0.5]), 3)
    with pytest.raises(EngineError, match=">= 0"):
        MaskExpander(tc, 4, cache_bytes=-1)
    with pytest.raises(EngineError, match="kernel must be"):
        MaskExpander(tc, 4, kernel="fortran")  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="cache_admission must be"):
        MaskExpander(tc, 4, cache_admission="sometimes")  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="1 indices given for 2"):
        ex.expand(cm, out, indices=[1])
    # class rows that are not plain arrays: a strided view (copied) and a 1-D row
    wide = np.zeros((2, 3), dtype=np.int32)
    wide[:, 0] = cm[:, 0]
    assert np.array_equal(ex.expand(wide[:, :1]), want)
    assert np.array_equal(ex.expand(cm[1]), want[1:])
    empty = np.zeros((0, 1), dtype=np.int32)  # an empty batch is a no-op
    assert ex.expand(empty).shape == (0, 3)
    before = out.copy()
    assert ex.expand(empty, out) is out and np.array_equal(out, before)


@pytest.mark.parametrize("kernel", KERNELS)
def test_numpy_mask_logits(kernel: Any) -> None:
    rng = np.random.default_rng(2)
    tc = random_case(rng, 99, 7, 1.0, 0.1)
    ex = MaskExpander(tc, 7, kernel=kernel)
    cm = random_class_mask(rng, 3, 7, 0.4)
    logits = rng.standard_normal((3, 104)).astype(np.float32)
    ex.mask_logits(logits, cm)
    bits = np.unpackbits(oracle(tc, cm, 7).view(np.uint8), axis=1, bitorder="little")[:, :99].astype(bool)
    assert np.array_equal(np.isneginf(logits[:, :99]), ~bits)
    assert np.isneginf(logits[:, 99:]).all()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_mask_logits_dtypes_and_layouts(kernel: Any, dtype: Any) -> None:
    """The direct logits path for every float width, C-ordered and strided logits."""
    rng = np.random.default_rng(6)
    width, classes = 1_000, 40
    tc = random_case(rng, width, classes, 1.0, 0.1)
    ex = MaskExpander(tc, classes, kernel=kernel)
    cm = random_class_mask(rng, 3, classes, 0.5)
    bits = np.unpackbits(oracle(tc, cm, classes).view(np.uint8), axis=1, bitorder="little")[:, :width]
    for layout in ("C", "F", "wider"):
        base = rng.standard_normal((3, width + 37)).astype(dtype)
        logits = np.asfortranarray(base) if layout == "F" else base.copy()
        if layout == "wider":  # a view of every other column of a wider array: strided rows
            logits = np.repeat(base, 2, axis=1)[:, ::2]
        ex.mask_logits(logits, cm)
        assert np.array_equal(np.isneginf(logits[:, :width]), bits == 0), layout
        assert np.isneginf(logits[:, width:]).all()
        kept = bits == 1
        assert np.array_equal(logits[:, :width][kept], base[:, :width][kept])  # others untouched
    with pytest.raises(EngineError, match="float16, float32 or float64"):
        ex.mask_logits(np.zeros((3, width), dtype=np.int32), cm)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="do not fit"):
        ex.mask_logits(np.zeros((3, width - 1), dtype=np.float32), cm)


# -- the layout's checks and the kernel switch --------------------------------------------
def test_layout_checks() -> None:
    """Every bitmask argument goes through one rule: int32, 1-D or 2-D, the row width;
    written bitmasks C-contiguous and writable; rows in range."""
    assert bitmask_shape(3, 64) == (3, 2) and bitmask_shape(1, 65) == (1, 3)
    fresh = allocate_bitmask(2, 33)
    assert fresh.dtype == np.int32 and fresh.shape == (2, 2) and not fresh.any()
    row = np.arange(3, dtype=np.int32)
    view = as_int32_rows(row, "token bitmask", 3)
    assert view.shape == (1, 3) and np.shares_memory(view, row)
    plain = np.zeros((2, 3), dtype=np.int32)
    assert as_int32_rows(plain, "token bitmask") is plain
    strided = np.arange(12, dtype=np.int32).reshape(2, 6)[:, ::2]
    with pytest.raises(EngineError, match="C-contiguous"):
        as_int32_rows(strided, "token bitmask")
    copied = as_int32_rows(strided, "class bitmask", writable=False)
    assert copied.flags.c_contiguous and np.array_equal(copied, strided)
    with pytest.raises(EngineError, match="numpy array or a CPU torch tensor"):
        as_int32_rows([[1, 2]], "token bitmask")
    with pytest.raises(EngineError, match="got int64"):  # an input is converted, then checked
        as_int32_rows([[1, 2]], "class bitmask", writable=False)
    for bad in (
        np.zeros((1, 2), dtype=np.int64),
        np.zeros((1, 1, 2), dtype=np.int32),
        np.zeros((1, 2), ">i4"),
    ):
        with pytest.raises(EngineError, match="int32"):
            as_int32_rows(bad, "token bitmask")
    with pytest.raises(EngineError, match=r"token bitmask must be int32 of shape \(batch, 4\)"):
        as_int32_rows(plain, "token bitmask", 4)
    check_int32_rows("class bitmask", True, "int32", (7,), 7)
    with pytest.raises(EngineError, match="1-D or 2-D"):
        check_int32_rows("class bitmask", True, "int32", (), None)
    check_row_index(0, 1)
    for index in (-1, 1, 10**12):
        with pytest.raises(BatchIndexError, match="out of range") as info:
            check_row_index(index, 1)
        assert isinstance(info.value, IndexError) and isinstance(info.value, EngineError)
    check_logits_shape((2, 70), (2, 3), 70)
    for shape in ((70,), (1, 70), (2, 69)):
        with pytest.raises(EngineError, match="do not fit"):
            check_logits_shape(shape, (2, 3), 70)


def test_no_cexpand_switch_selects_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FORMALGRAM_NO_CEXPAND=1`` turns the C kernel off ("auto" takes numpy, "c" refuses);
    ``0`` or empty leaves it on."""
    import importlib.util

    built = importlib.util.find_spec("formalgram_cfgzip.expand._cexpand") is not None
    tc = np.array([0, 1, 1, 2, -1])
    monkeypatch.setenv("FORMALGRAM_NO_CEXPAND", "1")
    assert load_c_module() is None
    assert MaskExpander(tc, 3).kernel == "numpy"
    with pytest.raises(EngineError, match="not built"):
        MaskExpander(tc, 3, kernel="c")
    for value in ("0", ""):
        monkeypatch.setenv("FORMALGRAM_NO_CEXPAND", value)
        assert MaskExpander(tc, 3).kernel == ("c" if built else "numpy")


@pytest.mark.parametrize("kernel", KERNELS)
def test_both_kernels_report_plans_of_one_vocabulary(kernel: Any) -> None:
    """Every plan name a kernel reports is in :mod:`formalgram_cfgzip.expand.plans`, and every
    row, cache hits included, is the oracle's."""
    rng = np.random.default_rng(17)
    width, classes = 20_000, 3_000
    tc = random_case(rng, width, classes, 1.1, 0.02)
    ex = MaskExpander(tc, classes, kernel=kernel, cache_bytes=1 << 20)
    seen: set[str] = set()
    for density in (0.0005, 0.3, 0.9995, 1.0):
        cm = random_class_mask(rng, 1, classes, density)
        for _ in range(2):  # the second time: a cache hit
            for strategy in STRATEGIES if _ == 0 else ("auto",):
                got = ex.expand(cm, strategy=strategy)
                seen.add(ex.last_strategy)
                assert np.array_equal(got, oracle(tc, cm, classes)), (strategy, ex.last_strategy)
    assert plans.CACHE in seen and seen <= set(plans.PLANS), seen


# -- torch ------------------------------------------------------------------------------
@pytest.fixture
def torch() -> Any:
    """PyTorch, or a skip: only the torch tests need it."""
    return pytest.importorskip("torch")


def test_torch_class_bitmask_checks(torch: Any) -> None:
    """Tensors go through the same layout rule as numpy arrays (one check, typed errors)."""
    from formalgram_cfgzip.expand import TorchMaskExpander

    tc = np.array([0, 1, 1, 2, -1])
    t = torch.zeros((2, 1), dtype=torch.int32)
    view = as_int32_rows(t, "token bitmask", 1)
    view[1, 0] = 5
    assert int(t[1, 0]) == 5  # a view of the tensor's memory
    for backend in ("numpy", "torch"):
        ex = TorchMaskExpander(tc, 3, backend=backend)  # type: ignore[arg-type]
        assert ex.expand(torch.tensor([0b110], dtype=torch.int32)).tolist() == [[14]]
        assert ex.expand(np.array([[0b011]], dtype=np.int32)).tolist() == [[7]]
        with pytest.raises(EngineError, match="int32 of shape"):
            ex.expand(torch.zeros((1, 1), dtype=torch.int64))
        with pytest.raises(EngineError, match="int32 of shape"):
            ex.expand(torch.zeros((1, 1, 1), dtype=torch.int32))
        with pytest.raises(EngineError, match="int32 of shape"):
            ex.expand(np.zeros((1, 2), dtype=np.int32))
        with pytest.raises(EngineError, match="contiguous int32 tensor"):
            ex.expand(torch.zeros((1, 1), dtype=torch.int32), torch.zeros((1, 5), dtype=torch.int32))
        with pytest.raises(EngineError, match="do not fit"):
            ex.mask_logits(torch.zeros((2, 4)), torch.zeros((2, 1), dtype=torch.int32))
    with pytest.raises(EngineError, match="CPU only"):
        TorchMaskExpander(tc, 3, device="meta", backend="numpy")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(("width", "classes"), [(1, 1), (33, 2), (1000, 33), (4099, 300)])
def test_torch_expander_equals_numpy(torch: Any, backend: str, width: int, classes: int) -> None:
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


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_torch_cpu_mask_logits_every_float_type(torch: Any, dtype: str) -> None:
    """CPU tensors of any float type, bfloat16 included (numpy has no bfloat16)."""
    from formalgram_cfgzip.expand import TorchMaskExpander

    rng = np.random.default_rng(7)
    width, classes = 999, 30
    tc = random_case(rng, width, classes, 1.0, 0.05)
    ex = TorchMaskExpander(tc, classes)
    cm = random_class_mask(rng, 2, classes, 0.5)
    bits = np.unpackbits(oracle(tc, cm, classes).view(np.uint8), axis=1, bitorder="little")[:, :width]
    logits = torch.randn(2, width + 5, dtype=getattr(torch, dtype))
    before = logits.clone()
    ex.mask_logits(logits, torch.from_numpy(cm))
    assert np.array_equal(torch.isneginf(logits[:, :width]).numpy(), bits == 0)
    assert torch.isneginf(logits[:, width:]).all()
    kept = torch.from_numpy(bits == 1)
    assert torch.equal(logits[:, :width][kept], before[:, :width][kept])
    with pytest.raises(EngineError, match="float tensor"):
        ex.mask_logits(torch.zeros(2, width, dtype=torch.int32), torch.from_numpy(cm))


def test_apply_matches_xgrammar(torch: Any) -> None:
    xgr = pytest.importorskip("xgrammar")
    from formalgram_cfgzip.expand import apply_token_bitmask_inplace

    rng = np.random.default_rng(5)
    bm = torch.from_numpy(rng.integers(-(2**31), 2**31, (4, 5)).astype(np.int32))
    a = torch.randn(4, 150)
    b = a.clone()
    apply_token_bitmask_inplace(a, bm)
    xgr.apply_token_bitmask_inplace(b, bm, vocab_size=150)
    assert torch.equal(torch.isneginf(a), torch.isneginf(b))


def test_gpu_check_without_cuda_exits_cleanly(
    torch: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/gpu_check.py runs on a CUDA machine; without CUDA (made so on a CUDA machine
    too) it must exit 0 with a message."""
    import importlib.util
    from pathlib import Path

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    script = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick"]) == 0
    assert "CUDA is not available" in capsys.readouterr().out


def test_torch_expander_reuses_a_given_cpu_expander(torch: Any) -> None:
    from formalgram_cfgzip.expand import TorchMaskExpander

    tc = np.array([0, 1, 1, 2, -1, 0], dtype=np.int64)
    cpu = MaskExpander(tc, 3)
    ex = TorchMaskExpander(tc, 3, cpu_expander=cpu)
    rows = np.array([[0b101], [0b010]], dtype=np.int32)
    assert np.array_equal(ex.expand(torch.from_numpy(rows)).numpy(), expand_reference(tc, rows, 6))
    assert cpu.cache_stats["misses"] == 2  # the rows went through the given expander
    with pytest.raises(EngineError, match="cpu_expander expands 3 classes to 6 logits"):
        TorchMaskExpander(np.zeros(7, dtype=np.int64), 3, cpu_expander=cpu)
