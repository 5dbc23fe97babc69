r"""XGrammar's own automaton for a ``Regex("...")`` macro, read from XGrammar itself.

XGrammar's EBNF has a macro ``Regex("pattern", json_string=true)`` (its JSON-Schema converter
writes one for every ``pattern``); XGrammar compiles the pattern to a byte automaton of its own
and enforces exactly that automaton's language.  That language is not always the pattern's
textbook reading: XGrammar 0.2.9 encodes wide code-point ranges (``.``, ``[^...]``, ``\D``)
with automata that also take overlong and surrogate UTF-8 sequences, and its construction of
some repetitions is loose (``(ab*)?c`` also takes ``bc``).  Token classes are lossless only for
the language the engine enforces, so :func:`regex_automaton` does not re-derive the automaton:
it compiles ``root ::= Regex(...)`` with XGrammar over a one-token vocabulary and reads the
automaton XGrammar built, edge by edge (``xgrammar.testing._print_grammar_fsms``, the byte-level
automata of a compiled grammar), into a :class:`~formalgram.automaton.ByteAutomaton`.  It is
the reader :func:`formalgram_cfgzip.grammar_text.read_grammar` hands to
:func:`formalgram.parse_gbnf`, so every grammar text this package reads keeps its macros, and
XGrammar, the Earley oracle and the displacement search see one language.

The printed form read here (XGrammar 0.2.8 and 0.2.9): ``Rule 0: root, FSM:
CompactFSM(num_states=N, start=S, end=[F, ...], edges=[`` then one line ``i: [e, ...]`` per
reachable state, each edge ``'c'->j``, ``[c-d]->j`` or ``Eps->j``, characters escaped as C
escapes or ``\xHH``.  Anything else (a version printing another form, a rule reference inside
the macro's automaton) raises :class:`~formalgram.errors.UnsupportedConstruct` rather than
guessing.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Final

from formalgram.automaton import EPSILON, ByteAutomaton
from formalgram.errors import UnsupportedConstruct

__all__ = ["preload", "regex_automaton"]

_HEADER: Final = re.compile(
    r"Rule (\d+): [^,]*, FSM: CompactFSM\(num_states=(\d+), start=(\d+), end=\[([\d, ]*)\], edges=\["
)
_STATE: Final = re.compile(r"(\d+): \[(.*)\]")
_ESCAPES: Final = {
    "'": 0x27,
    '"': 0x22,
    "?": 0x3F,
    "\\": 0x5C,
    "a": 0x07,
    "b": 0x08,
    "f": 0x0C,
    "n": 0x0A,
    "r": 0x0D,
    "t": 0x09,
    "v": 0x0B,
    "0": 0x00,
    "e": 0x1B,
}


def _refuse(pattern: str, why: str) -> UnsupportedConstruct:
    return UnsupportedConstruct("Regex", f"XGrammar's automaton of {pattern!r}: {why}", 1, 1)


def _ebnf_string(pattern: str) -> str:
    """``pattern`` as an EBNF string literal XGrammar reads back to the same characters."""
    out = ['"']
    for ch in pattern:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _xgrammar() -> Any:
    try:
        import xgrammar
        import xgrammar.testing
    except ImportError as exc:
        raise UnsupportedConstruct(
            "Regex",
            "the macro stands for XGrammar's own automaton of the pattern, which needs the 'xgrammar' package",
            1,
            1,
        ) from exc
    return xgrammar


def preload() -> bool:
    """Import XGrammar now, so that the first ``Regex`` macro read does not wait for it.

    The first :func:`regex_automaton` imports XGrammar and its testing helpers, which takes
    seconds (they import torch); a process that will read XGrammar's grammars (a
    :class:`~formalgram_cfgzip.background.BackgroundCompressor`'s worker) pays that once, when
    it starts, instead of inside its first compression.

    Returns
    -------
    bool
        Whether XGrammar is installed (``False``: the macros will be refused, as without it).

    Notes
    -----
    One import; free once imported.

    Examples
    --------
    >>> isinstance(preload(), bool)
    True
    """
    try:
        _xgrammar()
    except UnsupportedConstruct:
        return False
    return True


@lru_cache(maxsize=4096)
def regex_automaton(pattern: str, json_string: bool) -> ByteAutomaton:
    r"""The byte automaton XGrammar builds for ``Regex(pattern, json_string=...)``.

    Parameters
    ----------
    pattern : str
        The macro's pattern (ECMA-262 syntax, as XGrammar reads it).
    json_string : bool
        The macro's ``json_string`` option (the pattern matches the inside of a JSON string:
        XGrammar removes the bytes a JSON string may not hold unescaped from every match).

    Returns
    -------
    ByteAutomaton
        XGrammar's automaton, edge for edge (its states renumbered as printed).

    Raises
    ------
    UnsupportedConstruct
        If XGrammar is not installed, refuses the pattern, or prints its automaton in a form
        this reader does not know.

    Notes
    -----
    One XGrammar compile of a one-rule grammar over a one-token vocabulary (about a
    millisecond for the patterns of JSON schemas), plus a pass over the printed automaton;
    the last 4,096 automata read are kept (the reading is a function of its arguments and
    of the installed XGrammar), so a pattern that recurs across schemas costs a lookup.

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> g = parse_gbnf('root ::= Regex("(ab*)?c")', regex=regex_automaton)
    >>> g.accepts(b"abbc"), g.accepts(b"c"), g.accepts(b"bc")   # XGrammar's automaton takes "bc"
    (True, True, True)
    >>> g = parse_gbnf('root ::= Regex("a.", json_string=true)', regex=regex_automaton)
    >>> g.accepts("aé".encode()), g.accepts(b"a\xe0\x80\x80"), g.accepts(b'a"')  # overlong taken
    (True, True, False)
    >>> regex_automaton("[a-z]{2,300}", True).calls   # the counted repetition, a call of [a-z]
    ((0, 2, 2, 300, 1),)
    """
    xgr = _xgrammar()
    option = ", json_string=true" if json_string else ""
    text = f"root ::= Regex({_ebnf_string(pattern)}{option})"
    try:
        compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(["a"]), max_threads=1, cache_enabled=False)
        printed = str(xgr.testing._print_grammar_fsms(compiler.compile_grammar(text).grammar))
    except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
        raise _refuse(pattern, f"XGrammar refuses it ({str(exc).strip().splitlines()[-1][:300]})") from exc
    return _read_printed(pattern, printed)


def _read_printed(pattern: str, printed: str) -> ByteAutomaton:
    """The automaton of rule 0 in XGrammar's printed automata, the rules it calls included.

    XGrammar prints every rule's automaton over one numbering of states (each rule's part
    reachable only from its own start); ``Rule(k)`` and ``Repeat(rule=k, min=m, max=n)``
    edges become calls of rule ``k``'s part.
    """
    heads = list(_HEADER.finditer(printed))
    if not heads or heads[0].group(1) != "0":
        raise _refuse(pattern, "XGrammar printed its automaton in an unknown form")
    num_states = int(heads[0].group(2))
    starts: dict[int, int] = {}
    finals: list[int] = []
    edges: list[tuple[int, int, int, int]] = []
    calls: list[tuple[int, int, int, int, int]] = []
    for k, head in enumerate(heads):
        if int(head.group(2)) != num_states:
            raise _refuse(pattern, "XGrammar printed its rules over different numberings of states")
        starts[int(head.group(1))] = int(head.group(3))
        finals.extend(int(f) for f in head.group(4).replace(" ", "").split(",") if f)
        end = heads[k + 1].start() if k + 1 < len(heads) else len(printed)
        for line in printed[head.end() : end].splitlines():
            line = line.strip()
            if not line or line.startswith("])"):
                continue
            m = _STATE.fullmatch(line)
            if m is None:
                raise _refuse(pattern, f"unknown line in XGrammar's printed automaton: {line[:80]!r}")
            _read_edges(pattern, int(m.group(1)), m.group(2), edges, calls)
    try:
        resolved = tuple((src, starts[rule], lo, hi, dst) for src, rule, lo, hi, dst in calls)
    except KeyError as exc:
        raise _refuse(pattern, f"a call of rule {exc} that XGrammar did not print") from exc
    try:
        return ByteAutomaton(num_states, starts[0], tuple(finals), tuple(edges), resolved)
    except ValueError as exc:
        raise _refuse(pattern, str(exc)) from exc


_CALL: Final = re.compile(r"Rule\((\d+)\)->|Repeat\(rule=(\d+), min=(\d+), max=(-?\d+)\)->")


def _read_edges(
    pattern: str,
    src: int,
    text: str,
    out: list[tuple[int, int, int, int]],
    calls: list[tuple[int, int, int, int, int]],
) -> None:
    """The edges of one printed state (``'c'->j``, ``[c-d]->j``, ``Eps->j``, ``Rule(k)->j``,
    ``Repeat(rule=k, min=m, max=n)->j``; comma-separated) into ``out`` and ``calls`` (calls
    name their rule, resolved to its start state by the caller)."""
    i, n = 0, len(text)
    while i < n:
        call = _CALL.match(text, i)
        lo = hi = EPSILON
        if call is not None:
            i = call.end()
        elif text.startswith("Eps->", i):
            lo = hi = EPSILON
            i += 5
        elif text[i] == "'":
            lo, i = _read_char(pattern, text, i + 1)
            hi = lo
            if not text.startswith("'->", i):
                raise _refuse(pattern, f"unknown edge in {text[:80]!r}")
            i += 3
        elif text[i] == "[":
            lo, i = _read_char(pattern, text, i + 1)
            if i >= n or text[i] != "-":
                raise _refuse(pattern, f"unknown edge in {text[:80]!r}")
            hi, i = _read_char(pattern, text, i + 1)
            if not text.startswith("]->", i):
                raise _refuse(pattern, f"unknown edge in {text[:80]!r}")
            i += 3
        else:
            raise _refuse(pattern, f"an edge this reader does not know: {text[i : i + 40]!r}")
        j = i
        while j < n and text[j].isdigit():
            j += 1
        if j == i:
            raise _refuse(pattern, f"an edge without a target in {text[:80]!r}")
        if call is None:
            out.append((src, lo, hi, int(text[i:j])))
        elif call.group(1) is not None:
            calls.append((src, int(call.group(1)), 1, 1, int(text[i:j])))
        else:
            calls.append((src, int(call.group(2)), int(call.group(3)), int(call.group(4)), int(text[i:j])))
        i = j
        if text.startswith(", ", i):
            i += 2


def _read_char(pattern: str, text: str, i: int) -> tuple[int, int]:
    """One printed byte at ``text[i]``: a C escape, ``\\xHH`` or a printable character."""
    if i >= len(text):
        raise _refuse(pattern, "a truncated edge")
    c = text[i]
    if c != "\\":
        return ord(c), i + 1
    e = text[i + 1 : i + 2]
    if e in _ESCAPES:
        return _ESCAPES[e], i + 2
    if e == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[i + 2 : i + 4]):
        return int(text[i + 2 : i + 4], 16), i + 4
    raise _refuse(pattern, f"an escape this reader does not know: {text[i : i + 6]!r}")
