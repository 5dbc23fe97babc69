"""What building an engine's full-vocabulary tokenizer costs (done once per vocabulary and kept).

``compile_full`` builds the engine's tokenizer over every logit index of the vocabulary the
first time it sees that vocabulary (:func:`formalgram_cfgzip.engines.tokens.per_vocabulary`);
this times that build alone, ``--repeats`` times, and prints the median.

Usage (from the repository root)::

    python -m bench.tokenizer_bench                       # llguidance, llama3
    python -m bench.tokenizer_bench --engine xgrammar --vocab qwen3 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from formalgram_cfgzip.engines.tokens import full_engine_tokens
from formalgram_cfgzip.vocabulary import Vocabulary


def _builder(engine: str, vocab: Vocabulary) -> Callable[[], Any]:
    """A fresh build of ``engine``'s tokenizer over every logit index of ``vocab`` (no cache)."""
    tokens = full_engine_tokens(vocab)
    stops = sorted(vocab.stop_ids)
    if engine == "llguidance":
        from formalgram_cfgzip.engines import llguidance

        return lambda: llguidance._tokenizer(tokens, stops)
    import xgrammar

    return lambda: xgrammar.TokenizerInfo(tokens, vocab_size=vocab.logit_width, stop_token_ids=stops)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("llguidance", "xgrammar"), default="llguidance")
    parser.add_argument("--vocab", default="llama3", help="a built-in vocabulary name")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    vocab = Vocabulary.builtin(args.vocab)
    build = _builder(args.engine, vocab)
    times: list[float] = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        build()
        times.append(time.perf_counter() - t0)
    runs = ", ".join(f"{t:.3f}" for t in times)
    print(
        f"{args.engine} tokenizer over {vocab.logit_width:,} logit indices ({args.vocab}): "
        f"median {statistics.median(times):.3f} s over {args.repeats} runs ({runs})"
    )


if __name__ == "__main__":
    main()
