"""The step breakdown of ``bench/peers.py`` (``--kinds``) on a small grammar and vocabulary.

No timing asserts.  The labels are checked against what the rows show: a step labelled
``kept`` or ``unchanged`` leaves the full-vocabulary mask of the step before, every other
label changes it (a class row that differs names at least one token more or less), and the
oracle for each mask is a fresh matcher's fill after the same prefix, written into a new row.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from formalgram_cfgzip import Vocabulary
from formalgram_cfgzip.engines.native.matcher import NativeCompiled, c_module
from formalgram_cfgzip.expand._c_kernel import load_c_module

pytestmark = pytest.mark.skipif(
    load_c_module() is None or c_module() is None, reason="the C kernels are not built"
)

GBNF = r"""
root ::= "[" ws ( item ( ws "," ws item )* )? ws "]"
item ::= "\"" [a-c]* "\"" | [0-9]+ | root
ws ::= " "?
"""
# structure, the quote with a letter on either side, every string of a-c up to five letters
# and every number up to three digits, and tokens no text takes: rows of a few hundred words, string and number
# interiors that keep their mask, classes that come and go between steps
TOKENS = (
    [b"[", b"]", b",", b" ", b'"', b'"a', b'c"', b"[[", b"]]", b", ", b'"]']
    + sorted(
        {bytes(w) for n in range(1, 6) for w in itertools.product(b"abc", repeat=n)}
        | {str(i).encode() for i in range(1000)}
    )
    + [b"~%d" % i for i in range(40_000)]
)  # never allowed: rows wide enough to patch in place


def _walk(native: NativeCompiled, vocab: Vocabulary, seed: int, steps: int) -> list[int]:
    """A seeded walk of allowed tokens (the native engine's own masks)."""
    rng = np.random.default_rng(seed)
    m = native.matcher()
    bm = native.allocate_token_bitmask(1)
    walk: list[int] = []
    for _ in range(steps):
        m.fill_next_token_bitmask(bm, 0)
        bits = np.unpackbits(bm[0].view(np.uint8), bitorder="little")[: len(vocab.tokens)]
        allowed = [t for t in np.flatnonzero(bits) if t not in vocab.stop_ids]
        if not allowed:
            break
        tok = int(rng.choice(allowed))
        assert m.accept_token(tok)
        walk.append(tok)
    return walk


@pytest.mark.parametrize("prewarm", [False, True])
def test_update_kinds_follow_the_rows(tmp_path: Path, prewarm: bool) -> None:
    from bench import peers

    vocab = Vocabulary.from_bytes(TOKENS)
    case = peers.PeerCase("tiny", "lark", "tiny.lark")
    loaded = peers.load_case(case, GBNF, "", vocab, tmp_path)
    if prewarm:  # the prefix memo answers the first steps of every walk
        assert loaded.update.prewarm(max_rows=8, max_prefixes=64) >= 0
    walks = [_walk(loaded.native, vocab, seed, 40) for seed in range(4)]
    kinds = peers.update_kinds(loaded, walks)
    assert len(kinds) == sum(map(len, walks))
    bare = [k.removesuffix(" (memo)") for k in kinds]
    # the kinds of a decoding loop are met on these walks (a patch from a cached row may be; a
    # prewarm pins every row it meets, so a miss may not be left), and the memo's only when it
    # holds paths
    known = {"kept", "unchanged", "in place", "hit", "built", "patched"}
    assert known - {"patched"} - ({"built"} if prewarm else set()) <= set(bare) <= known
    assert any(k.endswith(" (memo)") for k in kinds) == prewarm
    assert "kept (memo)" not in kinds
    labels = iter(bare)
    for walk in walks:
        previous = None
        for i in range(len(walk)):
            m = loaded.native.matcher()
            for tok in walk[:i]:
                assert m.accept_token(tok)
            row = loaded.native.allocate_token_bitmask(1)
            m.fill_next_token_bitmask(row, 0)
            kind = next(labels)
            if previous is not None:
                assert bool(np.array_equal(row, previous)) == (kind in ("kept", "unchanged")), (i, kind)
            previous = row
    steps = sum(map(len, walks))
    times = np.linspace(1e-6, 2e-6, steps)
    lines = peers.kinds_table(kinds, times, None)
    counted = [int(line.split(" steps ")[0].split()[-1]) for line in lines]
    assert sum(counted) == steps and counted == sorted(counted, reverse=True)
    # the steps at or below the median: as many as the times say, over all kinds
    below = sum(int(line.rsplit(":", 1)[1]) for line in lines)
    assert below == int(np.sum(times <= np.median(times)))


def test_a_timed_pass_times_every_step_and_acceptance(tmp_path: Path) -> None:
    """One timed pass without GLRMask: a time per step for every native variant and for the
    update matcher's acceptance of the walk's token, none for GLRMask's fill or commit (no
    timing is asserted, only what was timed)."""
    from bench import peers

    vocab = Vocabulary.from_bytes(TOKENS)
    case = peers.PeerCase("tiny", "lark", "tiny.lark")
    loaded = peers.load_case(case, GBNF, "", vocab, tmp_path)
    walks = [_walk(loaded.native, vocab, seed, 20) for seed in range(3)]
    steps = sum(map(len, walks))
    times, plans, _ = peers.timed_pass(loaded, walks, 0, None, cold=True)
    for k in ("native", "update", "class-fill", "expansion", "accept"):
        assert len(times[k]) == steps, k
        assert all(t >= 0 for t in times[k])
    assert times["glrmask"] == [] and times["commit"] == []
    assert sum(plans.values()) == steps


def test_the_targets_count_the_grammars_on_either_side_of_each_line() -> None:
    """The run's verdict: a ratio at the line meets it, one a thousandth past it does not (and is
    named with three places, where the tables show 0.50 for both), a grammar GLRMask did not run
    is left out and named, and the mismatches are summed."""
    from bench import peers

    nan = float("nan")
    lines = peers.targets_lines(
        [("a", 0.5, 1.0, 0), ("b", 0.501, 0.73, 0), ("c", 0.2, 1.004, 2), ("d", nan, nan, 1)]
    )
    assert (
        lines[0]
        == "# update median <= 0.5x GLRMask's: 2 of 3 grammars; the largest 0.501 (b); past it: b 0.501"
    )
    assert (
        lines[1] == "# update p99 <= 1x GLRMask's: 2 of 3 grammars; the largest 1.004 (c); past it: c 1.004"
    )
    assert lines[2] == "# mismatches against XGrammar's masks (fill and update): 3"
    assert lines[3] == "# without GLRMask: d"
    assert peers.targets_lines([]) == [
        "# update median <= 0.5x GLRMask's: 0 of 0 grammars",
        "# update p99 <= 1x GLRMask's: 0 of 0 grammars",
        "# mismatches against XGrammar's masks (fill and update): 0",
    ]
