r"""JSON Schema -> grammar text, through the grammar engine's own converter.

A serving stack that constrains decoding with a JSON Schema hands the schema to its grammar
engine, and the engine decides which JSON documents the schema allows (whitespace,
separators, property order, how ``pattern`` or ``format`` are read).  Token classes are only
lossless for the language the engine enforces, so :func:`from_json_schema` does not convert
schemas itself: it asks the engine's converter for its grammar and returns that grammar as
text, which :func:`~formalgram_cfgzip.compress.compress` and
:func:`formalgram_cfgzip.engines.compile_grammar` then take like any GBNF text.

XGrammar (``engine="xgrammar"``)
    ``xgrammar.Grammar.from_json_schema`` with the options given, printed with ``str()``.
    The printed EBNF is rewritten into the GBNF both :func:`formalgram.parse_gbnf` and
    XGrammar read, changing spelling only where it must:

    * ``x{m, -1}`` (XGrammar's unbounded repetition) becomes ``x{m,}``;
    * the lookahead assertions ``(= ...)`` that end some rule bodies (after a string body:
      whitespace, then one of ``,}]:``) are dropped.  They never change the language
      (``docs/syntax.md``, "Lookahead"), but XGrammar uses them to refuse tokens that run
      past the end of the rule into text the assertion does not match.  Dropped, the engine
      compiling the returned text enforces exactly its byte language, the language the
      classes are computed for; in JSON the assertion only repeats what the enclosing rules
      require next, so the masks stay those of XGrammar's own JSON grammar (checked by
      ``tests/test_json_schema.py`` against the unmodified grammar on seeded walks);
    * ``Regex("...", json_string=true)`` macros (how XGrammar keeps a ``pattern``: it compiles
      the regular expression to a byte automaton of its own) are kept as they are.  XGrammar
      compiles them itself, and :func:`formalgram_cfgzip.grammar_text.read_grammar` (which
      :func:`~formalgram_cfgzip.compress.compress` and every engine use to read grammar text)
      reads each from XGrammar's own automaton
      (:func:`~formalgram_cfgzip.xgrammar_regex.regex_automaton`), so the classes are computed
      for exactly the language XGrammar enforces, down to its readings that differ from the
      pattern's textbook one (overlong UTF-8 under ``.`` and negated classes, loose optional
      repetitions, lazy quantifiers read as greedy ones under a whole-string match).  Every
      pattern XGrammar compiles is read.

    ``format`` values never leave a macro in 0.2.9's grammars (they are written out as
    grammar rules).

llguidance (``engine="llguidance"``)
    Refused.  llguidance compiles a JSON Schema inside its Rust code (``JsonCompiler`` and
    ``LLMatcher.grammar_from_json_schema`` return the schema wrapped in a JSON envelope, not
    a grammar), so there is no text whose classes would describe llguidance's own reading of
    the schema, which differs from XGrammar's (separators ``", "`` and ``": "``, no free
    whitespace by default).  llguidance can still enforce XGrammar's reading: compress the
    text of ``from_json_schema(schema)`` and compile it with
    ``engines.compile_grammar(classes, text, engine="llguidance")``; the classes are then exact
    for the language llguidance enforces *from that text*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from formalgram_cfgzip.errors import EngineError

__all__ = ["JSON_SCHEMA_ENGINES", "from_json_schema", "xgrammar_schema_grammar"]

JSON_SCHEMA_ENGINES = ("xgrammar", "llguidance")

_UNBOUNDED = re.compile(r"\{\s*(\d+)\s*,\s*-1\s*\}")
_REGEX_MACRO = re.compile(r'Regex\(\s*"(?:[^"\\]|\\.)*"\s*(?:,\s*json_string\s*=\s*(?:true|false)\s*)?\)')
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_\-.]")


def from_json_schema(
    schema: str | Mapping[str, Any] | bool,
    *,
    engine: str = "xgrammar",
    any_whitespace: bool = True,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    strict_mode: bool = True,
    max_whitespace_cnt: int | None = None,
    any_order: bool = False,
) -> str:
    """The grammar text the engine's own JSON-Schema converter produces for ``schema``.

    Parameters
    ----------
    schema : str, mapping or bool
        The schema as JSON text or as a decoded JSON value (mappings keep their key order,
        which decides the property order of the documents).
    engine : {"xgrammar", "llguidance"}
        Whose reading of the schema to use.  Only ``"xgrammar"`` yields a grammar text (see
        the module docstring for why llguidance cannot).
    any_whitespace, indent, separators, strict_mode, max_whitespace_cnt, any_order
        XGrammar's converter options (``xgrammar.Grammar.from_json_schema``, 0.2.9): free
        whitespace between elements; with ``any_whitespace=False``, the indentation and the
        ``(item, key)`` separators of ``json.dumps``; strict mode (no properties or items
        beyond the schema's); a bound on each whitespace run; properties in any order.

    Returns
    -------
    str
        GBNF text with start rule ``root``: XGrammar's grammar for the schema, spelled as
        :func:`formalgram.parse_gbnf` and XGrammar both read it.

    Raises
    ------
    EngineError
        If the engine is unknown, is llguidance, is not installed, rejects the schema or its
        options, or keeps a ``Regex(...)`` macro (a ``pattern``) whose language no grammar
        text has (the message names the pattern and why; see the module docstring).

    Notes
    -----
    The cost of XGrammar's conversion plus one linear pass over the printed grammar.

    A ``pattern`` costs XGrammar's regex conversion and one pass over its output.

    Examples
    --------
    >>> text = from_json_schema({"type": "object", "properties": {"ok": {"type": "boolean"}},
    ...                          "required": ["ok"]}, any_whitespace=False)
    >>> [line for line in text.splitlines() if line.startswith("root ::=")]
    ['root ::= (("{" "\\\\"ok\\\\"" ": " basic_boolean "}"))']
    >>> from formalgram import parse_gbnf
    >>> from formalgram.recognize.earley import accepts
    >>> accepts(parse_gbnf(text), b'{"ok": true}'), accepts(parse_gbnf(text), b'{"ok":1}')
    (True, False)
    >>> text = from_json_schema({"type": "string", "pattern": "^[^/]+$"})
    >>> [line for line in text.splitlines() if line.startswith("root_1 ::=")]
    ['root_1 ::= Regex("^[^/]+$", json_string=true)']
    >>> from formalgram_cfgzip.grammar_text import read_grammar
    >>> g = read_grammar(text)
    >>> g.accepts(b'"a.b"'), g.accepts(b'"a/b"'), g.accepts(b'"\\xe0\\x80\\x80"')  # XGrammar's automaton
    (True, False, True)
    """
    if engine == "llguidance":
        raise EngineError(
            "llguidance compiles a JSON Schema inside its Rust code and exposes no grammar text for it, "
            "so no classes can be computed for llguidance's own reading of a schema; use "
            "from_json_schema(schema) (XGrammar's reading) and compile that text with "
            "engines.compile_grammar(classes, text, engine='llguidance')"
        )
    if engine not in JSON_SCHEMA_ENGINES:
        raise EngineError(f"unknown engine {engine!r}; choose one of {', '.join(JSON_SCHEMA_ENGINES)}")
    grammar = xgrammar_schema_grammar(
        schema,
        any_whitespace=any_whitespace,
        indent=indent,
        separators=separators,
        strict_mode=strict_mode,
        max_whitespace_cnt=max_whitespace_cnt,
        any_order=any_order,
    )
    return xgrammar_core_gbnf(str(grammar))


def xgrammar_schema_grammar(schema: str | Mapping[str, Any] | bool, **options: Any) -> Any:
    """XGrammar's own grammar object for ``schema`` (``xgrammar.Grammar.from_json_schema``).

    What :func:`from_json_schema` prints, and what XGrammar's ``compile_json_schema``
    compiles.

    Parameters
    ----------
    schema : str, mapping or bool
        As :func:`from_json_schema`.
    **options
        XGrammar's converter options (those of :func:`from_json_schema`).

    Returns
    -------
    xgrammar.Grammar

    Raises
    ------
    EngineError
        If the schema is not a JSON value, XGrammar is not installed, or its converter
        refuses the schema or an option.

    Notes
    -----
    XGrammar's conversion: linear in the schema, plus its regex conversion per ``pattern``.

    Examples
    --------
    >>> g = xgrammar_schema_grammar({"type": "boolean"}, any_whitespace=False)
    >>> "root ::= ((basic_boolean))" in str(g)
    True
    """
    if isinstance(schema, str):
        text = schema
    else:
        try:
            text = json.dumps(schema, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise EngineError(f"the schema is not a JSON value: {exc}") from exc
    try:
        import xgrammar
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EngineError("engine='xgrammar' needs the 'xgrammar' package (pip install xgrammar)") from exc
    try:
        return xgrammar.Grammar.from_json_schema(text, **options)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise EngineError(f"XGrammar cannot convert the schema: {str(exc).strip()[:500]}") from exc


def xgrammar_core_gbnf(printed: str) -> str:
    """Rewrite a grammar printed by XGrammar into the GBNF both it and :func:`formalgram.parse_gbnf` read.

    ``x{m, -1}`` becomes ``x{m,}`` and the lookahead assertions ``(= ...)`` are dropped (see
    the module docstring); ``Regex("...")`` macros, strings and character classes are copied
    as they are.

    Parameters
    ----------
    printed : str
        ``str(grammar)`` of an ``xgrammar.Grammar``.

    Returns
    -------
    str

    Raises
    ------
    EngineError
        If the grammar uses an XGrammar macro other than ``Regex(...)`` (``TagDispatch(...)``),
        or a lookahead or literal is not closed.

    Notes
    -----
    One pass, O(len(printed)).

    Examples
    --------
    >>> xgrammar_core_gbnf('s ::= (("\\\\"") | ([^"] s)) (=([ ]* [,}]))\\nroot ::= ((s{0, -1}))')
    's ::= (("\\\\"") | ([^"] s))\\nroot ::= ((s{0,}))'
    """
    out: list[str] = []
    n = len(printed)
    i = 0
    while i < n:
        ch = printed[i]
        if ch in '"[':
            j = _literal_end(printed, i)
            out.append(printed[i:j])
            i = j
        elif printed.startswith("(=", i):
            i = _group_end(printed, i)
            while out and out[-1] == " ":
                out.pop()
        elif ch == "{":
            m = _UNBOUNDED.match(printed, i)
            if m is not None:
                out.append("{" + m.group(1) + ",}")
                i = m.end()
            else:
                out.append(ch)
                i += 1
        elif ch == "(" and out and _IDENT_CHAR.fullmatch(out[-1][-1]):
            start = i - 1
            while start > 0 and _IDENT_CHAR.fullmatch(printed[start - 1]):
                start -= 1
            line = printed.count("\n", 0, i) + 1
            m = _REGEX_MACRO.match(printed, start)
            if m is not None:  # kept: XGrammar and read_grammar both read it (XGrammar's automaton)
                out.append(printed[i : m.end()])
                i = m.end()
                continue
            raise EngineError(
                f"line {line}: XGrammar keeps the macro {printed[start:i]}(...) in this grammar "
                f"({printed[start : min(n, i + 80)].splitlines()[0]}); it compiles it to an automaton "
                "and exposes no grammar text for it (a JSON Schema 'pattern' or regex 'format'), so "
                "the tokens cannot be compressed for it"
            )
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _literal_end(text: str, i: int) -> int:
    """Index just past the string literal or character class opening at ``text[i]``."""
    close = '"' if text[i] == '"' else "]"
    j = i + 1
    n = len(text)
    while j < n and text[j] != close:
        j += 2 if text[j] == "\\" else 1
    if j >= n:
        raise EngineError(f"unterminated literal in XGrammar's grammar at offset {i}")
    return j + 1


def _group_end(text: str, i: int) -> int:
    """Index just past the parenthesised group opening at ``text[i]`` (literals skipped)."""
    depth = 0
    n = len(text)
    j = i
    while j < n:
        ch = text[j]
        if ch in '"[':
            j = _literal_end(text, j)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise EngineError(f"unterminated lookahead in XGrammar's grammar at offset {i}")
