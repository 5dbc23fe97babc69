"""transformers LogitsProcessor and vLLM-style per-request processor (proof: proofs/engine_adapter.md).

Compressed and full-vocabulary grammars must give identical generations (greedy and
seeded sampling), and every generated text must be a prefix of the language according to
formalgram's Earley recognizer (an oracle independent of both engines).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import formalgram
from formalgram_cfgzip.classes import compress
from formalgram_cfgzip.engines.base import CompiledGrammar, EngineError
from formalgram_cfgzip.integrations.transformers import GrammarLogitsProcessor, GrammarViolation
from formalgram_cfgzip.integrations.vllm import RequestGrammarProcessor, vllm_adapter_class
from formalgram_cfgzip.vocabulary import Vocabulary

torch: Any = pytest.importorskip("torch")
xgr_engine = pytest.importorskip("formalgram_cfgzip.engines.xgrammar")
llg_engine = pytest.importorskip("formalgram_cfgzip.engines.llguidance")

GRAMMAR = 'root ::= item ("," ws item)* "."\nitem ::= [a-c]+ | "(" root ")"\nws ::= " "?'
TOKENS: list[bytes | None] = [
    b"a", b"b", b"c", b"ab", b"abc", b",", b", ", b" ", b".", b"(", b")", b"((", b"a,", b"c.",
    b"x", None, b"<s>", b"</s>", b"", b"ba", b"cc", b").", b"),", b"<pad>",
]  # fmt: skip
SPECIAL = [16, 17, 23]
STOP = [17]


def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, special_ids=SPECIAL, stop_ids=STOP, logit_width=40, name="toy")


def compiled_pair(engine: Any) -> tuple[CompiledGrammar, CompiledGrammar]:
    v = vocab()
    return engine.compile(compress(GRAMMAR, v, progress=False), GRAMMAR), engine.compile_full(v, GRAMMAR)


def decode(v: Vocabulary, ids: list[int]) -> bytes:
    return b"".join(v.tokens[i] or b"" for i in ids if i not in v.stop_ids and i not in v.special_ids)


@pytest.mark.parametrize("engine", [xgr_engine, llg_engine], ids=["xgrammar", "llguidance"])
def test_transformers_generate_identical(engine: Any) -> None:
    transformers = pytest.importorskip("transformers")
    v = vocab()
    small, full = compiled_pair(engine)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=v.logit_width, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).eval()
    prompt = torch.full((3, 1), 16, dtype=torch.long)
    g = formalgram.parse_gbnf(GRAMMAR)

    def gen(compiled: CompiledGrammar, sample: bool) -> Any:
        torch.manual_seed(7)
        with torch.no_grad():
            return model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=sample,
                temperature=1.0 if sample else None, top_k=None, top_p=None,
                logits_processor=transformers.LogitsProcessorList([GrammarLogitsProcessor(compiled)]),
                eos_token_id=STOP, pad_token_id=STOP[0],
            )  # fmt: skip

    for sample in (False, True):
        a, b = gen(full, sample), gen(small, sample)
        assert torch.equal(a, b)
        for row in a.tolist():
            text = decode(v, row[1:])
            assert formalgram.is_prefix(g, text), text
            if STOP[0] in row[1:]:
                assert formalgram.accepts(g, text), text


@pytest.mark.parametrize("engine", [xgr_engine, llg_engine], ids=["xgrammar", "llguidance"])
def test_request_processor_identical_and_rollback(engine: Any) -> None:
    v = vocab()
    small, full = compiled_pair(engine)
    g = formalgram.parse_gbnf(GRAMMAR)
    rng = np.random.default_rng(3)
    for trial in range(6):
        pa, pb = RequestGrammarProcessor(full), RequestGrammarProcessor(small)
        out: list[int] = []
        for _step in range(15):
            logits = torch.from_numpy(rng.standard_normal(v.logit_width).astype(np.float32))
            la, lb = pa(out, logits.clone()), pb(out, logits.clone())
            assert torch.equal(torch.isneginf(la), torch.isneginf(lb))
            tok = int(torch.argmax(la))
            if trial % 2 and len(out) > 2 and rng.random() < 0.3:
                out = out[:-2]  # preemption: the request's tokens got shorter
                continue
            out.append(tok)
            if tok in v.stop_ids:
                break
        assert formalgram.is_prefix(g, decode(v, out))


def test_request_processor_rejects_forbidden_token() -> None:
    small, _ = compiled_pair(xgr_engine)
    p = RequestGrammarProcessor(small)
    with pytest.raises(GrammarViolation):
        p([14], torch.zeros(40))  # "x" is not in the grammar


def test_logits_processor_rejects_forbidden_token() -> None:
    small, _ = compiled_pair(xgr_engine)
    p = GrammarLogitsProcessor(small)
    p(torch.zeros((1, 1), dtype=torch.long), torch.zeros((1, 40)))
    with pytest.raises(GrammarViolation):
        p(torch.tensor([[0, 14]]), torch.zeros((1, 40)))


def test_vllm_adapter_without_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(EngineError, match="vLLM"):
            vllm_adapter_class({})
    else:  # pragma: no cover - vLLM is not installed here
        assert isinstance(vllm_adapter_class({}), type)
