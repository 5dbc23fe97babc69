"""The Lark front end (:func:`formalgram.parse_lark`) against lark's and XGrammar's readings.

Oracles, all independent of formalgram's parser:

* the ``lark`` package's own Earley parser, ``lark.Lark(text, parser="earley",
  lexer="dynamic_complete")``, which tries every terminal at every position with every
  prefix of the match its regular expression gives there; compared with
  ``ignore_at_start=True``, the reading of lark's parser, up to the documented differences
  pinned below;
* the same parser with every terminal matched leftmost-longest (the ``regex`` package's
  POSIX mode), so that the prefixes it tries are every member of the terminal's language:
  the CFG reading of lark's own grammar, the oracle of the random grammars;
* XGrammar's ``Grammar.from_lark`` with a ``GrammarMatcher`` fed bytes (in the child
  process of ``tests/_xgrammar_child.py``); compared with the default reading, XGrammar's;
* ``re.fullmatch`` (terminals, case-insensitive strings) and hand-written verdicts.

The real grammars are SynCode's and two of lark's examples, kept in ``tests/data/grammars``;
``-m heavy`` also sweeps the shared corpus's ``lark/`` and ``syncode/`` folders.  Errors,
limits and printing, which need no ``lark``, are in ``tests/test_lark_errors.py``.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import re

import _data
import pytest
from _counted import checks_at_least, gave_up
from _lark_cases import CASES, probes
from _xgrammar_child import Crash, Refused, prestart_shared_worker, shared_worker
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from formalgram import (
    UnsupportedConstruct,
    accepts,
    parse_lark,
)
from formalgram.syntax.lark import COMMON_TERMINALS
from formalgram.syntax.regex import case_insensitive_set
from formalgram.utf8 import normalize_ranges
from formalgram_cfgzip.engines._xgrammar_guard import matches_known_crash

lark = pytest.importorskip("lark")
prestart_shared_worker()  # XGrammar's import (seconds) overlaps with the first tests


# ---------------------------------------------------------------------------------------
# oracles


def lark_parser(text: str, start: str = "start") -> lark.Lark:
    return lark.Lark(text, parser="earley", lexer="dynamic_complete", start=start)


def lark_cfg_parser(text: str) -> lark.Lark:
    """lark's parser with every member of every terminal's language tried at each position.

    ``dynamic_complete`` takes one match of a terminal's regular expression, then every
    prefix of that match that the expression matches.  With Python's leftmost-first
    alternation the one match need not be the longest member (lark compiles
    ``T: "a" "a" | "a" "b"~0..2`` to ``(?:a(?:b){0,2}|aa)``, which matches ``a`` at
    ``aa``), so a member can be missed.  Leftmost-longest matching makes the one match the
    longest member and each prefix's match the longest member within it: every member is
    tried, which is the CFG reading of lark's own grammar.
    """
    regex = pytest.importorskip("regex")
    return lark.Lark(text, parser="earley", lexer="dynamic_complete", regex=True, g_regex_flags=regex.POSIX)


def lark_accepts(parser: lark.Lark, data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


KNOWN_CRASH = "XGrammar's known crash"


def xgrammar_members(text: str, data: list[bytes]) -> list[bool] | str | None:
    """XGrammar's membership verdicts, None where it refuses the text, or :data:`KNOWN_CRASH`.

    A text whose conversion (``Grammar.from_lark``, which does not crash) has the shape of
    XGrammar 0.2.9's known ``compile_grammar`` crash (``start: start?`` converts to
    ``root ::= root{0, 1}``; see ``formalgram_cfgzip/engines/_xgrammar_guard.py``) is not
    compiled; any other crash fails the test.
    """
    xgr = pytest.importorskip("xgrammar")
    try:
        converted = str(xgr.Grammar.from_lark(text))
    except Exception:
        converted = ""
    if converted and matches_known_crash(converted):
        return KNOWN_CRASH
    result = shared_worker().run(text, data, "root", lark=True)
    if isinstance(result, Crash):
        pytest.fail(f"XGrammar crashed on a Lark grammar: {result.describe()}")
    if isinstance(result, Refused):
        return None
    return [member for member, _ in result]


def xgrammar_comparable(data: bytes) -> bool:
    """ASCII without U+001C..U+001F: where XGrammar's \\s \\d \\w and case folding agree with Python's."""
    return data.isascii() and not any(0x1C <= b <= 0x1F for b in data)


def strip_priorities(text: str) -> str:
    """The text without ``name.N`` priorities (XGrammar refuses them; they do not change the language)."""
    return re.sub(r"^(\s*[?!]*[A-Za-z_][A-Za-z_0-9]*)\.-?[0-9]+(\s*:)", r"\1\2", text, flags=re.M)


# ---------------------------------------------------------------------------------------
# hand-written grammars: formalgram, lark and the expected verdicts agree


@pytest.mark.parametrize(("name", "text", "members", "others"), CASES, ids=[c[0] for c in CASES])
def test_hand_written_grammars_agree_with_lark(
    name: str, text: str, members: list[str], others: list[str]
) -> None:
    g = parse_lark(text, ignore_at_start=True)
    parser = lark_parser(text)
    for s in members:
        assert lark_accepts(parser, s.encode()), (name, s)  # the table itself is checked
        assert accepts(g, s.encode()), (name, s)
    for s in others:
        assert not lark_accepts(parser, s.encode()), (name, s)
        assert not accepts(g, s.encode()), (name, s)
    # and on strings around them
    for data in probes(g, 7, 12, b"abxy019 \n"):
        assert accepts(g, data) == lark_accepts(parser, data), (name, data)


def test_ignore_reading_is_xgrammars() -> None:
    text = 'start: a B\na: "x" | \nB: "b"\n%ignore " "'
    g = parse_lark(text)
    lead = parse_lark(text, ignore_at_start=True)
    data = [b"x b", b"xb  ", b" xb", b"b", b" b", b"   ", b"", b"x  b ", b"x b b"]
    ours = [accepts(g, d) for d in data]
    assert ours == [True, True, False, True, False, False, False, True, False]
    assert [accepts(lead, d) for d in data] == [True, True, True, True, True, False, False, True, False]
    got = xgrammar_members(text, data)
    assert got == ours


def test_xgrammar_agrees_on_hand_written_grammars() -> None:
    checked = 0
    for name, text, members, others in CASES:
        if name in ("case-insensitive", "regex-unicode-classes", "regex-case"):
            continue  # XGrammar reads these in ASCII: pinned in test_documented_differences
        g = parse_lark(text)
        data = [s.encode() for s in members + others if not s.startswith(" ")]
        data += [d for d in probes(g, 3, 12, b"abxy019 \n") if xgrammar_comparable(d)]
        got = xgrammar_members(strip_priorities(text), data)
        if got is None:
            continue  # a construct XGrammar refuses (%override / %extend, ranges of non-ASCII)
        assert [accepts(g, d) for d in data] == got, name
        checked += 1
    assert checked >= len(CASES) - 8


def test_documented_differences() -> None:
    """Where formalgram's reading and lark's or XGrammar's are known to differ (docs/syntax.md)."""
    # 1. a CFG has no longest match: an ignored comment may end anywhere, lark's lexer eats the line
    text = 'start: "a" "b"\n%ignore /--[^\\n]*/\n%ignore /[ \\n]/'
    g = parse_lark(text)
    assert accepts(g, b"a --c\nb") and accepts(g, b"a --cb")
    parser = lark_parser(text)
    assert lark_accepts(parser, b"a --c\nb") and not lark_accepts(parser, b"a --cb")
    assert xgrammar_members(text, [b"a --cb"]) == [True]  # XGrammar reads it as formalgram does
    # 2. a lazy quantifier has the language of the greedy one; lark's lexer stops at the first match
    text = 'start: S "b"?\nS: /".*?"/'
    g = parse_lark(text)
    assert accepts(g, b'"a"b"')
    assert not lark_accepts(lark_parser(text), b'"a"b"')
    # 3. XGrammar reads \d \w, "x"i and /.../i in ASCII and \s as JavaScript does; lark and
    # formalgram read them as Python's re does
    cases = [
        ("start: /\\s/", "\x1c"),
        ("start: /\\s/", "\x85"),
        ("start: /\\d/", "\u0663"),
        ('start: "k"i', "\u212a"),
        ("start: /s/i", "\u017f"),
    ]
    for text, s in cases:
        assert accepts(parse_lark(text), s.encode()), text
        assert lark_accepts(lark_parser(text), s.encode()), text
        assert xgrammar_members(text, [s.encode()]) == [False], text
    assert not accepts(parse_lark("start: /\\s/"), "\ufeff".encode())
    # XGrammar 0.2.8 leaves U+FEFF out of \s, as Python does; 0.2.9 takes it in
    bom_is_space = importlib.metadata.version("xgrammar") != "0.2.8"
    assert xgrammar_members("start: /\\s/", ["\ufeff".encode()]) == [bom_is_space]
    # 4. XGrammar's ESCAPED_STRING takes a raw newline; lark's (and formalgram's) does not
    text = "start: ESCAPED_STRING\n%import common.ESCAPED_STRING"
    assert not accepts(parse_lark(text), b'"a\nb"')
    assert not lark_accepts(lark_parser(text), b'"a\nb"')
    assert xgrammar_members(text, [b'"a\nb"']) == [True]


