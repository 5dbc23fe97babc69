"""The compressed XGrammar adapter against XGrammar used directly, on real grammars.

The oracle shares no code with the adapter: an ``xgrammar.TokenizerInfo`` built from the
vocabulary's own token bytes (special tokens keep their labels; the stop tokens are the
vocabulary's), ``xgrammar.GrammarCompiler(...).compile_grammar(text)``, one
``xgrammar.GrammarMatcher`` per walk and ``xgrammar.BatchGrammarMatcher`` for batches.
Nothing of ``formalgram_cfgzip.engines`` is on that side, so the special-token policy of
``formalgram_cfgzip/engines/base.py`` is not either.  The adapter's side is the public path:
``compress()`` classes and ``engines.compile_grammar(classes, text, engine="xgrammar")``, and the
native engine (``engine="native"``, no XGrammar inside) the same way.

At every step of seeded walks (biased to long tokens, sometimes a stop token) the two masks
are compared at every logit index.  They may differ only where the policy says so, and the
test predicts that set exactly:

* a special token that is not a stop token: the adapter never allows it; raw XGrammar reads
  its label as text and allows it exactly when the label continues the text read so far
  (predicted with the Earley recognizer of ``formalgram.recognize``, a third party to both
  sides).  Example: inside a JSON string, ``<|reserved_special_token_0|>`` is text to raw
  XGrammar.
* a stop token: both allow it exactly when the grammar can end here (XGrammar never reads a
  stop token as text), so no difference is allowed.
* padding ids (Qwen3's logit width exceeds its vocabulary): both never allow them.  Neither
  Llama-3 nor Qwen3 has holes or text tokens with empty bytes (test_engines.py covers those
  on a hand-made vocabulary).

Every other index must agree, so a token the compression lost or added shows up as a
difference outside the predicted set.  The walks also compare ``accept_token`` on tokens
outside the masks, rollback, and termination after a stop token.  ``-m heavy`` adds the big
grammars and every JSON-schema grammar.
"""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import _data
import numpy as np
import pytest
from _engine_oracle import raw_xgrammar_tokenizer, row_tokens, take_token, walk_weights

xgr = pytest.importorskip("xgrammar")

from bench.native_earley_check import earley_viable  # noqa: E402
from formalgram import parse_gbnf  # noqa: E402
from formalgram.recognize.earley import EarleyRecognizer  # noqa: E402
from formalgram_cfgzip import engines  # noqa: E402
from formalgram_cfgzip.classes import TokenClasses  # noqa: E402
from formalgram_cfgzip.compress import compress  # noqa: E402
from formalgram_cfgzip.engines.base import CompiledGrammar  # noqa: E402
from formalgram_cfgzip.engines.matcher import EngineMatcher  # noqa: E402
from formalgram_cfgzip.vocabulary import Vocabulary  # noqa: E402

pytestmark = pytest.mark.xgrammar

# (grammar, vocabulary, batch): a JSON grammar, a C grammar, a SynCode grammar and a
# JSON-schema grammar with Llama-3 at batch 1 and 8, and JSON with Qwen3 for its padding ids
_DEFAULT_GRAMMARS = [
    "transformers_cfg/json.ebnf",
    "llama_cpp/c.gbnf",
    "derived/lark_via_xgrammar/c_syncode.gbnf",
    "json_schemas/purchase_order.gbnf",
]
DEFAULT_CASES = [(rel, "llama3", batch) for rel in _DEFAULT_GRAMMARS for batch in (1, 8)]
DEFAULT_CASES.append(("transformers_cfg/json.ebnf", "qwen3", 1))
_HEAVY_GRAMMARS = [
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    "llama_cpp/chess.gbnf",
    "transformers_cfg/calflow.ebnf",
    *(f"json_schemas/{name}.gbnf" for name in _data.json_schema_names()),
]
HEAVY_CASES = [
    (rel, vocab, batch) for rel in _HEAVY_GRAMMARS for vocab in ("llama3", "qwen3") for batch in (1, 8)
]
STEPS = {1: 48, 8: 14}  # steps per walk for each batch size
STOP_CHANCE = 0.2  # chance of taking a stop token when one is allowed
MAX_DEPTH = 24  # tokens a walk takes before it starts again


# -- shared per test session ------------------------------------------------------------
@cache
def _vocab(name: str) -> Vocabulary:
    return Vocabulary.builtin(name)


def _compress(rel: str, vocab_name: str) -> TokenClasses:
    with warnings.catch_warnings():
        # rules deriving no string would make XGrammar's masks differ (compress warns)
        warnings.simplefilter("error")
        return compress(
            _data.real_grammar(rel).read_text(encoding="utf-8"), _vocab(vocab_name), progress=False
        )


