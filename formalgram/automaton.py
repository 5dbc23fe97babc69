"""Finite automata over bytes, as a grammar front end receives them from outside.

A :class:`ByteAutomaton` is a nondeterministic finite automaton over the byte alphabet with
ε-edges: what an engine's own regular-expression compiler produces (XGrammar compiles the
``Regex("...")`` macro of its EBNF to such an automaton, and its matcher enforces exactly the
automaton's language, whatever the pattern's textbook reading).  A front end that meets such
a macro asks a reader for the automaton (:data:`RegexReader`) and writes it into the grammar
as right-linear rules (:func:`formalgram.syntax.gbnf.parse_gbnf`, ``regex=``), so the
grammar's byte language is the automaton's to the byte, including byte sequences that are not
UTF-8.  The grammar's recognizers (:func:`formalgram.accepts`) are then the automaton's too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EPSILON", "ByteAutomaton", "RegexReader"]

EPSILON = -1  # the ``lo`` (and ``hi``) of an ε-edge


@dataclass(frozen=True)
class ByteAutomaton:
    """A finite automaton over bytes with ε-edges and bounded calls of its own sub-automata.

    Parameters
    ----------
    num_states : int
        States are ``0 .. num_states - 1``.
    start : int
        The start state.
    finals : tuple of int
        The accepting states.
    edges : tuple of (int, int, int, int)
        ``(source, lo, hi, target)``: any byte ``lo..hi`` (inclusive) leads from ``source``
        to ``target``; ``lo == hi == EPSILON`` is an ε-edge.
    calls : tuple of (int, int, int, int, int)
        ``(source, entry, lo, hi, target)``: from ``source``, ``lo`` to ``hi`` (``-1``: no
        bound) strings of the sub-automaton entered at ``entry`` (the strings from ``entry``
        to a final state), then ``target``.  A sub-automaton is a part of the states that
        the rest does not reach (XGrammar's automata keep a counted repetition ``x{m,n}``
        this way, as a call of the automaton of ``x``).

    Raises
    ------
    ValueError
        If a state is out of range, a byte range is not inside ``0..255`` or a call's counts
        are not ``0 <= lo <= hi`` (or ``hi == -1``).

    Notes
    -----
    Validation is O(states + edges + calls).

    Examples
    --------
    >>> a = ByteAutomaton(2, 0, (1,), ((0, 0x61, 0x62, 1), (1, EPSILON, EPSILON, 0)))
    >>> len(a.edges), a.calls
    (2, ())
    >>> ByteAutomaton(2, 0, (1,), ((0, 0x61, 0x100, 1),))  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ValueError: edge 0->1 has the byte range 97..256
    """

    num_states: int
    start: int
    finals: tuple[int, ...]
    edges: tuple[tuple[int, int, int, int], ...]
    calls: tuple[tuple[int, int, int, int, int], ...] = ()

    def __post_init__(self) -> None:
        n = self.num_states
        if n < 1 or not 0 <= self.start < n:
            raise ValueError(f"start state {self.start} is not one of {n} states")
        for f in self.finals:
            if not 0 <= f < n:
                raise ValueError(f"final state {f} is not one of {n} states")
        for src, lo, hi, dst in self.edges:
            if not (0 <= src < n and 0 <= dst < n):
                raise ValueError(f"edge {src}->{dst} leaves the {n} states")
            if not ((lo == hi == EPSILON) or 0 <= lo <= hi <= 0xFF):
                raise ValueError(f"edge {src}->{dst} has the byte range {lo}..{hi}")
        for src, entry, lo, hi, dst in self.calls:
            if not (0 <= src < n and 0 <= dst < n and 0 <= entry < n):
                raise ValueError(f"call {src}->{dst} (entry {entry}) leaves the {n} states")
            if lo < 0 or (hi != -1 and hi < lo):
                raise ValueError(f"call {src}->{dst} repeats {lo}..{hi} times")


RegexReader = Callable[[str, bool], ByteAutomaton]
"""Reads ``Regex(pattern, json_string=flag)``: ``reader(pattern, flag)`` is the automaton whose
language the macro stands for; it raises :class:`~formalgram.errors.UnsupportedConstruct` (or
any :class:`~formalgram.errors.FormalgramError`) for a pattern it does not read."""
