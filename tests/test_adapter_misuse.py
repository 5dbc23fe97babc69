"""The engine adapters under misuse: one typed error, the same for both engines (compressed
and full-vocabulary), and nothing changed by a refused call.

Each reproducer of a misuse found by fuzzing the adapters is a test here: read-only,
wrong-dtype and wrong-device buffers; rollbacks past the history or by a negative count;
a batch whose second token is invalid; non-integer indices, repeated rows and ``None``
among matchers; grammar text nested 1,000 deep; options of the wrong type or value.
The oracle of "nothing changed" is a fresh matcher fed the same tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _engine_oracle import mask_after
from _needs import engine_param, engine_params

from formalgram_cfgzip import engines
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines import llguidance as llg_engine
from formalgram_cfgzip.engines import xgrammar as xgr_engine
from formalgram_cfgzip.engines._xgrammar_guard import crash_cycle
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.errors import BatchIndexError, ClassesMismatchError, EngineError, TokenIdError
from formalgram_cfgzip.vocabulary import Vocabulary

GRAMMAR = 'root ::= "(" root ")" | "x" | "[" [a-c]* "]"'
TOKENS: list[bytes | None] = [b"(", b"((", b")", b"x", b"y", b"[", b"a", b"ab", b"]", None, b"</s>", b"(x"]
STOP = 10


def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, special_ids=[STOP], stop_ids=[STOP], logit_width=40, name="misuse")


_COMPILED: dict[tuple[str, bool], CompiledGrammar] = {}


def compiled(engine: str, compressed: bool) -> CompiledGrammar:
    key = (engine, compressed)
    if key not in _COMPILED:
        v = vocab()
        if compressed:
            _COMPILED[key] = engines.compile_grammar(
                compress(GRAMMAR, v, progress=False), GRAMMAR, engine=engine
            )
        else:
            _COMPILED[key] = engines.compile_full(v, GRAMMAR, engine=engine)
    return _COMPILED[key]


# the native engine works over classes only (it has no full-vocabulary form)
# each case skips (with a reason) where its engine's package is missing
CASES = [
    engine_param(e, c, id=f"{e}-{'compressed' if c else 'full'}")
    for e, c in [*((e, c) for e in ("xgrammar", "llguidance") for c in (True, False)), ("native", True)]
]


# -- buffers ----------------------------------------------------------------------------
@pytest.mark.parametrize(("engine", "compressed"), CASES)
def test_read_only_buffers_are_refused(engine: str, compressed: bool) -> None:
    c = compiled(engine, compressed)
    m = c.matcher()
    for words, fill in (
        (c.token_words, m.fill_next_token_bitmask),
        (c.engine_words, m.fill_next_class_bitmask),
    ):
        ro = np.frombuffer(bytes(4 * words), dtype=np.int32).reshape(1, words)
        assert not ro.flags.writeable
        with pytest.raises(EngineError, match="read-only"):
            fill(ro)
        frozen = np.zeros((2, words), dtype=np.int32)
        frozen.flags.writeable = False
        with pytest.raises(EngineError, match="read-only"):
            fill(frozen, 1)
    ro_batch = np.frombuffer(bytes(8 * c.token_words), dtype=np.int32).reshape(2, c.token_words)
    with pytest.raises(EngineError, match="read-only"):
        c.fill_next_token_bitmask_batch([m, c.matcher()], ro_batch)
    ro_class = np.frombuffer(bytes(4 * c.engine_words), dtype=np.int32).reshape(1, c.engine_words)
    with pytest.raises(EngineError, match="read-only"):
        c.fill_next_class_bitmask_batch([m], ro_class)


@pytest.mark.parametrize(("engine", "compressed"), CASES)
def test_row_updates_refuse_what_fills_refuse_and_keep_the_mask(engine: str, compressed: bool) -> None:
    """``update_next_token_bitmask``: the fill's typed errors, and at every step of a walk
    (through a rollback, a reset and the stop token) the kept row holds a fresh matcher's mask,
    whichever other rows of the array other matchers write."""
    c = compiled(engine, compressed)
    m = c.matcher()
    ro = np.frombuffer(bytes(4 * c.token_words), dtype=np.int32).reshape(1, c.token_words)
    with pytest.raises(EngineError, match="read-only"):
        m.update_next_token_bitmask(ro)
    rows = c.allocate_token_bitmask(2)
    with pytest.raises(BatchIndexError):
        m.update_next_token_bitmask(rows, 2)
    with pytest.raises(EngineError):
        m.update_next_token_bitmask(np.zeros((1, c.token_words), dtype=np.int64))
    other = c.matcher()
    walk: list[int] = []
    for step in [0, 0, 3, 2, -1, 2, "reset", 5, 6, 7, 8, STOP]:
        if step == "reset":
            m.reset()
            walk = []
        elif step == -1:
            m.rollback(1)
            walk.pop()
        else:
            assert isinstance(step, int) and m.accept_token(step), (walk, step)
            walk.append(step)
        other.fill_next_token_bitmask(rows, 1)  # another matcher's row of the same array
        m.update_next_token_bitmask(rows, 0)
        want = mask_after(c, walk) if not m.is_terminated() else np.zeros((1, c.token_words), np.int32)
        assert np.array_equal(rows[:1], want), (walk, engine, compressed)


@pytest.mark.parametrize(("engine", "compressed"), CASES)
def test_wrong_dtype_and_device_are_refused(engine: str, compressed: bool) -> None:
    torch = pytest.importorskip("torch")
    c = compiled(engine, compressed)
    m = c.matcher()
    for dtype in (np.int64, np.uint32, np.float32, ">i4"):
        with pytest.raises(EngineError, match="int32"):
            m.fill_next_token_bitmask(np.zeros((1, c.token_words), dtype=dtype))
        with pytest.raises(EngineError, match="int32"):
            c.fill_next_token_bitmask_batch([m], np.zeros((1, c.token_words), dtype=dtype))
    with pytest.raises(EngineError, match="int32"):
        m.fill_next_token_bitmask(torch.zeros((1, c.token_words), dtype=torch.int64))
    with pytest.raises(EngineError, match="CPU"):
        m.fill_next_token_bitmask(torch.zeros((1, c.token_words), dtype=torch.int32, device="meta"))
    with pytest.raises(EngineError, match="CPU"):
        m.fill_next_class_bitmask(torch.zeros((1, c.engine_words), dtype=torch.int32, device="meta"))
    if torch.cuda.is_available():
        with pytest.raises(EngineError, match="CPU"):
            m.fill_next_token_bitmask(torch.zeros((1, c.token_words), dtype=torch.int32, device="cuda"))
    with pytest.raises(EngineError, match="numpy array"):
        m.fill_next_token_bitmask([[0] * c.token_words])


# -- rollback ---------------------------------------------------------------------------
@pytest.mark.parametrize(("engine", "compressed"), CASES)
def test_rollback_is_checked_the_same_way(engine: str, compressed: bool) -> None:
    c = compiled(engine, compressed)
    m = c.matcher()
    assert m.accept_token(0) and m.accept_token(3)  # "(" "x"
    want = mask_after(c, [0, 3])
    for bad in (3, 10, -1, -5):
        with pytest.raises(EngineError, match="cannot roll back"):
            m.rollback(bad)
    for bad_type in (1.0, np.float64(1), True, None, "1"):
        with pytest.raises(EngineError, match="integer"):
            m.rollback(bad_type)  # type: ignore[arg-type]
    got = c.allocate_token_bitmask(1)
    m.fill_next_token_bitmask(got)
    assert np.array_equal(got, want)  # the refused rollbacks changed nothing
    m.rollback(0)
    m.rollback(np.int64(1))
    m.fill_next_token_bitmask(got)
    assert np.array_equal(got, mask_after(c, [0]))
    m.rollback(1)
    with pytest.raises(EngineError, match="0 accepted"):
        m.rollback(1)
    # a refused token is not history; the stop token is, and can be rolled back
    assert not m.accept_token(2) and m.accept_token(3) and m.accept_token(STOP) and m.is_terminated()
    m.rollback(2)
    assert not m.is_terminated()
    with pytest.raises(EngineError):
        m.rollback(1)
    m.accept_token(0)
    m.reset()
    with pytest.raises(EngineError):
        m.rollback(1)  # reset forgets the history


# -- batches ----------------------------------------------------------------------------
@pytest.mark.xgrammar  # the other engine's matchers are passed in
@pytest.mark.llguidance
@pytest.mark.parametrize(("engine", "compressed"), CASES)
def test_accept_token_batch_checks_the_whole_batch_first(engine: str, compressed: bool) -> None:
    c = compiled(engine, compressed)
    m1, m2 = c.matcher(), c.matcher()
    start = mask_after(c, [])
    for bad in (-7, c.logit_width, 2.0, None):
        with pytest.raises(TokenIdError):
            c.accept_token_batch([m1, m2], [0, bad])  # type: ignore[list-item]
    with pytest.raises(EngineError, match="entry 1"):
        c.accept_token_batch([m1, None], [0, 0])  # type: ignore[list-item]
    other = compiled("llguidance" if engine == "xgrammar" else "xgrammar", compressed)
    with pytest.raises(EngineError, match="entry 1"):
        c.accept_token_batch([m1, other.matcher()], [0, 0])
    with pytest.raises(EngineError, match="2 matchers but 1 tokens"):
        c.accept_token_batch([m1, m2], [0])
    for m in (m1, m2):  # no refused call moved a matcher
        got = c.allocate_token_bitmask(1)
        m.fill_next_token_bitmask(got)
        assert np.array_equal(got, start)
    # the normal path: per matcher the answer of a single accept, and the state it leaves
    assert c.accept_token_batch([m1, m2], [0, 2]) == [True, False]
    assert c.accept_token_batch([m1, m2], [np.int64(3), 3]) == [True, True]
    for m, tokens in ((m1, [0, 3]), (m2, [3])):
        got = c.allocate_token_bitmask(1)
        m.fill_next_token_bitmask(got)
        assert np.array_equal(got, mask_after(c, tokens))


@pytest.mark.parametrize(("engine", "compressed"), CASES)
def test_index_arguments_are_integers(engine: str, compressed: bool) -> None:
    c = compiled(engine, compressed)
    m1, m2 = c.matcher(), c.matcher()
    bm = c.allocate_token_bitmask(2)
    cm = c.allocate_class_bitmask(2)
    for bad in (np.float64(0), 0.0, 1.5, True, None, "0"):
        with pytest.raises(BatchIndexError, match="integer"):
            m1.fill_next_token_bitmask(bm, bad)  # type: ignore[arg-type]
        with pytest.raises(BatchIndexError, match="integer"):
            m1.fill_next_class_bitmask(cm, bad)  # type: ignore[arg-type]
    for bad_rows in ([0.5, 1], [np.float64(0), 1], [0, None]):
        with pytest.raises(BatchIndexError, match="integer"):
            c.fill_next_token_bitmask_batch([m1, m2], bm, bad_rows)  # type: ignore[arg-type]
        with pytest.raises(BatchIndexError, match="integer"):
            c.fill_next_class_bitmask_batch([m1, m2], cm, bad_rows)  # type: ignore[arg-type]
    with pytest.raises(BatchIndexError, match="twice"):
        c.fill_next_token_bitmask_batch([m1, m2], bm, [1, 1])
    with pytest.raises(EngineError, match="entry 1 of the batch is None"):
        c.fill_next_token_bitmask_batch([m1, None], bm)  # type: ignore[list-item]
    with pytest.raises(EngineError, match="entry 0 of the batch is None"):
        c.fill_next_class_bitmask_batch([None], cm)  # type: ignore[list-item]
    assert not bm.any() and not cm.any()  # nothing was written by the refused calls
    # numpy integers are indices like ints
    m1.fill_next_token_bitmask(bm, np.int64(1))
    assert np.array_equal(bm[1:], mask_after(c, [])) and not bm[0].any()
    c.fill_next_token_bitmask_batch([m1, m2], bm, np.array([1, 0]))
    assert np.array_equal(bm, np.vstack([mask_after(c, [])] * 2))


# -- compilation ------------------------------------------------------------------------
@pytest.mark.parametrize("engine", engine_params("xgrammar", "llguidance"))
def test_deeply_nested_text_is_a_typed_error(engine: str) -> None:
    """Text nested 1,000 deep (and 20,000 deep) ends in EngineError, not RecursionError
    from the crash guard or the engine's converter."""
    v = vocab()
    for depth in (1_000, 20_000):
        text = "root ::= " + "(" * depth + '"x"' + ")" * depth
        try:
            full = engines.compile_full(v, text, engine=engine)
        except EngineError:
            continue
        m = full.matcher()  # compiled: then it must mean what it says
        assert m.accept_token(3) and m.accept_token(STOP)


