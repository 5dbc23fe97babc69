"""The ``formalgram-cfgzip`` command line: its flags reach ``compress``, the README's main
job (``demo``) runs, and misuse ends in one line and exit status 2, never a traceback.

Oracles independent of the command: formalgram's Earley recognizer (the built-in
grammars accept hand-written members and reject non-members), the language of a start
rule chosen with ``--root`` (tokens that cannot occur in it must be invalid), and the
classes that ``compress`` computes when called directly.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _class_oracle import check_classes_with_earley

import formalgram as fg
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.cli import build_parser, compress_options, main
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.errors import CfgzipError
from formalgram_cfgzip.sources import (
    BUILTIN_GRAMMARS,
    builtin_grammar_text,
    builtin_schema_text,
    example_text,
)
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
    (["demo", "--grammar", "builtin:json", "--schema", "builtin:order"], "not allowed with argument"),
    (["demo", "--engine", "outlines"], "argument --engine: invalid choice"),
    (["demo", "--seed", "3"], "unrecognized arguments: --seed 3"),
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
                "--root",
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
    """``--root`` selects the language: tokens that cannot occur in ``other`` (y+) are invalid."""
    tok = tiny_tokenizer(tmp_path)
    grammar = tmp_path / "g.gbnf"
    text = 'root ::= "(" [ab]* ")"\nother ::= "y"+\n'
    grammar.write_text(text)
    out_dir = tmp_path / "classes"
    rc, out, _ = run_cli(
        ["compress", str(grammar), "--tokenizer", str(tok), "-o", str(out_dir), "--root", "other", "-q"],
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


def test_compress_lark_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.lark`` grammar is read with ``parse_lark`` (start rule ``start``); the GBNF text the
    engine must compile is written beside the classes, and the classes are those of its
    language (Earley on the Lark grammar itself is the oracle)."""
    tok = tiny_tokenizer(tmp_path)
    grammar = tmp_path / "g.lark"
    grammar.write_text('start: "(" AB* ")"\nAB: "a" | "b"\n')
    out_dir = tmp_path / "classes"
    rc, out, _ = run_cli(
        ["compress", str(grammar), "--tokenizer", str(tok), "-o", str(out_dir), "-q"], capsys
    )
    assert rc == 0 and "root='start'" in out, out
    text = (out_dir / "grammar.gbnf").read_text(encoding="utf-8")
    vocab = Vocabulary.load(str(tok))
    classes = TokenClasses.load(out_dir, grammar=fg.parse_gbnf(text, start="start"), vocab=vocab)
    lark = fg.parse_lark(grammar.read_text(encoding="utf-8"))
    for i, t in enumerate(TINY_TOKENS):
        # a token is valid exactly when it is a factor of some member: (, then a/b, then )
        valid = bool(t) and any(fg.is_prefix(lark, c + t) for c in (b"", b"(", b"(ab"))
        assert (int(classes.token_class[i]) != classes.invalid_class) == valid, t
    # the engines take the written text with the Lark start rule as their root, and only with it
    from formalgram_cfgzip import compile_grammar
    from formalgram_cfgzip.errors import ClassesMismatchError

    same = TokenClasses.load(out_dir, grammar=text, vocab=vocab, root="start", verify="all")
    native = compile_grammar(same, text, root="start", engine="native").matcher()
    assert native.accept_token(TINY_TOKENS.index(b"(")) and native.accept_token(TINY_TOKENS.index(b"ab"))
    assert not native.accept_token(TINY_TOKENS.index(b"("))
    with pytest.raises(ClassesMismatchError):
        compile_grammar(same, text, engine="native")
    pytest.importorskip("xgrammar")

    matcher = compile_grammar(classes, text, root="start").matcher()
    assert matcher.accept_token(TINY_TOKENS.index(b"(")) and matcher.accept_token(TINY_TOKENS.index(b"ab"))
    with pytest.raises(ClassesMismatchError):
        compile_grammar(classes, text)


