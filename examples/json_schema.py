"""A JSON Schema per request: XGrammar's grammar for it, compressed on arrival, then decoded.

Run from the repository root: ``python examples/json_schema.py [SCHEMA.json]``.
The schema goes through XGrammar's own converter (``from_json_schema``), so the classes
belong to the language XGrammar enforces for it.  A :class:`Compressor` keeps the
vocabulary's preparation between requests and answers a repeated schema from its cache.
A document valid for the schema is then fed token by token: at every step the compressed
mask must equal XGrammar's full-vocabulary mask and allow the document's next token.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from formalgram_cfgzip import Compressor, Vocabulary, engines, from_json_schema
from formalgram_cfgzip.demo import greedy_tokenize

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
}
DOCUMENT = {"name": "Ada Lovelace", "age": 36, "tags": ["mathematician", "writer"]}


def main() -> None:
    schema = json.loads(Path(sys.argv[1]).read_text("utf-8")) if len(sys.argv) > 1 else SCHEMA
    vocab = Vocabulary.builtin("llama3")
    compressor = Compressor(vocab)  # the vocabulary is prepared once, here

    text = from_json_schema(schema, any_whitespace=False)  # XGrammar's grammar, as GBNF text
    t0 = time.perf_counter()
    classes = compressor.compress(text)
    t1 = time.perf_counter()
    compressor.compress(text)  # the same schema again: from the cache
    t2 = time.perf_counter()
    print(f"{classes.num_classes} classes for {vocab.size} tokens")
    print(f"compressed in {(t1 - t0) * 1e3:.0f} ms; again from the cache in {(t2 - t1) * 1e6:.0f} us")

    compressed = engines.compile_grammar(classes, text)
    full = engines.compile_full(vocab, text)
    if len(sys.argv) > 1:
        return  # no known document for a user's schema: compression only
    document = json.dumps(DOCUMENT, separators=(", ", ": ")).encode()
    tokens = greedy_tokenize(vocab, document)  # longest match: drives the walk, not the model's tokenizer
    mc, mf = compressed.matcher(), full.matcher()
    bc, bf = compressed.allocate_token_bitmask(1), full.allocate_token_bitmask(1)
    for tok in tokens:
        mc.fill_next_token_bitmask(bc)
        mf.fill_next_token_bitmask(bf)
        assert np.array_equal(bc, bf), "compressed mask differs from XGrammar's"
        assert (bf[0, tok >> 5] >> (tok & 31)) & 1, f"token {tok} of the document is not allowed"
        assert mc.accept_token(tok) and mf.accept_token(tok)
    print(f"{document.decode()!r}: {len(tokens)} tokens, masks identical at every step")


if __name__ == "__main__":
    main()
