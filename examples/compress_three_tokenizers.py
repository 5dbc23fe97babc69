"""Offline compression of one grammar for three tokenizers (Llama 3, Qwen 3, gpt-oss).

Run from the repository root: ``python examples/compress_three_tokenizers.py [GRAMMAR] [OUT]``.
Writes one cache directory per tokenizer under OUT (default ``out/classes``) and prints a table.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from formalgram import parse_gbnf
from formalgram_cfgzip import TokenClasses, Vocabulary, compress
from formalgram_cfgzip.sources import builtin_grammar_text


def main() -> None:
    text = Path(sys.argv[1]).read_text("utf-8") if len(sys.argv) > 1 else builtin_grammar_text("json")
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("out/classes")
    grammar = parse_gbnf(text)
    print(f"{'tokenizer':<15} {'tokens':>8} {'classes':>8} {'ratio':>8} {'invalid':>8} {'seconds':>8}")
    for name in ("llama3", "qwen3", "o200k_harmony"):
        vocab = Vocabulary.builtin(name)
        t0 = time.perf_counter()
        classes = compress(grammar, vocab, progress=False)
        dt = time.perf_counter() - t0
        classes.save(out / name)
        again = TokenClasses.load(out / name, grammar=grammar, vocab=vocab)  # fingerprints checked
        assert again.num_classes == classes.num_classes
        ratio = vocab.size / classes.num_classes
        print(
            f"{name:<15} {vocab.size:>8} {classes.num_classes:>8} {ratio:>8.1f} {len(classes.invalid):>8} {dt:>8.1f}"
        )


if __name__ == "__main__":
    main()
