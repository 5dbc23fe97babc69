"""Type stub of the native engine's C kernel (formalgram_cfgzip/engines/native/_cnative.c)."""

from collections.abc import Callable, Sequence
from typing import Any

from _typeshed import ReadableBuffer, WriteableBuffer

class Tables:
    """The immutable arrays of one grammar (copied; every index checked)."""

    def __init__(
        self,
        num_symbols: int,
        start_symbol: int,
        accepts_empty: bool,
        num_classes: int,
        stop_class: int,
        byte_class: ReadableBuffer,
        trie_sym: ReadableBuffer,
        trie_up: ReadableBuffer,
        trans_key: ReadableBuffer,
        trans_start: ReadableBuffer,
        trans_push: ReadableBuffer,
        edge_start: ReadableBuffer,
        edge_sym: ReadableBuffer,
        edge_to: ReadableBuffer,
        out: ReadableBuffer,
        set_start: ReadableBuffer,
        set_class: ReadableBuffer,
    ) -> None: ...

class State:
    """One matcher's graph-structured stack over shared Tables."""

    def __init__(self, tables: Tables) -> None: ...
    def accept_bytes(self, data: ReadableBuffer, /) -> bool: ...
    def accept_class(self, data: ReadableBuffer, cls: int, /) -> bool: ...
    def remember(self, max_nodes: int, /) -> int: ...
    def accept_stop(self) -> bool: ...
    def rollback(self, num_tokens: int, /) -> None: ...
    def compact(self, keep: int, /) -> None: ...
    def reset(self) -> None: ...
    def fill(self, row: WriteableBuffer, /) -> None: ...
    def fill_into(self, bitmask: WriteableBuffer, index: int, /) -> None: ...
    def fill_token(
        self, kernel: object, fallback: Callable[[Any, int], None], bitmask: Any, index: int = 0, /
    ) -> None: ...
    def update_token(
        self, kernel: object, fallback: Callable[[Any, int], None], bitmask: Any, index: int = 0, /
    ) -> None: ...
    def bind(self, kernel: object, fallback: Callable[..., None], /) -> None: ...
    def fill_bound(self, bitmask: Any, index: int = 0, /) -> None: ...
    def update_bound(self, bitmask: Any, index: int = 0, /) -> None: ...
    def forget_row(self) -> None: ...
    def stop_allowed(self) -> bool: ...
    def is_terminated(self) -> bool: ...
    def tops(self) -> tuple[int, ...]: ...
    def node(self, i: int, /) -> tuple[int, tuple[int, ...]]: ...
    def info(self) -> dict[str, int]: ...

def fill_batch(states: Sequence[State], bitmask: WriteableBuffer, /) -> None:
    """Row ``i`` of a C-contiguous int32 bitmask := class mask of ``states[i]``."""

def small_walk(n: int, /) -> int:
    """The pairs a class walk keeps in a list before it moves them to a hash table (0..32,
    default 32; the masks do not depend on it); returns the previous value."""

def dense_edges(on: object, /) -> bool:
    """Whether class walks find a many-edged domain state's edge by its bit words instead of a
    search of its edge list (default ``True``; the masks do not depend on it); returns the
    previous setting."""

def chain_walks(on: object, /) -> bool:
    """Whether class walks take the chain summaries at their tops (default ``True``; the masks
    do not depend on it); returns the previous setting."""
