"""Lark front end: a grammar in Lark's syntax -> :class:`~formalgram.grammar.Grammar`.

Read: rule and terminal definitions (``name: ...``, ``NAME: ...``, rule modifiers ``?``
``!`` and ``_`` names, which only shape lark's trees), alternatives (also continued on the
next line with ``|``), ``-> alias``, groups, ``[optional]``, ``? * +``, ``~ n`` and
``~ n..m``, string literals with lark's escaping, ``"x"i``, ranges ``"a".."z"``, regular
expressions ``/.../flags`` (read by :func:`formalgram.syntax.regex.regex_tree`, the machinery
of :func:`~formalgram.parse_regex`; the flag ``i`` is read as Python's ``re`` matches
case in Unicode mode), priorities (``rule.2``, ``TERM.2``, read and ignored:
they choose between derivations, not which strings lark's Earley parser accepts),
``%import common.X`` / ``%import common (X, Y)`` / ``-> NAME`` (the names of lark's
``common.lark``, defined here as :data:`COMMON_TERMINALS`), ``%ignore``, ``%override`` and
``%extend``.  Refused with :class:`~formalgram.errors.UnsupportedConstruct`: templates,
``%declare`` (terminals a post-lexer makes), imports of other modules, the lazy
fragments ``_STRING_INNER`` / ``_STRING_ESC_INNER``, and what :func:`~formalgram.parse_regex`
refuses inside regular expressions (anchors, backreferences).

Meaning: a terminal is the regular language of its definition (a regular expression means
the strings it matches as a whole, ``re.fullmatch``); a rule is a nonterminal.  ``%ignore``
is read as XGrammar's ``Grammar.from_lark`` reads it: the ignored terminals may repeat after
every terminal in every rule body (so between any two tokens and at the end), and with
``ignore_at_start=True`` also before the first, as lark's own parser allows.
A terminal with look-around in its regular expressions (or in the terminals it uses, which
lark joins into one expression) is compiled as one automaton
(:mod:`formalgram.syntax.lookaround`): its language is what the whole expression matches
under ``re.fullmatch``, so a look-ahead sees the token's own end and a look-behind its own
start, where lark's lexer, matching against the rest of the input, lets them see the text
around the token.  ``docs/syntax.md`` says where this differs from lark's lexers (longest
match, lazy quantifiers, look-around).  Characters are code points; the grammar is over bytes (UTF-8).

The parser is iterative (nesting bounded by ``max_depth``), errors carry the line and
column, and the rules are lowered by :func:`formalgram.syntax.lower.lower_rules`, the
definition every front end shares.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Final

from formalgram.errors import GrammarSyntaxError
from formalgram.grammar import Grammar, fresh_name
from formalgram.syntax.lark_lex import (
    K_ARROW,
    K_COLON,
    K_COMMA,
    K_DIRECTIVE,
    K_DOT,
    K_DOTDOT,
    K_EOF,
    K_LBRA,
    K_LBRACE,
    K_LPAR,
    K_NL,
    K_NUMBER,
    K_OP,
    K_OR,
    K_RBRA,
    K_REGEXP,
    K_RPAR,
    K_RULE,
    K_STR,
    K_TERM,
    K_TILDE,
    KIND_TEXT,
    TERM_RE,
    Fail,
    Tok,
    tokenize,
    unescape,
)
from formalgram.syntax.lookaround import DEFAULT_MAX_STATES, compile_lookaround, has_lookaround
from formalgram.syntax.lower import automaton_rules, iter_references, lower_rules
from formalgram.syntax.nodes import (
    ALT,
    CLASS,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_REPEAT,
    REF,
    REPEAT,
    SEQ,
    STRING,
    Node,
    Source,
    group,
    repeat,
)
from formalgram.syntax.regex import case_insensitive_set, regex_tree
from formalgram.utf8 import normalize_ranges

__all__ = ["COMMON_TERMINALS", "IGNORE_RULE", "parse_lark"]

# The terminals of lark's ``common.lark``, written here as Python regular expressions with
# the language a lark token of that name can have.  Where lark's definition uses a lazy
# quantifier (ESCAPED_STRING, C_COMMENT), the language is that of the shortest match, the
# only one lark's lexers can produce: a string ends at its first unescaped quote, a comment
# at its first ``*/``.
_NUM: Final = r"[0-9]+(?:[eE][+-]?[0-9]+)?|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_FLOAT: Final = r"[0-9]+[eE][+-]?[0-9]+|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
COMMON_TERMINALS: Final[dict[str, str]] = {
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+",
    "DECIMAL": r"[0-9]+\.[0-9]*|\.[0-9]+",
    "_EXP": r"[eE][+-]?[0-9]+",
    "FLOAT": _FLOAT,
    "SIGNED_FLOAT": rf"[+-]?(?:{_FLOAT})",
    "NUMBER": _NUM,
    "SIGNED_NUMBER": rf"[+-]?(?:{_NUM})",
    "ESCAPED_STRING": r'"(?:[^"\\\n]|\\[^\n])*"',
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "LETTER": r"[A-Za-z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "WS_INLINE": r"[ \t]+",
    "WS": r"[ \t\f\r\n]+",
    "CR": r"\r",
    "LF": r"\n",
    "NEWLINE": r"(?:\r?\n)+",
    "SH_COMMENT": r"#[^\n]*",
    "CPP_COMMENT": r"//[^\n]*",
    "C_COMMENT": r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/",
    "SQL_COMMENT": r"--[^\n]*",
}
_LAZY_COMMON: Final = frozenset(("_STRING_INNER", "_STRING_ESC_INNER"))

IGNORE_RULE: Final = "__ignore"  # the rule of the ignored terminals (no lark name starts with __)
_START_RULE: Final = "__start"  # the start with ignore_at_start=True
_RE_FLAGS: Final = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": re.UNICODE}


class _Definition:
    __slots__ = ("body", "is_term", "tok")

    def __init__(self, tok: Tok, body: Node, is_term: bool) -> None:
        self.tok = tok
        self.body = body
        self.is_term = is_term


class _Frame:
    __slots__ = ("alts", "open", "seq")

    def __init__(self, open_tok: Tok, alts: list[Node], seq: Node) -> None:
        self.open = open_tok
        self.alts = alts
        self.seq = seq


class _Parser:
    def __init__(self, source: Source, toks: list[Tok], max_depth: int) -> None:
        self.source = source
        self.toks = toks
        self.i = 0
        self.max_depth = max_depth
        self.defs: dict[str, _Definition] = {}
        self.order: list[str] = []
        self.ignore: list[Node] = []  # the alternatives (SEQ nodes) of the ignored terminals
        self.anonymous: set[int] = set()  # ids of the nodes of anonymous terminals in rule bodies
        # anonymous regular expressions with look-around in rule bodies: the reference that
        # stands for each (named and compiled by parse_lark) and its tree
        self.looks: list[tuple[Node, Node]] = []

    # -- helpers ---------------------------------------------------------------------------
    def error(self, message: str, offset: int) -> GrammarSyntaxError:
        line, col = self.source.position(offset)
        return self.source.error(message, line, col)

    def unsupported(self, construct: str, message: str, offset: int) -> GrammarSyntaxError:
        line, col = self.source.position(offset)
        return self.source.unsupported(construct, message, line, col)

    def node(self, kind: int, offset: int) -> Node:
        line, col = self.source.position(offset)
        return Node(kind, line, col)

    def peek(self) -> Tok:
        return self.toks[self.i]

    def take(self) -> Tok:
        tok = self.toks[self.i]
        if tok.kind != K_EOF:
            self.i += 1
        return tok

    def expect(self, kind: int, what: str) -> Tok:
        tok = self.take()
        if tok.kind != kind:
            raise self.error(f"expected {what}, found {KIND_TEXT[tok.kind]}", tok.offset)
        return tok

    def end_of_statement(self) -> None:
        tok = self.take()
        if tok.kind != K_NL and tok.kind != K_EOF:
            raise self.error(f"expected end of line, found {KIND_TEXT[tok.kind]}", tok.offset)

    # -- statements ------------------------------------------------------------------------
    def parse(self) -> None:
        while True:
            tok = self.take()
            if tok.kind == K_EOF:
                return
            if tok.kind == K_NL:
                continue
            if tok.kind == K_RULE or tok.kind == K_TERM:
                self.definition(tok, "")
            elif tok.kind == K_DIRECTIVE:
                self.directive(tok)
            else:
                raise self.error(
                    f"expected a rule or terminal definition or a %directive, found {KIND_TEXT[tok.kind]}",
                    tok.offset,
                )

    def definition(self, name: Tok, how: str) -> None:
        is_term = name.kind == K_TERM
        tok = self.peek()
        if tok.kind == K_LBRACE:
            raise self.unsupported("template", "rule templates (name{params}) are not read", tok.offset)
        if tok.kind == K_DOT:  # a priority: read and ignored (see the module docstring)
            self.take()
            self.expect(K_NUMBER, "a priority number after '.'")
        self.expect(K_COLON, "':' after the name")
        body = self.expansions(is_term)
        self.end_of_statement()
        prev = self.defs.get(name.text)
        kind = "terminal" if is_term else "rule"
        if how == "":
            if prev is not None:
                line, _ = self.source.position(prev.tok.offset)
                raise self.error(
                    f"{kind} '{name.text}' is defined more than once (first at line {line})", name.offset
                )
            self.defs[name.text] = _Definition(name, body, is_term)
            self.order.append(name.text)
        elif prev is None:
            raise self.error(f"cannot {how} {kind} '{name.text}': it is not defined before", name.offset)
        elif how == "override":
            prev.body = body
        else:
            prev.body.children.extend(body.children)

    def directive(self, tok: Tok) -> None:
        what = tok.text
        if what == "ignore":
            body = self.expansions(True)
            self.end_of_statement()
            self.ignore.extend(body.children)
        elif what == "import":
            self.import_statement()
        elif what == "declare":
            raise self.unsupported(
                "%declare",
                "declared terminals are produced by a post-lexer (an indenter), so their text is not in the grammar",
                tok.offset,
            )
        else:  # override, extend
            name = self.take()
            if name.kind != K_RULE and name.kind != K_TERM:
                raise self.error(f"expected a definition after %{what}", name.offset)
            self.definition(name, what)

    def import_statement(self) -> None:
        first = self.peek()
        if first.kind == K_DOT:
            raise self.unsupported(
                "%import", "relative imports are not read; only lark's common module is", first.offset
            )
        path = [self.take()]
        if path[0].kind != K_RULE and path[0].kind != K_TERM:
            raise self.error("expected a module name after %import", path[0].offset)
        while self.peek().kind == K_DOT:
            self.take()
            part = self.take()
            if part.kind != K_RULE and part.kind != K_TERM:
                raise self.error("expected a name after '.'", part.offset)
            path.append(part)
        names: list[tuple[Tok, Tok]] = []  # (imported name, defined name)
        if self.peek().kind == K_LPAR:
            self.take()
            while True:
                item = self.take()
                if item.kind != K_RULE and item.kind != K_TERM:
                    raise self.error("expected a name to import", item.offset)
                names.append((item, item))
                sep = self.take()
                if sep.kind == K_RPAR:
                    break
                if sep.kind != K_COMMA:
                    raise self.error("expected ',' or ')' in the list of imported names", sep.offset)
            module = path
        else:
            if len(path) < 2:
                raise self.error("expected module.NAME after %import", path[0].offset)
            module = path[:-1]
            alias = path[-1]
            if self.peek().kind == K_ARROW:
                self.take()
                alias = self.take()
                if alias.kind != K_RULE and alias.kind != K_TERM:
                    raise self.error("expected a name after '->'", alias.offset)
            names.append((path[-1], alias))
        self.end_of_statement()
        if [p.text for p in module] != ["common"]:
            dotted = ".".join(p.text for p in module)
            raise self.unsupported(
                "%import",
                f"module '{dotted}' is not built in; only lark's common module is",
                module[0].offset,
            )
        for item, alias in names:
            if item.text in _LAZY_COMMON:
                raise self.unsupported(
                    "lazy common terminal",
                    f"common.{item.text} is a lazy fragment (/.*?/) whose text depends on what follows it",
                    item.offset,
                )
            pattern = COMMON_TERMINALS.get(item.text)
            if pattern is None:
                raise self.error(f"lark's common module has no terminal '{item.text}'", item.offset)
            if alias.kind != K_TERM:
                raise self.error(
                    f"a terminal must be imported under a terminal name, not '{alias.text}'", alias.offset
                )
            prev = self.defs.get(alias.text)
            if prev is not None:
                line, _ = self.source.position(prev.tok.offset)
                raise self.error(
                    f"terminal '{alias.text}' is defined more than once (first at line {line})", alias.offset
                )
            tree = regex_tree(pattern, 0, self.source, [item.offset] * (len(pattern) + 1))
            self.defs[alias.text] = _Definition(alias, tree, True)
            self.order.append(alias.text)

    # -- expansions ------------------------------------------------------------------------
    def expansions(self, in_term: bool) -> Node:
        """An ``ALT`` of ``SEQ`` nodes, up to (not including) the end of the statement."""
        first = self.peek()
        top = self.node(ALT, first.offset)
        alts = top.children
        seq = self.node(SEQ, first.offset)
        alts.append(seq)
        stack: list[_Frame] = []
        aliased = False  # the current alternative ended with '-> name'
        while True:
            tok = self.peek()
            kind = tok.kind
            if kind in (K_NL, K_EOF):
                if stack:
                    opened = stack[-1].open
                    close = "')'" if opened.kind == K_LPAR else "']'"
                    line, col = self.source.position(opened.offset)
                    raise self.error(
                        f"expected {close} to close the {opened.text!r} at line {line}, column {col}",
                        tok.offset,
                    )
                return top
            if aliased and kind != K_OR:
                raise self.error(
                    f"expected '|' or end of line after an alias, found {KIND_TEXT[kind]}", tok.offset
                )
            self.take()
            if kind == K_OR:
                seq = self.node(SEQ, tok.end)
                alts.append(seq)
                aliased = False
                continue
            if kind == K_ARROW:
                if in_term:
                    raise self.error("aliases ('->') are not allowed in terminals", tok.offset)
                if stack:
                    raise self.error("an alias ('->') may only end a whole alternative of a rule", tok.offset)
                self.expect(K_RULE, "a rule name after '->'")
                aliased = True
                continue
            if kind in (K_LPAR, K_LBRA):
                if len(stack) + 1 > self.max_depth:
                    raise self.error(f"groups nested deeper than {self.max_depth}", tok.offset)
                stack.append(_Frame(tok, alts, seq))
                seq = self.node(SEQ, tok.end)
                alts = [seq]
                continue
            if kind in (K_RPAR, K_RBRA):
                want = K_LPAR if kind == K_RPAR else K_LBRA
                if not stack or stack[-1].open.kind != want:
                    raise self.error(f"unexpected {KIND_TEXT[kind]}", tok.offset)
                frame = stack.pop()
                line, col = self.source.position(frame.open.offset)
                elem = group(alts, line, col)
                if kind == K_RBRA:
                    elem = repeat(elem, 0, 1, line, col)
                alts, seq = frame.alts, frame.seq
            elif kind in (K_OP, K_TILDE):
                raise self.error("misplaced operator: nothing to repeat", tok.offset)
            else:
                elem = self.value(tok, in_term)
            seq.children.append(self.postfix(elem))

    def value(self, tok: Tok, in_term: bool) -> Node:
        kind = tok.kind
        if kind == K_RULE:
            if tok.flags:
                raise self.error(
                    "rule modifiers ('?', '!') are allowed only where a rule is defined", tok.offset
                )
            if self.peek().kind == K_LBRACE:
                raise self.unsupported(
                    "template", "template instantiation (name{args}) is not read", tok.offset
                )
            if in_term:
                raise self.error(f"rules aren't allowed inside terminals ('{tok.text}')", tok.offset)
            ref = self.node(REF, tok.offset)
            ref.name = tok.text
            return ref
        if kind == K_TERM:
            ref = self.node(REF, tok.offset)
            ref.name = tok.text
            return ref
        if kind == K_STR:
            if self.peek().kind == K_DOTDOT:
                self.take()
                end = self.expect(K_STR, "a string after '..'")
                elem = self.char_range(tok, end)
            else:
                elem = self.string(tok)
        elif kind == K_REGEXP:
            elem = self.regexp(tok)
            if not in_term and has_lookaround(elem):  # its own token: compiled alone
                ref = self.node(REF, tok.offset)
                self.looks.append((ref, elem))
                elem = ref
        else:
            raise self.error(f"unexpected {KIND_TEXT[kind]}", tok.offset)
        if not in_term:
            self.anonymous.add(id(elem))
        return elem

    def postfix(self, elem: Node) -> Node:
        tok = self.peek()
        if tok.kind == K_OP:
            self.take()
            lo, hi = (0, -1) if tok.text == "*" else (1, -1) if tok.text == "+" else (0, 1)
            line, col = self.source.position(tok.offset)
            elem = repeat(elem, lo, hi, line, col)
        elif tok.kind == K_TILDE:
            self.take()
            lo_tok = self.expect(K_NUMBER, "a number after '~'")
            lo = hi = self.count(lo_tok)
            if self.peek().kind == K_DOTDOT:
                self.take()
                hi = self.count(self.expect(K_NUMBER, "a number after '..'"))
            if lo < 0 or hi < lo:
                raise self.error(f"bad repetition range {lo}..{hi}", lo_tok.offset)
            line, col = self.source.position(tok.offset)
            elem = repeat(elem, lo, hi, line, col)
        else:
            return elem
        after = self.peek()
        if after.kind == K_OP or after.kind == K_TILDE:
            raise self.error("misplaced operator: one repetition per element (use parentheses)", after.offset)
        return elem

    def count(self, tok: Tok) -> int:
        """A repetition count (at most 10 digits: more would exceed any ``max_repeat``)."""
        digits = tok.text.lstrip("+-")
        if len(digits) > 10:
            raise self.error(f"repetition count {tok.text[:20]}... is too large", tok.offset)
        return int(tok.text)

    # -- literals --------------------------------------------------------------------------
    def fail_in(self, tok: Tok) -> Fail:
        # bound with partial: a nested function would, compiled, make a cycle with its closure
        return partial(_error_in_token, self, tok.offset)

    def literal_chars(self, tok: Tok, is_string: bool) -> tuple[list[str], list[int]]:
        close = tok.text.rfind('"' if is_string else "/")
        chars, offs = unescape(tok.text, 1, close, is_string, self.fail_in(tok))
        return chars, [tok.offset + o for o in offs]

    def string(self, tok: Tok) -> Node:
        chars, offs = self.literal_chars(tok, True)
        if not chars:
            raise self.error('empty terminals are not allowed ("")', tok.offset)
        for c, o in zip(chars, offs, strict=True):
            if 0xD800 <= ord(c) <= 0xDFFF:
                raise self.error(f"surrogate U+{ord(c):04X} has no UTF-8 encoding", o)
        if tok.flags != "i":
            node = self.node(STRING, tok.offset)
            node.chars = [ord(c) for c in chars]
            return node
        seq = self.node(SEQ, tok.offset)
        for c, o in zip(chars, offs, strict=True):
            cls = self.node(CLASS, o)
            cls.ranges = case_insensitive_set(re.escape(c), 0, ((ord(c), ord(c)),))
            seq.children.append(cls)
        return group([seq], seq.line, seq.col)

    def char_range(self, start: Tok, end: Tok) -> Node:
        ends: list[int] = []
        for tok in (start, end):
            if tok.flags:
                raise self.error("a range end cannot be case-insensitive", tok.offset)
            chars, _ = unescape(tok.text, 1, len(tok.text) - 1, False, self.fail_in(tok))
            if len(chars) != 1:
                raise self.error("a range end must be a single character", tok.offset)
            ends.append(ord(chars[0]))
        if start.text == '"^"':
            raise self.unsupported(
                "range from '^'", 'lark writes "^"..x as the class [^-x], a negated class', start.offset
            )
        if ends[1] < ends[0]:
            raise self.error("bad character range: the end is below the start", start.offset)
        node = self.node(CLASS, start.offset)
        node.ranges = normalize_ranges([(ends[0], min(ends[1], 0xD7FF)), (max(ends[0], 0xE000), ends[1])])
        return node

    def regexp(self, tok: Tok) -> Node:
        close = tok.text.rfind("/")
        if "\n" in tok.text and "x" not in tok.flags:
            raise self.error(
                "a regular expression may contain a newline only with the x (verbose) flag", tok.offset
            )
        if "l" in tok.flags:
            raise self.unsupported(
                "regex flag 'l'", "the locale flag needs a bytes pattern; lark's are str", tok.end - 1
            )
        chars, offs = self.literal_chars(tok, False)
        if not chars:
            raise self.error("empty terminals are not allowed (//)", tok.offset)
        flags = 0
        for f in tok.flags:
            flags |= int(_RE_FLAGS[f])
        offs.append(tok.offset + close)
        return regex_tree(
            "".join(chars),
            flags,
            self.source,
            offs,
            max_depth=self.max_depth,
            unicode_case=True,
            lookaround=True,
        )


def _error_in_token(parser: _Parser, base: int, message: str, offset: int) -> GrammarSyntaxError:
    """:meth:`_Parser.fail_in`'s error at ``offset`` of the token at ``base``."""
    return parser.error(message, base + offset)


