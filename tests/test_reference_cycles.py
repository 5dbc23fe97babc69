"""A grammar's path from text to masks leaves nothing to the cyclic garbage collector.

A server compiles a grammar per request and drops it afterwards.  An object caught in a
reference cycle (a compiled nested function and its closure, a bound method kept in its own
object) is freed only when the cyclic collector runs, and that run falls in some other
request's time: on MaskBench a new schema's first mask waited for the previous schema's
matcher, compiled grammar and C buffers to be collected.  The oracle is the collector
itself: with it paused, the path runs and its objects are dropped; a collection then finds
nothing unreachable.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable

import numpy as np
import pytest
from _native_helpers import small_vocab

from formalgram import Grammar, Nonterminal, Production, parse_lark, to_gnf
from formalgram.byteset import ByteSet
from formalgram_cfgzip import engines
from formalgram_cfgzip.compress import Compressor
from formalgram_cfgzip.errors import EngineError

# a counted repetition, a macro's arguments with blanks, a negated class: each read by a
# helper of the lexer
TEXT = (
    'root ::= "[" items ("," Regex( "[0-9]+" ))? "]"\n'
    'items ::= items ";" item | item{1, 3}\n'  # left recursion, removed on the way to the GNF
    'item ::= [a-c] | "\\"" [^"]{0,2} "\\""'
)
# a string with an escape, a regular expression with look-around, an ignored terminal
LARK = 'start: WORD ("," WORD)*\nWORD: /a(?!b)[a-z]*/ | "\\x62"\n%ignore " "'
VOCAB = [b"[", b"]", b",", b"a", b"b", b"ab", b"1", b"12", b'"', b'"x', b"x", b"</s>"]


def _unreachable_after(work: Callable[[], None]) -> list[str]:
    """The types the collector finds unreachable once ``work`` has run (and dropped what it
    made) with the collector paused."""
    gc.collect()
    gc.disable()
    try:
        work()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return sorted({type(o).__qualname__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _request() -> None:
    vocab = small_vocab(VOCAB)
    classes = Compressor(vocab, cache_size=0, domains=True).compress(TEXT)
    compiled = engines.compile_grammar(classes, TEXT, engine="native")
    matcher = compiled.matcher()
    row = compiled.allocate_token_bitmask(1)
    for token in (0, 3, 2, 6, 1):
        matcher.fill_next_token_bitmask(row, 0)  # the fused fill where the C kernels are built
        assert (row[0, token >> 5] >> (token & 31)) & 1
        assert matcher.accept_token(token)
    matcher.fill_next_token_bitmask(row[0])  # a 1-D row: the shared path
    matcher.update_next_token_bitmask(row, 0)


def test_a_request_leaves_no_cycle() -> None:
    _request()  # first calls (imports, per-vocabulary caches) outside the check
    found = _unreachable_after(_request)
    assert not found, found


def _failed_progressive() -> None:
    """Progressive grammars whose engines fail, each error stored by the thread that caught
    it: both engines (an undefined rule), and the compression alone (past its time limit).
    Once both engines have ended, the grammars are dropped, and the threads given time to
    let go of them (a grammar in a cycle stays until the collector runs)."""
    from formalgram_cfgzip.engines.progressive import compile_progressive

    compressor = Compressor(small_vocab(VOCAB), cache_size=0, domains=True)
    broken = compile_progressive(compressor, 'root ::= "a" undefined_rule', head_start=0.0)
    with pytest.raises(EngineError, match="neither engine"):
        broken.matcher().fill_next_token_bitmask(broken.allocate_token_bitmask())
    late = compile_progressive(compressor, 'root ::= "a"+', compress_timeout=1e-9, head_start=0.0)
    kept = []
    for grammar in (broken, late):
        assert grammar.wait_full(timeout=60) is (grammar is late)
        assert not grammar.wait()
        ended = time.monotonic() + 60
        while grammar.compressed_error is None and time.monotonic() < ended:
            time.sleep(0.01)  # past compress_timeout: the compression ends on its thread
        assert grammar.compressed_error is not None
        kept.append(weakref.ref(grammar))
    del broken, late, grammar
    deadline = time.monotonic() + 10
    while any(ref() is not None for ref in kept) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_failed_engine_leaves_no_cycle() -> None:
    """An error stored for another thread holds no frame (whose locals hold the grammar)."""
    pytest.importorskip("xgrammar")
    _failed_progressive()
    found = _unreachable_after(_failed_progressive)
    assert not found, found


def test_building_a_grammar_leaves_no_cycle() -> None:
    def build() -> None:
        s = Nonterminal("S")
        g = Grammar([Production(s, [ByteSet.single(97), s]), Production(s, [])], "S", ["T"])
        assert g.names == ("S", "T")

    build()
    found = _unreachable_after(build)
    assert not found, found


def test_reading_lark_leaves_no_cycle() -> None:
    def read() -> None:
        to_gnf(parse_lark(LARK))

    read()
    found = _unreachable_after(read)
    assert not found, found


def test_the_check_sees_a_cycle() -> None:
    """The oracle is not blind: a cycle made on purpose is found."""

    class Node:
        def __init__(self) -> None:
            self.me = self.method

        def method(self) -> None:
            pass

    assert _unreachable_after(lambda: np.asarray([Node() is not None])) != []
