"""The SGLang grammar backend and the request grammars it compiles.

Oracles, none of them the code under test:

* raw XGrammar (``xgrammar.TokenizerInfo`` over the vocabulary's bytes, ``GrammarCompiler``,
  ``GrammarMatcher``) for every mask of the request grammars, step by step along seeded walks;
* SGLang's own default backend (``XGrammarGrammarBackend``, over the same Hugging Face
  tokenizer) for the masks that SGLang's ``GrammarMask`` applies, with Llama-3's tokenizer;
* Python's ``re.fullmatch`` for patterns and the ``lark`` package's Earley parser for Lark
  grammars (formalgram's Earley recognizer reads the grammar texts).

The tests that need SGLang's classes skip without SGLang (its import is minutes of work to
set up on a CPU-only machine: see docs/tutorial-serving.md).
"""

from __future__ import annotations

import json
import random
import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("xgrammar")

import torch
import xgrammar as xgr

import formalgram
from formalgram.recognize.earley import accepts
from formalgram_cfgzip.compress import Compressor
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.integrations import request_grammars as rg
from formalgram_cfgzip.integrations.sglang import FormalgramBackend, FormalgramGrammar
from formalgram_cfgzip.json_schema import from_json_schema
from formalgram_cfgzip.vocabulary import Vocabulary

TOKENS = [
    b"{", b"}", b'"', b":", b",", b" ", b"a", b"b", b"ab", b"ba", b"1", b"2", b"12", b"0",
    b'{"', b'":', b'",', b"true", b"false", b"t", b"rue", b"[", b"]", b"x", b"=", b"-",
    b"ok", b'"ok"', b'"ok": ', b"null", b"\n", b"</s>",
]  # fmt: skip
STOP = len(TOKENS) - 1
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"type": "integer"},
        "ab": {"type": "string", "pattern": "^[ab]+$"},
    },
    "required": ["ok"],
}
GBNF = 'root ::= item ("," item)*\nitem ::= [ab]+ | "[" root "]" | "x=" [0-9]+'
LARK = 'start: pair ("," pair)*\npair: WORD "=" NUMBER\nWORD: /[ab]+/\nNUMBER: /-?[0-9]+/'
REGEX = r"(ab|ba)+-?\d{1,3}"
CASES = [("json", json.dumps(SCHEMA)), ("ebnf", GBNF), ("lark", LARK), ("ebnf", LARK), ("regex", REGEX)]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, special_ids=[STOP], stop_ids=[STOP])


@pytest.fixture(scope="module")
def compiler(vocab: Vocabulary, tmp_path_factory: pytest.TempPathFactory) -> rg.RequestCompiler:
    where = tmp_path_factory.mktemp("cache")
    return rg.RequestCompiler(vocab, compressor=rg.shared_compressor(vocab, where), any_whitespace=False)


def raw_xgrammar_matcher(text: str) -> Any:
    """XGrammar used directly over the vocabulary's bytes (the stop token as XGrammar's stop)."""
    info = xgr.TokenizerInfo(list(TOKENS), xgr.VocabType.RAW, vocab_size=len(TOKENS), stop_token_ids=[STOP])
    return xgr.GrammarMatcher(xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(text))


def raw_mask(matcher: Any) -> np.ndarray:
    bits = xgr.allocate_token_bitmask(1, len(TOKENS))
    matcher.fill_next_token_bitmask(bits)
    return bits.numpy()


