"""Many (grammar, tokenizer) pairs: the manifest, the executors, failures, reruns, Dask.

Oracles: the Earley recognizer (``tests/_class_oracle.py``: the classes on disk are exact,
independently of ``compress``), and :func:`formalgram_cfgzip.compress` of each pair run
directly; the results on disk must load with their fingerprints checked and equal it.
"""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from _class_oracle import check_classes_with_earley, sampled_contexts

from formalgram import parse_gbnf
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.cli import main
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.errors import ManifestError
from formalgram_cfgzip.many import Job, compress_many, read_manifest
from formalgram_cfgzip.vocabulary import Vocabulary

TOKENS = [b"{", b"}", b'"', b"a", b"ab", b"1", b"12", b" ", b",", b":", b"true", b'"a"', b"x", b"(", b")"]
GRAMMAR = 'root ::= "(" root ")" | "x"'


def _tiktoken(path: Path, tokens: list[bytes]) -> Path:
    path.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(tokens)))
    return path


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    _tiktoken(tmp_path / "small.tiktoken", TOKENS)
    _tiktoken(tmp_path / "other.tiktoken", [*TOKENS, b"((", b"))", b"xx"])
    (tmp_path / "paren.gbnf").write_text(GRAMMAR)
    (tmp_path / "broken.gbnf").write_text('root ::= "x" | (')
    (tmp_path / "obj.json").write_text(
        json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    )
    (tmp_path / "m.jsonl").write_text(
        "# grammars x tokenizers\n"
        '{"grammar": "paren.gbnf", "tokenizer": ["small.tiktoken", "other.tiktoken"]}\n'
        "\n"
        '{"json_schema": "obj.json", "tokenizer": "small.tiktoken", '
        '"json_schema_options": {"any_whitespace": false, "separators": [",", ":"]}}\n'
        '{"grammar": "broken.gbnf", "tokenizer": "small.tiktoken"}\n'
        '{"grammar": "paren.gbnf", "tokenizer": "no-such-tokenizer"}\n'
    )
    return tmp_path


def test_manifest_reading(setup: Path) -> None:
    jobs = read_manifest(setup / "m.jsonl")
    assert [j.describe().replace(str(setup) + "/", "") for j in jobs] == [
        "paren.gbnf x small.tiktoken",
        "paren.gbnf x other.tiktoken",
        "schema obj.json x small.tiktoken",
        "broken.gbnf x small.tiktoken",
        "paren.gbnf x no-such-tokenizer",
    ]
    assert dict(jobs[2].json_schema_options) == {"any_whitespace": False, "separators": (",", ":")}
    bad = {
        '{"grammar": "g", "tokenizer": "t", "colour": 1}': "line 2: unknown keys colour",
        '{"grammar": "g", "json_schema": "s", "tokenizer": "t"}': "exactly one of",
        '{"grammar": "g"}': "'tokenizer' must be",
        '{"grammar": "g", "tokenizer": "t", "gnf_budget": -3}': "positive integer",
        '["g", "t"]': "expected a JSON object",
        '{"grammar": "g", "tokenizer": "t"': "line 2",
    }
    for line, message in bad.items():
        (setup / "bad.jsonl").write_text('{"grammar": "g", "tokenizer": "t"}\n' + line + "\n")
        with pytest.raises(ManifestError, match=message):
            read_manifest(setup / "bad.jsonl")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        read_manifest(setup / "missing.jsonl")


def _check_done(out: Path, job: Job, text: str) -> None:
    """The entry of a finished job loads, fingerprints checked, and equals compress()."""
    summary = json.loads((out / "summary.json").read_text())
    (record,) = [
        r
        for r in summary["results"]
        if r["job"]["tokenizer"] == job.tokenizer
        and r["job"]["grammar"] == job.grammar
        and r["job"]["json_schema"] == job.json_schema
    ]
    vocab = Vocabulary.load(job.tokenizer)
    entry = out / record["entry"]
    assert (entry / "grammar.gbnf").read_text() == text
    loaded = TokenClasses.load(entry, grammar=text, vocab=vocab)
    g = parse_gbnf(text)
    contexts = sampled_contexts(g, 8)
    compared, refused = check_classes_with_earley(
        g, vocab.tokens, loaded.token_class, loaded.invalid_class, contexts, (b"",)
    )
    assert refused > 0 and len(contexts) > 1, (compared, refused, contexts)
    expected = compress(text, vocab, progress=False)
    assert np.array_equal(loaded.token_class, expected.token_class)
    assert loaded.grammar_sha256 == record["grammar_sha256"] == expected.grammar_sha256
    assert record["vocab_sha256"] == vocab.fingerprint()


