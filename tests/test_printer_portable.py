"""The printer's portable output: ``-`` and ``^`` in classes, ``portable_names=True``.

Oracles: the Earley recognizer on the reparsed text (same language as the original), the
bounded enumeration of both grammars, and llguidance's own GBNF reader, which rejects
``\\-`` and ``\\^`` and folds rule names (``a-b`` and ``a_b``, ``Text`` and ``text`` collide).
"""

from __future__ import annotations

import re

import _data
import pytest
from hypothesis import HealthCheck, given, settings

from formalgram import Grammar, enumerate_strings, sample
from formalgram.errors import EmptyLanguageError
from formalgram.recognize.earley import accepts
from formalgram.syntax.gbnf import load, parse_gbnf
from formalgram.syntax.printer import to_gbnf
from formalgram.testing import grammars


def _same_language(g: Grammar, h: Grammar, max_len: int = 4) -> None:
    alphabet = bytes(sorted({b for m in g.masks for b in range(256) if m >> b & 1}))[:6] or b"a"
    assert enumerate_strings(g, max_len, alphabet) == enumerate_strings(h, max_len, alphabet)
    try:
        strings = sample(g, 20, seed=1, max_len=40)
    except EmptyLanguageError:
        with pytest.raises(EmptyLanguageError):
            sample(h, 1)
        return
    for s in strings:
        assert accepts(h, s), s


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("root ::= [-+] [0-9]", "root ::= [-+] [0-9]\n"),
        ("root ::= [a\\-z]", "root ::= [-az]\n"),
        ("root ::= [+--]", "root ::= [-+,]\n"),
        ("root ::= [\\^a]", "root ::= [a^]\n"),
        ("root ::= [\\^-~]", "root ::= [\\^-~]\n"),
        ("root ::= [!\\^-~]", "root ::= [!^-~]\n"),
    ],
)
def test_dash_first_and_caret_not_first(text: str, printed: str) -> None:
    g = parse_gbnf(text)
    out = to_gbnf(g)
    assert out == printed
    assert parse_gbnf(out) == g


def test_portable_names_are_distinct_after_folding() -> None:
    text = 'root ::= a-b a_b Text text 1x start\na-b ::= "1"\na_b ::= "2"\nText ::= "3"\ntext ::= "4"\n'
    text += '1x ::= "5"\nstart ::= "6"\n'
    g = parse_gbnf(text.replace(" 1x", " x1").replace("1x ::=", "x1 ::="))
    out = to_gbnf(g, portable_names=True)
    names = [line.split(" ::= ")[0] for line in out.splitlines()]
    assert names[0] == "root"
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in names)
    assert len(set(names)) == len(names) and "start" not in names
    h = parse_gbnf(out)
    assert enumerate_strings(h, 6) == enumerate_strings(g, 6) == [b"123456"]


def test_portable_names_with_another_start() -> None:
    g = parse_gbnf('expr ::= "(" expr ")" | "x"\nroot ::= "y"', start="expr")
    out = to_gbnf(g, portable_names=True)
    assert out.splitlines()[0].startswith("root ::= ")
    _same_language(g, parse_gbnf(out))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(alphabet=b"a-^"))
def test_random_grammars_portable_round_trip(g: Grammar) -> None:
    _same_language(g, parse_gbnf(to_gbnf(g, portable_names=True)))


@pytest.mark.parametrize(
    "rel",
    [
        "json_schemas/purchase_order.gbnf",
        "json_schemas/sensor_reading.gbnf",
        "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    ],
)
def test_llguidance_reads_portable_text_it_cannot_read_as_written(rel: str) -> None:
    llg = pytest.importorskip("llguidance")
    path = _data.grammar(rel)
    text = path.read_text(encoding="utf-8")
    with pytest.raises(ValueError):
        llg.grammar_from("gbnf", text)
    llg.grammar_from("gbnf", to_gbnf(load(path), portable_names=True))
