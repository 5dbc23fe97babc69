"""The argument checks every backend's ``compile_grammar`` and ``compile_full`` start with.

Wrong types and values of the options both backends take raise
:class:`~formalgram_cfgzip.errors.EngineError` here, before an engine is touched;
:func:`prepare_compressed` and :func:`prepare_full` then return the engine tokens
(:mod:`formalgram_cfgzip.engines.tokens`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from formalgram_cfgzip.engines.tokens import check_classes, class_vocabulary, full_engine_tokens
from formalgram_cfgzip.errors import EngineError

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["as_integer", "check_compile_options", "prepare_compressed", "prepare_full"]


def as_integer(value: object, what: str, error: type[EngineError] = EngineError) -> int:
    """``value`` as a Python int (ints and numpy integers; not bools, floats or None)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise error(f"{what} must be an integer, got {value!r}")
    return int(value)


def check_compile_options(grammar_text: object, root: object, max_threads: object, check: object) -> None:
    """The typed errors for the options both backends take (wrong values, not unknown names)."""
    if not isinstance(grammar_text, str):
        raise EngineError(f"grammar_text must be a str, got {type(grammar_text).__name__}")
    if not isinstance(root, str) or not root:
        raise EngineError(f"root must be a non-empty rule name, got {root!r}")
    if max_threads is not None and as_integer(max_threads, "max_threads") < 1:
        raise EngineError(f"max_threads must be at least 1, got {max_threads!r}")
    if not isinstance(check, bool):
        raise EngineError(f"check must be True or False, got {check!r}")


def prepare_compressed(
    classes: TokenClasses,
    grammar_text: str,
    *,
    root: str,
    vocab: Vocabulary | None,
    check: bool,
    max_threads: int | None,
    fingerprint: bool = True,
) -> list[bytes]:
    """The start of both backends' ``compile_grammar``: check the options (and, with
    ``check``, the classes), and return the engine tokens (:func:`class_vocabulary`).

    Parameters
    ----------
    classes, grammar_text, root, vocab, check, max_threads
        As for :func:`formalgram_cfgzip.engines.compile_grammar`.
    fingerprint : bool
        Compare the grammar fingerprint too (not for text in another syntax than GBNF).

    Returns
    -------
    list of bytes
        One entry per class.

    Raises
    ------
    EngineError
        On an option of the wrong type or value.
    ClassesMismatchError
        With ``check``: as :func:`check_classes`.
    """
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

    check_compile_options(grammar_text, root, max_threads, check)
    if not isinstance(classes, TokenClasses):
        raise EngineError(f"classes must be a TokenClasses, got {type(classes).__name__}")
    if vocab is not None and not isinstance(vocab, Vocabulary):
        raise EngineError(f"vocab must be a Vocabulary or None, got {type(vocab).__name__}")
    if check:
        check_classes(classes, grammar_text if fingerprint else None, vocab, root)
    return class_vocabulary(classes)


def prepare_full(
    vocab: Vocabulary, grammar_text: str, *, root: str, max_threads: int | None
) -> tuple[bytes, ...]:
    """The start of both backends' ``compile_full``: check the options and return
    :func:`full_engine_tokens`.

    Raises
    ------
    EngineError
        On an option of the wrong type or value.
    """
    from formalgram_cfgzip.vocabulary import Vocabulary

    check_compile_options(grammar_text, root, max_threads, True)
    if not isinstance(vocab, Vocabulary):
        raise EngineError(f"vocab must be a Vocabulary, got {type(vocab).__name__}")
    return full_engine_tokens(vocab)
