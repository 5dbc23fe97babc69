"""Differential lossless tests of the engine adapters (proof: proofs/engine_adapter.md).

The oracle is the engine itself run over the *full* vocabulary (``compile_full``): at every
step of seeded random walks the compressed adapter's expanded token bitmask must equal the
full engine's bitmask bit for bit, and both must accept / reject the same tokens.  The
classes come from (i) identity classes (every text token its own class), (ii) ``compress()``,
and (iii) deliberately *wrong* classes, which must be caught (the test can fail).
"""

from __future__ import annotations

import hashlib
import time
import warnings
from pathlib import Path
from typing import Any

import _data
import numpy as np
import numpy.typing as npt
import pytest
from _needs import engine_param, engine_params

from formalgram.errors import GrammarTooLarge, UnsupportedConstruct
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.engines import llguidance as llg_engine
from formalgram_cfgzip.engines import xgrammar as xgr_engine
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.errors import BatchIndexError, ClassesMismatchError, EngineError, TokenIdError
from formalgram_cfgzip.vocabulary import Vocabulary

ENGINES: dict[str, Any] = {"xgrammar": xgr_engine, "llguidance": llg_engine}
# each engine's cases skip (with a reason) where its package is missing; the other's still run
ENGINE_PARAMS = engine_params(*sorted(ENGINES))


# -- class builders ---------------------------------------------------------------------
def identity_classes(vocab: Vocabulary, grammar_text: str) -> TokenClasses:
    """Every non-empty text token its own class; stop tokens one class; the rest invalid."""
    tc = np.full(vocab.logit_width, -1, dtype=np.int32)
    reps: list[int] = []
    for i, t in enumerate(vocab.tokens):
        if t and i not in vocab.special_ids and i not in vocab.stop_ids:
            tc[i] = len(reps)
            reps.append(i)
    stop_class = -1
    if vocab.stop_ids:
        stop_class = len(reps)
        tc[sorted(vocab.stop_ids)] = stop_class
        reps.append(min(vocab.stop_ids))
    invalid_class = -1
    if (tc < 0).any():
        invalid_class = len(reps)
        tc[tc < 0] = invalid_class
        reps.append(-1)
    sha = hashlib.sha256(grammar_text.encode("utf-8")).hexdigest()
    return TokenClasses(tc, np.asarray(reps, dtype=np.int32), invalid_class, stop_class, vocab, sha)


def merge_classes(classes: TokenClasses, a: int, b: int) -> TokenClasses:
    """Wrong classes: class ``b`` merged into class ``a`` (ids renumbered)."""
    tc = classes.token_class.copy()
    tc[tc == b] = a
    tc[tc > b] -= 1
    reps = np.delete(classes.representatives, b)

    def fix(c: int) -> int:
        return a if c == b else (c - 1 if c > b else c)

    return TokenClasses(
        tc, reps, fix(classes.invalid_class), fix(classes.stop_class), classes.vocab, classes.grammar_sha256
    )


# -- the differential walk --------------------------------------------------------------
def allowed_ids(row: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.int64]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:width]
    return np.flatnonzero(bits)


