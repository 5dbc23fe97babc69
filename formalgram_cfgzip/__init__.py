"""formalgram_cfgzip: lossless token-space compression for grammar-constrained decoding."""

from __future__ import annotations

# vocabulary helper: vocabularies, errors, cache
from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint, read_cache, write_cache

# displacements and classes
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.compress import Compressor, compress

# engines helper: mask expansion and engine adapters (engines themselves load lazily)
from formalgram_cfgzip.engines.base import BatchIndexError, ClassesMismatchError, EngineError, TokenIdError
from formalgram_cfgzip.errors import CacheError, CfgzipError, ClassesInvariantError, VocabularyError
from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander
from formalgram_cfgzip.json_schema import from_json_schema
from formalgram_cfgzip.many import Job, compress_many
from formalgram_cfgzip.search import DisplacementSearch
from formalgram_cfgzip.vocabulary import Vocabulary

__version__ = "0.1.0"
__all__ = [
    "BatchIndexError",
    "CacheError",
    "CfgzipError",
    "ClassesInvariantError",
    "ClassesMismatchError",
    "Compressor",
    "DisplacementSearch",
    "EngineError",
    "Job",
    "MaskExpander",
    "TokenClasses",
    "TokenIdError",
    "TorchMaskExpander",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "compress",
    "compress_many",
    "fingerprint_text",
    "from_json_schema",
    "grammar_fingerprint",
    "read_cache",
    "write_cache",
]
