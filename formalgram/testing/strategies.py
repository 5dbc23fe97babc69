"""Hypothesis strategies producing random grammars and test strings.

These strategies are public so that every formalgram algorithm (normal forms, PDAs,
token compression) is tested on the same awkward grammars:

* nullable rules and empty (epsilon) rules;
* direct left recursion (``A -> A x``) and indirect left recursion (``A -> B x``, ``B -> A y``);
* unit cycles (``A -> B``, ``B -> A``);
* nonterminals without rules (non-generating), rules using them, unreachable nonterminals;
* multi-byte terminals (byte sets over a small alphabet), and optionally an empty byte set.

Everything is drawn from small integer choices, so Hypothesis shrinks failing grammars to
few nonterminals, few rules and short right-hand sides.  The start symbol is always named
``S`` (id 0); other nonterminals are ``A``, ``B``, ``C``, ... .

Examples
--------
>>> from hypothesis import given
>>> from formalgram.testing import grammars
>>> @given(grammars())
... def test_something(g):
...     assert g.start.name == "S"
"""

from __future__ import annotations

import contextlib

from hypothesis import strategies as st

from formalgram.errors import GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.recognize.enumerate import enumerate_strings, sample

__all__ = ["grammar_and_strings", "grammars"]


_NAMES = "SABCDEFGHIJKLMNOPQRTUVWXYZ"


def _name(i: int) -> str:
    return _NAMES[i] if i < len(_NAMES) else f"N{i}"


@st.composite
def grammars(
    draw: st.DrawFn,
    max_nonterminals: int = 4,
    max_rules_per_nt: int = 3,
    max_rhs: int = 3,
    alphabet: bytes = b"ab",
    byte_classes: bool = True,
    allow_epsilon: bool = True,
    allow_empty_terminal: bool = False,
) -> Grammar:
    """Strategy: random small grammars over ``alphabet``.

    Parameters
    ----------
    max_nonterminals : int
        At most this many nonterminals (at least 1: the start ``S``).
    max_rules_per_nt : int
        Each nonterminal gets ``0 .. max_rules_per_nt`` rules (0 makes it non-generating).
    max_rhs : int
        Longest right-hand side.
    alphabet : bytes
        Bytes terminals are drawn from (non-empty).
    byte_classes : bool
        When True a terminal is any non-empty subset of ``alphabet`` (multi-byte byte sets);
        when False every terminal is a single byte.
    allow_epsilon : bool
        When True right-hand sides may be empty (epsilon rules, hence nullable symbols).
    allow_empty_terminal : bool
        When True a terminal may rarely be the empty byte set (matches nothing).

    Returns
    -------
    SearchStrategy[Grammar]
        Grammars with start symbol ``S``.  Structures such as left recursion, unit cycles and
        unreachable rules arise from the uniform choice of symbols; a few rule shapes are
        drawn with extra weight so that they appear often: ``A -> A x`` (direct left
        recursion), ``A -> B`` (unit rule), and the empty rule.
    """
    if max_nonterminals < 1 or max_rules_per_nt < 0 or max_rhs < 0:
        raise ValueError("grammars(): sizes must be non-negative and max_nonterminals >= 1")
    letters = sorted(set(alphabet))
    if not letters:
        raise ValueError("grammars(): alphabet must not be empty")
    n = draw(st.integers(1, max_nonterminals))
    names = [_name(i) for i in range(n)]

    terminal_sets: st.SearchStrategy[int]
    if byte_classes:
        terminal_sets = st.sets(st.sampled_from(letters), min_size=1).map(lambda bs: sum(1 << b for b in bs))
    else:
        terminal_sets = st.sampled_from(letters).map(lambda b: 1 << b)
    if allow_empty_terminal:
        base = terminal_sets
        terminal_sets = st.integers(0, 9).flatmap(lambda k: st.just(0) if k == 0 else base)

    masks: list[int] = []
    mask_id: dict[int, int] = {}

    def term(mask: int) -> int:
        t = mask_id.get(mask)
        if t is None:
            t = len(masks)
            mask_id[mask] = t
            masks.append(mask)
        return ~t

    symbols = st.one_of(
        st.integers(0, n - 1).map(lambda i: ("n", i)),
        terminal_sets.map(lambda m: ("t", m)),
    )
    min_rhs = 0 if allow_epsilon else 1
    rules: list[tuple[int, tuple[int, ...]]] = []
    for lhs in range(n):
        # the start symbol gets at least one rule (when allowed) so that most languages are non-empty
        count = draw(st.integers(1 if lhs == 0 and max_rules_per_nt else 0, max_rules_per_nt))
        for _ in range(count):
            shape = draw(st.integers(0, 5)) if max_rhs >= 1 else 3
            rhs: list[int] = []
            if shape == 0 and max_rhs >= 2:
                # direct left recursion A -> A x...
                rhs.append(lhs)
                for kind, v in draw(st.lists(symbols, min_size=1, max_size=max_rhs - 1)):
                    rhs.append(v if kind == "n" else term(v))
            elif shape == 1 and n > 1:
                # unit rule A -> B
                rhs.append(draw(st.integers(0, n - 1)))
            elif shape == 2 and allow_epsilon:
                pass  # empty rule
            else:
                for kind, v in draw(st.lists(symbols, min_size=min_rhs, max_size=max_rhs)):
                    rhs.append(v if kind == "n" else term(v))
            if len(rhs) > max_rhs or (not rhs and not allow_epsilon):
                continue
            rules.append((lhs, tuple(rhs)))
    return Grammar.from_ids(names, masks, 0, rules)


