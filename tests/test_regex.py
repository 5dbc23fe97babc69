"""Tests of the regular-expression front end (formalgram.syntax.regex).

Oracles: Python's ``re`` itself (``re.compile`` for which patterns are valid,
``re.fullmatch`` with the same flags for which strings match), on hand-written and
Hypothesis-generated patterns and strings, with the Earley recognizer
(``formalgram.accepts``) as this side; ``re.findall`` over every code point for the
character categories; and XGrammar's ``Grammar.from_regex`` (in a child process,
``tests/_xgrammar_child.py``) on the same inputs, with every divergence pinned below.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import warnings

import pytest
from _counted import checks_at_least, gave_up
from _xgrammar_child import Refused, prestart_shared_worker, shared_worker
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from formalgram import ByteSet, Grammar, accepts, parse_gbnf, parse_regex, sample
from formalgram.errors import FormalgramError, GrammarSyntaxError, GrammarTooLarge, UnsupportedConstruct
from formalgram.utf8 import MAX_CODE_POINT, sequences_to_ranges

prestart_shared_worker()


def re_valid(pattern: str, flags: int = 0) -> re.Pattern[str] | None:
    """The compiled pattern, or None when Python's re refuses it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning on possible nested sets
        try:
            return re.compile(pattern, flags)
        except (re.error, ValueError, OverflowError):
            return None


def agrees(g: Grammar, compiled: re.Pattern[str], strings: list[str]) -> None:
    for s in strings:
        assert accepts(g, s.encode()) == (compiled.fullmatch(s) is not None), (compiled.pattern, s)


# --------------------------------------------------------------------------------------
# constructs: (id, pattern, flags, members, non-members); the labels are checked against re too

