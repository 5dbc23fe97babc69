"""Conversion to Greibach normal form that stays small: :func:`to_gnf` keeps the smallest construction.

GNF itself is defined in :mod:`formalgram.transforms.gnf_check`
(:func:`~formalgram.transforms.gnf_check.gnf_violation`, the check every consumer uses).  :func:`to_gnf` produces a stricter form: its
byte sets are non-empty and its start occurs on no right-hand side at all.

The conversion is a pipeline of exact rewritings; what keeps the result small is

* epsilon removal with a bounded expansion per rule (long rules are cut);
* collapsing unit cycles instead of expanding them;
* a left-corner construction straight into GNF (:mod:`~formalgram.transforms.gnf_left_corner`;
  polynomial: one continuation nonterminal per pair of a nonterminal and a left corner, one
  level of leftmost substitution, so tails never accumulate), with an optional dominator
  split that shares continuations between nonterminals;
* as an alternative, Paull's left-recursion removal inside cyclic left-corner
  components followed by on-demand leftmost substitution
  (:mod:`~formalgram.transforms.gnf_substitution`; better on shallow grammars); the smaller
  result wins;
* merging rules ``A -> a β`` and ``A -> b β`` into ``A -> (a|b) β`` (a byte-set union);
* one shared nonterminal ``T -> a`` per distinct byte set used after the first
  position;
* finally merging nonterminals whose rule sets coincide up to that merging (the
  coarsest stable partition, computed by refinement like DFA minimisation:
  :mod:`~formalgram.transforms.gnf_minimise`).

Every construction writes through the rule store of :mod:`~formalgram.transforms.gnf_rules`.
The left-corner variants share what depends on the epsilon-free table alone
(:class:`~formalgram.transforms.gnf_left_corner.Shared`, which replays the work each entry
charged, so every budget decision is the one an unshared run makes), each construction is
scored from its partition (:func:`~formalgram.transforms.gnf_minimise.quotient_size`) and
only the winner's quotient is built.  Correctness: ``proofs/normal_forms.md`` §6.
"""

from __future__ import annotations

from typing import Final

from formalgram.analysis import generating, nullable
from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.transforms.budget import DEFAULT_BUDGET, Meter
from formalgram.transforms.epsilon import remove_epsilon
from formalgram.transforms.gnf_left_corner import LeftCorner, Shared
from formalgram.transforms.gnf_minimise import partition, quotient, quotient_size
from formalgram.transforms.gnf_rules import Body, Builder, finish
from formalgram.transforms.gnf_substitution import expand_leftmost, lift_terminals
from formalgram.transforms.left_recursion import remove_left_recursion_table
from formalgram.transforms.unit import merge_unit_cycles
from formalgram.transforms.useless import remove_useless

__all__ = ["STRATEGIES", "to_gnf"]

# left-corner variants: (dominator split, unit steps spelled out, cut at children, deep cut)
_LC_VARIANTS: dict[str, tuple[bool, bool, bool, bool]] = {
    "left-corner:plain": (False, False, False, False),
    "left-corner:deep": (False, False, True, True),
    "left-corner:dominator": (True, False, False, False),
    "left-corner:cut": (False, False, True, False),
    "left-corner:dominator-distribute": (True, True, False, False),
}
STRATEGIES: tuple[str, ...] = ("auto", "fast", "left-corner", "substitution", *_LC_VARIANTS)
# "fast": the deep cut alone (fewest nonterminals, and the least work on JSON-schema
# grammars), within this many times the work of a linear pass over the grammar; past it,
# the plain left-corner construction (linear on chains, where the deep cut is quadratic)
_FAST_WORK: Final = 256

# An alternative construction tried after the first one gives up (the first result is
# kept) once it has taken this many times the first one's work, or this floor, whichever
# is larger: on the shared grammars no alternative takes more than three times as much,
# while on long chains the deep cut is quadratic where the plain one is linear.
_ALTERNATIVE_WORK: Final = 8
_ALTERNATIVE_FLOOR: Final = 100_000


