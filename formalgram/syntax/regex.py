"""Regular-expression front end: a pattern in Python's ``re`` syntax -> :class:`~formalgram.grammar.Grammar`.

The grammar accepts exactly the UTF-8 encodings of the strings the pattern matches as a
whole: ``{s.encode() : re.fullmatch(pattern, s, flags)}``.  Strings are Unicode scalar
values, so surrogates ``U+D800..U+DFFF`` (which have no UTF-8 encoding) are matched by
nothing, not even by ``.`` or a negated class.

Supported: literals and escapes (``\\n \\t \\xHH \\uHHHH \\UHHHHHHHH \\N{NAME}``, octal,
escaped punctuation), classes with ranges and negation, ``\\d \\w \\s \\D \\W \\S`` (inside
classes too), ``.``, the quantifiers ``? * + {m} {m,} {,n} {m,n}`` and their lazy forms
(same language), groups ``( )``, ``(?: )``, ``(?P<name> )``, comments ``(?#...)``,
alternation, and the flags ``re.ASCII`` ``(?a)``, ``re.DOTALL`` ``(?s)``, ``re.VERBOSE``
``(?x)``, ``re.MULTILINE`` ``(?m)`` (which only changes anchors), ``re.UNICODE`` ``(?u)``,
and ``re.IGNORECASE`` ``(?i)`` together with ASCII matching, globally or scoped
(``(?i: )``, ``(?-i: )``), and look-around: look-ahead ``(?=...)`` ``(?!...)`` and
look-behind ``(?<=...)`` ``(?<!...)``, nested, repeated and alternated freely, compiled
exactly (a look-ahead sees the rest of the whole string, a look-behind everything before
its position) by :mod:`formalgram.syntax.lookaround` into a deterministic byte automaton
of at most ``max_states`` states, written as one rule per state
(:func:`formalgram.syntax.lower.automaton_rules`).

Refused with :class:`~formalgram.errors.UnsupportedConstruct` and the pattern's line and
column: anchors (``^ $ \\A \\Z``), word boundaries (``\\b \\B``), backreferences, conditionals, atomic groups and possessive quantifiers (which
change the language), case-insensitive matching in Unicode mode on letters or non-ASCII
characters (Python's Unicode case folding has special cases no grammar here reproduces
exactly; add ``re.ASCII``, ``(?a)`` or ``ascii=True``), and the ``(?t)`` flag.  Patterns
that Python refuses raise :class:`~formalgram.errors.GrammarSyntaxError` with a position
(among them a look-behind whose body has no fixed width).

The pattern is parsed into the shared syntax tree (:mod:`formalgram.syntax.nodes`) and
lowered by :func:`formalgram.syntax.lower.lower_rules`, the definition the GBNF front end
uses, into one start rule ``root`` and its helpers; a pattern with look-around is first
compiled to its automaton, whose start state is ``root``.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from formalgram.errors import GrammarSyntaxError, UnsupportedConstruct
from formalgram.grammar import Grammar, fresh_name
from formalgram.syntax.lookaround import DEFAULT_MAX_STATES, compile_lookaround, fixed_width
from formalgram.syntax.lower import automaton_rules, lower_rules
from formalgram.syntax.nodes import (
    ALT,
    CLASS,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_REPEAT,
    LOOK,
    SEQ,
    STRING,
    Node,
    Source,
    group,
    repeat,
)
from formalgram.utf8 import MAX_CODE_POINT, complement_ranges, normalize_ranges

# the re flags (their values, as ints)
_I: Final = int(re.IGNORECASE)
_L: Final = int(re.LOCALE)
_M: Final = int(re.MULTILINE)
_S: Final = int(re.DOTALL)
_U: Final = int(re.UNICODE)
_X: Final = int(re.VERBOSE)
_A: Final = int(re.ASCII)
_SUPPORTED_FLAGS: Final = _I | _M | _S | _U | _X | _A
_TYPE_FLAGS: Final = _A | _L | _U
_INLINE_FLAGS: Final = {"i": _I, "L": _L, "m": _M, "s": _S, "x": _X, "a": _A, "u": _U, "t": 1}

_MAXREPEAT: Final = 4294967295  # Python's re refuses counts from here on
_WHITESPACE: Final = frozenset(" \t\n\r\v\f")
_DIGITS: Final = frozenset("0123456789")
_OCTAL: Final = frozenset("01234567")
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_ASCII_LETTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SIMPLE_ESCAPES: Final = {"a": 0x07, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B, "\\": 0x5C}
_SURROGATES: Final = ((0xD800, 0xDFFF),)

# ASCII readings of the categories (re.ASCII)
_ASCII_CATEGORIES: Final[dict[str, tuple[tuple[int, int], ...]]] = {
    "d": ((0x30, 0x39),),
    "s": ((0x09, 0x0D), (0x20, 0x20)),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
}
_unicode_categories: dict[str, tuple[tuple[int, int], ...]] = {}


def _unicode_category(name: str) -> tuple[tuple[int, int], ...]:
    """Python's Unicode reading of ``\\d`` / ``\\s`` / ``\\w`` for the running interpreter.

    ``\\d`` is :meth:`str.isdecimal`, ``\\s`` :meth:`str.isspace`, ``\\w``
    :meth:`str.isalnum` or ``_`` (what ``re`` tests for str patterns).  Computed once per
    process from all code points (a fraction of a second), then cached.
    """
    cached = _unicode_categories.get(name)
    if cached is not None:
        return cached
    everything = "".join(map(chr, range(MAX_CODE_POINT + 1)))
    if name == "d":
        members = list(map(ord, filter(str.isdecimal, everything)))
    elif name == "s":
        members = list(map(ord, filter(str.isspace, everything)))
    else:
        members = [*map(ord, filter(str.isalnum, everything)), ord("_")]
    members.sort()
    ranges: list[tuple[int, int]] = []
    for cp in members:
        if ranges and ranges[-1][1] + 1 == cp:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    result = normalize_ranges(ranges)
    _unicode_categories[name] = result
    return result


def _category(letter: str, flags: int) -> tuple[tuple[int, int], ...]:
    """The code points of ``\\d \\D \\s \\S \\w \\W`` under ``flags`` (surrogates included)."""
    low = letter.lower()
    base = _ASCII_CATEGORIES[low] if flags & _A else _unicode_category(low)
    return base if letter == low else complement_ranges(base)


def _fold_ascii(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` with the other case of every ASCII letter in them (re.ASCII | re.IGNORECASE)."""
    out = list(ranges)
    for lo, hi in ranges:
        for first, last, shift in ((0x41, 0x5A, 0x20), (0x61, 0x7A, -0x20)):
            a, b = max(lo, first), min(hi, last)
            if a <= b:
                out.append((a + shift, b + shift))
    return out