def walk(kind: str, spec: str, compiled: Any, seed: int, steps: int = 30) -> int:
    """A seeded walk comparing every mask with raw XGrammar's, with rollbacks; steps taken."""
    text = rg.grammar_text_for(kind, spec, any_whitespace=False)
    oracle = raw_xgrammar_matcher(text)
    ours = FormalgramGrammar(compiled, spec)
    rng = random.Random(seed)
    mask = ours.allocate_vocab_mask(len(TOKENS), 2, "cpu")
    taken = 0
    history: list[int] = []
    for _ in range(steps):
        if ours.is_terminated():
            break
        ours.fill_vocab_mask(mask, 1)
        expected = raw_mask(oracle)
        assert np.array_equal(mask[1:2].numpy(), expected), (kind, history)
        assert mask[0].eq(-1).all()  # other rows untouched
        allowed = [t for t in range(len(TOKENS)) if expected[0, t // 32] >> (t % 32) & 1]
        assert allowed, (kind, history)
        if history and rng.random() < 0.2:
            ours.rollback(1)
            oracle.rollback(1)
            history.pop()
            continue
        tok = rng.choice(allowed)
        ours.accept_token(tok)
        assert oracle.accept_token(tok)
        history.append(tok)
        taken += 1
    assert ours.is_terminated() == oracle.is_terminated()
    return taken


@pytest.mark.parametrize(("kind", "spec"), CASES)
def test_request_masks_are_raw_xgrammar_masks(kind: str, spec: str, compiler: rg.RequestCompiler) -> None:
    compiled = compiler.compile(kind, spec)
    assert compiled.compressed and compiled.classes is not None
    assert compiled.classes.num_classes < len(TOKENS)
    assert sum(walk(kind, spec, compiled, seed) for seed in range(6)) > 20


def test_compiled_grammars_are_kept(compiler: rg.RequestCompiler) -> None:
    a = compiler.compile("regex", REGEX)
    assert compiler.compile("regex", REGEX) is a
    assert compiler.compile("ebnf", GBNF) is not a


def test_past_the_budget_xgrammar_serves_the_full_vocabulary(vocab: Vocabulary, tmp_path: Path) -> None:
    tight = Compressor(vocab, cache_dir=tmp_path, **{**rg.COMPRESS_OPTIONS, "max_work": 1})
    compiler = rg.RequestCompiler(vocab, compressor=tight, any_whitespace=False)
    compiled = compiler.compile("ebnf", GBNF)
    assert not compiled.compressed and compiler.fallbacks == 1
    assert walk("ebnf", GBNF, compiled, seed=1) > 0


def test_xgrammar_engine_over_the_classes(vocab: Vocabulary, tmp_path: Path) -> None:
    compiler = rg.RequestCompiler(vocab, engine="xgrammar", compressor=rg.shared_compressor(vocab, tmp_path))
    compiled = compiler.compile("lark", LARK)
    assert compiled.compressed
    assert walk("lark", LARK, compiled, seed=3) > 0
    with pytest.raises(EngineError, match="native' or 'xgrammar"):
        rg.RequestCompiler(vocab, engine="llguidance", compressor=compiler.compressor)  # type: ignore[arg-type]


def test_json_text_is_xgrammars() -> None:
    text = json.dumps(SCHEMA)
    assert rg.grammar_text_for("json", text) == from_json_schema(text)
    assert rg.grammar_text_for("json", text, any_whitespace=False) == from_json_schema(
        text, any_whitespace=False
    )
    anything = formalgram.parse_gbnf(rg.grammar_text_for("json", "$$ANY$$"))
    for doc in ([1, {"a": None}], "x", 2.5e-3, {"k": [True, False]}):
        assert accepts(anything, json.dumps(doc).encode())
    assert not accepts(anything, b"{'a': 1}")


def test_regex_reads_as_python_re_with_ascii_classes() -> None:
    g = formalgram.parse_gbnf(rg.grammar_text_for("regex", REGEX))
    rng = random.Random(7)
    alphabet = "ab-0123456789x\u0660"  # U+0660 is a digit to Python's Unicode \d, not to ASCII \d
    for _ in range(400):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
        assert accepts(g, s.encode()) == bool(re.fullmatch(REGEX, s, re.ASCII)), s
    assert accepts(g, b"abba-12") and not accepts(g, "ab\u0660".encode())


def test_lark_reads_as_lark_does() -> None:
    lark = pytest.importorskip("lark")
    parser = lark.Lark(LARK, parser="earley", lexer="dynamic")
    g = formalgram.parse_gbnf(rg.grammar_text_for("lark", LARK))
    assert rg.grammar_text_for("ebnf", LARK) == rg.grammar_text_for("lark", LARK)
    rng = random.Random(11)
    for _ in range(300):
        s = "".join(rng.choice("ab=,-12") for _ in range(rng.randint(1, 10)))
        try:
            parser.parse(s)
            expected = True
        except lark.exceptions.LarkError:
            expected = False
        assert accepts(g, s.encode()) == expected, s


def test_refused_request_grammars() -> None:
    with pytest.raises(EngineError, match="rule named 'root'"):
        rg.lark_to_gbnf('start: root\nroot: "a"')
    with pytest.raises(EngineError, match="no request grammar of kind"):
        rg.grammar_text_for("structural_tag", "{}")
    with pytest.raises(formalgram.GrammarSyntaxError):
        rg.grammar_text_for("regex", "(ab")


def test_a_refused_token_raises_and_leaves_the_state(compiler: rg.RequestCompiler) -> None:
    g = FormalgramGrammar(compiler.compile("regex", "ab"), "ab")
    g.accept_token(TOKENS.index(b"a"))
    with pytest.raises(ValueError, match="not allowed"):
        g.accept_token(TOKENS.index(b"a"))
    g.accept_token(TOKENS.index(b"b"))
    g.accept_token(STOP)
    assert g.is_terminated()
    g.accept_token(TOKENS.index(b"a"))  # ignored once terminated, as SGLang's XGrammar backend does
    g.rollback(2)
    assert not g.is_terminated() and g.accepted == 1
    fresh = g.copy()
    assert fresh.compiled is g.compiled and fresh.accepted == 0


def test_batched_fill_over_several_grammars(compiler: rg.RequestCompiler) -> None:
    grammars = [FormalgramGrammar(compiler.compile(k, s), s) for k, s in CASES]
    grammars.append(FormalgramGrammar(compiler.compile("ebnf", GBNF), GBNF))  # two rows of one grammar
    grammars[0].accept_token(TOKENS.index(b"{"))
    grammars[-1].accept_token(TOKENS.index(b"ab"))
    rows = [GrammarRowLike(2 * i + 1, g) for i, g in enumerate(grammars)]
    batched = grammars[0].allocate_vocab_mask(len(TOKENS), 2 * len(grammars) + 1, "cpu")
    FormalgramGrammar.fill_vocab_mask_batched(rows, batched)
    one_by_one = grammars[0].allocate_vocab_mask(len(TOKENS), 2 * len(grammars) + 1, "cpu")
    for row in rows:
        row.grammar.fill_vocab_mask(one_by_one, row.row)
    assert torch.equal(batched, one_by_one)
    assert batched[0::2].eq(-1).all()
    logits = torch.zeros(batched.shape[0], len(TOKENS))
    FormalgramGrammar.apply_vocab_mask(logits=logits, vocab_mask=batched)  # keywords, as SGLang calls it
    bits = np.unpackbits(batched.numpy().view(np.uint8), bitorder="little").reshape(batched.shape[0], -1)
    assert torch.equal(torch.isfinite(logits), torch.from_numpy(bits[:, : len(TOKENS)] == 1))
    with pytest.raises(EngineError, match="vocab_size"):
        grammars[0].fill_vocab_mask(torch.full((1, 3), -1, dtype=torch.int32), 0)


class GrammarRowLike(types.SimpleNamespace):
    """The fields of SGLang's ``GrammarRow`` (a NamedTuple of ``row`` and ``grammar``)."""

    def __init__(self, row: int, grammar: Any) -> None:
        super().__init__(row=row, grammar=grammar)


# -- with SGLang's own classes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_base() -> Any:
    return pytest.importorskip("sglang.srt.constrained.base_grammar_backend")


def test_subclasses_and_registration(sglang_base: Any) -> None:
    from formalgram_cfgzip.integrations import sglang as adapter

    assert issubclass(FormalgramGrammar, sglang_base.BaseGrammarObject)
    assert issubclass(FormalgramBackend, sglang_base.BaseGrammarBackend)
    adapter.register()
    adapter.register()  # twice is harmless
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES

    for name in adapter.BACKEND_NAMES:
        assert name in sglang_base.GRAMMAR_BACKEND_REGISTRY
        assert GRAMMAR_BACKEND_CHOICES.count(name) == 1


def test_the_plugin_entry_point_names_register(sglang_base: Any) -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["entry-points"]["sglang.srt.plugins"] == {
        "formalgram": "formalgram_cfgzip.integrations.sglang:register"
    }


@pytest.fixture(scope="module")
def llama3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("quicktok")
    from transformers import AutoTokenizer

    from bench.serving_bench import write_llama3_tokenizer

    where = tmp_path_factory.mktemp("llama3")
    write_llama3_tokenizer(where)
    return AutoTokenizer.from_pretrained(where)


@pytest.fixture(scope="module")
def backends(sglang_base: Any, llama3: Any, tmp_path_factory: pytest.TempPathFactory, request: Any) -> Any:
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    from formalgram_cfgzip.integrations import sglang as adapter

    args = types.SimpleNamespace(constrained_json_disable_any_whitespace=True)
    eos = {128001, 128008, 128009}
    adapter.register()
    ours = sglang_base.GRAMMAR_BACKEND_REGISTRY["formalgram"](args, llama3, 128256, eos)
    ours.compiler.compressor = rg.shared_compressor(ours.compiler.vocab, tmp_path_factory.mktemp("cache"))
    theirs = XGrammarGrammarBackend(
        llama3, vocab_size=128256, model_eos_token_ids=sorted(eos), any_whitespace=False
    )
    return ours, theirs


LLAMA_CASES = [
    (
        "json",
        json.dumps(
            {"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"enum": ["a b", "c"]}}}
        ),
    ),
    ("ebnf", 'root ::= ("x = " [0-9]+ ";\\n")+'),
    ("regex", r"[a-z]{2,4}@[a-z]+\.(com|org)"),
]


@pytest.mark.parametrize(("kind", "spec"), LLAMA_CASES)
def test_masks_are_sglang_xgrammar_masks(backends: Any, kind: str, spec: str) -> None:
    from sglang.srt.constrained.base_grammar_backend import GrammarMask

    ours_backend, theirs_backend = backends
    key = (kind, spec)
    ours = ours_backend._init_value_dispatch(key, False)  # SGLang's own dispatch path
    theirs = theirs_backend._init_value_dispatch(key, False)
    assert isinstance(ours, FormalgramGrammar)
    rng = random.Random(5)
    for step in range(40):
        if theirs.is_terminated():
            break
        a = ours.allocate_vocab_mask(128256, 1, "cpu")
        b = theirs.allocate_vocab_mask(128256, 1, "cpu")
        ours.fill_vocab_mask(a, 0)
        theirs.fill_vocab_mask(b, 0)
        assert torch.equal(a, b), (kind, step)
        logits = torch.randn(1, 128256)
        expected = logits.clone()
        GrammarMask(ours, ours.move_vocab_mask(a, "cpu")).apply(logits)
        theirs.apply_vocab_mask(expected, b)
        assert torch.equal(logits, expected)
        allowed = torch.nonzero(torch.isfinite(expected[0])).flatten().tolist()
        tok = rng.choice(allowed)
        ours.accept_token(tok)
        theirs.accept_token(tok)
        if step % 7 == 6:
            ours.rollback(1)
            theirs.rollback(1)
    assert ours.is_terminated() == theirs.is_terminated()


def test_bad_grammars_fail_the_request_not_the_scheduler(backends: Any, sglang_base: Any) -> None:
    ours, _ = backends
    for key in (("ebnf", 'root ::= "a" ('), ("json", "{not json"), ("regex", "(a"), ("structural_tag", "{}")):
        value, hit = ours.get_cached_or_future_value(key, False)  # SGLang's executor, as the scheduler does
        assert not hit
        result = value.result(timeout=60)
        assert isinstance(result, sglang_base.InvalidGrammarObject), key
        assert result.error_message
    nul = ours._init_value_dispatch(("regex", "a\x00"), False)
    assert isinstance(nul, sglang_base.InvalidGrammarObject)
