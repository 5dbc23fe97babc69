r"""JSON Schema -> grammar text, through the grammar engine's own converter.

A serving stack that constrains decoding with a JSON Schema hands the schema to its grammar
engine, and the engine decides which JSON documents the schema allows (whitespace,
separators, property order, how ``pattern`` or ``format`` are read).  Token classes are only
lossless for the language the engine enforces, so :func:`from_json_schema` does not convert
schemas itself: it asks the engine's converter for its grammar and returns that grammar as
text, which :func:`~formalgram_cfgzip.compress.compress` and
:func:`formalgram_cfgzip.engines.compile` then take like any GBNF text.

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
    * a ``Regex("...", json_string=true)`` macro (how XGrammar keeps a ``pattern``: it
      compiles the regular expression to an automaton of its own) becomes the pattern's
      grammar from XGrammar's own regex converter (``xgrammar.testing._regex_to_ebnf``,
      ECMA-262 syntax), with every character class narrowed to what ``json_string``
      allows (see below).  Patterns for which that is not XGrammar's language are
      refused with an :class:`~formalgram_cfgzip.errors.EngineError` naming the pattern.

    What XGrammar 0.2.9 enforces for ``Regex(pat, json_string=true)`` (established by
    experiment against its matcher, ``tests/test_json_schema.py``): the strings of
    ``pat`` read as a whole-string match (a leading ``^`` and a trailing ``$`` change
    nothing) that hold none of the bytes a JSON string may not hold unescaped (controls
    ``\x00``-``\x1f``, ``"``, ``\``); JSON escapes are not read, so ``\"`` in the
    document is refused even where the pattern allows ``"``.  The rewrite is therefore
    exact: every class ``[...]`` and ``[^...]`` loses those characters (it is reprinted
    when it held one), and a pattern whose literal text needs one of them is refused.  It is refused,
    too, where XGrammar's automaton is not the pattern's language:

    * a character range that crosses from one UTF-8 length to the next (U+07FF/U+0800,
      U+FFFF/U+10000) or covers the surrogates: XGrammar's automaton then also accepts
      overlong encodings and encoded surrogates, bytes no grammar text can spell.  Any
      negated class, ``.``, ``\D``, ``\W`` and ``\S`` are such ranges;
    * a group that holds a repetition of variable count, made optional or repeated
      without bound by ``?`` or ``{m,}`` (``(ab*)?``, ``(ab{0,2}){2,}``: XGrammar's
      automaton accepts strings the pattern does not; ``*``, ``+`` and ``{m,n}`` are exact);
    * ``\^`` in a class (XGrammar's converter reads ``[\^a]`` as ``[^a]``), ``^`` or ``$``
      elsewhere than at the ends, empty alternatives, and the escapes and groups the
      rewrite was not checked for (back references, ``\b``, ``\p{..}``, ``(?...)``).

    ``format`` values never leave a macro in 0.2.9's grammars (they are written out as
    grammar rules), so only ``pattern`` (and ``patternProperties``, ``propertyNames``)
    reach this rewrite.

llguidance (``engine="llguidance"``)
    Refused.  llguidance compiles a JSON Schema inside its Rust code (``JsonCompiler`` and
    ``LLMatcher.grammar_from_json_schema`` return the schema wrapped in a JSON envelope, not
    a grammar), so there is no text whose classes would describe llguidance's own reading of
    the schema, which differs from XGrammar's (separators ``", "`` and ``": "``, no free
    whitespace by default).  llguidance can still enforce XGrammar's reading: compress the
    text of ``from_json_schema(schema)`` and compile it with
    ``engines.compile(classes, text, engine="llguidance")``; the classes are then exact
    for the language llguidance enforces *from that text*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from formalgram.utf8 import complement_ranges, normalize_ranges
from formalgram_cfgzip.errors import EngineError

__all__ = ["JSON_SCHEMA_ENGINES", "from_json_schema"]

JSON_SCHEMA_ENGINES = ("xgrammar", "llguidance")

_UNBOUNDED = re.compile(r"\{\s*(\d+)\s*,\s*-1\s*\}")
_REGEX_MACRO = re.compile(r'Regex\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*json_string\s*=\s*true\s*\)')
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
    >>> text = from_json_schema({"type": "string", "pattern": "^[a-z]{2}[0-9]?$"})
    >>> [line for line in text.splitlines() if line.startswith("root_1 ::=")]
    ['root_1 ::= ([a-z]{2} [0-9]?)']
    >>> from_json_schema({"type": "string", "pattern": "^[^/]+$"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    formalgram_cfgzip.errors.EngineError: line ...: the JSON Schema pattern '^[^/]+$' ... overlong or surrogate UTF-8 ...
    """
    if engine == "llguidance":
        raise EngineError(
            "llguidance compiles a JSON Schema inside its Rust code and exposes no grammar text for it, "
            "so no classes can be computed for llguidance's own reading of a schema; use "
            "from_json_schema(schema) (XGrammar's reading) and compile that text with "
            "engines.compile(classes, text, engine='llguidance')"
        )
    if engine not in JSON_SCHEMA_ENGINES:
        raise EngineError(f"unknown engine {engine!r}; choose one of {', '.join(JSON_SCHEMA_ENGINES)}")
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
        grammar = xgrammar.Grammar.from_json_schema(
            text,
            any_whitespace=any_whitespace,
            indent=indent,
            separators=separators,
            strict_mode=strict_mode,
            max_whitespace_cnt=max_whitespace_cnt,
            any_order=any_order,
        )
    except (RuntimeError, ValueError, TypeError) as exc:
        raise EngineError(f"XGrammar cannot convert the schema: {str(exc).strip()[:500]}") from exc
    return xgrammar_core_gbnf(str(grammar))