def test_compress_native_writes_tables_from_the_same_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--native`` writes the native engine's tables beside the classes, built from the
    domains the compression recorded; the engine loads them, and its masks are Earley's."""
    from formalgram_cfgzip import engines
    from formalgram_cfgzip.engines.native import NativeCompiled

    tok = tiny_tokenizer(tmp_path)
    grammar = tmp_path / "g.gbnf"
    text = 'root ::= "(" [ab]* ")" root?\n'
    grammar.write_text(text)
    out_dir = tmp_path / "classes"
    rc, out, _ = run_cli(
        ["compress", str(grammar), "--tokenizer", str(tok), "-o", str(out_dir), "--native", "-q"], capsys
    )
    assert rc == 0 and "native tables:" in out, out
    assert (out_dir / "native" / "meta.json").is_file()
    vocab = Vocabulary.load(str(tok))
    classes = TokenClasses.load(out_dir, grammar=text, vocab=vocab)
    compiled = engines.compile_grammar(classes, text, engine="native")
    assert isinstance(compiled, NativeCompiled)
    assert compiled.tables.stats["domains_from_classes"] == 1.0  # as saved by the command
    g = fg.parse_gbnf(text)
    m = compiled.matcher()
    bm = compiled.allocate_token_bitmask()
    prefix = b""
    for piece in (b"(", b"ab", b")"):
        m.fill_next_token_bitmask(bm)
        bits = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[: vocab.logit_width]
        for i, t in enumerate(TINY_TOKENS):
            if t and i not in vocab.special_ids:
                assert bool(bits[i]) == fg.is_prefix(g, prefix + t), (prefix, t)
        tid = TINY_TOKENS.index(piece)
        assert m.accept_token(tid)
        prefix += piece


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


def demo_rows(out: str) -> list[list[str]]:
    """The per-step rows of the demo's table, split (step, allowed, full, classes, same,
    next, then the token and the text, which may hold spaces)."""
    table = out.split("  step  allowed", 1)[1].split("\nsummary:", 1)[0]
    return [line.split() for line in table.splitlines()[1:] if line.strip()]


def demo_summary(out: str) -> dict[str, str]:
    block = out.split("\nsummary:\n", 1)[1].split("\n\n", 1)[0]
    return {line[:20].strip(): line[20:].strip() for line in block.splitlines()}


def test_builtin_examples_are_members() -> None:
    """The demo's built-in texts belong to their languages, by the Earley recognizer (and
    the order document to its schema, by the jsonschema validator when it is installed);
    a text one byte short of them does not."""
    import json

    program = example_text(grammar="builtin:minic")
    minic = fg.parse_gbnf(builtin_grammar_text("minic"))
    assert fg.accepts(minic, program)
    assert b"while" in program and b"for" in program and b"if" in program
    assert not fg.accepts(minic, program.replace(b";", b"", 1))
    document = example_text(grammar="builtin:json")
    assert document == example_text(schema="builtin:order")
    assert fg.accepts(fg.parse_gbnf(builtin_grammar_text("json")), document)
    schema = json.loads(builtin_schema_text("order"))
    value = json.loads(document)
    assert set(schema["required"]) <= set(value) < set(schema["properties"])  # an optional one left out
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(value, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**value, "status": "lost"}, schema)
    pytest.importorskip("xgrammar")
    from formalgram_cfgzip.json_schema import from_json_schema

    g = fg.parse_gbnf(from_json_schema(builtin_schema_text("order")))
    assert fg.accepts(g, document)
    assert not fg.accepts(g, document.replace(b'"paid"', b'"lost"'))


def check_demo_masks(rows: list[list[str]], text: str, vocab: Vocabulary, ids: list[int]) -> None:
    """The demo's masks checked here, not by its own "same" column: before each token of
    ``ids``, raw XGrammar over the full vocabulary (``tests/_engine_oracle.py``, nothing of
    the adapters) allows a set whose size is the row's "allowed" count, and a compressed
    engine built here from ``compress`` allows exactly that set (the policy applied)."""
    from _engine_oracle import policy_allowed, raw_xgrammar_rows

    import formalgram_cfgzip
    from formalgram_cfgzip import engines

    assert len(rows) == len(ids)
    raw = raw_xgrammar_rows(text, vocab, ids)
    compressed = engines.compile_grammar(formalgram_cfgzip.compress(text, vocab, progress=False), text)
    matcher, mask = compressed.matcher(), compressed.allocate_token_bitmask(1)
    prefix = b""
    for row, tid, allowed in zip(rows, ids, raw, strict=True):
        want = policy_allowed(text, vocab, prefix, allowed)
        matcher.fill_next_token_bitmask(mask)
        bits = np.unpackbits(mask[0].view(np.uint8), bitorder="little")[: vocab.logit_width]
        assert set(np.flatnonzero(bits).tolist()) == want, (row, prefix)
        assert int(row[1]) == len(want), (row, prefix)
        assert tid in want and matcher.accept_token(tid)
        prefix += vocab.tokens[tid] or b""


