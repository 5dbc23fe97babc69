"""The Lark front end (:func:`formalgram.parse_lark`) on its own: errors with their class and
position, mutated texts, nesting depth and size limits, ``load`` and printing.

These need only formalgram (no ``lark`` package); the comparisons with lark's and
XGrammar's readings are in ``tests/test_lark.py``.  Oracles: a table of texts with the
exact error class, line and column written by hand; for mutated texts, the text's own
line and column ranges; for printing, the grammar read back.
"""

from __future__ import annotations

import _data
import pytest
from _lark_cases import CASES, probes
from _mutations import mutated_texts
from hypothesis import given, settings

import formalgram
from formalgram import (
    FormalgramError,
    GrammarSyntaxError,
    GrammarTooLarge,
    UnsupportedConstruct,
    accepts,
    parse_lark,
)

# ---------------------------------------------------------------------------------------
# bad input

ERRORS: list[tuple[str, type[GrammarSyntaxError], int, int]] = [
    ("", GrammarSyntaxError, 1, 1),  # no start rule
    ('start: "a"\nstart: "b"', GrammarSyntaxError, 2, 1),
    ("start: b", GrammarSyntaxError, 1, 8),
    ("start: B", GrammarSyntaxError, 1, 8),
    ('start: "abc', GrammarSyntaxError, 1, 8),
    ("start: /abc", GrammarSyntaxError, 1, 8),
    ('start: ""', GrammarSyntaxError, 1, 8),
    ('start: "a"**', GrammarSyntaxError, 1, 12),
    ("start: *", GrammarSyntaxError, 1, 8),
    ('start: ("a"', GrammarSyntaxError, 1, 12),
    ('start: "a")', GrammarSyntaxError, 1, 11),
    ('start: ["a")', GrammarSyntaxError, 1, 12),
    ('start: ("a"\n "b")', GrammarSyntaxError, 1, 12),
    ('start "a"', GrammarSyntaxError, 1, 7),
    ('start: "a"~3..1', GrammarSyntaxError, 1, 12),
    ('start: "a"~99999999999999', GrammarSyntaxError, 1, 12),
    ('start: "a"~\u0663', GrammarSyntaxError, 1, 12),
    ('start: "\\x4"', GrammarSyntaxError, 1, 9),
    ('start: "\\U00110000"', GrammarSyntaxError, 1, 9),
    ('start: "ab".."c"', GrammarSyntaxError, 1, 8),
    ('start: "c".."a"', GrammarSyntaxError, 1, 8),
    ("start: /a(/", GrammarSyntaxError, 1, 10),
    ("start: /a{2,1}/", GrammarSyntaxError, 1, 10),
    ("start: /a\nb/", GrammarSyntaxError, 1, 8),
    ('start: A\nA: "a" A?', GrammarSyntaxError, 2, 1),
    ('start: A\nA: "a" b\nb: "b"', GrammarSyntaxError, 2, 8),
    ('start: A\nA: "a" -> b', GrammarSyntaxError, 2, 8),
    ('start: ("a" -> b)', GrammarSyntaxError, 1, 13),
    ('start: "a" -> b "c"', GrammarSyntaxError, 1, 17),
    ('start: "a"\n%ignore b\nb: "x"', GrammarSyntaxError, 2, 9),
    ('start: "a"\n%frobnicate', GrammarSyntaxError, 2, 1),
    ("start: WS\n%import common.NOPE", GrammarSyntaxError, 2, 16),
    ('start: a\n%override a: "y"', GrammarSyntaxError, 2, 11),
    ('start: "a" ?b\nb: "b"', GrammarSyntaxError, 1, 12),
    ('start: "a" @', GrammarSyntaxError, 1, 12),
    ('start: "a"\n  "b"', GrammarSyntaxError, 2, 3),
    ('start: "\ud800"', GrammarSyntaxError, 1, 9),
    ('start: x{"a"}\nx{p}: p', UnsupportedConstruct, 1, 8),
    ('_sep{x, sep}: x (sep x)*\nstart: "a"', UnsupportedConstruct, 1, 5),
    ("%declare X\nstart: X", UnsupportedConstruct, 1, 1),
    ("start: X\n%import python.X", UnsupportedConstruct, 2, 9),
    ("start: X\n%import .rel.X", UnsupportedConstruct, 2, 9),
    ("start: /a(?<=a|bc)/", GrammarSyntaxError, 1, 10),  # a look-behind of variable width, as re
    ("start: /(?=a)\\1/", UnsupportedConstruct, 1, 14),
    ("start: /^a/", UnsupportedConstruct, 1, 9),
    ("start: /\\bword/", UnsupportedConstruct, 1, 9),
    ("start: /a/l", UnsupportedConstruct, 1, 11),
    ('start: "^".."a"', UnsupportedConstruct, 1, 8),
]