A, I, S, X, M, U = re.ASCII, re.IGNORECASE, re.DOTALL, re.VERBOSE, re.MULTILINE, re.UNICODE  # noqa: E741
CONSTRUCTS: list[tuple[str, str, int, list[str], list[str]]] = [
    ("empty", "", 0, [""], ["a"]),
    ("literal", "abc", 0, ["abc"], ["ab", "abcd", ""]),
    ("unicode-literal", "日本😀", 0, ["日本😀"], ["日本"]),
    ("alternation", "ab|c|", 0, ["ab", "c", ""], ["a", "abc"]),
    ("group", "(ab|c)d", 0, ["abd", "cd"], ["d", "abcd"]),
    ("non-capturing", "(?:ab)+", 0, ["ab", "abab"], ["", "aba"]),
    ("named", "(?P<x>a)(?P<y>b)?", 0, ["a", "ab"], ["b"]),
    ("comment", "a(?#note)b(?#x\\)y)", 0, ["ab"], ["a"]),
    ("star-plus-opt", "a*b+c?", 0, ["b", "aabbc", "bc"], ["a", "c", "abcc"]),
    ("lazy", "a*?b+?c??", 0, ["b", "aabbc"], ["a"]),
    ("repeat-exact", "a{3}", 0, ["aaa"], ["aa", "aaaa"]),
    ("repeat-range", "(?:ab){1,2}", 0, ["ab", "abab"], ["", "ababab"]),
    ("repeat-min", "a{2,}", 0, ["aa", "aaaaa"], ["a"]),
    ("repeat-max", "a{,2}", 0, ["", "a", "aa"], ["aaa"]),
    ("repeat-any", "a{,}", 0, ["", "aaaa"], ["b"]),
    ("repeat-zero", "a{0}b", 0, ["b"], ["ab"]),
    ("repeat-nullable", "(?:a|){2}", 0, ["", "a", "aa"], ["aaa"]),
    ("brace-literal", "a{x}{}{1", 0, ["a{x}{}{1"], ["a"]),
    ("brace-not-quantifier", "a{1,2", 0, ["a{1,2"], ["a"]),
    ("close-brace-bracket", "}]", 0, ["}]"], [""]),
    ("dot", "a.c", 0, ["abc", "a\rc", "aéc", "a😀c"], ["a\nc", "ac"]),
    ("dot-dotall", "a.c", S, ["a\nc"], ["ac"]),
    ("dot-inline-dotall", "(?s)a.c", 0, ["a\nc"], ["ac"]),
    ("class", "[a-cx]", 0, ["a", "b", "x"], ["d", ""]),
    ("class-negated", "[^a-c]", 0, ["d", "é", "\n"], ["a", ""]),
    ("class-bracket-first", "[]a]", 0, ["]", "a"], ["b"]),
    ("class-negated-bracket-first", "[^]a]", 0, ["b"], ["]", "a"]),
    ("class-dash", "[-a][a-][\\w-]", 0, ["-a-", "aa_"], ["b--"]),
    ("class-caret", "[a^]", 0, ["^", "a"], ["b"]),
    ("class-escapes", "[\\]\\\\\\n\\b\\x41-\\x43]", 0, ["]", "\\", "\n", "\x08", "B"], ["D"]),
    ("class-octal", "[\\101\\0\\7]", 0, ["A", "\x00", "\x07"], ["0"]),
    ("class-category", "[\\d_]+", 0, ["1_2", "٣"], ["a"]),
    ("class-negated-category", "[^\\W\\d]+", 0, ["abc", "é"], ["a1", "-"]),
    ("digit-unicode", "\\d+", 0, ["123", "٣٤", "१"], ["a", "½"]),
    ("digit-ascii", "\\d+", A, ["123"], ["٣"]),
    ("word-unicode", "\\w+", 0, ["héllo_1", "日本", "ǅ"], ["a-b", " "]),
    ("word-ascii", "\\w+", A, ["hello_1"], ["é"]),
    ("space-unicode", "\\s+", 0, [" \t\n\r\x0b\x0c", "\x85\xa0\u2028\u3000\x1c"], ["a", "\ufeff"]),
    ("space-ascii", "\\s+", A, [" \t\n\r\x0b\x0c"], ["\xa0", "\x85"]),
    ("negated-categories", "\\D\\W\\S", 0, ["a-b"], ["1-b", "aab", "a- "]),
    ("inline-ascii", "(?a)\\w", 0, ["a"], ["é"]),
    ("scoped-ascii", "(?a:\\d)\\d", 0, ["1٣"], ["٣1"]),
    ("scoped-unicode", "(?u:\\d)\\d", A, ["٣1"], ["1٣"]),
    ("escapes", "\\a\\f\\n\\r\\t\\v\\\\\\.\\-\\ \\#", 0, ["\x07\x0c\n\r\t\x0b\\.- #"], [""]),
    ("hex-unicode-escapes", "\\x41\\u00e9\\U0001F600", 0, ["Aé😀"], [""]),
    ("hex-exactly-two-digits", "\\x41a", 0, ["Aa"], ["\u041a"]),
    ("named-escape", "\\N{EM DASH}\\N{LATIN SMALL LETTER A}", 0, ["—a"], [""]),
    ("octal-escapes", "\\0\\01\\101\\1010", 0, ["\x00\x01AA0"], [""]),
    ("non-letter-escape", "\\é\\😀", 0, ["é😀"], [""]),
    ("ignorecase-ascii", "(?i)ab[c-e]", A, ["abD", "ABc", "aBe"], ["abf", "ab"]),
    ("ignorecase-ascii-flag", "k[^x]", I | A, ["KY", "kA"], ["kx", "KX", "\u212ay"]),
    ("ignorecase-ascii-kelvin", "\\w", I | A, ["k", "K"], ["\u212a", "é"]),
    ("ignorecase-scoped", "a(?i:b)c", A, ["aBc", "abc"], ["ABc", "abC"]),
    ("ignorecase-off", "(?i)a(?-i:b)", A, ["Ab"], ["AB"]),
    ("ignorecase-caseless", "(?i)[0-9]+\\d\\W", 0, ["12-"], ["1a"]),
    ("verbose", "(?x) a b  # comment\n c [ ] \\  \\#", 0, ["abc  #"], ["a b c"]),
    ("verbose-flag", "a b#c\n  d", X, ["abd"], ["a b"]),
    ("verbose-quantifier-space", "(?x)a *", 0, ["", "aa"], ["a *"]),
    ("multiline-has-no-effect", "a\nb", M, ["a\nb"], ["a"]),
    ("surrogate-literal", "\\ud800|a", 0, ["a"], [""]),
    ("nested-repeats", "(?:(?:a|b)*c)+", 0, ["c", "abcc", "bac"], ["", "ab"]),
    ("empty-repeat", "(?:)*(?:|a){2,3}", 0, ["", "a", "aaa"], ["aaaa"]),
]