def _mutations(data: bytes, letters: list[int]) -> st.SearchStrategy[bytes]:
    """Strategy: ``data`` with one byte inserted, deleted or replaced."""
    options: list[st.SearchStrategy[bytes]] = [
        st.tuples(st.integers(0, len(data)), st.sampled_from(letters)).map(
            lambda p: data[: p[0]] + bytes([p[1]]) + data[p[0] :]
        )
    ]
    if data:
        options.append(st.integers(0, len(data) - 1).map(lambda i: data[:i] + data[i + 1 :]))
        options.append(
            st.tuples(st.integers(0, len(data) - 1), st.sampled_from(letters)).map(
                lambda p: data[: p[0]] + bytes([p[1]]) + data[p[0] + 1 :]
            )
        )
    return st.one_of(options)


@st.composite
def grammar_and_strings(
    draw: st.DrawFn,
    max_nonterminals: int = 4,
    max_rules_per_nt: int = 3,
    max_rhs: int = 3,
    alphabet: bytes = b"ab",
    byte_classes: bool = True,
    allow_epsilon: bool = True,
    max_len: int = 6,
    max_strings: int = 8,
) -> tuple[Grammar, list[bytes]]:
    """Strategy: a grammar from :func:`grammars` plus byte strings to test it on.

    The strings mix members of L(g) (from :func:`~formalgram.recognize.enumerate.enumerate_strings`
    up to ``max_len`` over ``alphabet`` and from :func:`~formalgram.recognize.enumerate.sample`),
    truncations of members (prefixes), one-byte mutations of members (insert, delete, replace),
    and random strings over ``alphabet``
    of length ``<= max_len``.  With an empty language only random strings are produced.

    Parameters
    ----------
    max_nonterminals, max_rules_per_nt, max_rhs, alphabet, byte_classes, allow_epsilon
        Passed to :func:`grammars`.
    max_len : int
        Length bound for enumerated, sampled and random strings (mutations may add one byte).
    max_strings : int
        At most this many strings (at least one).

    Returns
    -------
    SearchStrategy[tuple[Grammar, list[bytes]]]
    """
    g = draw(
        grammars(
            max_nonterminals=max_nonterminals,
            max_rules_per_nt=max_rules_per_nt,
            max_rhs=max_rhs,
            alphabet=alphabet,
            byte_classes=byte_classes,
            allow_epsilon=allow_epsilon,
        )
    )
    letters = sorted(set(alphabet))
    members: list[bytes] = []
    try:
        members = enumerate_strings(g, max_len, bytes(letters), limit=2_000)
    except GrammarTooLarge:  # dense language: rely on sampling
        members = []
    with contextlib.suppress(GrammarError):  # empty language, or no member short enough
        members += sample(g, 4, seed=draw(st.integers(0, 2**16)), max_len=max_len)
    junk = st.binary(max_size=max_len).map(lambda b: bytes(letters[x % len(letters)] for x in b))
    kinds: list[st.SearchStrategy[bytes]] = [junk]
    if members:
        member = st.sampled_from(members)
        kinds.append(member)
        kinds.append(member.flatmap(lambda m: _mutations(m, letters)))
        kinds.append(member.flatmap(lambda m: st.integers(0, len(m)).map(lambda k: m[:k])))
    strings = draw(st.lists(st.one_of(kinds), min_size=1, max_size=max(1, max_strings)))
    return g, strings
