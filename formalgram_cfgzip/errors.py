"""Exceptions raised on purpose by :mod:`formalgram_cfgzip`.

All of them derive from :class:`formalgram.errors.FormalgramError`, so one ``except``
clause catches every deliberate error of both packages.
"""

from __future__ import annotations

from formalgram.errors import FormalgramError

__all__ = ["CacheError", "CfgzipError", "VocabularyError"]


class CfgzipError(FormalgramError):
    """Base class of every error raised on purpose by formalgram_cfgzip."""


class VocabularyError(CfgzipError, ValueError):
    """A vocabulary is malformed, or a tokenizer file cannot be read as one."""


class CacheError(CfgzipError):
    """A cache directory is missing, corrupted, or was computed for other inputs."""