@pytest.mark.parametrize(
    ("name", "pattern", "flags", "members", "non_members"), CONSTRUCTS, ids=[c[0] for c in CONSTRUCTS]
)
def test_construct_language(
    name: str, pattern: str, flags: int, members: list[str], non_members: list[str]
) -> None:
    compiled = re_valid(pattern, flags)
    assert compiled is not None, pattern
    for s in members:
        assert compiled.fullmatch(s), (name, s)  # the labels themselves are right
    for s in non_members:
        assert not compiled.fullmatch(s), (name, s)
    g = parse_regex(pattern, flags)
    agrees(g, compiled, members + non_members)
    assert g.start.name == "root"


def test_surrogates_and_invalid_utf8_never_match() -> None:
    for pattern in (".", "[^a]", "\\D", "\\W", "\\S", "[\\ud800-\\udfff]", "\\ud800"):
        g = parse_regex(pattern, S)
        for data in (b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xff", b"\x80", b"\xf4\x90\x80\x80"):
            assert not accepts(g, data), (pattern, data)
    assert accepts(parse_regex(".", S), "\U0010ffff".encode())


def test_ascii_keyword_is_re_ascii() -> None:
    for pattern in ("\\d", "\\w", "\\s", "[^\\W]", "(?i)k"):
        assert parse_regex(pattern, ascii=True) == parse_regex(pattern, A)
    assert parse_regex("\\d") != parse_regex("\\d", ascii=True)
    with pytest.raises(ValueError, match="incompatible"):
        parse_regex("a", U, ascii=True)
    for bad in (re.LOCALE, re.DEBUG, re.TEMPLATE, -1):
        with pytest.raises(ValueError, match="unsupported re flags"):
            parse_regex("a", bad)


@functools.cache
def _every_scalar() -> str:
    """Every Unicode scalar value (no surrogates), as one string."""
    return "".join(chr(c) for c in range(MAX_CODE_POINT + 1) if not 0xD800 <= c <= 0xDFFF)


def _code_points(g: Grammar) -> set[int]:
    """The code points of a grammar whose start owns the UTF-8 alternatives of one class."""
    out: set[int] = set()
    for lhs, rhs in g.rules:
        if lhs != g.start_id:
            continue
        first, *rest = (ByteSet(g.masks[~s]) for s in rhs)
        for b in first:  # alternatives share their tail across first bytes: decode one by one
            ranges = sequences_to_ranges([[ByteSet.single(b), *rest]])
            assert ranges is not None, [x.describe() for x in (first, *rest)]
            out.update(cp for lo, hi in ranges for cp in range(lo, hi + 1))
    return out


@pytest.mark.parametrize("pattern", ["\\d", "\\w", "\\s", "\\D", "\\W", "\\S", ".", "[^\\d\\s]"])
@pytest.mark.parametrize("flags", [0, A, S])
def test_categories_equal_re_on_every_code_point(pattern: str, flags: int) -> None:
    expected = {ord(c) for c in re.findall(pattern, _every_scalar(), flags)}
    assert _code_points(parse_regex(pattern, flags)) == expected


# --------------------------------------------------------------------------------------
# refusals: unsupported constructs and syntax errors, with positions

UNSUPPORTED: list[tuple[str, int, str, int, int]] = [
    ("^a", 0, "anchor", 1, 1),
    ("a$", 0, "anchor", 1, 2),
    ("a\\Z", 0, "anchor", 1, 2),
    ("\\Aa", M, "anchor", 1, 1),
    ("a\\b", 0, "word boundary", 1, 2),
    ("\\Bx", 0, "word boundary", 1, 1),
    ("(a)\\1", 0, "backreference", 1, 4),
    ("(?P<n>a)(?P=n)", 0, "backreference", 1, 9),
    ("(a)(?(1)b|c)", 0, "conditional", 1, 4),
    ("(?>a*)a", 0, "atomic group", 1, 1),
    ("a*+", 0, "possessive quantifier", 1, 2),
    ("a{1,2}+", 0, "possessive quantifier", 1, 2),
    ("ab(?i)", 0, "case-insensitive matching (Unicode)", -1, -1),  # re: global flags not first
    ("x(?i:a)", 0, "case-insensitive matching (Unicode)", 1, 6),
    ("(?i)é", 0, "case-insensitive matching (Unicode)", 1, 5),
    ("[a-z]", I, "case-insensitive matching (Unicode)", 1, 1),
    ("[\\U00010400-\\U00010401]", I | A, "case-insensitive class beyond U+FFFF", 1, 1),
    ("(?x)\n  a\n  ^", 0, "anchor", 3, 3),
]


@pytest.mark.parametrize(("pattern", "flags", "construct", "line", "column"), UNSUPPORTED)
def test_unsupported_constructs(pattern: str, flags: int, construct: str, line: int, column: int) -> None:
    if line < 0:  # re itself refuses it: a syntax error here too
        assert re_valid(pattern, flags) is None
        with pytest.raises(GrammarSyntaxError):
            parse_regex(pattern, flags)
        return
    assert re_valid(pattern, flags) is not None  # a valid pattern, refused on purpose
    with pytest.raises(UnsupportedConstruct) as info:
        parse_regex(pattern, flags)
    err = info.value
    assert (err.construct, err.line, err.column) == (construct, line, column)
    assert str(err).startswith(f"line {line}, column {column}: unsupported construct '{construct}'")


ERRORS: list[tuple[str, int, int, str]] = [
    ("(a", 1, 1, "missing ), unterminated subpattern"),
    ("a)", 1, 2, "unbalanced parenthesis"),
    ("*a", 1, 1, "nothing to repeat"),
    ("a|+", 1, 3, "nothing to repeat"),
    ("a**", 1, 3, "multiple repeat"),
    ("a{3,1}", 1, 2, "min repeat greater than max repeat"),
    ("a{4294967295}", 1, 2, "the repetition number is too large"),
    ("[a", 1, 1, "unterminated character set"),
    ("[z-a]", 1, 2, "bad character range"),
    ("[\\d-z]", 1, 2, "bad character range"),
    ("\\q", 1, 1, "bad escape \\q"),
    ("a\\", 1, 2, "bad escape (end of pattern)"),
    ("\\x4", 1, 1, "incomplete escape \\x4"),
    ("\\U00110000", 1, 1, "bad escape \\U00110000"),
    ("\\N{NO SUCH NAME}", 1, 1, "undefined character name 'NO SUCH NAME'"),
    ("[\\777]", 1, 2, "octal escape value \\777 outside of range 0-0o377"),
    ("(?P<1>a)", 1, 1, "bad character in group name '1'"),
    ("(?P<a>x)(?P<a>y)", 1, 9, "redefinition of group name 'a'"),
    ("a(?i)", 1, 2, "global flags not at the start of the expression"),
    ("(?L)a", 1, 1, "bad inline flags: cannot use 'L' flag with a str pattern"),
    ("(?au)a", 1, 1, "bad inline flags: flags 'a', 'u' and 'L' are incompatible"),
    ("(?i-i:a)", 1, 1, "bad inline flags: flag turned on and off"),
    ("(?-a:a)", 1, 1, "bad inline flags: cannot turn off flags 'a', 'u' and 'L'"),
    ("(?q)", 1, 1, "unknown extension ?q"),
    ("(?#abc", 1, 1, "missing ), unterminated comment"),
    ("x\n(?:y\n  z", 2, 1, "missing ), unterminated subpattern"),
]


@pytest.mark.parametrize(("pattern", "line", "column", "message"), ERRORS)
def test_syntax_errors(pattern: str, line: int, column: int, message: str) -> None:
    assert re_valid(pattern) is None, pattern  # Python refuses it too
    with pytest.raises(GrammarSyntaxError) as info:
        parse_regex(pattern)
    err = info.value
    assert not isinstance(err, UnsupportedConstruct)
    assert (err.line, err.column, err.message) == (line, column, message)


def test_limits_are_typed_errors() -> None:
    with pytest.raises(GrammarSyntaxError, match="max_repeat") as info:
        parse_regex("(?:ab){60000}")
    assert (info.value.line, info.value.column) == (1, 7)
    assert accepts(parse_regex("a{3000}", max_repeat=5000), b"a" * 3000)
    with pytest.raises(GrammarSyntaxError, match="nested deeper than 100"):
        parse_regex("(" * 101 + ")" * 101)
    with pytest.raises(GrammarSyntaxError, match="max_bytes"):
        parse_regex("a" * 11, max_bytes=10)


def test_deep_nesting_has_no_recursion_limit() -> None:
    # in a child process: a recursive implementation would crash the compiled build
    code = (
        "from formalgram import parse_gbnf, parse_regex, accepts\n"
        "d = 50000\n"
        "g = parse_regex('(' * d + 'a|b' + ')*' * d, max_depth=d)\n"
        "assert len(g.names) == d + 1\n"  # root and one star per level
        "assert parse_gbnf(g.to_gbnf(), 'root', max_bytes=1 << 26) == g\n"
        "g = parse_regex('(?:' * d + 'x' + ')' * d, max_depth=d)\n"
        "assert accepts(g, b'x')\n"
        "g = parse_regex('(' * 200 + 'a|b' + ')*' * 200, max_depth=d)\n"
        "assert accepts(g, b'ab') and not accepts(g, b'c')\n"
        "print('ok')\n"
    )
    # -P: the child imports the build this process imports, not the checkout in the cwd
    run = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


# --------------------------------------------------------------------------------------
# Hypothesis: random patterns and strings against re

_LITERALS = [
    *"abAÉé -_1٣ıK😀{},]",
    "\u212a",
    "\\.",
    "\\n",
    "\\t",
    "\\x41",
    "\\x2d",
    "\\u00e9",
    "\\U0001F600",
    "\\0",
    "\\101",
    "\\N{LATIN SMALL LETTER B}",
    "\\-",
    "\\]",
    "\\\\",
    "\\ ",
    "\\#",
]
_CATEGORIES = ["\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "."]
_MEMBERS = [
    *"ab-^.*[]é ",
    "b-d",
    "A-Z",
    "0-9",
    "ά-ώ",
    "\\d",
    "\\w",
    "\\s",
    "\\D",
    "\\W",
    "\\S",
    "\\n",
    "\\x00-\\x1f",
]
_MEMBERS += ["\\]", "\\b", "\\u00e0-\\u00ff", "\\101"]
_QUANTIFIERS = [
    "*",
    "+",
    "?",
    "*?",
    "+?",
    "??",
    "{2}",
    "{0,2}",
    "{1,}",
    "{,2}",
    "{2,3}?",
    "{0}",
    "{}",
    "{,}",
    "*+",
]
_OPENERS = ["(", "(?:", "(?P<x>", "(?P<y>", "(?i:", "(?s:", "(?a:", "(?u:", "(?-i:", "(?x:", "(?#c)("]
_PREFIXES = ["", "", "", "(?i)", "(?a)", "(?s)", "(?x)", "(?ai)", "(?#c)(?u)"]
FLAGS = [0, 0, A, I | A, I, S, X, M, A | S]
STRING_CHARS = st.sampled_from([*"abcABé É-_1٣ıK\n\t.{}]#", "\u212a", "😀", "ά", "\xa0", "\x1c", "\x08"])

_classes = st.tuples(
    st.sampled_from(["[", "[^"]), st.lists(st.sampled_from(_MEMBERS), min_size=1, max_size=4)
).map(lambda t: t[0] + "".join(t[1]) + "]")
_atoms = st.one_of(st.sampled_from(_LITERALS), st.sampled_from(_CATEGORIES), _classes)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    seq = st.lists(inner, max_size=4).map("".join)
    alternatives = st.lists(seq, min_size=1, max_size=3).map("|".join)
    return st.one_of(
        st.tuples(st.sampled_from(_OPENERS), alternatives).map(lambda t: t[0] + t[1] + ")"),
        st.tuples(inner, st.sampled_from(_QUANTIFIERS)).map("".join),
        seq,
    )


PATTERNS = st.tuples(st.sampled_from(_PREFIXES), st.recursive(_atoms, _extend, max_leaves=10)).map("".join)
# token soup: mostly invalid patterns, for the refusals
SOUP = st.lists(
    st.sampled_from(_LITERALS + _CATEGORIES + _MEMBERS + _QUANTIFIERS + _OPENERS + [")", "|", "^"])
).map("".join)


def _check_pattern(pattern: str, flags: int, strings: list[str], seed: int) -> None:
    compiled = re_valid(pattern, flags)
    try:
        g = parse_regex(pattern, flags)
    except UnsupportedConstruct as exc:
        event(f"unsupported: {exc.construct}")
        assert exc.line >= 1 and exc.column >= 1
        return
    except GrammarTooLarge:  # a look-around automaton over its state budget
        event("over budget")
        return
    except GrammarSyntaxError as exc:
        assert compiled is None, f"refused a pattern re accepts: {exc}"
        lines = pattern.split("\n")
        assert 1 <= exc.line <= len(lines) and 1 <= exc.column <= len(lines[exc.line - 1]) + 1
        event("syntax error")
        return
    assert compiled is not None, "accepted a pattern re refuses"
    event("parsed")
    try:
        members = sample(g, 4, seed=seed, max_len=10)
    except FormalgramError:
        members = []
    texts = list(strings)
    for m in members:
        texts.append(m.decode("utf-8"))  # every member is UTF-8 ...
        assert compiled.fullmatch(texts[-1]), (pattern, texts[-1])  # ... and matches
        for i in range(len(texts[-1])):
            texts.append(texts[-1][:i] + texts[-1][i + 1 :])
    agrees(g, compiled, texts)
    assert parse_gbnf(g.to_gbnf(), "root") == g


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    PATTERNS,
    st.sampled_from(FLAGS),
    st.lists(st.text(STRING_CHARS, max_size=6), max_size=8),
    st.integers(0, 999),
)
def test_random_patterns_match_re(pattern: str, flags: int, strings: list[str], seed: int) -> None:
    _check_pattern(pattern, flags, strings, seed)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SOUP, st.sampled_from(FLAGS), st.lists(st.text(STRING_CHARS, max_size=4), max_size=4))