def test_terminal_alternatives_are_read_as_languages() -> None:
    """A terminal is the language of its regular expression, every member of it at every
    position (docs/syntax.md, "One match of a terminal").  lark compiles
    ``T0: "a" "a" | "a" "b"~0..2`` to ``(?:a(?:b){0,2}|aa)`` (alternatives sorted longest
    first by their widest match), whose language holds ``aa``: ``re.fullmatch`` says so, and
    so do formalgram, XGrammar and lark's grammar with leftmost-longest matching.  lark's
    Earley parser (``dynamic_complete``) tries only the prefixes of the leftmost-first match,
    ``a`` at ``aa``, and rejects ``aa``."""
    text = 'T0: "a" "a" | "a" "b"~0..2\nstart: T0\n'
    data = [b"a", b"aa", b"ab", b"abb", b"abbb", b"b", b""]
    ours = [accepts(parse_lark(text, ignore_at_start=True), d) for d in data]
    assert ours == [True, True, True, True, False, False, False]
    (pattern,) = [t.pattern.to_regexp() for t in lark_parser(text).terminals]
    assert pattern == "(?:a(?:b){0,2}|aa)"
    assert [re.fullmatch(pattern, d.decode()) is not None for d in data] == ours
    assert [lark_accepts(lark_cfg_parser(text), d) for d in data] == ours
    parser = lark_parser(text)
    assert [lark_accepts(parser, d) for d in data] == [True, False, True, True, False, False, False]
    assert xgrammar_members(text, data) == ours