def _ignore_ref(at: Node) -> Node:
    """A reference to :data:`IGNORE_RULE` at the place of ``at``."""
    ref = Node(REF, at.line, at.col)
    ref.name = IGNORE_RULE
    return ref


def _is_term(node: Node, is_terminal: set[str], anonymous: set[int]) -> bool:
    """Whether ``node`` is a terminal: an anonymous one, or a reference to a named one."""
    return id(node) in anonymous or (node.kind == REF and node.name in is_terminal)


def _add_ignore(body: Node, is_terminal: set[str], anonymous: set[int]) -> None:
    """Put a reference to :data:`IGNORE_RULE` after every terminal of a rule body (in place).

    The helpers are module-level functions, not nested ones: compiled, a nested function makes
    a reference cycle with its closure, left to the cyclic collector at every call."""
    stack = [body]
    while stack:
        node = stack.pop()
        if node.kind == ALT:
            stack.extend(node.children)
        elif node.kind == SEQ:
            out: list[Node] = []
            for child in node.children:
                out.append(child)
                if _is_term(child, is_terminal, anonymous):
                    out.append(_ignore_ref(child))
                elif child.kind == ALT or child.kind == REPEAT:
                    stack.append(child)
            node.children = out
        elif node.kind == REPEAT:
            child = node.children[0]
            if _is_term(child, is_terminal, anonymous):
                seq = Node(SEQ, child.line, child.col)
                seq.children = [child, _ignore_ref(child)]
                wrapped = Node(ALT, child.line, child.col)
                wrapped.children = [seq]
                node.children[0] = wrapped
            elif child.kind == ALT or child.kind == REPEAT:
                stack.append(child)