def test_random_token_soup_refused_like_re(pattern: str, flags: int, strings: list[str]) -> None:
    _check_pattern(pattern, flags, strings, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=30), st.sampled_from(FLAGS))
def test_random_text_only_typed_errors(pattern: str, flags: int) -> None:
    _check_pattern(pattern, flags, [pattern], 0)


@checks_at_least(55)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, st.binary(max_size=8))
def test_random_bytes_match_re_on_their_text(pattern: str, data: bytes) -> None:
    compiled = re_valid(pattern, S)
    assume(compiled is not None)
    try:
        g = parse_regex(pattern, S)
    except UnsupportedConstruct:
        return gave_up()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        assert not accepts(g, data)
        return
    assert accepts(g, data) == (compiled.fullmatch(text) is not None)


# --------------------------------------------------------------------------------------
# XGrammar's Grammar.from_regex on the same inputs

# the syntax both read alike: no \s (XGrammar's is ECMAScript's set), no \x/\u escapes (read
# greedily), no ']' first in a class, no anchors, flags, named groups, {,n}, literal braces,
# octal or \N escapes (XGrammar refuses those); '.' is compared with re.DOTALL (XGrammar's
# '.' matches a newline), \d \w with ascii=True (XGrammar's are ASCII).
_X_LITERALS = [*"abAé -_1٣😀},", "\\.", "\\n", "\\t", "\\-", "\\]", "\\\\"]
_X_CATEGORIES = ["\\d", "\\w", "\\D", "\\W", "."]
_X_MEMBERS = [*"ab-.*é", "b-d", "A-Z", "0-9", "à-ÿ", "ā-ž", "\\d", "\\w", "\\D", "\\W", "\\n", "\\]"]
_X_QUANTIFIERS = ["*", "+", "?", "*?", "+?", "??", "{2}", "{0,2}", "{1,}", "{2,3}?", "{0}"]
_x_classes = st.tuples(
    st.sampled_from(["[", "[^"]), st.lists(st.sampled_from(_X_MEMBERS), min_size=1, max_size=4)
).map(lambda t: t[0] + "".join(t[1]) + "]")


