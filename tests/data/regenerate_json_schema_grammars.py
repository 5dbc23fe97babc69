"""Regenerate ``grammars/json_schemas/*.gbnf`` from ``json_schemas/*.json`` with XGrammar.

Each schema goes through ``formalgram_cfgzip.from_json_schema``: XGrammar's own converter,
``xgrammar.Grammar.from_json_schema``, with the options the shared corpus used for its
JSON-schema grammars (the defaults, ``any_whitespace=True`` and ``strict_mode=True``),
printed with ``str(grammar)`` and rewritten into GBNF that formalgram reads (and so
``compress``) without changing its language: lookahead assertions ``(= ...)`` are removed
and ``x{m, -1}`` becomes ``x{m,}`` (``formalgram_cfgzip/json_schema.py`` says why each is
exact).  ``from_json_schema`` keeps the ``Regex("...", json_string=true)`` macros (how
XGrammar keeps a ``pattern``), which only ``formalgram_cfgzip.grammar_text.read_grammar``
reads (from XGrammar's own automaton); so that these files stay plain GBNF for the tests of
formalgram alone, this script writes each macro as the pattern's grammar from
``xgrammar.testing._regex_to_ebnf``, which the schemas here keep to ASCII classes, literals
and counted repetitions.

The script then checks that formalgram and XGrammar both read the result, that both accept
every instance in the schema's ``examples``, and that the expanded text has the language of
the macro-keeping one (``read_grammar``) on those instances and on their mutations.  Run
from the repository root::

    python tests/data/regenerate_json_schema_grammars.py          # rewrite the files
    python tests/data/regenerate_json_schema_grammars.py --check  # compare, write nothing
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE / "json_schemas"
OUT = HERE / "grammars" / "json_schemas"


def convert(schema_path: Path) -> str:
    """The grammar text (with its header) for one schema file."""
    import re

    from xgrammar.testing import _regex_to_ebnf

    from formalgram_cfgzip.json_schema import from_json_schema

    kept = from_json_schema(schema_path.read_text(encoding="utf-8"), any_whitespace=True, strict_mode=True)

    def expand(m: re.Match[str]) -> str:
        pattern = re.sub(r"\\(.)", r"\1", m.group(1))  # the printed literal's escapes (\\, \", \?)
        return "(" + _regex_to_ebnf(pattern.removeprefix("^").removesuffix("$"), False).strip() + ")"

    body = re.sub(r'Regex\("((?:[^"\\]|\\.)*)", json_string=true\)', expand, kept)
    check_language(kept, body, schema_path)
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


def check_language(kept: str, expanded: str, schema_path: Path) -> None:
    """The expanded text and the macro-keeping one agree on the examples and their mutations."""
    from formalgram import accepts, parse_gbnf
    from formalgram_cfgzip.grammar_text import read_grammar

    ours, theirs = parse_gbnf(expanded), read_grammar(kept)
    for doc in json.loads(schema_path.read_text(encoding="utf-8"))["examples"]:
        data = json.dumps(doc).encode()
        for k in range(len(data)):
            for probe in (
                data,
                data[:k] + data[k + 1 :],
                data[:k] + b"Z" + data[k:],
                data[:k] + b"\xe0" + data[k:],
            ):
                if accepts(ours, probe) != accepts(theirs, probe):
                    raise SystemExit(f"{schema_path.name}: the expansion reads {probe[:120]!r} differently")


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
