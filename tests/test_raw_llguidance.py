"""The compressed llguidance adapter against llguidance used directly, on real grammars.

The oracle shares no code with the adapter: an ``llguidance.LLTokenizer`` built by
``LLTokenizer.from_tiktoken`` from the vocabulary's own tokens (text tokens as BPE ranks,
special tokens as llguidance's special tokens under their labels, the vocabulary's stop
tokens as its EOS tokens, the logit width as its size), the grammar text through
``llguidance.grammar_from("gbnf", text)`` unchanged, one ``llguidance.LLMatcher`` per walk,
``llguidance.numpy.fill_next_token_bitmask`` for one row and
``fill_next_token_bitmask_par`` for a batch.  Nothing of ``formalgram_cfgzip.engines`` is on
that side (the adapter's token list, its special-token policy, its reprinting of grammars
llguidance's converter refuses).  The adapter's side is the public path: ``compress()``
classes and ``engines.compile_grammar(classes, text, engine="llguidance")``.

The grammars are those llguidance's own GBNF converter reads as they are and reads in the
language of the grammar (tests/test_engines.py lists those it reads otherwise).  At every
step of seeded walks (biased to long tokens, sometimes a stop token) the two masks are
compared at every logit index.  llguidance never reads a special token as text, so the
adapter's policy (a special token that is not a stop token is never allowed; a stop token
exactly where the grammar can end; padding ids never) predicts no difference there.

**Where the grammar forces bytes the masks depend on the tokenizer.**  When the text read so
far leaves one way on (``LLMatcher.compute_ff_bytes()`` is not empty), llguidance allows only
the first token of its tokenizer's tokenization of the forced bytes, not every token that
continues the text (a known llguidance behaviour, reported upstream).  The
adapter's llguidance engines, full-vocabulary reference included, tokenize forced bytes by
greedy longest match over their own tokens (``formalgram_cfgzip/engines/llguidance.py``), so
they pick another token than llguidance with the model's BPE tokenizer: after ``fl`` in a C
grammar where only ``float`` may follow, llguidance with Llama-3's BPE allows ``o`` (``oat``
is ``o`` + ``at``), the adapter ``oa``, and the Earley recognizer both
(:func:`test_forced_bytes_are_narrowed_by_each_tokenizer`).  No class partition can
reproduce such a narrowing, which depends on the tokenizer and not on the language.  At
those steps the test checks that both masks are non-empty, allow only tokens that continue
the forced bytes and that Earley accepts; everywhere else the masks must be bit-identical,
and most steps are such steps.

Every token a walk takes is checked with the Earley recognizer of ``formalgram.recognize``,
a third party to both sides; tokens outside the masks are refused alike; rollback and
termination after a stop token are compared too.
"""

from __future__ import annotations

import functools
import os
import random
from functools import cache
from typing import Any

import _data
import numpy as np
import pytest
from _engine_oracle import row_tokens, take_token, walk_weights

llg = pytest.importorskip("llguidance")
pytest.importorskip("quicktok")

import llguidance.numpy  # noqa: E402

from formalgram import parse_gbnf  # noqa: E402
from formalgram.recognize.earley import EarleyRecognizer  # noqa: E402
from formalgram_cfgzip import engines  # noqa: E402
from formalgram_cfgzip.classes import TokenClasses  # noqa: E402
from formalgram_cfgzip.compress import compress  # noqa: E402
from formalgram_cfgzip.engines.base import CompiledGrammar, EngineMatcher  # noqa: E402
from formalgram_cfgzip.vocabulary import Vocabulary  # noqa: E402

pytestmark = pytest.mark.llguidance

# (grammar, vocabulary, batch): JSON, C and SynCode's C with Llama-3 at batch 1 and 8, and
# JSON with Qwen3 for its padding ids
CASES = [
    (rel, "llama3", batch)
    for rel in ("transformers_cfg/json.ebnf", "llama_cpp/c.gbnf", "derived/lark_via_xgrammar/c_syncode.gbnf")
    for batch in (1, 8)
]
CASES.append(("transformers_cfg/json.ebnf", "qwen3", 1))
STEPS = {1: 40, 8: 12}  # steps per walk for each batch size
STOP_CHANCE = 0.2  # chance of taking a stop token when one is allowed
MAX_DEPTH = 24  # tokens a walk takes before it starts again
# a pre-tokenization pattern for llguidance's own tokenizing of forced text (GPT-4's); it
# changes how llguidance would split text, never which tokens a mask allows
_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@cache
def _vocab(name: str) -> Vocabulary:
    return Vocabulary.builtin(name)


