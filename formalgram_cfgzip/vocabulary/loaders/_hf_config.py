"""The model folder's side files next to a tokenizer.json: stop tokens and logit width.

``generation_config.json`` and ``config.json`` name the end-of-sequence ids
(``eos_token_id``, an id or a list), ``tokenizer_config.json`` the end-of-sequence token
by text (``eos_token``), and ``config.json`` the logit width (``vocab_size``, at the top
or under ``text_config``).  The files are optional: one that is missing or not JSON says
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypeGuard

from formalgram_cfgzip.errors import VocabularyError
from formalgram_cfgzip.vocabulary.loaders._common import MAX_TOKEN_ID

__all__ = ["config_logit_width", "config_stop_ids", "read_json_quiet"]


def read_json_quiet(path: Path) -> object:
    """Contents of an optional JSON side file, or None when absent or unreadable.

    Parameters
    ----------
    path : Path
        The file.

    Returns
    -------
    object
        The parsed JSON, or None when the file is missing, unreadable, not UTF-8 or not
        JSON (nested too deeply included).

    Examples
    --------
    >>> read_json_quiet(Path("no/such/config.json")) is None
    True
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_content(value: object) -> str | None:
    """The text of a token entry: a string, or an object with a string ``content``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def config_stop_ids(directory: Path, by_content: Mapping[str, int]) -> list[int] | None:
    """Stop ids named by the side files of a model folder.

    Parameters
    ----------
    directory : Path
        The folder holding the tokenizer.json.
    by_content : mapping of str to int
        Token text -> id, to look up ``tokenizer_config.json``'s ``eos_token``.

    Returns
    -------
    list of int or None
        The ids named (unchecked: they may be padding ids past the tokenizer), or None
        when no file names one.

    Notes
    -----
    Reads up to three small files.

    Examples
    --------
    >>> config_stop_ids(Path("no/such/folder"), {}) is None
    True
    """
    found: list[int] = []
    for name in ("generation_config.json", "config.json"):
        blob = read_json_quiet(directory / name)
        if isinstance(blob, dict) and "eos_token_id" in blob:
            value = blob["eos_token_id"]
            found.extend(v for v in (value if isinstance(value, list) else [value]) if _is_int(v))
    tok_cfg = read_json_quiet(directory / "tokenizer_config.json")
    if isinstance(tok_cfg, dict):
        content = _token_content(tok_cfg.get("eos_token"))
        if content is not None and content in by_content:
            found.append(by_content[content])
    return found or None


def config_logit_width(directory: Path) -> int | None:
    """The logit width (``vocab_size``) named by the ``config.json`` of a model folder.

    Parameters
    ----------
    directory : Path
        The folder holding the tokenizer.json.

    Returns
    -------
    int or None
        A positive ``vocab_size`` at the top level or under ``text_config``; None when
        there is no such file or value.

    Raises
    ------
    VocabularyError
        If the value is at least
        :data:`~formalgram_cfgzip.vocabulary.loaders._common.MAX_TOKEN_ID` (a crafted
        file must not make every mask gigabytes long).

    Examples
    --------
    >>> config_logit_width(Path("no/such/folder")) is None
    True
    """
    path = directory / "config.json"
    cfg = read_json_quiet(path)
    if not isinstance(cfg, dict):
        return None
    for blob in (cfg, cfg.get("text_config")):
        if isinstance(blob, dict):
            value = blob.get("vocab_size")
            if _is_int(value) and value > 0:
                if value >= MAX_TOKEN_ID:
                    raise VocabularyError(
                        f"{path}: vocab_size {value} is beyond the supported {MAX_TOKEN_ID}"
                    )
                return value
    return None
