"""Tests of the GBNF printer (formalgram.syntax.printer).

Contracts: ``parse_gbnf(to_gbnf(g)) == g`` (structural equality), and XGrammar compiles the
printed text and recognizes the same bytes.  Oracles: structural equality of the model,
the Earley recognizer ``formalgram.accepts``, and XGrammar.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import _data
import pytest
from _xgrammar_child import Crash, Refused, prestart_shared_worker, shared_worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram import ByteSet, Grammar, Nonterminal, Production, accepts, sample
from formalgram.errors import GrammarError
from formalgram.syntax.gbnf import load, parse_gbnf
from formalgram.syntax.printer import to_gbnf
from formalgram.testing import grammars
from formalgram.utf8 import MAX_CODE_POINT, complement_ranges, encode_code_point, normalize_ranges

GRAMMARS = _data.GRAMMARS
prestart_shared_worker()  # XGrammar on random grammars runs in this child process

CORPUS = _data.grammar_files()
# the heavy run: both corpora (the shared one when present; tests/_data.py)
SWEEP_CORPUS = _data.sweep_files()


class XMatcher:
    """XGrammar full-match verdicts for one grammar text."""

    def __init__(self, text: str, root: str = "root") -> None:
        xgr = pytest.importorskip("xgrammar")
        from xgrammar.testing import _get_matcher_from_grammar

        self.matcher = _get_matcher_from_grammar(xgr.Grammar.from_ebnf(text, root_rule_name=root))

    def __call__(self, data: bytes) -> bool:
        self.matcher.reset()
        return bool(self.matcher.accept_string(data)) and bool(self.matcher.is_terminated())


def _load(rel: str, root: Path = GRAMMARS) -> Grammar:
    return load(root / rel, lookahead="drop")


# --------------------------------------------------------------------------------------
# round trip on the corpus


@pytest.mark.parametrize("rel", CORPUS)
def test_corpus_round_trip(rel: str) -> None:
    g = _load(rel)
    text = to_gbnf(g)
    assert parse_gbnf(text, g.start.name) == g
    assert text.startswith(g.start.name + " ::= ")


@pytest.mark.xgrammar
@pytest.mark.parametrize("rel", CORPUS)
def test_corpus_printed_text_compiles_in_xgrammar(rel: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    g = _load(rel)
    xgr.Grammar.from_ebnf(to_gbnf(g), root_rule_name=g.start.name)


def _mutations(s: bytes, rng: random.Random, k: int) -> list[bytes]:
    out = []
    for _ in range(k):
        b = bytearray(s)
        r = rng.random()
        if b and r < 0.4:
            b[rng.randrange(len(b))] = rng.choice([rng.randrange(256), rng.choice(s)])
        elif b and r < 0.7:
            del b[rng.randrange(len(b))]
        else:
            b.insert(rng.randrange(len(b) + 1), rng.choice([rng.randrange(256), *(s or b"a")]))
        out.append(bytes(b))
    return out


def _differential(rel: str, n_samples: int, n_mut: int, max_len: int = 300, root: Path = GRAMMARS) -> None:
    g = _load(rel, root)
    printed = XMatcher(to_gbnf(g), g.start.name)
    original: XMatcher | None
    try:
        original = XMatcher((root / rel).read_text(encoding="utf-8"))
    except Exception:  # XGrammar refuses some llama.cpp syntax (e.g. empty alternatives)
        original = None
    rng = random.Random(rel)
    try:
        members = sample(g, n_samples, seed=7, max_len=max_len)
    except GrammarError:  # the shortest member is longer than max_len
        members = sample(g, n_samples, seed=7, max_len=4 * max_len)
    for s in members:
        assert accepts(g, s)
        assert printed(s), (rel, s)
        assert original is None or original(s), (rel, s)
        for m in _mutations(s, rng, n_mut):
            ours = accepts(g, m)
            assert printed(m) == ours, (rel, m)
            assert original is None or original(m) == ours, (rel, m)


@pytest.mark.xgrammar
@pytest.mark.parametrize("rel", [r for r in CORPUS if "repeat_ref_complex" not in r])
def test_corpus_differential_quick(rel: str) -> None:
    _differential(rel, 3, 3, max_len=120)


@pytest.mark.heavy
@pytest.mark.xgrammar
@pytest.mark.parametrize("rel", [r for r in SWEEP_CORPUS if "repeat_ref_complex" not in r])
def test_corpus_differential_full(rel: str) -> None:
    _differential(rel, 25, 6, root=_data.corpus_of(rel))


def _json_cases() -> list[str]:
    """The json-mode-eval cases of the shared corpus (not redistributable: heavy run only)."""
    folder = _data.SHARED_GRAMMARS / "json_schemas" / "json_mode_eval"
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("JME_*.json"))


JSON_CASES = _json_cases()


def _check_json_documents(rel: str, root: Path, docs: list[object]) -> None:
    g = _load(rel, root)
    xm = XMatcher((root / rel).read_text(encoding="utf-8"))
    printed = XMatcher(to_gbnf(g))
    for doc in docs:
        for text in (json.dumps(doc), json.dumps(doc, indent=2, ensure_ascii=False)):
            data = text.encode()
            ours = accepts(g, data)
            assert xm(data) == ours, (rel, text[:80])
            assert printed(data) == ours, (rel, text[:80])


@pytest.mark.xgrammar
@pytest.mark.parametrize("name", _data.json_schema_names())
def test_json_instances_quick(name: str) -> None:
    schema = json.loads((_data.JSON_SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    _check_json_documents(f"json_schemas/{name}.gbnf", GRAMMARS, schema["examples"])


@pytest.mark.heavy
@pytest.mark.xgrammar
@pytest.mark.parametrize("name", JSON_CASES)
def test_json_instances_full(name: str) -> None:
    case = json.loads(
        (_data.SHARED_GRAMMARS / "json_schemas" / "json_mode_eval" / f"{name}.json").read_text(
            encoding="utf-8"
        )
    )
    docs = [test["data"] for test in case["tests"]]
    _check_json_documents(f"derived/json_mode_eval_xgrammar/{name}.gbnf", _data.SHARED_GRAMMARS, docs)


# --------------------------------------------------------------------------------------
# printing rules


def test_golden_text() -> None:
    g = parse_gbnf('root ::= item+ ws\nitem ::= "é\\"" [a-z\\-] [^"\\n]\nws ::= [ \\t]*')
    assert to_gbnf(g) == (
        "root ::= item root-star ws\n"
        'item ::= "é\\"" [-a-z] item-chars\n'
        'ws ::= [\\t ] ws | ""\n'
        'root-star ::= item root-star | ""\n'
        'item-chars ::= [^\\n"]\n'
    )


def test_start_symbol_first_and_preserved() -> None:
    g = parse_gbnf('a ::= "x" b\nb ::= "y"\nroot ::= a', start="b")
    text = to_gbnf(g)
    assert text.startswith("b ::= ")
    assert parse_gbnf(text, "b") == g


def test_rule_named_by_a_digit_prints_and_parses_back() -> None:
    """``0 ::= "a"`` referenced from ``root``: printed as written, parsed back equal."""
    g = parse_gbnf('root ::= 0\n0 ::= "a"')
    text = g.to_gbnf()
    assert text == 'root ::= 0\n0 ::= "a"\n'
    h = parse_gbnf(text)
    assert h == g
    assert accepts(h, b"a") and not accepts(h, b"0") and not accepts(h, b"")


@pytest.mark.parametrize("name", ["0", "42", "-", "-1", "_", "0.", ".0", "1e5", "--", ".-", "Regex", "a.b"])
def test_unusual_valid_names_round_trip(name: str) -> None:
    """Names made of digits, dashes and dots, and macro names without ``(``: the printed
    text means the same grammar (structural equality, and Earley on members)."""
    root, x = Nonterminal("root"), Nonterminal(name)
    g = Grammar([Production(root, [x, ByteSet.single(98)]), Production(x, [ByteSet.single(97), x]),
                 Production(x, [])], root)  # fmt: skip
    h = parse_gbnf(to_gbnf(g))
    assert h == g
    for data, want in ((b"b", True), (b"aab", True), (b"a", False), (name.encode() + b"b", False)):
        assert accepts(h, data) is want, data


@pytest.mark.parametrize("name", ["S'", "..", "a b", "é"])
def test_invalid_names_rejected(name: str) -> None:
    s = Nonterminal(name)
    g = Grammar([Production(s, [ByteSet.single(97)])], s)
    with pytest.raises(GrammarError, match="not a valid GBNF identifier"):
        to_gbnf(g)


def test_nonterminal_without_rules_prints_empty_class() -> None:
    s, a = Nonterminal("S"), Nonterminal("A")
    g = Grammar([Production(s, [a, ByteSet.single(97)]), Production(s, [])], s)
    text = to_gbnf(g)
    assert "A ::= []" in text
    assert parse_gbnf(text, "S") == g
    empty = Grammar([], "S")
    assert parse_gbnf(to_gbnf(empty), "S") == empty


def test_raw_bytes_round_trip_and_xgrammar_refuses() -> None:
    s, b = Nonterminal("S"), Nonterminal("B")
    cont = ByteSet.from_range(0x80, 0xBF)
    g = Grammar(
        [
            Production(s, [ByteSet.single(0xC3), b]),
            Production(b, [cont, ByteSet.from_bytes(b"a\xff")]),
            Production(b, [ByteSet.single(0xC3), ByteSet.single(0xA9), ByteSet.single(0x80)]),
        ],
        s,
    )
    text = to_gbnf(g)
    assert "\\x{C3}" in text and "\\x{80}-\\x{BF}" in text
    assert '"é\\x{80}"' in text
    assert parse_gbnf(text, "S") == g
    xgr = pytest.importorskip("xgrammar")
    with pytest.raises(Exception):  # noqa: B017 -- never silently misread by XGrammar
        xgr.Grammar.from_ebnf(text, root_rule_name="S")


# --------------------------------------------------------------------------------------
# random grammars


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=5, alphabet=b'ab"\\\n-]^\x00\x7f\xc3\xa9\x80', allow_empty_terminal=True))
def test_random_grammar_round_trip(g: Grammar) -> None:
    assert parse_gbnf(to_gbnf(g), g.start.name) == g


code_point_sets = st.lists(
    st.tuples(st.integers(0, MAX_CODE_POINT), st.integers(0, 0x3000)).map(
        lambda t: (t[0], min(MAX_CODE_POINT, t[0] + t[1]))
    ),
    min_size=1,
    max_size=4,
).map(normalize_ranges)


def _class_text(ranges: tuple[tuple[int, int], ...], negate: bool) -> str:
    def esc(cp: int) -> str:
        return f"\\U{cp:08X}"

    items = complement_ranges(ranges) if negate else ranges
    return ("[^" if negate else "[") + "".join(f"{esc(a)}-{esc(b)}" for a, b in items) + "]"


def _member_verdicts(text: str, datas: list[bytes]) -> list[bool]:
    """XGrammar's membership verdicts, computed in a child process (tests/_xgrammar_child.py)."""
    result = shared_worker().run(text, datas)
    if isinstance(result, Crash):  # never seen on classes; reported with the text, pytest survives
        pytest.fail(result.describe())
    assert not isinstance(result, Refused), f"{result.message}\n{text}"
    return [member for member, _ in result]


# random texts go to XGrammar in a child process, so that a crash fails this test with the text
@pytest.mark.xgrammar
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(code_point_sets, st.booleans(), st.randoms(use_true_random=False))
def test_random_classes_match_xgrammar(
    ranges: tuple[tuple[int, int], ...], negate: bool, rnd: random.Random
) -> None:
    if importlib.util.find_spec("xgrammar") is None:
        pytest.skip("xgrammar is not installed")
    text = f'root ::= "<" c ">"\nc ::= {_class_text(ranges, negate)}'
    g = parse_gbnf(text)
    assert parse_gbnf(to_gbnf(g)) == g
    probes = {0, 0x7F, 0x80, 0xD800, 0xDFFF, 0xFFFF, 0x10000, MAX_CODE_POINT}
    for lo, hi in ranges:
        probes.update((lo, hi, max(0, lo - 1), min(MAX_CODE_POINT, hi + 1), rnd.randint(lo, hi)))
    datas = [b"<" + encode_code_point(cp) + b">" for cp in sorted(probes)]
    datas += [b"<" + bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4))) + b">" for _ in range(20)]
    ours = [accepts(g, d) for d in datas]
    for grammar_text in (text, to_gbnf(g)):
        theirs = _member_verdicts(grammar_text, datas)
        assert theirs == ours, [(d, a) for d, a, b in zip(datas, theirs, ours, strict=True) if a != b]