@cache
def _raw_tokenizer(vocab_name: str) -> Any:
    """llguidance's tokenizer over the vocabulary's own tokens: no policy of the adapter."""
    v = _vocab(vocab_name)
    ranks: dict[bytes, int] = {}
    special: dict[str, int] = {}
    for i, t in enumerate(v.tokens):
        if t is None:
            continue
        if i in v.special_ids:
            special[t.decode("utf-8")] = i
        else:
            ranks[t] = i
    return llg.LLTokenizer.from_tiktoken(
        encoder=ranks,
        special_tokens=special,
        pattern=_PATTERN,
        eos_token=sorted(v.stop_ids),
        n_vocab=v.logit_width,
    )


@cache
def _classes(rel: str, vocab_name: str) -> TokenClasses:
    return compress(_data.grammar(rel).read_text(encoding="utf-8"), _vocab(vocab_name), progress=False)


class Lane:
    """One walk: llguidance's own matcher, the adapter's, and the Earley recognizer."""

    def __init__(self, raw: Any, adapter: CompiledGrammar, grammar_rec: EarleyRecognizer) -> None:
        self.raw = raw.deep_copy()
        self.adapter: EngineMatcher = adapter.matcher()
        self.fresh = grammar_rec
        self.rec = grammar_rec.copy()
        self.depth = 0
        self.text = b""  # what the walk has read

    def reset(self) -> None:
        assert self.raw.reset()
        self.adapter.reset()
        self.rec = self.fresh.copy()
        self.depth = 0
        self.text = b""


