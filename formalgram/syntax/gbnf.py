"""GBNF / XGrammar-EBNF front end: grammar text -> :class:`~formalgram.grammar.Grammar`.

The accepted syntax is the union of what llama.cpp documents for GBNF and what
``xgrammar.Grammar.from_ebnf`` (0.2.9) accepts; ``docs/syntax.md`` has the table, the
XGrammar behaviours found by experiment and what is refused.  Characters are Unicode code
points; the produced grammar is over bytes and accepts exactly their UTF-8 encodings
(see :mod:`formalgram.utf8`).

Pipeline: a tokenizer (positions for every token), a parser to the shared syntax tree of
:mod:`formalgram.syntax.nodes` (iterative: nesting depth is bounded by ``max_depth`` and
memory only, never by Python's recursion limit), name resolution, and the shared lowering
:func:`formalgram.syntax.lower.lower_rules` (repetition is desugared with fresh
nonterminals that keep nullability exact).
"""

from __future__ import annotations

import os
from typing import Final

from formalgram.automaton import ByteAutomaton, RegexReader
from formalgram.errors import FormalgramError, GrammarSyntaxError, UnsupportedConstruct
from formalgram.grammar import Grammar, fresh_name
from formalgram.syntax.lark import parse_lark
from formalgram.syntax.lower import automaton_rules, lower_rules
from formalgram.syntax.nodes import (
    ALT,
    CLASS,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_REPEAT,
    RAW_BASE,
    REF,
    SEQ,
    STRING,
    Node,
    Source,
    group,
    repeat,
)
from formalgram.utf8 import MAX_CODE_POINT, complement_ranges, normalize_ranges

# token kinds
T_IDENT: Final = 1
T_ASSIGN: Final = 2
T_STRING: Final = 3
T_CLASS: Final = 4
T_DOT: Final = 5
T_LPAREN: Final = 6
T_LOOK: Final = 7
T_RPAREN: Final = 8
T_BAR: Final = 9
T_STAR: Final = 10
T_PLUS: Final = 11
T_QMARK: Final = 12
T_REPEAT: Final = 13
T_EOF: Final = 14

_TOKEN_NAMES: Final = {
    T_IDENT: "a rule name",
    T_ASSIGN: "'::='",
    T_STRING: "a string literal",
    T_CLASS: "a character class",
    T_DOT: "'.'",
    T_LPAREN: "'('",
    T_LOOK: "'(='",
    T_RPAREN: "')'",
    T_BAR: "'|'",
    T_STAR: "'*'",
    T_PLUS: "'+'",
    T_QMARK: "'?'",
    T_REPEAT: "a repetition range",
    T_EOF: "end of input",
}

# escapes with a fixed meaning (union of llama.cpp and XGrammar; see docs/syntax.md)
_SIMPLE_ESCAPES: Final = {
    "n": 0x0A,
    "t": 0x09,
    "r": 0x0D,
    "\\": 0x5C,
    '"': 0x22,
    "'": 0x27,
    "/": 0x2F,
    "?": 0x3F,
    "a": 0x07,
    "b": 0x08,
    "e": 0x1B,
    "f": 0x0C,
    "v": 0x0B,
    "0": 0x00,
    "[": 0x5B,
    "]": 0x5D,
    "-": 0x2D,
    "$": 0x24,
    "(": 0x28,
    ")": 0x29,
    "*": 0x2A,
    "+": 0x2B,
    ".": 0x2E,
    "^": 0x5E,
    "{": 0x7B,
    "|": 0x7C,
    "}": 0x7D,
}

_HEX: Final = frozenset("0123456789abcdefABCDEF")
_NAME_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MACRO_NAMES: Final = frozenset({"Regex", "TagDispatch", "Substring", "TokenTagDispatch"})


_NO_CHARS: Final[list[int]] = []
_NO_RANGES: Final[list[tuple[int, int]]] = []