def _scalar(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Normalized ``ranges`` without the surrogates (strings with one have no UTF-8 encoding)."""
    out: list[tuple[int, int]] = []
    for lo, hi in normalize_ranges(ranges):
        if hi < 0xD800 or lo > 0xDFFF:
            out.append((lo, hi))
            continue
        if lo < 0xD800:
            out.append((lo, 0xD7FF))
        if hi > 0xDFFF:
            out.append((0xE000, hi))
    return tuple(out)


_cased: list[str] = []  # the characters case matters for, as one string (built on first use)
_cased_ranges: list[tuple[tuple[int, int], ...]] = []
_case_memo: dict[tuple[str, int], tuple[tuple[int, int], ...]] = {}


def case_insensitive_set(
    item: str, flags: int, plain: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    """The characters that the one-character pattern ``item`` matches under ``re.IGNORECASE``.

    Parameters
    ----------
    item : str
        One literal, escape or class in ``re`` syntax (``"k"``, ``"\\x41"``, ``"[a-f]"``).
    flags : int
        The other flags in force (``re.ASCII``, ``re.VERBOSE``, ...).
    plain : tuple of (int, int)
        What ``item`` matches without ``re.IGNORECASE`` (normalized ranges).

    Returns
    -------
    tuple of (int, int)
        Normalized code-point ranges, without surrogates.

    Notes
    -----
    Case only matters for the characters that have another case (``str.lower``,
    ``str.upper`` or ``str.casefold`` changes them, about 2 900 of them): ``item`` is run by
    ``re`` itself over those (well under a millisecond), and every other character is
    matched as without the flag.  So Python's Unicode case matching (the Kelvin sign for
    ``k``, ``\u017f`` for ``s``, dotted and dotless ``i``) is reproduced exactly.  Cached
    per item.

    Examples
    --------
    >>> [hex(lo) for lo, _ in case_insensitive_set("k", 0, ((0x6B, 0x6B),))]
    ['0x4b', '0x6b', '0x212a']
    """
    key = (item, flags)
    cached = _case_memo.get(key)
    if cached is not None:
        return cached
    if not _cased:
        members: list[int] = []
        for cp in range(MAX_CODE_POINT + 1):
            c = chr(cp)
            if not 0xD800 <= cp <= 0xDFFF and (c.lower() != c or c.upper() != c or c.casefold() != c):
                members.append(cp)
        _cased.append("".join(map(chr, members)))
        _cased_ranges.append(normalize_ranges((cp, cp) for cp in members))
    pattern = re.compile("(?:" + item + ")", (flags & (_A | _X | _S | _U)) | _I)
    found = [(ord(m.group()), ord(m.group())) for m in pattern.finditer(_cased[0])]
    uncased = complement_ranges([*complement_ranges(plain), *_cased_ranges[0]])
    result = _scalar([*uncased, *found])
    _case_memo[key] = result
    return result


class _Group:
    """An open group: the enclosing alternatives and the state to restore at ``)``."""

    __slots__ = ("alts", "flags", "look", "open_pos", "seq", "verbose")

    def __init__(
        self, alts: list[Node], seq: Node, open_pos: int, flags: int, verbose: bool, look: str
    ) -> None:
        self.alts = alts
        self.seq = seq
        self.open_pos = open_pos
        self.flags = flags
        self.verbose = verbose
        self.look = look  # "=", "!", "<=", "<!" for a look-around assertion, "" otherwise


class _RegexParser:
    """Pattern text -> an ``ALT`` tree, with an explicit stack of open groups."""

    def __init__(
        self,
        text: str,
        flags: int,
        max_depth: int,
        source: Source | None = None,
        offsets: list[int] | None = None,
        unicode_case: bool = False,
        lookaround: bool = True,
    ) -> None:
        self.text = text
        self.n = len(text)
        # positions are reported in ``source`` (the pattern itself by default); ``offsets[i]``
        # is the offset in ``source.text`` of the pattern's character ``i`` (and of its end)
        self.source = Source(text) if source is None else source
        self.offsets = offsets
        self.unicode_case = unicode_case  # read Unicode case-insensitive items as re does
        self.pos = 0
        self.flags = flags  # the flags in force at this point of the pattern
        self.global_flags = flags
        self.max_depth = max_depth
        self.group_names: set[str] = set()
        self.lookaround = lookaround  # read look-around into LOOK nodes (else refuse it)
        self.look = ""  # the assertion open_group just read
        self.has_look = False  # the tree holds a LOOK node

    # -- errors ---------------------------------------------------------------------------
    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) in ``self.source`` of the pattern's offset ``offset``."""
        offsets = self.offsets
        if offsets is not None:
            offset = offsets[min(offset, len(offsets) - 1)]
        return self.source.position(offset)

    def error(self, message: str, offset: int) -> GrammarSyntaxError:
        line, col = self.position(offset)
        return self.source.error(message, line, col)

    def unsupported(self, construct: str, message: str, offset: int) -> UnsupportedConstruct:
        line, col = self.position(offset)
        return self.source.unsupported(construct, message, line, col)

    def node(self, kind: int, offset: int) -> Node:
        line, col = self.position(offset)
        return Node(kind, line, col)

    # -- the pattern ----------------------------------------------------------------------
    def parse(self) -> Node:
        text = self.text
        n = self.n
        top = self.node(ALT, 0)
        alts = top.children
        seq = self.node(SEQ, 0)
        alts.append(seq)
        repeated = False  # the last item of seq is a quantified item
        verbose = bool(self.flags & _X)
        groups: list[_Group] = []
        while True:
            if self.pos >= n:
                if groups:
                    raise self.error("missing ), unterminated subpattern", groups[-1].open_pos)
                return top
            start = self.pos
            c = text[start]
            if c == "|":
                self.pos += 1
                seq = self.node(SEQ, self.pos)
                alts.append(seq)
                repeated = False
                if not groups:
                    verbose = bool(self.global_flags & _X)
                continue
            if c == ")":
                if not groups:
                    raise self.error("unbalanced parenthesis", start)
                self.pos += 1
                closed = groups.pop()
                first = alts[0]
                node = self.assertion(closed, alts) if closed.look else group(alts, first.line, first.col)
                alts, seq, self.flags, verbose = closed.alts, closed.seq, closed.flags, closed.verbose
                seq.children.append(node)
                repeated = False
                continue
            self.pos += 1
            if verbose and c in _WHITESPACE:
                continue
            if verbose and c == "#":
                self.skip_to("\n")  # a comment ends at an unescaped newline
                continue
            if c in "*+?{":
                bounds = self.quantifier(c, start)
                if bounds is None:  # a '{' that does not start a repetition is a literal
                    seq.children.append(self.literal(ord(c), start))
                    repeated = False
                    continue
                if not seq.children:
                    raise self.error("nothing to repeat", start)
                if repeated:
                    raise self.error("multiple repeat", start)
                if self.pos < n and text[self.pos] == "?":
                    self.pos += 1  # lazy: the same strings
                elif self.pos < n and text[self.pos] == "+":
                    raise self.unsupported(
                        "possessive quantifier",
                        "a possessive repetition never gives back what it matched, which changes "
                        "the language (a*+a matches nothing)",
                        start,
                    )
                line, col = self.position(start)
                seq.children.append(repeat(seq.children.pop(), bounds[0], bounds[1], line, col))
                repeated = True
                continue
            if c == "(":
                opened = self.open_group(start, not groups and len(alts) == 1 and not seq.children)
                if opened < 0:  # a comment or global flags: no item
                    if opened == -2:
                        verbose = bool(self.global_flags & _X)
                    continue
                if len(groups) + 1 > self.max_depth:
                    raise self.error(f"groups nested deeper than {self.max_depth}", start)
                groups.append(_Group(alts, seq, start, self.flags, verbose, self.look))
                self.look = ""
                if opened > 0:  # scoped flags: (?flags-flags: ...)
                    add, remove = opened >> 16, opened & 0xFFFF
                    if add & _TYPE_FLAGS:
                        self.flags &= ~_TYPE_FLAGS
                    self.flags = (self.flags | add) & ~remove
                    verbose = (verbose or bool(add & _X)) and not remove & _X
                    self.check_flags(start)
                seq = self.node(SEQ, self.pos)
                alts = [seq]
                repeated = False
                continue
            if c == "\\":
                node = self.escape(start)
            elif c == "[":
                node = self.char_class(start)
            elif c == ".":
                node = self.node(CLASS, start)
                every = ((0, MAX_CODE_POINT),) if self.flags & _S else ((0, 0x09), (0x0B, MAX_CODE_POINT))
                node.ranges = _scalar(every)
            elif c == "^" or c == "$":
                raise self.unsupported(
                    "anchor",
                    f"'{c}' asserts a position; the grammar is matched against the whole string "
                    "(re.fullmatch), so remove it",
                    start,
                )
            else:
                node = self.literal(ord(c), start)
            seq.children.append(node)
            repeated = False

    # -- groups and flags -----------------------------------------------------------------
    def assertion(self, closed: _Group, alts: list[Node]) -> Node:
        """The ``LOOK`` node of the look-around group ``closed`` (its alternatives ``alts``)."""
        line, col = self.position(closed.open_pos)
        body = Node(ALT, alts[0].line, alts[0].col)
        body.children = alts
        if closed.look[0] == "<" and fixed_width(body) < 0:
            raise self.error("look-behind requires fixed-width pattern", closed.open_pos)
        node = Node(LOOK, line, col)
        node.name = closed.look
        node.children.append(body)
        self.has_look = True
        return node

    def open_group(self, start: int, first: bool) -> int:
        """Read what follows ``(``: -1 for a comment, -2 for global flags, 0 for a group,
        ``add << 16 | remove`` for scoped flags."""
        text = self.text
        n = self.n
        if self.pos >= n or text[self.pos] != "?":
            return 0  # a capturing group
        self.pos += 1
        if self.pos >= n:
            raise self.error("unexpected end of pattern", start)
        ch = text[self.pos]
        self.pos += 1
        if ch == ":":
            return 0
        if ch == "P":
            if self.pos < n and text[self.pos] == "<":
                self.pos += 1
                name = self.read_until(">", "group name", start)
                if not name.isidentifier():
                    raise self.error(f"bad character in group name {name!r}", start)
                if name in self.group_names:
                    raise self.error(f"redefinition of group name {name!r}", start)
                self.group_names.add(name)
                return 0
            if self.pos < n and text[self.pos] == "=":
                raise self.unsupported(
                    "backreference", "(?P=name) matches what a group matched; no grammar can", start
                )
            raise self.error("unknown extension ?P", start)
        if ch == "#":
            if not self.skip_to(")"):
                raise self.error("missing ), unterminated comment", start)
            return -1
        if ch == "=" or ch == "!":
            if not self.lookaround:
                raise self.unsupported("look-ahead", "look-ahead assertions are not read here", start)
            self.look = ch
            return 0
        if ch == "<":
            if self.pos < n and text[self.pos] in "=!":
                if not self.lookaround:
                    raise self.unsupported("look-behind", "look-behind assertions are not read here", start)
                self.look = "<" + text[self.pos]
                self.pos += 1
                return 0
            raise self.error("unknown extension ?<", start)
        if ch == "(":
            raise self.unsupported("conditional", "(?(group)yes|no) depends on what a group matched", start)
        if ch == ">":
            raise self.unsupported(
                "atomic group",
                "an atomic group never gives back what it matched, which changes the language",
                start,
            )
        if ch in _INLINE_FLAGS or ch == "-":
            return self.inline_flags(ch, start, first)
        raise self.error(f"unknown extension ?{ch}", start)

    def inline_flags(self, ch: str, start: int, first: bool) -> int:
        text = self.text
        n = self.n
        add = 0
        remove = 0
        while ch != "-":
            flag = _INLINE_FLAGS[ch]
            if ch == "L":
                raise self.error("bad inline flags: cannot use 'L' flag with a str pattern", start)
            if ch == "t":
                raise self.unsupported("template flag", "(?t) is not supported", start)
            add |= flag
            if flag & _TYPE_FLAGS and add & _TYPE_FLAGS != flag:
                raise self.error("bad inline flags: flags 'a', 'u' and 'L' are incompatible", start)
            if self.pos >= n:
                raise self.error("missing -, : or )", start)
            ch = text[self.pos]
            self.pos += 1
            if ch in ")-:":
                break
            if ch not in _INLINE_FLAGS:
                raise self.error("unknown flag" if ch.isalpha() else "missing -, : or )", start)
        if ch == ")":
            if not first:
                raise self.error("global flags not at the start of the expression", start)
            self.global_flags |= add
            self.flags |= add
            self.check_flags(start)
            return -2
        if ch == "-":
            if self.pos >= n:
                raise self.error("missing flag", start)
            ch = text[self.pos]
            self.pos += 1
            if ch not in _INLINE_FLAGS:
                raise self.error("unknown flag" if ch.isalpha() else "missing flag", start)
            while True:
                flag = _INLINE_FLAGS[ch]
                if flag & _TYPE_FLAGS:
                    raise self.error("bad inline flags: cannot turn off flags 'a', 'u' and 'L'", start)
                if ch == "t":
                    raise self.unsupported("template flag", "(?t) is not supported", start)
                remove |= flag
                if self.pos >= n:
                    raise self.error("missing :", start)
                ch = text[self.pos]
                self.pos += 1
                if ch == ":":
                    break
                if ch not in _INLINE_FLAGS:
                    raise self.error("unknown flag" if ch.isalpha() else "missing :", start)
        if add & remove:
            raise self.error("bad inline flags: flag turned on and off", start)
        return add << 16 | remove

    def skip_to(self, stop: str) -> bool:
        """Move past the next unescaped ``stop`` (True), or to the end (False).

        As in ``re``, a backslash and the character after it are one unit, and a pattern may
        not end with a backslash.
        """
        text = self.text
        while self.pos < self.n:
            c = text[self.pos]
            if c == "\\":
                if self.pos + 1 >= self.n:
                    raise self.error("bad escape (end of pattern)", self.pos)
                self.pos += 2
                continue
            self.pos += 1
            if c == stop:
                return True
        return False

    def check_flags(self, offset: int) -> None:
        if self.flags & _A and self.flags & _U:
            raise self.error("ASCII and UNICODE flags are incompatible", offset)

    def read_until(self, terminator: str, what: str, start: int) -> str:
        end = self.text.find(terminator, self.pos)
        if end < 0:
            raise self.error(f"missing {terminator}, unterminated name", start)
        if end == self.pos:
            raise self.error(f"missing {what}", start)
        name = self.text[self.pos : end]
        self.pos = end + 1
        return name

    # -- quantifiers ----------------------------------------------------------------------
    def quantifier(self, c: str, start: int) -> tuple[int, int] | None:
        """(lo, hi) of the quantifier at ``start`` (hi -1: unbounded); None for a literal '{'."""
        if c == "?":
            return (0, 1)
        if c == "*":
            return (0, -1)
        if c == "+":
            return (1, -1)
        text = self.text
        n = self.n
        here = self.pos
        if here < n and text[here] == "}":
            return None
        p = here
        while p < n and text[p] in _DIGITS:
            p += 1
        lo_text = text[here:p]
        hi_text = lo_text
        if p < n and text[p] == ",":
            q = p + 1
            p = q
            while p < n and text[p] in _DIGITS:
                p += 1
            hi_text = text[q:p]
        if p >= n or text[p] != "}":
            return None
        self.pos = p + 1
        lo = self.count(lo_text, start) if lo_text else 0
        hi = self.count(hi_text, start) if hi_text else -1
        if 0 <= hi < lo:
            raise self.error("min repeat greater than max repeat", start)
        return (lo, hi)

    def count(self, digits: str, start: int) -> int:
        value = int(digits) if len(digits) <= 10 else _MAXREPEAT
        if value >= _MAXREPEAT:
            raise self.error("the repetition number is too large", start)
        return value

    # -- characters -----------------------------------------------------------------------
    def literal(self, cp: int, offset: int) -> Node:
        """One character, as a STRING, or a CLASS when case folding or a surrogate applies."""
        if self.flags & _I or 0xD800 <= cp <= 0xDFFF:
            return self.char_set([(cp, cp)], [], False, offset, False)
        node = self.node(STRING, offset)
        node.chars = [cp]
        return node

    def char_set(
        self,
        items: list[tuple[int, int]],
        categories: list[tuple[tuple[int, int], ...]],
        negated: bool,
        offset: int,
        in_class: bool,
    ) -> Node:
        """A CLASS node: explicit ``items`` and ``categories`` under the flags in force.

        ``in_class``: the items come from ``[...]`` (where re treats members beyond U+FFFF
        differently under IGNORECASE) rather than from one literal or escape.
        """
        if self.flags & _I:
            if self.flags & _A:
                for _, hi in items:
                    if in_class and hi >= 0x10000:
                        # re compares a class member past U+FFFF case-insensitively with
                        # Unicode's upper case even in ASCII mode
                        raise self.unsupported(
                            "case-insensitive class beyond U+FFFF",
                            "re.IGNORECASE folds class members past U+FFFF with Unicode's case "
                            "mapping even under re.ASCII; write them outside the class or drop the flag",
                            offset,
                        )
                items = _fold_ascii(items)
            elif self.unicode_case:
                plain = list(items)
                for cat in categories:
                    plain.extend(cat)
                node = self.node(CLASS, offset)
                node.ranges = case_insensitive_set(
                    self.text[offset : self.pos],
                    self.flags,
                    _scalar(complement_ranges(plain) if negated else plain),
                )
                return node
            elif any(
                hi >= 0x80 or any(c in _ASCII_LETTERS for c in map(chr, range(lo, hi + 1)))
                for lo, hi in items
            ):
                raise self.unsupported(
                    "case-insensitive matching (Unicode)",
                    "Python folds letters and non-ASCII characters with Unicode special cases; "
                    "add re.ASCII, (?a) or ascii=True for ASCII case folding, or spell the cases out",
                    offset,
                )
        ranges = list(items)
        for cat in categories:
            ranges.extend(cat)
        node = self.node(CLASS, offset)
        node.ranges = _scalar(complement_ranges(ranges) if negated else ranges)
        return node

    def escape(self, start: int) -> Node:
        """The element of the escape at ``start`` (outside a class)."""
        text = self.text
        if self.pos >= self.n:
            raise self.error("bad escape (end of pattern)", start)
        e = text[self.pos]
        self.pos += 1
        if e == "A" or e == "Z":
            raise self.unsupported(
                "anchor", f"\\{e} asserts a position; the grammar is matched against the whole string", start
            )
        if e == "b" or e == "B":
            raise self.unsupported("word boundary", f"\\{e} depends on the characters around it", start)
        if e in "dDsSwW":
            return self.char_set([], [_category(e, self.flags)], False, start, False)
        if e in "123456789":
            # an octal escape of three digits, or a group reference
            if self.pos < self.n and text[self.pos] in _DIGITS:
                d2 = text[self.pos]
                if e in _OCTAL and d2 in _OCTAL and self.pos + 1 < self.n and text[self.pos + 1] in _OCTAL:
                    value = int(text[self.pos - 1 : self.pos + 2], 8)
                    self.pos += 2
                    if value > 0o377:
                        raise self.error(
                            f"octal escape value {text[start : self.pos]} outside of range 0-0o377", start
                        )
                    return self.literal(value, start)
            raise self.unsupported("backreference", "a backreference matches what a group matched", start)
        if e == "0":
            p = self.pos
            while p < self.n and p < self.pos + 2 and text[p] in _OCTAL:
                p += 1
            value = int(text[self.pos - 1 : p], 8)
            self.pos = p
            return self.literal(value, start)
        return self.literal(self.escape_value(e, start), start)

    def escape_value(self, e: str, start: int) -> int:
        """The code point of the escape ``\\e`` (self.pos after ``e``) shared by both contexts."""
        simple = _SIMPLE_ESCAPES.get(e, -1)
        if simple >= 0:
            return simple
        text = self.text
        if e == "x" or e == "u" or e == "U":
            width = 2 if e == "x" else 4 if e == "u" else 8
            p = self.pos
            while p < self.n and p < self.pos + width and text[p] in _HEX:
                p += 1
            if p - self.pos != width:
                raise self.error(f"incomplete escape \\{e}{text[self.pos : p]}", start)
            value = int(text[self.pos : p], 16)
            self.pos = p
            if value > MAX_CODE_POINT:
                raise self.error(f"bad escape \\{e}{text[p - width : p]}", start)
            return value
        if e == "N":
            if self.pos >= self.n or text[self.pos] != "{":
                raise self.error("missing {", start)
            self.pos += 1
            name = self.read_until("}", "character name", start)
            try:
                found = unicodedata.lookup(name)
            except (KeyError, ValueError):  # unknown name; a lone surrogate in it (UnicodeError)
                found = ""
            if len(found) != 1:
                raise self.error(f"undefined character name {name!r}", start)
            return ord(found)
        if e in _ASCII_LETTERS or e in _DIGITS:
            raise self.error(f"bad escape \\{e}", start)
        return ord(e)

    def char_class(self, start: int) -> Node:
        """The class opened by the ``[`` at ``start``."""
        text = self.text
        n = self.n
        negated = False
        if self.pos < n and text[self.pos] == "^":
            negated = True
            self.pos += 1
        items: list[tuple[int, int]] = []
        categories: list[tuple[tuple[int, int], ...]] = []
        while True:
            if self.pos >= n:
                raise self.error("unterminated character set", start)
            item_pos = self.pos
            c = text[self.pos]
            self.pos += 1
            if c == "]" and (items or categories):
                break
            lo, category = self.class_item(c, item_pos)
            if self.pos < n and text[self.pos] == "-":
                self.pos += 1
                if self.pos >= n:
                    raise self.error("unterminated character set", start)
                c2 = text[self.pos]
                self.pos += 1
                if c2 == "]":
                    if category:
                        categories.append(category)
                    else:
                        items.append((lo, lo))
                    items.append((0x2D, 0x2D))
                    break
                hi, category2 = self.class_item(c2, self.pos - 1)
                if category or category2:
                    raise self.error("bad character range", item_pos)
                if hi < lo:
                    raise self.error("bad character range", item_pos)
                items.append((lo, hi))
            elif category:
                categories.append(category)
            else:
                items.append((lo, lo))
        return self.char_set(items, categories, negated, start, True)

    def class_item(self, c: str, offset: int) -> tuple[int, tuple[tuple[int, int], ...]]:
        """One class member: (code point, ()) or (-1, category ranges)."""
        if c != "\\":
            return ord(c), ()
        text = self.text
        if self.pos >= self.n:
            raise self.error("bad escape (end of pattern)", offset)
        e = text[self.pos]
        self.pos += 1
        if e == "b":
            return 0x08, ()
        if e in "dDsSwW":
            return -1, _category(e, self.flags)
        if e in _OCTAL:
            p = self.pos
            while p < self.n and p < self.pos + 2 and text[p] in _OCTAL:
                p += 1
            value = int(text[self.pos - 1 : p], 8)
            self.pos = p
            if value > 0o377:
                raise self.error(f"octal escape value {text[offset:p]} outside of range 0-0o377", offset)
            return value, ()
        return self.escape_value(e, offset), ()


