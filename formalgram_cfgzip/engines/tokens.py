"""What an engine sees of the vocabulary: the special-token policy, the engine tokens, and the
check that token classes belong to a grammar and a vocabulary.

An engine token is a class of a :class:`~formalgram_cfgzip.classes.TokenClasses` (a
compressed grammar: :func:`class_vocabulary`) or a logit index of the
:class:`~formalgram_cfgzip.vocabulary.Vocabulary` (the full reference:
:func:`full_engine_tokens`).  Both follow the same **special-token policy**, so their
masks can be compared bit for bit:

=====================================  ====================================================
token                                  what the engine sees / when it is allowed
=====================================  ====================================================
text token (not special, not stop)     its exact bytes; allowed when the grammar allows them
text token with empty bytes            empty bytes; never allowed
special token (``special_ids``)        empty bytes; never allowed (its label is not text)
stop token (``stop_ids``)              the engine's stop/EOS token with empty bytes;
                                       allowed exactly when the grammar may end here
hole (``None``), padding id            never allowed (empty bytes / past the engine vocab)
=====================================  ====================================================

In the compressed engine the stop class is the stop token, and the invalid class (holes,
padding, special tokens, tokens valid nowhere) is an engine token with empty bytes, so it
is never allowed.  The proof that the adapter is lossless under this policy is
``proofs/engine_adapter.md``.

The engines' full-vocabulary tokenizers depend on the vocabulary only and are kept per
vocabulary (:func:`per_vocabulary`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import ClassesMismatchError

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "check_classes",
    "class_vocabulary",
    "engine_vocabulary",
    "full_engine_tokens",
    "full_never",
    "grammar_matches",
    "never_allowed",
    "per_vocabulary",
]


def grammar_matches(classes: TokenClasses, grammar_text: str, root: str = "root") -> bool:
    """Whether ``classes`` were computed for ``grammar_text``.

    Parameters
    ----------
    classes : TokenClasses
        The classes.
    grammar_text : str
        The grammar text an engine is about to compile.
    root : str
        Its start rule (the engine's ``root``).

    Returns
    -------
    bool
        True when the text's fingerprint read from ``root``
        (:func:`~formalgram_cfgzip.cache.fingerprint_text`) is the one recorded by
        :func:`~formalgram_cfgzip.compress.compress` (or stored as ``grammar_sha256`` by a
        caller that fingerprints texts), or else when the text parses
        to a grammar with the classes' canonical fingerprint
        (:func:`~formalgram_cfgzip.cache.grammar_fingerprint`).  A text that does not parse
        matches nothing.

    Notes
    -----
    O(len(grammar_text)) when the text is the one the classes were computed from; otherwise
    the text is parsed (formatting and comments may differ, the grammar may not).

    Examples
    --------
    >>> from formalgram_cfgzip.compress import compress
    >>> from formalgram_cfgzip.vocabulary import Vocabulary
    >>> tc = compress('root ::= "x"', Vocabulary([b"x", b"y"]), progress=False)
    >>> grammar_matches(tc, 'root ::= "x"'), grammar_matches(tc, 'root ::=   "x" # same'), grammar_matches(tc, 'root ::= "y"')
    (True, True, False)
    """
    from formalgram.errors import FormalgramError
    from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint

    text_sha = fingerprint_text(grammar_text, root=root)
    if text_sha in (classes.grammar_text_sha256, classes.grammar_sha256):
        return True
    try:
        return classes.grammar_sha256 == grammar_fingerprint(grammar_text, start=root)
    except (FormalgramError, RecursionError):
        return False


def check_classes(
    classes: TokenClasses, grammar_text: str | None, vocab: Vocabulary | None = None, root: str = "root"
) -> None:
    """Validate a TokenClasses against its grammar, vocabulary and the special-token policy.

    Parameters
    ----------
    classes : TokenClasses
        The classes an engine is about to use.
    grammar_text : str or None
        The grammar the engine will compile (``None`` skips the grammar check).
    vocab : Vocabulary or None
        The vocabulary the caller decodes with (``None``: ``classes.vocab``).
    root : str
        The start rule the engine compiles the text with.

    Raises
    ------
    ClassesMismatchError
        If the fingerprints differ (:func:`grammar_matches`), or the classes break an
        invariant (:meth:`TokenClasses.validate <formalgram_cfgzip.classes.TokenClasses.validate>`:
        malformed arrays, a special token, hole, empty text token or padding id outside the
        invalid class, a stop class that is not exactly the stop tokens, ...).

    Notes
    -----
    O(logit_width) numpy work, plus what :func:`grammar_matches` costs.

    Examples
    --------
    >>> from formalgram_cfgzip.compress import compress
    >>> from formalgram_cfgzip.vocabulary import Vocabulary
    >>> tc = compress('root ::= "x"', Vocabulary([b"x", b"y"]), progress=False)
    >>> check_classes(tc, 'root ::= "x"')
    >>> tc.representatives[0] = 1  # corrupted after construction
    >>> check_classes(tc, 'root ::= "x"')
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.ClassesMismatchError: inconsistent TokenClasses: class 0 has representative 1, a token of class 1
    """
    from formalgram_cfgzip.errors import ClassesInvariantError

    v = classes.vocab
    if vocab is not None and vocab is not v and vocab.fingerprint() != v.fingerprint():
        raise ClassesMismatchError(
            f"these TokenClasses were computed for vocabulary {v.name or v.fingerprint()[:12]!r}, "
            f"not for {vocab.name or vocab.fingerprint()[:12]!r}"
        )
    if grammar_text is not None and not grammar_matches(classes, grammar_text, root):
        raise ClassesMismatchError(
            "these TokenClasses were computed for another grammar "
            f"(classes: {classes.grammar_sha256[:12]}...); recompute them with compress()"
        )
    try:
        classes.validate()
    except ClassesInvariantError as exc:
        raise ClassesMismatchError(f"inconsistent TokenClasses: {exc}") from exc


def engine_vocabulary(vocab: Vocabulary) -> list[bytes]:
    """Bytes the full-vocabulary engine sees for each token id (the special-token policy).

    Text tokens keep their bytes; special tokens, stop tokens and holes get ``b""``.

    Parameters
    ----------
    vocab : Vocabulary

    Returns
    -------
    list of bytes
        ``vocab.size`` entries (padding ids are added by :func:`full_engine_tokens`).

    Examples
    --------
    >>> from formalgram_cfgzip.vocabulary import Vocabulary
    >>> engine_vocabulary(Vocabulary([b"a", None, b"<s>", b"</s>"], special_ids=[2, 3], stop_ids=[3]))
    [b'a', b'', b'', b'']
    """
    special, stop = vocab.special_ids, vocab.stop_ids
    return [b"" if t is None or i in special or i in stop else t for i, t in enumerate(vocab.tokens)]


def class_vocabulary(classes: TokenClasses) -> list[bytes]:
    """Bytes the compressed engine sees for each class: its representative's (policy applied).

    Parameters
    ----------
    classes : TokenClasses

    Returns
    -------
    list of bytes
        One entry per class; the invalid and the stop class, and a class without a real
        representative, get ``b""``.
    """
    tokens = classes.vocab.tokens
    out: list[bytes] = []
    for k, rep in enumerate(classes.representatives.tolist()):
        if k in (classes.invalid_class, classes.stop_class) or rep < 0 or rep >= len(tokens):
            out.append(b"")
        else:
            t = tokens[rep]
            out.append(t if t is not None else b"")
    return out


def full_engine_tokens(vocab: Vocabulary) -> tuple[bytes, ...]:
    """The bytes of every logit index for the full-vocabulary engine: :func:`engine_vocabulary`
    with the padding ids (``size .. logit_width - 1``) as ``b""``.

    Notes
    -----
    O(logit_width) once per vocabulary (by fingerprint), then a lookup: every full-vocabulary
    compile of a new grammar (a JSON Schema per request) reads it.
    """

    def build() -> tuple[bytes, ...]:
        tokens = engine_vocabulary(vocab)
        tokens.extend([b""] * (vocab.logit_width - len(tokens)))
        return tuple(tokens)

    tokens: tuple[bytes, ...] = per_vocabulary(_full_tokens_cache, vocab, build)
    return tokens


def never_allowed(engine_tokens: Sequence[bytes], stop_ids: Iterable[int]) -> npt.NDArray[np.bool_]:
    """Per engine id, whether the special-token policy never allows it: empty bytes, and not
    a stop token.

    Examples
    --------
    >>> never_allowed([b"a", b"", b""], [2]).tolist()
    [False, True, False]
    """
    never = np.array([not t for t in engine_tokens], dtype=bool)
    never[list(stop_ids)] = False
    return never


def full_never(vocab: Vocabulary) -> npt.NDArray[np.bool_]:
    """:func:`never_allowed` of :func:`full_engine_tokens`: once per vocabulary, read-only."""

    def build() -> npt.NDArray[np.bool_]:
        never = never_allowed(full_engine_tokens(vocab), vocab.stop_ids)
        never.setflags(write=False)
        return never

    never: npt.NDArray[np.bool_] = per_vocabulary(_full_never_cache, vocab, build)
    return never


_vocab_cache_lock = threading.Lock()
_full_tokens_cache: dict[str, tuple[bytes, ...]] = {}
_full_never_cache: dict[str, npt.NDArray[np.bool_]] = {}


def per_vocabulary(cache: dict[str, Any], vocab: Vocabulary, build: Callable[[], Any]) -> Any:
    """``cache[vocab.fingerprint()]``, made by ``build()`` on a miss and kept (the engines'
    full-vocabulary tokenizers: immutable, and slow to build for a large vocabulary).

    Parameters
    ----------
    cache : dict
        The engine's cache, keyed by vocabulary fingerprint.
    vocab : Vocabulary
    build : callable
        Makes the value on a miss.

    Returns
    -------
    object
        The cached or new value.

    Notes
    -----
    Lookups and stores are locked; ``build`` runs outside the lock, so two threads missing at
    once may both build, and the last stored wins (the values are equal).
    """
    key = vocab.fingerprint()
    with _vocab_cache_lock:
        value = cache.get(key)
    if value is None:
        value = build()
        with _vocab_cache_lock:
            cache[key] = value
    return value
