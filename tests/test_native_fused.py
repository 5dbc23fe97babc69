"""The native engine's fused fill and expansion (``State.fill_token``: the class mask, from the
state's memo of its last fill when the stack's tops are the same, expanded through the compiled
grammar's C expansion kernel in one call) against XGrammar's own full-vocabulary masks, on real
grammars with the Llama-3 vocabulary: random walks with rollbacks, compactions and resets, rows
of a batch bitmask; and the fallbacks to the shared path, with its typed errors.

Needs both C kernels (the compiled install); skipped otherwise, where the shared path that
``tests/test_native_engine.py`` covers is the only one.
"""

from __future__ import annotations

import random
import weakref
from typing import Any

import numpy as np
import pytest
from _data import GRAMMARS, JSON_SCHEMAS
from _native_helpers import sample_vocab

from formalgram.syntax.lark import parse_lark
from formalgram_cfgzip import Vocabulary, compress
from formalgram_cfgzip.engines import compile_full, compile_grammar
from formalgram_cfgzip.engines.native.matcher import NativeCompiled, c_module
from formalgram_cfgzip.engines.native.prewarm import reachable_class_rows, remember_prefixes
from formalgram_cfgzip.errors import BatchIndexError, EngineError
from formalgram_cfgzip.expand import MaskExpander
from formalgram_cfgzip.expand._c_kernel import load_c_module

pytest.importorskip("xgrammar")
pytestmark = pytest.mark.skipif(
    c_module() is None or load_c_module() is None, reason="the C kernels are not built (pure-Python install)"
)

CASES = ["json_schemas/invoice.gbnf", "syncode/c_grammar.lark"]


def grammar_text(rel: str) -> str:
    text = (GRAMMARS / rel).read_text(encoding="utf-8")
    if rel.endswith(".lark"):
        return "root ::= start\n" + parse_lark(text, start="start").to_gbnf()
    return text


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.builtin("llama3")


@pytest.fixture(scope="module", params=CASES)
def compiled(request: pytest.FixtureRequest, vocab: Vocabulary) -> tuple[NativeCompiled, Any]:
    text = grammar_text(request.param)
    native = compile_grammar(compress(text, vocab, domains=True, progress=False), text, engine="native")
    assert isinstance(native, NativeCompiled)
    return native, compile_full(vocab, text)


def allowed(bm: np.ndarray[Any, Any], width: int, stops: list[int]) -> list[int]:
    bits = np.unpackbits(bm.view(np.uint8), bitorder="little")[:width].astype(bool)
    bits[stops] = False
    return np.flatnonzero(bits).tolist()


def walk_against_xgrammar(
    native: NativeCompiled, full: Any, seed: int, steps: int, max_back: int, *, update: bool = False
) -> dict[str, int]:
    """A random walk of the fused native matcher and XGrammar's full-vocabulary matcher in
    lockstep, rolling back up to ``max_back`` tokens now and then and resetting once; every
    mask is compared (in row 1 of a 3-row bitmask, the other rows untouched; with ``update``,
    one row brought up to date in place instead).  Returns the native state's ``info()``."""
    rng = random.Random(seed)
    stops = sorted(native.vocab.stop_ids)
    m, x = native.matcher(), full.matcher()
    assert "fill_next_token_bitmask" in vars(m)  # the fused C entry is the one under test
    history: list[int] = []
    kept = native.allocate_token_bitmask(1)
    for step in range(steps):
        want = full.allocate_token_bitmask(1)
        x.fill_next_token_bitmask(want, 0)
        if update:
            m.update_next_token_bitmask(kept, 0)
            assert np.array_equal(kept[0], want[0]), (seed, step, history[-5:])
        else:
            got = np.full((3, native.token_words), 7, dtype=np.int32)
            m.fill_next_token_bitmask(got, 1)
            assert np.array_equal(got[1], want[0]), (seed, step, history[-5:])
            assert (got[0] == 7).all() and (got[2] == 7).all()
        if step == steps // 2:
            m.reset()
            x.reset()
            history.clear()
            continue
        undoable = min(max_back, len(history), len(m._history))  # a compaction forgets tokens
        if undoable and rng.random() < 0.2:
            k = rng.randint(1, undoable)
            m.rollback(k)
            x.rollback(k)
            del history[-k:]
            continue
        options = allowed(want[0], native.logit_width, stops)
        if not options:
            break
        tok = rng.choice(options)
        assert m.accept_token(tok) and x.accept_token(tok)
        history.append(tok)
    return m._state.info()


