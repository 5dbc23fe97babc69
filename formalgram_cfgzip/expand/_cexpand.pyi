"""Type stub of the C mask-expansion kernel (formalgram_cfgzip/expand/_cexpand.c)."""

from _typeshed import ReadableBuffer, WriteableBuffer

class Kernel:
    """Precomputed class -> token expansion for one int32 token-class array."""

    def __init__(
        self,
        token_class: ReadableBuffer,
        num_classes: int,
        row_budget: int,
        rows: int = -1,
        cache_rows: int = 0,
        delta: int = 1,
        adapt: bool = True,
        max_rows: int = -1,
        admit_all: bool = False,
    ) -> None: ...
    def expand(
        self,
        class_row: ReadableBuffer,
        out: WriteableBuffer,
        base_out: WriteableBuffer | None = None,
        base_class: ReadableBuffer | None = None,
        plan: int = -1,
        big: int = -1,
        /,
    ) -> int: ...
    def patch(
        self,
        class_row: ReadableBuffer,
        base_class: ReadableBuffer,
        out: WriteableBuffer,
        limit_ns: float = ...,
        /,
    ) -> bool: ...
    def expand_rows(
        self,
        class_bitmask: ReadableBuffer,
        out: WriteableBuffer,
        indices: ReadableBuffer | int | None = None,
        /,
    ) -> int: ...
    def cache_info(self) -> dict[str, int]: ...
    def clear_cache(self) -> None: ...
    def keep_sets(
        self, set_start: ReadableBuffer, set_class: ReadableBuffer, max_sets: int, min_ns: float, /
    ) -> int: ...
    def pin_rows(self, class_rows: ReadableBuffer, max_rows: int, min_ns: float, /) -> int: ...
    def info(self) -> dict[str, int | float | dict[str, float]]: ...

def apply_bitmask(bits: ReadableBuffer, values: WriteableBuffer, itemsize: int, pattern: int, /) -> None:
    """Write ``pattern`` into every item of ``values`` whose bit is 0 (and past the bits)."""

def avx2(on: bool, /) -> bool:
    """Whether the kernel takes its AVX2 paths where the CPU has them; the previous setting."""

def release_cache_pool() -> int:
    """Free the row-cache blocks dropped kernels left for the next ones; the bytes freed."""

def cache_pool_info() -> dict[str, int]:
    """The row-cache blocks: kept, kept_bytes, made, huge_page_advised."""
