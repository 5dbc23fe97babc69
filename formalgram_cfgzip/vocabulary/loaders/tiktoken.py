"""``.tiktoken`` files -> Vocabulary: one ``<base64 token bytes> <rank>`` per line, rank = id.

The file holds the ordinary tokens only; special tokens (``<|endoftext|>`` ...) are given
by the caller, as tiktoken's encodings define them in code.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = Path(tmp) / "tiny.tiktoken"
...     _ = path.write_text("YQ== 0\\nYg== 1\\nIGFi 3\\n")
...     vocab = load_tiktoken(path, {"<|endoftext|>": 4}, LoadOptions())
>>> vocab
Vocabulary('tiny', size=5, logit_width=5, special=1, stop=[4])
>>> vocab.tokens
(b'a', b'b', None, b' ab', b'<|endoftext|>')
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import LoadOptions, assemble, check_id, read_file_bytes
from formalgram_cfgzip.vocabulary.model import Vocabulary

__all__ = ["load_tiktoken", "read_ranks"]


def read_ranks(text: str, source: str) -> dict[int, bytes]:
    """The ``rank -> token bytes`` table of a ``.tiktoken`` file's text.

    Parameters
    ----------
    text : str
        The file's contents; blank lines are skipped.
    source : str
        The file, for messages.

    Returns
    -------
    dict of int to bytes
        Not empty.

    Raises
    ------
    VocabularyError
        If a line is not two fields, a base64 string and a decimal rank, a rank is
        negative, too large or repeated, or there is no line at all.

    Notes
    -----
    O(len(text)).

    Examples
    --------
    >>> read_ranks("YQ== 0\\nYg== 1\\n", "t")
    {0: b'a', 1: b'b'}
    >>> read_ranks("YQ== 0\\nYg== 0\\n", "t")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: 't': rank 0 appears twice (line 2)
    """
    ranks: dict[int, bytes] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        try:
            if len(parts) != 2:
                raise ValueError
            token = base64.b64decode(parts[0], validate=True)
            rank = int(parts[1])
        except (ValueError, binascii.Error):
            raise VocabularyError(
                f"{source!r} is not a .tiktoken file: line {lineno} is not '<base64 token> <rank>'"
            ) from None
        rank = check_id(rank, f"line {lineno}", source)
        if rank in ranks:
            raise VocabularyError(f"{source!r}: rank {rank} appears twice (line {lineno})")
        ranks[rank] = token
    if not ranks:
        raise VocabularyError(f"{source!r} is not a .tiktoken file: no '<base64 token> <rank>' line")
    return ranks


def load_tiktoken(
    path: str | os.PathLike[str], special_tokens: Mapping[str, int], options: LoadOptions
) -> Vocabulary:
    """Load a ``.tiktoken`` file.

    Parameters
    ----------
    path : path
        The file.
    special_tokens : mapping of str to int
        Special tokens (text -> id); their ids must not be ranks of the file.
    options : LoadOptions
        Stop tokens (default: the special tokens named in
        :data:`~formalgram_cfgzip.vocabulary.loaders._common.COMMON_STOP_TOKENS`), logit
        width and name (default: the file name without its suffix).

    Returns
    -------
    Vocabulary
        Ids that are neither ranks nor special are holes; a special token's bytes are its
        text (a label only).

    Raises
    ------
    VocabularyError
        If the file is missing, empty or not ASCII, a line is malformed (see
        :func:`read_ranks`), or a special id is invalid or collides with a rank.

    Notes
    -----
    O(file size).  See the module's Examples.
    """
    p, raw = read_file_bytes(path, ".tiktoken")
    source = str(p)
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise VocabularyError(f"{source!r} is not a .tiktoken file: it is not ASCII text") from None
    ranks = read_ranks(text, source)
    by_content: dict[str, int] = {}
    for content, idx in special_tokens.items():
        idx = check_id(idx, f"special token {content!r}", source)
        if idx in ranks:
            raise VocabularyError(
                f"{source!r}: special token {content!r} reuses the id {idx} of a normal token"
            )
        by_content[content] = idx
    tokens: list[bytes | None] = [None] * (max([*ranks, *by_content.values()]) + 1)
    for idx, tok in ranks.items():
        tokens[idx] = tok
    for content, idx in by_content.items():
        tokens[idx] = content.encode("utf-8", "surrogatepass")
    return assemble(
        tokens,
        by_content.values(),
        by_content,
        options=options,
        configured_stops=None,
        logit_width=options.logit_width,
        default_name=p.stem,
        source=source,
    )