def test_fused_masks_equal_xgrammar_under_rollback(compiled: tuple[NativeCompiled, Any]) -> None:
    native, full = compiled
    hits = sum(walk_against_xgrammar(native, full, seed, 80, 4)["memo_hits"] for seed in range(3))
    assert hits > 0  # the memo answered some fills (repeated states: inside names and strings)


def test_fused_masks_equal_xgrammar_with_compactions(compiled: tuple[NativeCompiled, Any]) -> None:
    """``max_rollback_tokens=2``: compactions renumber the stack's nodes every few tokens; the
    memo must forget its key then."""
    native, full = compiled
    bounded = NativeCompiled(native.classes, native.tables, max_rollback_tokens=2)  # type: ignore[arg-type]
    for seed in range(3, 5):
        walk_against_xgrammar(bounded, full, seed, 80, 2)


def test_fused_rows_equal_the_shared_path_and_class_fills(compiled: tuple[NativeCompiled, Any]) -> None:
    """The fused row is the shared path's row (class fill, then the expander), and the class
    fill after a memo answer is the walk's (a second grammar with its own kernel state)."""
    native, _ = compiled
    other = NativeCompiled(native.classes, native.tables)  # type: ignore[arg-type]
    rng = random.Random(9)
    m, o = native.matcher(), other.matcher()
    stops = sorted(native.vocab.stop_ids)
    for _ in range(40):
        fused = native.allocate_token_bitmask(1)
        m.fill_next_token_bitmask(fused, 0)
        cm = other.allocate_class_bitmask(1)
        o.fill_next_class_bitmask(cm, 0)
        cm2 = native.allocate_class_bitmask(1)
        m.fill_next_class_bitmask(cm2, 0)  # after the fused fill: from the memo
        assert np.array_equal(cm, cm2)
        shared = other.expander.expand(cm)  # type: ignore[union-attr]
        assert np.array_equal(fused, shared)
        options = allowed(fused[0], native.logit_width, stops)
        if not options:
            break
        tok = rng.choice(options)
        assert m.accept_token(tok) and o.accept_token(tok)


def test_fused_path_falls_back_with_the_typed_errors(compiled: tuple[NativeCompiled, Any]) -> None:
    native, _ = compiled
    m = native.matcher()
    want = native.allocate_token_bitmask(1)
    m.fill_next_token_bitmask(want, 0)
    fortran = np.asfortranarray(np.zeros((2, native.token_words), dtype=np.int32))
    with pytest.raises(EngineError, match="C-contiguous"):
        m.fill_next_token_bitmask(fortran, 0)
    frozen = native.allocate_token_bitmask(1)
    frozen.flags.writeable = False
    with pytest.raises(EngineError, match="read-only"):
        m.fill_next_token_bitmask(frozen, 0)
    with pytest.raises(BatchIndexError):
        m.fill_next_token_bitmask(native.allocate_token_bitmask(2), 2)
    with pytest.raises(EngineError, match="int32 words per row"):
        m.fill_next_token_bitmask(np.zeros((1, native.token_words + 1), dtype=np.int32), 0)
    one_d = np.zeros(native.token_words, dtype=np.int32)  # a 1-D row: the shared path
    m.fill_next_token_bitmask(one_d)
    assert np.array_equal(one_d, want[0])
    by_name = native.allocate_token_bitmask(2)  # keywords: the shared path
    m.fill_next_token_bitmask(bitmask=by_name, index=1)
    assert np.array_equal(by_name[1], want[0]) and not by_name[0].any()
    with pytest.raises(BatchIndexError):
        m.fill_next_token_bitmask(native.allocate_token_bitmask(), index=1)
    with pytest.raises(TypeError):
        m.fill_next_token_bitmask()  # type: ignore[call-arg]
    index = np.int64(0)  # a numpy index: the shared path
    got = native.allocate_token_bitmask(1)
    m.fill_next_token_bitmask(got, index)  # type: ignore[arg-type]
    assert np.array_equal(got, want)
    torch = pytest.importorskip("torch")
    tensor = torch.zeros((1, native.token_words), dtype=torch.int32)
    m.fill_next_token_bitmask(tensor, 0)
    assert np.array_equal(tensor.numpy(), want)


