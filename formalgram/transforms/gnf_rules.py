"""The rule store of one GNF construction: fresh names, interned byte sets, a rule cap, and the result.

Every construction of :func:`formalgram.transforms.gnf.to_gnf` (left-corner and substitution
alike) writes its rules through a :class:`Builder`, produces rules as ``tail -> byte mask``
per nonterminal (a :data:`Body` tail after the leading byte set), and is turned into a
:class:`~formalgram.grammar.Grammar` by :func:`finish`.
"""

from __future__ import annotations

from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar, IdRule, fresh_name
from formalgram.transforms.budget import Meter
from formalgram.transforms.useless import compact

__all__ = ["Body", "Builder", "finish", "terminal_name"]

#: A right-hand side (or a tail of one) over interned ids: ``s >= 0`` nonterminal, ``s < 0`` terminal ``~s``.
Body = tuple[int, ...]


class Builder:
    """Mutable state of one construction: names, masks, its rule cap and the shared meter.

    ``budget`` caps the rules of this construction (a later alternative gets a tighter cap
    than the conversion's budget); ``meter`` counts the work of the whole conversion.
    """

    def __init__(self, names: list[str], masks: list[int], budget: int, meter: Meter) -> None:
        self.names = names
        self.taken = set(names)
        self.masks = masks
        self.mask_id: dict[int, int] = {}
        for i, m in enumerate(masks):
            self.mask_id.setdefault(m, i)
        self.budget = budget
        self.count = 0
        self.meter = meter

    def terminal(self, mask: int) -> int:
        t = self.mask_id.get(mask)
        if t is None:
            t = len(self.masks)
            self.masks.append(mask)
            self.mask_id[mask] = t
        return ~t

    def fresh(self, base: str) -> int:
        name = fresh_name(base, self.taken)
        # fresh_name tries base, base_1, base_2, ... in turn: charge every try
        self.meter.spend(1 if name == base else 1 + int(name[len(base) + 1 :]))
        self.taken.add(name)
        self.names.append(name)
        return len(self.names) - 1

    def charge(self, k: int, a: int) -> None:
        """Count ``k`` new rules of nonterminal ``a`` against the cap."""
        self.count += k
        self.meter.spend(k)
        if self.count > self.budget:
            raise GrammarTooLarge(
                "GNF conversion",
                self.budget,
                f"more than {self.budget} rules while expanding {self.names[a]!r}",
            )


def terminal_name(mask: int) -> str:
    if mask & (mask - 1) == 0:
        b = mask.bit_length() - 1
        ch = chr(b)
        if ch.isascii() and ch.isalnum():
            return f"t_{ch}"
        return f"t_x{b:02x}"
    return "t_set"


def finish(
    quotient: dict[int, dict[Body, int]], start: int, b: Builder, start_name: str, has_eps: bool
) -> Grammar:
    masks = b.masks
    rules: list[IdRule] = []
    start_on_rhs = False
    for a, tails in quotient.items():
        for tail, m in tails.items():
            if start in tail:
                start_on_rhs = True
            rules.append((a, (b.terminal(m), *tail)))
    if start_on_rhs:
        new_start = b.fresh(start_name + "__gnf")
        rules.extend((new_start, body) for lhs, body in list(rules) if lhs == start)
        start = new_start
    if has_eps:
        rules.append((start, ()))
    # distinct: the tails of one nonterminal are distinct, every body starts with a byte set
    return compact(b.names, masks, start, rules, unique=True)