@pytest.mark.parametrize(("text", "cls", "line", "col"), ERRORS, ids=[repr(e[0]) for e in ERRORS])
def test_errors_have_class_and_position(
    text: str, cls: type[GrammarSyntaxError], line: int, col: int
) -> None:
    with pytest.raises(cls) as err:
        parse_lark(text)
    assert type(err.value) is cls
    assert (err.value.line, err.value.column) == (line, col), str(err.value)


def test_lookaround_state_budget_is_a_typed_error() -> None:
    text = "start: T\nT: /(?:(?!a[ab]{6}b).)*/"
    with pytest.raises(GrammarTooLarge, match="look-around automaton"):
        parse_lark(text, max_states=20)
    assert parse_lark(text).accepts(b"abbbbbba")


def test_start_must_be_a_rule() -> None:
    with pytest.raises(GrammarSyntaxError, match="start rule 'top' is not defined"):
        parse_lark('start: "a"', start="top")
    assert parse_lark('top: "a"', start="top").accepts(b"a")


_VALID = [c[1] for c in CASES] + [
    _data.real_grammar(rel).read_text(encoding="utf-8")
    for rel in ("syncode/calc_grammar.lark", "syncode/json_grammar.lark")
]


_LARK_PIECES = [*list('()[]"/|:~.*+?-> \n%\\{},aA_1'), "->", "..", "%ignore", "%import"]


@settings(max_examples=300, deadline=None)
@given(mutated_texts(_VALID, _LARK_PIECES))
def test_mutated_texts_raise_only_positioned_errors(text: str) -> None:
    try:
        parse_lark(text)
    except GrammarSyntaxError as exc:
        lines = text.split("\n")
        assert 1 <= exc.line <= len(lines), str(exc)
        assert 1 <= exc.column <= len(lines[exc.line - 1]) + 1, str(exc)
    except FormalgramError:
        pass  # positions only for syntax errors


def test_deep_nesting_needs_no_recursion() -> None:
    depth = 20_000
    text = "start: " + "(" * depth + '"a"' + ")" * depth + "\n"
    assert parse_lark(text, max_depth=depth).accepts(b"a")
    with pytest.raises(GrammarSyntaxError, match="nested deeper than 100") as err:
        parse_lark(text)
    assert (err.value.line, err.value.column) == (1, 108)
    regex = "start: /" + "(" * 500 + "a" + ")" * 500 + "/\n"
    assert parse_lark(regex, max_depth=500).accepts(b"a")
    with pytest.raises(GrammarSyntaxError, match="nested deeper than 100"):
        parse_lark(regex)
    brackets = "start: " + "[" * 3000 + '"a"' + "]" * 3000
    assert parse_lark(brackets, max_depth=3000).accepts(b"")


def test_limits() -> None:
    with pytest.raises(GrammarSyntaxError, match="max_bytes"):
        parse_lark('start: "a"', max_bytes=5)
    with pytest.raises(GrammarSyntaxError, match="max_repeat") as err:
        parse_lark('start: "ab"~0..90000')
    assert (err.value.line, err.value.column) == (1, 12)


# ---------------------------------------------------------------------------------------
# load() and the package


def test_load_reads_lark_files(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    path = tmp_path / "g.lark"
    path.write_text('start: WORD ("," WORD)*\n%import common.WORD\n%ignore " "\n', encoding="utf-8")
    g = formalgram.load(path)
    assert g.start.name == "start" and g.accepts(b"ab, c") and not g.accepts(b" ab")
    assert formalgram.load(path, ignore_at_start=True).accepts(b" ab")
    with pytest.raises(TypeError):
        formalgram.load(path, lookahead="drop")
    gbnf = tmp_path / "g.gbnf"
    gbnf.write_text('root ::= "a"\n', encoding="utf-8")
    assert formalgram.load(gbnf).accepts(b"a")
    with pytest.raises(TypeError):
        formalgram.load(gbnf, ignore_at_start=True)


def test_names_and_printing() -> None:
    g = parse_lark('start: NAME ("," NAME)*\nNAME: /[a-z]+/\n%ignore " "')
    assert {"start", "NAME", "__ignore"} <= set(g.names)
    again = formalgram.parse_gbnf(formalgram.to_gbnf(g), g.start.name)
    for data in probes(g, 0, 20, b"ab, "):
        assert accepts(again, data) == accepts(g, data)
