"""The ``formalgram-cfgzip`` command line: its flags reach ``compress``, the README's main
job (``demo``) runs, and misuse ends in one line and exit status 2, never a traceback.

Oracles independent of the command: formalgram's Earley recognizer (the built-in
grammars accept hand-written members and reject non-members), the language of a start
rule chosen with ``--start`` (tokens that cannot occur in it must be invalid), and the
classes that ``compress`` computes when called directly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _class_oracle import check_classes_with_earley

import formalgram as fg
from formalgram_cfgzip.classes import TokenClasses, compress
from formalgram_cfgzip.cli import BUILTIN_GRAMMARS, build_parser, builtin_grammar_text, compress_options, main
from formalgram_cfgzip.errors import CfgzipError
from formalgram_cfgzip.vocabulary import Vocabulary

TINY_TOKENS = [
    b"a", b"b", b"ab", b"ba", b"x", b"y", b"yy", b"xy", b"(", b")", b"()",
    b"{", b"}", b"[", b"]", b'"', b":", b",", b" ", b"true", b"1", b'":', b"{}", b'{"',
    b"\x01",  # in no JSON text (a control byte outside strings and inside them)
]  # fmt: skip


def tiny_tokenizer(tmp_path: Path) -> Path:
    """A tokenizer file (tiktoken format) of a few tokens, read by ``Vocabulary.load``."""
    import base64

    path = tmp_path / "tiny.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(TINY_TOKENS)))
    return path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse's own exits (bad arguments)
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


# -- bad arguments and library errors: exit 2, one line -----------------------------------
BAD_ARGUMENTS = [
    (["demo", "--steps", "-5"], "--steps: must be at least 1"),
    (["demo", "--steps", "0"], "--steps: must be at least 1"),
    (["demo", "--steps", "many"], "'many' is not an integer"),
    (["compress", "builtin:json", "--tokenizer", "llama3", "-o", ""], "must not be empty"),
    (["compress", "builtin:json", "--tokenizer", "llama3", "-o", "  "], "must not be empty"),
    (
        ["compress", "builtin:json", "--tokenizer", "llama3", "-o", "d", "--workers", "-3"],
        "--workers: must be",
    ),
    (
        ["compress", "builtin:json", "--tokenizer", "llama3", "-o", "d", "--workers", "0"],
        "--workers: must be",
    ),
    (["compress", "builtin:json", "--tokenizer", "llama3", "-o", "d", "--memory-budget", "-1"], "at least 0"),
    (["compress", "builtin:json", "--tokenizer", "llama3", "-o", "d", "--budget", "0"], "--budget: must be"),
    (["compress", "builtin:json", "-o", "d"], "--tokenizer"),
    (["bench", "-o", "report"], "invalid choice: 'bench'"),
    ([], "required"),
]


@pytest.mark.parametrize(("args", "message"), BAD_ARGUMENTS)
def test_bad_arguments_exit_2_with_one_line(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(args, capsys)
    assert rc == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing was written, in particular not into the cwd


def test_output_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "taken"
    target.write_text("keep me")
    rc, _, err = run_cli(["compress", "builtin:json", "--tokenizer", "llama3", "-o", str(target)], capsys)
    assert rc == 2 and "is not a directory" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "keep me"


def test_library_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = str(tiny_tokenizer(tmp_path))
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" (\nother ::= "b"\n')
    cases = [
        (["compress", str(bad), "--tokenizer", tok, "-o", str(tmp_path / "o1")], "line 1, column"),
        (
            ["compress", "builtin:nope", "--tokenizer", tok, "-o", str(tmp_path / "o2")],
            "unknown built-in grammar",
        ),
        (
            [
                "compress",
                "builtin:json",
                "--tokenizer",
                str(tmp_path / "nope.json"),
                "-o",
                str(tmp_path / "o3"),
            ],
            "",
        ),
        (
            [
                "compress",
                "builtin:json",
                "--tokenizer",
                tok,
                "--start",
                "nowhere",
                "-o",
                str(tmp_path / "o4"),
            ],
            "",
        ),
        (["demo", "--grammar", str(bad), "--tokenizer", tok, "--steps", "2"], "line 1, column"),
    ]
    for args, message in cases:
        rc, _, err = run_cli(args, capsys)
        assert rc == 2, (args, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("formalgram-cfgzip: error: "), (args, err)
        assert message in lines[0]
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 5))


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    """The installed entry point, run as a process: a bad argument and a library error."""
    code = "import sys; from formalgram_cfgzip.cli import main; sys.exit(main())"
    for args in (
        ["demo", "--steps", "-5"],
        ["compress", str(tmp_path / "missing.gbnf"), "--tokenizer", "x", "-o", "o"],
    ):
        res = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path
        )
        assert res.returncode == 2
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []


# -- compress and its flags --------------------------------------------------------------
def test_compress_options_follow_the_flags() -> None:
    parse = build_parser().parse_args
    base = ["compress", "g.gbnf", "--tokenizer", "t", "-o", "out"]
    assert compress_options(parse(base)) == {
        "workers": 1,
        "progress": True,
        "gnf_budget": 2_000_000,
        "memory_budget": 4096 << 20,
        "specialize": None,
    }
    opts = compress_options(
        parse([*base, "--workers", "3", "--memory-budget", "0", "--budget", "77", "--specialize", "-q"])
    )
    assert opts == {
        "workers": 3,
        "progress": False,
        "gnf_budget": 77,
        "memory_budget": None,
        "specialize": True,
    }
    assert compress_options(parse([*base, "--no-specialize", "--memory-budget", "1"]))["specialize"] is False
    assert compress_options(parse([*base, "--memory-budget", "1"]))["memory_budget"] == 1 << 20


def test_compress_start_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--start`` selects the language: tokens that cannot occur in ``other`` (y+) are invalid."""
    tok = tiny_tokenizer(tmp_path)
    grammar = tmp_path / "g.gbnf"
    text = 'root ::= "(" [ab]* ")"\nother ::= "y"+\n'
    grammar.write_text(text)
    out_dir = tmp_path / "classes"
    rc, out, _ = run_cli(
        ["compress", str(grammar), "--tokenizer", str(tok), "-o", str(out_dir), "--start", "other", "-q"],
        capsys,
    )
    assert rc == 0 and "classes" in out
    vocab = Vocabulary.load(str(tok))
    classes = TokenClasses.load(out_dir, grammar=fg.parse_gbnf(text, start="other"), vocab=vocab)
    g = fg.parse_gbnf(text, start="other")
    for i, t in enumerate(TINY_TOKENS):
        # a token is valid for y+ exactly when it is a factor of some member: only y's
        valid = fg.is_prefix(g, t) and bool(t)
        assert (int(classes.token_class[i]) != classes.invalid_class) == valid, t
    with pytest.raises(CfgzipError):  # computed for `other`, not for root
        TokenClasses.load(out_dir, grammar=fg.parse_gbnf(text), vocab=vocab)


