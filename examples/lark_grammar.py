"""A Lark grammar in, a byte-level grammar out, then compressed for a tokenizer.

Run from the repository root: ``python examples/lark_grammar.py [GRAMMAR.lark]`` (default: a
small arithmetic grammar).  The grammar is read by :func:`formalgram.parse_lark`
(``%import common`` and ``%ignore`` included), a few strings are checked with the Earley
recognizer, and the grammar is compressed against the built-in llama3 vocabulary: tokens with
equal displacement share one class.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import formalgram as fg
from formalgram_cfgzip import Vocabulary, compress

GRAMMAR = r"""
?start: sum
?sum: product | sum "+" product -> add | sum "-" product -> sub
?product: atom | product "*" atom -> mul | product "/" atom -> div
?atom: NUMBER -> number
     | "-" atom -> neg
     | NAME "(" [sum ("," sum)*] ")" -> call
     | NAME -> var
     | "(" sum ")"
NAME: /[a-z_][a-z_0-9]*/
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
"""


def main() -> None:
    text = Path(sys.argv[1]).read_text("utf-8") if len(sys.argv) > 1 else GRAMMAR
    g = fg.parse_lark(text)
    print(f"grammar: {g.stats()}")
    for s in ["1 + 2*3", "max(1, -x) / 4.5e3", "(1 +", "1 2"]:
        print(f"  {s!r:24} accepted: {fg.accepts(g, s.encode())}")
    vocab = Vocabulary.builtin("llama3")
    t0 = time.perf_counter()
    classes = compress(g, vocab, progress=False)
    dt = time.perf_counter() - t0
    print(f"llama3: {len(vocab)} tokens -> {classes.num_classes} classes in {dt:.1f} s")


if __name__ == "__main__":
    main()