def differential_walk(
    compressed: CompiledGrammar,
    full: CompiledGrammar,
    *,
    steps: int,
    seed: int,
    batch: int = 1,
    bias: str = "uniform",
    max_len: int = 40,
    notes: list[str] | None = None,
    seconds: float | None = None,
    min_steps: int = 10,
) -> list[str]:
    """Run ``batch`` random walks in lockstep; return a description of every mismatch.

    A walk whose *full-vocabulary* engine gave up (llguidance's parser item limit, hit
    e.g. after hundreds of single-byte whitespace lexemes) is restarted and noted in
    ``notes``: past that point the reference has no defined mask to compare with.
    With ``seconds``, the walks stop after that much time once ``min_steps`` steps are
    done (noted): the full-vocabulary reference can take ~0.5 s per row (XGrammar on the
    SMILES grammars), where 60 steps of a batch of 8 would take minutes per walk.
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    rng = np.random.default_rng(seed)
    vocab = full.vocab
    width = vocab.logit_width
    lengths = np.array([len(t) if t else 0 for t in vocab.tokens] + [0] * (width - vocab.size))
    stops = np.asarray(sorted(vocab.stop_ids), dtype=np.int64)
    mc = [compressed.matcher() for _ in range(batch)]
    mf = [full.matcher() for _ in range(batch)]
    depth = [0] * batch
    bc = compressed.allocate_token_bitmask(batch)
    bf = full.allocate_token_bitmask(batch)
    problems: list[str] = []
    for step in range(steps):
        if deadline is not None and step >= min_steps and time.monotonic() > deadline:
            if notes is not None:
                notes.append(f"walk shortened to {step} of {steps} steps (time budget {seconds} s)")
            break
        if batch == 1:
            mc[0].fill_next_token_bitmask(bc, 0)
            mf[0].fill_next_token_bitmask(bf, 0)
        else:
            order = [int(i) for i in rng.permutation(batch)]  # exercise the indices argument
            compressed.fill_next_token_bitmask_batch([mc[i] for i in order], bc, indices=order)
            full.fill_next_token_bitmask_batch(mf, bf)
        for b in range(batch):
            gave_up = mf[b].engine_error()
            if gave_up:
                if notes is not None:
                    notes.append(
                        f"step {step} row {b}: reference engine gave up: {gave_up.splitlines()[0][:100]}"
                    )
                mc[b], mf[b] = compressed.matcher(), full.matcher()  # an engine error is permanent
                depth[b] = 0
                continue
            if not np.array_equal(bc[b], bf[b]):
                diff = np.flatnonzero(np.unpackbits((bc[b] ^ bf[b]).view(np.uint8), bitorder="little"))
                problems.append(f"step {step} row {b}: {diff.size} tokens differ, e.g. {diff[:8].tolist()}")
                continue
            allowed = allowed_ids(bf[b], width)
            if allowed.size == 0 or mf[b].is_terminated() or depth[b] >= max_len:
                mc[b].reset()
                mf[b].reset()
                depth[b] = 0
                continue
            if bias == "stop" and stops.size and rng.random() < 0.5 and np.isin(stops, allowed).any():
                tok = int(rng.choice(stops[np.isin(stops, allowed)]))
            elif bias == "long" and rng.random() < 0.7:
                # long tokens; the very longest are whitespace runs of hundreds of bytes,
                # which only slow the engines down, so take the long half among <= 32 bytes
                la = lengths[allowed]
                pool = allowed[(la >= min(int(la.max()), 32) // 2) & (la <= 32)]
                tok = int(rng.choice(pool if pool.size else allowed))
            else:
                tok = int(rng.choice(allowed))
            # a token outside the mask: both adapters decide alike (engines may accept more
            # than their mask shows: XGrammar 0.2.9 does for tokens that close a recursive
            # rule), and an accepted one is undone
            other = int(rng.integers(width))
            if not (bf[b, other >> 5] >> (other & 31)) & 1:
                acc_c, acc_f = mc[b].accept_token(other), mf[b].accept_token(other)
                if acc_c != acc_f:
                    problems.append(
                        f"step {step} row {b}: token {other} outside the mask accepted {acc_c}/{acc_f}"
                    )
                for m, acc in ((mc[b], acc_c), (mf[b], acc_f)):
                    if acc:
                        m.rollback(1)
            ok_c, ok_f = mc[b].accept_token(tok), mf[b].accept_token(tok)
            if not (ok_c and ok_f):
                problems.append(f"step {step} row {b}: allowed token {tok} accepted {ok_c}/{ok_f}")
            depth[b] += 1
            if depth[b] % 7 == 3 and not mf[b].is_terminated():  # exercise rollback
                for m in (mc[b], mf[b]):
                    m.rollback(1)
                    m.accept_token(tok)
    return problems


# -- tiny hand-made cases ---------------------------------------------------------------
TINY_GRAMMAR = 'root ::= "(" root ")" | "x" | "[" [a-c]* "]" ws\nws ::= [ \\n]*'


def tiny_vocab(logit_width: int = 45) -> Vocabulary:
    toks: list[bytes | None] = [
        b"(", b"((", b")", b"x", b"y", b"[", b"a", b"ab", b"]", None, b"<s>", b"</s>",
        b"bc]", b"", b" ", b"] ", b"))", b"x)", b"<|eot|>", b"(x",
    ]  # fmt: skip
    return Vocabulary(toks, special_ids=[10, 11, 18], stop_ids=[11, 18], logit_width=logit_width, name="tiny")


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@pytest.mark.parametrize("width", [20, 32, 45, 64, 70])
def test_identity_classes_lossless(engine: str, width: int) -> None:
    """Identity classes (plus stop/invalid) reproduce the full engine bit for bit (proof step 3)."""
    vocab = tiny_vocab(width)
    mod = ENGINES[engine]
    compressed = mod.compile_grammar(identity_classes(vocab, TINY_GRAMMAR), TINY_GRAMMAR)
    full = mod.compile_full(vocab, TINY_GRAMMAR)
    for batch, bias in [(1, "uniform"), (1, "stop"), (4, "long")]:
        assert differential_walk(compressed, full, steps=60, seed=width, batch=batch, bias=bias) == []


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_compress_classes_lossless_tiny(engine: str) -> None:
    from formalgram_cfgzip.compress import compress

    vocab = tiny_vocab()
    classes = compress(TINY_GRAMMAR, vocab, progress=False)
    mod = ENGINES[engine]
    compressed = mod.compile_grammar(classes, TINY_GRAMMAR)
    full = mod.compile_full(vocab, TINY_GRAMMAR)
    for seed, bias in [(0, "uniform"), (1, "long"), (2, "stop")]:
        assert differential_walk(compressed, full, steps=80, seed=seed, batch=3, bias=bias) == []


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@pytest.mark.parametrize(
    ("cache_entries", "delta"), [(0, None), (1, None), (2, True), (64, None), (64, True)]
)
def test_expansion_cache_lossless_in_walks(engine: str, cache_entries: int, delta: bool | None) -> None:
    """The row cache of the expander (off, thrashing, small, ample; rows patched from cached
    neighbours or not; every row admitted, so that the tiny rows of this vocabulary are
    cached) stays bit-exact in walks."""
    from formalgram_cfgzip.compress import compress
    from formalgram_cfgzip.expand import MaskExpander

    vocab = tiny_vocab(45)
    classes = compress(TINY_GRAMMAR, vocab, progress=False)
    mod = ENGINES[engine]
    compressed = mod.compile_grammar(classes, TINY_GRAMMAR)
    full = mod.compile_full(vocab, TINY_GRAMMAR)
    assert compressed.expander is not None
    per_entry = 4 * compressed.token_words + 4 * compressed.engine_words + 100
    ex = MaskExpander(
        classes.token_class,
        compressed.engine_size,
        cache_bytes=cache_entries * per_entry,
        delta=delta,
        cache_admission="always",
    )
    compressed.expander = ex
    for seed, batch in [(0, 1), (1, 4), (2, 7)]:
        assert differential_walk(compressed, full, steps=60, seed=seed, batch=batch) == []
    stats = ex.cache_stats
    assert stats["capacity"] == cache_entries
    if cache_entries == 0:
        assert stats["hits"] == stats["misses"] == 0
    else:
        assert stats["hits"] > 0 and stats["entries"] <= cache_entries
    if cache_entries == 1:
        assert stats["evictions"] > 0
    if delta:
        assert stats["deltas"] > 0


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_wrong_classes_are_caught(engine: str) -> None:
    """Merging "(" with ")" (or "x" with "y") must produce mismatches: the test can fail."""
    vocab = tiny_vocab()
    ident = identity_classes(vocab, TINY_GRAMMAR)
    mod = ENGINES[engine]
    full = mod.compile_full(vocab, TINY_GRAMMAR)
    for a, b in [(0, 2), (3, 4)]:  # classes of tokens "(" / ")" and "x" / "y"
        wrong = merge_classes(ident, int(ident.token_class[a]), int(ident.token_class[b]))
        compressed = mod.compile_grammar(wrong, TINY_GRAMMAR)
        assert differential_walk(compressed, full, steps=40, seed=0, batch=2) != []


@pytest.mark.xgrammar
@pytest.mark.llguidance
def test_special_token_policy() -> None:
    """Special/hole/padding/empty tokens never allowed; stop tokens only when the grammar may end."""
    vocab = tiny_vocab()
    for compiled in (
        xgr_engine.compile_full(vocab, TINY_GRAMMAR),
        llg_engine.compile_full(vocab, TINY_GRAMMAR),
        xgr_engine.compile_grammar(identity_classes(vocab, TINY_GRAMMAR), TINY_GRAMMAR),
        llg_engine.compile_grammar(identity_classes(vocab, TINY_GRAMMAR), TINY_GRAMMAR),
    ):
        m = compiled.matcher()
        bm = compiled.allocate_token_bitmask(1)
        m.fill_next_token_bitmask(bm)
        start = set(allowed_ids(bm[0], vocab.logit_width).tolist())
        assert start == {0, 1, 3, 5, 19}, compiled  # "(", "((", "x", "[", "(x"
        assert m.accept_token(3)
        m.fill_next_token_bitmask(bm)
        after = set(allowed_ids(bm[0], vocab.logit_width).tolist())
        assert after == {11, 18}  # only the stop tokens: root is complete
        assert not m.accept_token(10) and not m.accept_token(13) and not m.accept_token(40)
        assert m.accept_token(18) and m.is_terminated()
        m.fill_next_token_bitmask(bm)
        assert not bm.any()  # nothing after a stop token
        m.rollback(1)
        assert not m.is_terminated()
        m.reset()
        m.fill_next_token_bitmask(bm)
        assert set(allowed_ids(bm[0], vocab.logit_width).tolist()) == start


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_batches_with_terminated_matchers(engine: str) -> None:
    """Terminated matchers in a batch get zero rows, the others their masks (XGrammar's fills
    raise on a terminated matcher: the adapter fills optimistically and redoes the call with
    the checks; the result must not depend on that)."""
    vocab = tiny_vocab()
    mod = ENGINES[engine]
    for compiled in (
        mod.compile_full(vocab, TINY_GRAMMAR),
        mod.compile_grammar(identity_classes(vocab, TINY_GRAMMAR), TINY_GRAMMAR),
    ):
        ms = [compiled.matcher() for _ in range(4)]
        for i in (1, 3):
            assert ms[i].accept_token(3) and ms[i].accept_token(18) and ms[i].is_terminated()
        assert ms[2].accept_token(3)
        want = compiled.allocate_token_bitmask(4)
        for i, m in enumerate(ms):
            m.fill_next_token_bitmask(want, i)
        assert not want[1].any() and not want[3].any() and want[0].any() and want[2].any()
        for indices in (None, [3, 0, 2, 1]):
            got = np.full((4, compiled.token_words), -1, dtype=np.int32)
            compiled.fill_next_token_bitmask_batch(ms, got, indices)
            order = list(range(4)) if indices is None else indices
            for j, r in enumerate(order):
                assert np.array_equal(got[r], want[j]), (compiled, indices, j)
            cls = np.full((4, compiled.engine_words), -1, dtype=np.int32)
            compiled.fill_next_class_bitmask_batch(ms, cls, indices)
            for j, r in enumerate(order):
                single = compiled.allocate_class_bitmask(1)
                ms[j].fill_next_class_bitmask(single, 0)
                assert np.array_equal(cls[r], single[0]), (compiled, indices, j)
                assert cls[r].any() == (j in (0, 2))
        live = [ms[0], ms[2]]
        got = compiled.allocate_token_bitmask(2)
        compiled.fill_next_token_bitmask_batch(live, got)
        assert np.array_equal(got, want[[0, 2]])


@pytest.mark.llguidance
def test_llguidance_limits_are_passed_to_the_matchers() -> None:
    """A tiny Earley-item budget puts the matcher in llguidance's error state; the default
    does not (so ``limits`` reaches llguidance, for compile and compile_full alike)."""
    import llguidance

    vocab = tiny_vocab()
    tight = llguidance.LLParserLimits(step_max_items=1)
    for compiled in (
        llg_engine.compile_full(vocab, TINY_GRAMMAR, limits=tight),
        llg_engine.compile_grammar(identity_classes(vocab, TINY_GRAMMAR), TINY_GRAMMAR, limits=tight),
    ):
        m = compiled.matcher()
        m.fill_next_token_bitmask(compiled.allocate_token_bitmask(1))
        assert "Too many items (limit 1" in m.engine_error()  # llguidance's own message
        assert m.accept_token(3) is False  # the error state refuses every token, "x" included
    default = llg_engine.compile_full(vocab, TINY_GRAMMAR)
    m = default.matcher()
    m.fill_next_token_bitmask(default.allocate_token_bitmask(1))
    assert m.accept_token(3) and m.engine_error() == ""


@pytest.mark.llguidance
def test_full_vocabulary_tokenizers_are_shared_per_vocabulary() -> None:
    """compile_full builds the engine tokenizer of a vocabulary once (XGrammar's
    TokenizerInfo, llguidance's LLTokenizer) and shares it, immutable, between grammars."""
    vocab = tiny_vocab()
    other = tiny_vocab(64)  # another logit width: another vocabulary
    a = llg_engine.compile_full(vocab, TINY_GRAMMAR)
    b = llg_engine.compile_full(vocab, 'root ::= "x"')
    c = llg_engine.compile_full(other, TINY_GRAMMAR)
    assert a.tokenizer is b.tokenizer and a.tokenizer is not c.tokenizer
    m = b.matcher()
    assert m.accept_token(3) and not a.matcher().accept_token(2)  # grammars stay separate


# -- bad input --------------------------------------------------------------------------
@pytest.mark.xgrammar
@pytest.mark.llguidance
def test_bad_input_errors() -> None:
    vocab = tiny_vocab()
    classes = identity_classes(vocab, TINY_GRAMMAR)
    with pytest.raises(ClassesMismatchError, match="another grammar"):
        xgr_engine.compile_grammar(classes, 'root ::= "x"')
    with pytest.raises(ClassesMismatchError, match="another grammar"):
        llg_engine.compile_grammar(classes, 'root ::= "x"')
    other = Vocabulary([b"a", b"b"], name="other")
    with pytest.raises(ClassesMismatchError, match="vocabulary"):
        xgr_engine.compile_grammar(classes, TINY_GRAMMAR, vocab=other)
    bad = TokenClasses(
        classes.token_class.copy(), classes.representatives, classes.invalid_class, classes.stop_class,
        vocab, classes.grammar_sha256,
    )  # fmt: skip
    bad.token_class[10] = 0  # a special token outside the invalid class
    with pytest.raises(ClassesMismatchError, match="invalid class"):
        xgr_engine.compile_grammar(bad, TINY_GRAMMAR)
    with pytest.raises(EngineError, match="cannot"):
        xgr_engine.compile_full(vocab, "root ::= (")
    with pytest.raises(EngineError):
        llg_engine.compile_full(vocab, "root ::= (")
    compiled = xgr_engine.compile_grammar(classes, TINY_GRAMMAR)
    m = compiled.matcher()
    for tok in (-1, vocab.logit_width, 10**9):
        with pytest.raises(TokenIdError, match="outside the vocabulary"):
            m.accept_token(tok)
    with pytest.raises(TokenIdError):
        m.accept_token("3")
    bm = compiled.allocate_token_bitmask(2)
    with pytest.raises(BatchIndexError, match="out of range"):
        m.fill_next_token_bitmask(bm, 2)
    with pytest.raises(BatchIndexError):
        compiled.fill_next_token_bitmask_batch([m], bm, indices=[5])
    with pytest.raises(EngineError, match="words per row"):
        m.fill_next_token_bitmask(np.zeros((1, 1), dtype=np.int32))
    with pytest.raises(EngineError, match="int32"):
        m.fill_next_token_bitmask(np.zeros((1, 2), dtype=np.int64))
    # arguments the inline fast path leaves to the checked path: same errors
    with pytest.raises(BatchIndexError):
        m.fill_next_token_bitmask(bm, -1)
    with pytest.raises(EngineError, match="C-contiguous"):
        m.fill_next_token_bitmask(np.zeros((2, 4), dtype=np.int32)[:, ::2])
    with pytest.raises(EngineError, match="int32"):
        m.fill_next_token_bitmask(np.zeros((1, 2), dtype=">i4"))
    other_compiled = xgr_engine.compile_full(vocab, TINY_GRAMMAR)
    with pytest.raises(EngineError, match="another compiled grammar"):
        compiled.fill_next_token_bitmask_batch([other_compiled.matcher()], bm)


@pytest.mark.xgrammar
def test_torch_cpu_bitmask_and_lazy_engines() -> None:
    torch = pytest.importorskip("torch")
    import subprocess
    import sys

    vocab = tiny_vocab()
    compiled = xgr_engine.compile_grammar(identity_classes(vocab, TINY_GRAMMAR), TINY_GRAMMAR)
    t = torch.zeros((1, compiled.token_words), dtype=torch.int32)
    compiled.matcher().fill_next_token_bitmask(t)
    assert set(allowed_ids(t.numpy()[0], vocab.logit_width).tolist()) == {0, 1, 3, 5, 19}
    # a torch tensor takes the checked path, a numpy array the inline one: same row, and
    # the other rows untouched
    m = compiled.matcher()
    assert m.accept_token(3)
    t3 = torch.full((3, compiled.token_words), -1, dtype=torch.int32)
    a3 = np.full((3, compiled.token_words), -1, dtype=np.int32)
    m.fill_next_token_bitmask(t3, 2)
    m.fill_next_token_bitmask(a3, 2)
    assert np.array_equal(t3.numpy(), a3) and (a3[:2] == -1).all()
    assert set(allowed_ids(a3[2], vocab.logit_width).tolist()) == {11, 18}
    code = "import sys, formalgram_cfgzip, formalgram_cfgzip.engines; print('xgrammar' in sys.modules, 'llguidance' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


# -- real grammars and vocabularies -----------------------------------------------------
SWEEP_VOCABULARIES = ["llama3", "qwen3", "o200k_harmony"]
# Grammars above this size are left to bench/online_bench.py (none of either corpus is;
# sql_syncode, 13 KB, already takes minutes per vocabulary).
SWEEP_MAX_BYTES = 20_000

# Grammars formalgram's reader refuses by design (the construct it names): the sweep
# checks that compress() refuses them so, and compares nothing.
FORMALGRAM_REFUSES = {"xgrammar/builtin_json.ebnf": "lookahead"}

# llguidance reads these grammars as a different language (its lexer splits bytes into
# lexemes), so classes computed for the context-free language need not be congruent for
# it, and its full-vocabulary masks differ from the compressed ones.  Each is pinned by a
# fast test of llguidance's reading in test_llguidance_reprint.py; the sweep marks exactly
# these cases (every vocabulary of the sweep fails on each; the other SMILES grammars,
# chain_extenders and generic, pass).  grammar -> prefixes llguidance rejects.
_LLGUIDANCE_READS_OTHERWISE = {
    "transformers_cfg/SMILES/acrylates.ebnf": "b'OCC' and b'OCI' (a second atom after b'OC')",
    "transformers_cfg/SMILES/isocyanates.ebnf": "b'O=CO' (atoms after b'O=C'; it allows only the group b'O=C=N')",
    "derived/lark_via_xgrammar/sql_syncode.gbnf": "b'SELECTalk' (it allows b'SELECTask')",
    "derived/lark_via_xgrammar/go_syncode.gbnf": (
        "b'package main\\nconstraints' (it allows b'package main\\nconstants')"
    ),
}
LLGUIDANCE_OTHER_LANGUAGE: dict[tuple[str, str], str] = {
    (
        rel,
        vocab_name,
    ): f"llguidance's lexer rejects {what}, prefixes that Earley and XGrammar accept"
    for rel, what in _LLGUIDANCE_READS_OTHERWISE.items()
    for vocab_name in SWEEP_VOCABULARIES
}

_classes_cache: dict[tuple[str, str], Any] = {}
_full_cache: dict[tuple[str, str, str], CompiledGrammar] = {}


def _sweep_cases() -> list[Any]:
    """(grammar, vocabulary, engine) for every grammar of the sweep's corpus, each known
    llguidance divergence marked as a strict xfail naming what llguidance rejects."""
    cases = []
    for rel in _data.sweep_files():
        if _data.real_grammar(rel).stat().st_size > SWEEP_MAX_BYTES:
            continue
        for vocab_name in SWEEP_VOCABULARIES:
            for engine in sorted(ENGINES):
                other = LLGUIDANCE_OTHER_LANGUAGE.get((rel, vocab_name)) if engine == "llguidance" else None
                marks = [pytest.mark.xfail(reason=other, raises=AssertionError, strict=True)] if other else []
                case = engine_param(engine, id=f"{rel}-{vocab_name}-{engine}")
                cases.append(pytest.param(rel, vocab_name, engine, marks=[*case.marks, *marks], id=case.id))
    return cases


def _setup(path: Path, vocab_name: str, engine: str) -> tuple[CompiledGrammar, CompiledGrammar]:
    """The compressed and full-vocabulary engines for one case.

    Only the documented refusals skip: the engine cannot read the grammar (``EngineError``
    from compiling it over a one-token vocabulary), or compress() exceeds its budget
    (``GrammarTooLarge``).  Any other exception fails the test.
    """
    from formalgram_cfgzip.compress import compress

    vocab = Vocabulary.builtin(vocab_name)
    text = path.read_text(encoding="utf-8")
    mod = ENGINES[engine]
    options = _sweep_options(engine)
    try:
        mod.compile_full(Vocabulary([b"a"]), text, **options)  # cheap: does the engine read it?
    except EngineError as exc:
        pytest.skip(f"{engine} cannot compile {path.name}: {str(exc)[:120]}")
    # The sweep takes one grammar at a time (all its vocabularies and engines), so the caches
    # only need the current grammar.  Keeping every grammar's full-vocabulary engines made the
    # process grow past compress()'s 4 GiB memory budget (a process-wide RSS check) after
    # ~90 grammars, and later grammars were refused as GrammarTooLarge.
    for cache in (_classes_cache, _full_cache):
        for stale in [k for k in cache if k[0] != str(path)]:
            del cache[stale]
    key = (str(path), vocab_name)
    if key not in _classes_cache:
        try:
            _classes_cache[key] = compress(text, vocab, progress=False)
        except GrammarTooLarge as exc:  # kept, so the other engine skips at once
            _classes_cache[key] = exc
    classes = _classes_cache[key]
    if isinstance(classes, GrammarTooLarge):
        pytest.skip(f"{path.name}: compress() refused: {str(classes)[:120]}")
    fkey = (str(path), vocab_name, engine)
    if fkey not in _full_cache:
        _full_cache[fkey] = mod.compile_full(vocab, text, **options)
    return mod.compile_grammar(classes, text, **options), _full_cache[fkey]


# llguidance's default of 50,000 Earley items per mask step stops its full-vocabulary
# reference matcher on some printed JSON-schema grammars (walks were restarted); the sweep
# gives both engines the same, larger budget, so walks run to the end.
SWEEP_LLGUIDANCE_MAX_ITEMS = 2_000_000


def _sweep_options(engine: str) -> dict[str, Any]:
    if engine != "llguidance":
        return {}
    import llguidance

    return {"limits": llguidance.LLParserLimits(step_max_items=SWEEP_LLGUIDANCE_MAX_ITEMS)}


FAST_CASES = [
    ("llama_cpp/arithmetic.gbnf", "llama3"),
    ("transformers_cfg/balanced_parentheses.ebnf", "qwen3"),
]


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@pytest.mark.parametrize(("rel", "vocab_name"), FAST_CASES)
def test_real_grammar_lossless_fast(engine: str, rel: str, vocab_name: str) -> None:
    compressed, full = _setup(_data.grammar(rel), vocab_name, engine)
    assert differential_walk(compressed, full, steps=40, seed=1, batch=1, bias="long") == []
    assert differential_walk(compressed, full, steps=15, seed=2, batch=8, bias="stop") == []


@pytest.mark.heavy
@pytest.mark.parametrize(("rel", "vocab_name", "engine"), _sweep_cases())
def test_real_grammar_lossless_sweep(rel: str, vocab_name: str, engine: str) -> None:
    path = _data.real_grammar(rel)
    if rel in FORMALGRAM_REFUSES:
        from formalgram_cfgzip.compress import compress

        with pytest.raises(UnsupportedConstruct) as info:
            compress(path.read_text(encoding="utf-8"), Vocabulary.builtin(vocab_name), progress=False)
        assert info.value.construct == FORMALGRAM_REFUSES[rel]
        return
    compressed, full = _setup(path, vocab_name, engine)
    problems: list[str] = []
    notes: list[str] = []
    for seed, bias, batch in SWEEP_WALKS:
        problems += differential_walk(
            compressed,
            full,
            steps=60,
            seed=seed,
            batch=batch,
            bias=bias,
            notes=notes,
            seconds=SWEEP_WALK_SECONDS,
        )
    if notes:
        warnings.warn(f"{len(notes)} walks restarted or shortened: {notes[0]}", stacklevel=1)
    assert problems == []


SWEEP_WALKS = [(0, "uniform", 1), (1, "long", 1), (2, "stop", 1), (3, "uniform", 8), (4, "long", 8)]
# Time per walk of the sweep (at least 10 steps each): 60 steps take well under this on
# almost every grammar; XGrammar's full-vocabulary fill on the SMILES grammars (~0.5 s per
# row) would otherwise make each of those tests run 10+ minutes.
SWEEP_WALK_SECONDS = 25.0
