"""Exceptions raised on purpose by :mod:`formalgram_cfgzip`.

All of them derive from :class:`formalgram.errors.FormalgramError`, so one ``except``
clause catches every deliberate error of both packages.
"""

from __future__ import annotations

from formalgram.errors import FormalgramError

__all__ = [
    "BatchIndexError",
    "CacheError",
    "CfgzipError",
    "ClassesInvariantError",
    "ClassesMismatchError",
    "EngineError",
    "GrammarViolation",
    "ManifestError",
    "TokenIdError",
    "VocabularyError",
]


class CfgzipError(FormalgramError):
    """Base class of every error raised on purpose by formalgram_cfgzip."""


class VocabularyError(CfgzipError, ValueError):
    """A vocabulary is malformed, or a tokenizer file cannot be read as one."""


class ManifestError(CfgzipError, ValueError):
    """A compress-many manifest that cannot be read (with the line that is wrong)."""


class CacheError(CfgzipError):
    """A cache directory is missing, corrupted, or was computed for other inputs."""


class ClassesInvariantError(CfgzipError, ValueError):
    """A TokenClasses breaks an invariant the engines rely on (see ``TokenClasses.validate``)."""


class EngineError(CfgzipError, ValueError):
    """A grammar engine rejected the grammar, or an adapter or expander was misused."""


class ClassesMismatchError(EngineError):
    """TokenClasses computed for another vocabulary or grammar, or inconsistent with its vocabulary."""


class TokenIdError(EngineError, IndexError):
    """A token id outside the vocabulary's logit range."""


class BatchIndexError(EngineError, IndexError):
    """A batch row index outside the bitmask."""


class GrammarViolation(EngineError):
    """A token the grammar forbids reached a logits processor (the mask was bypassed)."""