def _check_terminal_cycles(parser: _Parser) -> None:
    """Terminals must be regular: no terminal may reach itself through terminal references."""
    defs = parser.defs
    refs: dict[str, list[str]] = {}
    for name, d in defs.items():
        if d.is_term:
            refs[name] = [r.name for r in iter_references(d.body) if r.name in defs]
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in refs:
        if state.get(root):
            continue
        state[root] = 1
        path: list[tuple[str, int]] = [(root, 0)]
        while path:
            name, k = path[-1]
            targets = refs[name]
            if k < len(targets):
                path[-1] = (name, k + 1)
                nxt = targets[k]
                s = state.get(nxt, 0)
                if s == 1:
                    tok = defs[nxt].tok
                    raise parser.error(
                        f"recursion in terminal '{nxt}' (terminals must be regular; recursion is for rules)",
                        tok.offset,
                    )
                if s == 0:
                    state[nxt] = 1
                    path.append((nxt, 0))
            else:
                state[name] = 2
                path.pop()


def _automaton_rules_of(
    source: Source,
    terminals: dict[str, Node],
    max_repeat: int,
    max_states: int,
    taken: set[str],
    counters: dict[str, int],
    extra: list[tuple[str, Node]],
    tree: Node,
    start: str,
) -> Node:
    """:func:`_lookaround_rules`'s compile of one token with look-around: the body of its
    start state ``start`` (the other states' rules appended to ``extra``)."""
    automaton = compile_lookaround(tree, source, refs=terminals, max_repeat=max_repeat, max_states=max_states)
    names = [start]
    for _ in range(1, automaton.num_states):
        names.append(fresh_name(f"{start}__state", taken, counters))
        taken.add(names[-1])
    state_rules = automaton_rules(automaton, names, tree.line, tree.col)
    extra.extend(state_rules[1:])
    return state_rules[0][1]