def _x_extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    seq = st.lists(inner, max_size=4).map("".join)
    alternatives = st.lists(seq, min_size=1, max_size=3).map("|".join)
    return st.one_of(
        st.tuples(st.sampled_from(["(", "(?:"]), alternatives).map(lambda t: t[0] + t[1] + ")"),
        st.tuples(inner, st.sampled_from(_X_QUANTIFIERS)).map("".join),
        seq,
    )


X_PATTERNS = st.recursive(
    st.one_of(st.sampled_from(_X_LITERALS), st.sampled_from(_X_CATEGORIES), _x_classes),
    _x_extend,
    max_leaves=10,
)
X_STRINGS = st.sampled_from([*"abAé -_1٣😀},.\\\n\tcZàāĳ]", "Ӎ"])


def _need_xgr() -> None:
    if importlib.util.find_spec("xgrammar") is None:
        pytest.skip("xgrammar is not installed")


def xgr_verdicts(pattern: str, data: list[bytes]) -> list[bool] | str:
    """XGrammar's full-match verdicts, or its refusal message."""
    result = shared_worker().run(pattern, data, regex=True)
    if isinstance(result, Refused):
        return result.message
    assert isinstance(result, list), result.describe()  # a crash or a hang fails the test
    return [member for member, _ in result]


