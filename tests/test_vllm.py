"""The vLLM adapter inside vLLM's own logits-processor classes (skipped without vLLM).

The adapter class subclasses vLLM's ``AdapterLogitsProcessor``; vLLM's ``BatchUpdate`` adds,
removes and moves requests, and the rows it masks are compared with raw XGrammar's masks
(``xgrammar.TokenizerInfo`` over the vocabulary's bytes, ``GrammarMatcher``), an oracle that
shares no code with the adapter.  ``LLM.generate`` itself runs in ``tests/test_serving_e2e.py``
(``-m heavy``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("xgrammar")
pytest.importorskip("vllm.v1.sample.logits_processor")

import torch
import xgrammar as xgr
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor, BatchUpdate

from formalgram_cfgzip.integrations.request_grammars import (
    RequestCompiler,
    grammar_text_for,
    shared_compressor,
)
from formalgram_cfgzip.integrations.vllm import vllm_adapter_class
from formalgram_cfgzip.vocabulary import Vocabulary

TOKENS = [
    b"{", b"}", b'"', b":", b",", b" ", b"a", b"b", b"ab", b"1", b"2", b"12", b'{"', b'":',
    b"true", b"false", b"x", b"=", b"ok", b'"ok"', b"\n", b"</s>",
]  # fmt: skip
STOP = len(TOKENS) - 1
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
    "required": ["ok"],
}


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Any:
    vocab = Vocabulary(TOKENS, special_ids=[STOP], stop_ids=[STOP])
    compiler = RequestCompiler(vocab, compressor=shared_compressor(vocab, tmp_path_factory.mktemp("c")))
    cls = vllm_adapter_class({"ab": compiler.compile("regex", "(ab)+")}, compiler=compiler)
    return cls(None, torch.device("cpu"), False)


def raw_matcher(kind: str, spec: str) -> Any:
    info = xgr.TokenizerInfo(list(TOKENS), xgr.VocabType.RAW, vocab_size=len(TOKENS), stop_token_ids=[STOP])
    return xgr.GrammarMatcher(
        xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar_text_for(kind, spec))
    )


def raw_allowed(matcher: Any) -> np.ndarray:
    bits = xgr.allocate_token_bitmask(1, len(TOKENS))
    matcher.fill_next_token_bitmask(bits)
    return np.unpackbits(bits.numpy().view(np.uint8), bitorder="little")[: len(TOKENS)].astype(bool)


def test_the_class_is_vllms_adapter(adapter: Any) -> None:
    assert isinstance(adapter, AdapterLogitsProcessor)
    assert not adapter.is_argmax_invariant()
    cls = type(adapter)
    cls.validate_params(SamplingParams(extra_args={"formalgram_json": SCHEMA}))
    cls.validate_params(SamplingParams(extra_args={"formalgram_grammar": "ab"}))
    cls.validate_params(SamplingParams())
    for extra, message in (
        ({"formalgram_grammar": "nope"}, "unknown grammar"),
        ({"formalgram_regex": "(a"}, "GrammarSyntaxError"),
        ({"formalgram_ebnf": 'root ::= "a"', "formalgram_regex": "a"}, "one grammar"),
        ({"formalgram_lark": 3}, "must be a string"),
    ):
        with pytest.raises(ValueError, match=message):
            cls.validate_params(SamplingParams(extra_args=extra))


def test_rows_follow_vllms_batch_updates(adapter: Any) -> None:
    requests = [
        ({"formalgram_json": SCHEMA}, "json", json.dumps(SCHEMA)),
        ({}, None, None),
        ({"formalgram_regex": "(ab|12)+x"}, "regex", "(ab|12)+x"),
        ({"formalgram_grammar": "ab"}, "regex", "(ab)+"),
    ]
    outputs: list[list[int]] = [[] for _ in requests]
    added = [
        (i, SamplingParams(extra_args=extra), [0, 1], outputs[i]) for i, (extra, _, _) in enumerate(requests)
    ]
    adapter.update_state(BatchUpdate(batch_size=len(requests), removed=[], added=added, moved=[]))
    oracles = {i: raw_matcher(kind, spec) for i, (_, kind, spec) in enumerate(requests) if kind}
    rng = np.random.default_rng(0)
    for step in range(12):
        logits = torch.zeros(len(requests), len(TOKENS))
        adapter.apply(logits)
        assert torch.equal(logits[1], torch.zeros(len(TOKENS)))  # no grammar: untouched
        for i, oracle in oracles.items():
            if oracle.is_terminated():
                continue
            allowed = raw_allowed(oracle)
            assert np.array_equal(torch.isfinite(logits[i]).numpy(), allowed), (i, step, outputs[i])
            tok = int(rng.choice(np.flatnonzero(allowed)))
            assert oracle.accept_token(tok)
            outputs[i].append(tok)  # vLLM appends to the very list it handed over
    # request 0 leaves; request 3 moves into its row
    adapter.update_state(BatchUpdate(batch_size=3, removed=[0], added=[], moved=[(3, 0, _one_way())]))
    logits = torch.zeros(3, len(TOKENS))
    adapter.apply(logits)
    if not oracles[3].is_terminated():
        assert np.array_equal(torch.isfinite(logits[0]).numpy(), raw_allowed(oracles[3]))


def _one_way() -> Any:
    from vllm.v1.sample.logits_processor import MoveDirectionality

    return MoveDirectionality.UNIDIRECTIONAL