# ---------------------------------------------------------------------------------------
# lark's common.lark


@pytest.mark.parametrize("name", sorted(COMMON_TERMINALS))
def test_common_terminals_match_lark(name: str) -> None:
    text = f"start: {name}\n%import common.{name}\n"
    g = parse_lark(text)
    parser = lark_parser(text)
    pattern = re.compile(COMMON_TERMINALS[name])
    hand = ["0", "12", "+1", "-1.5e3", ".5", "1.", "1e", "e5", "0x1F", "aF", "_a1", "a b", " \t", "\r\n\n"]
    hand += [
        '""',
        '"a\\"b"',
        '"a"b"',
        '"\\\\"',
        '"\\"',
        "/* a */",
        "/* a */ */",
        "/**/",
        "// x",
        "# x",
        "-- x",
    ]
    data = [s.encode() for s in hand] + probes(g, 11, 25, b'0123456789.eE+-"\\ab/*#\n \t')
    for d in data:
        verdict = lark_accepts(parser, d)
        assert accepts(g, d) == verdict, (name, d)
        try:
            assert (pattern.fullmatch(d.decode("utf-8")) is not None) == verdict, (name, d)
        except UnicodeDecodeError:
            assert not verdict


def test_common_terminals_match_xgrammar_on_ascii() -> None:
    for name in sorted(COMMON_TERMINALS):
        text = f"start: {name}\n%import common.{name}\n"
        g = parse_lark(text)
        data = [d for d in probes(g, 5, 15, b'0123456789.eE+-"\\ab/*#\n \t') if xgrammar_comparable(d)]
        got = xgrammar_members(text, data)
        assert got is not None, name
        ours = [accepts(g, d) for d in data]
        if name == "ESCAPED_STRING":  # XGrammar allows a raw newline inside (pinned above)
            ours = [
                v or (accepts(g, d.replace(b"\n", b"x")) and b"\n" in d)
                for d, v in zip(data, ours, strict=True)
            ]
        assert ours == got, name


