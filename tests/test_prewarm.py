"""The prewarm's exploration of a native grammar's states (``reachable_class_rows``).

Oracle: the Earley recognizer (``formalgram.is_prefix`` / ``accepts``), which knows nothing of
the GNF, the stack or the classes' engine: every path of class representatives up to a depth
that reaches every state of a finite-state grammar is enumerated, and the class masks of those
prefixes (a class allowed when its representative extends the prefix, the stop class when the
prefix is a sentence) are the masks the exploration must meet, all of them and no other.
"""

from __future__ import annotations

import numpy as np
import pytest
from _build import expected_kernels
from _native_helpers import small_vocab

from formalgram import accepts, is_prefix, parse_gbnf
from formalgram_cfgzip import compress, engines
from formalgram_cfgzip.engines.native.matcher import NativeCompiled
from formalgram_cfgzip.engines.native.prewarm import reachable_class_rows

# Stretches of equal class masks before the masks beyond them: the digits of a counted
# repetition (one mask until a single digit is left, where "12" no longer fits), a string's
# interior, and an optional tail after a loop.
CASES = [
    'root ::= "[" [0-9]{6} "]" ("a" | "b")* "x"',
    'root ::= "\\"" [a-b]* "\\"" ("," [0-9]{3})?',
]
VOCAB = [b"[", b"]", b"0", b"1", b"12", b"a", b"b", b"ab", b"x", b"]x", b'"', b'",', b",", b"a1"]


def _classes_in(row: np.ndarray, n: int) -> frozenset[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:n]
    return frozenset(int(c) for c in np.flatnonzero(bits))


def _earley_masks(text: str, compiled: NativeCompiled, depth: int) -> set[frozenset[int]]:
    """The class masks of every prefix made of at most ``depth`` class representatives."""
    g = parse_gbnf(text)
    reps = compiled.engine_tokens
    stop, never = compiled.stop_class, compiled.never_list
    classes = [c for c in range(compiled.engine_size) if c != stop and not never[c]]
    masks: set[frozenset[int]] = set()
    level = [b""]
    for _ in range(depth + 1):
        nxt = []
        for prefix in level:
            allowed = {c for c in classes if is_prefix(g, prefix + reps[c])}
            if accepts(g, prefix):
                allowed.add(stop)
            masks.add(frozenset(allowed))
            nxt.extend(prefix + reps[c] for c in sorted(allowed) if c != stop)
        level = sorted(set(nxt))
    return masks


@pytest.mark.parametrize("text", CASES)
@pytest.mark.parametrize("kernel", expected_kernels("python"))
def test_every_mask_behind_a_stretch_of_equal_masks_is_met(text: str, kernel: str) -> None:
    vocab = small_vocab(VOCAB)
    compiled = engines.compile_grammar(compress(text, vocab, progress=False), text, engine="native")
    assert isinstance(compiled, NativeCompiled)
    compiled = NativeCompiled(compiled.classes, compiled.tables, kernel=kernel)  # type: ignore[arg-type]
    rows = reachable_class_rows(compiled, max_rows=1000, max_seconds=60.0)
    met = [_classes_in(r, compiled.engine_size) for r in rows]
    assert len(set(met)) == len(met)  # each mask once
    assert set(met) == _earley_masks(text, compiled, depth=10)
    start = compiled.allocate_class_bitmask(1)
    compiled.matcher().fill_next_class_bitmask(start, 0)
    assert np.array_equal(rows[0], start[0])  # the start's first
