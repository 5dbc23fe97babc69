"""The syntax tree that every grammar-text front end produces, and source positions for its errors.

A front end (GBNF, regular expressions, ...) parses its text into rules whose bodies are
:class:`Node` trees; :func:`formalgram.syntax.lower.lower_rules` turns those rules into a
:class:`~formalgram.grammar.Grammar`.  So repetition, optional parts, character classes,
negated classes and literals mean the same thing, and are lowered by one definition, in
every syntax.

Node kinds (the ``kind`` attribute):

========== ============================================ =========================================
kind       fields                                       meaning
========== ============================================ =========================================
``ALT``    ``children``: one or more ``SEQ`` nodes      a choice (a group ``( a | b )``, or a rule
                                                        body)
``SEQ``    ``children``: zero or more elements          a concatenation; empty = the empty string
``STRING`` ``chars``: list of code points               the UTF-8 encoding of those characters;
                                                        a value ``RAW_BASE + b`` is the raw byte
                                                        ``b`` (GBNF's ``\\x{HH}``)
``CLASS``  ``ranges``: normalized inclusive code-point  one character of the set (complement
           ranges; ``raw``: ranges are bytes          already applied for negated classes);
                                                        empty ranges = nothing
``REF``    ``name``: a rule name                        that rule
``REPEAT`` ``children[0]``, ``lo``, ``hi`` (``-1`` for  ``lo`` to ``hi`` copies of the child
           no upper bound)                              (``?`` is 0..1, ``*`` 0..-1, ``+`` 1..-1)
``LOOK``   ``children[0]``: an ``ALT``; ``name``: one   a look-around assertion of a regular
           of ``=`` ``!`` ``<=`` ``<!``                 expression (``(?=...)`` ...): the empty
                                                        string where it holds; compiled by
                                                        :mod:`formalgram.syntax.lookaround`,
                                                        refused by the lowering
========== ============================================ =========================================

Elements (the children of a ``SEQ`` and of a ``REPEAT``) are ``STRING``, ``CLASS``,
``REF``, ``REPEAT``, ``ALT`` or ``LOOK`` nodes.  A ``CLASS`` with ``raw`` set holds byte ranges inside
``0..0xFF`` that stand for single bytes (not code points); every other ``CLASS`` holds code
points ``0..0x10FFFF`` as :func:`formalgram.utf8.normalize_ranges` returns them.

Positions: every node has the 1-based ``line`` and ``col`` (in code points) of the text it
came from, used for error messages: a ``REF`` carries the position of the reference (an
undefined rule is reported there), a ``REPEAT`` the position of its operator (a repetition
over ``max_repeat`` is reported there), other nodes the position of their first character.

Node trees may be arbitrarily deep; everything that walks them (the lowering, the checks)
uses explicit stacks, never Python recursion.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final

from formalgram.errors import GrammarSyntaxError, UnsupportedConstruct

ALT: Final = 1
SEQ: Final = 2
STRING: Final = 3
CLASS: Final = 4
REF: Final = 5
REPEAT: Final = 6
LOOK: Final = 7

# limits every front end takes (keyword arguments max_bytes, max_depth, max_repeat)
DEFAULT_MAX_BYTES: Final = 2_000_000  # UTF-8 bytes of text
DEFAULT_MAX_DEPTH: Final = 100  # nested groups
DEFAULT_MAX_REPEAT: Final = 100_000  # symbols created by {m,n} expansion, in total

# a raw byte b inside STRING.chars is stored as RAW_BASE + b (above every code point)
RAW_BASE: Final = 0x200000

KIND_NAMES: Final = {
    ALT: "ALT",
    SEQ: "SEQ",
    STRING: "STRING",
    CLASS: "CLASS",
    REF: "REF",
    REPEAT: "REPEAT",
    LOOK: "LOOK",
}


class Node:
    """One node of a front end's syntax tree (see the module docstring for the kinds).

    Parameters
    ----------
    kind : int
        One of ``ALT``, ``SEQ``, ``STRING``, ``CLASS``, ``REF``, ``REPEAT``.
    line, col : int
        1-based position of the text the node came from.

    Examples
    --------
    >>> a = Node(STRING, 1, 1)
    >>> a.chars = [ord("a")]
    >>> star = repeat(a, 0, -1, 1, 4)
    >>> KIND_NAMES[star.kind], star.lo, star.hi, star.children[0] is a
    ('REPEAT', 0, -1, True)
    """

    __slots__ = ("chars", "children", "col", "hi", "kind", "line", "lo", "name", "ranges", "raw")

    def __init__(self, kind: int, line: int, col: int) -> None:
        self.kind = kind
        self.line = line
        self.col = col
        self.children: list[Node] = []
        self.name = ""
        self.chars: list[int] = []
        self.ranges: tuple[tuple[int, int], ...] = ()
        self.raw = False
        self.lo = 0
        self.hi = 0

    def __repr__(self) -> str:
        return f"<Node {KIND_NAMES.get(self.kind, '?')} at {self.line}:{self.col}>"


def repeat(child: Node, lo: int, hi: int, line: int, col: int) -> Node:
    """A ``REPEAT`` node: ``lo`` to ``hi`` copies of ``child`` (``hi == -1``: no bound)."""
    node = Node(REPEAT, line, col)
    node.children.append(child)
    node.lo = lo
    node.hi = hi
    return node


def charge_repeat(source: Source, node: Node, width: int, used: int, max_repeat: int) -> int:
    """``used`` plus the symbols the ``REPEAT`` node ``node`` expands to when its child is
    ``width`` symbols long: ``lo`` copies, and ``hi - lo`` optional copies of one more symbol
    each.

    Parameters
    ----------
    source : Source
        The text, for the error.
    node : Node
        The ``REPEAT`` node (its ``lo``, ``hi``, line and column are read).
    width : int
        Symbols of one copy of the child.
    used : int
        Symbols the front end's repetitions expanded to so far.
    max_repeat : int
        The budget of one repetition, and of all of them together.

    Returns
    -------
    int
        The new total.

    Raises
    ------
    GrammarSyntaxError
        At the repetition, when it or the total passes ``max_repeat``.

    Notes
    -----
    O(1).

    Examples
    --------
    >>> n = repeat(Node(STRING, 1, 1), 2, 5, 1, 3)
    >>> charge_repeat(Source("x{2,5}"), n, 1, 0, 100)
    8
    >>> try:
    ...     charge_repeat(Source("x{2,5}"), n, 1, 95, 100)
    ... except GrammarSyntaxError as err:
    ...     print(err.line, err.column, "max_repeat=100" in str(err))
    1 3 True
    """
    lo, hi = node.lo, node.hi
    cost = lo * width + (0 if hi < 0 else (hi - lo) * (width + 1))
    total = used + cost
    if cost > max_repeat or total > max_repeat:
        bound = f"{{{lo},}}" if hi < 0 else f"{{{lo},{hi}}}"
        raise source.error(
            f"repetition {bound} expands to too many symbols (limit max_repeat={max_repeat})",
            node.line,
            node.col,
        )
    return total


def group(alternatives: list[Node], line: int, col: int) -> Node:
    """An ``ALT`` node over ``SEQ`` nodes; one alternative of one element is that element.

    Front ends call this when a group closes, so redundant parentheses cost no node (and
    ``((((x))))`` is as shallow as ``x``).
    """
    if len(alternatives) == 1 and len(alternatives[0].children) == 1:
        return alternatives[0].children[0]
    node = Node(ALT, line, col)
    node.children = alternatives
    return node


class Source:
    """The text a front end parses, for typed errors with a line, a column and the line's text.

    Parameters
    ----------
    text : str
        The whole source.

    Examples
    --------
    >>> err = Source("a\\nbc").error("bad", 2, 2)
    >>> (err.line, err.column, err.source_line)
    (2, 2, 'bc')
    """

    __slots__ = ("_line_starts", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._line_starts: list[int] = []

    def line_text(self, line: int) -> str:
        """The text of 1-based line ``line`` without its newline (empty past the end)."""
        text = self.text
        start = 0
        for _ in range(line - 1):
            nl = text.find("\n", start)
            if nl < 0:
                return ""
            start = nl + 1
        end = text.find("\n", start)
        return text[start:] if end < 0 else text[start:end]

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of character offset ``offset``.

        The first call indexes the line starts (O(length)); each call then costs
        O(log lines).
        """
        starts = self._line_starts
        if not starts:
            text = self.text
            starts.append(0)
            nl = text.find("\n")
            while nl >= 0:
                starts.append(nl + 1)
                nl = text.find("\n", nl + 1)
        line = bisect_right(starts, offset)
        return line, offset - starts[line - 1] + 1

    def error(self, message: str, line: int, col: int) -> GrammarSyntaxError:
        """A :class:`GrammarSyntaxError` at ``line``/``col`` with the line's text."""
        return GrammarSyntaxError(message, line, col, self.line_text(line))

    def unsupported(self, construct: str, message: str, line: int, col: int) -> UnsupportedConstruct:
        """An :class:`UnsupportedConstruct` at ``line``/``col`` with the line's text."""
        return UnsupportedConstruct(construct, message, line, col, self.line_text(line))
