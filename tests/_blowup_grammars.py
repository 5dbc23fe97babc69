"""Blow-up grammar families (no tests here): the reproducers of the budget tests.

``tests/test_budgets.py`` and ``bench/budget_cases.py`` both run them in child processes,
whose code starts with this file's source (so the child imports the build under test and
nothing from the checkout; hence no ``from __future__`` import and no use of ``__file__``).
"""

from formalgram import ByteSet, Grammar, Nonterminal, Production, parse_gbnf

CHAIN_RULES = {
    "unit": "a{i} ::= a{j}",
    "right": 'a{i} ::= "x" a{j}',
    "left": 'a{i} ::= a{j} "x"',
    "unitalt": 'a{i} ::= a{j} | "y"',
    "unitloop": 'a{i} ::= a{j} | "y" a{i}',
    "optional": 'a{i} ::= "x"? a{j} "x"?',
}


def chain(kind: str, n: int) -> Grammar:
    """``a1 ::= ... a2``, ..., ``a{n} ::= "x"``: ``n`` rules of the shape ``CHAIN_RULES[kind]``."""
    lines = [CHAIN_RULES[kind].format(i=i, j=i + 1) for i in range(1, n)] + [f'a{n} ::= "x"']
    return parse_gbnf("\n".join(lines), start="a1")


def doubling(levels: int) -> Grammar:
    """``a_i ::= a_{i+1} a_{i+1} | "x" | ""`` over ``levels`` levels."""
    lines = [f'a{i} ::= a{i + 1} a{i + 1} | "x" | ""' for i in range(levels)]
    return parse_gbnf("\n".join([*lines, f'a{levels} ::= "x"']), start="a0")


def left_cycle(n: int) -> Grammar:
    """``A0 -> A1 a | A1 b | +``, ..., ``A_{n-1} -> A0 a | A0 b | +``: Paull's substitution doubles."""
    a, b, plus = ByteSet.single(97), ByteSet.single(98), ByteSet.single(43)
    names = [Nonterminal(f"A{i}") for i in range(n)]
    prods = []
    for i in range(n):
        nxt = names[(i + 1) % n]
        prods += [
            Production(names[i], [nxt, a]),
            Production(names[i], [nxt, b]),
            Production(names[i], [plus]),
        ]
    return Grammar(prods, "A0")


def doubling_left(n: int) -> Grammar:
    """``A_i -> A_{i+1} a | A_{i+1} b b``, ``A_n -> +``: leftmost substitution doubles at every level."""
    a, b, plus = ByteSet.single(97), ByteSet.single(98), ByteSet.single(43)
    names = [Nonterminal(f"A{i}") for i in range(n + 1)]
    prods = [Production(names[n], [plus])]
    for i in range(n):
        prods += [Production(names[i], [names[i + 1], a]), Production(names[i], [names[i + 1], b, b])]
    return Grammar(prods, "A0")


def nullables(n: int) -> Grammar:
    """One rule of ``n`` nullable items."""
    return parse_gbnf("root ::= " + "a " * n + '\na ::= "x" | ""')


def deep_merge_grammar() -> Grammar:
    """After ``s a^k``, two sets with the same ``k``-level trie over ``{P, Q}`` and different
    bottoms (``X`` or ``Y``) are merged when ``c`` pushes the same symbol on both: a trie merge
    ``k`` levels deep.  The language is ``x s a^k c c {p,q}^k`` (also with ``e`` for ``c``)."""
    names = ["S", "X", "Y", "A", "B", "C", "P", "Q"]
    s_, x, y, a, b, c, p, q = range(8)
    letters = "xsacpqe"
    t = {ch: ~i for i, ch in enumerate(letters)}
    rules = [
        (s_, (t["x"], x)), (s_, (t["x"], y)), (x, (t["s"], a)), (y, (t["s"], b)),
        (a, (t["a"], a, p)), (a, (t["a"], a, q)), (a, (t["c"], c)),
        (b, (t["a"], b, p)), (b, (t["a"], b, q)), (b, (t["c"], c)), (b, (t["e"], c)),
        (c, (t["c"],)), (p, (t["p"],)), (q, (t["q"],)),
    ]  # fmt: skip
    return Grammar.from_ids(names, [1 << ord(ch) for ch in letters], s_, rules)
