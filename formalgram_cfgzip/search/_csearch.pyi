"""Type stub of the displacement search's C kernel (formalgram_cfgzip/search/_csearch.c)."""

from collections.abc import Sequence
from typing import Any

from _typeshed import ReadableBuffer, WriteableBuffer

OK: int
CELLS: int
STATES: int
WORK: int
DEEP: int
MEMORY: int

class Search:
    """The displacement search of one GNF grammar, with its memo tables."""

    expansions: int
    work: int
    max_work: int
    size: int
    table_bytes: int

    def __init__(
        self,
        num_symbols: int,
        num_classes: int,
        table: dict[tuple[int, int], tuple[tuple[int, ...], ...]],
        below: list[int],
        max_states: int,
        max_work: int,
        max_depth: int = ...,
        dense_below: int = ...,
    ) -> None: ...
    def walk(
        self,
        parents: list[ReadableBuffer],
        labels: list[ReadableBuffer],
        end_positions: list[ReadableBuffer],
        end_nodes: list[ReadableBuffer],
        class_of: ReadableBuffer,
        codes: WriteableBuffer,
        max_cells: int,
        max_bytes: int,
        domains: list[int] | None,
        /,
    ) -> int: ...
    def edges(self, node: int, /) -> tuple[tuple[int, int], ...]: ...
    def is_final(self, node: int, /) -> bool: ...
    def popped(self, node: int, /) -> int: ...
    def domain_automaton(self, roots: list[int], max_states: int, max_edges: int, /) -> tuple[Any, ...]: ...
    def reset(self) -> None: ...
    def skip_guesses(self, symbols: Sequence[int], /) -> None: ...