def test_demo_runs_the_main_job(capsys: pytest.CaptureFixture[str]) -> None:
    """``formalgram-cfgzip demo`` (README), capped at 8 steps: the built-in program under
    the built-in grammar, Llama 3's own tokenization, every mask identical and every token
    allowed, and the decoded text is the program's beginning."""
    pytest.importorskip("xgrammar")
    quicktok = pytest.importorskip("quicktok")  # the built-in llama3 vocabulary
    rc, out, err = run_cli(["demo", "--steps", "8"], capsys)
    assert rc == 0, err
    assert err == ""
    assert "builtin:minic" in out and "quicktok's llama3 encoder" in out
    rows = demo_rows(out)
    assert [r[0] for r in rows] == [str(i) for i in range(8)], out
    assert all(r[4] == "yes" and r[5] == "ok" for r in rows), out
    program = example_text(grammar="builtin:minic")
    ids = quicktok.get_encoding("llama3").encode_ordinary(program.decode())[:8]
    prefix = Vocabulary.builtin("llama3").decode(ids)
    assert out.split("the accepted tokens joined):\n", 1)[1].startswith("  " + prefix.decode().split("\n")[0])
    summary = demo_summary(out)
    assert summary["masks identical"] == "8 of 8" and summary["next token allowed"] == "8 of 8"
    assert summary["whole text"].startswith("not checked: stopped after 8 of")
    assert "result: OK" in out
    check_demo_masks(rows, builtin_grammar_text("minic"), Vocabulary.builtin("llama3"), ids)


def test_demo_allowed_counts_against_earley(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A grammar file, a text file and a tokenizer file: the greedy tokenization, and at
    every step the number of allowed tokens is what the Earley recognizer allows (a token
    is allowed when the text so far followed by it is a prefix of the language); the
    vocabulary has no stop token, so the end is judged by the recognizer."""
    pytest.importorskip("xgrammar")
    tok = str(tiny_tokenizer(tmp_path))
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "(" [ab]* ")"\n')
    text = tmp_path / "t.txt"
    text.write_bytes(b"(abbab)")
    rc, out, err = run_cli(
        ["demo", "--grammar", str(grammar), "--tokenizer", tok, "--text", str(text)], capsys
    )
    assert rc == 0, err
    assert "greedy longest match" in out
    g = fg.parse_gbnf(grammar.read_text())
    rows = demo_rows(out)
    assert [r[6] for r in rows] == ["'('", "'ab'", "'ba'", "'b'", "')'"]
    done = b""
    for row, piece in zip(rows, [b"(", b"ab", b"ba", b"b", b")"], strict=True):
        assert int(row[1]) == sum(1 for t in TINY_TOKENS if fg.is_prefix(g, done + t)), (row, done)
        done += piece
    assert "accepted (Earley" in demo_summary(out)["whole text"]
    for engine in ("xgrammar", "llguidance", "native"):  # the same run under llguidance, when installed
        if engine == "llguidance" and importlib.util.find_spec("llguidance") is None:
            continue
        rc, out, err = run_cli(
            ["demo", "--grammar", str(grammar), "--tokenizer", tok, "--text", str(text), "--steps", "2",
             "--engine", engine],
            capsys,
        )  # fmt: skip
        assert rc == 0, err
        assert [r[1] for r in demo_rows(out)] == [r[1] for r in rows[:2]]


def test_demo_schema_file_and_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--schema FILE --text FILE`` (and the text on standard input): decoded under
    XGrammar's grammar for the schema to its end, where the stop token is allowed."""
    import io
    import json

    pytest.importorskip("xgrammar")
    quicktok = pytest.importorskip("quicktok")
    schema = tmp_path / "event.schema.json"
    schema.write_text(json.dumps({
        "type": "object",
        "properties": {
            "kind": {"enum": ["click", "view"]},
            "at": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["kind", "at"],
    }))  # fmt: skip
    document = b'{"kind": "view", "at": 1700000000, "tags": ["home", "mobile"]}'
    text = tmp_path / "event.json"
    text.write_bytes(document)
    rc, out, err = run_cli(["demo", "--schema", str(schema), "--text", str(text)], capsys)
    assert rc == 0, err
    summary = demo_summary(out)
    n = len(demo_rows(out))
    assert summary["masks identical"] == f"{n} of {n}" and summary["next token allowed"] == f"{n} of {n}"
    assert summary["whole text"].startswith("accepted: after the last token")
    assert demo_rows(out)[-1][6] == "<|end_of_text|>"
    assert out.split("the accepted tokens joined):\n", 1)[1].split("\n")[0] == "  " + document.decode()
    vocab = Vocabulary.builtin("llama3")
    ids = quicktok.get_encoding("llama3").encode_ordinary(document.decode())
    from formalgram_cfgzip.json_schema import from_json_schema

    end = vocab.tokens.index(b"<|end_of_text|>")
    check_demo_masks(demo_rows(out), from_json_schema(json.loads(schema.read_text())), vocab, [*ids, end])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(document.replace(b"view", b"scroll"))))
    rc, out, err = run_cli(["demo", "--schema", str(schema), "--text", "-"], capsys)
    assert rc == 1
    (line,) = err.splitlines()  # '{"kind": "' is 10 bytes, then the 's' no enum value has
    assert line.startswith(
        "formalgram-cfgzip: demo: the text leaves the language at byte 10 (line 1, column 11), byte b's'"
    ), err
    assert line.endswith("'scroll'"), err