def test_crash_guard_reads_any_depth() -> None:
    deep = "root ::= " + "(" * 20_000 + "root{2}" + ")" * 20_000
    assert crash_cycle(deep) == ["root"]
    assert crash_cycle(deep + ")") is None  # unbalanced: not the crash shape
    assert crash_cycle("root ::= " + "(" * 20_000 + '"x"') is None


@pytest.mark.llguidance  # the XGrammar case passes llguidance's limits too
@pytest.mark.parametrize("engine", engine_params("xgrammar", "llguidance"))
def test_compile_options_are_typed(engine: str) -> None:
    v = vocab()
    classes = compress(GRAMMAR, v, progress=False)
    with pytest.raises(TypeError):
        engines.compile_grammar(classes, GRAMMAR, engine=engine, max_thread=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        engines.compile_full(v, GRAMMAR, engine=engine, check=False)  # type: ignore[call-arg]
    mod = xgr_engine if engine == "xgrammar" else llg_engine
    with pytest.raises(TypeError):
        mod.compile_grammar(classes, GRAMMAR, options={})  # type: ignore[call-arg]
    bad_values: list[dict[str, Any]] = [
        {"root": ""},
        {"root": 5},
        {"max_threads": 0},
        {"max_threads": 1.5},
        {"max_threads": True},
        {"check": "yes"},
        {"vocab": "llama3"},
    ]
    for kwargs in bad_values:
        with pytest.raises(EngineError):
            engines.compile_grammar(classes, GRAMMAR, engine=engine, **kwargs)
    with pytest.raises(EngineError, match="TokenClasses"):
        engines.compile_grammar(v, GRAMMAR, engine=engine)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="Vocabulary"):
        engines.compile_full(classes, GRAMMAR, engine=engine)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="str"):
        engines.compile_full(v, GRAMMAR.encode(), engine=engine)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="max_threads"):
        engines.compile_full(v, GRAMMAR, engine=engine, max_threads=-1)
    if engine == "xgrammar":
        import llguidance

        with pytest.raises(EngineError, match="llguidance engine only"):
            engines.compile_grammar(classes, GRAMMAR, engine=engine, limits=llguidance.LLParserLimits())
        with pytest.raises(EngineError, match="GBNF only"):
            engines.compile_full(v, GRAMMAR, engine=engine, syntax="lark")
    else:
        with pytest.raises(EngineError, match="syntax"):
            engines.compile_full(v, GRAMMAR, engine=engine, syntax="ebnf")  # type: ignore[arg-type]
        with pytest.raises(EngineError, match="LLParserLimits"):
            engines.compile_full(v, GRAMMAR, engine=engine, limits={"step_max_items": 5})  # type: ignore[arg-type]
    # the options reach the engine: a start rule other than root
    text = GRAMMAR + '\nother ::= "y"+'
    other = engines.compile_full(v, text, engine=engine, root="other", max_threads=2)
    m = other.matcher()
    assert not m.accept_token(3) and m.accept_token(4)


