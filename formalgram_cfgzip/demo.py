"""The main job on built-in defaults: compress, then decode side by side with XGrammar.

``formalgram-cfgzip demo`` compresses a built-in grammar against a built-in (offline)
vocabulary, prints the compression summary, then takes a seeded random walk through the
grammar with XGrammar over the full vocabulary and over the class representatives at the
same time.  At every step it times both mask computations (the compressed one including the
expansion back to the full vocabulary) and checks the two masks are bit-identical.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

import numpy as np

from formalgram_cfgzip.cli import _read_grammar, _summary


def _show(tok: bytes | None, width: int = 18) -> str:
    text = repr((tok or b"").decode("utf-8", "replace"))
    return text if len(text) <= width else text[: width - 3] + "..."


def run_demo(
    *, grammar: str = "builtin:minic", tokenizer: str = "llama3", steps: int = 64, seed: int = 0
) -> int:
    """Run the demo; returns 0 when every mask matched, 1 otherwise.

    Parameters
    ----------
    grammar : str
        ``builtin:minic``, ``builtin:json`` or a grammar file path.
    tokenizer : str
        A built-in vocabulary name or a tokenizer file (see ``Vocabulary.load``).
    steps : int
        Number of constrained decoding steps.
    seed : int
        Seed of the random walk.
    """
    from formalgram.syntax.gbnf import parse_gbnf
    from formalgram_cfgzip.classes import compress
    from formalgram_cfgzip.engines import xgrammar as xe
    from formalgram_cfgzip.vocabulary import Vocabulary

    text = _read_grammar(grammar)
    g = parse_gbnf(text)
    print(f"grammar    {grammar}: {len(g.rules)} rules, {len(g.names)} nonterminals")
    t0 = time.perf_counter()
    vocab = Vocabulary.load(tokenizer)
    print(f"tokenizer  {tokenizer}: {vocab.size} tokens, loaded in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    classes = compress(g, vocab, progress=sys.stderr.isatty())
    print("\ncompression (offline, once per grammar and tokenizer):")
    print(_summary(classes, time.perf_counter() - t0))

    full = xe.compile_full(vocab, text)
    comp = xe.compile_grammar(classes, text)
    fm = full.matcher()
    cm = comp.matcher()
    fb = full.allocate_token_bitmask(1)
    cb = comp.allocate_token_bitmask(1)
    width = vocab.logit_width
    rng = random.Random(seed)
    t_full: list[float] = []
    t_comp: list[float] = []
    mismatches = 0
    out: list[bytes] = []
    print(f"\nconstrained walk ({steps} steps, seed {seed}); mask times in microseconds:")
    print(f"  {'step':>4}  {'allowed':>7}  {'full':>7}  {'classes+expand':>14}  {'same':>4}  token")
    for step in range(steps):
        a = time.perf_counter()
        fm.fill_next_token_bitmask(fb)
        b = time.perf_counter()
        cm.fill_next_token_bitmask(cb)
        c = time.perf_counter()
        t_full.append((b - a) * 1e6)
        t_comp.append((c - b) * 1e6)
        same = bool(np.array_equal(fb, cb))
        mismatches += not same
        bits = np.unpackbits(fb.view(np.uint8), bitorder="little")[:width]
        allowed = np.flatnonzero(bits)
        if allowed.size == 0:
            print(f"  {step:>4}  {0:>7}  (no token allowed: the walk is complete)")
            break
        nonstop = [int(i) for i in allowed if int(i) not in vocab.stop_ids]
        pool = nonstop if nonstop and step < steps - 1 else [int(i) for i in allowed]
        # prefer longer tokens half of the time: they exercise multi-symbol displacements
        pick = pool[rng.randrange(len(pool))]
        if rng.random() < 0.5:
            cands = [pool[rng.randrange(len(pool))] for _ in range(16)]
            pick = max(cands, key=lambda i: len(vocab.tokens[i] or b""))
        tok = vocab.tokens[pick]
        if step < 12 or step % 8 == 0 or not same:
            print(
                f"  {step:>4}  {allowed.size:>7}  {t_full[-1]:>7.0f}  {t_comp[-1]:>14.0f}  "
                f"{'yes' if same else 'NO':>4}  {_show(tok)}"
            )
        if not fm.accept_token(pick) or not cm.accept_token(pick):
            print("  engine refused an allowed token; stopping")
            mismatches += 1
            break
        if pick in vocab.stop_ids:
            break
        out.append(tok or b"")
    n = len(t_full)
    med_f = statistics.median(t_full)
    med_c = statistics.median(t_comp)
    print(
        f"\nper-step mask time, median of {n}: full vocabulary {med_f:.0f} us, "
        f"classes + expansion {med_c:.0f} us ({med_f / max(med_c, 1e-9):.1f}x faster)"
    )
    print(f"masks identical at every step: {'yes' if mismatches == 0 else f'NO ({mismatches} mismatches)'}")
    sample = b"".join(out).decode("utf-8", "replace")
    print("\ngenerated text (random tokens under the grammar):")
    print("  " + sample[:400].replace("\n", "\n  "))
    return 0 if mismatches == 0 else 1
