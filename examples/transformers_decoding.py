"""Grammar-constrained generation with transformers, with and without compression.

Builds a tiny randomly initialised Llama model (no download) whose logit width is the real
Llama-3 vocabulary's, computes token classes for a grammar, and generates with
``model.generate`` under (a) XGrammar over the full vocabulary and (b) XGrammar over the
class representatives plus mask expansion.  Greedy and seeded sampling outputs must be
byte-identical; the script exits with status 1 if they are not.

Run::

    python examples/transformers_decoding.py [--grammar PATH] [--engine xgrammar|llguidance] [--device cuda]

With ``--device cuda`` the model and its logits live on the GPU, and the compressed path
expands the class masks there (the Triton kernel when Triton is installed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessorList

from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines import compile_full, compile_grammar
from formalgram_cfgzip.integrations.transformers import GrammarLogitsProcessor
from formalgram_cfgzip.vocabulary import Vocabulary

DEFAULT_GRAMMAR = r"""
root ::= (expr "=" ws term "\n")+
expr ::= term ([-+*/] term)*
term ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num ::= [0-9]+ ws
ws ::= [ \t\n]*
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grammar", type=Path, help="GBNF file (default: an arithmetic grammar)")
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--engine", default="xgrammar", choices=["xgrammar", "llguidance"])
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="torch device of the model and its logits")
    args = ap.parse_args()

    text = args.grammar.read_text(encoding="utf-8") if args.grammar else DEFAULT_GRAMMAR
    vocab = Vocabulary.builtin(args.vocab)
    t0 = time.perf_counter()
    classes = compress(text, vocab, progress=False)
    print(f"{vocab.size} tokens -> {classes.num_classes} classes in {time.perf_counter() - t0:.1f} s")
    full = compile_full(vocab, text, engine=args.engine)
    small = compile_grammar(classes, text, engine=args.engine)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab.logit_width,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    device = torch.device(args.device)
    model = LlamaForCausalLM(config).to(device)
    model.train(False)
    stops = sorted(vocab.stop_ids)
    prompt = torch.full((args.batch, 1), min(vocab.special_ids, default=0), dtype=torch.long, device=device)

    def run(compiled: object, sample: bool) -> tuple[list[bytes], float]:
        processor = GrammarLogitsProcessor(compiled)  # type: ignore[arg-type]
        torch.manual_seed(1234)
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=args.new_tokens,
                do_sample=sample,
                temperature=1.0 if sample else None,
                top_p=None,
                top_k=None,
                logits_processor=LogitsProcessorList([processor]),
                eos_token_id=stops or None,
                pad_token_id=stops[0] if stops else 0,
            )
        elapsed = time.perf_counter() - t
        texts = [vocab.decode(int(i) for i in row[1:] if int(i) not in vocab.stop_ids) for row in out]
        return texts, elapsed

    ok = True
    for sample in (False, True):
        mode = "sampling (seed 1234)" if sample else "greedy"
        ref, t_full = run(full, sample)
        got, t_small = run(small, sample)
        same = ref == got
        ok &= same
        print(f"{mode}: identical={same}  full {t_full:.2f} s  compressed {t_small:.2f} s")
        for r in got:
            print("   ", r)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
