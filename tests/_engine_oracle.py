"""The engine tests' oracles: what the full-vocabulary engine allows, run alone, and what
XGrammar allows used directly.

A fresh full-vocabulary matcher is fed the tokens and fills one row; nothing of the
compressed path (classes, expanders, processors) is involved.  :func:`raw_xgrammar_rows`
goes further: XGrammar's own ``TokenizerInfo`` over the vocabulary's bytes and its own
``GrammarMatcher``, nothing of ``formalgram_cfgzip.engines``; :func:`policy_allowed` turns
such a row into what the adapters' special-token policy allows (special tokens that are not
stop tokens are never allowed; raw XGrammar reads their labels as text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from formalgram import parse_gbnf
from formalgram.recognize.earley import EarleyRecognizer
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.vocabulary import Vocabulary


def mask_after(compiled: CompiledGrammar, tokens: list[int]) -> np.ndarray[Any, np.dtype[np.int32]]:
    """The token bitmask (one row) of a fresh matcher of ``compiled`` fed ``tokens``."""
    m = compiled.matcher()
    for t in tokens:
        assert m.accept_token(t), (tokens, t)
    out = compiled.allocate_token_bitmask(1)
    m.fill_next_token_bitmask(out)
    return out


def allowed_after(full: CompiledGrammar, tokens: list[int]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Which logits (``logit_width`` booleans) ``full`` allows after ``tokens``."""
    row = mask_after(full, tokens)[0]
    return np.unpackbits(row.view(np.uint8), bitorder="little")[: full.logit_width].astype(bool)


def raw_xgrammar_tokenizer(vocab: Vocabulary) -> Any:
    """XGrammar's tokenizer over the vocabulary's own bytes (special tokens keep their labels,
    the stop tokens are the vocabulary's): no policy of the adapters applied."""
    import xgrammar as xgr

    tokens = [t if t is not None else b"" for t in vocab.tokens]
    return xgr.TokenizerInfo(tokens, vocab_size=vocab.logit_width, stop_token_ids=sorted(vocab.stop_ids))


def raw_xgrammar_rows(
    text: str, vocab: Vocabulary, tokens: Sequence[int], tokenizer: Any = None
) -> list[set[int]]:
    """The ids raw XGrammar allows before each of ``tokens`` (fed in turn to one
    ``GrammarMatcher``), ``len(tokens)`` rows; ``tokenizer`` defaults to
    :func:`raw_xgrammar_tokenizer`."""
    import xgrammar as xgr

    info = raw_xgrammar_tokenizer(vocab) if tokenizer is None else tokenizer
    compiled = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False).compile_grammar(text)
    matcher = xgr.GrammarMatcher(compiled)
    width = vocab.logit_width
    bitmask = np.zeros((1, (width + 31) // 32), dtype=np.int32)
    rows: list[set[int]] = []
    for t in tokens:
        matcher.fill_next_token_bitmask(bitmask)
        bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[:width]
        rows.append(set(np.flatnonzero(bits).tolist()))
        assert matcher.accept_token(t), t
    return rows


def policy_allowed(text: str, vocab: Vocabulary, prefix: bytes, raw: set[int]) -> set[int]:
    """What the adapters allow where raw XGrammar allows ``raw`` after ``prefix``: ``raw``
    without the special tokens that are not stop tokens.  Raw XGrammar reads their labels as
    text: each one it allows must continue ``prefix`` by the Earley recognizer (checked)."""
    rec = EarleyRecognizer(parse_gbnf(text))
    assert rec.feed_bytes(prefix), prefix
    specials = {i for i in raw if i in vocab.special_ids and i not in vocab.stop_ids}
    for i in specials:
        label = vocab.tokens[i] or b""
        assert rec.copy().feed_bytes(label), f"raw XGrammar allows the label {label!r} after {prefix!r}"
    return raw - specials


def row_tokens(row: np.ndarray[Any, np.dtype[np.int32]], width: int) -> set[int]:
    """The token ids whose bit is set in one bitmask row (``width`` logits)."""
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:width]
    return set(np.flatnonzero(bits).tolist())


def walk_weights(vocab: Vocabulary) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The raw-engine walks' token weights: long tokens first (the squared length), runs of
    whitespace at weight 1 (many in a row make the Earley predictor cubic in the run), special
    tokens and holes at 0."""
    weights = np.zeros(vocab.logit_width, dtype=np.float64)
    for i, t in enumerate(vocab.tokens):
        if t and i not in vocab.special_ids:
            weights[i] = 1.0 if t.isspace() else float(len(t)) ** 2
    return weights


def take_token(
    lane: Any,
    pool: np.ndarray[Any, np.dtype[np.int64]],
    weights: np.ndarray[Any, np.dtype[np.float64]],
    nprng: np.random.Generator,
    vocab: Vocabulary,
    where: str,
    raw_accept: Callable[[int], bool],
    raw_rollback: Callable[[], object],
    replay: bool,
) -> bytes:
    """One step of a raw-engine walk: a token of ``pool`` drawn by ``weights``, fed to the
    lane's Earley recognizer (``lane.rec``), the raw engine (``raw_accept``) and the adapter
    (``lane.adapter``), all three taking it; with ``replay``, all three rolled back and fed it
    again (``raw_rollback`` may return ``False`` for a refused rollback).  Returns its bytes."""
    w = weights[pool]
    tok = int(nprng.choice(pool, p=w / w.sum()))
    data = vocab.tokens[tok]
    assert data is not None
    before = lane.rec.copy()
    assert lane.rec.feed_bytes(data), f"{where}: token {tok} {data!r} is allowed but Earley refuses it"
    assert raw_accept(tok) and lane.adapter.accept_token(tok), where
    if replay:  # rollback, then the same token again
        assert raw_rollback() is not False, where
        lane.adapter.rollback(1)
        lane.rec = before
        assert lane.rec.feed_bytes(data)
        assert raw_accept(tok) and lane.adapter.accept_token(tok), where
    lane.depth += 1
    return data
