"""What every tokenizer loader shares: its options, file reading, id checks, stops, assembly.

Each loader reads its format into token bytes, special ids and a ``content -> id`` map,
then hands them to :func:`assemble`, which settles the stop tokens (:func:`resolve_stops`)
and builds the :class:`~formalgram_cfgzip.vocabulary.model.Vocabulary`, naming the file in
every error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.model import Vocabulary

__all__ = [
    "COMMON_STOP_TOKENS",
    "MAX_TOKEN_ID",
    "LoadOptions",
    "assemble",
    "check_id",
    "read_file_bytes",
    "resolve_stops",
]

COMMON_STOP_TOKENS: tuple[str, ...] = (
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<eos>",
    "<|eos|>",
    "[EOS]",
)
"""Stop tokens recognised by name when a tokenizer says nothing about its end of generation."""

MAX_TOKEN_ID = 1 << 24
"""Ids (and sizes) from a file must stay below this: a crafted file must not make a loader
allocate gigabytes.  The largest real vocabularies have about 2**18 tokens."""


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The caller's choices common to the file loaders (all optional).

    Parameters
    ----------
    stop_tokens : iterable of str or None
        Stop tokens by text; with ``stop_ids``, replaces the loader's own detection.
    stop_ids : iterable of int or None
        Stop tokens by id.
    logit_width : int or None
        Length of the model's logit vector (default: the loader's, usually the size).
    name : str or None
        Label of the vocabulary (default: from the file name).

    Examples
    --------
    >>> LoadOptions(name="tiny").label("tokenizer")
    'tiny'
    >>> LoadOptions().label("tokenizer"), LoadOptions().given, LoadOptions(stop_ids=[2]).given
    ('tokenizer', False, True)
    """

    stop_tokens: Iterable[str] | None = None
    stop_ids: Iterable[int] | None = None
    logit_width: int | None = None
    name: str | None = None

    @property
    def given(self) -> bool:
        """Whether any option is set."""
        return any(v is not None for v in (self.stop_tokens, self.stop_ids, self.logit_width, self.name))

    def label(self, default: str) -> str:
        """The name to give the vocabulary: ``name`` when set, else ``default``."""
        return self.name if self.name is not None else default