def test_bound_entries_equal_fill_token_and_check_their_arguments(
    compiled: tuple[NativeCompiled, Any],
) -> None:
    """A matcher's fill methods are its state's ``fill_bound`` / ``update_bound`` (``bind`` keeps
    the kernel and the shared path): the same rows as ``fill_token`` called with them, typed
    errors for a state never bound and for bad ``bind`` arguments, and a matcher dropped is freed
    at once (the state holds the shared path, which holds the matcher weakly: no cycle)."""
    native, _ = compiled
    module = c_module()
    m = native.matcher()
    assert m.fill_next_token_bitmask == m._state.fill_bound  # type: ignore[attr-defined]
    assert m.update_next_token_bitmask == m._state.update_bound  # type: ignore[attr-defined]
    assert native.expander is not None
    kernel = native.expander.c_kernel
    calls: list[int] = []
    plain = module.State(native._ctables)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="not bound"):
        plain.fill_bound(native.allocate_token_bitmask(1), 0)
    with pytest.raises(TypeError, match="Kernel"):
        plain.bind(object(), lambda bm, i: None)
    with pytest.raises(TypeError, match="callable"):
        plain.bind(kernel, None)
    with pytest.raises(TypeError):
        plain.bind(kernel)
    plain.bind(kernel, lambda bm, i: calls.append(i))
    rng = random.Random(2)
    for _ in range(12):
        a, b, c = (native.allocate_token_bitmask(2) for _ in range(3))
        plain.fill_bound(a, 1)
        plain.fill_token(kernel, lambda bm, i: calls.append(i), b, 1)
        m.fill_next_token_bitmask(c, 1)
        assert np.array_equal(a, b) and np.array_equal(a, c) and not a[0].any()
        plain.update_bound(a, 1)
        assert np.array_equal(a, b)
        plain.fill_bound(a, 5)  # out of range: the bound fallback takes it
        with pytest.raises(TypeError):
            plain.fill_bound(a, 0, 1, 2)  # more arguments than a fill takes: the fallback's error
        text = allowed(a[1], native.logit_width, sorted(native.vocab.stop_ids))
        if not text:
            break
        tok = rng.choice(text)
        assert m.accept_token(tok)
        cls = native.engine_id(tok)
        assert plain.accept_class(native.engine_tokens[cls], cls)
    assert calls == [5] * len(calls) and calls
    ref = weakref.ref(m)
    del m
    assert ref() is None


@pytest.mark.parametrize("admission", ["always", "costly"])
def test_memo_hint_never_names_an_evicted_row(compiled: tuple[NativeCompiled, Any], admission: str) -> None:
    """A one-row cache: matcher A walks, matcher B stays at the start, and they take turns, so
    between two fills of one state of A the other evicts its row; a memo answer's hint must
    then not copy B's row.  With every row admitted, and with the rows cheap to compute left
    out of the cache (a hint that names no row)."""
    native, full = compiled
    tight = NativeCompiled(native.classes, native.tables)  # type: ignore[arg-type]
    tight.expander = MaskExpander(
        native.classes.token_class,
        native.engine_size,
        cache_bytes=20_000,
        cache_admission=admission,  # type: ignore[arg-type]
    )
    assert tight.expander.cache_stats["capacity"] == 1
    rng = random.Random(4)
    stops = sorted(native.vocab.stop_ids)
    a, xa = tight.matcher(), full.matcher()
    b, xb = tight.matcher(), full.matcher()
    differ = 0
    for step in range(40):
        rows = []
        for m, x in ((a, xa), (b, xb)):
            got, want = tight.allocate_token_bitmask(1), full.allocate_token_bitmask(1)
            m.fill_next_token_bitmask(got, 0)
            x.fill_next_token_bitmask(want, 0)
            assert np.array_equal(got, want), step
            rows.append(want)
        differ += not np.array_equal(rows[0], rows[1])
        if step % 3 == 0:  # A stays in a state for two turns out of three: memo answers
            options = allowed(rows[0][0], native.logit_width, stops)
            if options:
                tok = rng.choice(options)
                assert a.accept_token(tok) and xa.accept_token(tok)
    stats = tight.expander.cache_stats
    assert differ > 10 and (stats["not_cached"] > 0) == (admission == "costly")
    if admission == "always":
        assert stats["evictions"] > 10