JSON_CONTEXTS = [b"", b"{", b'{"', b'{"a', b'{"a":', b'{"a": ', b"[", b"[1", b"[true,", b'"x']


def check_against_earley(classes: TokenClasses, grammar: fg.Grammar) -> None:
    """The oracle (``tests/_class_oracle.py``): in every context, the tokens of one class are
    all allowed or all refused (Earley prefix test), and invalid-class tokens are refused in
    every context; both checks must have something to check."""
    compared, refused = check_classes_with_earley(
        grammar, classes.vocab.tokens, classes.token_class, classes.invalid_class, JSON_CONTEXTS
    )
    assert compared > 0 and refused == len(classes.invalid) > 0, (compared, refused)


def test_compress_flags_reach_compress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two workers, a memory budget and both specialisation choices give the classes that
    compress() gives itself with the same options, and those classes are right (Earley);
    the choice of specialisation is recorded in the saved statistics."""
    tok = str(tiny_tokenizer(tmp_path))
    text = builtin_grammar_text("json")
    grammar = fg.parse_gbnf(text)
    vocab = Vocabulary.load(tok)
    runs = {
        "w2": (["--workers", "2", "--memory-budget", "512"], None),
        "spec": (["--specialize", "--memory-budget", "0"], True),
        "plain": (["--no-specialize"], False),
    }
    for name, (flags, specialize) in runs.items():
        out_dir = tmp_path / name
        rc, _, err = run_cli(
            ["compress", "builtin:json", "--tokenizer", tok, "-o", str(out_dir), "-q", *flags], capsys
        )
        assert rc == 0, err
        got = TokenClasses.load(out_dir, grammar=text, vocab=vocab)
        check_against_earley(got, grammar)
        want = compress(text, vocab, progress=False, specialize=specialize)
        # the same partition of the tokens (class ids may be numbered differently)
        pairs = set(zip(got.token_class.tolist(), want.token_class.tolist(), strict=True))
        assert len(pairs) == got.num_classes == want.num_classes, name
        if specialize is not None:
            assert got.stats["specialized"] == float(specialize), name


# -- the README's main job -----------------------------------------------------------------
@pytest.mark.parametrize("name", BUILTIN_GRAMMARS)
def test_builtin_grammars(name: str) -> None:
    """The built-in grammars parse, mean what they say (Earley), and XGrammar compiles them."""
    text = builtin_grammar_text(name)
    g = fg.parse_gbnf(text)
    members = {
        "minic": [
            b"int main() { return 0; }",
            b'void f(char *s, int n) { while (n > 0) { n -= 1; } puts("x"); }',
        ],
        "json": [b'{"a": [1, 2.5e3, true, null], "b": {"c": "\\u00e9"}}', b"[]", b' "x" '],
    }[name]
    non_members = {
        "minic": [b"int main( { }", b"main() {}"],
        "json": [b"{'a': 1}", b"[1,]", b"01"],
    }[name]
    for s in members:
        assert fg.accepts(g, s), s
    for s in non_members:
        assert not fg.accepts(g, s), s
    pytest.importorskip("xgrammar")
    from formalgram_cfgzip.engines import compile_full

    full = compile_full(Vocabulary([bytes([b]) for b in range(32, 127)]), text)
    m = full.matcher()
    for byte in members[0]:
        assert m.accept_token(byte - 32), bytes([byte])


def test_unknown_builtin_grammar() -> None:
    from formalgram.errors import FormalgramError

    with pytest.raises(FormalgramError, match="choose one of minic, json"):
        builtin_grammar_text("c")


def test_demo_runs_the_main_job(capsys: pytest.CaptureFixture[str]) -> None:
    """``formalgram-cfgzip demo`` (README), few steps: compress the built-in grammar for
    Llama 3 and walk with both engines; every mask must agree."""
    pytest.importorskip("xgrammar")
    pytest.importorskip("quicktok")  # the built-in llama3 vocabulary
    rc, out, err = run_cli(["demo", "--steps", "6", "--seed", "3"], capsys)
    assert rc == 0, err
    assert "masks identical at every step: yes" in out
    assert "classes" in out and "builtin:minic" in out
    walk = out.split("constrained walk", 1)[1].split("per-step mask time", 1)[0]
    rows = [line.split() for line in walk.splitlines()[2:] if line.strip()]
    # columns: step, allowed, full, classes+expand, same, token (which may hold spaces)
    assert 1 <= len(rows) <= 6
    assert [r[0] for r in rows] == [str(i) for i in range(len(rows))], walk
    assert all(len(r) >= 6 and r[4] == "yes" for r in rows), walk


def test_demo_on_a_tiny_vocabulary_reports_mismatch_free_walk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo on a grammar file and a tokenizer file; a one-step walk works too."""
    pytest.importorskip("xgrammar")
    tok = str(tiny_tokenizer(tmp_path))
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "(" [ab]* ")"\n')
    for steps in ("1", "20"):
        rc, out, err = run_cli(
            ["demo", "--grammar", str(grammar), "--tokenizer", tok, "--steps", steps], capsys
        )
        assert rc == 0, err
        assert "masks identical at every step: yes" in out
    generated = out.rsplit("generated text (random tokens under the grammar):", 1)[1].strip().encode()
    assert generated and fg.is_prefix(fg.parse_gbnf(grammar.read_text()), generated)