def test_lazy_common_fragments_are_refused() -> None:
    with pytest.raises(UnsupportedConstruct) as err:
        parse_lark("start: A\n%import common._STRING_INNER -> A\n")
    assert (err.value.line, err.value.column, err.value.construct) == (2, 16, "lazy common terminal")


_HEAVY_ITEMS = ["[^a-z]", "\\w", "[\u0100-\u0200]"]


@pytest.mark.parametrize(
    "item",
    ["k", "s", "i", "\u00df", "\u03c3", "[a-f]", "1"]
    + [pytest.param(i, marks=pytest.mark.heavy) for i in _HEAVY_ITEMS],
)
def test_case_insensitive_set_is_pythons(item: str) -> None:
    every = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))
    expected = normalize_ranges(
        (ord(m.group()),) * 2 for m in re.compile("(?i:" + item + ")").finditer(every)
    )
    plain = normalize_ranges((ord(m.group()),) * 2 for m in re.compile(item).finditer(every))
    assert case_insensitive_set(item, 0, plain) == expected


# ---------------------------------------------------------------------------------------
# random grammars: formalgram = lark (ignore_at_start) and = XGrammar (default)

_TERMINAL_ATOMS = ['"a"', '"b"', '"ab"', '"a".."b"', "/[ab]/", "/a+/", "/b?a/"]
_RULE_ATOMS = ['"a"', '"b"', '"c"', '"ab"', "/[bc]+/", '"a".."c"']
_POSTFIX = ["", "", "", "?", "*", "+", "~2", "~0..2"]


@st.composite
def lark_grammars(draw: st.DrawFn, terminal_alternatives: int = 2) -> str:
    lines: list[str] = []
    terminals: list[str] = []
    for k in range(draw(st.integers(0, 2))):
        alts = []
        for _ in range(draw(st.integers(1, terminal_alternatives))):
            atoms = [draw(st.sampled_from(_TERMINAL_ATOMS + terminals))]  # at least one non-empty part
            for _ in range(draw(st.integers(0, 1))):
                atoms.append(
                    draw(st.sampled_from(_TERMINAL_ATOMS + terminals)) + draw(st.sampled_from(_POSTFIX))
                )
            alts.append(" ".join(atoms))
        name = f"T{k}"
        lines.append(f"{name}: " + " | ".join(alts))
        terminals.append(name)
    rules = ["start", "r1", "r2"][: draw(st.integers(1, 3))]

    def element(depth: int) -> str:
        choice = draw(st.integers(0, 9 if depth < 1 else 7))
        if choice <= 3:
            atom = draw(st.sampled_from(_RULE_ATOMS + terminals))
        elif choice <= 7:
            atom = draw(st.sampled_from(rules))
        else:
            inner = " ".join(element(depth + 1) for _ in range(draw(st.integers(1, 2))))
            other = " ".join(element(depth + 1) for _ in range(draw(st.integers(0, 1))))
            atom = f"({inner} | {other})" if choice == 8 else f"[{inner}]"
        return atom + draw(st.sampled_from(_POSTFIX))

    for name in rules:
        alts = []
        for _ in range(draw(st.integers(1, 3))):
            alts.append(" ".join(element(0) for _ in range(draw(st.integers(0, 3)))))
        if all(not a for a in alts):
            alts.append('"a"')
        lines.append(f"{name}: " + " | ".join(alts))
    if draw(st.booleans()):
        lines.append('%ignore " "')
    return "\n".join(lines) + "\n"