def _lookaround_rules(
    parser: _Parser,
    rules: list[tuple[str, Node]],
    taken: set[str],
    counters: dict[str, int],
    max_repeat: int,
    max_states: int,
) -> list[tuple[str, Node]]:
    """Compile every token with look-around to its automaton (in place); the added rules.

    A terminal whose definition holds look-around, itself or through the terminals it uses
    (which lark inlines into one regular expression), becomes the start state of its
    automaton; so do the anonymous regular expressions of rule bodies and the alternatives
    of ``%ignore``.  Look-around sees the token only (lark's lexer may look past it).
    """
    defs = parser.defs
    terminals = {name: d.body for name, d in defs.items() if d.is_term}
    looking = {name for name, body in terminals.items() if has_lookaround(body)}
    uses = {
        name: [r.name for r in iter_references(body) if r.name in terminals]
        for name, body in terminals.items()
    }
    changed = bool(looking)
    while changed:  # through the terminals used (no cycle: checked before)
        changed = False
        for name, used in uses.items():
            if name not in looking and any(u in looking for u in used):
                looking.add(name)
                changed = True
    extra: list[tuple[str, Node]] = []
    # a partial, not a nested function (compiled, one would make a cycle with its closure)
    compile_token = partial(
        _automaton_rules_of, parser.source, terminals, max_repeat, max_states, taken, counters, extra
    )

    compiled: dict[str, Node] = {}
    for name in parser.order:
        if name in looking:
            compiled[name] = compile_token(terminals[name], name)
    for i, (name, _) in enumerate(rules):
        body = compiled.get(name)
        if body is not None:
            rules[i] = (name, body)
    for ref, tree in parser.looks:
        extra.append((ref.name, compile_token(tree, ref.name)))
    for alt in parser.ignore:
        kids = alt.children
        alone = len(kids) == 1 and kids[0].kind == REF  # just a terminal, compiled above
        if has_lookaround(alt) or (not alone and any(r.name in looking for r in iter_references(alt))):
            ref = Node(REF, alt.line, alt.col)
            ref.name = fresh_name("__LOOK", taken, counters)
            taken.add(ref.name)
            extra.append((ref.name, compile_token(alt, ref.name)))
            alt.children = [ref]
    return extra


