"""Lark grammars and probe strings shared by the Lark tests (no tests here).

``CASES`` are hand-written grammars with members and non-members (checked against lark's
parser in ``tests/test_lark.py``); :func:`probes` samples strings around a grammar's
language.  Neither needs the ``lark`` package.
"""

from __future__ import annotations

import random

from formalgram import Grammar, GrammarError, sample

# (name, text, members, non-members)
CASES: list[tuple[str, str, list[str], list[str]]] = [
    (
        "escapes",
        r'start: "a\"b" "\\" "\n" "\x41" "\u00e9" "\q"',
        ['a"b\\\nAé\\q'],
        ['a"b\\\\\nAé\\q', 'a"b\\\nAéq'],
    ),
    ("case-insensitive", 'start: "sel"i "x"', ["SELx", "sElx", "\u017felx"], ["selX", "sex"]),
    ("range", 'start: "a".."c"+ "é".."ë"', ["abcé", "aë"], ["dé", "a", "aè"]),
    ("regex-dotall", "start: /a.b/s /c.d/", ["a\nbcxd"], ["a\nbc\nd"]),
    ("regex-verbose", "start: /a b # comment\n c/x", ["abc"], ["a bc", "ab"]),
    ("regex-slash", r"start: /a\/b/ /[\\]/", ["a/b\\"], ["a\\/b\\", "a/b"]),
    ("regex-unicode-classes", r"start: /\w+/ /\s/ /\d/", ["é_x\u20031", "ab \u0663"], ["a-b 1", " a1"]),
    ("regex-case", r"start: /[a-c]k/i", ["BK", "a\u212a"], ["dk"]),
    (
        "modifiers-aliases",
        '?start: a -> x\n  | b "y" -> z\n!b: "b"\n_c: "c"\na: _c+',
        ["c", "ccc", "by"],
        ["", "b"],
    ),
    ("optional-repeat", 'start: ["x"] "a"~2 "b"~1..3', ["aab", "xaabbb"], ["ab", "xaabbbb", "xxaab"]),
    (
        "continuation-comments",
        'start: "a"\n     // a comment line\n     | "b"  # another comment\n\n# last\n',
        ["a", "b"],
        ["ab", ""],
    ),
    (
        "imports",
        "start: INT _W WORD\n%import common (INT, WORD)\n%import common.WS -> _W\n",
        ["12 \tab"],
        ["12ab", "a b"],
    ),
    ("ignore", 'start: "a" "b" B\nB: "c" "d"\n%ignore " "', ["a b  cd ", " ab cd", "abcd"], ["a b c d"]),
    (
        "override-extend",
        'start: a\na: "x"\n%override a: "y"\n%extend a: "z"',
        ["y", "z"],
        ["x"],
    ),
    ("priorities", 'start.3: A | B\nA.2: /a+/\nB: "aa" "b"?', ["a", "aa", "aab", "aaa"], ["b", "aaab"]),
    ("terminal-refs", 'start: T\nT: D D? ("x" | D)\nD: "0".."9"', ["12", "123", "1x", "12x"], ["1", "x1"]),
    ("empty-alternative", 'start: "a" | \n', ["", "a"], ["aa"]),
    ("line-continuation", 'start: "a" \\\n  "b"', ["ab"], ["a"]),
    ("left-recursion", 'start: start "+" n | n\nn: /[0-9]+/', ["1+22+3"], ["1+", "+1"]),
]


def probes(g: Grammar, seed: int, n: int, alphabet: bytes, max_len: int = 24) -> list[bytes]:
    """Members of L(g) sampled by formalgram, and mutations of them (members or not)."""
    rng = random.Random(seed)
    members: list[bytes] = []
    for limit in (max_len, 4 * max_len):
        try:
            members = sample(g, n, seed=seed, max_len=limit)
            break
        except GrammarError:  # empty language, or no short member
            continue
    out = [b"", alphabet[:1], alphabet[:2]]
    for m in members:
        out.append(m)
        if m:
            i = rng.randrange(len(m))
            out.append(m[:i] + m[i + 1 :])
            out.append(m[:i] + bytes([rng.choice(alphabet)]) + m[i:])
            out.append(m[:i])
    return list(dict.fromkeys(out))
