"""Print a :class:`~formalgram.grammar.Grammar` back to GBNF text.

The output satisfies two contracts (``docs/syntax.md`` has the details):

* ``parse_gbnf(to_gbnf(g), g.start.name) == g`` for every grammar whose names are valid
  identifiers (``[A-Za-z_.-][A-Za-z0-9_.-]*``, not dots only);
* ``xgrammar.Grammar.from_ebnf(to_gbnf(g), root_rule_name=g.start.name)`` recognizes the
  same byte language, whenever every byte >= 0x80 of ``g`` sits inside a complete UTF-8
  character (a literal run of single bytes, or a nonterminal whose alternatives are
  exactly the UTF-8 encoding of a code-point set).  Other bytes >= 0x80 are printed with
  the formalgram escape ``\\x{HH}`` (one raw byte), which XGrammar and llama.cpp reject
  with an error, so a printed grammar is never silently misread.
"""

from __future__ import annotations

import re

from formalgram.byteset import ByteSet
from formalgram.errors import GrammarError
from formalgram.grammar import Grammar
from formalgram.utf8 import complement_ranges, decode_one, sequences_to_ranges

_NAME_RE = re.compile(r"[A-Za-z_.\-][A-Za-z0-9_.\-]*\Z")

_STRING_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}
_CLASS_SPECIAL = frozenset("]\\^-[")


def _char_in_string(cp: int) -> str:
    esc = _STRING_ESCAPES.get(cp)
    if esc is not None:
        return esc
    return _plain_char(cp)


def _plain_char(cp: int) -> str:
    if 0x20 <= cp < 0x7F:
        return chr(cp)
    if cp < 0x80:
        return f"\\u{cp:04X}"
    if 0xD800 <= cp <= 0xDFFF or not chr(cp).isprintable():
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return chr(cp)


def _char_in_class(cp: int) -> str:
    if cp == 0x0A:
        return "\\n"
    if cp == 0x09:
        return "\\t"
    if cp == 0x0D:
        return "\\r"
    if cp < 0x80 and chr(cp) in _CLASS_SPECIAL:
        return "\\" + chr(cp)
    return _plain_char(cp)


def _class_text(ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> str:
    comp = complement_ranges(ranges)
    negated = len(comp) < len(ranges)
    parts: list[str] = []
    for lo, hi in comp if negated else ranges:
        if lo == hi:
            parts.append(_char_in_class(lo))
        elif hi == lo + 1:
            parts.append(_char_in_class(lo) + _char_in_class(hi))
        else:
            parts.append(_char_in_class(lo) + "-" + _char_in_class(hi))
    return ("[^" if negated else "[") + "".join(parts) + "]"


def _byte_class_text(mask: int) -> str:
    if mask >> 0x80 == 0:
        return _class_text(ByteSet(mask).ranges())
    # bytes >= 0x80 outside a UTF-8 character: formalgram raw-byte escapes
    parts: list[str] = []
    for lo, hi in ByteSet(mask).ranges():
        pieces: list[tuple[int, int]] = []
        if lo < 0x80:
            pieces.append((lo, min(hi, 0x7F)))
        if hi >= 0x80:
            pieces.append((max(lo, 0x80), hi))
        for a, b in pieces:
            fa = _char_in_class(a) if a < 0x80 else f"\\x{{{a:02X}}}"
            fb = _char_in_class(b) if b < 0x80 else f"\\x{{{b:02X}}}"
            parts.append(fa if a == b else fa + "-" + fb)
    return "[" + "".join(parts) + "]"


def _string_text(data: bytes) -> str:
    out: list[str] = ['"']
    i = 0
    n = len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            out.append(_char_in_string(b))
            i += 1
            continue
        cp, length = decode_one(data, i)
        if length:
            out.append(_char_in_string(cp))
            i += length
        else:
            out.append(f"\\x{{{b:02X}}}")
            i += 1
    out.append('"')
    return "".join(out)


def _rhs_text(g: Grammar, rhs: tuple[int, ...]) -> str:
    if not rhs:
        return '""'
    if len(rhs) == 1 and rhs[0] < 0 and g.masks[~rhs[0]] == 0:
        # a lone ``[]`` body would mean "no production"; keep the empty terminal explicit
        return '[] ""'
    names = g.names
    masks = g.masks
    parts: list[str] = []
    run = bytearray()
    for s in rhs:
        if s < 0:
            mask = masks[~s]
            if mask and mask & (mask - 1) == 0:
                run.append(mask.bit_length() - 1)
                continue
        if run:
            parts.append(_string_text(bytes(run)))
            run = bytearray()
        if s >= 0:
            parts.append(names[s])
        else:
            parts.append(_byte_class_text(masks[~s]))
    if run:
        parts.append(_string_text(bytes(run)))
    return " ".join(parts)


def _as_code_point_class(g: Grammar, nt: int) -> tuple[tuple[int, int], ...] | None:
    rules = g.rules
    idx = g.rules_by_lhs[nt]
    if not idx:
        return None
    seqs: list[list[ByteSet]] = []
    for r in idx:
        rhs = rules[r][1]
        if not rhs or len(rhs) > 4 or any(s >= 0 for s in rhs):
            return None
        seqs.append([ByteSet(g.masks[~s]) for s in rhs])
    ranges = sequences_to_ranges(seqs)
    if ranges is None or not ranges or ranges[-1][1] < 0x80:
        return None
    return ranges


def to_gbnf(g: Grammar) -> str:
    """GBNF text for ``g``; the start rule comes first.

    Parameters
    ----------
    g : Grammar
        Any grammar whose nonterminal names are valid identifiers.

    Returns
    -------
    str
        One line per nonterminal.  Nonterminals without productions print as ``X ::= []``
        (an empty class, which parses back to no production).  Pass the start name to
        XGrammar: ``from_ebnf(text, root_rule_name=g.start.name)``.

    Raises
    ------
    GrammarError
        If a nonterminal name is not a valid GBNF identifier.

    Complexity
    ----------
    O(size of g).

    Example
    -------
    >>> from formalgram.syntax.gbnf import parse_gbnf
    >>> to_gbnf(parse_gbnf('root ::= "a" root | ""'))
    'root ::= "a" root | ""\\n'
    """
    for name in g.names:
        if not _NAME_RE.match(name) or name.count(".") == len(name):
            raise GrammarError(
                f"nonterminal name {name!r} is not a valid GBNF identifier ([A-Za-z_.-][A-Za-z0-9_.-]*); "
                "rename it before printing"
            )
    order = [g.start_id] + [i for i in range(len(g.names)) if i != g.start_id]
    lines: list[str] = []
    for nt in order:
        name = g.names[nt]
        cls = _as_code_point_class(g, nt)
        if cls is not None:
            lines.append(f"{name} ::= {_class_text(cls)}")
            continue
        idx = g.rules_by_lhs[nt]
        if not idx:
            lines.append(f"{name} ::= []")
            continue
        alts = [_rhs_text(g, g.rules[r][1]) for r in idx]
        lines.append(f"{name} ::= " + " | ".join(alts))
    return "\n".join(lines) + "\n"