def check_id(value: object, what: str, source: str) -> int:
    """A token id read from a file, checked: an int in ``[0, MAX_TOKEN_ID)``.

    Parameters
    ----------
    value : object
        The value read.
    what : str
        What holds it, for the message (e.g. ``"vocab entry 'a'"``).
    source : str
        The file (or object) read, for the message.

    Returns
    -------
    int

    Raises
    ------
    VocabularyError
        If ``value`` is not an int (``bool`` is refused), is negative, or is at least
        :data:`MAX_TOKEN_ID`.

    Examples
    --------
    >>> check_id(7, "entry 'a'", "t.json")
    7
    >>> check_id(-1, "entry 'a'", "t.json")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: t.json: entry 'a' has an invalid token id -1
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise VocabularyError(f"{source}: {what} has an invalid token id {value!r}")
    if value >= MAX_TOKEN_ID:
        raise VocabularyError(f"{source}: {what} has token id {value}, beyond the supported {MAX_TOKEN_ID}")
    return value


def read_file_bytes(path: str | os.PathLike[str], what: str) -> tuple[Path, bytes]:
    """The bytes of a tokenizer file.

    Parameters
    ----------
    path : path
        The file.
    what : str
        The kind of file, for messages (e.g. ``"tokenizer.json"``).

    Returns
    -------
    (Path, bytes)
        The path and the file's contents.

    Raises
    ------
    VocabularyError
        If the path is a directory, does not exist, cannot be read, or holds only white space.

    Examples
    --------
    >>> read_file_bytes("no/such/file.json", "tokenizer.json")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: tokenizer.json file 'no/such/file.json' does not exist
    """
    p = Path(path)
    if p.is_dir():
        raise VocabularyError(f"{str(p)!r} is a directory, not a {what} file")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise VocabularyError(f"{what} file {str(p)!r} does not exist") from None
    except OSError as exc:
        raise VocabularyError(f"cannot read {what} file {str(p)!r}: {exc}") from None
    if not raw.strip():
        raise VocabularyError(f"{what} file {str(p)!r} is empty")
    return p, raw


def resolve_stops(
    by_content: Mapping[str, int],
    tokens: Sequence[bytes | None],
    *,
    options: LoadOptions,
    configured: Iterable[int] | None,
    source: str,
) -> list[int]:
    """Stop ids: the caller's choice if any, else the tokenizer's configuration, else common names.

    Parameters
    ----------
    by_content : mapping of str to int
        Token text -> id, for stop tokens given by text and for :data:`COMMON_STOP_TOKENS`.
    tokens : sequence of bytes or None
        The token bytes by id (``None`` for a hole).
    options : LoadOptions
        ``stop_tokens`` and ``stop_ids``; when either is set it replaces detection.
    configured : iterable of int or None
        Ids the tokenizer's own files name; ids past the tokenizer or on holes are dropped
        (configuration files may name padding ids).
    source : str
        The file read, for messages.

    Returns
    -------
    list of int

    Raises
    ------
    VocabularyError
        If a stop token given by text is not in the vocabulary.

    Examples
    --------
    >>> tokens = [b"a", b"</s>", b"<|im_end|>"]
    >>> by_content = {"a": 0, "</s>": 1, "<|im_end|>": 2}
    >>> resolve_stops(by_content, tokens, options=LoadOptions(), configured=None, source="t")
    [1, 2]
    >>> resolve_stops(by_content, tokens, options=LoadOptions(), configured=[2, 9], source="t")
    [2]
    >>> resolve_stops(by_content, tokens, options=LoadOptions(stop_tokens="a"), configured=[2], source="t")
    [0]
    """
    if options.stop_tokens is not None or options.stop_ids is not None:
        out: list[int] = []
        stop_tokens = options.stop_tokens
        if isinstance(stop_tokens, str):
            stop_tokens = [stop_tokens]
        for text in stop_tokens or ():
            if text not in by_content:
                raise VocabularyError(f"{source}: stop token {text!r} is not in the vocabulary")
            out.append(by_content[text])
        out.extend(options.stop_ids or ())
        return out
    if configured is not None:
        return [i for i in configured if 0 <= i < len(tokens) and tokens[i] is not None]
    return [by_content[name] for name in COMMON_STOP_TOKENS if name in by_content]


def assemble(
    tokens: Sequence[bytes | None],
    special: Iterable[int],
    by_content: Mapping[str, int],
    *,
    options: LoadOptions,
    configured_stops: Iterable[int] | None,
    logit_width: int | None,
    default_name: str,
    source: str,
) -> Vocabulary:
    """The vocabulary a loader read: stops resolved, name chosen, errors naming the file.

    Parameters
    ----------
    tokens : sequence of bytes or None
        Token bytes by id.
    special : iterable of int
        Special ids.
    by_content : mapping of str to int
        Token text -> id (see :func:`resolve_stops`).
    options : LoadOptions
        The caller's options; ``stop_tokens``/``stop_ids`` and ``name`` are used here.
    configured_stops : iterable of int or None
        The stop ids the tokenizer's files name (see :func:`resolve_stops`).
    logit_width : int or None
        The logit width (the loader applies ``options.logit_width`` and its own default).
    default_name : str
        The name when ``options.name`` is not set.
    source : str
        The file read, for messages.

    Returns
    -------
    Vocabulary

    Raises
    ------
    VocabularyError
        If a stop token is unknown or the vocabulary is invalid (no token at all, a
        special or stop id out of range or on a hole, a logit width below the size); the
        message starts with ``source``.

    Examples
    --------
    >>> assemble([b"a", b"</s>"], [1], {"a": 0, "</s>": 1}, options=LoadOptions(),
    ...          configured_stops=None, logit_width=4, default_name="t", source="t.model")
    Vocabulary('t', size=2, logit_width=4, special=1, stop=[1])
    >>> assemble([b"a"], [], {}, options=LoadOptions(stop_ids=[3]), configured_stops=None,
    ...          logit_width=None, default_name="t", source="t.model")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: t.model: stop id 3 is out of range: the vocabulary has 1 tokens (ids 0-0)
    """
    stops = resolve_stops(by_content, tokens, options=options, configured=configured_stops, source=source)
    try:
        return Vocabulary(
            tokens,
            special_ids=special,
            stop_ids=stops,
            logit_width=logit_width,
            name=options.label(default_name),
        )
    except VocabularyError as exc:
        raise VocabularyError(f"{source}: {exc}") from None