def test_every_plan_on_real_rows_equals_xgrammar(compiled: tuple[NativeCompiled, Any]) -> None:
    """The C expansion kernel on the class rows of a real walk: every forced plan, both ways of
    combining the dense classes' rows, and the patch of the previous step's row give XGrammar's
    own full-vocabulary mask of that step."""
    native, full = compiled
    kernel: Any = native.expander.c_kernel  # type: ignore[union-attr]
    rng = random.Random(11)
    stops = sorted(native.vocab.stop_ids)
    m, x = native.matcher(), full.matcher()
    prev: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None
    for step in range(50):
        cm = native.allocate_class_bitmask(1)
        m.fill_next_class_bitmask(cm, 0)
        want = full.allocate_token_bitmask(1)
        x.fill_next_token_bitmask(want, 0)
        for plan in (-1, 0, 1, 2, 3, 5):
            for big in (-1, 0, 1) if plan in (1, 2, 3, 5) else (-1,):
                out = np.full(native.token_words, -1, dtype=np.int32)
                kernel.expand(cm[0], out, None, None, plan, big)
                assert np.array_equal(out, want[0]), (step, plan, big)
        if prev is not None:
            out = np.full(native.token_words, -1, dtype=np.int32)
            assert kernel.expand(cm[0], out, prev[1], prev[0], 4) == 4
            assert np.array_equal(out, want[0]), (step, "delta")
        prev = (cm[0].copy(), want[0].copy())
        options = allowed(want[0], native.logit_width, stops)
        if not options:
            break
        tok = rng.choice(options)
        assert m.accept_token(tok) and x.accept_token(tok)


def test_misses_patched_from_kept_sets_equal_xgrammar(vocab: Vocabulary) -> None:
    """A schema whose string fields make class masks of one large class set of the domain
    automaton plus a few classes: the compiled grammar's expander keeps those sets' rows, and
    with the row cache emptied before every fill each miss is built afresh or patched from a
    kept set, in the fused fill and the fused update alike; every row is XGrammar's own mask."""
    import json

    from formalgram_cfgzip.json_schema import from_json_schema

    schema = json.loads((JSON_SCHEMAS / "calendar_event.json").read_text(encoding="utf-8"))
    text = from_json_schema(schema)
    native = compile_grammar(compress(text, vocab, domains=True, progress=False), text, engine="native")
    assert isinstance(native, NativeCompiled)
    full = compile_full(vocab, text)
    ex = native.expander
    assert ex is not None and ex.num_kept_sets > 0
    rng = random.Random(4)
    stops = sorted(vocab.stop_ids)
    patched = 0
    for _ in range(3):
        m, x = native.matcher(), full.matcher()
        kept_row = native.allocate_token_bitmask(1)  # the update's own row, across steps
        for _ in range(60):
            patched += ex.cache_stats["set_deltas"]
            ex.clear_cache()
            got = native.allocate_token_bitmask(1)
            m.fill_next_token_bitmask(got, 0)
            want = full.allocate_token_bitmask(1)
            x.fill_next_token_bitmask(want, 0)
            assert np.array_equal(got, want)
            m.update_next_token_bitmask(kept_row, 0)
            assert np.array_equal(kept_row, want)
            options = allowed(want[0], native.logit_width, stops)
            if not options:
                break
            # not whitespace (any amount is allowed between tokens): names, then string content,
            # where the masks hold the large sets
            sample = rng.sample(options, min(16, len(options)))
            tok = next((t for t in sample if (vocab.token_bytes(t) or b" ").strip()), sample[0])
            assert m.accept_token(tok) and x.accept_token(tok)
    assert patched > 0


