"""End to end in each serving framework: a tiny random Llama with Llama-3's tokenizer (``-m heavy``).

The model directory is built locally (:func:`bench.serving_bench.build_tiny_llama`, no
download); each framework generates the JSON Schema, GBNF and Lark requests of
:data:`bench.serving_bench.REQUESTS` under this package's constraint, and every output must
end with a stop token and be in the language: ``jsonschema`` for JSON, formalgram's Earley
recognizer for the grammars (:func:`bench.serving_bench.check_output`).  With random weights
the constraint does all the work.  Where the framework's own XGrammar backend ran the same
request with the same seed, the outputs must be identical (the masks are bit for bit
XGrammar's).  Each framework's test skips when the framework is not importable.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("quicktok")
pytest.importorskip("jsonschema")
pytest.importorskip("xgrammar")

from bench import serving_bench as sb

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield sb.build_tiny_llama(tmp_path_factory.mktemp("tiny-llama3"))


def check(rows: list[dict[str, Any]], framework: str, same_as_xgrammar: bool) -> None:
    ours = [r for r in rows if r["backend"] == "formalgram"]
    assert {r["request"] for r in ours} == set(sb.REQUESTS)
    for r in ours:
        assert r["framework"] == framework
        assert r["valid"], r
        assert r["tokens"] > 1
    assert {r["request"] for r in rows if r["backend"] == "none"} == set(sb.REQUESTS)
    if same_as_xgrammar:
        theirs = {(r["request"], r["seed"]): r["text"] for r in rows if r["backend"] == "xgrammar"}
        assert theirs
        for r in ours:
            if (r["request"], r["seed"]) in theirs:
                assert r["text"] == theirs[r["request"], r["seed"]], r


def test_tokenizer_is_llama3s(model_dir: Path) -> None:
    import quicktok
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoding = quicktok.get_encoding("llama3")
    for text in (
        "Hello world!",
        "I'm   here\n\n  x=1;  // ok",
        "numbers 1234567 ünïcödé 漢字 😀",
        "they'll've",
    ):
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == list(encoding.encode(text))
    assert tokenizer("hi")["input_ids"][0] == 128000
    assert len(tokenizer) == 128256


def test_transformers_generate(model_dir: Path) -> None:
    check(sb.run_transformers(model_dir, repeats=2), "transformers", same_as_xgrammar=True)


def test_vllm_generate(model_dir: Path) -> None:
    pytest.importorskip("vllm")
    check(sb.run_vllm(model_dir, repeats=1), "vllm", same_as_xgrammar=False)


def test_sglang_engine(model_dir: Path) -> None:
    pytest.importorskip("sglang.srt.entrypoints.engine")
    if not any(ep.name == "formalgram" for ep in entry_points(group="sglang.srt.plugins")):
        pytest.skip("formalgram is not installed in SGLang's environment (its plugin entry point is missing)")
    rows = sb.run_sglang(model_dir, repeats=1)
    check(rows, "sglang", same_as_xgrammar=True)
    (refused,) = [r for r in rows if r["backend"] == "formalgram-error"]
    assert refused["finish"] == "abort" and "GrammarSyntaxError" in refused["message"], refused
