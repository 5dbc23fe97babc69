"""A regular expression as a grammar: the strings Python's ``re.fullmatch`` accepts, as bytes.

Run from the repository root: ``python examples/regex_grammar.py [PATTERN]`` (default: an
ISO date with an optional time).  The grammar from :func:`formalgram.parse_regex` is checked
against ``re.fullmatch`` on sampled strings and their one-character mutations, printed as
GBNF, and refused constructs show their typed error.
"""

from __future__ import annotations

import random
import re
import sys

import formalgram as fg

PATTERN = r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(T([01]\d|2[0-3]):[0-5]\d)?"


def main() -> None:
    pattern = sys.argv[1] if len(sys.argv) > 1 else PATTERN
    g = fg.parse_regex(pattern, ascii=True)
    print(f"grammar: {g.stats()}")
    rng = random.Random(0)
    probes = []
    for s in fg.sample(g, 30, seed=1, max_len=40):
        probes.append(s)
        if s:
            i = rng.randrange(len(s))
            probes.append(s[:i] + bytes([rng.randrange(0x20, 0x7F)]) + s[i + 1 :])
    agree = all(fg.accepts(g, s) == (re.fullmatch(pattern, s.decode(), re.ASCII) is not None) for s in probes)
    print(f"agrees with re.fullmatch on {len(probes)} strings: {agree}")
    print(fg.to_gbnf(g).splitlines()[0])
    try:
        fg.parse_regex(r"\bword\b")
    except fg.UnsupportedConstruct as exc:
        print(f"refused: {exc.construct} at line {exc.line}, column {exc.column}")


if __name__ == "__main__":
    main()