def test_prewarmed_rows_equal_xgrammar_from_a_cold_cache(compiled: tuple[NativeCompiled, Any]) -> None:
    """A grammar whose first class masks are pinned (``prewarm``): fills and in-place updates
    equal XGrammar's masks, walk after walk with the row cache emptied before each; the
    pinned rows answer the start of every walk (hits with no row cached), and the start's
    class mask is the first one the exploration met."""
    native, full = compiled
    warm = NativeCompiled(native.classes, native.tables)  # type: ignore[arg-type]
    pinned = warm.prewarm(max_rows=64, min_cost_ns=0.0)
    ex = warm.expander
    assert ex is not None and 1 <= pinned <= 64 and ex.num_pinned_rows == pinned
    start = warm.allocate_class_bitmask(1)
    warm.matcher().fill_next_class_bitmask(start, 0)
    assert np.array_equal(reachable_class_rows(warm, max_rows=1)[0], start[0])
    stops = sorted(native.vocab.stop_ids)
    for seed in range(3):
        ex.clear_cache()
        rng = random.Random(seed)
        m, x = warm.matcher(), full.matcher()
        row = warm.allocate_token_bitmask(1)
        for step in range(40):
            want = full.allocate_token_bitmask(1)
            x.fill_next_token_bitmask(want, 0)
            if step % 3 == 2:
                fresh = warm.allocate_token_bitmask(1)
                m.fill_next_token_bitmask(fresh, 0)
                assert np.array_equal(fresh[0], want[0]), (seed, step)
            m.update_next_token_bitmask(row, 0)
            assert np.array_equal(row[0], want[0]), (seed, step)
            if step == 0:  # nothing cached: the start's row came from the pinned rows
                info = ex.cache_stats
                assert info["hits"] == 1 and info["misses"] == 0
            options = allowed(want[0], native.logit_width, stops)
            if not options:
                break
            tok = rng.choice(options)
            assert m.accept_token(tok) and x.accept_token(tok)


def test_reachable_class_rows_bounds_and_errors(compiled: tuple[NativeCompiled, Any]) -> None:
    """Distinct class masks, the start's first, within max_rows; a spent time budget leaves
    the start's mask only; bad bounds are typed errors."""
    native, _ = compiled
    rows = reachable_class_rows(native, max_rows=12)
    assert 1 <= rows.shape[0] <= 12 and rows.shape[1] == native.engine_words and rows.dtype == np.int32
    assert len({r.tobytes() for r in rows}) == rows.shape[0]
    assert reachable_class_rows(native, max_seconds=0.0).shape[0] == 1
    for bad in ({"max_rows": 0}, {"max_rows": True}, {"max_seconds": -1.0}, {"max_seconds": float("inf")}):
        with pytest.raises(EngineError):
            reachable_class_rows(native, **bad)  # type: ignore[arg-type]


def test_prefix_memo_masks_equal_xgrammar(compiled: tuple[NativeCompiled, Any]) -> None:
    """A grammar whose first paths of token classes are in the prefix memo
    (``remember_prefixes``): fills, in-place updates, rollbacks, a reset and, with
    ``max_rollback_tokens=2``, compactions every few tokens give XGrammar's masks; the memo
    answers the fills of states on its paths (more than the start's) and walks the rest."""
    native, full = compiled
    for keep, seeds in ((None, (0, 1)), (2, (2, 3))):
        memo = NativeCompiled(native.classes, native.tables, max_rollback_tokens=keep)  # type: ignore[arg-type]
        stored, rows = remember_prefixes(memo, max_prefixes=200)
        assert stored == 200 and 1 <= rows.shape[0] <= 200
        for seed in seeds:
            for update in (False, True):
                info = walk_against_xgrammar(memo, full, seed, 60, 3, update=update)
                assert info["prefixes"] == 200
                assert info["prefix_hits"] >= 3, (keep, seed, update)  # the start's, twice, and more


