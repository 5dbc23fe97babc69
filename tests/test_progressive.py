"""The progressive engine and the background compressor.

Oracle: XGrammar used directly (``GrammarCompiler.compile_json_schema`` over the full Llama-3
vocabulary, its own matcher): a progressive matcher's masks must be XGrammar's at every step,
before, at and after its move to the classes' engine, and after rollbacks across the move.  The
background compressor is checked against the Earley recognizer through the classes it returns
(every class's representative and members agree on a sample of prefixes), and for its failure
paths (a time limit, a crash of its worker, a bad grammar, closing) by their typed errors.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest
from _data import JSON_SCHEMAS

from formalgram import is_prefix
from formalgram_cfgzip import Vocabulary
from formalgram_cfgzip.background import BackgroundCompressor
from formalgram_cfgzip.compress import Compressor
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.grammar_text import read_grammar

xgr = pytest.importorskip("xgrammar")
pytestmark = pytest.mark.xgrammar

PER_REQUEST: dict[str, Any] = {"domains": True, "specialize": False, "gnf_strategy": "fast"}


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    pytest.importorskip("quicktok")
    return Vocabulary.builtin("llama3")


class _HeldCompressor:
    """A compressor whose compressions wait until released (to place the move in a walk)."""

    def __init__(self, inner: Compressor) -> None:
        self.inner = inner
        self.vocab = inner.vocab
        self.release = threading.Event()

    def compress(self, text: str) -> Any:
        self.release.wait()
        return self.inner.compress(text)


def _raw_xgrammar(vocab: Vocabulary, schema: dict[str, Any]) -> Any:
    from formalgram_cfgzip.engines.xgrammar import full_tokenizer_info

    compiler = xgr.GrammarCompiler(full_tokenizer_info(vocab), max_threads=1, cache_enabled=False)
    return xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema)))


def _mask(fill: Any, width: int) -> np.ndarray:
    bm = np.zeros((1, (width + 31) // 32), dtype=np.int32)
    fill(bm)
    return bm[0]


def _walk_against_xgrammar(
    vocab: Vocabulary, schema: dict[str, Any], matcher: Any, steps: int, seed: int, on_step: Any = None
) -> list[int]:
    """Walk ``matcher`` and raw XGrammar side by side; the steps where the masks differ."""
    ref = _raw_xgrammar(vocab, schema)
    rng = np.random.default_rng(seed)
    stops = set(vocab.stop_ids)
    bad = []
    for step in range(steps):
        if on_step is not None:
            on_step(step, matcher, ref)
        ours = _mask(matcher.fill_next_token_bitmask, vocab.logit_width)
        theirs = _mask(ref.fill_next_token_bitmask, vocab.logit_width)
        if not np.array_equal(ours, theirs):
            bad.append(step)
        allowed = np.flatnonzero(np.unpackbits(theirs.view(np.uint8), bitorder="little")[: vocab.logit_width])
        allowed = [int(t) for t in allowed if int(t) not in stops]
        if not allowed:
            break
        # long tokens half of the time: the walk gets through the document
        lengths = np.array([len(vocab.tokens[t] or b"") for t in allowed])
        pick = (
            allowed[int(np.argmax(lengths))]
            if rng.random() < 0.5
            else allowed[int(rng.integers(len(allowed)))]
        )
        assert matcher.accept_token(pick) and ref.accept_token(pick)
    return bad


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((JSON_SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    schema.pop("examples", None)
    return schema


@pytest.mark.parametrize("move_at", [0, 7, 25])
def test_masks_are_xgrammars_before_at_and_after_the_move(llama3: Vocabulary, move_at: int) -> None:
    from formalgram_cfgzip.engines.progressive import compile_json_schema

    schema = _schema("invoice")
    held = _HeldCompressor(Compressor(llama3, cache_size=0, **PER_REQUEST))
    grammar = compile_json_schema(schema, held)  # type: ignore[arg-type]
    matcher = grammar.matcher()

    def on_step(step: int, m: Any, ref: Any) -> None:
        if step == move_at:
            held.release.set()
            assert grammar.wait(timeout=120)
        assert m.on_classes == (step > move_at)  # moves at the first call after the engine is ready
        if step == move_at + 5:  # a rollback across the move: three tokens back, both sides
            m.rollback(3)
            ref.rollback(3)

    bad = _walk_against_xgrammar(llama3, schema, matcher, steps=60, seed=move_at, on_step=on_step)
    assert bad == []
    assert matcher.moved_at is not None and grammar.full_seconds is not None


def test_background_compression_is_lossless_and_in_order(llama3: Vocabulary) -> None:
    from formalgram_cfgzip.engines.progressive import compile_json_schema

    bg = BackgroundCompressor(llama3, timeout=120, **PER_REQUEST)
    try:
        schemas = [_schema("recipe"), _schema("sensor_reading")]
        grammars = [compile_json_schema(s, bg) for s in schemas]
        for schema, grammar in zip(schemas, grammars, strict=True):
            assert grammar.wait(timeout=120), grammar.compressed_error
            # the native engine's tables were built in the worker, not in this process
            assert grammar._job is not None and grammar._job.tables is not None
            assert _walk_against_xgrammar(llama3, schema, grammar.matcher(), steps=40, seed=1) == []
        assert bg.restarts == 0
    finally:
        bg.close()


# a small grammar and vocabulary for the worker's results against the Earley recognizer
_NESTED = 'root ::= "[" item ("," item)* "]"\nitem ::= [a-c]+ | "(" item ")"'
_NESTED_TOKENS = [b"[", b"]", b",", b"a", b"ab", b"abc", b"(", b")", b"((", b"a,", b"],", b"x"]


def test_classes_from_the_worker_agree_with_earley() -> None:
    text = _NESTED
    vocab = Vocabulary(_NESTED_TOKENS)
    bg = BackgroundCompressor(vocab, timeout=60)
    try:
        classes = bg.submit(text).result(timeout=60)
    finally:
        bg.close()
    g = read_grammar(text)
    prefixes = [b"", b"[", b"[a", b"[(", b"[a,", b"[((", b"[a,b"]
    for t, cls in enumerate(classes.token_class.tolist()):
        rep = int(classes.representatives[cls])
        if rep < 0 or cls in (classes.invalid_class, classes.stop_class):
            continue
        for p in prefixes:
            member, representative = vocab.tokens[t], vocab.tokens[rep]
            assert member is not None and representative is not None
            assert is_prefix(g, p + member) == is_prefix(g, p + representative), (t, rep, p)


def test_a_worker_builds_the_native_tables_when_asked() -> None:
    """``submit(..., native_tables=True)``: the native engine's tables come back with the
    classes (signed, loaded and checked here), and the engine built on them accepts exactly
    what the Earley recognizer accepts; without the flag, no tables."""
    from formalgram_cfgzip.engines import compile_grammar

    text = _NESTED
    tokens = [*_NESTED_TOKENS, b"</s>"]
    vocab = Vocabulary(tokens, special_ids=[12], stop_ids=[12])
    g = read_grammar(text)
    for options in ({"domains": True}, {}):  # tables from the search's own domains, or searched again
        bg = BackgroundCompressor(vocab, timeout=60, workers=1, **options)
        try:
            job = bg.submit(text, native_tables=True)
            classes = job.result(timeout=60)
            plain = bg.submit(text)
            assert plain.result(timeout=60).num_classes == classes.num_classes and plain.tables is None
        finally:
            bg.close()
        assert job.native_tables and job.tables is not None
        assert job.tables.classes_sha256 and job.tables.inconsistency() == ""
        compiled = compile_grammar(classes, text, engine="native", tables=job.tables)
        rng = np.random.default_rng(len(options))
        for _ in range(20):  # random walks: every token's verdict at every step is Earley's
            matcher, prefix = compiled.matcher(), b""
            for _ in range(8):
                bits = _mask(matcher.fill_next_token_bitmask, vocab.logit_width)
                allowed = np.unpackbits(bits.view(np.uint8), bitorder="little")[: len(tokens)]
                for t, tok in enumerate(tokens[:12]):
                    assert bool(allowed[t]) == is_prefix(g, prefix + tok), (prefix, tok)
                choices = np.flatnonzero(allowed[:12])
                if not len(choices):
                    break
                pick = int(rng.choice(choices))
                assert matcher.accept_token(pick)
                prefix += tokens[pick]


def test_background_failures_are_typed_and_the_worker_recovers() -> None:
    vocab = Vocabulary([b"a", b"b", b"ab", b"c"])
    # a grammar whose compression takes seconds
    slow = "root ::= [a-c]{0,40000}"
    bg = BackgroundCompressor(vocab, timeout=60, workers=1, abandon_after=0.1)
    try:
        with pytest.raises(EngineError, match="the compression failed: GrammarSyntaxError"):
            bg.submit("root ::= (").result(timeout=60)
        with pytest.raises(EngineError, match="past its time limit"):
            bg.submit(slow, timeout=0.001).result(timeout=60)
        assert bg.restarts == 1
        # a worker that dies mid-job fails that job only
        job = bg.submit(slow)
        while job in bg._waiting:
            threading.Event().wait(0.01)
        for proc in list(bg._live):
            proc.kill()
        with pytest.raises(EngineError, match="worker died"):
            job.result(timeout=60)
        assert bg.submit('root ::= "a" "b"').result(timeout=60).num_classes >= 2
        # cancelling: a queued job is dropped, a running one fails at once and its worker is
        # ended shortly after (abandon_after), a fresh one taking the next job
        running, queued = bg.submit(slow), bg.submit(slow)
        while running in bg._waiting:
            threading.Event().wait(0.01)
        restarts = bg.restarts
        queued.cancel()
        running.cancel()
        for cancelled in (queued, running):
            with pytest.raises(EngineError, match="cancelled"):
                cancelled.result(timeout=60)  # at once; the timeout guards against a hang
        assert bg.submit('root ::= "a" "b"').result(timeout=60).num_classes >= 2
        assert bg.restarts == restarts + 1
    finally:
        bg.close()
    with pytest.raises(EngineError, match="closed"):
        bg.submit('root ::= "a"')


def test_a_cancelled_job_does_not_hold_up_the_next_with_two_workers() -> None:
    vocab = Vocabulary([b"a", b"b", b"ab", b"c"])
    bg = BackgroundCompressor(vocab, timeout=60, workers=2, abandon_after=30)
    try:
        bg.submit('root ::= "a"').result(timeout=60)  # both workers started
        slow = bg.submit("root ::= [a-c]{0,40000}")
        while slow in bg._waiting:
            threading.Event().wait(0.01)
        slow.cancel()  # left to finish on its worker (abandon_after is long)
        quick = bg.submit('root ::= "a" "b"')
        assert quick.result(timeout=60).num_classes >= 2  # served by the other worker
        assert bg.restarts == 0
    finally:
        bg.close()


def test_progressive_failures(llama3: Vocabulary) -> None:
    from formalgram_cfgzip.engines.progressive import compile_progressive

    compressor = Compressor(llama3, cache_size=0, **PER_REQUEST)
    # neither engine reads it: both reasons reach the caller
    broken = compile_progressive(compressor, 'root ::= "a" undefined_rule')
    with pytest.raises(EngineError, match=r"neither engine.*XGrammar.*classes"):
        broken.matcher().fill_next_token_bitmask(broken.allocate_token_bitmask())
    # a compression past its time limit leaves the grammar on XGrammar's masks
    held = _HeldCompressor(compressor)
    late = compile_progressive(held, 'root ::= "a"+', compress_timeout=0.05)  # type: ignore[arg-type]
    assert not late.wait()
    held.release.set()
    m = late.matcher()
    assert m.accept_token(llama3.tokens.index(b"a"))
    assert not m.on_classes
    with pytest.raises(EngineError, match="class masks exist once"):
        m.fill_next_class_bitmask(np.zeros((1, 8), dtype=np.int32))
    # the classes' engine alone (no XGrammar): the first fill waits for it
    only = compile_progressive(compressor, 'root ::= "a"+', full=False)
    m = only.matcher()
    m.fill_next_token_bitmask(only.allocate_token_bitmask())
    assert m.on_classes and only.full is None


def test_a_grammar_past_the_quick_budget_goes_to_the_worker(llama3: Vocabulary) -> None:
    from formalgram_cfgzip.engines.progressive import compile_json_schema

    schema = _schema("api_error")
    quick = Compressor(llama3, cache_size=0, max_work=10, **PER_REQUEST)  # too little for any schema
    bg = BackgroundCompressor(llama3, timeout=120, **PER_REQUEST)
    try:
        grammar = compile_json_schema(schema, quick, background=bg)
        assert grammar.wait(timeout=120), grammar.compressed_error
        assert grammar.handed_over
        assert _walk_against_xgrammar(llama3, schema, grammar.matcher(), steps=40, seed=2) == []
    finally:
        bg.close()
    # within the budget, a grammar predicted cheap is compressed at once: no XGrammar compile
    roomy = Compressor(llama3, cache_size=0, max_work=10_000_000, **PER_REQUEST)
    bg = BackgroundCompressor(llama3, timeout=120, **PER_REQUEST)
    try:
        grammar = compile_json_schema(schema, roomy, background=bg)
        assert grammar.path == "quick" and grammar.ready and grammar.full is None
        assert not grammar.wait_full(timeout=0)
        assert _walk_against_xgrammar(llama3, schema, grammar.matcher(), steps=40, seed=3) == []
        # predicted large (a long maxLength string): the race, the compression in the worker
        big = {"type": "string", "maxLength": 300}
        raced = compile_json_schema(big, roomy, background=bg)
        assert raced.path == "race" and not raced.handed_over
        assert raced.wait(timeout=120)
        assert raced.wait_full(timeout=120) and raced.full is not None  # XGrammar's own compile
        assert _walk_against_xgrammar(llama3, big, raced.matcher(), steps=30, seed=4) == []
        # no free text (XGrammar compiles it soon): XGrammar's compile in this thread, ready
        # when the grammar is returned; the compression after it, in the worker
        numbers = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
        direct = compile_json_schema(numbers, roomy, background=bg)
        assert direct.path == "direct" and direct.full is not None and not direct.ready
        matcher = direct.matcher()
        assert _walk_against_xgrammar(llama3, numbers, matcher, steps=30, seed=5) == []
        assert direct.wait(timeout=120) and not direct.handed_over
        assert _walk_against_xgrammar(llama3, numbers, direct.matcher(), steps=30, seed=6) == []
    finally:
        bg.close()
    # without a background compressor the budget's error is the compression's failure
    alone = compile_json_schema(schema, quick)
    assert not alone.wait(timeout=120) and "displacement search" in str(alone.compressed_error)


def test_patterns_count_less_than_negated_classes_for_the_quick_path() -> None:
    """The path's prediction: free text (negated classes) makes XGrammar's compile slow, a
    ``Regex`` macro (a ``pattern``) far less, so a long grammar of many patterns is raced
    (XGrammar compiles it soon) while as many negated classes send it to the quick path."""
    from typing import cast

    from formalgram_cfgzip.engines.progressive import (
        QUICK_CHARS,
        QUICK_REPEATS,
        _quick_path,
        free_text_contexts,
    )

    def grammar(kinds: list[str]) -> str:
        rules = [f"r{i} ::= {kind}" for i, kind in enumerate(kinds)]
        pad = 'pad ::= "' + "p" * 20_000 + '"'
        return "\n".join(["root ::= pad " + " ".join(f"r{i}" for i in range(len(kinds))), pad, *rules])

    patterns = grammar([f'Regex("^q{i}[a-z]+$")' for i in range(24)] + ["[^x]*"])
    negated = grammar([f"[^{chr(97 + i)}]*" for i in range(25)])
    assert free_text_contexts(patterns) == free_text_contexts(negated) == 25
    bg = cast(BackgroundCompressor, object())  # only its presence matters to the prediction
    quick = Compressor(Vocabulary([b"a"]), cache_size=0)
    assert not _quick_path(quick, bg, patterns, QUICK_CHARS, QUICK_REPEATS, True, "root")
    assert _quick_path(quick, bg, negated, QUICK_CHARS, QUICK_REPEATS, True, "root")
    assert not _quick_path(quick, None, negated, QUICK_CHARS, QUICK_REPEATS, True, "root")
    # a short grammar whose only free text is a pattern: XGrammar compiles it at once, raced
    short = 'root ::= "{" r0 "}"\nr0 ::= Regex("^[a-z]+$")'
    assert free_text_contexts(short) == 1
    assert not _quick_path(quick, bg, short, QUICK_CHARS, QUICK_REPEATS, True, "root")
    assert _quick_path(
        quick, bg, short.replace('Regex("^[a-z]+$")', "[^x]*"), QUICK_CHARS, QUICK_REPEATS, True, "root"
    )


def test_a_worker_that_cannot_start_fails_the_jobs_instead_of_hanging() -> None:
    class NoWorkers(BackgroundCompressor):
        def _spawn(self) -> Any:
            raise AssertionError("daemonic processes are not allowed to have children")

    bg = NoWorkers(Vocabulary([b"a"]), timeout=60, workers=1)
    try:
        assert not bg.wait_ready(timeout=30)  # the start failed: not ready
        with pytest.raises(EngineError, match=r"no compression worker could be started.*daemonic"):
            bg.submit('root ::= "a"').result(timeout=30)
    finally:
        bg.close()


_ORPHAN_PARENT = """
import sys, threading
from formalgram_cfgzip import Vocabulary
from formalgram_cfgzip.background import BackgroundCompressor

