"""Regenerate ``grammars/json_schemas/*.gbnf`` from ``json_schemas/*.json`` with XGrammar.

Each schema goes through XGrammar's own converter, ``xgrammar.Grammar.from_json_schema``,
with the options the shared corpus used for its JSON-schema grammars (the defaults,
``any_whitespace=True`` and ``strict_mode=True``), and is printed with ``str(grammar)``.
Three mechanical rewrites then make the text readable by formalgram's GBNF reader (and so
by ``compress``) without changing its language:

* ``Regex("...", json_string=true)`` (how XGrammar prints a ``pattern``) becomes the
  pattern's grammar from ``xgrammar.testing._regex_to_ebnf``; a pattern whose grammar
  holds a negated class is refused (``json_string`` changes what such a class means);
* lookahead assertions ``(= ...)`` after rule bodies are removed (XGrammar's hints about
  what follows a JSON string; every string in these grammars is followed by what the
  hint names);
* ``x{m, -1}`` (XGrammar's printing of an unbounded repeat) becomes ``x{m,}``.

The script then checks that formalgram and XGrammar both read the result and that both
accept every instance in the schema's ``examples``.  Run from the repository root::

    python tests/data/regenerate_json_schema_grammars.py          # rewrite the files
    python tests/data/regenerate_json_schema_grammars.py --check  # compare, write nothing
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE / "json_schemas"
OUT = HERE / "grammars" / "json_schemas"

_REGEX_MACRO = re.compile(r'Regex\(("(?:[^"\\]|\\.)*"), json_string=true\)')
_UNBOUNDED = re.compile(r"\{(\d+), -1\}")


def _unescape(literal: str) -> str:
    """The text of an XGrammar string literal's body (``\\xHH``, ``\\uHHHH``, ``\\n``, ... and
    ``\\c`` for any other character ``c``)."""
    simple = {"n": "\n", "t": "\t", "r": "\r"}
    out: list[str] = []
    i = 0
    while i < len(literal):
        c = literal[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = literal[i + 1]
        if e in "xu":
            width = 2 if e == "x" else 4
            out.append(chr(int(literal[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append(simple.get(e, e))
            i += 2
    return "".join(out)


def _patterns(node: object) -> set[str]:
    """Every ``pattern`` keyword's value in a schema."""
    if isinstance(node, dict):
        found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
        return found.union(*(_patterns(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_patterns(v) for v in node))
    return set()


def _expand_regex(match: re.Match[str], patterns: set[str]) -> str:
    from xgrammar.testing import _regex_to_ebnf

    pattern = _unescape(match.group(1)[1:-1])
    if pattern not in patterns:
        raise SystemExit(f"Regex macro {match.group(0)!r} names no pattern of the schema")
    body = _regex_to_ebnf(pattern, with_rule_name=False).strip()
    if "[^" in body:
        raise SystemExit(f"pattern {pattern!r} needs a negated class; its JSON-string meaning is not kept")
    return f"({body})"


def _drop_lookahead(line: str) -> str:
    """``line`` without a top-level ``(= ...)`` (strings and classes are skipped over)."""
    depth = 0
    i = 0
    while i < len(line):
        c = line[i]
        if c in '"[':
            close = '"' if c == '"' else "]"
            i += 1
            while line[i] != close:
                i += 2 if line[i] == "\\" else 1
        elif c == "(":
            if depth == 0 and line.startswith("(=", i):
                return line[:i].rstrip()
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    return line


def convert(schema_path: Path) -> str:
    """The grammar text (with its header) for one schema file."""
    import xgrammar

    schema_text = schema_path.read_text(encoding="utf-8")
    grammar = xgrammar.Grammar.from_json_schema(schema_text, any_whitespace=True, strict_mode=True)
    patterns = _patterns(json.loads(schema_text))
    body = _REGEX_MACRO.sub(lambda m: _expand_regex(m, patterns), str(grammar))
    body = "\n".join(_drop_lookahead(line) for line in body.splitlines())
    body = _UNBOUNDED.sub(r"{\1,}", body)
    version = importlib.metadata.version("xgrammar")
    header = [
        f"# Generated from tests/data/json_schemas/{schema_path.name} by tests/data/{Path(__file__).name}:",
        f"# xgrammar {version} Grammar.from_json_schema(schema, any_whitespace=True, strict_mode=True), str(grammar),",
        "# then Regex(...) macros expanded (xgrammar.testing._regex_to_ebnf), lookaheads (= ...) removed,",
        "# {m, -1} written {m,}.  Do not edit: rerun the script.",
    ]
    return "\n".join(header) + "\n" + body.strip() + "\n"


def check_examples(schema_path: Path, text: str) -> None:
    """Both formalgram and XGrammar read ``text`` and accept every example of the schema."""
    import xgrammar
    from xgrammar.testing import _get_matcher_from_grammar

    from formalgram import accepts, parse_gbnf

    g = parse_gbnf(text)
    matcher = _get_matcher_from_grammar(xgrammar.Grammar.from_ebnf(text))
    examples = json.loads(schema_path.read_text(encoding="utf-8"))["examples"]
    for doc in examples:
        for data in (json.dumps(doc).encode(), json.dumps(doc, indent=2, ensure_ascii=False).encode()):
            matcher.reset()
            ok = bool(matcher.accept_string(data)) and bool(matcher.is_terminated())
            if not (ok and accepts(g, data)):
                raise SystemExit(f"{schema_path.name}: an example is rejected: {data[:120]!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files, write nothing")
    args = parser.parse_args(argv)
    stale: list[str] = []
    OUT.mkdir(parents=True, exist_ok=True)
    for schema_path in sorted(SCHEMAS.glob("*.json")):
        text = convert(schema_path)
        check_examples(schema_path, text)
        target = OUT / (schema_path.stem + ".gbnf")
        if args.check:
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                stale.append(target.name)
        else:
            target.write_text(text, encoding="utf-8")
            print(f"{target.relative_to(HERE)}: {len(text.encode())} bytes")
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