@checks_at_least(45)
@pytest.mark.xgrammar
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(X_PATTERNS, st.lists(st.text(X_STRINGS, max_size=5), max_size=8), st.integers(0, 999))
def test_random_patterns_match_xgrammar(pattern: str, strings: list[str], seed: int) -> None:
    _need_xgr()
    assume(re_valid(pattern) is not None)
    try:
        g = parse_regex(pattern, S, ascii=True)
    except UnsupportedConstruct:
        return gave_up()  # a possessive quantifier formed by '{m,n}' then '+'
    try:
        members = sample(g, 4, seed=seed, max_len=10)
    except FormalgramError:
        members = []
    data = [s.encode() for s in strings] + members
    theirs = xgr_verdicts(pattern, data)
    assert not isinstance(theirs, str), f"XGrammar refused {pattern!r}: {theirs}"
    assert theirs == [accepts(g, d) for d in data]


# every divergence from XGrammar 0.2.9 found, pinned: (pattern, our reading, data, ours, XGrammar's);
# an older release that reads a case otherwise is pinned in XGR_READING_BY_VERSION
# ``ours`` is parse_regex(pattern, **our_reading); None for XGrammar means it refuses the pattern
XGR_DIVERGENCES: list[tuple[str, str, dict[str, int | bool], bytes, bool, bool | None]] = [
    ("dot-newline", "a.b", {"flags": 0}, b"a\nb", False, True),  # XGrammar's '.' is re.DOTALL's
    ("dot-surrogate", ".", {"flags": S}, b"\xed\xa0\x80", False, True),  # not UTF-8 of a string
    ("negated-surrogate", "[^a]", {"flags": 0}, b"\xed\xa0\x80", False, True),
    ("space-bom", "\\s", {"ascii": True}, "\ufeff".encode(), False, True),  # ECMAScript's \s
    ("space-nbsp", "\\s", {"ascii": True}, "\xa0".encode(), False, True),
    ("space-bom-unicode", "\\s", {}, "\ufeff".encode(), False, True),
    ("space-fs-unicode", "\\s", {}, b"\x1c", True, False),  # str.isspace; not ECMAScript's
    ("word-unicode", "\\w", {}, "é".encode(), True, False),  # Python's default reading
    ("hex-greedy", "\\x41a", {}, b"Aa", True, False),  # XGrammar reads \x41a as U+041A
    ("hex-greedy-class", "[\\u00e0-\\u00ffa]", {}, b"a", True, False),  # U+00E0..U+0FFA
    ("class-word-after-escape", "[\\u00ff\\w]", {}, b"m", True, None),  # read as [\u0FFA-z...]: refused
    ("bracket-first", "[]a]", {}, b"]", True, None),
    ("negated-bracket-first", "[^]a]", {}, b"b", True, False),  # XGrammar: [^] then "a]"
    ("anchor-inside", "a^b", {}, b"ab", False, True),  # refused here, ignored there
    ("named-group", "(?P<x>a)", {}, b"a", True, None),
    ("inline-flag", "(?s)a", {}, b"a", True, None),
    ("max-only", "a{,2}", {}, b"aa", True, None),
    ("literal-brace", "a{", {}, b"a{", True, None),
    ("octal", "\\101", {}, b"A", True, None),
    ("named-escape", "\\N{EM DASH}", {}, "—".encode(), True, None),
]