def parse_regex(
    pattern: str,
    flags: int = 0,
    *,
    ascii: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_repeat: int = DEFAULT_MAX_REPEAT,
    max_states: int = DEFAULT_MAX_STATES,
) -> Grammar:
    """The byte-level grammar of the strings that ``pattern`` matches as a whole.

    Parameters
    ----------
    pattern : str
        A regular expression in Python's ``re`` syntax (see the module docstring for what
        is supported).
    flags : int
        ``re`` flags, as for :func:`re.fullmatch`: ``re.IGNORECASE`` (with ASCII matching
        only), ``re.DOTALL``, ``re.VERBOSE``, ``re.ASCII``, ``re.UNICODE``,
        ``re.MULTILINE``.
    ascii : bool, keyword-only
        The reading of ``\\d \\w \\s`` (and their negations and case folding).  False
        (default): Python's reading for str patterns, Unicode-aware (``\\d`` is every
        decimal digit, ``\\w`` every letter, digit or ``_`` of Unicode, ``\\s`` every
        Unicode space).  True: the ASCII reading of ``re.ASCII``, of XGrammar's
        ``Grammar.from_regex`` and of JSON Schema tooling (``[0-9]``, ``[A-Za-z0-9_]``,
        ``[ \\t\\n\\r\\f\\v]``); the same as passing ``re.ASCII``.
    max_bytes : int
        Refuse patterns longer than this many UTF-8 bytes.
    max_depth : int
        Refuse groups nested deeper than this (any value works: no Python recursion).
    max_repeat : int
        Budget for the symbols created by ``{m,n}`` expansion, in total.
    max_states : int
        For a pattern with look-around: the most states of its automaton
        (:func:`formalgram.syntax.lookaround.compile_lookaround`).

    Returns
    -------
    Grammar
        Start rule ``root``; accepts ``s.encode()`` exactly when
        ``re.fullmatch(pattern, s, flags)`` matches (``flags | re.ASCII`` with
        ``ascii=True``).  ``.`` matches any character but ``\\n`` (any with
        ``re.DOTALL``); no surrogate is ever matched.

    Raises
    ------
    GrammarSyntaxError
        With the 1-based line and column in the pattern, for every pattern Python's ``re``
        refuses, and when a limit is exceeded.
    UnsupportedConstruct
        For valid patterns using a construct a grammar cannot express or that is refused
        (anchors, word boundaries, backreferences, conditionals, atomic groups, possessive
        quantifiers, Unicode case folding).
    GrammarTooLarge
        When a pattern with look-around needs more than ``max_states`` states.
    ValueError
        For ``flags`` outside the supported ones (``re.LOCALE``, ``re.DEBUG``, ...).

    Notes
    -----
    Time and memory are linear in the pattern length plus the expanded size (bounded by
    ``max_repeat``); with look-around, in the automaton's size (bounded by
    ``max_states``) times the size of its states' formulas.  The first use of ``\\d``, ``\\s`` or ``\\w`` in the Unicode reading
    scans the code points once per process (a fraction of a second); such a class lowers
    to a few hundred UTF-8 alternatives (``\\w``), shared by every use.

    Examples
    --------
    >>> g = parse_regex(r"[a-z]+(?:-[a-z]+)*")
    >>> g.accepts(b"well-formed"), g.accepts(b"-bad")
    (True, False)
    >>> g = parse_regex(r"\\d{2,3}")
    >>> g.accepts("٣٤".encode()), parse_regex(r"\\d{2,3}", ascii=True).accepts("٣٤".encode())
    (True, False)
    >>> g = parse_regex(r"(?:(?!--)[a-z-])+(?<!-)")  # no "--" inside, no "-" at the end
    >>> [g.accepts(s) for s in (b"a-b-c", b"a--b", b"ab-")]
    [True, False, False]
    >>> parse_regex(r"^a") # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    formalgram.errors.UnsupportedConstruct: line 1, column 1: unsupported construct 'anchor': ...
    """
    if not isinstance(flags, int) or flags & ~_SUPPORTED_FLAGS:
        raise ValueError(
            f"unsupported re flags {flags!r}: use IGNORECASE, DOTALL, VERBOSE, ASCII, UNICODE, MULTILINE"
        )
    if ascii:
        flags |= _A
    if flags & _A and flags & _U:
        raise ValueError("ASCII and UNICODE flags are incompatible")
    if len(pattern) > max_bytes or len(pattern.encode("utf-8", "surrogatepass")) > max_bytes:
        raise GrammarSyntaxError(f"pattern is larger than max_bytes={max_bytes} bytes", 1, 1, "")
    parser = _RegexParser(pattern, flags, max_depth)
    body = parser.parse()
    if not parser.has_look:
        return lower_rules([("root", body)], "root", parser.source, max_repeat=max_repeat)
    automaton = compile_lookaround(body, parser.source, max_repeat=max_repeat, max_states=max_states)
    taken = {"root"}
    counters: dict[str, int] = {}
    names = ["root"]
    for _ in range(1, automaton.num_states):
        names.append(fresh_name("root-state", taken, counters))
        taken.add(names[-1])
    rules = automaton_rules(automaton, names, 1, 1)
    return lower_rules(rules, "root", parser.source, max_repeat=max_repeat)