def parse_lark(
    text: str,
    start: str = "start",
    *,
    ignore_at_start: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_repeat: int = DEFAULT_MAX_REPEAT,
    max_states: int = DEFAULT_MAX_STATES,
) -> Grammar:
    """The byte-level grammar of a Lark grammar's language (see the module docstring).

    Parameters
    ----------
    text : str
        The grammar in Lark's syntax.
    start : str
        The start rule (a rule name, lower case).
    ignore_at_start : bool, keyword-only
        False (default): ``%ignore``-d terminals may follow every terminal of every rule,
        as XGrammar's ``Grammar.from_lark`` reads them.  True: also before the first
        terminal (and alone, when the start rule derives the empty string), as lark's own
        parser accepts; the start is then a new rule ``__start``.
    max_bytes : int
        Refuse texts longer than this many UTF-8 bytes.
    max_depth : int
        Refuse groups (``( )``, ``[ ]``, and groups in regular expressions) nested deeper
        than this (any value works: no Python recursion).
    max_repeat : int
        Budget for the symbols created by ``~ n..m`` and ``{m,n}`` expansion, in total.
    max_states : int
        The most states of the automaton of each terminal with look-around
        (:func:`formalgram.syntax.lookaround.compile_lookaround`).

    Returns
    -------
    Grammar
        One nonterminal per rule and per terminal (named as in the text), the ignored
        terminals' rule :data:`IGNORE_RULE` when there is an ``%ignore``, and helpers.

    Raises
    ------
    GrammarSyntaxError
        With the 1-based line and column: malformed text, undefined or duplicate names,
        recursive terminals, rules inside terminals, bad escapes, and errors in regular
        expressions (at their position in the text).
    UnsupportedConstruct
        For templates, ``%declare``, imports other than lark's common module, and regular
        expression constructs :func:`~formalgram.parse_regex` refuses (anchors,
        backreferences).
    GrammarTooLarge
        When a terminal with look-around needs more than ``max_states`` states.

    Notes
    -----
    Linear in the text plus the expanded size (``max_repeat`` bounds it).  The first
    ``"..."i`` literal with a new character scans the Unicode code points once for it
    (a few milliseconds; cached per process).

    Examples
    --------
    >>> g = parse_lark('start: NAME ("," NAME)*\\nNAME: /[a-z]+/\\n%ignore " "')
    >>> g.accepts(b"ab, cd ,e"), g.accepts(b"ab,"), g.accepts(b" ab")
    (True, False, False)
    >>> parse_lark('start: NAME ("," NAME)*\\nNAME: /[a-z]+/\\n%ignore " "', ignore_at_start=True).accepts(b" ab")
    True
    >>> g = parse_lark('start: OP+\\nOP: /[+*]|[?](?![a-z])/')  # the look-ahead sees the token
    >>> g.accepts(b"?+"), g.accepts(b"a")
    (True, False)
    >>> parse_lark('start: x{"a"}') # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    formalgram.errors.UnsupportedConstruct: line 1, column 8: unsupported construct 'template': ...
    """
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise GrammarSyntaxError(f"grammar text is larger than max_bytes={max_bytes} bytes", 1, 1, "")
    if text.startswith("\ufeff"):
        text = text[1:]
    source = Source(text)
    parser = _Parser(source, tokenize(source), max_depth)
    parser.parse()
    defs = parser.defs
    taken = {*defs, IGNORE_RULE, _START_RULE}
    counters: dict[str, int] = {}
    for ref, _ in parser.looks:
        ref.name = fresh_name("__LOOK", taken, counters)
        taken.add(ref.name)
    generated = {ref.name for ref, _ in parser.looks}
    for name in parser.order:
        for ref in iter_references(defs[name].body):
            if ref.name not in defs and ref.name not in generated:
                kind = "terminal" if TERM_RE.fullmatch(ref.name) else "rule"
                raise source.error(f"{kind} '{ref.name}' is used but not defined", ref.line, ref.col)
    for alt in parser.ignore:
        for ref in iter_references(alt):
            if ref.name not in defs:
                raise source.error(f"terminal '{ref.name}' is used but not defined", ref.line, ref.col)
    _check_terminal_cycles(parser)
    start_def = defs.get(start)
    if start_def is None or start_def.is_term:
        raise source.error(f"start rule '{start}' is not defined", 1, 1)
    rules = [(name, defs[name].body) for name in parser.order]
    extra = _lookaround_rules(parser, rules, taken, counters, max_repeat, max_states)
    if parser.ignore:
        terminals = {name for name, d in defs.items() if d.is_term}
        for name in parser.order:
            if not defs[name].is_term:
                _add_ignore(defs[name].body, terminals, parser.anonymous)
        items = Node(ALT, 1, 1)
        items.children = parser.ignore
        body = Node(ALT, 1, 1)
        seq = Node(SEQ, 1, 1)
        seq.children.append(repeat(items, 0, -1, 1, 1))
        body.children.append(seq)
        rules.append((IGNORE_RULE, body))
        if ignore_at_start:
            first = Node(SEQ, 1, 1)
            for name in (IGNORE_RULE, start):
                ref = Node(REF, 1, 1)
                ref.name = name
                first.children.append(ref)
            wrapper = Node(ALT, 1, 1)
            wrapper.children.append(first)
            rules.append((_START_RULE, wrapper))
            start = _START_RULE
    return lower_rules(rules + extra, start, source, max_repeat=max_repeat)
