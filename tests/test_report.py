"""Smoke tests of the benchmark plumbing (bench/compress_bench.py, bench/report.py).

Tiny configurations only (a two-rule grammar, the llama3 vocabulary or a 7-token one):
no timing asserts, only that measurements come back, failures become statuses, and the
report with its plots is written.  Independent oracles: a child that allocates a known
amount of memory (for the peak), the ``tokenizers`` library (for the Hugging Face layout).
The ``bench`` package is importable from the checkout (``tests/conftest.py``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compress_bench as cb
from bench import report


def _have_llama3() -> bool:
    try:
        import quicktok  # noqa: F401
    except ImportError:
        return False
    return True


needs_llama3 = pytest.mark.skipif(not _have_llama3(), reason="quicktok (llama3 vocabulary) not installed")

TINY = 'root ::= "(" root ")" | "x" | "[" [a-z]* "]"\n'
# The strings that occur in members of TINY, whose members are (^n M )^n with M = x or
# [ [a-z]* ]: a run of "(" or of ")"; a whole M between them; the start of M after "(";
# the end of M before ")"; letters alone.
TINY_FACTOR = re.compile(rb"\(+|\)+|\(*(?:x|\[[a-z]*\])\)*|\(*\[[a-z]*|[a-z]*\]\)*|[a-z]+")


def _touch(mib: int, then: str = "print('done')") -> str:
    """A child's code: touch ``mib`` MiB page by page, then run ``then``."""
    return f"b = bytearray({mib} << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n{then}"


def test_run_child_reports_peak_memory_of_child() -> None:
    """Children touching 100 and 300 MiB: each ru_maxrss shows at least that, and the two
    differ by about 200 MiB (the child's own peak, not the parent's size)."""
    peaks = []
    for mib in (100, 300):
        res = cb.run_child([sys.executable, "-c", _touch(mib)], timeout=600, memory_mib=None)
        assert res.returncode == 0 and res.killed is None
        assert "done" in res.stdout
        assert res.maxrss_mib >= mib
        assert res.tree_peak_mib >= res.maxrss_mib
        peaks.append(res.maxrss_mib)
    assert peaks[1] - peaks[0] >= 150, peaks


def test_run_child_kills_on_timeout_and_memory() -> None:
    """A child past its time limit and one past its memory limit are killed (the children
    would sleep for an hour; the 600 s limit of the second is a guard against a hang)."""
    sleep = "import time; time.sleep(3600)"
    slow = cb.run_child([sys.executable, "-c", sleep], timeout=0.5, memory_mib=None)
    assert slow.killed == "timeout" and slow.returncode is None
    big = cb.run_child([sys.executable, "-c", _touch(600, sleep)], timeout=600, memory_mib=150)
    assert big.killed == "memory" and big.returncode is None


def test_failing_grammar_is_a_status_not_a_crash(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "x" (\n', "utf-8")
    r = cb.run_ours("bad", bad, str(_tiny_tokenizer_json(tmp_path)), 1, timeout=600, memory_mib=2048)
    assert not r.ok
    assert "Error" in r.status or "error" in r.status
    table = cb.markdown_tables([r])
    assert "| bad |" in table


def _tiny_tokenizer_json(tmp_path: Path) -> Path:
    """A 7-token byte-level BPE tokenizer.json written through our HF-cache builder."""
    from formalgram_cfgzip.vocabulary import Vocabulary

    v = Vocabulary.from_bytes([b"(", b")", b"x", b"((", b"[", b"]", b"a"], name="tiny")
    model_id = cb.build_hf_cache(v, tmp_path / "hf")
    org, name = model_id.split("/")
    snaps = list((tmp_path / "hf" / f"models--{org}--{name}" / "snapshots").iterdir())
    return snaps[0] / "tokenizer.json"


def test_hf_cache_layout_loads_in_tokenizers(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from formalgram_cfgzip.vocabulary import Vocabulary

    v = Vocabulary.from_bytes(
        [b"a", b"b", b" ", b"ab", b" ab", b"\n", b"\xc3", b"\xa9", b"\xc3\xa9"], name="t"
    )
    model_id = cb.build_hf_cache(v, tmp_path / "hf")
    repo = tmp_path / "hf" / ("models--" + model_id.replace("/", "--"))
    rev = (repo / "refs" / "main").read_text("utf-8")
    path = repo / "snapshots" / rev / "tokenizer.json"
    tok = tokenizers.Tokenizer.from_file(str(path))
    assert tok.get_vocab_size() == len(v.tokens)
    # the library, reading our file, tokenizes and decodes as the vocabulary says
    assert tok.encode("ab ab").ids == [3, 4]
    assert tok.encode("é\nb").ids == [8, 5, 1]
    assert tok.decode([8, 2, 0]) == "é a"
    again = Vocabulary.from_tokenizer_json(path)
    assert list(again.tokens) == list(v.tokens)


@needs_llama3
def test_bench_and_report_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from formalgram_cfgzip.vocabulary import Vocabulary

    g = tmp_path / "tiny.gbnf"
    g.write_text(TINY, "utf-8")
    monkeypatch.setattr(cb, "QUICK_GRAMMARS", (("tiny", str(g)),))
    monkeypatch.setattr(cb, "QUICK_VOCABS", ("llama3",))
    monkeypatch.setattr(cb, "find_published_tool", lambda: None)
    monkeypatch.setattr(report, "_ONLINE_QUICK", ())
    out = tmp_path / "rep"
    assert report.run_report(str(out), quick=True) == 0
    md = (out / "report.md").read_text("utf-8")
    assert "| tiny |" in md and "llama3" in md
    assert "python -m bench -o DIR --quick" in md
    data = json.loads((out / "results.json").read_text("utf-8"))
    rows = data["offline"]
    assert {(r["tool"], r["workers"]) for r in rows} == {("formalgram", 1), ("formalgram", 2)}
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok, rows
    # the oracle: a text token is valid exactly when it occurs in a member of the tiny language
    # (TINY_FACTOR, a regular description written here); the special tokens other than the
    # stop tokens are invalid too
    vocab = Vocabulary.builtin("llama3")
    text = [t for i, t in enumerate(vocab.tokens) if t is not None and i not in vocab.special_ids]
    invalid_text = sum(1 for t in text if not TINY_FACTOR.fullmatch(t))
    assert 100_000 < invalid_text < len(text)
    for r in ok:
        assert r["tokens"] == vocab.size
        assert r["invalid_text"] == invalid_text
        assert r["invalid"] == invalid_text + len(vocab.special_ids - vocab.stop_ids)
        assert r["peak_mib"] > 10
    plots = ("compression_ratio.png", "compress_time.png", "peak_memory.png")
    if importlib.util.find_spec("matplotlib") is None:
        assert not any((out / name).exists() for name in plots)
    else:
        for name in plots:
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert f"({name})" in md


def test_package_does_not_import_bench_or_edit_sys_path() -> None:
    """The installed packages never reach into a checkout's bench/ folder: importing every
    module of formalgram_cfgzip leaves ``bench`` unimported and ``sys.path`` as it was."""
    code = (
        "import pkgutil, importlib, sys\n"
        "before = list(sys.path)\n"
        "import formalgram_cfgzip\n"
        "for info in pkgutil.walk_packages(formalgram_cfgzip.__path__, 'formalgram_cfgzip.'):\n"
        "    importlib.import_module(info.name)\n"
        "print(any(m == 'bench' or m.startswith('bench.') for m in sys.modules), sys.path == before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.split() == ["False", "True"]
