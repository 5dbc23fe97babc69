"""The vocabulary model: token id -> exact bytes, plus special, stop and padding ids.

A :class:`Vocabulary` is the tokenizer-side input of the compression: for every token id
the exact byte string the token stands for (``None`` for an unused id, a *hole*), which
ids are special (control tokens such as ``<|eot_id|>`` that never match grammar text),
which ids end generation (stop tokens), and the width of the model's logit vector, which
may exceed the tokenizer's size (ids past the tokenizer are padding and never valid).
Its :meth:`~Vocabulary.fingerprint` identifies it in caches.

The ``from_*`` constructors, :meth:`~Vocabulary.builtin` and :meth:`~Vocabulary.load`
hand over to the loaders of :mod:`formalgram_cfgzip.vocabulary.loaders`, which turn the
common tokenizer formats into this one model.
"""

from __future__ import annotations

import hashlib
import operator
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import SupportsIndex, final

from formalgram_cfgzip.errors import VocabularyError

__all__ = ["Vocabulary"]

_FINGERPRINT_TAG = b"formalgram-vocabulary-v1\x00"


def _index(value: object, refusal: str) -> int:
    """``value`` as an int (numpy integers too; ``bool`` refused with ``refusal``)."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise VocabularyError(f"{refusal}, got {value!r}")
    return operator.index(value)


def _check_ids(ids: Iterable[int], what: str, tokens: tuple[bytes | None, ...]) -> frozenset[int]:
    """The ids as a set, each an integer naming a token (not out of range, not a hole)."""
    out: set[int] = set()
    size = len(tokens)
    for raw in ids:
        i = _index(raw, f"{what} ids must be integers")
        if i < 0 or i >= size:
            raise VocabularyError(
                f"{what} id {i} is out of range: the vocabulary has {size} tokens (ids 0-{size - 1})"
            )
        if tokens[i] is None:
            raise VocabularyError(f"{what} id {i} is a hole (no token has this id)")
        out.add(i)
    return frozenset(out)


@final
class Vocabulary:
    """An immutable token vocabulary: token id -> exact bytes.

    Parameters
    ----------
    tokens : sequence of bytes or None
        ``tokens[i]`` is the byte string of token ``i``; ``None`` marks a hole (an id that no
        token uses; never valid).  ``bytearray``/``memoryview`` entries are copied to ``bytes``.
    special_ids : iterable of int, keyword-only
        Control tokens; they never match grammar text (their stored bytes are only a label).
    stop_ids : iterable of int, keyword-only
        Tokens that end generation (usually special as well).
    logit_width : int or None, keyword-only
        Length of the model's logit vector, ``>= len(tokens)``; default ``len(tokens)``.
        Ids in ``[len(tokens), logit_width)`` are padding and never valid.
    name : str, keyword-only
        A label for messages and reports; not part of :meth:`fingerprint`.

    Raises
    ------
    VocabularyError
        If the vocabulary is empty or has no token at all, an entry is not bytes or None,
        a special or stop id is out of range or a hole, or ``logit_width < len(tokens)``.

    Notes
    -----
    Construction is O(total token bytes).  Equality and hashing compare everything but
    ``name``.

    Examples
    --------
    >>> v = Vocabulary([b"a", b"bc", None, b"</s>"], special_ids=[3], stop_ids=[3], logit_width=8)
    >>> v.size, v.logit_width, v.token_bytes(1)
    (4, 8, b'bc')
    >>> sorted(v.text_ids())
    [0, 1]
    """

    __slots__ = ("_fingerprint", "_invalid", "_logit_width", "_name", "_special_ids", "_stop_ids", "_tokens")

    def __init__(
        self,
        tokens: Sequence[bytes | None],
        *,
        special_ids: Iterable[int] = (),
        stop_ids: Iterable[int] = (),
        logit_width: int | None = None,
        name: str = "",
    ) -> None:
        if isinstance(tokens, (bytes, bytearray, str)):
            raise VocabularyError("tokens must be a sequence of byte strings, not a single string")
        converted: list[bytes | None] = []
        for i, tok in enumerate(tokens):
            if tok is None or type(tok) is bytes:
                converted.append(tok)
            elif isinstance(tok, (bytes, bytearray, memoryview)):
                converted.append(bytes(tok))
            else:
                raise VocabularyError(f"token {i} must be bytes or None, got {type(tok).__name__}")
        if not converted:
            raise VocabularyError("empty vocabulary: at least one token is needed")
        if all(t is None for t in converted):
            raise VocabularyError(f"vocabulary of {len(converted)} ids has no token (every id is a hole)")
        toks = tuple(converted)
        width = len(toks) if logit_width is None else _index(logit_width, "logit_width must be an integer")
        if width < len(toks):
            raise VocabularyError(
                f"logit_width {width} is smaller than the number of token ids ({len(toks)})"
            )
        self._tokens: tuple[bytes | None, ...] = toks
        self._special_ids: frozenset[int] = _check_ids(special_ids, "special", toks)
        self._stop_ids: frozenset[int] = _check_ids(stop_ids, "stop", toks)
        self._logit_width: int = width
        self._name: str = str(name)
        self._fingerprint: str = ""
        self._invalid: tuple[int, ...] | None = None

    # -- alternate constructors ---------------------------------------------------------
    # Each hands over to the reader of its format, imported when called: the readers build
    # Vocabulary objects, so this module cannot import them at its top.
    @classmethod
    def from_bytes(
        cls,
        tokens: Sequence[bytes | None],
        *,
        special_ids: Iterable[int] = (),
        stop_ids: Iterable[int] = (),
        logit_width: int | None = None,
        name: str = "",
    ) -> Vocabulary:
        """Same as the constructor (a list of byte strings indexed by token id).

        Examples
        --------
        >>> Vocabulary.from_bytes([b"a", b"b"], name="ab")
        Vocabulary('ab', size=2, logit_width=2, special=0, stop=[])
        """
        return cls(tokens, special_ids=special_ids, stop_ids=stop_ids, logit_width=logit_width, name=name)

    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str],
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a Hugging Face ``tokenizer.json`` (byte-level BPE, or SentencePiece-style BPE/Unigram).

        Parameters
        ----------
        path : path
            The ``tokenizer.json`` file (a Mistral ``tekken.json`` is read too).
        stop_tokens, stop_ids : optional
            Stop tokens by text and/or id; when either is given it replaces detection.
            Otherwise the stop ids are read from sibling ``generation_config.json`` /
            ``config.json`` (``eos_token_id``) and ``tokenizer_config.json``
            (``eos_token``), and failing those from :data:`COMMON_STOP_TOKENS` by name.
        logit_width : int, optional
            Default: ``vocab_size`` of a sibling ``config.json`` when present, else the size.
        name : str, optional
            Default: the name of the folder holding the file.

        Returns
        -------
        Vocabulary
            Tokens decoded to the bytes the tokenizer writes (GPT-2 byte map, or ``▁`` as a
            space and ``<0xNN>`` as a byte); special added tokens and the unknown token are
            special ids.

        Raises
        ------
        VocabularyError
            If the file is missing, empty, not JSON, not a tokenizer, a WordPiece or
            WordLevel tokenizer (no fixed bytes per token), has an invalid token id, or a
            stop token is unknown.

        See Also
        --------
        formalgram_cfgzip.vocabulary.loaders.hf : the reader and its rules (O(file size)).

        Examples
        --------
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> model = {"type": "BPE", "vocab": {"a": 0, "Ġb": 1, "</s>": 2}, "merges": []}
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp) / "tokenizer.json"
        ...     _ = path.write_text(json.dumps({"model": model, "decoder": {"type": "ByteLevel"}}))
        ...     Vocabulary.from_tokenizer_json(path, stop_tokens=["</s>"], name="tiny").tokens
        (b'a', b' b', b'</s>')
        """
        from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
        from formalgram_cfgzip.vocabulary.loaders.hf import load_tokenizer_json

        return load_tokenizer_json(path, LoadOptions(stop_tokens, stop_ids, logit_width, name))

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, int] | None = None,
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a ``.tiktoken`` file (one ``<base64 token> <rank>`` per line; rank = id).

        Parameters
        ----------
        path : path
            The ``.tiktoken`` file.
        special_tokens : mapping of str to int, optional
            Special tokens (text -> id); their ids must not be ranks of the file.
        stop_tokens, stop_ids, logit_width, name : optional
            As for :meth:`from_tokenizer_json`; by default the stop tokens are the special
            tokens named in :data:`COMMON_STOP_TOKENS`, and the name is the file's.

        Returns
        -------
        Vocabulary
            Ids missing from the file and the special tokens are holes.

        Raises
        ------
        VocabularyError
            If the file is not a ``.tiktoken`` file, or a special id is invalid.

        See Also
        --------
        formalgram_cfgzip.vocabulary.loaders.tiktoken : the reader (O(file size)).
        """
        from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
        from formalgram_cfgzip.vocabulary.loaders.tiktoken import load_tiktoken

        specials = dict(special_tokens or {})
        return load_tiktoken(path, specials, LoadOptions(stop_tokens, stop_ids, logit_width, name))

    @classmethod
    def from_sentencepiece(
        cls,
        path: str | os.PathLike[str],
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a SentencePiece ``.model`` file (read directly; the sentencepiece package is not needed).

        Parameters
        ----------
        path : path
            The ``.model`` file.
        stop_tokens, stop_ids, logit_width, name : optional
            As for :meth:`from_tokenizer_json`; by default the stop token is ``</s>`` when
            it is a control piece, and the name is the file's.

        Returns
        -------
        Vocabulary
            Control and unknown pieces are special, unused ones holes; ``▁`` is a space.

        Raises
        ------
        VocabularyError
            If the file is not a SentencePiece model (a truncated or malformed protobuf
            message, a piece that is not UTF-8, no pieces).

        See Also
        --------
        formalgram_cfgzip.vocabulary.loaders.sentencepiece : the reader (O(file size)).

        Examples
        --------
        >>> import mistral_common
        >>> from pathlib import Path
        >>> data = Path(mistral_common.__file__).parent / "data"
        >>> Vocabulary.from_sentencepiece(data / "tokenizer.model.v1", name="mistral-v1")
        Vocabulary('mistral-v1', size=32000, logit_width=32000, special=3, stop=[2])
        """
        from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
        from formalgram_cfgzip.vocabulary.loaders.sentencepiece import load_sentencepiece

        return load_sentencepiece(path, LoadOptions(stop_tokens, stop_ids, logit_width, name))

    @classmethod
    def from_transformers(
        cls,
        tokenizer: object,
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Build a vocabulary from a loaded ``transformers`` tokenizer.

        Parameters
        ----------
        tokenizer : object
            A fast tokenizer (read through its ``tokenizer.json`` serialisation) or a slow
            byte-level or SentencePiece one (read through ``get_vocab()``).
        stop_tokens, stop_ids, logit_width, name : optional
            As for :meth:`from_tokenizer_json`; by default the stop id is ``eos_token_id``,
            the logit width ``len(tokenizer)`` (pass the model config's ``vocab_size`` when
            it is larger) and the name ``name_or_path``.

        Returns
        -------
        Vocabulary

        Raises
        ------
        VocabularyError
            For an object that is not a supported tokenizer, or invalid token ids.

        See Also
        --------
        formalgram_cfgzip.vocabulary.loaders.transformers : the reader (O(vocabulary size)).

        Examples
        --------
        >>> Vocabulary.from_transformers(object())
        Traceback (most recent call last):
        ...
        formalgram_cfgzip.errors.VocabularyError: object is not a transformers tokenizer
        """
        from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
        from formalgram_cfgzip.vocabulary.loaders.transformers import load_transformers

        return load_transformers(tokenizer, LoadOptions(stop_tokens, stop_ids, logit_width, name))

    @classmethod
    def builtin(cls, name: str) -> Vocabulary:
        """One of the offline vocabularies (cached).

        Parameters
        ----------
        name : str
            One of :data:`BUILTIN_NAMES`: ``llama3``, ``qwen3``, ``o200k_harmony``,
            ``o200k_base``, ``cl100k_base`` (from quicktok-v1), ``mistral``, ``mistral-v1``
            and ``mistral-tekken`` (from mistral-common).

        Returns
        -------
        Vocabulary
            The same object on every call with the same name.

        Raises
        ------
        VocabularyError
            For an unknown name or a missing package.

        See Also
        --------
        formalgram_cfgzip.vocabulary.builtins : where each comes from.

        Examples
        --------
        >>> llama = Vocabulary.builtin("llama3")
        >>> llama.size, llama.logit_width, llama.decode([9906, 1917])
        (128256, 128256, b'Hello world')
        >>> Vocabulary.builtin("llama3") is llama
        True
        """
        from formalgram_cfgzip.vocabulary.builtins import builtin

        return builtin(name)

    @classmethod
    def load(
        cls,
        spec: str | os.PathLike[str],
        *,
        stop_tokens: Iterable[str] | None = None,
        stop_ids: Iterable[int] | None = None,
        logit_width: int | None = None,
        name: str | None = None,
    ) -> Vocabulary:
        """Load a vocabulary from a CLI-style spec.

        Parameters
        ----------
        spec : str or path
            A path to a ``tokenizer.json`` (or a folder holding one), a ``.tiktoken``
            file, a SentencePiece ``.model`` file, or a built-in name.
        stop_tokens, stop_ids, logit_width, name : optional, keyword-only
            Passed to the file loaders (see :meth:`from_tokenizer_json`); none may be given
            for a built-in.

        Returns
        -------
        Vocabulary

        Raises
        ------
        VocabularyError
            For a spec that is none of these, and whatever the file's loader raises.
        TypeError
            For an unknown keyword (as for any Python function).

        See Also
        --------
        formalgram_cfgzip.vocabulary.sniff : how the format is recognised.

        Examples
        --------
        >>> Vocabulary.load("cl100k_base") is Vocabulary.builtin("cl100k_base")
        True
        >>> Vocabulary.load("no-such-tokenizer")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        formalgram_cfgzip.errors.VocabularyError: no tokenizer 'no-such-tokenizer': ...
        """
        from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
        from formalgram_cfgzip.vocabulary.sniff import load_spec

        return load_spec(spec, LoadOptions(stop_tokens, stop_ids, logit_width, name))

    # -- attributes ---------------------------------------------------------------------
    @property
    def tokens(self) -> tuple[bytes | None, ...]:
        """Byte string of every token id (``None`` for holes)."""
        return self._tokens

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of control tokens; they never match grammar text."""
        return self._special_ids

    @property
    def stop_ids(self) -> frozenset[int]:
        """Ids of tokens that end generation."""
        return self._stop_ids

    @property
    def logit_width(self) -> int:
        """Length of the logit vector (``>= size``; the excess ids are padding)."""
        return self._logit_width

    @property
    def size(self) -> int:
        """Number of token ids, holes included (``len(tokens)``)."""
        return len(self._tokens)

    @property
    def name(self) -> str:
        """Label of the vocabulary (not part of the fingerprint)."""
        return self._name

    def __len__(self) -> int:
        return len(self._tokens)

    def token_bytes(self, token_id: int) -> bytes | None:
        """Bytes of one token.

        Parameters
        ----------
        token_id : int
            An id in ``[0, size)``.

        Returns
        -------
        bytes or None
            ``None`` for a hole.

        Raises
        ------
        VocabularyError
            If the id is out of range.
        """
        if token_id < 0 or token_id >= len(self._tokens):
            raise VocabularyError(
                f"token id {token_id} is out of range (vocabulary size {len(self._tokens)})"
            )
        return self._tokens[token_id]

    def text_ids(self) -> list[int]:
        """Ids of the tokens that can match grammar text: not holes, not special, ascending."""
        special = self._special_ids
        return [i for i, t in enumerate(self._tokens) if t is not None and i not in special]

    def invalid_ids(self) -> tuple[int, ...]:
        """Logit indices that are never allowed under any grammar: holes, padding ids, empty
        tokens and special tokens, stop tokens excepted (the invalid class of every
        :class:`~formalgram_cfgzip.classes.TokenClasses` holds them).

        Returns
        -------
        tuple of int
            Ascending.

        Notes
        -----
        Computed once per vocabulary object, O(size); O(1) afterwards.

        Examples
        --------
        >>> Vocabulary([b"a", b"", None, b"<s>", b"</s>"], special_ids=[3, 4], stop_ids=[4], logit_width=6).invalid_ids()
        (1, 2, 3, 5)
        """
        if self._invalid is None:
            stop = self._stop_ids
            never = {i for i, t in enumerate(self._tokens) if not t and i not in stop}
            never.update(i for i in self._special_ids if i not in stop)
            never.update(range(len(self._tokens), self._logit_width))
            self._invalid = tuple(sorted(never))
        return self._invalid

    def decode(self, ids: Iterable[int]) -> bytes:
        """Concatenated bytes of a sequence of tokens.

        Parameters
        ----------
        ids : iterable of int
            Token ids.

        Returns
        -------
        bytes

        Raises
        ------
        VocabularyError
            On a hole or an out-of-range id.

        Examples
        --------
        >>> Vocabulary([b"ab", None, b"c"]).decode([0, 2, 0])
        b'abcab'
        """
        parts: list[bytes] = []
        for i in ids:
            tok = self.token_bytes(i)
            if tok is None:
                raise VocabularyError(f"token id {i} is a hole")
            parts.append(tok)
        return b"".join(parts)

    def max_token_length(self) -> int:
        """Length in bytes of the longest text token (0 if there is none)."""
        special = self._special_ids
        best = 0
        for i, t in enumerate(self._tokens):
            if t is not None and i not in special and len(t) > best:
                best = len(t)
        return best

    # -- identity -----------------------------------------------------------------------
    def fingerprint(self) -> str:
        """SHA-256 (hex) of a canonical encoding of tokens, special/stop ids and logit width.

        Returns
        -------
        str
            64 hex digits; the name is not included.

        Notes
        -----
        Computed once, O(total token bytes).  Every token is length-prefixed, so that
        token boundaries count (``[b"ab"]`` and ``[b"a", b"b"]`` differ).

        Examples
        --------
        >>> Vocabulary([b"a"], name="x").fingerprint() == Vocabulary([b"a"], name="y").fingerprint()
        True
        """
        if self._fingerprint:
            return self._fingerprint
        h = hashlib.sha256()
        h.update(_FINGERPRINT_TAG)
        h.update(struct.pack("<QQ", len(self._tokens), self._logit_width))
        for tok in self._tokens:
            if tok is None:
                h.update(b"\x00")
            else:
                h.update(b"\x01" + struct.pack("<Q", len(tok)))
                h.update(tok)
        for ids in (self._special_ids, self._stop_ids):
            ordered = sorted(ids)
            h.update(struct.pack("<Q", len(ordered)))
            h.update(b"".join(struct.pack("<Q", i) for i in ordered))
        self._fingerprint = h.hexdigest()
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (
            self._tokens == other._tokens
            and self._special_ids == other._special_ids
            and self._stop_ids == other._stop_ids
            and self._logit_width == other._logit_width
        )

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        label = f"{self._name!r}, " if self._name else ""
        return (
            f"Vocabulary({label}size={len(self._tokens)}, logit_width={self._logit_width}, "
            f"special={len(self._special_ids)}, stop={sorted(self._stop_ids)[:8]})"
        )
