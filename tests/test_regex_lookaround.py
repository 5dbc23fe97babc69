"""Tests of look-around in regular expressions (formalgram.syntax.lookaround via parse_regex).

Oracle: Python's ``re`` itself: ``re.compile`` for which patterns are valid (look-behind of
fixed width only) and ``re.fullmatch`` with the same flags for which strings match, on every
short string over a small alphabet (ASCII and non-ASCII characters) and on
Hypothesis-generated patterns; this side is the Earley recognizer (``formalgram.accepts``)
and the bounded enumeration of the grammar's language (``enumerate_strings``).
"""

from __future__ import annotations

import itertools
import re
import warnings

import pytest
from _counted import checks_at_least, gave_up
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from formalgram import accepts, parse_regex
from formalgram.errors import GrammarSyntaxError, GrammarTooLarge, UnsupportedConstruct
from formalgram.recognize.enumerate import enumerate_strings

A, I, S = re.ASCII, re.IGNORECASE, re.DOTALL  # noqa: E741


def re_valid(pattern: str, flags: int = 0) -> re.Pattern[str] | None:
    """The compiled pattern, or None when Python's re refuses it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return re.compile(pattern, flags)
        except (re.error, ValueError, OverflowError):
            return None


def every_string(alphabet: str, max_len: int) -> list[str]:
    return ["".join(t) for n in range(max_len + 1) for t in itertools.product(alphabet, repeat=n)]


# (pattern, flags, alphabet, max length): every string up to the length is checked against re
CASES: list[tuple[str, int, str, int]] = [
    # look-ahead at the start, in the middle, at the end, negative
    (r"(?=a)\w*", A, "ab1", 4),
    (r"(?!a)\w*", A, "ab1", 4),
    (r"a*(?=b)[ab]*", 0, "abc", 5),
    (r"[ab]*(?=b)", 0, "ab", 5),
    (r"[ab]*(?!b)", 0, "ab", 5),
    (r"(?=[ab]*c)[abc]+", 0, "abc", 5),
    # look-ahead that sees past the group it is in, to the end of the string
    (r"(?:a(?=bb))?b*", 0, "ab", 5),
    (r"(a(?!b)|b)*", 0, "ab", 6),
    (r"(?:(?!ab)[abc])*", 0, "abc", 5),
    (r"(?:(?=a)|b)*c", 0, "abc", 4),
    # look-behind of several widths, positive and negative, at the start and inside loops
    (r"(?<=a)b", 0, "ab", 3),
    (r"a(?<=a)b", 0, "ab", 3),
    (r"(?:a|b(?<=ab))*", 0, "ab", 6),
    (r"(?:[ab](?<!aa))*", 0, "ab", 6),
    (r"(?:[abc](?<=ab|ca|bc)|[abc])*", 0, "abc", 5),
    (r"(?:.(?<!a.b))*", 0, "abc", 6),
    (r"(?:[ab](?<=(?:ab){2}))+|a*", 0, "ab", 7),
    (r"[ab]*(?<!b)", 0, "ab", 5),
    # nested look-around
    (r"(?=a(?!b))[ab]*", 0, "ab", 5),
    (r"(?:(?=a(?=b))[ab]|b)*", 0, "ab", 6),
    (r"[ab]*(?<=a(?<!ba))b", 0, "ab", 5),
    (r"(?:[ab](?<=(?=b)a)|b)*", 0, "ab", 6),  # look-ahead inside look-behind sees the future
    (r"(?:[ab](?<=(?!.b)[ab]))*", 0, "ab", 6),
    (r"(?=(?<=)a)a|b", 0, "ab", 3),
    # counted repetition with look-around inside
    (r"(?:a(?!a)|b){2,3}", 0, "ab", 5),
    (r"(?:(?<=b)a|b){1,}", 0, "ab", 5),
    # case-insensitive ASCII, DOTALL
    (r"(?i)(?=A)[a-z]+(?<!B)", A, "aAbB", 4),
    (r"(?!x).(?<=(?i:Y))", A | I | S, "xyY\n", 3),
    (r"(?s)(?=.\n).*", 0, "a\n", 4),
    # non-ASCII characters, multi-byte classes and \w in Unicode mode
    (r"(?=é)\w+", 0, "aé😀", 4),
    (r"(?:(?!😀).)*(?<=é)", 0, "aé😀", 4),
    (r"[^a]*(?<![é😀])", 0, "aé😀", 4),
    (r"(?<=\w)\W|\w", 0, "é -", 3),
    (r"(?=\w)[^\W\d]{2}(?<![é😀])", 0, "aéĀ€😀٣ü", 3),
    (r"(?:(?![Ā-€])[^a]|a(?<=[aé]))*", 0, "aéĀ€😀", 4),
    (r"(?:(?<![à-ÿ])\w|[ö-ü](?!\w))+", 0, "aöüÿĀ٣ ", 3),
    # the SynCode / lark Python string terminal
    (r"""[ubf]?r?("(?!"").*?(?<!\\)(\\\\)*?"|'(?!'').*?(?<!\\)(\\\\)*?')""", I | A, "\"'\\a", 5),
    (r"\/\*(\*(?!\/)|[^*])*\*\/", 0, "/*a", 6),
    (r"[+*]|[?](?![a-z])", 0, "+?a", 2),
]


@pytest.mark.parametrize(("pattern", "flags", "alphabet", "max_len"), CASES)
def test_every_short_string_agrees_with_re(pattern: str, flags: int, alphabet: str, max_len: int) -> None:
    compiled = re_valid(pattern, flags)
    assert compiled is not None
    g = parse_regex(pattern, flags)
    strings = every_string(alphabet, max_len)
    for s in strings:
        assert accepts(g, s.encode()) == (compiled.fullmatch(s) is not None), (pattern, s)
    if alphabet.isascii():  # the bounded language is exactly the matching strings
        members = enumerate_strings(g, max_len=max_len, alphabet=alphabet.encode())
        assert set(members) == {s.encode() for s in strings if compiled.fullmatch(s)}


LOOKBEHIND_ERRORS: list[tuple[str, int, int]] = [
    ("(?<=a|bc)", 1, 1),
    ("x(?<!a*)", 1, 2),
    ("(?=(?<=a+))", 1, 4),
    ("(?<=a{1,2})b", 1, 1),
]


@pytest.mark.parametrize(("pattern", "line", "column"), LOOKBEHIND_ERRORS)
def test_variable_width_look_behind_is_refused_like_re(pattern: str, line: int, column: int) -> None:
    assert re_valid(pattern) is None
    with pytest.raises(GrammarSyntaxError) as info:
        parse_regex(pattern)
    assert (info.value.line, info.value.column) == (line, column)
    assert "look-behind requires fixed-width pattern" in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [("(a)(?=\\1)", "backreference"), ("(?=(a))(?(1)b|c)", "conditional"), ("(?=(?>a))", "atomic group")],
)
def test_other_constructs_stay_refused(pattern: str, construct: str) -> None:
    assert re_valid(pattern) is not None
    with pytest.raises(UnsupportedConstruct) as info:
        parse_regex(pattern)
    assert info.value.construct == construct


def test_state_budget_is_a_typed_error() -> None:
    pattern = "(?:(?!a[ab]{6}b).)*"
    with pytest.raises(GrammarTooLarge) as info:
        parse_regex(pattern, max_states=20)
    assert "look-around automaton" in str(info.value) and "line 1, column 1" in str(info.value)
    assert parse_regex(pattern).accepts(b"abbbbbba")


def test_repeat_budget_applies() -> None:
    with pytest.raises(GrammarSyntaxError) as info:
        parse_regex("(?=a)(?:ab){60000}", max_repeat=100_000)
    assert "max_repeat" in str(info.value)


def test_deep_nesting_needs_no_recursion() -> None:
    depth = 3000
    pattern = "(?=" * depth + "a" + ")" * depth + "a"
    g = parse_regex(pattern, max_depth=depth + 1)
    assert accepts(g, b"a") and not accepts(g, b"b")
    behind = "(?<=" * depth + "a" + ")" * depth
    g = parse_regex("a" + behind + "b", max_depth=depth + 1)
    assert accepts(g, b"ab") and not accepts(g, b"b")


# --------------------------------------------------------------------------------------
# random patterns with look-around

_ATOMS = ["a", "b", ".", "[ab]", "[^a]", "é", "\\w", "(?:)", "[é-ü]", "[^é]", "😀"]
_WIDE = ["a*", "b+", "[ac]?", "(?:ab)*", "c{0,2}"]


def _fixed(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # fixed-width bodies: sequences of characters, alternatives of one width, assertions
    return st.one_of(
        st.lists(inner, min_size=1, max_size=3).map("".join),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        st.tuples(st.sampled_from(["(?=", "(?!"]), inner).map(lambda t: t[0] + t[1] + ")"),
    )


_FIXED = st.recursive(st.sampled_from(_ATOMS), _fixed, max_leaves=4)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    seq = st.lists(inner, min_size=1, max_size=3).map("".join)
    return st.one_of(
        seq,
        st.lists(seq, min_size=2, max_size=3).map(lambda alts: "(?:" + "|".join(alts) + ")"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "*?"])).map(
            lambda t: f"(?:{t[0]}){t[1]}"
        ),
        st.tuples(st.sampled_from(["(?=", "(?!"]), inner).map(lambda t: t[0] + t[1] + ")"),
        st.tuples(st.sampled_from(["(?<=", "(?<!"]), _FIXED).map(lambda t: t[0] + t[1] + ")"),
    )


PATTERNS = st.recursive(st.sampled_from(_ATOMS + _WIDE), _extend, max_leaves=8)
ALPHABET = "abéü😀"
STRINGS = every_string(ALPHABET, 4)


@checks_at_least(60)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, st.sampled_from([0, 0, A, I | A, S]))
def test_random_lookaround_patterns_match_re(pattern: str, flags: int) -> None:
    compiled = re_valid(pattern, flags)
    if compiled is None:  # a look-behind of variable width: refused the same way
        with pytest.raises(GrammarSyntaxError):
            parse_regex(pattern, flags)
        event("refused by re")
        return gave_up()
    try:
        g = parse_regex(pattern, flags)
    except UnsupportedConstruct:  # case folding of non-ASCII in Unicode mode
        assert flags & I and not flags & A
        return gave_up()
    except GrammarTooLarge:
        event("over the state budget")
        return gave_up()
    for s in STRINGS:
        assert accepts(g, s.encode()) == (compiled.fullmatch(s) is not None), (pattern, flags, s)
    event("checked")
    return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, st.lists(st.text(st.sampled_from([*"abc\n", "é", "😀", "Ω"]), max_size=7), max_size=10))
def test_random_lookaround_patterns_on_longer_strings(pattern: str, strings: list[str]) -> None:
    compiled = re_valid(pattern)
    try:
        g = parse_regex(pattern)
    except GrammarSyntaxError:
        assert compiled is None
        return
    except GrammarTooLarge:
        return
    assert compiled is not None
    for s in strings:
        assert accepts(g, s.encode()) == (compiled.fullmatch(s) is not None), (pattern, s)
