"""Exceptions raised on purpose by :mod:`formalgram_cfgzip`.

All of them derive from :class:`formalgram.errors.FormalgramError`, so one ``except``
clause catches every deliberate error of both packages.
"""

from __future__ import annotations

import traceback
from typing import TypeVar

from formalgram.errors import FormalgramError

_E = TypeVar("_E", bound=BaseException)

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
    "without_frames",
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


def without_frames(exc: _E) -> _E:
    """``exc``, kept to be raised later in another thread, with no frame held.

    An exception caught in a worker thread and stored on the object that thread works for
    holds, through its traceback, the frame that caught it, whose locals hold that object:
    a reference cycle, which only the cyclic collector frees, in the middle of some later
    request.  The tracebacks along ``exc``'s chain (its cause and context) are dropped; an
    error raised by mistake (not a :class:`~formalgram.errors.FormalgramError`) keeps its
    traceback's text as a note, for the report of the bug.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    BaseException
        ``exc`` itself, changed in place.

    Notes
    -----
    O(frames in the chain's tracebacks).

    Examples
    --------
    >>> try:
    ...     raise EngineError("no")
    ... except EngineError as caught:
    ...     kept = without_frames(caught)
    >>> kept.__traceback__ is None, str(kept)
    (True, 'no')
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if item.__traceback__ is not None:
            if not isinstance(item, FormalgramError):
                lines = traceback.format_tb(item.__traceback__)
                item.add_note("raised in another thread:\n" + "".join(lines).rstrip())
            item.__traceback__ = None
        todo.extend(e for e in (item.__cause__, item.__context__) if e is not None)
    return exc