@checks_at_least(30)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lark_grammars(), st.integers(0, 2**16))
@example('T0: "a" "a" | "a" "b"~0..2\nstart: T0\n', 0)  # lark's own parser misses "aa" here
def test_random_grammars_agree_with_lark(text: str, seed: int) -> None:
    """formalgram's reading = the CFG reading of lark's own grammar, on random grammars."""
    g = parse_lark(text, ignore_at_start=True)
    try:
        parser = lark_cfg_parser(text)
    except lark.exceptions.GrammarError:
        return gave_up()  # what lark refuses (a zero-width regexp in a rule: "(a)~0..2" alone as a terminal)
    for data in probes(g, seed, 6, b"abc ", max_len=10):
        assert accepts(g, data) == lark_accepts(parser, data), (text, data)


@checks_at_least(30)
@pytest.mark.xgrammar
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lark_grammars(), st.integers(0, 2**16))
@example("start: start?\n", 0)  # XGrammar's known crash shape, recognised before compiling
@example('start: r1 "a" | \nr1: start~2 | "b"\n', 1)
def test_random_grammars_agree_with_xgrammar(text: str, seed: int) -> None:
    g = parse_lark(text)
    data = probes(g, seed, 6, b"abc ", max_len=10)
    got = xgrammar_members(text, data)
    if got == KNOWN_CRASH:
        return gave_up()  # every rule on such a cycle derives nothing or only "": nothing to compare
    assert got is not None, text  # XGrammar reads every construct the generator writes
    assert [accepts(g, d) for d in data] == got, text


# ---------------------------------------------------------------------------------------
# the real grammars

# hand-written programs: (file, members, non-members), checked against lark too
PROGRAMS: dict[str, tuple[list[str], list[str]]] = {
    "syncode/c_grammar.lark": (
        ["int main() { return 0; }", "void f(int a, char b) { while (a < b) { a = a + 1; } }"],
        ["int main( { }", "int main() { return 0 }", "main() {}"],
    ),
    "syncode/calc_grammar.lark": (["1 + 2 * (3 - 4)", " 7/2", "1.5e3*2"], ["1 +", "(1", "1 2"]),
    "syncode/json_grammar.lark": (
        ['{"a": [1, -2.5e3, true, null, ""]}', "[]", '[{"x": {}}]'],
        ['{"a" 1}', "[1,]", "{'a': 1}"],
    ),
    "syncode/tiny_grammar.lark": (["cdcd", "ccdd", "dd"], ["cd", "ddd", ""]),
    "syncode/invariants.lark": (
        ["loop invariant ( x == 1 );\n", "loop invariant x;\nloop  invariant\t\true;\n"],
        ["loop invariant x ==1;\n", "invariant x;\n"],
    ),
    "syncode/sql_grammar.lark": (
        ["SELECT a, b FROM t WHERE a = 1", "select count(*) from t group by a", "SELECT x FROM t -- note"],
        ["SELECT FROM t", "SELECT a FROM", "SELECT a b c FROM t WHERE"],
    ),
    "syncode/go_grammar.lark": (
        ["package main\n\nfunc main() {\n\tx := 1\n}\n", 'package p\nimport "fmt"\n'],
        ["package\n", "func main() {}\n"],
    ),
    "syncode/prover9_grammar.lark": (
        ["Predicates:\nP(x) ::: a\nPremises:\n\u2200x (P(x) \u2192 Q(x)) ::: b\nConclusion:\nQ(y) ::: c\n"],
        ["Predicates:\nP(x) ::: a\nPremises:\nConclusion:\nQ(y) ::: c\n", "P(x) ::: a\n"],
    ),
    "lark/csv.lark": (["# a b\n1,2\n", "# x\nfoo\tbar\n3.5\n"], ["# a\n", "1,2\n"]),
    "lark/json.lark": (['{"a": [1, 2]}', '[ "x", {"b": null}]'], ['{"a":1}', "[1 2]"]),
}
# documented lexing differences on some real grammars: strings with these are not compared with lark
# (an ignored comment or whitespace run that lark's lexer takes whole: SQL's "--" comments run
# to the end of the line; after C's "//" comment the rule wants a "\n" that lark's WS eats)
LEXING: dict[str, tuple[str, ...]] = {
    "syncode/sql_grammar.lark": ("--",),
    "syncode/c_grammar.lark": ("//",),
    "lark/lark.lark": ("//", "#"),  # its ignored comments, which lark's lexer takes to the end of the line
    # string tokens: lazy quantifiers, and look-ahead that lark's lexer lets see past the token
    "syncode/python_grammar.lark": ('"', "'"),
}
# real grammars kept here that formalgram refuses as a whole: (construct, line)
REFUSED_HERE = {"syncode/python_grammar.lark": ("%declare", 189)}


