"""Work accounting for the transforms that can blow up: one budget bounds time and memory.

A transform that takes a ``budget`` (:func:`~formalgram.transforms.gnf.to_gnf`,
:func:`~formalgram.transforms.left_recursion.remove_left_recursion`,
:func:`~formalgram.transforms.unit.remove_unit`,
:func:`~formalgram.transforms.epsilon.remove_epsilon`) reads it as a number of rules: no
grammar it builds, final or intermediate, may hold more rules than that.  The same number
also bounds the *work*: every elementary step (a rule or a right-hand-side symbol read,
copied or written, a table entry made, a candidate name tried) is charged to a
:class:`Meter`, and the transform stops with
:class:`~formalgram.errors.GrammarTooLarge` as soon as it has taken more than
:func:`work_allowance` steps, ``WORK_PER_RULE * max(budget, DEFAULT_BUDGET)``.  Everything
a transform stores was written by some step, so the work bound is also a bound on memory,
and the check runs while the structures grow, never only at the end.

The allowance never falls below that of the default budget: a small budget caps the size
of the result, while the time a conversion may take stays that of the default (a few
seconds), so a small grammar whose conversion is busy but small still converts.
"""

from __future__ import annotations

from typing import Final, NoReturn, final

from formalgram.errors import GrammarTooLarge

__all__ = ["DEFAULT_BUDGET", "WORK_PER_RULE", "Meter", "work_allowance"]

DEFAULT_BUDGET: Final = 200_000
"""Default ``budget`` (in rules) of the transforms that take one."""

WORK_PER_RULE: Final = 128
"""Steps of work allowed per rule of budget."""


def work_allowance(budget: int) -> int:
    """The most steps of work a transform given ``budget`` may take.

    Parameters
    ----------
    budget : int
        A budget in rules.

    Returns
    -------
    int
        ``WORK_PER_RULE * max(budget, DEFAULT_BUDGET)``.

    Notes
    -----
    O(1); raises nothing.  With the default budget the allowance is 25.6 million steps;
    each step writes at most a few dozen bytes, so memory is bounded with the work.  What
    the shared grammars take of it is in ``bench/results/gnf_sizes.md``.

    Examples
    --------
    >>> work_allowance(DEFAULT_BUDGET) == work_allowance(10) == WORK_PER_RULE * DEFAULT_BUDGET
    True
    >>> work_allowance(2 * DEFAULT_BUDGET) == 2 * work_allowance(DEFAULT_BUDGET)
    True
    """
    return WORK_PER_RULE * max(budget, DEFAULT_BUDGET)


@final
class Meter:
    """Steps of work charged against a budget; raises when the allowance is spent.

    Parameters
    ----------
    what : str
        The operation, for the error message (e.g. ``"GNF conversion"``).
    budget : int
        The budget in rules (named in the error message).
    allowance : int, optional
        Most steps that may be charged; default :func:`work_allowance` of ``budget``.

    Attributes
    ----------
    work : int
        Steps charged so far.
    allowance : int
        Most steps that may be charged (a caller may lower it for a while).

    Raises
    ------
    GrammarTooLarge
        From :meth:`spend`, :meth:`exhausted` and :meth:`too_many_rules`.

    Notes
    -----
    Charging is an addition and a comparison; the transforms charge in batches (per rule
    or per table row), before or while they write.

    Examples
    --------
    >>> m = Meter("example", 10, allowance=64)
    >>> m.spend(60)
    >>> m.spend(10)
    Traceback (most recent call last):
    ...
    formalgram.errors.GrammarTooLarge: example exceeded its budget of 10 (more than 64 steps of work)
    """

    __slots__ = ("allowance", "budget", "what", "work")

    def __init__(self, what: str, budget: int, allowance: int = -1) -> None:
        self.what = what
        self.budget = budget
        self.work = 0
        self.allowance = work_allowance(budget) if allowance < 0 else allowance

    def spend(self, k: int) -> None:
        """Charge ``k`` steps.

        Raises
        ------
        GrammarTooLarge
            When the total passes the allowance.

        Notes
        -----
        O(1).

        Examples
        --------
        >>> m = Meter("example", 1, allowance=10)
        >>> m.spend(4)
        >>> m.work
        4
        """
        self.work += k
        if self.work > self.allowance:
            self.exhausted()

    def exhausted(self) -> NoReturn:
        """Raise :class:`~formalgram.errors.GrammarTooLarge` for a spent allowance.

        Raises
        ------
        GrammarTooLarge
            Always.

        Notes
        -----
        O(1).

        Examples
        --------
        >>> Meter("example", 1, allowance=10).exhausted()
        Traceback (most recent call last):
        ...
        formalgram.errors.GrammarTooLarge: example exceeded its budget of 1 (more than 10 steps of work)
        """
        raise GrammarTooLarge(self.what, self.budget, f"more than {self.allowance} steps of work")

    def too_many_rules(self, where: str) -> NoReturn:
        """Raise :class:`~formalgram.errors.GrammarTooLarge` for a grammar over ``budget`` rules.

        Raises
        ------
        GrammarTooLarge
            Always.

        Notes
        -----
        O(1).

        Examples
        --------
        >>> Meter("example", 7).too_many_rules("after closing")
        Traceback (most recent call last):
        ...
        formalgram.errors.GrammarTooLarge: example exceeded its budget of 7 (more than 7 rules after closing)
        """
        raise GrammarTooLarge(self.what, self.budget, f"more than {self.budget} rules {where}".rstrip())