@cache
def _raw_tokenizer(vocab_name: str) -> Any:
    """XGrammar's tokenizer over the vocabulary's own bytes: no policy applied."""
    return raw_xgrammar_tokenizer(_vocab(vocab_name))


@pytest.fixture(scope="session")
def classes_for() -> Callable[[str, str], TokenClasses]:
    """compress() results, computed once per (grammar, vocabulary) in a test session."""
    return cache(_compress)


# -- helpers ------------------------------------------------------------------------------


class Lane:
    """One walk: raw XGrammar's matcher, the adapter's, and the Earley recognizer."""

    def __init__(self, raw: Any, adapter: CompiledGrammar, grammar_rec: EarleyRecognizer) -> None:
        self.raw = xgr.GrammarMatcher(raw)
        self.adapter: EngineMatcher = adapter.matcher()
        self.fresh = grammar_rec
        self.rec = grammar_rec.copy()
        self.depth = 0  # tokens accepted since the last reset

    def reset(self) -> None:
        self.raw.reset()
        self.adapter.reset()
        self.rec = self.fresh.copy()
        self.depth = 0


def _walk(
    rel: str, vocab_name: str, batch: int, seed: int, classes: TokenClasses, engine: str = "xgrammar"
) -> None:
    """Walk ``batch`` lanes in lockstep for ``STEPS[batch]`` steps, checking every step.

    ``engine`` runs the adapter's side: ``"xgrammar"`` over the classes, or ``"native"`` (masks
    read off the displacements, no XGrammar inside), whose acceptance is its mask: where raw
    XGrammar accepts a token outside its own mask, the native engine refuses it, and the
    Earley recognizer must refuse it too (the disagreement is XGrammar's).
    """
    vocab = _vocab(vocab_name)
    width = vocab.logit_width
    text = _data.real_grammar(rel).read_text(encoding="utf-8")
    raw = xgr.GrammarCompiler(_raw_tokenizer(vocab_name), max_threads=1, cache_enabled=False).compile_grammar(
        text
    )
    adapter = engines.compile_grammar(classes, text, engine=engine)  # type: ignore[arg-type]
    start = EarleyRecognizer(parse_gbnf(text))
    stops = set(vocab.stop_ids)
    labels = sorted(
        (t, i) for i, t in enumerate(vocab.tokens) if i in vocab.special_ids and i not in stops and t
    )
    weights = walk_weights(vocab)
    lanes = [Lane(raw, adapter, start) for _ in range(batch)]
    words = (width + 31) // 32
    raw_bm = np.zeros((batch, words), dtype=np.int32)
    ad_bm = adapter.allocate_token_bitmask(batch)
    batch_raw = xgr.BatchGrammarMatcher(1)
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    taken = 0  # tokens the walks took (stop tokens included)
    for step in range(STEPS[batch]):
        # lane i fills row order[i] on both sides (the batch fills' indices argument)
        order = list(range(batch))
        rng.shuffle(order)
        if batch == 1:
            lanes[0].raw.fill_next_token_bitmask(raw_bm, 0)
            lanes[0].adapter.fill_next_token_bitmask(ad_bm, 0)
        else:
            batch_raw.batch_fill_next_token_bitmask([ln.raw for ln in lanes], raw_bm, indices=order)
            adapter.fill_next_token_bitmask_batch([ln.adapter for ln in lanes], ad_bm, indices=order)
        for lane, row in zip(lanes, order, strict=True):
            where = f"{rel} {vocab_name} batch {batch} step {step} row {row} after {lane.rec.position} bytes"
            got, want = row_tokens(ad_bm[row], width), row_tokens(raw_bm[row], width)
            predicted = earley_viable(lane.rec, labels)
            assert not got - want, (
                f"{where}: the adapter allows what raw XGrammar does not: {sorted(got - want)[:10]}"
            )
            assert want - got == predicted, (
                f"{where}: raw XGrammar allows {sorted(want - got)[:10]} that the adapter does not; "
                f"the policy predicts exactly the special tokens {sorted(predicted)[:10]}"
            )
            if not got or lane.depth >= MAX_DEPTH:
                lane.reset()  # a dead end (nothing may follow, the grammar cannot end), or long enough
                continue
            # a text token outside both masks: refused alike (XGrammar 0.2.9 may accept a
            # token its mask does not show; then both must, and it is undone)
            other = int(nprng.integers(vocab.size))
            if other not in want and other not in vocab.special_ids:
                acc = (bool(lane.raw.accept_token(other)), lane.adapter.accept_token(other))
                if engine == "native" and acc == (True, False):
                    data = vocab.tokens[other]
                    assert data is not None and not lane.rec.copy().feed_bytes(data), (
                        f"{where}: token {other} {data!r} accepted by raw XGrammar outside its mask, "
                        "refused by the native engine, but Earley accepts it"
                    )
                    lane.raw.rollback(1)
                    acc = (False, False)
                assert acc[0] == acc[1], f"{where}: token {other} outside the masks accepted {acc}"
                if acc[0]:
                    lane.raw.rollback(1)
                    lane.adapter.rollback(1)
            allowed_stops = sorted(got & stops)
            pool = np.fromiter(got - stops, dtype=np.int64)
            if allowed_stops and (rng.random() < STOP_CHANCE or pool.size == 0):
                tok = rng.choice(allowed_stops)
                assert lane.raw.accept_token(tok) and lane.adapter.accept_token(tok), where
                assert lane.raw.is_terminated() and lane.adapter.is_terminated(), where
                taken += 1
                assert lane.rec.is_accepting(), f"{where}: a stop token allowed where Earley cannot end"
                one = adapter.allocate_token_bitmask(1)
                one[:] = -1
                lane.adapter.fill_next_token_bitmask(one)
                assert not one.any(), f"{where}: the adapter allows tokens after a stop token"
                with pytest.raises(RuntimeError):
                    lane.raw.fill_next_token_bitmask(np.zeros((1, words), dtype=np.int32))
                lane.reset()
                continue
            data = take_token(
                lane,
                pool,
                weights,
                nprng,
                vocab,
                where,
                lane.raw.accept_token,
                functools.partial(lane.raw.rollback, 1),
                step % 5 == 4,
            )
            taken += 1
    # the walks moved on at almost every step (a lane starts again after MAX_DEPTH tokens):
    # masks that were empty on both sides would agree and check nothing
    assert taken >= STEPS[batch] * batch * 3 // 4, (taken, STEPS[batch] * batch)