def test_demo_reports_where_the_text_leaves_the_language(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A text outside the language: exit 1 and one line naming the byte where it leaves,
    the first byte that XGrammar refuses when fed one byte at a time (the demo finds it
    with the Earley recognizer); a text that stops too early: exit 1, 'only a prefix'."""
    pytest.importorskip("xgrammar")
    pytest.importorskip("quicktok")
    from formalgram_cfgzip.engines import compile_full

    bad = b"int main() {\n    int x = 1;\n    x = x + @y;\n    return x;\n}\n"
    by_byte = compile_full(Vocabulary([bytes([b]) for b in range(256)]), builtin_grammar_text("minic"))
    m = by_byte.matcher()
    where = next(k for k, b in enumerate(bad) if not m.accept_token(b))
    assert bad[where : where + 1] == b"@"  # the engine's own reading
    line = bad.count(b"\n", 0, where) + 1
    column = where - bad.rfind(b"\n", 0, where)
    for data, message in [
        (bad, f"the text leaves the language at byte {where} (line {line}, column {column}), byte b'@'"),
        (b"int main() {\n    return 0;\n", "the text is only a prefix of the language: at its end, byte 27"),
    ]:
        path = tmp_path / "t.c"
        path.write_bytes(data)
        rc, out, err = run_cli(["demo", "--text", str(path)], capsys)
        assert rc == 1, out
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith("formalgram-cfgzip: demo: " + message), err
        assert "result: FAILED" in out


def test_demo_bad_inputs_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = str(tiny_tokenizer(tmp_path))
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "(" [ab]* ")"\n')
    cases = [
        (
            ["demo", "--grammar", str(grammar), "--tokenizer", tok],
            "has no built-in text: give one with --text",
        ),
        (["demo", "--text", str(tmp_path / "missing.c")], "text file not found"),
        (["demo", "--schema", "builtin:invoice"], "unknown built-in schema 'invoice'"),
        (["demo", "--schema", str(tmp_path / "missing.json")], "cannot read JSON schema"),
        (["demo", "--grammar", "builtin:c"], "unknown built-in grammar"),
    ]
    for args, message in cases:
        rc, out, err = run_cli(args, capsys)
        assert rc == 2, (args, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("formalgram-cfgzip: error: "), (args, err)
        assert message in lines[0], (args, err)


def test_compress_builtin_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``compress --json-schema builtin:order`` writes the grammar XGrammar makes of it."""
    pytest.importorskip("xgrammar")
    from formalgram_cfgzip.json_schema import from_json_schema

    out_dir = tmp_path / "order"
    rc, _, err = run_cli(
        ["compress", "--json-schema", "builtin:order", "--tokenizer", str(tiny_tokenizer(tmp_path)),
         "-o", str(out_dir), "-q"],
        capsys,
    )  # fmt: skip
    assert rc == 0, err
    assert (out_dir / "grammar.gbnf").read_text() == from_json_schema(builtin_schema_text("order"))