# where an older XGrammar release reads a pinned case otherwise: name -> {version: XGrammar's verdict}
# (0.2.8's \s leaves out U+FEFF, as Python's does: no divergence there)
XGR_READING_BY_VERSION: dict[str, dict[str, bool | None]] = {
    "space-bom": {"0.2.8": False},
    "space-bom-unicode": {"0.2.8": False},
}


@functools.cache
def _xgr_version() -> str:
    return importlib.metadata.version("xgrammar")


@pytest.mark.xgrammar
@pytest.mark.parametrize(
    ("name", "pattern", "reading", "data", "ours", "theirs"),
    XGR_DIVERGENCES,
    ids=[d[0] for d in XGR_DIVERGENCES],
)
def test_xgrammar_divergences_pinned(
    name: str, pattern: str, reading: dict[str, int | bool], data: bytes, ours: bool, theirs: bool | None
) -> None:
    _need_xgr()
    flags = int(reading.get("flags", 0))
    try:
        got = accepts(parse_regex(pattern, flags, ascii=bool(reading.get("ascii", False))), data)
    except UnsupportedConstruct:
        got = False
    assert got == ours
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:  # our side is re's verdict
        compiled = re_valid(pattern, flags | (A if reading.get("ascii") else 0))
        assert compiled is not None and (compiled.fullmatch(text) is not None) == ours
    theirs = XGR_READING_BY_VERSION.get(name, {}).get(_xgr_version(), theirs)
    verdict = xgr_verdicts(pattern, [data])
    if theirs is None:
        assert isinstance(verdict, str), f"XGrammar now reads {pattern!r}"
    else:
        assert verdict == [theirs]