@pytest.mark.parametrize(("rel", "vocab_name", "batch"), DEFAULT_CASES)
def test_adapter_matches_raw_xgrammar(
    rel: str, vocab_name: str, batch: int, classes_for: Callable[[str, str], TokenClasses]
) -> None:
    _walk(rel, vocab_name, batch, seed=batch, classes=classes_for(rel, vocab_name))


@pytest.mark.heavy
@pytest.mark.parametrize(("rel", "vocab_name", "batch"), HEAVY_CASES)
def test_adapter_matches_raw_xgrammar_heavy(
    rel: str, vocab_name: str, batch: int, classes_for: Callable[[str, str], TokenClasses]
) -> None:
    _walk(rel, vocab_name, batch, seed=100 + batch, classes=classes_for(rel, vocab_name))


# the native engine against raw XGrammar: a JSON grammar, a C grammar and a JSON-schema grammar
# with Llama-3 at batch 1 and 8 by default; every shared grammar with three vocabularies heavy
NATIVE_CASES = [
    (rel, "llama3", batch)
    for rel in ("llama_cpp/c.gbnf", "json_schemas/purchase_order.gbnf")
    for batch in (1, 8)
]
NATIVE_CASES.append(("transformers_cfg/json.ebnf", "llama3", 1))
NATIVE_HEAVY_CASES = [
    (rel, vocab, batch)
    for rel in ["derived/lark_via_xgrammar/c_syncode.gbnf", *_HEAVY_GRAMMARS]
    for vocab in ("llama3", "qwen3", "o200k_harmony")
    for batch in (1, 8)
]
# the JSON-schema grammars of the shared corpus (json-mode-eval's schemas through XGrammar),
# in their numeric order; none when the corpus is absent
_JME = "derived/json_mode_eval_xgrammar/"
_JME_GRAMMARS = sorted(
    (rel for rel in _data.sweep_files() if rel.startswith(_JME)),
    key=lambda rel: (len(rel), rel),
)
NATIVE_HEAVY_CASES += [
    (rel, vocab, batch)
    for rel in _JME_GRAMMARS
    for vocab in ("llama3", "qwen3", "o200k_harmony")
    for batch in (1, 8)
]


@pytest.mark.parametrize(("rel", "vocab_name", "batch"), NATIVE_CASES)
def test_native_matches_raw_xgrammar(
    rel: str, vocab_name: str, batch: int, classes_for: Callable[[str, str], TokenClasses]
) -> None:
    _walk(rel, vocab_name, batch, seed=batch, classes=classes_for(rel, vocab_name), engine="native")


@pytest.mark.heavy
@pytest.mark.parametrize(("rel", "vocab_name", "batch"), NATIVE_HEAVY_CASES)
def test_native_matches_raw_xgrammar_heavy(
    rel: str, vocab_name: str, batch: int, classes_for: Callable[[str, str], TokenClasses]
) -> None:
    _walk(rel, vocab_name, batch, seed=100 + batch, classes=classes_for(rel, vocab_name), engine="native")
