"""Print a :class:`~formalgram.grammar.Grammar` back to GBNF text.

The output satisfies two contracts (``docs/syntax.md`` has the details):

* ``parse_gbnf(to_gbnf(g), g.start.name) == g`` for every grammar whose names are rule
  names of :func:`~formalgram.syntax.gbnf.parse_gbnf` (``[A-Za-z0-9_.-]+``, not dots
  only), so for every grammar that ``parse_gbnf`` returns;
* ``xgrammar.Grammar.from_ebnf(to_gbnf(g), root_rule_name=g.start.name)`` recognizes the
  same byte language, whenever no name starts with a digit (a llama.cpp spelling that
  XGrammar refuses; ``portable_names=True`` renames them) and every byte >= 0x80 of ``g``
  sits inside a complete UTF-8
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
from formalgram.utf8 import MAX_CODE_POINT, complement_ranges, decode_one, sequences_to_ranges

# the rule names parse_gbnf reads (a name made of dots only is the any-character token)
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")

_STRING_ESCAPES = {0x22: '\\"', 0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}
_CLASS_SPECIAL = frozenset("]\\[")


def _char_in_string(cp: int, raw: bool) -> str:
    esc = _STRING_ESCAPES.get(cp)
    if esc is not None:
        return esc
    return _plain_char(cp, raw)


def _plain_char(cp: int, raw: bool) -> str:
    """One code point as GBNF text; ``raw``: every non-ASCII character unescaped.

    Unprintable characters print as ``\\uHHHH`` / ``\\UHHHHHHHH``; with ``raw`` (for
    llguidance's converter, which drops the leading zeros of those escapes and then
    misreads them) ASCII controls print as ``\\xHH`` (see :func:`_join_atoms`) and other
    characters unescaped.
    """
    if 0x20 <= cp < 0x7F:
        return chr(cp)
    if cp < 0x80:
        return f"\\x{cp:02X}" if raw else f"\\u{cp:04X}"
    if raw and not 0xD800 <= cp <= 0xDFFF:
        return chr(cp)
    if 0xD800 <= cp <= 0xDFFF or not chr(cp).isprintable():
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return chr(cp)


def _char_in_class(cp: int, raw: bool) -> str:
    if cp == 0x0A:
        return "\\n"
    if cp == 0x09:
        return "\\t"
    if cp == 0x0D:
        return "\\r"
    if cp < 0x80 and chr(cp) in _CLASS_SPECIAL:
        return "\\" + chr(cp)
    return _plain_char(cp, raw)


def _split_dash(
    ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]],
) -> tuple[bool, list[tuple[int, int]]]:
    """Take ``-`` out of a range list: (whether it was there, the other ranges).

    A class prints ``-`` as its first member, unescaped (``[-+]``), instead of ``\\-``:
    every GBNF reader takes a leading ``-`` literally, and some (llguidance's) reject the
    escape.
    """
    dash = 0x2D
    out: list[tuple[int, int]] = []
    found = False
    for lo, hi in ranges:
        if lo <= dash <= hi:
            found = True
            if lo < dash:
                out.append((lo, dash - 1))
            if hi > dash:
                out.append((dash + 1, hi))
        else:
            out.append((lo, hi))
    return found, out


def _class_text(ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]], raw: bool) -> str:
    comp = complement_ranges(ranges)
    # negate when that is shorter, and on a tie when the class reaches the last code point
    # (``[^"\\]`` rather than ``[ !#-[\]-\U0010FFFF]``, which llguidance misreads)
    reaches_top = bool(ranges) and ranges[-1][1] == MAX_CODE_POINT
    negated = len(comp) < len(ranges) or (reaches_top and len(comp) <= len(ranges))
    dash, rest = _split_dash(comp if negated else ranges)
    parts: list[list[str]] = [["-"]] if dash else []
    for lo, hi in rest:
        if lo == hi:
            parts.append([_char_in_class(lo, raw)])
        elif hi == lo + 1:
            parts.append([_char_in_class(lo, raw), _char_in_class(hi, raw)])
        else:
            parts.append([_char_in_class(lo, raw), "-", _char_in_class(hi, raw)])
    return ("[^" if negated else "[") + _caret_safe(parts) + "]"


def _caret_safe(parts: list[list[str]]) -> str:
    """Join class members so that ``^`` is never first (where it would mean negation).

    ``^`` elsewhere is literal in every GBNF reader, and some (llguidance's) reject ``\\^``;
    a member starting with ``^`` is moved to the end, or escaped when it is alone.
    """
    if parts and parts[0][0] == "^":
        parts = [["\\^", *parts[0][1:]]] if len(parts) == 1 else parts[1:] + parts[:1]
    return _join_atoms([atom for part in parts for atom in part])


def _join_atoms(atoms: list[str]) -> str:
    """Concatenate printed characters, escaping a hex digit that follows a ``\\xHH`` escape.

    XGrammar reads ``\\x`` with as many hex digits as follow (``\\x00a`` is one code point),
    llama.cpp and llguidance read two; ``\\x00\\x61`` means the same to all of them.
    """
    out: list[str] = []
    after_hex_escape = False
    for atom in atoms:
        if after_hex_escape and len(atom) == 1 and atom in "0123456789abcdefABCDEF":
            atom = f"\\x{ord(atom):02X}"
        out.append(atom)
        after_hex_escape = len(atom) == 4 and atom.startswith("\\x")
    return "".join(out)


def _byte_class_text(mask: int, raw: bool) -> str:
    if mask >> 0x80 == 0:
        return _class_text(ByteSet(mask).ranges(), raw)
    # bytes >= 0x80 outside a UTF-8 character: formalgram raw-byte escapes
    dash, rest = _split_dash(ByteSet(mask).ranges())
    parts: list[list[str]] = [["-"]] if dash else []
    for lo, hi in rest:
        pieces: list[tuple[int, int]] = []
        if lo < 0x80:
            pieces.append((lo, min(hi, 0x7F)))
        if hi >= 0x80:
            pieces.append((max(lo, 0x80), hi))
        for a, b in pieces:
            fa = _char_in_class(a, raw) if a < 0x80 else f"\\x{{{a:02X}}}"
            fb = _char_in_class(b, raw) if b < 0x80 else f"\\x{{{b:02X}}}"
            parts.append([fa] if a == b else [fa, "-", fb])
    return "[" + _caret_safe(parts) + "]"


def _string_text(data: bytes, raw: bool) -> str:
    out: list[str] = ['"']
    i = 0
    n = len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            out.append(_char_in_string(b, raw))
            i += 1
            continue
        cp, length = decode_one(data, i)
        if length:
            out.append(_char_in_string(cp, raw))
            i += length
        else:
            out.append(f"\\x{{{b:02X}}}")
            i += 1
    out.append('"')
    return _join_atoms(out)


def _rhs_text(g: Grammar, rhs: tuple[int, ...], names: list[str], raw: bool) -> str:
    if not rhs:
        return '""'
    if len(rhs) == 1 and rhs[0] < 0 and g.masks[~rhs[0]] == 0:
        # a lone ``[]`` body would mean "no production"; keep the empty terminal explicit
        return '[] ""'
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
            parts.append(_string_text(bytes(run), raw))
            run = bytearray()
        if s >= 0:
            parts.append(names[s])
        else:
            parts.append(_byte_class_text(masks[~s], raw))
    if run:
        parts.append(_string_text(bytes(run), raw))
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


def _portable_names(g: Grammar) -> list[str]:
    """Lower-case ``[a-z0-9_]`` names, unique, the start named ``root``."""
    taken = {"root", "start"}
    next_suffix: dict[str, int] = {}  # per base: every smaller suffix is taken (linear naming)
    out: list[str] = []
    for i, name in enumerate(g.names):
        if i == g.start_id:
            out.append("root")
            continue
        base = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_") or "r"
        if base[0].isdigit():
            base = "r" + base
        cand = base
        k = next_suffix.get(base, 2)
        while cand in taken:
            cand = f"{base}_{k}"
            k += 1
        next_suffix[base] = k
        taken.add(cand)
        out.append(cand)
    return out


def to_gbnf(g: Grammar, *, portable_names: bool = False) -> str:
    """GBNF text for ``g``; the start rule comes first.

    Parameters
    ----------
    g : Grammar
        Any grammar whose nonterminal names are GBNF rule names (``[A-Za-z0-9_.-]+``, not
        dots only), which every grammar of :func:`~formalgram.syntax.gbnf.parse_gbnf` is.
    portable_names : bool, keyword-only
        Rename the nonterminals to distinct lower-case ``[a-z0-9_]`` names (the start
        rule becomes ``root``), for readers that fold or rewrite names, such as
        llguidance's GBNF converter (which maps ``-`` to ``_`` and ``camelCase`` to
        ``camel_case``, so distinct GBNF names can collide), and print non-ASCII
        characters unescaped (that converter misreads ``\\u`` / ``\\U`` escapes).

    Returns
    -------
    str
        One line per nonterminal.  Nonterminals without productions print as ``X ::= []``
        (an empty class, which parses back to no production).  Pass the start name to
        XGrammar: ``from_ebnf(text, root_rule_name=g.start.name)``.

    Raises
    ------
    GrammarError
        If a nonterminal name is not a valid GBNF identifier (and ``portable_names`` is
        false).

    Notes
    -----
    Linear in the size of ``g`` (a nonterminal is tested as a code-point class with at most
    4096 byte-range combinations); no recursion over the grammar.  Names with a leading
    digit (``0``, ``1a``: llama.cpp accepts them) are printed as they are, so the text
    parses back to an equal grammar; XGrammar refuses them (its names start with
    ``[A-Za-z_.-]``), ``portable_names=True`` gives text it reads.

    Examples
    --------
    >>> from formalgram.syntax.gbnf import parse_gbnf
    >>> to_gbnf(parse_gbnf('root ::= "a" root | ""'))
    'root ::= "a" root | ""\\n'
    >>> to_gbnf(parse_gbnf('root ::= 0\\n0 ::= "a"'))
    'root ::= 0\\n0 ::= "a"\\n'
    >>> to_gbnf(parse_gbnf('root ::= 0\\n0 ::= "a"'), portable_names=True)
    'root ::= r0\\nr0 ::= "a"\\n'
    """
    for name in [] if portable_names else g.names:
        if not _NAME_RE.match(name) or name.count(".") == len(name):
            raise GrammarError(
                f"nonterminal name {name!r} is not a valid GBNF identifier ([A-Za-z0-9_.-]+, not dots "
                "only); rename it, or print with portable_names=True"
            )
    names = _portable_names(g) if portable_names else list(g.names)
    order = [g.start_id] + [i for i in range(len(g.names)) if i != g.start_id]
    lines: list[str] = []
    for nt in order:
        name = names[nt]
        cls = _as_code_point_class(g, nt)
        if cls is not None:
            lines.append(f"{name} ::= {_class_text(cls, portable_names)}")
            continue
        idx = g.rules_by_lhs[nt]
        if not idx:
            lines.append(f"{name} ::= []")
            continue
        alts = [_rhs_text(g, g.rules[r][1], names, portable_names) for r in idx]
        lines.append(f"{name} ::= " + " | ".join(alts))
    return "\n".join(lines) + "\n"
