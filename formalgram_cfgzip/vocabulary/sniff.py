"""CLI-style vocabulary specs: recognise a tokenizer file's format and dispatch to its loader.

A spec is a path to a ``tokenizer.json`` (or a folder holding one), a ``.tiktoken`` file,
a SentencePiece ``.model`` file, or a built-in name; this is what
:meth:`Vocabulary.load <formalgram_cfgzip.vocabulary.model.Vocabulary.load>` and the
command line accept.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.builtins import BUILTIN_NAMES, builtin
from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions
from formalgram_cfgzip.vocabulary.loaders.hf import load_tokenizer_json
from formalgram_cfgzip.vocabulary.loaders.sentencepiece import load_sentencepiece
from formalgram_cfgzip.vocabulary.loaders.tiktoken import load_tiktoken
from formalgram_cfgzip.vocabulary.model import Vocabulary

__all__ = ["Format", "load_spec", "sniff_format"]

Format = Literal["json", "tiktoken", "sentencepiece", ""]
"""A tokenizer file format (``""``: not recognised)."""

_SNIFF_BYTES = 4096


def sniff_format(path: Path) -> Format:
    """The format of a tokenizer file, from its name and first bytes.

    Parameters
    ----------
    path : Path
        The file.

    Returns
    -------
    str
        ``"json"`` for a ``.json`` name or text starting with ``{`` (tokenizer.json or
        tekken), ``"tiktoken"`` for a ``.tiktoken`` name or a first line of two fields
        ending in a number, ``"sentencepiece"`` for a ``.model`` name (also
        ``name.model.v3``) or a first byte ``0x0A`` (protobuf field 1), else ``""``.

    Notes
    -----
    Reads at most 4096 bytes; a name decides without reading.

    Examples
    --------
    >>> sniff_format(Path("tokenizer.json")), sniff_format(Path("tokenizer.model.v3"))
    ('json', 'sentencepiece')
    >>> sniff_format(Path("no/such/file"))
    ''
    """
    suffix = path.suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix == ".tiktoken":
        return "tiktoken"
    if suffix == ".model" or ".model." in path.name.lower():
        return "sentencepiece"
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return ""
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        return "json"
    first = stripped.split(b"\n", 1)[0].split()
    if len(first) == 2 and first[1].isdigit():
        return "tiktoken"
    if head[:1] == b"\x0a":
        return "sentencepiece"
    return ""


def load_spec(spec: str | os.PathLike[str], options: LoadOptions) -> Vocabulary:
    """Load the vocabulary a CLI-style spec names.

    Parameters
    ----------
    spec : str or path
        A tokenizer file, a folder holding a ``tokenizer.json``, or a built-in name
        (a path that exists wins over a built-in name).
    options : LoadOptions
        Passed to the file loaders; a built-in takes none.

    Returns
    -------
    Vocabulary

    Raises
    ------
    VocabularyError
        For a folder without a tokenizer.json, an empty file or one of no known format,
        options given with a built-in name, or a spec that is neither an existing path
        nor a built-in name; and whatever the file's loader raises.

    Examples
    --------
    >>> load_spec("no-such-tokenizer", LoadOptions())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: no tokenizer 'no-such-tokenizer': not an existing file ...
    """
    text = os.fspath(spec)
    path = Path(text)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
        empty = is_file and path.stat().st_size == 0
    except OSError as exc:  # e.g. a name too long for the file system
        raise VocabularyError(f"cannot read tokenizer {text[:200]!r}: {exc.strerror or exc}") from None
    if is_dir:
        candidate = path / "tokenizer.json"
        if candidate.is_file():
            return load_tokenizer_json(candidate, options)
        raise VocabularyError(f"directory {text!r} holds no tokenizer.json")
    if is_file:
        if empty:
            raise VocabularyError(f"tokenizer file {text!r} is empty")
        kind = sniff_format(path)
        if kind == "json":
            return load_tokenizer_json(path, options)
        if kind == "tiktoken":
            return load_tiktoken(path, {}, options)
        if kind == "sentencepiece":
            return load_sentencepiece(path, options)
        raise VocabularyError(
            f"{text!r} is not a tokenizer file (expected a tokenizer.json, a .tiktoken or a SentencePiece .model)"
        )
    if isinstance(spec, str) and spec in BUILTIN_NAMES:
        if options.given:
            raise VocabularyError("options (stop tokens, logit width, name) cannot be given for a built-in")
        return builtin(spec)
    raise VocabularyError(
        f"no tokenizer {text!r}: not an existing file or directory, nor a built-in name "
        f"({', '.join(BUILTIN_NAMES)})"
    )
