"""A guard against a known XGrammar 0.2.9 crash (stack overflow in ``compile_grammar``).

``GrammarCompiler.compile_grammar`` -> ``GrammarOptimizer::Apply`` ->
``RepetitionRangeExpander::Apply`` recurses without bound in
``RepetitionRangeExpanderImpl::HandleRepetitionRange`` (SIGSEGV, seen with gdb) when a
repetition range ``X{m}`` / ``X{m,n}`` / ``X{m,}`` repeats a rule whose body is that same
repetition, directly or through rules whose whole body is one rule reference.  Minimal text:
``root ::= root{2}``.  Others: ``root ::= root{0,1}`` (language ``{""}``), ``r0 ::= r1{2}``
with ``r1 ::= r0``, ``r0 ::= (r0){1,3} ""``.  Not affected: ``r0 ::= r0{2} | "a"``,
``r0 ::= r0+``, ``r0 ::= "a" r0{2}``.  The engines refuse such texts with an
:class:`~formalgram_cfgzip.errors.EngineError` instead of letting the process die;
``tests/_xgrammar_child.py`` pins the crash itself in a child process.

The check is an over-approximation on purpose: it accepts every such cycle, including a
few that XGrammar 0.2.9 happens to compile (``r0 ::= r1{2}``, ``r1 ::= r2``, ``r2 ::= r0``).
Every rule on such a cycle derives nothing or only the empty string, so refusing them
costs nothing real.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["crash_cycle", "matches_known_crash"]

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*            # space, comments
    |"(?:\\.|[^"\\\n])*"        # string
    |\[(?:\\.|[^\]\\])*\]       # character class
    |\{[^}]*\}                  # repetition range
    |[A-Za-z0-9_.-]+            # rule name
    |.                          # anything else: ( ) | * + ? = ...
    """,
    re.VERBOSE | re.DOTALL,
)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_RULE_START = re.compile(r"^[ \t]*([A-Za-z0-9_.-]+)[ \t]*::=", re.MULTILINE)

# parsed body: list of alternatives; alternative: list of elements; element: (atom, postfixes);
# atom: ("name", str) | ("group", body) | ("other", token)
_Element = tuple[tuple[str, Any], list[str]]


def _parse_body(tokens: list[str]) -> list[list[_Element]] | None:
    """Alternatives of a rule body, or ``None`` when its parentheses do not balance.

    Iterative: a group opens a new frame on an explicit stack, so any nesting depth is read
    in O(tokens) without Python recursion.
    """
    # one frame per open group: its alternatives so far
    stack: list[list[list[_Element]]] = [[[]]]
    i = 0
    n = len(tokens)
    while i < n:
        tok = tokens[i]
        i += 1
        if tok == "|":
            stack[-1].append([])
            continue
        if tok == "(":
            stack.append([[]])
            continue
        atom: tuple[str, Any]
        if tok == ")":
            if len(stack) == 1:
                return None  # a ")" without its "("
            atom = ("group", stack.pop())
        elif _NAME.fullmatch(tok):
            atom = ("name", tok)
        else:
            atom = ("other", tok)
        postfixes = []
        while i < n and (tokens[i] in ("*", "+", "?") or tokens[i].startswith("{")):
            postfixes.append(tokens[i])
            i += 1
        stack[-1][-1].append((atom, postfixes))
    return stack[0] if len(stack) == 1 else None


def _is_lookahead(element: _Element) -> bool:
    (kind, value), _ = element
    return kind == "group" and bool(value[0]) and value[0][0][0] == ("other", "=")


def _unit_target(body: list[list[_Element]]) -> tuple[str, bool] | None:
    """``(rule, repeated)`` when ``body`` is one rule reference, else None.

    ``""`` elements, parentheses and a lookahead assertion ``(= ...)`` are ignored (a loop
    down the nested groups, not recursion).
    """
    repeated = False
    while len(body) == 1:
        elements = [e for e in body[0] if e[0] != ("other", '""') and not _is_lookahead(e)]
        if len(elements) != 1:
            return None
        (kind, value), postfixes = elements[0]
        if any(p in ("*", "+", "?") for p in postfixes):
            return None
        repeated = repeated or bool(postfixes)
        if kind == "name":
            return value, repeated
        if kind != "group":
            return None
        body = value
    return None


def crash_cycle(text: str) -> list[str] | None:
    """The rules of a cycle with the known crash's shape in GBNF ``text``, or ``None``.

    The shape: a cycle of rules, each one's whole body a single rule reference (ignoring
    ``""``, parentheses and a lookahead), where at least one reference carries a
    repetition range ``{...}``.

    Parameters
    ----------
    text : str
        GBNF / XGrammar EBNF text (already accepted by formalgram's parser or not).

    Returns
    -------
    list of str or None
        The rule names along the cycle, starting at a repeated reference.

    Notes
    -----
    O(len(text) + rules) time and memory, at any nesting depth (no recursion).

    Examples
    --------
    >>> crash_cycle('root ::= a\\na ::= b{2}\\nb ::= a')
    ['a', 'b']
    >>> crash_cycle('root ::= root{2} | "x"') is None
    True
    """
    starts = list(_RULE_START.finditer(text))
    edges: dict[str, tuple[str, bool]] = {}
    for k, m in enumerate(starts):
        end = starts[k + 1].start() if k + 1 < len(starts) else len(text)
        tokens = [t for t in _TOKEN.findall(text[m.end() : end]) if not t.isspace() and t[0] != "#"]
        body = _parse_body(tokens)
        target = _unit_target(body) if body is not None else None
        if target is not None:
            edges[m.group(1)] = target
    for start, (first, repeated) in edges.items():
        if not repeated:
            continue
        path = [start]
        node: str | None = first
        while node is not None and node not in path:
            path.append(node)
            nxt = edges.get(node)
            node = None if nxt is None else nxt[0]
        if node == start:
            return path
    return None


def matches_known_crash(text: str) -> bool:
    """Whether ``text`` has the shape of the known XGrammar 0.2.9 crash (see :func:`crash_cycle`)."""
    return crash_cycle(text) is not None