def test_pairs_failures_and_reruns(setup: Path) -> None:
    pytest.importorskip("xgrammar")  # the JSON Schema pair
    jobs = read_manifest(setup / "m.jsonl")
    out = setup / "out"
    with ThreadPoolExecutor(2) as pool:
        first = compress_many(jobs, out, executor=pool)
    assert [r.status for r in first.results] == ["done", "done", "done", "failed", "failed"]
    assert "GrammarSyntaxError" in first.results[3].error and "line 1" in first.results[3].error
    assert "VocabularyError" in first.results[4].error
    _check_done(out, jobs[0], GRAMMAR)
    _check_done(out, jobs[1], GRAMMAR)
    schema_text = (Path(first.results[2].directory) / "grammar.gbnf").read_text()
    assert '"{" "\\"a\\"" ":" root_prop_0 "}"' in schema_text.replace("basic_integer", "root_prop_0")
    _check_done(out, jobs[2], schema_text)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["done"], summary["skipped"], summary["failed"]) == (3, 0, 2)

    # a rerun skips what loads with its fingerprints checked...
    with ThreadPoolExecutor(2) as pool:
        again = compress_many(jobs, out, executor=pool)
    assert [r.status for r in again.results] == ["skipped", "skipped", "skipped", "failed", "failed"]
    # ...and recomputes an entry that does not: damaged, or holding another grammar's classes
    damaged = Path(again.results[0].directory) / "arrays.npz"
    damaged.write_bytes(damaged.read_bytes()[:-5])
    swapped = Path(again.results[1].directory)
    (swapped / "meta.json").write_text((Path(again.results[2].directory) / "meta.json").read_text())
    with ThreadPoolExecutor(1) as pool:
        third = compress_many(jobs[:3], out, executor=pool)
    assert [r.status for r in third.results] == ["done", "done", "skipped"]
    _check_done(out, jobs[0], GRAMMAR)
    _check_done(out, jobs[1], GRAMMAR)


def test_default_executor_is_local_processes(setup: Path) -> None:
    jobs = read_manifest(setup / "m.jsonl")[:2]
    summary = compress_many(jobs, setup / "out", workers=2)
    assert summary.line() == "done 2, skipped 0, failed 0"
    _check_done(setup / "out", jobs[0], GRAMMAR)


def test_cli_compress_many(setup: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("xgrammar")  # the JSON Schema pair
    rc = main(["compress-many", str(setup / "m.jsonl"), "-o", str(setup / "out"), "--workers", "1"])
    out = capsys.readouterr().out
    assert rc == 1  # some pairs failed
    assert "5 pairs: done 3, skipped 0, failed 2" in out and "GrammarSyntaxError" in out
    assert main(["compress-many", str(setup / "missing.jsonl"), "-o", str(setup / "out")]) == 2
    assert "cannot read manifest" in capsys.readouterr().err


def test_cli_compress_json_schema(setup: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("xgrammar")
    out = setup / "classes"
    options = '{"any_whitespace": false, "separators": [",", ":"]}'
    argv = ["compress", "--json-schema", str(setup / "obj.json"), "--json-schema-options", options]
    rc = main([*argv, "--tokenizer", str(setup / "small.tiktoken"), "-o", str(out), "-q"])
    assert rc == 0, capsys.readouterr()
    text = (out / "grammar.gbnf").read_text()
    vocab = Vocabulary.load(setup / "small.tiktoken")
    loaded = TokenClasses.load(out, grammar=text, vocab=vocab)
    assert np.array_equal(loaded.token_class, compress(text, vocab, progress=False).token_class)
    assert main(["compress", "--tokenizer", "x", "-o", str(out)]) == 2
    assert "exactly one" in capsys.readouterr().err
    assert main([*argv[:3], "--json-schema-options", "[1]", "--tokenizer", "x", "-o", str(out)]) == 2
    assert "must be a JSON object" in capsys.readouterr().err


def test_dask_local_cluster(setup: Path) -> None:
    """The distributed extra: a local Dask cluster of two worker processes, started here."""
    distributed = pytest.importorskip("distributed")
    # no schema job: a fresh worker would spend seconds importing XGrammar (and torch)
    jobs = [j for j in read_manifest(setup / "m.jsonl") if not j.json_schema]
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        summary = compress_many(jobs, setup / "out", executor=client.get_executor())
    assert [r.status for r in summary.results] == ["done", "done", "failed", "failed"]
    _check_done(setup / "out", jobs[0], GRAMMAR)
    _check_done(setup / "out", jobs[1], GRAMMAR)