def to_gnf(
    g: Grammar, *, budget: int = DEFAULT_BUDGET, strategy: str = "auto", objective: str = "rules"
) -> Grammar:
    """Convert ``g`` to Greibach normal form, keeping ``L`` exactly and the result small.

    Pipeline: :func:`remove_useless`; :func:`remove_epsilon` (the empty string is set
    aside and restored at the end); collapse unit cycles; then build GNF with

    * the *left-corner* construction (``A -> t [A/t]``, where ``[A/X]`` derives what
      follows a leftmost ``X`` inside ``A``), which handles left recursion directly,
      substitutes only one level at the leftmost position and never accumulates
      tails; tried plain, with a dominator split or a cut at the children of each
      nonterminal (both share continuations between nonterminals), with a *deep*
      cut that recursively uses the children's own rules (tails then hold one small
      continuation per level; fewest nonterminals by far), and with unit steps
      spelled out instead of closed;
    * the classic *substitution* route (left recursion removed inside the cyclic
      left-corner components, then leftmost substitution in topological order),
      which is often smaller on shallow grammars and is capped at twice the best
      left-corner size;

    keeping the smallest.  In every case terminals after the first position become
    shared nonterminals ``T -> a``, rules differing only in their first byte set are
    merged (``A -> (a|b) β``), and nonterminals with identical rule sets are merged to
    a fixpoint.  A fresh start is added when the start occurs on a right-hand side,
    and ``S -> ε`` when ``ε ∈ L(g)``.  Proof: ``proofs/normal_forms.md`` §6.

    Parameters
    ----------
    g : Grammar
        Any grammar with a non-empty language.
    budget : int
        Maximum number of rules created by any stage of the conversion (default
        :data:`~formalgram.transforms.budget.DEFAULT_BUDGET`, 200,000), which also sets the
        work allowed: :func:`~formalgram.transforms.budget.work_allowance` steps,
        ``128 * max(budget, 200_000)`` (see :mod:`formalgram.transforms.budget`).  The sizes and times
        of the shared grammars are in ``bench/results/gnf_sizes.md``.
    strategy : str
        ``"auto"`` (default, smallest of all), ``"fast"`` (the deep cut alone, falling back
        to the plain left-corner construction when it takes more than 256 times the work of
        a pass over the grammar: a third of ``"auto"``'s time on JSON-schema grammars, with
        the same stack alphabet on most; what a per-request compression wants),
        ``"left-corner"`` (smallest left-corner
        variant), ``"substitution"`` (Paull + leftmost substitution only; may blow up)
        or one left-corner variant: ``"left-corner:plain"``,
        ``"left-corner:dominator"``, ``"left-corner:cut"``,
        ``"left-corner:dominator-distribute"``, ``"left-corner:deep"`` (see
        :data:`STRATEGIES`).
    objective : str
        What "smallest" means when several constructions are tried: ``"rules"``
        (default; fewest rules, then fewest nonterminals) or ``"nonterminals"``
        (smallest stack alphabet for the PDA, then fewest rules).

    Returns
    -------
    Grammar
        ``is_gnf(result)`` holds and ``L(result) == L(g)``, the empty string included.

    Raises
    ------
    EmptyLanguageError
        When ``L(g)`` is empty.
    GrammarTooLarge
        When a stage would exceed ``budget`` rules or the conversion its work allowance;
        both are checked while the rules and tables grow, so time and memory stay bounded.
    ValueError
        For an unknown ``strategy`` or ``objective``.

    Notes
    -----
    Linear for the cleaning stages.  The left-corner construction creates at most
    one continuation per pair (nonterminal, left corner) and is polynomial:
    O(|V| * |G| * k) rules with k the largest number of leading byte sets of a
    nonterminal; it is linear on unit, right and left chains (no recursion, so chains of
    any length convert).  The substitution route is output-sensitive and exponential in
    the worst case.  The final merging of nonterminals refines a partition on a worklist,
    O(m log n) signature computations for ``n`` nonterminals and ``m`` tail symbols.

    Every construction after the first is a candidate only: it gives up (and the best
    result so far is kept) once it has more than twice the rules of the best one, or
    more than eight times the work of the first one (at least 100,000 steps); so a
    variant that is quadratic where the first is linear (the deep cut on long left
    chains) costs a bounded share.  Only the first construction's failure raises.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production, is_gnf
    >>> E = Nonterminal("E")
    >>> a, p = ByteSet.single(97), ByteSet.single(43)
    >>> g = Grammar([Production(E, [E, p, E]), Production(E, [a])], "E")
    >>> is_gnf(to_gnf(g))
    True
    >>> from formalgram import parse_gbnf
    >>> up_to_300 = parse_gbnf('root ::= "a"{0,300}')
    >>> len(to_gnf(up_to_300, budget=1_000).rules)
    600
    >>> to_gnf(up_to_300, budget=500)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: GNF conversion exceeded its budget of 500 (600 rules after epsilon removal)
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown GNF strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if objective not in ("rules", "nonterminals"):
        raise ValueError(f"unknown objective {objective!r}; expected 'rules' or 'nonterminals'")
    meter = Meter("GNF conversion", budget)
    meter.spend(_size(g))
    g = remove_useless(g)
    has_eps = g.start_id in nullable(g)
    start_name = g.names[g.start_id]
    g = remove_epsilon(g)
    meter.spend(2 * _size(g))
    # work on the epsilon-free rules of the original start (a fresh epsilon start made
    # by remove_epsilon is dropped; the empty string is restored at the end)
    proper = [r for r in g.rules if r[1]]
    g = Grammar._trusted(g.names, g.masks, g.id_of(start_name), proper, unique=True)  # a subset of g's rules
    if g.start_id not in generating(g):
        # L(g) == {ε}
        return Grammar.from_ids([start_name], [], 0, [(0, ())])
    g = remove_useless(g)
    g = merge_unit_cycles(g)
    meter.spend(2 * _size(g))
    if len(g.rules) > budget:
        raise GrammarTooLarge("GNF conversion", budget, f"{len(g.rules)} rules after epsilon removal")
    base: list[list[Body]] = [[] for _ in g.names]
    for lhs, rhs in g.rules:
        base[lhs].append(rhs)
    # the best construction so far: its rules, its representatives and the representative of
    # each nonterminal (the quotient is built for the winner only), its builder and its score
    best: tuple[dict[int, dict[Body, int]], list[int], list[int], Builder, tuple[int, int]] | None = None
    allowance = meter.allowance
    first_work = 0
    # what the left-corner variants compute from the table alone, computed once
    shared = Shared(base)
    fast_failed = False
    variants = list(_LC_VARIANTS.items())
    if strategy == "fast":
        variants = [(name, _LC_VARIANTS[name]) for name in ("left-corner:deep", "left-corner:plain")]
    for name, (factor, distribute, cut, deep) in variants:
        if strategy == "fast":
            if not deep and not fast_failed:
                continue
        elif strategy not in ("auto", "left-corner", name):
            continue
        # left-corner construction (polynomial, never accumulates tails); variants of
        # the start rules: dominator split, unit steps spelled out, cut at children
        # a later variant gives up once clearly larger than the best so far
        # and once it has taken much more work than the first one
        cap = budget if best is None else min(budget, 2 * best[3].count + 64)
        b = Builder(list(g.names), list(g.masks), cap, meter)
        before = meter.work
        if best is not None:
            meter.allowance = min(allowance, before + max(_ALTERNATIVE_WORK * first_work, _ALTERNATIVE_FLOOR))
        elif strategy == "fast" and deep:
            meter.allowance = min(allowance, before + max(_FAST_WORK * _size(g), _ALTERNATIVE_FLOOR))
        try:
            lc = LeftCorner(base, b, factor, distribute, cut, deep, shared).run(g.start_id)
            reps, rep = partition(lc, g.start_id, meter)
        except GrammarTooLarge:
            meter.allowance = allowance
            if strategy == "fast" and deep:
                fast_failed = True  # past the deep cut's share of work: the plain construction
                continue
            if best is None:
                raise
            continue
        meter.allowance = allowance
        if best is None:
            first_work = meter.work - before
        score = _score(quotient_size(lc, reps, rep), len(reps), objective)
        if best is None or score < best[4]:
            best = (lc, reps, rep, b, score)
    if strategy in ("auto", "substitution"):
        # Paull + leftmost substitution: often smaller on shallow grammars, but tails
        # accumulate on deep ones, so in "auto" mode it may not grow past the best
        # left-corner result.
        cap = budget if best is None else min(budget, 2 * best[3].count + 64)
        if best is not None:
            meter.allowance = min(
                allowance, meter.work + max(_ALTERNATIVE_WORK * first_work, _ALTERNATIVE_FLOOR)
            )
        try:
            names = list(g.names)
            table = remove_left_recursion_table(names, g.start_id, [list(x) for x in base], cap, meter)
            b2 = Builder(names, list(g.masks), cap, meter)
            lift_terminals(table, b2)
            expanded = expand_leftmost(table, g.start_id, b2)
            reps2, rep2 = partition(expanded, g.start_id, meter)
            score2 = _score(quotient_size(expanded, reps2, rep2), len(reps2), objective)
            if best is None or score2 < best[4]:
                best = (expanded, reps2, rep2, b2, score2)
        except GrammarTooLarge:
            if best is None:
                raise
        finally:
            meter.allowance = allowance
    assert best is not None
    rules, reps, rep, b, _ = best
    return finish(quotient(rules, reps, rep), rep[g.start_id], b, start_name, has_eps)


def _size(g: Grammar) -> int:
    """Rules plus right-hand-side symbols: the work of one linear pass over ``g``."""
    return len(g.rules) + sum(len(rhs) for _, rhs in g.rules)


def _score(rules: int, nonterminals: int, objective: str) -> tuple[int, int]:
    """What ``objective`` minimises, as a pair compared in order."""
    if objective == "nonterminals":
        return (nonterminals, rules)
    return (rules, nonterminals)
