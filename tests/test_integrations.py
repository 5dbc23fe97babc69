"""transformers LogitsProcessor and vLLM-style per-request processor (proof: proofs/engine_adapter.md).

Compressed and full-vocabulary grammars must give identical generations (greedy and
seeded sampling), and every generated text must be a prefix of the language according to
formalgram's Earley recognizer (an oracle independent of both engines).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import torch
from _engine_oracle import allowed_after
from _needs import engine_param

import formalgram
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines import llguidance as llg_engine
from formalgram_cfgzip.engines import native as native_backend
from formalgram_cfgzip.engines import xgrammar as xgr_engine
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.errors import EngineError, GrammarViolation
from formalgram_cfgzip.expand import TorchMaskExpander
from formalgram_cfgzip.integrations.transformers import GrammarLogitsProcessor
from formalgram_cfgzip.integrations.vllm import EXTRA_ARG, RequestGrammarProcessor, vllm_adapter_class
from formalgram_cfgzip.vocabulary import Vocabulary

GRAMMAR = 'root ::= item ("," ws item)* "."\nitem ::= [a-c]+ | "(" root ")"\nws ::= " "?'
TOKENS: list[bytes | None] = [
    b"a", b"b", b"c", b"ab", b"abc", b",", b", ", b" ", b".", b"(", b")", b"((", b"a,", b"c.",
    b"x", None, b"<s>", b"</s>", b"", b"ba", b"cc", b").", b"),", b"<pad>",
]  # fmt: skip
SPECIAL = [16, 17, 23]
STOP = [17]


def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, special_ids=SPECIAL, stop_ids=STOP, logit_width=40, name="toy")


# the native engine over classes, against XGrammar's full-vocabulary reference (it has none)
native_engine = types.SimpleNamespace(
    compile_grammar=native_backend.compile_grammar, compile_full=xgr_engine.compile_full
)
# each case skips (with a reason) where its package is missing (native: XGrammar's reference)
ENGINES = [
    pytest.param(xgr_engine, marks=engine_param("xgrammar").marks, id="xgrammar"),
    pytest.param(llg_engine, marks=engine_param("llguidance").marks, id="llguidance"),
    pytest.param(native_engine, marks=engine_param("xgrammar").marks, id="native"),
]


def compiled_pair(engine: Any) -> tuple[CompiledGrammar, CompiledGrammar]:
    v = vocab()
    return engine.compile_grammar(compress(GRAMMAR, v, progress=False), GRAMMAR), engine.compile_full(
        v, GRAMMAR
    )


def decode(v: Vocabulary, ids: list[int]) -> bytes:
    return b"".join(v.tokens[i] or b"" for i in ids if i not in v.stop_ids and i not in v.special_ids)


@pytest.mark.parametrize("engine", ENGINES)
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

    stopped = 0
    for sample in (False, True):
        a, b = gen(full, sample), gen(small, sample)
        assert torch.equal(a, b)
        for row in a.tolist():
            text = decode(v, row[1:])
            assert formalgram.is_prefix(g, text), text
            if STOP[0] in row[1:]:
                assert formalgram.accepts(g, text), text
                stopped += 1
    assert stopped > 0  # the stop token was allowed only where the text may end: checked


@pytest.mark.parametrize("engine", ENGINES)
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


@pytest.mark.xgrammar
def test_request_processor_rejects_forbidden_token() -> None:
    small, _ = compiled_pair(xgr_engine)
    p = RequestGrammarProcessor(small)
    with pytest.raises(GrammarViolation):
        p([14], torch.zeros(40))  # "x" is not in the grammar


@pytest.mark.xgrammar
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


def generate_steps(processor: GrammarLogitsProcessor, prompt: Any, picks: list[list[int]]) -> list[Any]:
    """Drive ``processor`` as ``generate`` does: the prompt, then one column per step;
    returns the allowed logits of every row at every step."""
    ids = prompt
    seen = []
    for column in [*picks, None]:
        scores = processor(ids, torch.zeros((ids.shape[0], 40)))
        seen.append(~torch.isneginf(scores).numpy())
        if column is not None:
            ids = torch.cat([ids, torch.tensor(column)[:, None]], dim=1)
    return seen


@pytest.mark.parametrize("engine", ENGINES)
def test_logits_processor_reset_and_reuse(engine: Any) -> None:
    """One processor through two generate-style call sequences: after reset(), and also
    without it when the new sequences are not longer than the old ones, every step's
    mask is the full engine's for the new tokens (not the old sequences' state)."""
    small, full = compiled_pair(engine)
    processor = GrammarLogitsProcessor(small)
    first = [[9, 0], [0, 5]]  # one column per step: row 0 "(" "a", row 1 "a" ","
    second = [[1, 2], [2, 8]]  # row 0 "b" "c", row 1 "c" "."
    for columns, prompt_len in ((first, 3), (second, 5)):
        seen = generate_steps(processor, torch.full((2, prompt_len), 16), columns)
        for step in range(3):
            for row in range(2):
                want = allowed_after(full, [c[row] for c in columns[:step]])
                assert np.array_equal(seen[step][row], want), (columns, step, row)
        processor.reset()
    generate_steps(processor, torch.full((2, 3), 16), first)
    # no reset, and a new prompt not longer than where the last call ended: a new start
    seen = generate_steps(processor, torch.full((2, 4), 16), second[:1])
    for row in range(2):
        assert np.array_equal(seen[0][row], allowed_after(full, []))
        assert np.array_equal(seen[1][row], allowed_after(full, [second[0][row]]))
    # tokens appended several at a time (assisted decoding) are all fed to the matchers
    processor.reset()
    processor(torch.full((1, 2), 16), torch.zeros((1, 40)))
    scores = processor(torch.tensor([[16, 16, 9, 0, 5]]), torch.zeros((1, 40)))
    assert np.array_equal(~torch.isneginf(scores[0]).numpy(), allowed_after(full, [9, 0, 5]))
    with pytest.raises(GrammarViolation):
        processor(torch.tensor([[16, 16, 9, 0, 5, 7, 7]]), torch.zeros((1, 40)))


class _BatchUpdate(types.SimpleNamespace):
    """The fields of vLLM's ``BatchUpdate`` that the adapter reads."""


