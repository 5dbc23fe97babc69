"""``bench/native_earley_check.py``'s core on a small grammar: zero mismatches for the native
engine, and a mismatch reported for every kind of wrong mask (the check can fail)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from bench.native_earley_check import VocabView, check_walks, earley_viable
from formalgram import EarleyRecognizer, parse_gbnf
from formalgram_cfgzip import Vocabulary, compress, engines
from formalgram_cfgzip.engines.matcher import Matcher

GRAMMAR = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= "a" | "bb" | root'
TOKENS = [b"[", b"]", b",", b"a", b"b", b"bb", b"a,", b"],", b"[[", b"x", b"ab", b"]]"]


def _vocab() -> Vocabulary:
    n = len(TOKENS)
    return Vocabulary([*TOKENS, b"<s>", b"</s>"], special_ids=[n, n + 1], stop_ids=[n + 1])


class _Tampered:
    """A matcher whose masks are the native engine's with one bit changed by ``edit``."""

    def __init__(self, inner: Matcher, edit: Callable[[Any], None]) -> None:
        self.inner = inner
        self.edit = edit

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        self.inner.fill_next_token_bitmask(bitmask, index)
        self.edit(bitmask[index])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _run(edit: Callable[[Any], None] | None) -> int:
    vocab = _vocab()
    classes = compress(GRAMMAR, vocab, progress=False)
    compiled = engines.compile_grammar(classes, GRAMMAR, engine="native")
    view = VocabView(vocab, classes.representatives.tolist())

    def new() -> Matcher:
        m = compiled.matcher()
        return m if edit is None else _Tampered(m, edit)

    res = check_walks(
        parse_gbnf(GRAMMAR),
        new,
        view,
        steps=60,
        seed=1,
        allowed=4,
        near=4,
        refused=2,
        reps_every=3,
        sentences=0.5,
        sentence_len=12,
    )
    assert res.steps == 60 and res.tokens_taken > 20 and res.earley_checks > 100
    assert res.sentence_walks > 0 and res.complete_steps > 0
    return res.mismatches


def _flip(tok: int) -> Callable[[Any], None]:
    def edit(row: Any) -> None:
        row.view(np.uint8)[tok // 8] ^= np.uint8(1 << (tok % 8))

    return edit


def test_native_masks_have_no_mismatch() -> None:
    assert _run(None) == 0


@pytest.mark.parametrize(
    "tok",
    [
        TOKENS.index(b"a,"),  # decided past the first byte (a sampled or representative token)
        TOKENS.index(b"]"),  # a single byte
        TOKENS.index(b"x"),  # never allowed: its first byte is refused everywhere
        len(TOKENS),  # a special token
        len(TOKENS) + 1,  # the stop token
    ],
)
def test_a_wrong_bit_is_reported(tok: int) -> None:
    assert _run(_flip(tok)) > 0


def test_earley_viable_reads_shared_prefixes_once() -> None:
    rec = EarleyRecognizer(parse_gbnf(GRAMMAR))
    assert rec.feed_bytes(b"[a")
    tokens = sorted((t, i) for i, t in enumerate(TOKENS))
    assert earley_viable(rec, tokens) == {TOKENS.index(b"]"), TOKENS.index(b",")}  # not "]," nor "]]"