def test_prefix_memo_is_shared_extended_and_left_by_raw_bytes(compiled: tuple[NativeCompiled, Any]) -> None:
    """The memo belongs to the grammar's tables: a matcher made before it was stored follows
    it, a second call extends it, each stored mask is the walk's (a grammar without a memo),
    a token read as raw bytes (no class known) leaves it; bad bounds are typed errors, and the
    pure-Python kernel keeps none."""
    native, _ = compiled
    memo = NativeCompiled(native.classes, native.tables)  # type: ignore[arg-type]
    plain = NativeCompiled(native.classes, native.tables)  # type: ignore[arg-type]
    early = memo.matcher()
    assert remember_prefixes(memo, max_prefixes=1)[0] == 1  # the start only
    stored, rows = remember_prefixes(memo, max_prefixes=40)
    assert stored == 40 and rows.shape[1] == memo.engine_words
    assert len({r.tobytes() for r in rows}) == rows.shape[0]
    # every path's stored mask against the walk of a matcher of the grammar without a memo
    n, stop = memo.engine_size, memo.stop_class
    cm, ref = memo.allocate_class_bitmask(1), plain.allocate_class_bitmask(1)
    early.fill_next_class_bitmask(cm, 0)
    start_cls = [
        c for c in np.flatnonzero(np.unpackbits(cm[0].view(np.uint8), bitorder="little")[:n]) if c != stop
    ]
    checked = 0
    for c in start_cls[:12]:
        m, p = memo.matcher(), plain.matcher()
        if not (m._accept_engine_id(int(c)) and p._accept_engine_id(int(c))):
            continue
        m.fill_next_class_bitmask(cm, 0)
        p.fill_next_class_bitmask(ref, 0)
        assert np.array_equal(cm, ref), c
        assert p._state.info()["prefix_hits"] == 0
        checked += m._state.info()["prefix_hits"]
    assert checked >= 1
    # the start's mask came from the memo for the matcher made before it, too
    assert early._state.info()["prefix_hits"] == 1
    # raw bytes: the same state, walked
    m = memo.matcher()
    assert m._state.accept_bytes(memo.engine_tokens[int(start_cls[0])])
    m.fill_next_class_bitmask(cm, 0)
    assert m._state.info()["prefix_hits"] == 0
    for bad in ({"max_prefixes": 0}, {"max_prefixes": 2.5}, {"max_seconds": float("nan")}):
        with pytest.raises(EngineError):
            remember_prefixes(memo, **bad)  # type: ignore[arg-type]
    pure = NativeCompiled(native.classes, native.tables, kernel="python")  # type: ignore[arg-type]
    stored, rows = remember_prefixes(pure)
    assert stored == 0 and rows.shape == (0, pure.engine_words)


def test_the_memo_answers_the_same_stacks_under_other_nodes() -> None:
    """lark's csv: each byte of a field makes a new node for the field's symbol on the same
    parents, so the tops' parents are other nodes after every token of a field, with the same
    stacks below them.  The state drops such copies among a node's parents and its memo compares
    the parents by symbol and parents, a few levels down: most fills are answered by the memo, and the masks stay
    XGrammar's through rollbacks (which must forget a memo whose key names nodes they free),
    resets and row updates; on a walk of its own, no list of 2 to 16 parents holds two copies after
    any token.  (4,000 Llama-3 tokens: XGrammar's own mask of this grammar over the
    whole vocabulary takes some 0.2 s.)"""
    vocab = sample_vocab(4000, seed=5)
    text = grammar_text("lark/csv.lark")
    native = compile_grammar(compress(text, vocab, domains=True, progress=False), text, engine="native")
    assert isinstance(native, NativeCompiled)
    full = compile_full(vocab, text)
    hits = 0
    for seed in range(6):
        hits += walk_against_xgrammar(native, full, seed, 80, 3, update=seed % 2 == 1)["memo_hits"]
    assert hits > 240, hits
    # token by token, no list of 2 to 16 parents holds two copies (one symbol, the same parents)
    rng = random.Random(7)
    stops = sorted(native.vocab.stop_ids)
    m = native.matcher()
    state = m._state
    bm = native.allocate_token_bitmask()
    for _ in range(80):
        m.fill_next_token_bitmask(bm)
        options = allowed(bm[0], native.logit_width, stops)
        if not options:
            break
        assert m.accept_token(rng.choice(options))
        for i in range(1, m.info()["nodes"]):
            parents = state.node(i)[1]
            if 2 <= len(parents) <= 16:
                heads = [state.node(p) for p in parents]
                assert len(set(heads)) == len(heads), (i, parents, heads)