class _StandInAdapter:
    """A minimal stand-in for vLLM's ``AdapterLogitsProcessor`` (v1): rows are added with
    their sampling parameters and a live list of output token ids, removed, and at each step
    every row with a request-level processor gets ``(output_ids, logits[row])``."""

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self.device = device
        self.rows: dict[int, tuple[Any, list[int]]] = {}

    @classmethod
    def validate_params(cls, params: Any) -> None:
        return None

    def update_state(self, batch_update: Any) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _prompt_ids, output_ids in batch_update.added:
            processor = self.new_req_logits_processor(params)  # type: ignore[attr-defined]
            if processor is None:
                self.rows.pop(index, None)
            else:
                self.rows[index] = (processor, output_ids)

    def apply(self, logits: Any) -> Any:
        for index, (processor, output_ids) in self.rows.items():
            logits[index] = processor(output_ids, logits[index])
        return logits


def _install_standin_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["vllm", "vllm.v1", "vllm.v1.sample", "vllm.v1.sample.logits_processor"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["vllm.v1.sample.logits_processor"].AdapterLogitsProcessor = _StandInAdapter  # type: ignore[attr-defined]


@pytest.mark.parametrize("engine", ENGINES)
def test_vllm_adapter_request_path(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter class over a stand-in for vLLM's interface: requests naming a grammar get
    the full engine's masks at every step, others are untouched; requests come and go; one
    expander serves them all; an unknown grammar key is refused."""
    _install_standin_vllm(monkeypatch)
    small, full = compiled_pair(engine)
    built: list[Any] = []
    original = TorchMaskExpander.__init__

    def counting(self: Any, *args: Any, **kw: Any) -> None:
        built.append(self)
        original(self, *args, **kw)

    monkeypatch.setattr(TorchMaskExpander, "__init__", counting)
    adapter_class = vllm_adapter_class({"toy": small, "toy-full": full})
    assert issubclass(adapter_class, _StandInAdapter)
    adapter = adapter_class(None, torch.device("cpu"), False)
    assert adapter.is_argmax_invariant() is False
    with pytest.raises(EngineError, match="unknown grammar 'json'"):
        adapter_class.validate_params(types.SimpleNamespace(extra_args={EXTRA_ARG: "json"}))
    adapter_class.validate_params(types.SimpleNamespace(extra_args=None))
    adapter_class.validate_params(types.SimpleNamespace(extra_args={EXTRA_ARG: "toy"}))

    def params(key: str | None) -> Any:
        return types.SimpleNamespace(extra_args=None if key is None else {EXTRA_ARG: key})

    outputs: dict[int, list[int]] = {0: [], 1: [], 2: []}
    adapter.update_state(
        _BatchUpdate(
            batch_size=3,
            removed=[],
            added=[
                (0, params("toy"), [16], outputs[0]),
                (1, params(None), [16], outputs[1]),
                (2, params("toy-full"), [16], outputs[2]),
            ],
            moved=[],
        )
    )
    rng = np.random.default_rng(5)
    finished: set[int] = set()
    for step in range(8):
        if step == 4:  # request 0 finishes; a new request takes its row
            outputs[0] = []
            finished.discard(0)
            adapter.update_state(
                _BatchUpdate(
                    batch_size=3, removed=[0], added=[(0, params("toy"), [16, 16], outputs[0])], moved=[]
                )
            )
        logits = torch.from_numpy(rng.standard_normal((3, 40)).astype(np.float32))
        before = logits.clone()
        adapter.update_state(None)
        out = adapter.apply(logits)
        assert torch.equal(out[1], before[1])  # no grammar: untouched
        for row in (0, 2):
            if row in finished:  # a stop token was generated: nothing left to constrain
                assert torch.equal(out[row], before[row])
                continue
            allowed = ~torch.isneginf(out[row]).numpy()
            assert np.array_equal(allowed, allowed_after(full, outputs[row])), (step, row)
            assert torch.equal(out[row][allowed], before[row][allowed])
            choices = [t for t in np.flatnonzero(allowed) if t != STOP[0]] or [STOP[0]]
            outputs[row].append(int(rng.choice(choices)))  # vLLM appends to the live list
            if outputs[row][-1] == STOP[0]:
                finished.add(row)
        outputs[1].append(int(rng.integers(0, 40)))
    assert len(built) == 1  # one expander for every request of the compressed grammar