def test_unknown_engine_is_an_engine_error() -> None:
    v = vocab()
    classes = compress(GRAMMAR, v, progress=False)
    with pytest.raises(EngineError, match="unknown engine 'outlines'"):
        engines.compile_grammar(classes, GRAMMAR, engine="outlines")  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="choose one of xgrammar, llguidance"):
        engines.compile_full(v, GRAMMAR, engine="XGrammar")  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", engine_params("xgrammar", "llguidance"))
def test_check_false_skips_the_class_checks(engine: str) -> None:
    """``check=False`` compiles classes of another grammar (the caller vouches for them);
    ``check=True`` refuses them."""
    v = vocab()
    classes = compress(GRAMMAR, v, progress=False)
    other_text = GRAMMAR + "\n# the same language, another text\n"
    other = compress('root ::= "x"', v, progress=False)
    with pytest.raises(ClassesMismatchError, match="another grammar"):
        engines.compile_grammar(other, GRAMMAR, engine=engine)
    unchecked = engines.compile_grammar(other, GRAMMAR, engine=engine, check=False)
    assert unchecked.classes is other
    # with classes of this grammar, check=False gives the masks of the checked compile, and
    # both are the full-vocabulary engine's (the oracle)
    checked = engines.compile_grammar(classes, other_text, engine=engine)
    fast = engines.compile_grammar(classes, other_text, engine=engine, check=False)
    full = compiled(engine, compressed=False)
    for tokens in ([], [0], [0, 3], [5, 7]):
        want = mask_after(full, tokens)
        assert np.array_equal(mask_after(fast, tokens), want), tokens
        assert np.array_equal(mask_after(checked, tokens), want), tokens
