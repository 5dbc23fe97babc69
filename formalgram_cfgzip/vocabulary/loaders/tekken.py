"""Mistral ``tekken.json`` files -> Vocabulary, read through mistral-common.

A tekken file is JSON with a ``config`` object and a ``vocab`` list of base64 byte tokens
(byte-level, tiktoken-style); its special tokens come first in the id space and are
known to mistral-common's ``Tekkenizer``, which this loader uses to read the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeGuard

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import MAX_TOKEN_ID, LoadOptions, assemble, read_file_bytes
from formalgram_cfgzip.vocabulary.model import Vocabulary

__all__ = ["check_tekken_data", "is_tekken_data", "load_tekken"]

_SIZE_FIELDS = ("default_vocab_size", "default_num_special_tokens")


def is_tekken_data(data: object) -> TypeGuard[dict[str, Any]]:
    """Whether parsed JSON has the shape of a tekken file (and not of a tokenizer.json).

    Parameters
    ----------
    data : object
        Parsed JSON.

    Returns
    -------
    bool
        True for an object with a ``config`` object and a ``vocab`` list and no ``model``.

    Examples
    --------
    >>> is_tekken_data({"config": {}, "vocab": []}), is_tekken_data({"model": {}, "vocab": []})
    (True, False)
    """
    return (
        isinstance(data, dict)
        and "model" not in data
        and isinstance(data.get("vocab"), list)
        and isinstance(data.get("config"), dict)
    )


def check_tekken_data(data: object, source: str) -> None:
    """Refuse tekken data whose sizes would make mistral-common allocate without bound.

    mistral-common builds one entry per special token up to ``default_num_special_tokens``
    before it checks anything else, so a crafted file could ask for billions.

    Parameters
    ----------
    data : object
        Parsed JSON (see :func:`is_tekken_data`).
    source : str
        The file, for messages.

    Raises
    ------
    VocabularyError
        If the data is not tekken-shaped, or a size in ``config`` is not an int in
        ``[0, MAX_TOKEN_ID)``.

    Examples
    --------
    >>> check_tekken_data({"config": {"default_num_special_tokens": 10**12}, "vocab": []}, "t.json")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.VocabularyError: 't.json' is not a valid tekken file: config default_num_special_tokens is 1000000000000, not an int in [0, 16777216)
    """
    if not is_tekken_data(data):
        raise VocabularyError(f"{source!r} is not a tekken file: no 'config' object and 'vocab' list")
    config = data["config"]
    for key in _SIZE_FIELDS:
        value = config.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TOKEN_ID:
            raise VocabularyError(
                f"{source!r} is not a valid tekken file: config {key} is {value!r}, "
                f"not an int in [0, {MAX_TOKEN_ID})"
            )


def load_tekken(
    path: str | Path, options: LoadOptions, data: object = None, *, check: bool = True
) -> Vocabulary:
    """Load a Mistral ``tekken.json``.

    Parameters
    ----------
    path : path
        The file.
    options : LoadOptions
        Stop tokens (default: the tokenizer's end-of-sequence token), logit width and name
        (default: the file name without its suffix).
    data : object, optional
        The file's parsed JSON when the caller already has it.
    check : bool, keyword-only
        Check the file's sizes with :func:`check_tekken_data` before mistral-common reads
        it (reading the JSON here when ``data`` is not given).  Only the files shipped
        with mistral-common itself skip this.

    Returns
    -------
    Vocabulary
        Special tokens have their names as bytes (a label only); the others their bytes.

    Raises
    ------
    VocabularyError
        If mistral-common is not installed, or the file is missing, not JSON, or not a
        tekken file mistral-common accepts.

    Notes
    -----
    O(file size), plus mistral-common's own reading of the file.

    Examples
    --------
    >>> import base64, tempfile
    >>> vocab = [{"rank": i, "token_bytes": base64.b64encode(bytes([i])).decode(), "token_str": None}
    ...          for i in range(256)]
    >>> config = {"pattern": ".", "num_vocab_tokens": 256, "default_vocab_size": 276,
    ...           "default_num_special_tokens": 20, "version": "v3"}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "tiny.json"
    ...     _ = path.write_text(json.dumps({"config": config, "vocab": vocab}))
    ...     load_tekken(path, LoadOptions())
    Vocabulary('tiny', size=276, logit_width=276, special=20, stop=[2])
    """
    p = Path(path)
    source = str(p)
    if check and data is None:
        _, raw = read_file_bytes(p, "tekken")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise VocabularyError(f"{source!r} is not a tekken file: not valid UTF-8 JSON") from None
    if check:
        check_tekken_data(data, source)
    try:
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    except ImportError:
        raise VocabularyError(
            f"{source!r} is a Mistral tekken file; reading it needs mistral-common "
            "(pip install 'formalgram[vocabs]')"
        ) from None
    try:
        tk: Any = Tekkenizer.from_file(p)
    except Exception as exc:
        # mistral-common reports bad files with assertions and whatever its parsing
        # raises (KeyError, TypeError, AttributeError, ...): all mean "not a tekken file".
        raise VocabularyError(f"{source!r} is not a valid tekken file: {exc}") from None
    tokens: list[bytes | None] = []
    special: list[int] = []
    by_content: dict[str, int] = {}
    for i in range(int(tk.n_words)):
        if tk.is_special(i):
            label = str(tk.id_to_piece(i))
            tokens.append(label.encode("utf-8"))
            special.append(i)
            by_content[label] = i
        else:
            tokens.append(bytes(tk.id_to_byte_piece(i)))
    return assemble(
        tokens,
        special,
        by_content,
        options=options,
        configured_stops=[int(tk.eos_id)],
        logit_width=options.logit_width,
        default_name=p.stem,
        source=source,
    )