def _real(rel: str) -> str:
    return _data.real_grammar(rel).read_text(encoding="utf-8")


def test_real_grammars_are_kept() -> None:
    assert sorted([*PROGRAMS, *REFUSED_HERE]) == _data.lark_files()


@pytest.mark.parametrize("rel", sorted(REFUSED_HERE))
def test_real_grammars_refused_where_expected(rel: str) -> None:
    with pytest.raises(UnsupportedConstruct) as err:
        parse_lark(_real(rel))
    assert (err.value.construct, err.value.line) == REFUSED_HERE[rel]


def _python_with_indents() -> str:
    """SynCode's Python grammar with its declared terminals ``_INDENT`` / ``_DEDENT`` (which an
    indenter makes, after lexing) written as two characters, so both parsers read the rest."""
    text = _real("syncode/python_grammar.lark")
    return text.replace("%declare _INDENT _DEDENT", '_INDENT: "\u21e5"\n_DEDENT: "\u21e4"')


def test_syncode_python_string_terminals_match_lark_patterns() -> None:
    """STRING and LONG_STRING use look-ahead ``(?!"")`` and look-behind ``(?<!\\)``: the
    rule ``string: STRING | LONG_STRING`` derives one of them (by lark's own compiled regular
    expressions under ``re.fullmatch``) followed by ignored tokens (by lark's patterns too)."""
    text = _python_with_indents()
    g = parse_lark(text, start="string")
    parser = lark_parser(text)
    patterns = {t.name: t.pattern.to_regexp() for t in parser.terminals}
    string, long_string = patterns["STRING"], patterns["LONG_STRING"]
    assert "(?!" in string and "(?<!" in long_string
    token = re.compile(f"{string}|{long_string}")
    ignored = re.compile("(?:" + "|".join(patterns[name] for name in parser.ignore_tokens) + ")*")
    checked = members = 0
    for prefix in ("", "b", "Rb"):
        for n in range(6):
            for chars in itertools.product("\"'\\a\n", repeat=n):
                s = prefix + "".join(chars)
                expected = any(
                    token.fullmatch(s[:i]) is not None and ignored.fullmatch(s[i:]) is not None
                    for i in range(len(s) + 1)
                )
                assert accepts(g, s.encode()) == expected, s
                checked += 1
                members += expected
    assert checked > 10_000 and members > 100