def regex_tree(
    pattern: str,
    flags: int,
    source: Source,
    offsets: list[int],
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    unicode_case: bool = False,
    lookaround: bool = False,
) -> Node:
    """The syntax tree of ``pattern`` for a front end that embeds regular expressions.

    Parameters
    ----------
    pattern : str
        A regular expression in Python's ``re`` syntax, as :func:`parse_regex` reads it.
    flags : int
        ``re`` flags in force (a subset of the ones :func:`parse_regex` takes).
    source : Source
        The enclosing text, where positions are reported.
    offsets : list of int
        ``len(pattern) + 1`` offsets into ``source.text``: where each character of
        ``pattern`` (and its end) came from.
    max_depth : int
        Refuse groups nested deeper than this.
    unicode_case : bool
        Read ``re.IGNORECASE`` in Unicode mode as ``re`` does (with
        :func:`case_insensitive_set`), instead of refusing it as :func:`parse_regex` does.
    lookaround : bool
        Read look-around assertions into ``LOOK`` nodes (for the caller to compile with
        :func:`formalgram.syntax.lookaround.compile_lookaround`; the lowering refuses
        them) instead of refusing them with :class:`~formalgram.errors.UnsupportedConstruct`.

    Returns
    -------
    Node
        An ``ALT`` node whose language is ``{s : re.fullmatch(pattern, s, flags)}``, with
        positions in ``source``.

    Raises
    ------
    GrammarSyntaxError, UnsupportedConstruct
        As :func:`parse_regex`, at the position in ``source``.

    Notes
    -----
    Linear in the pattern length.

    Examples
    --------
    >>> from formalgram.syntax.nodes import KIND_NAMES
    >>> text = "A: /[ab]+/"
    >>> tree = regex_tree("[ab]+", 0, Source(text), [4, 5, 6, 7, 8, 9])
    >>> KIND_NAMES[tree.kind], tree.line, tree.col
    ('ALT', 1, 5)
    """
    if flags & ~_SUPPORTED_FLAGS:
        raise ValueError(f"unsupported re flags {flags!r}")
    if len(offsets) != len(pattern) + 1:
        raise ValueError("offsets must have one entry per character of the pattern, and one for its end")
    return _RegexParser(pattern, flags, max_depth, source, offsets, unicode_case, lookaround).parse()