def _walk(rel: str, vocab_name: str, batch: int, seed: int) -> None:
    vocab = _vocab(vocab_name)
    width = vocab.logit_width
    text = _data.grammar(rel).read_text(encoding="utf-8")
    raw = llg.LLMatcher(_raw_tokenizer(vocab_name), llg.grammar_from("gbnf", text), log_level=0)
    assert not raw.is_error(), raw.get_error()
    adapter = engines.compile_grammar(_classes(rel, vocab_name), text, engine="llguidance")
    start = EarleyRecognizer(parse_gbnf(text))
    stops = set(vocab.stop_ids)
    weights = walk_weights(vocab)
    lanes = [Lane(raw, adapter, start) for _ in range(batch)]
    raw_bm = np.zeros((batch, (width + 31) // 32), dtype=np.int32)
    ad_bm = adapter.allocate_token_bitmask(batch)
    executor = llg.LLExecutor(1)
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    taken = 0
    free = narrowed = 0  # steps compared bit for bit, and steps where bytes were forced
    for step in range(STEPS[batch]):
        order = list(range(batch))
        rng.shuffle(order)
        if batch == 1:
            llguidance.numpy.fill_next_token_bitmask(lanes[0].raw, raw_bm, 0)
            lanes[0].adapter.fill_next_token_bitmask(ad_bm, 0)
        else:
            pairs = [(ln.raw, row) for ln, row in zip(lanes, order, strict=True)]
            llguidance.numpy.fill_next_token_bitmask_par(executor, pairs, raw_bm)
            adapter.fill_next_token_bitmask_batch([ln.adapter for ln in lanes], ad_bm, indices=order)
        for lane, row in zip(lanes, order, strict=True):
            where = f"{rel} {vocab_name} batch {batch} step {step} row {row} after {lane.text!r}"
            assert not lane.raw.is_error(), f"{where}: {lane.raw.get_error()}"
            got, want = row_tokens(ad_bm[row], width), row_tokens(raw_bm[row], width)
            forced = bytes(lane.raw.compute_ff_bytes())
            if forced:  # narrowed by each side's tokenizer (module docstring)
                narrowed += 1
                for t in got | want:
                    data = vocab.tokens[t]
                    assert data is not None and (data.startswith(forced) or forced.startswith(data)), (
                        f"{where}: token {t} {data!r} does not continue the forced bytes {forced!r}"
                    )
                    assert lane.rec.copy().feed_bytes(data), f"{where}: {data!r} allowed, Earley refuses it"
                assert got and want, where
                got = want = got & want
            else:
                free += 1
                assert got == want, (
                    f"{where}: only the adapter allows {sorted(got - want)[:10]}, "
                    f"only llguidance allows {sorted(want - got)[:10]}"
                )
            if not got or lane.depth >= MAX_DEPTH:
                lane.reset()
                continue
            # a text token outside both masks: refused alike
            other = int(nprng.integers(vocab.size))
            if other not in want and other not in vocab.special_ids:
                assert lane.raw.validate_tokens([other]) == 0, f"{where}: llguidance validates {other}"
                assert not lane.adapter.accept_token(other), f"{where}: the adapter accepts {other}"
            allowed_stops = sorted(got & stops)
            pool = np.fromiter(got - stops, dtype=np.int64)
            if allowed_stops and (rng.random() < STOP_CHANCE or pool.size == 0):
                tok = rng.choice(allowed_stops)
                assert lane.rec.is_accepting(), f"{where}: a stop token allowed where Earley cannot end"
                assert lane.raw.consume_token(tok) and lane.adapter.accept_token(tok), where
                assert lane.raw.is_stopped() and lane.adapter.is_terminated(), where
                taken += 1
                lane.reset()
                continue
            data = take_token(
                lane,
                pool,
                weights,
                nprng,
                vocab,
                where,
                lane.raw.consume_token,
                functools.partial(lane.raw.rollback, 1),
                step % 5 == 4,
            )
            lane.text += data
            taken += 1
    # the walks moved on at almost every step: masks empty on both sides would check nothing;
    # most steps were compared bit for bit
    if os.environ.get("FORMALGRAM_PRINT_CHECKED") == "1":
        print(f"\n{rel} {vocab_name} batch {batch}: {taken} tokens, {free} free, {narrowed} forced steps")
    assert taken >= STEPS[batch] * batch * 3 // 4, (taken, STEPS[batch] * batch)
    assert free >= 3 * narrowed, (free, narrowed)


@pytest.mark.parametrize(("rel", "vocab_name", "batch"), CASES)
def test_adapter_matches_raw_llguidance(rel: str, vocab_name: str, batch: int) -> None:
    _walk(rel, vocab_name, batch, seed=batch)


def test_forced_bytes_are_narrowed_by_each_tokenizer() -> None:
    """After ``fl`` in llama.cpp's C grammar only ``float`` may follow (a type opens every
    declaration).  Earley accepts both ``o`` and ``oa`` next; llguidance with Llama-3's BPE
    allows ``o`` alone (its tokenization of ``oat``), the adapter ``oa`` alone (greedy longest
    match), whose full-vocabulary reference agrees with it."""
    rel, vocab = "llama_cpp/c.gbnf", _vocab("llama3")
    text = _data.grammar(rel).read_text(encoding="utf-8")
    fl, o, oa = (vocab.tokens.index(t) for t in (b"fl", b"o", b"oa"))
    raw = llg.LLMatcher(_raw_tokenizer("llama3"), llg.grammar_from("gbnf", text), log_level=0)
    assert raw.consume_token(fl) and bytes(raw.compute_ff_bytes()) == b"oat"
    row = np.zeros((1, (vocab.logit_width + 31) // 32), dtype=np.int32)
    llguidance.numpy.fill_next_token_bitmask(raw, row, 0)
    assert row_tokens(row[0], vocab.logit_width) == {o}
    rec = EarleyRecognizer(parse_gbnf(text))
    assert rec.feed_bytes(b"fl") and rec.copy().feed_bytes(b"o") and rec.copy().feed_bytes(b"oa")
    for compiled in (
        engines.compile_grammar(_classes(rel, "llama3"), text, engine="llguidance"),
        engines.compile_full(vocab, text, engine="llguidance"),
    ):
        m = compiled.matcher()
        assert m.accept_token(fl)
        mask = compiled.allocate_token_bitmask(1)
        m.fill_next_token_bitmask(mask)
        assert row_tokens(mask[0], vocab.logit_width) == {oa}
