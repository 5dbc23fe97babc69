"""Batch decoding: many sequences under one grammar, masks filled in one call per step.

Run from the repository root: ``python examples/batch_decoding.py [BATCH] [STEPS]``.
Each row follows its own seeded random walk; the compressed masks (representatives +
expansion) are checked against the full-vocabulary engine for every row and step.
"""

from __future__ import annotations

import random
import sys
import time

import numpy as np

from formalgram_cfgzip import Vocabulary, compress
from formalgram_cfgzip.engines import xgrammar as engine
from formalgram_cfgzip.sources import builtin_grammar_text


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    text = builtin_grammar_text("json")
    vocab = Vocabulary.builtin("llama3")
    classes = compress(text, vocab, progress=False)
    full = engine.compile_full(vocab, text)
    comp = engine.compile_grammar(classes, text)
    fms = [full.matcher() for _ in range(batch)]
    cms = [comp.matcher() for _ in range(batch)]
    fb = full.allocate_token_bitmask(batch)
    cb = comp.allocate_token_bitmask(batch)
    rngs = [random.Random(i) for i in range(batch)]
    t_full = t_comp = 0.0
    for _ in range(steps):
        a = time.perf_counter()
        full.fill_next_token_bitmask_batch(fms, fb)
        b = time.perf_counter()
        comp.fill_next_token_bitmask_batch(cms, cb)
        c = time.perf_counter()
        t_full += b - a
        t_comp += c - b
        assert np.array_equal(fb, cb), "compressed masks differ from the full-vocabulary engine"
        for row in range(batch):
            bits = np.unpackbits(fb[row].view(np.uint8), bitorder="little")[: vocab.logit_width]
            allowed = [int(i) for i in np.flatnonzero(bits) if int(i) not in vocab.stop_ids]
            if not allowed or fms[row].is_terminated():
                continue
            tok = allowed[rngs[row].randrange(len(allowed))]
            assert fms[row].accept_token(tok) and cms[row].accept_token(tok)
    print(f"batch {batch}, {steps} steps: masks identical at every row and step")
    print(f"per-step mask time: full {t_full / steps * 1e6:.0f} us, compressed {t_comp / steps * 1e6:.0f} us")


if __name__ == "__main__":
    main()
