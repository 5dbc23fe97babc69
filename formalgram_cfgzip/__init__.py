"""formalgram_cfgzip: lossless token-space compression for grammar-constrained decoding.

The names users call: a :class:`Vocabulary`, :func:`compress` (offline, once per grammar and
tokenizer) giving :class:`TokenClasses` (saved and loaded with fingerprints), the engines
over the classes (:func:`compile_grammar`, and :func:`compile_full` for the uncompressed
reference; more in :mod:`formalgram_cfgzip.engines`), the mask expanders, and the errors.
The building blocks live in their modules: the displacement search in
:mod:`formalgram_cfgzip.search`, the cache format in :mod:`formalgram_cfgzip.cache`, the
integrations in :mod:`formalgram_cfgzip.integrations`.

Examples
--------
>>> from formalgram_cfgzip import Vocabulary, compress, compile_grammar
>>> vocab = Vocabulary([b"(", b")", b"()", b"x", b"</s>"], special_ids=[4], stop_ids=[4])
>>> classes = compress('root ::= "(" root ")" | "x"', vocab, progress=False)
>>> matcher = compile_grammar(classes, 'root ::= "(" root ")" | "x"').matcher()
>>> matcher.accept_token(0), matcher.accept_token(2)
(True, False)
"""

from __future__ import annotations

from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.compress import Compressor, compress
from formalgram_cfgzip.engines import compile_full, compile_grammar
from formalgram_cfgzip.errors import (
    BatchIndexError,
    CacheError,
    CfgzipError,
    ClassesInvariantError,
    ClassesMismatchError,
    EngineError,
    GrammarViolation,
    TokenIdError,
    VocabularyError,
)
from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander, apply_token_bitmask_inplace
from formalgram_cfgzip.json_schema import from_json_schema
from formalgram_cfgzip.many import Job, compress_many
from formalgram_cfgzip.vocabulary import Vocabulary

__version__ = "0.1.0"
__all__ = [
    "BatchIndexError",
    "CacheError",
    "CfgzipError",
    "ClassesInvariantError",
    "ClassesMismatchError",
    "Compressor",
    "EngineError",
    "GrammarViolation",
    "Job",
    "MaskExpander",
    "TokenClasses",
    "TokenIdError",
    "TorchMaskExpander",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "apply_token_bitmask_inplace",
    "compile_full",
    "compile_grammar",
    "compress",
    "compress_many",
    "from_json_schema",
]
