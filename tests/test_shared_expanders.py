"""One expander per compiled grammar and device, shared by every matcher, processor and
request, and safe to share between threads.

Constructions are counted by wrapping the expanders' constructors; masks are compared
with the full-vocabulary engine's (the oracle), run alone in the test thread.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

import torch
from _build import c_param
from _engine_oracle import allowed_after
from _needs import engine_params

from formalgram_cfgzip import engines
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander
from formalgram_cfgzip.integrations.transformers import GrammarLogitsProcessor
from formalgram_cfgzip.integrations.vllm import RequestGrammarProcessor
from formalgram_cfgzip.vocabulary import Vocabulary

GRAMMAR = 'root ::= item ("," ws item)* "."\nitem ::= [a-c]+ | "(" root ")"\nws ::= " "?'
TOKENS: list[bytes | None] = [
    b"a", b"b", b"c", b"ab", b"abc", b",", b", ", b" ", b".", b"(", b")", b"((", b"a,", b"c.",
    b"x", None, b"<s>", b"</s>", b"", b"ba", b"cc", b").", b"),", b"<pad>",
]  # fmt: skip
STOP = 17
WIDTH = 40
ENGINE_NAMES = engine_params("xgrammar", "llguidance")


def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, special_ids=[16, 17, 23], stop_ids=[STOP], logit_width=WIDTH, name="toy")


def compiled_pair(engine: str) -> tuple[CompiledGrammar, CompiledGrammar]:
    v = vocab()
    small = engines.compile_grammar(compress(GRAMMAR, v, progress=False), GRAMMAR, engine=engine)
    return small, engines.compile_full(v, GRAMMAR, engine=engine)


def count_constructions(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    for cls in (TorchMaskExpander, MaskExpander):
        original = cls.__init__

        def counting(
            self: Any, *args: Any, _original: Any = original, _name: str = cls.__name__, **kw: Any
        ) -> None:
            counts[_name] += 1
            _original(self, *args, **kw)

        monkeypatch.setattr(cls, "__init__", counting)
    return counts


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_request_loop_builds_one_expander(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM-style loop: a new RequestGrammarProcessor per request, several steps each,
    all over one compiled grammar, builds one torch expander (which reuses the grammar's own
    CPU expander: no other is built), and every mask is the full engine's."""
    small, full = compiled_pair(engine)
    counts = count_constructions(monkeypatch)
    rng = np.random.default_rng(0)
    for _request in range(12):
        processor = RequestGrammarProcessor(small)
        out: list[int] = []
        for _step in range(6):
            logits = processor(out, torch.zeros(WIDTH))
            allowed = ~torch.isneginf(logits).numpy()
            assert np.array_equal(allowed, allowed_after(full, out))
            choices = np.flatnonzero(allowed)
            tok = int(rng.choice(choices))
            if tok == STOP:
                break
            out.append(tok)
    assert counts == Counter({"TorchMaskExpander": 1})
    assert small.torch_expander("cpu") is small.torch_expander(torch.device("cpu"))
    assert counts["TorchMaskExpander"] == 1


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_generate_loop_builds_one_expander(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transformers generate-style loop through two processors (two generate calls) over
    one compiled grammar builds one expander."""
    small, full = compiled_pair(engine)
    counts = count_constructions(monkeypatch)
    rng = np.random.default_rng(1)
    padded = 0  # rows after their stop token
    for _call in range(2):
        processor = GrammarLogitsProcessor(small)
        ids = torch.full((3, 2), 16, dtype=torch.long)
        for _step in range(5):
            scores = processor(ids, torch.zeros((3, WIDTH)))
            nxt = []
            for b in range(3):
                allowed = ~torch.isneginf(scores[b]).numpy()
                generated = [t for t in ids[b, 2:].tolist()]
                if STOP in generated:
                    nxt.append(STOP)  # generate pads finished rows; they are not masked
                    assert allowed.all()
                    padded += 1
                    continue
                assert np.array_equal(allowed, allowed_after(full, generated))
                nxt.append(int(rng.choice(np.flatnonzero(allowed))))
            ids = torch.cat([ids, torch.tensor(nxt)[:, None]], dim=1)
    assert padded > 0  # some row ended with the stop token, and its padded steps were checked
    assert counts == Counter({"TorchMaskExpander": 1})


@pytest.mark.xgrammar
def test_expanders_of_a_compiled_grammar() -> None:
    small, full = compiled_pair("xgrammar")
    assert small.expander is not None and full.expander is None
    ex = small.torch_expander()
    assert ex.device == torch.device("cpu") and small.torch_expander("cpu") is ex
    assert ex._numpy is small.expander  # the CPU expander is shared, not built twice
    with pytest.raises(EngineError, match="full-vocabulary"):
        full.torch_expander("cpu")
    with pytest.raises(EngineError, match="full-vocabulary"):
        full.mask_logits(torch.zeros((1, WIDTH)), full.allocate_class_bitmask(1))
    # mask_logits: the class mask of a batch fill, expanded onto the logits
    ms = [small.matcher() for _ in range(2)]
    assert ms[1].accept_token(9)  # "("
    cm = small.allocate_class_bitmask(2)
    small.fill_next_class_bitmask_batch(ms, cm)
    logits = torch.zeros((2, WIDTH))
    assert small.mask_logits(logits, torch.from_numpy(cm)) is logits
    for row, tokens in ((0, []), (1, [9])):
        assert np.array_equal(~torch.isneginf(logits[row]).numpy(), allowed_after(full, tokens))


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("kernel", ["numpy", c_param("expand")])
def test_threads_share_one_compiled_grammar(engine: str, kernel: str) -> None:
    """Four threads, each with its own matchers, fill single rows, batches and masked logits
    over one compiled grammar at once; every mask equals the one computed alone."""
    small, full = compiled_pair(engine)
    small.expander = MaskExpander(small.classes.token_class, small.engine_size, kernel=kernel)  # type: ignore[union-attr]
    rng = np.random.default_rng(2)
    walks: list[list[int]] = []
    for _ in range(8):  # token sequences of the language, and the oracle's mask after each prefix
        walk: list[int] = []
        for _step in range(8):
            choices = [t for t in np.flatnonzero(allowed_after(full, walk)) if t != STOP]
            if not choices:
                break
            walk.append(int(rng.choice(choices)))
        walks.append(walk)
    want = {tuple(w[:k]): allowed_after(full, w[:k]) for w in walks for k in range(len(w) + 1)}
    errors: list[str] = []
    barrier = threading.Barrier(4)

    def work(seed: int) -> None:
        try:
            run(seed)
        except Exception as exc:  # a thread's failure must reach the test
            errors.append(f"thread {seed}: {exc!r}")

    def run(seed: int) -> None:
        barrier.wait()
        for rep in range(3):
            for w in walks[seed % 2 :: 2]:
                m, pair = small.matcher(), [small.matcher(), small.matcher()]
                row = small.allocate_token_bitmask(1)
                batch = small.allocate_token_bitmask(2)
                for k in range(len(w) + 1):
                    m.fill_next_token_bitmask(row)
                    small.fill_next_token_bitmask_batch(pair, batch, [1, 0] if rep % 2 else None)
                    logits = torch.zeros((1, WIDTH))
                    cm = small.allocate_class_bitmask(1)
                    m.fill_next_class_bitmask(cm)
                    small.mask_logits(logits, torch.from_numpy(cm))
                    expect = want[tuple(w[:k])]
                    got = [
                        np.unpackbits(r.view(np.uint8), bitorder="little")[:WIDTH].astype(bool)
                        for r in (row[0], batch[0], batch[1])
                    ]
                    got.append(~torch.isneginf(logits[0]).numpy())
                    if not all(np.array_equal(g, expect) for g in got):
                        errors.append(f"thread {seed}, walk {w[:k]}")
                    if k < len(w):
                        assert m.accept_token(w[k])
                        assert small.accept_token_batch(pair, [w[k], w[k]]) == [True, True]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_gpu_processors_share_one_expander(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CUDA device: one expander for ``cuda`` and ``cuda:<current>``, and the masks of
    both processors equal the full engine's."""
    small, full = compiled_pair(engine)
    counts = count_constructions(monkeypatch)
    dev = torch.device("cuda", torch.cuda.current_device())
    assert small.torch_expander("cuda") is small.torch_expander(dev)
    for _ in range(3):
        p = RequestGrammarProcessor(small)
        logits = p([9, 0], torch.zeros(WIDTH, device=dev))
        assert logits.device == dev
        assert np.array_equal(~torch.isneginf(logits).cpu().numpy(), allowed_after(full, [9, 0]))
    g = GrammarLogitsProcessor(small)
    ids = torch.tensor([[16, 9], [16, 16]], device=dev)
    g(ids, torch.zeros((2, WIDTH), device=dev))
    scores = g(
        torch.cat([ids, torch.tensor([[0], [1]], device=dev)], dim=1), torch.zeros((2, WIDTH), device=dev)
    )
    for row, tokens in ((0, [0]), (1, [1])):
        assert np.array_equal(~torch.isneginf(scores[row]).cpu().numpy(), allowed_after(full, tokens))
    assert counts["TorchMaskExpander"] == 1
