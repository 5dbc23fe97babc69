"""Per-occurrence copies of single-byte nonterminals in a GNF grammar (a sharper stack adjacency).

A nonterminal ``T`` whose rules are all ``T -> a`` (no tail) stands for one byte.  GNF
conversion shares such symbols across contexts, which makes the stack-adjacency relation
(a relation on *pairs* of symbols, :mod:`formalgram.adjacency`) admit long chains that no
real stack holds, e.g. the ``"*"`` of ``"/*"`` and the ``"*"`` of ``"*/"`` stacked many
times.  :func:`specialize_terminal_symbols` gives every tail occurrence its own copy.
"""

from __future__ import annotations

from formalgram.grammar import Grammar, IdRule, fresh_name

__all__ = ["specialize_terminal_symbols"]


def specialize_terminal_symbols(gnf: Grammar) -> Grammar:
    """Give every tail occurrence of a single-byte-class nonterminal its own copy.

    Copying ``T`` per (rule, position) keeps the language and the PDA's behaviour, and makes
    the stack-adjacency relation exact for these symbols, which keeps a displacement search
    small and its token classes coarse.

    Parameters
    ----------
    gnf : Grammar
        A grammar in Greibach normal form.

    Returns
    -------
    Grammar
        An equivalent GNF grammar in which each single-byte nonterminal occurs once.  The copy
        of ``T`` for position ``pos`` of the ``k``-th emitted rule is named ``T@k.pos`` (made
        unique if taken); the start symbol is never copied.

    Notes
    -----
    O(size of the grammar); the result has at most one new nonterminal per tail position,
    so it is linear and takes no budget.  Raises nothing (a grammar that is not in GNF is
    copied the same way; its language is kept).  Naming the copies tries suffixes one by one
    only when a name is taken.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> g = to_gnf(parse_gbnf('root ::= "(" x ")" "(" x ")"\\nx ::= "a"'))
    >>> h = specialize_terminal_symbols(g)
    >>> len(g.names) < len(h.names), h.is_gnf(), h.accepts(b"(a)(a)")
    (True, True, True)
    """
    names = list(gnf.names)
    byte_only: list[list[int]] = [[] for _ in names]
    is_byte_only = [bool(gnf.rules_by_lhs[a]) for a in range(len(names))]
    for lhs, rhs in gnf.rules:
        if len(rhs) == 1 and rhs[0] < 0:
            byte_only[lhs].append(rhs[0])
        else:
            is_byte_only[lhs] = False
    is_byte_only[gnf.start_id] = False
    taken = set(names)
    rules: list[IdRule] = []
    for lhs, rhs in gnf.rules:
        if is_byte_only[lhs]:
            continue  # re-emitted per occurrence below
        new_rhs = list(rhs)
        for pos in range(1, len(rhs)):
            sym = rhs[pos]
            if sym >= 0 and is_byte_only[sym]:
                name = fresh_name(f"{names[sym]}@{len(rules)}.{pos}", taken)
                taken.add(name)
                copy = len(names)
                names.append(name)
                for t in byte_only[sym]:
                    rules.append((copy, (t,)))
                new_rhs[pos] = copy
        rules.append((lhs, tuple(new_rhs)))
    # trusted: the names are fresh, the masks gnf's own, and the rules distinct (distinct
    # rules of gnf stay distinct, every copy being fresh to one rule)
    return Grammar._trusted(names, gnf.masks, gnf.start_id, rules, unique=True)
