"""The budgets of the compression pipeline and their defaults, stated once.

:data:`DEFAULT_BUDGETS` is what :func:`~formalgram_cfgzip.compress.compress`,
:class:`~formalgram_cfgzip.compress.Compressor`, a ``compress-many`` job, the command line,
cache verification and the native engine's tables run under unless told otherwise; every one
of them takes its defaults from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_BUDGETS", "Budgets"]


@dataclass(frozen=True)
class Budgets:
    """The bounds one compression runs under.

    Attributes
    ----------
    gnf_budget : int
        Size budget of the GNF conversion, in rules (:func:`formalgram.to_gnf`'s ``budget``).
    max_states : int
        Largest number of distinct stack tops the displacement search keeps for one token
        prefix.
    memory_budget : int or None
        Bytes the displacement search may add to its process's resident memory; ``None`` for
        no limit.

    Examples
    --------
    >>> DEFAULT_BUDGETS.gnf_budget, DEFAULT_BUDGETS.max_states, DEFAULT_BUDGETS.memory_budget_mib
    (2000000, 200000, 4096)
    """

    gnf_budget: int = 2_000_000
    max_states: int = 200_000
    memory_budget: int | None = 4 << 30

    @property
    def memory_budget_mib(self) -> int:
        """``memory_budget`` in MiB, 0 for no limit (how the command line and manifests write it); O(1)."""
        return 0 if self.memory_budget is None else self.memory_budget >> 20


DEFAULT_BUDGETS: Final = Budgets()
"""The defaults of every entry point of the pipeline."""