if __name__ == "__main__":
    bg = BackgroundCompressor(Vocabulary([b"a", b"b", b"ab", b"c"]), timeout=600, workers=1)
    job = bg.submit("root ::= [a-c]{0,40000}")  # seconds of work on the worker
    while job in bg._waiting:
        threading.Event().wait(0.01)
    print(bg._root, " ".join(str(p.pid) for p in bg._live if p.is_alive()), flush=True)
    threading.Event().wait(600)  # killed by the test while the job runs
"""


def test_workers_end_when_their_parent_is_killed(tmp_path: Any) -> None:
    script = tmp_path / "parent.py"
    script.write_text(_ORPHAN_PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        root, *words = parent.stdout.readline().split()
        pids = [int(p) for p in words]
        assert pids, "the parent reported no live worker"
    finally:
        parent.kill()
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:  # a zombie left for init to reap is gone
            return f.read().split(")")[-1].split()[0] != "Z"

    # a hang guard only: the worker notices its parent's end within a fraction of a second
    deadline = time.monotonic() + 120
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), "a compression worker outlived its parent"
    # it ended before its job (seconds of work) could write a result: it did not run on unwatched
    written = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    assert written == [], written
    shutil.rmtree(root, ignore_errors=True)


def test_workers_run_at_a_lower_priority() -> None:
    def niceness(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().split(")")[-1].split()[16])

    vocab = Vocabulary([b"a", b"b"])
    for nice in (0, 5):
        bg = BackgroundCompressor(vocab, timeout=60, workers=1, nice=nice)
        try:
            bg.submit('root ::= "a"').result(timeout=60)
            (worker,) = [p for p in bg._live if p.is_alive()]
            assert niceness(worker.pid) == min(19, niceness(os.getpid()) + nice)
        finally:
            bg.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_workers_import_xgrammar_before_their_first_job_when_asked() -> None:
    def maps_xgrammar(pid: int) -> bool:
        with open(f"/proc/{pid}/maps") as f:
            return "xgrammar" in f.read()

    vocab = Vocabulary([b'"', b"a", b"ab", b"1", b"12", b"x"])
    text = 'root ::= "\\"" Regex("[a-b]+[0-9]?", json_string=true) "\\""'
    in_process = Compressor(vocab).compress(text)
    # XGrammar is installed (the module's importorskip): the default (None) preloads
    for preload in (False, True, None):
        bg = BackgroundCompressor(vocab, timeout=60, workers=1, preload_xgrammar=preload)
        try:
            assert bg.wait_ready(timeout=60)  # no job yet: nothing else imports XGrammar
            (worker,) = [p for p in bg._live if p.is_alive()]
            assert maps_xgrammar(worker.pid) == (preload is not False)
            classes = bg.submit(text).result(timeout=60)
        finally:
            bg.close()
        assert classes.token_class.tolist() == in_process.token_class.tolist()


def test_wait_ready_waits_for_every_worker_and_is_false_once_closed() -> None:
    vocab = Vocabulary([b"a", b"b"])
    bg = BackgroundCompressor(vocab, timeout=60, workers=2)
    try:
        assert bg.wait_ready(timeout=60)
        assert len(bg._idle) == 2 and bg._starting == 0
    finally:
        bg.close()
    assert not bg.wait_ready(timeout=1)  # closed


@pytest.mark.parametrize("daemon", [True, False])
def test_kept_threads_serve_one_job_after_another_and_start_anew_in_a_fork(daemon: bool) -> None:
    """Jobs one after another run on one kept thread; a forked child, which has none of its
    parent's threads, runs its jobs on threads of its own."""
    from formalgram_cfgzip.engines.progressive import _KeptThreads

    kept = _KeptThreads("test-kept", daemon=daemon)
    idents: list[int] = []
    for _ in range(6):
        done = threading.Event()
        kept.submit(lambda done=done: (idents.append(threading.get_ident()), done.set()))
        assert done.wait(10)
        time.sleep(0.02)  # the thread back to idle before the next job
    assert len(idents) == 6 and len(set(idents)) == 1
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when its job ran (the kept thread is not here)
        done = threading.Event()
        kept.submit(done.set)
        os._exit(0 if done.wait(10) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