class _Token:
    __slots__ = ("chars", "col", "end", "first", "hi", "kind", "line", "lo", "negated", "ranges", "text")

    def __init__(self, kind: int, line: int, col: int, first: bool) -> None:
        self.kind = kind
        self.line = line
        self.col = col
        self.first = first  # first token on its line
        self.text = ""
        # shared empty lists; read_string / read_class install fresh ones
        self.chars: list[int] = _NO_CHARS
        self.ranges: list[tuple[int, int]] = _NO_RANGES
        self.negated = False
        self.lo = 0
        self.hi = 0


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.source = Source(text)
        self.pos = 0
        self.line = 1
        self.line_start = 0
        self.first = True  # the next token is the first of its line

    def error(self, message: str, pos: int = -1) -> GrammarSyntaxError:
        p = self.pos if pos < 0 else pos
        return self.source.error(message, self.line, p - self.line_start + 1)

    def unsupported(self, construct: str, message: str, pos: int) -> UnsupportedConstruct:
        return self.source.unsupported(construct, message, self.line, pos - self.line_start + 1)

    def next(self) -> _Token:
        """The next token (an ``EOF`` token at the end, again on every later call)."""
        text = self.text
        n = len(text)
        # skip blanks and comments
        while self.pos < n:
            c = text[self.pos]
            if c == " " or c == "\t" or c == "\r":
                self.pos += 1
            elif c == "\n":
                self.pos += 1
                self.line += 1
                self.line_start = self.pos
                self.first = True
            elif c == "#":
                nl = text.find("\n", self.pos)
                self.pos = n if nl < 0 else nl
            else:
                break
        if self.pos >= n:
            return _Token(T_EOF, self.line, self.pos - self.line_start + 1, self.first)
        tok = self.next_token(self.first)
        self.first = False
        return tok

    def next_token(self, first: bool) -> _Token:
        text = self.text
        start = self.pos
        c = text[start]
        tok = _Token(0, self.line, start - self.line_start + 1, first)
        if c in _NAME_START:
            end = start
            n = len(text)
            while end < n and text[end] in _NAME_START:
                end += 1
            if text[start] == "." and text.count(".", start, end) == end - start:
                # "." is llama.cpp's any-character; a run of dots is several of them
                tok.kind = T_DOT
                self.pos = start + 1
                return tok
            tok.kind = T_IDENT
            tok.text = text[start:end]
            self.pos = end
        elif text.startswith("::=", start):
            tok.kind = T_ASSIGN
            self.pos = start + 3
        elif c == '"':
            tok.kind = T_STRING
            self.read_string(tok)
        elif c == "[":
            tok.kind = T_CLASS
            self.read_class(tok)
        elif c == ".":
            tok.kind = T_DOT
            self.pos += 1
        elif c == "(":
            if start + 1 < len(text) and text[start + 1] == "=":
                tok.kind = T_LOOK
                self.pos += 2
            else:
                tok.kind = T_LPAREN
                self.pos += 1
        elif c == ")":
            tok.kind = T_RPAREN
            self.pos += 1
        elif c == "|":
            tok.kind = T_BAR
            self.pos += 1
        elif c == "*":
            tok.kind = T_STAR
            self.pos += 1
        elif c == "+":
            tok.kind = T_PLUS
            self.pos += 1
        elif c == "?":
            tok.kind = T_QMARK
            self.pos += 1
        elif c == "{":
            tok.kind = T_REPEAT
            self.read_repeat(tok)
        else:
            if c == "'":
                raise self.error('strings must use double quotes ("...")')
            if c == ":":
                raise self.error("expected '::='")
            raise self.error(f"unexpected character {c!r}")
        return tok

    def read_escape(self) -> int:
        # self.pos is at the backslash; returns the code point (or RAW_BASE + byte)
        text = self.text
        n = len(text)
        start = self.pos
        if start + 1 >= n or text[start + 1] == "\n":
            raise self.error("unterminated escape sequence", start)
        e = text[start + 1]
        simple = _SIMPLE_ESCAPES.get(e, -1)
        if simple >= 0:
            self.pos = start + 2
            return simple
        if e == "x":
            if start + 2 < n and text[start + 2] == "{":
                # formalgram extension: \x{HH} is one raw byte (XGrammar and llama.cpp reject it)
                close = text.find("}", start + 3, start + 6)
                digits = text[start + 3 : close] if close > 0 else ""
                if not digits or len(digits) > 2 or any(d not in _HEX for d in digits):
                    raise self.error("raw byte escape must be \\x{H} or \\x{HH}", start)
                self.pos = close + 1
                return RAW_BASE + int(digits, 16)
            end = start + 2
            while end < n and text[end] in _HEX:
                end += 1
            count = end - start - 2
            if count == 0:
                raise self.error("\\x escape needs hex digits", start)
            if count > 2:
                raise self.unsupported(
                    "\\x escape with more than two hex digits",
                    f"{text[start:end]!s} is read as one code point by XGrammar but as \\x"
                    f"{text[start + 2 : start + 4]} followed by text by llama.cpp; "
                    "write \\uHHHH or split the string",
                    start,
                )
            self.pos = end
            return int(text[start + 2 : end], 16)
        if e == "u" or e == "U":
            width = 4 if e == "u" else 8
            digits = text[start + 2 : start + 2 + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                raise self.error(f"\\{e} escape needs exactly {width} hex digits", start)
            cp = int(digits, 16)
            if cp > MAX_CODE_POINT:
                raise self.unsupported(
                    "code point above U+10FFFF",
                    f"{text[start : start + 2 + width]} is not a Unicode code point",
                    start,
                )
            self.pos = start + 2 + width
            return cp
        raise self.error(f"unknown escape '\\{e}'", start)

    def read_char(self) -> int:
        text = self.text
        c = text[self.pos]
        if c == "\\":
            return self.read_escape()
        o = ord(c)
        if 0xD800 <= o <= 0xDFFF:
            raise self.error(f"invalid character U+{o:04X} (lone surrogate in the text)")
        self.pos += 1
        return o

    def read_string(self, tok: _Token) -> None:
        text = self.text
        n = len(text)
        open_pos = self.pos
        self.pos += 1
        chars: list[int] = []
        tok.chars = chars
        while True:
            if self.pos >= n or text[self.pos] == "\n" or text[self.pos] == "\r":
                raise self.error("unterminated string literal", open_pos)
            c = text[self.pos]
            if c == '"':
                self.pos += 1
                return
            chars.append(self.read_char())

    def read_class(self, tok: _Token) -> None:
        text = self.text
        n = len(text)
        open_pos = self.pos
        self.pos += 1
        ranges: list[tuple[int, int]] = []
        tok.ranges = ranges
        if self.pos < n and text[self.pos] == "^":
            tok.negated = True
            self.pos += 1
        while True:
            if self.pos >= n or text[self.pos] == "\n" or text[self.pos] == "\r":
                raise self.error("unterminated character class", open_pos)
            if text[self.pos] == "]":
                self.pos += 1
                return
            item_pos = self.pos
            lo = self.read_char()
            hi = lo
            if (
                self.pos + 1 < n
                and text[self.pos] == "-"
                and text[self.pos + 1] != "]"
                and text[self.pos + 1] != "\n"
            ):
                self.pos += 1
                hi = self.read_char()
                lo_raw = lo >= RAW_BASE
                hi_raw = hi >= RAW_BASE
                lo_v = lo - RAW_BASE if lo_raw else lo
                hi_v = hi - RAW_BASE if hi_raw else hi
                if lo_raw != hi_raw and (lo_v if hi_raw else hi_v) >= 0x80:
                    raise self.error("a range cannot mix a raw byte and a non-ASCII character", item_pos)
                if lo_v > hi_v:
                    raise self.error("character range lower bound is larger than upper bound", item_pos)
                if lo_raw or hi_raw:
                    lo, hi = RAW_BASE + lo_v, RAW_BASE + hi_v
            ranges.append((lo, hi))

    def read_regex_macro(self, at: int) -> tuple[str, bool]:
        """The arguments of ``Regex("pattern"[, json_string=true|false])``, read from just
        after its ``(`` to its ``)`` (``at``: where the macro's name starts, for errors)."""
        text = self.text
        n = len(text)
        skip = self.skip_blanks
        skip()
        if self.pos >= n or text[self.pos] != '"':
            raise self.error("Regex(...) takes a string literal (the pattern) first")
        tok = _Token(T_STRING, self.line, self.pos - self.line_start + 1, False)
        self.read_string(tok)
        if any(c >= RAW_BASE for c in tok.chars):
            raise self.error("a Regex(...) pattern cannot contain raw bytes \\x{HH}", at)
        pattern = "".join(chr(c) for c in tok.chars)
        json_string = False
        skip()
        if self.pos < n and text[self.pos] == ",":
            self.pos += 1
            skip()
            if not text.startswith("json_string", self.pos):
                raise self.error("the only option of Regex(...) is json_string=true or json_string=false")
            self.pos += len("json_string")
            skip()
            if self.pos >= n or text[self.pos] != "=":
                raise self.error("expected '=' after json_string")
            self.pos += 1
            skip()
            if text.startswith("true", self.pos):
                json_string = True
                self.pos += 4
            elif text.startswith("false", self.pos):
                self.pos += 5
            else:
                raise self.error("json_string must be true or false")
            skip()
        if self.pos >= n or text[self.pos] != ")":
            raise self.error("expected ')' to close Regex(...)")
        self.pos += 1
        return pattern, json_string

    # the helpers are methods, not functions nested in their callers: compiled, a nested
    # function and its closure refer to each other, and each call would leave the lexer (its
    # text, its tokens) to the cyclic garbage collector
    def skip_blanks(self) -> None:
        """Step over spaces and tabs (inside a macro's arguments or a repetition's range)."""
        text = self.text
        n = len(text)
        while self.pos < n and text[self.pos] in " \t":
            self.pos += 1

    def read_count(self) -> int:
        """A repetition's count (at most 9 digits), after blanks."""
        self.skip_blanks()
        text = self.text
        n = len(text)
        s = self.pos
        while self.pos < n and text[self.pos].isascii() and text[self.pos].isdigit():
            self.pos += 1
        if s == self.pos:
            raise self.error("expected an integer in repetition range")
        if self.pos - s > 9:
            raise self.error("repetition count is too large", s)
        return int(text[s : self.pos])

    def read_repeat(self, tok: _Token) -> None:
        text = self.text
        n = len(text)
        open_pos = self.pos
        self.pos += 1
        skip, number = self.skip_blanks, self.read_count
        tok.lo = number()
        skip()
        if self.pos < n and text[self.pos] == ",":
            self.pos += 1
            skip()
            if self.pos < n and text[self.pos] == "}":
                tok.hi = -1
            else:
                tok.hi = number()
                skip()
        else:
            tok.hi = tok.lo
        if self.pos >= n or text[self.pos] != "}":
            raise self.error("expected '}' to close the repetition range")
        self.pos += 1
        if tok.hi >= 0 and tok.lo > tok.hi:
            raise self.error(f"repetition lower bound {tok.lo} is larger than upper bound {tok.hi}", open_pos)


class _Parser:
    """Tokens -> rules of syntax trees, with an explicit stack of open groups."""

    def __init__(
        self, source: Source, lexer: _Lexer, lookahead: str, max_depth: int, regex: RegexReader | None = None
    ) -> None:
        self.source = source
        self.lexer = lexer
        # a window of two tokens, read on demand (an error is found without reading further)
        self.cur = lexer.next()
        self.nxt = lexer.next()
        self.lookahead = lookahead
        self.max_depth = max_depth
        self.refs: list[Node] = []
        self.regex = regex
        # each distinct Regex(...) macro: its automaton and the references standing for it
        self.macros: dict[tuple[str, bool], tuple[ByteAutomaton, list[Node]]] = {}

    def error_at(self, tok: _Token, message: str) -> GrammarSyntaxError:
        return self.source.error(message, tok.line, tok.col)

    def peek(self, k: int = 0) -> _Token:
        """The current token (``k == 0``) or the one after it (``k == 1``)."""
        return self.cur if k == 0 else self.nxt

    def advance(self) -> None:
        self.cur = self.nxt
        self.nxt = self.lexer.next()

    def at_rule_start(self) -> bool:
        tok = self.peek()
        if tok.kind == T_IDENT and self.peek(1).kind == T_ASSIGN:
            if not tok.first:
                raise self.error_at(tok, f"rule '{tok.text}' must start at the beginning of a line")
            return True
        return False

    def parse_rules(self) -> list[tuple[_Token, Node]]:
        rules: list[tuple[_Token, Node]] = []
        while True:
            tok = self.peek()
            if tok.kind == T_EOF:
                return rules
            if tok.kind != T_IDENT:
                raise self.error_at(tok, f"expected a rule name, got {_TOKEN_NAMES[tok.kind]}")
            if self.peek(1).kind != T_ASSIGN:
                raise self.error_at(self.peek(1), f"expected '::=' after rule name '{tok.text}'")
            if not tok.first:
                raise self.error_at(tok, f"rule '{tok.text}' must start at the beginning of a line")
            self.advance()
            self.advance()
            body = self.parse_alternatives(0)
            nxt = self.peek()
            if nxt.kind == T_LOOK:
                self.parse_lookahead()
                nxt = self.peek()
            if nxt.kind == T_RPAREN:
                raise self.error_at(nxt, "unbalanced ')'")
            if nxt.kind != T_EOF and not self.at_rule_start():
                raise self.error_at(nxt, f"unexpected {_TOKEN_NAMES[nxt.kind]}")
            rules.append((tok, body))

    def parse_lookahead(self) -> None:
        tok = self.peek()
        if self.lookahead != "drop":
            raise self.source.unsupported(
                "lookahead",
                "XGrammar uses (= ...) to mask tokens that cross the end of this rule, so it is not "
                "a pure hint; parse with lookahead='drop' to ignore it (see docs/syntax.md)",
                tok.line,
                tok.col,
            )
        self.advance()
        self.parse_alternatives(1)
        close = self.peek()
        if close.kind != T_RPAREN:
            raise self.error_at(
                close,
                f"expected ')' to close the lookahead assertion opened at line {tok.line}, column {tok.col}",
            )
        self.advance()

    def parse_alternatives(self, depth: int) -> Node:
        """Alternatives up to the token that ends them, at nesting ``depth``; returns an ``ALT``.

        Open groups live on an explicit stack (``frames``), so nesting is bounded by
        ``max_depth`` only.
        """
        first = self.peek()
        if depth > self.max_depth:
            raise self.error_at(first, f"parentheses nested deeper than {self.max_depth}")
        alts: list[Node] = []
        seq = Node(SEQ, first.line, first.col)
        alts.append(seq)
        # enclosing groups: (their alternatives, their current sequence, the '(' token)
        frames: list[tuple[list[Node], Node, _Token]] = []
        while True:
            tok = self.peek()
            kind = tok.kind
            if kind == T_IDENT and not self.at_rule_start():
                nxt = self.peek(1)
                if (
                    nxt.kind == T_LPAREN
                    and nxt.line == tok.line
                    and nxt.col == tok.col + len(tok.text)
                    and tok.text in _MACRO_NAMES
                ):
                    node = self.macro(tok)
                else:
                    node = Node(REF, tok.line, tok.col)
                    node.name = tok.text
                    self.refs.append(node)
                    self.advance()
            elif kind == T_STRING:
                node = Node(STRING, tok.line, tok.col)
                node.chars = tok.chars
                self.advance()
            elif kind in (T_CLASS, T_DOT):
                node = self.class_node(tok)
                self.advance()
            elif kind == T_LPAREN:
                self.advance()
                inner = self.peek()
                depth += 1
                if depth > self.max_depth:
                    raise self.error_at(inner, f"parentheses nested deeper than {self.max_depth}")
                frames.append((alts, seq, tok))
                seq = Node(SEQ, inner.line, inner.col)
                alts = [seq]
                continue
            elif kind == T_BAR:
                self.advance()
                nxt = self.peek()
                seq = Node(SEQ, nxt.line, nxt.col)
                alts.append(seq)
                continue
            elif kind in (T_STAR, T_PLUS, T_QMARK, T_REPEAT):
                raise self.error_at(tok, f"{_TOKEN_NAMES[kind]} must follow an element")
            elif kind == T_LOOK and depth > 0:
                raise self.error_at(tok, "a lookahead assertion (= ...) may only end a rule body")
            elif not frames:
                # the end of these alternatives (a rule start, ')', end of input, ...)
                whole = Node(ALT, first.line, first.col)
                whole.children = alts
                return whole
            else:
                open_tok = frames[-1][2]
                if kind != T_RPAREN:
                    raise self.error_at(
                        tok,
                        f"expected ')' to close the '(' at line {open_tok.line}, column {open_tok.col}, "
                        f"got {_TOKEN_NAMES[kind]}",
                    )
                self.advance()
                inner_alts = alts
                alts, seq, _ = frames.pop()
                depth -= 1
                first_inner = inner_alts[0]
                node = group(inner_alts, first_inner.line, first_inner.col)
            seq.children.append(self.postfix(node))

    def macro(self, tok: _Token) -> Node:
        """An XGrammar macro at ``tok`` (its name; the ``(`` follows): ``Regex(...)`` read by the
        reader into a reference to its automaton's rules, any other refused."""
        if tok.text != "Regex" or self.regex is None:
            hint = (
                ": pass regex= (a reader of the engine's own automaton, such as "
                "formalgram_cfgzip.xgrammar_regex.regex_automaton) to read it"
                if tok.text == "Regex"
                else ""
            )
            raise self.source.unsupported(
                "macro", f"XGrammar macro {tok.text}(...) is not supported{hint}", tok.line, tok.col
            )
        at = self.lexer.pos - 1 - len(tok.text)  # where the name starts, on this line
        pattern, json_string = self.lexer.read_regex_macro(at)
        key = (pattern, json_string)
        known = self.macros.get(key)
        if known is None:
            try:
                automaton = self.regex(pattern, json_string)
            except (FormalgramError, ValueError) as exc:
                raise self.source.unsupported("Regex", str(exc), tok.line, tok.col) from exc
            known = (automaton, [])
            self.macros[key] = known
        node = Node(REF, tok.line, tok.col)
        known[1].append(node)
        # the window of two tokens restarts after the macro's ')'
        self.cur = self.lexer.next()
        self.nxt = self.lexer.next()
        return node

    def macro_rules(self, taken: set[str]) -> list[tuple[str, Node]]:
        """The rules of every automaton met, one per state (names made fresh against
        ``taken``), with the macros' references pointed at their start states."""
        out: list[tuple[str, Node]] = []
        counters: dict[str, int] = {}
        for automaton, refs in self.macros.values():
            line, col = refs[0].line, refs[0].col
            names: list[str] = []
            for _ in range(automaton.num_states):
                names.append(fresh_name("regex", taken, counters))
                taken.add(names[-1])
            for ref in refs:
                ref.name = names[automaton.start]
            out.extend(automaton_rules(automaton, names, line, col))
        return out

    def postfix(self, node: Node) -> Node:
        """``node`` with the postfix operators that follow it (at most 8)."""
        stacked = 0
        while True:
            op = self.peek()
            kind = op.kind
            if kind not in (T_STAR, T_PLUS, T_QMARK, T_REPEAT):
                return node
            if stacked >= 8:
                raise self.error_at(op, "too many repetition operators on one element")
            if kind == T_STAR:
                node = repeat(node, 0, -1, op.line, op.col)
            elif kind == T_PLUS:
                node = repeat(node, 1, -1, op.line, op.col)
            elif kind == T_QMARK:
                node = repeat(node, 0, 1, op.line, op.col)
            else:
                node = repeat(node, op.lo, op.hi, op.line, op.col)
            self.advance()
            stacked += 1

    def class_node(self, tok: _Token) -> Node:
        node = Node(CLASS, tok.line, tok.col)
        if tok.kind == T_DOT:
            node.ranges = ((0, MAX_CODE_POINT),)
            return node
        raw = any(hi >= RAW_BASE for _, hi in tok.ranges)
        if raw:
            if tok.negated:
                raise self.error_at(tok, "a negated class cannot contain raw bytes \\x{HH}")
            out: list[tuple[int, int]] = []
            for lo, hi in tok.ranges:
                if hi < RAW_BASE:
                    if hi >= 0x80:
                        raise self.error_at(
                            tok, "a class with raw bytes \\x{HH} cannot contain non-ASCII characters"
                        )
                    out.append((lo, hi))
                else:
                    out.append((lo - RAW_BASE, hi - RAW_BASE))
            node.raw = True
            node.ranges = tuple(out)
            return node
        node.ranges = complement_ranges(tok.ranges) if tok.negated else normalize_ranges(tok.ranges)
        return node


def parse_gbnf(
    text: str,
    start: str = "root",
    *,
    lookahead: str = "error",
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_repeat: int = DEFAULT_MAX_REPEAT,
    regex: RegexReader | None = None,
) -> Grammar:
    """Parse GBNF / XGrammar EBNF text into a byte-level :class:`Grammar`.

    Parameters
    ----------
    text : str
        The grammar source.
    start : str
        Name of the start rule (XGrammar's ``root_rule_name``); it must be defined.
    lookahead : {"error", "drop"}
        What to do with XGrammar lookahead assertions ``(= ...)`` after a rule body.
        ``"error"`` raises :class:`UnsupportedConstruct`; ``"drop"`` parses and ignores
        them (exact for the byte language, but XGrammar's token masks may differ; see
        ``docs/syntax.md``).
    max_bytes : int
        Refuse texts longer than this many UTF-8 bytes.
    max_depth : int
        Refuse parentheses nested deeper than this (any value works: the parser keeps its
        open groups on an explicit stack, so depth costs memory, never Python recursion).
    max_repeat : int
        Budget for symbols created by ``{m,n}`` expansion, in total (``x{m,n}`` costs
        ``m*|x| + (n-m)*(|x|+1)`` symbols, ``|x|`` the lowered width of ``x``).
    regex : callable or None
        How to read XGrammar's ``Regex("pattern", json_string=true)`` macro: ``regex(pattern,
        json_string)`` returns the :class:`~formalgram.automaton.ByteAutomaton` whose byte
        language the macro stands for (the engine's own automaton: XGrammar's is not the
        pattern's textbook reading everywhere; ``formalgram_cfgzip`` reads it from XGrammar
        itself).  Its states become rules named ``regex``, ``regex_1``, ...  ``None``
        (default): the macro is refused.

    Returns
    -------
    Grammar
        Unused rules are kept.  Generated helper nonterminals are named after the rule
        that needed them (``<rule>-star``, ``<rule>-chars``, ...), made unique.

    Raises
    ------
    GrammarSyntaxError
        With 1-based line, column and source line, for every malformed input (undefined
        rule, duplicate rule, missing start rule, empty grammar, limits exceeded, ...).
    UnsupportedConstruct
        For valid syntax that is refused (lookahead by default, XGrammar macros, code
        points above U+10FFFF, ambiguous ``\\x`` escapes).

    Notes
    -----
    Time and memory are linear in the text length plus the expanded size (the size of
    the produced grammar, which ``max_repeat`` bounds beyond the text): tokens are read
    on demand, and the first error in the text is reported without reading further.
    Helper names come from per-base counters, so ``"a"{0,16000}`` costs 8 times
    ``"a"{0,2000}``.  The syntax tree and its lowering are shared with the other front
    ends (:mod:`formalgram.syntax.nodes`, :mod:`formalgram.syntax.lower`).

    Examples
    --------
    >>> g = parse_gbnf('root ::= "a" ws "b"\\nws ::= [ \\\\t]*')
    >>> len(g.rules_for("ws"))
    2
    >>> g.accepts(b"a \\tb")
    True
    >>> parse_gbnf('root ::= "a"{0,2') # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    formalgram.errors.GrammarSyntaxError: line 1, column 17: expected '}' to close the repetition range
    """
    if lookahead not in ("error", "drop"):
        raise ValueError(f"lookahead must be 'error' or 'drop', got {lookahead!r}")
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise GrammarSyntaxError(f"grammar text is larger than max_bytes={max_bytes} bytes", 1, 1, "")
    if text.startswith("\ufeff"):
        text = text[1:]
    source = Source(text)
    parser = _Parser(source, _Lexer(text), lookahead, max_depth, regex)
    rules = parser.parse_rules()
    if not rules:
        raise source.error("empty grammar: no rule is defined", 1, 1)
    defined: dict[str, _Token] = {}
    for tok, _ in rules:
        prev = defined.get(tok.text)
        if prev is not None:
            raise source.error(
                f"rule '{tok.text}' is defined more than once (first at line {prev.line})", tok.line, tok.col
            )
        defined[tok.text] = tok
    for ref in parser.refs:
        if ref.name not in defined:
            hint = " ('.' is part of rule names; write ' . ' for any character)" if "." in ref.name else ""
            raise source.error(f"rule '{ref.name}' is not defined{hint}", ref.line, ref.col)
    if start not in defined:
        raise source.error(f"start rule '{start}' is not defined", 1, 1)
    named = [(tok.text, body) for tok, body in rules]
    if parser.macros:
        named += parser.macro_rules(set(defined))
    return lower_rules(named, start, source, max_repeat=max_repeat)


def load(path: str | os.PathLike[str], start: str | None = None, **kw: object) -> Grammar:
    """Read a grammar file (UTF-8): ``.lark`` with :func:`~formalgram.parse_lark`, any other with :func:`parse_gbnf`.

    Parameters
    ----------
    path : str or PathLike
        The file.
    start : str, optional
        Name of the start rule (default ``"start"`` for ``.lark`` files, ``"root"`` otherwise).
    **kw
        ``lookahead`` (GBNF) or ``ignore_at_start`` (Lark), ``max_bytes``, ``max_depth``,
        ``max_repeat`` as for :func:`parse_gbnf` / :func:`~formalgram.parse_lark`.

    Raises
    ------
    GrammarSyntaxError
        For invalid UTF-8 (with the position of the bad byte), files over ``max_bytes`` and
        every error of :func:`parse_gbnf`.
    OSError
        If the file cannot be read.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "digits.gbnf")
    ...     with open(path, "w", encoding="utf-8") as f:
    ...         _ = f.write("root ::= [0-9]+\\n")
    ...     g = load(path)
    >>> g.accepts(b"2024"), g.accepts(b"")
    (True, False)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "digits.lark")
    ...     with open(path, "w", encoding="utf-8") as f:
    ...         _ = f.write("start: DIGIT+\\n%import common.DIGIT\\n")
    ...     g = load(path)
    >>> g.accepts(b"2024"), g.accepts(b"")
    (True, False)
    """
    is_lark = os.fspath(path).endswith(".lark")
    lookahead = kw.pop("lookahead", "error")
    ignore_at_start = kw.pop("ignore_at_start", False)
    if not isinstance(ignore_at_start, bool) or (not is_lark and ignore_at_start):
        raise TypeError("ignore_at_start is a bool, for .lark files only")
    if is_lark and lookahead != "error":
        raise TypeError("lookahead is for GBNF files only")
    max_bytes = kw.pop("max_bytes", DEFAULT_MAX_BYTES)
    max_depth = kw.pop("max_depth", DEFAULT_MAX_DEPTH)
    max_repeat = kw.pop("max_repeat", DEFAULT_MAX_REPEAT)
    if kw:
        raise TypeError(f"unexpected keyword arguments: {sorted(kw)}")
    if not isinstance(lookahead, str) or not isinstance(max_bytes, int):
        raise TypeError("lookahead must be a str and max_bytes an int")
    if not isinstance(max_depth, int) or not isinstance(max_repeat, int):
        raise TypeError("max_depth and max_repeat must be ints")
    size = os.path.getsize(path)
    if size > max_bytes:
        raise GrammarSyntaxError(f"grammar file is {size} bytes, over max_bytes={max_bytes}", 1, 1, "")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        col = len(before) - (before.rfind(b"\n") + 1) + 1
        raise GrammarSyntaxError(f"invalid UTF-8 byte 0x{data[exc.start]:02X}", line, col, "") from None
    if is_lark:
        return parse_lark(
            text,
            "start" if start is None else start,
            ignore_at_start=ignore_at_start,
            max_bytes=max_bytes,
            max_depth=max_depth,
            max_repeat=max_repeat,
        )
    return parse_gbnf(
        text,
        "root" if start is None else start,
        lookahead=lookahead,
        max_bytes=max_bytes,
        max_depth=max_depth,
        max_repeat=max_repeat,
    )