def test_syncode_python_grammar_agrees_with_lark() -> None:
    rel = "syncode/python_grammar.lark"
    text = _python_with_indents()
    g = parse_lark(text, ignore_at_start=True)
    parser = lark_parser(text)
    program = 'def f(x):\n\u21e5return x + 1\n\u21e4s = "a" + \'b\' + """c"""\n'
    assert accepts(g, program.encode()) and lark_accepts(parser, program.encode())
    assert not accepts(g, b"def f(x)\n") and not lark_accepts(parser, b"def f(x)\n")
    assert sum(_compare_with_lark(rel, seed, 25, text) for seed in range(2)) >= 20


@pytest.mark.parametrize("rel", sorted(PROGRAMS))
def test_real_grammar_programs(rel: str) -> None:
    text = _real(rel)
    g = parse_lark(text, ignore_at_start=True)
    parser = lark_parser(text)
    members, others = PROGRAMS[rel]
    for s in members:
        assert lark_accepts(parser, s.encode()), (rel, s)
        assert accepts(g, s.encode()), (rel, s)
    for s in others:
        assert not lark_accepts(parser, s.encode()), (rel, s)
        assert not accepts(g, s.encode()), (rel, s)


def _compare_with_lark(rel: str, seed: int, n: int, text: str | None = None) -> int:
    text = _real(rel) if text is None else text
    g = parse_lark(text, ignore_at_start=True)
    parser = lark_parser(text)
    skip = LEXING.get(rel)
    compared = 0
    for data in probes(g, seed, n, b"a1( );\n", max_len=48):
        if skip is not None and any(mark.encode() in data for mark in skip):
            continue
        try:
            verdict = lark_accepts(parser, data)
        except RuntimeError as exc:  # lark's Earley parser fails on some grammars' ambiguities
            assert "multiple start symbol items" in str(exc)
            continue
        assert accepts(g, data) == verdict, (rel, data)
        compared += 1
    return compared


@pytest.mark.parametrize("rel", sorted(PROGRAMS))
def test_real_grammars_agree_with_lark(rel: str) -> None:
    assert _compare_with_lark(rel, 1, 10) >= 10


def _compare_with_xgrammar(rel: str, seed: int, n: int) -> None:
    text = _real(rel)
    g = parse_lark(text)
    data = [d for d in probes(g, seed, n, b"a1( );\n", max_len=48) if xgrammar_comparable(d)]
    got = xgrammar_members(strip_priorities(text), data)
    if rel in XGRAMMAR_REFUSES:
        assert got is None, rel
        return
    assert got is not None, rel
    assert [accepts(g, d) for d in data] == got, rel


@pytest.mark.xgrammar
@pytest.mark.parametrize("rel", sorted(PROGRAMS))
def test_real_grammars_agree_with_xgrammar(rel: str) -> None:
    _compare_with_xgrammar(rel, 2, 15)


SHARED_LARK = [
    rel
    for rel in _data.lark_files(_data.SHARED_GRAMMARS)
    if rel.startswith(("lark/", "syncode/")) and rel != "lark/common.lark" and rel != "lark/unicode.lark"
]
# what the shared corpus holds that formalgram refuses, and why
REFUSED = {
    "lark/python.lark": "template",
    "lark/python2.lark": "%declare",
    "lark/template_lark.lark": "template",
}
# what XGrammar's Grammar.from_lark refuses there (look-around in a terminal's regular expression)
XGRAMMAR_REFUSES = {"lark/lark.lark", "lark/verilog.lark"}


@pytest.mark.heavy
@pytest.mark.parametrize("rel", SHARED_LARK)
def test_shared_lark_grammars(rel: str) -> None:
    text = (_data.SHARED_GRAMMARS / rel).read_text(encoding="utf-8")
    if rel in REFUSED:
        with pytest.raises(UnsupportedConstruct) as err:
            parse_lark(text)
        assert err.value.construct == REFUSED[rel]
        return
    for seed in range(3):
        assert _compare_with_lark(rel, seed, 40) > 0
        _compare_with_xgrammar(rel, seed, 60)