def xgrammar_core_gbnf(printed: str) -> str:
    """Rewrite a grammar printed by XGrammar into the GBNF both it and :func:`formalgram.parse_gbnf` read.

    ``x{m, -1}`` becomes ``x{m,}``, the lookahead assertions ``(= ...)`` are dropped and
    ``Regex("...", json_string=true)`` macros are expanded (see the module docstring);
    strings and character classes outside the macros are copied as they are.

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
        If the grammar uses an XGrammar macro with no grammar text (``TagDispatch(...)``,
        ``Regex(...)`` outside a JSON string, a ``json_string`` pattern the rewrite refuses),
        or a lookahead or literal is not closed.

    Notes
    -----
    One pass, O(len(printed)), plus XGrammar's regex conversion of each macro's pattern.

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
            if m is not None:
                del out[len(out) - (i - start) :]
                out.append(_json_string_regex(_printed_string(m.group(1), line), line))
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


# -- Regex("...", json_string=true) -> grammar text -----------------------------------------

# the bytes XGrammar removes from every character match of a json_string regex
_JSON_STRING_FORBIDDEN = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
# code points where XGrammar's regex automaton stops encoding a range exactly (see the module
# docstring): a range may not cross a UTF-8 length boundary nor cover the surrogates
_UTF8_LENGTH_STARTS = (0x800, 0x10000)
_SURROGATES = (0xD800, 0xDFFF)
_SIMPLE = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00, "a": 0x07, "b": 0x08, "e": 0x1B}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_QUANTIFIER = re.compile(r"\{(\d+)(,(\d*))?\}")
# escapes checked against XGrammar's automaton: class escapes, identity escapes, \uHHHH, \xHH
_CLASS_ESCAPES = frozenset("dDwWsS")
_IDENTITY_ESCAPES = frozenset('.^$*+?()[]{}|/\\-"')
_IN_CLASS_IDENTITY_ESCAPES = frozenset("]\\-./[")
_EBNF_PUNCTUATION = frozenset(" ()|*+?{},0123456789")


def _printed_string(body: str, line: int) -> str:
    """The text of a string literal as XGrammar prints it (body without the quotes)."""
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        if body[i] != "\\":
            out.append(body[i])
            i += 1
            continue
        cp, i = _read_escape(body, i)
        out.append(chr(cp))
    text = "".join(out)
    if any(not 0x20 <= ord(c) <= 0x7E for c in text):
        raise EngineError(f"line {line}: XGrammar's Regex macro holds {text!r}, not printable ASCII text")
    return text


def _read_escape(text: str, i: int) -> tuple[int, int]:
    """Read the escape at ``text[i] == '\\\\'`` as XGrammar does: (code point, index after)."""
    if i + 1 >= len(text):
        raise EngineError(f"unterminated escape in XGrammar's grammar text {text!r}")
    e = text[i + 1]
    if e in "xuU":
        j = i + 2
        if e == "x":
            while j < len(text) and text[j] in _HEX_DIGITS:
                j += 1
        else:
            j += 4 if e == "u" else 8
        digits = text[i + 2 : j]
        if not digits or len(digits) != j - i - 2 or any(d not in _HEX_DIGITS for d in digits):
            raise EngineError(f"malformed escape \\{e} in XGrammar's grammar text {text!r}")
        return int(digits, 16), j
    return _SIMPLE.get(e, ord(e)), i + 2


def _json_string_regex(pattern: str, line: int) -> str:
    """The grammar text of ``Regex(pattern, json_string=true)``, or an EngineError saying why not."""
    why = _shape_refusal(pattern)
    if why is None:
        try:
            from xgrammar.testing import _regex_to_ebnf

            body = _regex_to_ebnf(pattern, with_rule_name=False).strip()
        except (RuntimeError, ValueError) as exc:
            why = f"XGrammar's regex converter refuses it ({str(exc).strip().splitlines()[-1][:200]})"
        else:
            try:
                return "(" + _narrow_to_json_string(body) + ")"
            except _Refusal as exc:
                why = str(exc)
    raise EngineError(
        f"line {line}: the JSON Schema pattern {pattern!r} (XGrammar's Regex macro) cannot be written "
        f"as grammar text with XGrammar's exact language: {why}"
    )


class _Refusal(Exception):
    """A reason why a pattern is not rewritten (becomes the EngineError message)."""


def _shape_refusal(pattern: str) -> str | None:
    """Why the ECMA-262 ``pattern`` has a shape whose rewrite is not XGrammar's language, or None.

    Scans the pattern once, keeping one flag per open group: whether a repetition of variable
    count occurs inside it (a repeated group holding one is refused).
    """
    n = len(pattern)
    i = 1 if pattern.startswith("^") else 0
    end = n - 1 if pattern.endswith("$") and not pattern.endswith("\\$") else n
    variable: list[bool] = [False]  # per open group (the whole pattern first)
    last = ""  # "atom", "group" (with its flag in last_variable) or "" (nothing to repeat)
    last_variable = False
    while i < end:
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1] if i + 1 < end else ""
            if e in "ux":
                width = 4 if e == "u" else 2
                digits = pattern[i + 2 : i + 2 + width]
                if len(digits) != width or any(d not in _HEX_DIGITS for d in digits):
                    return f"the escape at offset {i} is not \\uHHHH or \\xHH"
                i += 2 + width
            elif e and (e in _CLASS_ESCAPES or e in _IDENTITY_ESCAPES):
                i += 2
            else:
                return f"the escape \\{e} at offset {i} is not supported (checked: \\d \\w \\s, their negations, \\uHHHH, \\xHH and escaped punctuation)"
            last, last_variable = "atom", False
        elif c == "[":
            j = i + 1
            if j < end and pattern[j] == "^":
                j += 1
            if j < end and pattern[j] == "]":
                return f"the class at offset {i} is empty"
            while j < end and pattern[j] != "]":
                if pattern[j] == "\\":
                    e = pattern[j + 1] if j + 1 < end else ""
                    if e in "ux":
                        j += 2 + (4 if e == "u" else 2)
                        continue
                    if e == "^":
                        return f"the class at offset {i} holds \\^ (XGrammar's regex converter reads [\\^...] as [^...])"
                    if not e or (e not in _CLASS_ESCAPES and e not in _IN_CLASS_IDENTITY_ESCAPES):
                        return f"the escape \\{e} in the class at offset {i} is not supported"
                    j += 2
                else:
                    j += 1
            if j >= end:
                return f"the class at offset {i} is not closed"
            i = j + 1
            last, last_variable = "atom", False
        elif c == "(":
            if pattern.startswith("(?", i) and not pattern.startswith("(?:", i):
                return f"the group {pattern[i : i + 3]!r} at offset {i} (assertions, names, flags) is not supported"
            i += 3 if pattern.startswith("(?:", i) else 1
            if i < end and pattern[i] in "|)":
                return f"an empty alternative at offset {i}"
            variable.append(False)
            last = ""
        elif c == ")":
            if len(variable) == 1:
                return f"the ')' at offset {i} closes no group"
            last, last_variable = "group", variable.pop()
            if last_variable:  # the enclosing group holds that repetition too
                variable[-1] = True
            i += 1
        elif c == "|":
            if i + 1 >= end or pattern[i + 1] in "|)" or i == (1 if pattern.startswith("^") else 0):
                return f"an empty alternative at offset {i}"
            last = ""
            i += 1
        elif c in "*+?{":
            if c == "{":
                m = _QUANTIFIER.match(pattern, i, end)
                if m is None:
                    return f"the '{{' at offset {i} is not a repetition {{m}}, {{m,}} or {{m,n}}"
                fixed = m.group(2) is None
                # {m,} and {0,1} repeat a group the way XGrammar's automaton gets wrong
                risky = m.group(2) is not None and (not m.group(3) or m.group(1) + m.group(3) == "01")
                i = m.end()
            else:
                fixed = False
                risky = c == "?"
                i += 1
            if not last:
                return f"the repetition at offset {i - 1} repeats nothing"
            if last == "group" and last_variable and risky:
                return (
                    "a group holding a repetition of variable count is made optional or repeated "
                    "without bound by '?' or '{m,}' (XGrammar's automaton for that accepts strings the "
                    "pattern does not)"
                )
            if i < end and pattern[i] == "?":  # lazy: the same strings
                i += 1
            if not fixed:
                variable[-1] = True
            last = ""
        elif c in "^$":
            return f"the anchor {c!r} at offset {i} is not at an end of the pattern"
        else:
            i += 1
            last, last_variable = "atom", False
    if len(variable) != 1:
        return "a group is not closed"
    return None


def _narrow_to_json_string(body: str) -> str:
    """``body`` (an expression from XGrammar's regex converter) with every class narrowed to
    the characters a JSON string holds unescaped; raises _Refusal when that is not exact."""
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c == '"':
            j = i + 1
            while j < n and body[j] != '"':
                cp, j = _read_escape(body, j) if body[j] == "\\" else (ord(body[j]), j + 1)
                if _forbidden(cp):
                    raise _Refusal(
                        f"it needs the character {chr(cp)!r}, which a JSON string holds only escaped "
                        "and XGrammar's json_string reading never accepts"
                    )
            out.append(body[i : j + 1])
            i = j + 1
        elif c == "[":
            negated, ranges, j = _read_class(body, i)
            cps = complement_ranges(ranges) if negated else normalize_ranges(ranges)
            for lo, hi in cps:
                if any(lo < start <= hi for start in _UTF8_LENGTH_STARTS) or (
                    lo <= _SURROGATES[1] and hi >= _SURROGATES[0]
                ):
                    raise _Refusal(
                        f"the class {body[i:j]} holds the range U+{lo:04X}-U+{hi:04X}, which XGrammar's "
                        "automaton encodes with overlong or surrogate UTF-8 sequences no grammar text spells"
                    )
            kept = normalize_ranges(_subtract(cps, _JSON_STRING_FORBIDDEN))
            if not kept:
                raise _Refusal(f"the class {body[i:j]} holds no character a JSON string holds unescaped")
            out.append(body[i:j] if kept == cps else _class_text(kept))
            i = j
        elif c in _EBNF_PUNCTUATION:
            out.append(c)
            i += 1
        else:
            raise _Refusal(
                f"XGrammar's regex converter wrote {body[:200]!r}, which the rewrite does not read"
            )
    return "".join(out)


def _read_class(text: str, i: int) -> tuple[bool, list[tuple[int, int]], int]:
    """Read the class opening at ``text[i] == '['``: (negated, ranges, index after ``]``)."""
    j = i + 1
    n = len(text)
    negated = j < n and text[j] == "^"
    if negated:
        j += 1
    ranges: list[tuple[int, int]] = []
    while j < n and text[j] != "]":
        lo, j = _read_escape(text, j) if text[j] == "\\" else (ord(text[j]), j + 1)
        hi = lo
        if j + 1 < n and text[j] == "-" and text[j + 1] != "]":
            hi, j = _read_escape(text, j + 1) if text[j + 1] == "\\" else (ord(text[j + 1]), j + 2)
        if lo > hi:
            raise _Refusal(f"XGrammar's regex converter wrote the reversed range in {text[i : j + 1]}")
        ranges.append((lo, hi))
    if j >= n:
        raise _Refusal(f"XGrammar's regex converter wrote an unclosed class {text[i:]!r}")
    return negated, ranges, j + 1


def _forbidden(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _JSON_STRING_FORBIDDEN)


def _subtract(
    ranges: tuple[tuple[int, int], ...], remove: tuple[tuple[int, int], ...]
) -> list[tuple[int, int]]:
    """The code points of ``ranges`` outside ``remove`` (both normalized)."""
    out: list[tuple[int, int]] = []
    for lo, hi in ranges:
        for rlo, rhi in remove:
            if rhi < lo or rlo > hi:
                continue
            if rlo > lo:
                out.append((lo, rlo - 1))
            lo = rhi + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return out


def _class_text(ranges: tuple[tuple[int, int], ...]) -> str:
    """A class both XGrammar and formalgram read as exactly ``ranges`` (every endpoint that is
    not an ASCII letter or digit written \\uHHHH or \\UHHHHHHHH)."""

    def char(cp: int) -> str:
        if cp < 0x80 and chr(cp).isalnum():
            return chr(cp)
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"

    return "[" + "".join(char(lo) if lo == hi else char(lo) + "-" + char(hi) for lo, hi in ranges) + "]"
