"""Lark grammar text -> tokens, and the escaping lark applies to its literals.

The tokens are those of lark's own grammar of grammars (``lark/load_grammar.py``): names
(rule names lower case, with the modifiers ``?`` ``!``; terminal names upper case),
strings ``"..."`` with the flag ``i``, regular expressions ``/.../flags``, punctuation,
numbers, ``%directives`` and ends of lines.  A run of newlines, blanks and comment lines
followed by ``|`` continues the statement (one ``K_OR`` token); otherwise it is one
``K_NL``.  :func:`unescape` turns a literal's body into the characters lark reads from it,
each with its offset, for error positions.  Everything is linear and iterative.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Final

from formalgram.errors import GrammarSyntaxError
from formalgram.syntax.nodes import Source
from formalgram.utf8 import MAX_CODE_POINT

__all__ = [
    "KIND_TEXT",
    "K_ARROW",
    "K_COLON",
    "K_COMMA",
    "K_DIRECTIVE",
    "K_DOT",
    "K_DOTDOT",
    "K_EOF",
    "K_LBRA",
    "K_LBRACE",
    "K_LPAR",
    "K_NL",
    "K_NUMBER",
    "K_OP",
    "K_OR",
    "K_RBRA",
    "K_RBRACE",
    "K_REGEXP",
    "K_RPAR",
    "K_RULE",
    "K_STR",
    "K_TERM",
    "K_TILDE",
    "TERM_RE",
    "Fail",
    "Tok",
    "tokenize",
    "unescape",
]

# token kinds
K_RULE: Final = 1
K_TERM: Final = 2
K_STR: Final = 3
K_REGEXP: Final = 4
K_COLON: Final = 5
K_OR: Final = 6
K_LPAR: Final = 7
K_RPAR: Final = 8
K_LBRA: Final = 9
K_RBRA: Final = 10
K_LBRACE: Final = 11
K_RBRACE: Final = 12
K_COMMA: Final = 13
K_DOT: Final = 14
K_DOTDOT: Final = 15
K_TILDE: Final = 16
K_OP: Final = 17
K_ARROW: Final = 18
K_NUMBER: Final = 19
K_DIRECTIVE: Final = 20
K_NL: Final = 21
K_EOF: Final = 22

KIND_TEXT: Final = {
    K_RULE: "a rule name",
    K_TERM: "a terminal name",
    K_STR: "a string",
    K_REGEXP: "a regular expression",
    K_COLON: "':'",
    K_OR: "'|'",
    K_LPAR: "'('",
    K_RPAR: "')'",
    K_LBRA: "'['",
    K_RBRA: "']'",
    K_LBRACE: "'{'",
    K_RBRACE: "'}'",
    K_COMMA: "','",
    K_DOT: "'.'",
    K_DOTDOT: "'..'",
    K_TILDE: "'~'",
    K_OP: "an operator",
    K_ARROW: "'->'",
    K_NUMBER: "a number",
    K_DIRECTIVE: "a %directive",
    K_NL: "end of line",
    K_EOF: "end of input",
}
_SINGLE: Final = {
    ":": K_COLON,
    "|": K_OR,
    "(": K_LPAR,
    ")": K_RPAR,
    "[": K_LBRA,
    "]": K_RBRA,
    "{": K_LBRACE,
    "}": K_RBRACE,
    ",": K_COMMA,
    "~": K_TILDE,
}
_DIRECTIVES: Final = frozenset(("ignore", "import", "declare", "override", "extend"))
_RULE_RE: Final = re.compile(r"_?[a-z][_a-z0-9]*")
TERM_RE: Final = re.compile(r"_?[A-Z][_A-Z0-9]*")
_MODIFIERS_RE: Final = re.compile(r"(?:!|![?]?|[?]!?)(?=[_a-z])")
_DIRECTIVE_RE: Final = re.compile(r"%[a-z]+")
_DIGITS_RE: Final = re.compile(r"[0-9]+")
_ASCII_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_CONTROL_ESCAPES: Final = {"n": "\n", "f": "\f", "t": "\t", "r": "\r"}


Fail = Callable[[str, int], GrammarSyntaxError]  # an error at an offset
_CONTINUATION_RE: Final = re.compile(r"\\[ ]*\r?\n")


class Tok:
    """One token: its kind (``K_*``), offsets ``[offset, end)`` in the text, its text and flags."""

    __slots__ = ("end", "flags", "kind", "offset", "text")

    def __init__(self, kind: int, offset: int, end: int, text: str) -> None:
        self.kind = kind
        self.offset = offset  # first character in the source
        self.end = end  # one past the last
        self.text = text
        self.flags = ""  # string and regular expression flags


def _skip_blank_lines(text: str, j: int) -> int:
    """The offset after the blanks, newlines and comment lines from ``j`` on."""
    n = len(text)
    while j < n:
        c = text[j]
        if c in " \t\r\n\f\v":
            j += 1
        elif c == "#" or text.startswith("//", j):
            nl = text.find("\n", j)
            j = n if nl < 0 else nl
        else:
            break
    return j


def tokenize(source: Source) -> list[Tok]:
    """Lark grammar text -> tokens; a newline run followed by ``|`` continues the line.

    Parameters
    ----------
    source : Source
        The grammar text.

    Returns
    -------
    list of Tok
        The tokens, ending with ``K_NL`` (when there is any) and ``K_EOF``.

    Raises
    ------
    GrammarSyntaxError
        At an unexpected character, an unterminated string or regular expression, or an
        unknown ``%directive``.

    Notes
    -----
    One pass, linear in the text.

    Examples
    --------
    >>> [KIND_TEXT[t.kind] for t in tokenize(Source('a: "x"i\\n  | /y/s'))]
    ['a rule name', "':'", 'a string', "'|'", 'a regular expression', 'end of line', 'end of input']
    """
    text = source.text
    n = len(text)
    toks: list[Tok] = []
    i = 0

    fail: Fail = partial(_error_at, source)
    while i < n:
        c = text[i]
        if c == " " or c == "\t":
            i += 1
            continue
        if c == "#" or text.startswith("//", i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if c == "\\":
            m = _CONTINUATION_RE.match(text, i)
            if m is None:
                raise fail("unexpected '\\' (a line continuation is '\\' at the end of a line)", i)
            i = m.end()
            continue
        if c == "\n" or c == "\r":
            j = _skip_blank_lines(text, i)
            if j < n and text[j] == "|":
                toks.append(Tok(K_OR, j, j + 1, "|"))
                i = j + 1
            else:
                if toks and toks[-1].kind != K_NL:
                    toks.append(Tok(K_NL, i, i + 1, "\n"))
                i = j
            continue
        single = _SINGLE.get(c, 0)
        if single:
            toks.append(Tok(single, i, i + 1, c))
            i += 1
            continue
        signed = (
            c in "+-"
            and i + 1 < n
            and text[i + 1] in _ASCII_DIGITS
            and toks
            and toks[-1].kind in (K_TILDE, K_DOT, K_DOTDOT)
        )
        if c in _ASCII_DIGITS or signed:
            m = _DIGITS_RE.match(text, i + 1 if signed else i)
            assert m is not None
            toks.append(Tok(K_NUMBER, i, m.end(), text[i : m.end()]))
            i = m.end()
            continue
        if c == '"':
            i = _string_token(text, i, toks, fail)
            continue
        if c == "/":
            i = _regexp_token(text, i, toks, fail)
            continue
        if c == ".":
            if text.startswith("..", i):
                toks.append(Tok(K_DOTDOT, i, i + 2, ".."))
                i += 2
            else:
                toks.append(Tok(K_DOT, i, i + 1, "."))
                i += 1
            continue
        if c == "-":
            if not text.startswith("->", i):
                raise fail("unexpected '-' (an alias is written '-> name')", i)
            toks.append(Tok(K_ARROW, i, i + 2, "->"))
            i += 2
            continue
        if c == "%":
            m = _DIRECTIVE_RE.match(text, i)
            if m is None or m.group()[1:] not in _DIRECTIVES:
                raise fail(f"unknown directive {text[i : m.end()] if m else '%'!r}", i)
            toks.append(Tok(K_DIRECTIVE, i, m.end(), m.group()[1:]))
            i = m.end()
            continue
        if c == "?" or c == "!":
            mods = _MODIFIERS_RE.match(text, i)
            if mods is None:
                if c == "!":
                    raise fail("'!' must be followed by a rule name", i)
                toks.append(Tok(K_OP, i, i + 1, "?"))
                i += 1
                continue
            m = _RULE_RE.match(text, mods.end())
            if m is None:
                raise fail("a rule modifier must be followed by a rule name", i)
            tok = Tok(K_RULE, i, m.end(), m.group())
            tok.flags = mods.group()
            toks.append(tok)
            i = m.end()
            continue
        if c == "+" or c == "*":
            toks.append(Tok(K_OP, i, i + 1, c))
            i += 1
            continue
        m = _RULE_RE.match(text, i)
        if m is not None:
            toks.append(Tok(K_RULE, i, m.end(), m.group()))
            i = m.end()
            continue
        m = TERM_RE.match(text, i)
        if m is not None:
            toks.append(Tok(K_TERM, i, m.end(), m.group()))
            i = m.end()
            continue
        raise fail(f"unexpected character {c!r}", i)
    if toks and toks[-1].kind != K_NL:
        toks.append(Tok(K_NL, n, n, ""))
    toks.append(Tok(K_EOF, n, n, ""))
    return toks


def _error_at(source: Source, message: str, offset: int) -> GrammarSyntaxError:
    """:func:`tokenize`'s error at ``offset`` of ``source`` (bound with ``partial``: a function
    nested in :func:`tokenize` would, compiled, make a reference cycle with its closure)."""
    line, col = source.position(offset)
    return source.error(message, line, col)


def _closing(text: str, i: int, close: str, single_line: bool, fail: Fail, unterminated: str) -> int:
    """The index of the ``close`` that ends the literal opened at ``i`` (a backslash escapes
    ``close`` and itself); ``fail(unterminated)`` at the end of the text, or of the line when
    ``single_line``."""
    n = len(text)
    j = i + 1
    while True:
        if j >= n or (single_line and text[j] == "\n"):
            raise fail(unterminated, i)
        ch = text[j]
        if ch == "\\" and j + 1 < n and text[j + 1] in (close, "\\"):
            j += 2
        elif ch == close:
            return j
        else:
            j += 1


def _string_token(text: str, i: int, toks: list[Tok], fail: Fail) -> int:
    n = len(text)
    end = _closing(text, i, '"', True, fail, "unterminated string (strings cannot contain a newline)") + 1
    tok = Tok(K_STR, i, end, text[i:end])
    if end < n and text[end] == "i":
        tok.flags = "i"
        end += 1
        tok.end = end
    toks.append(tok)
    return end


def _regexp_token(text: str, i: int, toks: list[Tok], fail: Fail) -> int:
    n = len(text)
    end = _closing(text, i, "/", False, fail, "unterminated regular expression") + 1
    tok = Tok(K_REGEXP, i, end, text[i:end])
    k = end
    while k < n and text[k] in "imslux":
        k += 1
    tok.flags = text[end:k]
    tok.end = k
    toks.append(tok)
    return k


def unescape(text: str, start: int, end: int, is_string: bool, fail: Fail) -> tuple[list[str], list[int]]:
    """The characters lark reads from ``text[start:end]`` (a literal's body), each with its offset.

    Lark evaluates a literal's escapes itself: ``\\n \\f \\t \\r \\xHH \\uHHHH \\UHHHHHHHH``
    become the character, ``\\"`` a quote, ``\\\\`` stays two backslashes (``\\\\"``: a
    backslash and a quote), any other ``\\c`` stays as written.  In a string literal every
    pair of backslashes of the result is then one backslash.

    Parameters
    ----------
    text : str
        The text holding the literal.
    start, end : int
        The body's bounds (without the quotes or slashes).
    is_string : bool
        A string literal (True) or a regular expression (False).
    fail : callable
        Makes the error for a message and an offset into ``text``.

    Returns
    -------
    (list of str, list of int)
        The characters and, for each, the offset in ``text`` it came from.

    Raises
    ------
    GrammarSyntaxError
        (from ``fail``) For a truncated ``\\x`` ``\\u`` ``\\U`` escape or one above U+10FFFF.

    Notes
    -----
    Linear in the body.

    Examples
    --------
    >>> def fail(message: str, offset: int) -> GrammarSyntaxError:
    ...     return GrammarSyntaxError(message, 1, offset + 1)
    >>> "".join(unescape(r'"a\\"\\x41\\d"', 1, 10, True, fail)[0])
    'a"A\\\\d'
    """
    chars: list[str] = []
    offs: list[int] = []
    k = start
    while k < end:
        ch = text[k]
        if ch != "\\":
            chars.append(ch)
            offs.append(k)
            k += 1
            continue
        if k + 1 >= end:
            raise fail("a literal cannot end with a backslash", k)
        e = text[k + 1]
        if e == "\\":
            if k + 2 < end and text[k + 2] == '"':
                chars += ["\\", '"']
                offs += [k, k + 2]
                k += 3
            else:
                chars += ["\\", "\\"]
                offs += [k, k + 1]
                k += 2
        elif e == '"':
            chars.append('"')
            offs.append(k)
            k += 2
        elif e in _CONTROL_ESCAPES:
            chars.append(_CONTROL_ESCAPES[e])
            offs.append(k)
            k += 2
        elif e in "xuU":
            width = 2 if e == "x" else 4 if e == "u" else 8
            digits = text[k + 2 : min(k + 2 + width, end)]
            if len(digits) != width or any(d not in _HEX for d in digits):
                raise fail(f"truncated \\{e} escape: {width} hexadecimal digits expected", k)
            value = int(digits, 16)
            if value > MAX_CODE_POINT:
                raise fail(f"escape \\{e}{digits} is above U+10FFFF", k)
            chars.append(chr(value))
            offs.append(k)
            k += 2 + width
        else:
            chars += ["\\", e]
            offs += [k, k + 1]
            k += 2
    if is_string:
        out_c: list[str] = []
        out_o: list[int] = []
        k = 0
        while k < len(chars):
            out_c.append(chars[k])
            out_o.append(offs[k])
            k += 2 if chars[k] == "\\" and k + 1 < len(chars) and chars[k + 1] == "\\" else 1
        return out_c, out_o
    return chars, offs
