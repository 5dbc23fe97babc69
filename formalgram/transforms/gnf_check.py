"""The one definition of Greibach normal form, and the check every GNF consumer makes.

A grammar is in GNF when every rule is ``A -> a B1 .. Bn`` with ``a`` a byte-set terminal
and ``B1 .. Bn`` nonterminals, except possibly the rule ``S -> ε`` for the start ``S``,
which then occurs on no right-hand side.  :func:`gnf_violation` says why a grammar is not in
that form; :func:`is_gnf` and :func:`require_gnf` are built on it.  The conversion into the
form is :func:`formalgram.transforms.gnf.to_gnf`.
"""

from __future__ import annotations

from formalgram.errors import GrammarError
from formalgram.grammar import Grammar

__all__ = ["gnf_violation", "is_gnf", "require_gnf"]


def gnf_violation(g: Grammar) -> str:
    """Why ``g`` is not in Greibach normal form, or ``""`` when it is.

    The one definition of GNF that every consumer checks (:func:`is_gnf`,
    :meth:`formalgram.pda.PDA.from_gnf`, :func:`formalgram.adjacency.stack_adjacency` and the
    displacement search): every rule is ``A -> a B1 .. Bn`` with ``a`` a byte-set terminal and
    ``B1 .. Bn`` nonterminals (``n >= 0``); only the start ``S`` may have the empty rule
    ``S -> ε``, and when it has one, ``S`` occurs on no right-hand side.

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    str
        An explanation naming the first offending rule, or ``""``.

    Notes
    -----
    This is exactly what the one-state PDA needs: a rule pops ``A`` on reading a byte of
    ``a`` and pushes ``B1 .. Bn``.  The start may occur on right-hand sides (``S -> a S B |
    a B`` is GNF) unless ``S -> ε`` is a rule: a pushed ``S`` could then vanish without
    reading a byte, which no PDA move expresses.  A terminal with an empty byte set keeps the
    form (the rule simply never fires); usefulness is not part of the form (see
    :func:`~formalgram.transforms.useless.remove_useless`).  O(|G|) time, no budget;
    raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, B = Nonterminal("S"), Nonterminal("B")
    >>> a, b = ByteSet.single(97), ByteSet.single(98)
    >>> gnf_violation(Grammar([Production(S, [a, S, B]), Production(S, [a, B]), Production(B, [b])], "S"))
    ''
    >>> gnf_violation(Grammar([Production(S, [B, a]), Production(B, [b])], "S"))
    'a rule of S starts with nonterminal B, not with a terminal'
    """
    start = g.start_id
    names = g.names
    start_has_eps = False
    for lhs, rhs in g.rules:
        if not rhs:
            if lhs != start:
                return f"rule {names[lhs]} -> ε: only the start symbol may have an empty rule"
            start_has_eps = True
            continue
        if rhs[0] >= 0:
            return f"a rule of {names[lhs]} starts with nonterminal {names[rhs[0]]}, not with a terminal"
        for s in rhs[1:]:
            if s < 0:
                return f"a rule of {names[lhs]} has a terminal after its first symbol"
    if start_has_eps:
        for lhs, rhs in g.rules:
            if start in rhs:
                return (
                    f"start symbol {names[start]} has an empty rule and appears on the right-hand side "
                    f"of a rule of {names[lhs]}"
                )
    return ""


def require_gnf(g: Grammar, user: str) -> None:
    """Raise :class:`~formalgram.errors.GrammarError` unless ``g`` is in GNF (:func:`gnf_violation`).

    Parameters
    ----------
    g : Grammar
        The grammar a GNF consumer was given.
    user : str
        What needs GNF, for the message (e.g. ``"PDA.from_gnf"``).

    Raises
    ------
    GrammarError
        ``"<user>: grammar is not in Greibach normal form: <why>"``.

    Notes
    -----
    O(|G|) time, no budget.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> require_gnf(Grammar([Production(S, [ByteSet.single(97)])], "S"), "example")
    >>> require_gnf(Grammar([Production(S, [S])], "S"), "example")
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarError: example: grammar is not in Greibach normal form: a rule of S starts with nonterminal S, not with a terminal
    """
    why = gnf_violation(g)
    if why:
        raise GrammarError(f"{user}: grammar is not in Greibach normal form: {why}")


def is_gnf(g: Grammar) -> bool:
    """True when ``g`` is in Greibach normal form (as :func:`gnf_violation` defines it).

    Parameters
    ----------
    g : Grammar
        Any grammar.

    Returns
    -------
    bool

    Notes
    -----
    O(|G|) time, no budget; raises nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S, A = Nonterminal("S"), Nonterminal("A")
    >>> a = ByteSet.single(97)
    >>> is_gnf(Grammar([Production(S, [a, A]), Production(A, [a])], "S"))
    True
    >>> is_gnf(Grammar([Production(S, [A, a]), Production(A, [a])], "S"))
    False
    """
    return not gnf_violation(g)
