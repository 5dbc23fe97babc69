"""The engine-independent half of the decoding adapters: protocol, argument checks, id
mapping and mask expansion, shared by the XGrammar and the llguidance backend.

A *compiled grammar* is a grammar engine (XGrammar, llguidance) prepared for one grammar
over an *engine vocabulary*:

* **compressed**: engine token ``k`` is class ``k`` of a
  :class:`~formalgram_cfgzip.classes.TokenClasses`; its bytes are the bytes of the class
  representative.  A real token id is mapped to its class before it reaches the engine,
  and the engine's class mask is expanded back to every logit index
  (:class:`~formalgram_cfgzip.expand.MaskExpander`).
* **full** (the reference): engine token ``i`` is token ``i`` of the
  :class:`~formalgram_cfgzip.vocabulary.Vocabulary`, no compression.

Both use the same **special-token policy**, so their masks can be compared bit for bit:

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

Threads: a :class:`CompiledGrammar` may be shared by threads (its expanders and batch
buffers are used under :attr:`CompiledGrammar.expander_lock`); a matcher may not (one
sequence, one thread at a time).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import (
    BatchIndexError,
    ClassesMismatchError,
    EngineError,
    GrammarViolation,
    TokenIdError,
)
from formalgram_cfgzip.expand import MaskExpander, TorchMaskExpander
from formalgram_cfgzip.expand.layout import as_int32_rows, check_row_index

if TYPE_CHECKING:
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "BatchIndexError",
    "ClassesMismatchError",
    "CompiledGrammar",
    "EngineError",
    "EngineMatcher",
    "GrammarViolation",
    "Matcher",
    "Syntax",
    "TokenIdError",
    "check_classes",
    "class_vocabulary",
    "engine_vocabulary",
    "full_engine_tokens",
    "grammar_matches",
    "per_vocabulary",
    "prepare_compressed",
    "prepare_full",
]

#: Grammar text formats: GBNF / XGrammar EBNF (both engines) or Lark (llguidance only).
Syntax = Literal["gbnf", "lark"]


@runtime_checkable
class Matcher(Protocol):
    """What both engines' matchers provide (compressed and full-vocabulary alike); see
    :class:`EngineMatcher` for the behaviour and the errors."""

    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it."""
        ...

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask into row ``index`` of ``bitmask``."""
        ...

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """Write the engine's own (class) mask into row ``index`` of ``class_bitmask``."""
        ...

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        ...

    def reset(self) -> None:
        """Back to the initial state."""
        ...

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        ...


def grammar_matches(classes: TokenClasses, grammar_text: str) -> bool:
    """Whether ``classes`` were computed for ``grammar_text``.

    Parameters
    ----------
    classes : TokenClasses
        The classes.
    grammar_text : str
        The grammar text an engine is about to compile.

    Returns
    -------
    bool
        True when the text's fingerprint (:func:`~formalgram_cfgzip.cache.fingerprint_text`)
        is the one recorded by :func:`~formalgram_cfgzip.compress.compress` (or stored as
        ``grammar_sha256`` by a caller that fingerprints texts), or else when the text parses
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

    text_sha = fingerprint_text(grammar_text)
    if text_sha in (classes.grammar_text_sha256, classes.grammar_sha256):
        return True
    try:
        return classes.grammar_sha256 == grammar_fingerprint(grammar_text)
    except (FormalgramError, RecursionError):
        return False


def check_classes(classes: TokenClasses, grammar_text: str | None, vocab: Vocabulary | None = None) -> None:
    """Validate a TokenClasses against its grammar, vocabulary and the special-token policy.

    Parameters
    ----------
    classes : TokenClasses
        The classes an engine is about to use.
    grammar_text : str or None
        The grammar the engine will compile (``None`` skips the grammar check).
    vocab : Vocabulary or None
        The vocabulary the caller decodes with (``None``: ``classes.vocab``).

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
    if grammar_text is not None and not grammar_matches(classes, grammar_text):
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


# -- argument checks --------------------------------------------------------------------
def _integer(value: object, what: str, error: type[EngineError] = EngineError) -> int:
    """``value`` as a Python int (ints and numpy integers; not bools, floats or None)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise error(f"{what} must be an integer, got {value!r}")
    return int(value)


def _check_compile_options(grammar_text: object, root: object, max_threads: object, check: object) -> None:
    """The typed errors for the options both backends take (wrong values, not unknown names)."""
    if not isinstance(grammar_text, str):
        raise EngineError(f"grammar_text must be a str, got {type(grammar_text).__name__}")
    if not isinstance(root, str) or not root:
        raise EngineError(f"root must be a non-empty rule name, got {root!r}")
    if max_threads is not None and _integer(max_threads, "max_threads") < 1:
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

    _check_compile_options(grammar_text, root, max_threads, check)
    if not isinstance(classes, TokenClasses):
        raise EngineError(f"classes must be a TokenClasses, got {type(classes).__name__}")
    if vocab is not None and not isinstance(vocab, Vocabulary):
        raise EngineError(f"vocab must be a Vocabulary or None, got {type(vocab).__name__}")
    if check:
        check_classes(classes, grammar_text if fingerprint else None, vocab)
    return class_vocabulary(classes)


def full_engine_tokens(vocab: Vocabulary) -> list[bytes]:
    """The bytes of every logit index for the full-vocabulary engine: :func:`engine_vocabulary`
    with the padding ids (``size .. logit_width - 1``) as ``b""``."""
    tokens = engine_vocabulary(vocab)
    tokens.extend([b""] * (vocab.logit_width - len(tokens)))
    return tokens


def prepare_full(vocab: Vocabulary, grammar_text: str, *, root: str, max_threads: int | None) -> list[bytes]:
    """The start of both backends' ``compile_full``: check the options and return
    :func:`full_engine_tokens`.

    Raises
    ------
    EngineError
        On an option of the wrong type or value.
    """
    from formalgram_cfgzip.vocabulary import Vocabulary

    _check_compile_options(grammar_text, root, max_threads, True)
    if not isinstance(vocab, Vocabulary):
        raise EngineError(f"vocab must be a Vocabulary, got {type(vocab).__name__}")
    return full_engine_tokens(vocab)


_vocab_cache_lock = threading.Lock()


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


_INT32 = np.dtype(np.int32)


class EngineMatcher(ABC):
    """A matcher over real token ids, whatever the engine vocabulary (base of both engines).

    Subclasses implement the ``_engine_*`` hooks over *engine* ids; this class maps ids,
    checks arguments, keeps the history that :meth:`rollback` may undo and expands masks.

    Notes
    -----
    A matcher holds one sequence's state and a scratch row: use it from one thread at a
    time.  Matchers of one compiled grammar share its expander (under its lock).
    """

    #: The engine's fill raises ``RuntimeError`` once a stop token was accepted (XGrammar):
    #: fills then skip the per-call ``is_terminated()`` (a call into the engine) and check
    #: it only when the fill raised.
    FILL_RAISES_WHEN_TERMINATED = False

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._scratch = np.zeros((1, compiled.engine_words), dtype=np.int32)
        # for fill_next_token_bitmask: the expander's row writer (None without classes), and
        # the row width, read once here rather than through ``compiled`` on every call
        ex = compiled.expander
        self._write_row = ex.row_writer() if ex is not None and not compiled.direct_fill else None
        self._token_words = compiled.token_words
        self._lock = compiled.expander_lock
        #: engine ids accepted since the start (what rollback may undo)
        self._history: list[int] = []

    def _fill_live(self, bitmask: npt.NDArray[np.int32], index: int) -> bool:
        """Engine fill of row ``index``; ``False`` (row zeroed, nothing filled) when the
        matcher is terminated."""
        if self.FILL_RAISES_WHEN_TERMINATED:
            try:
                self._engine_fill(bitmask, index)
                return True
            except RuntimeError:
                if not self.is_terminated():
                    raise
        elif not self.is_terminated():
            self._engine_fill(bitmask, index)
            return True
        bitmask[index] = 0
        return False

    # -- engine hooks -----------------------------------------------------------------------
    @abstractmethod
    def _engine_accept(self, engine_id: int) -> bool:
        """Advance by an engine id; ``False`` (state unchanged) if the grammar forbids it."""

    @abstractmethod
    def _engine_fill(self, bitmask: npt.NDArray[np.int32], index: int) -> None:
        """Fill row ``index`` of an engine-width int32 bitmask."""

    @abstractmethod
    def _engine_rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` (``1 <= num_tokens <= len(history)``) accepted tokens."""

    @abstractmethod
    def _engine_reset(self) -> None:
        """Back to the engine's initial state."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """Whether a stop token has been accepted (nothing more may follow)."""

    def engine_error(self) -> str:
        """The engine's error message when it gave up (e.g. hit an internal limit), else ``""``."""
        return ""

    # -- protocol ---------------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it.

        Raises
        ------
        TokenIdError
            If ``token_id`` is not an integer in ``0 .. logit_width - 1``.
        """
        return self._accept_engine_id(self.compiled.engine_id(token_id))

    def _accept_engine_id(self, engine_id: int) -> bool:
        if self.compiled.never[engine_id] or not self._engine_accept(engine_id):
            return False  # never allowed by the policy: spares the engine's warning
        self._history.append(engine_id)
        return True

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens (the stop token included).

        Raises
        ------
        EngineError
            If ``num_tokens`` is not an integer between 0 and the number of tokens
            accepted since the start or the last :meth:`reset` (the same for both engines).
        """
        n = _integer(num_tokens, "num_tokens")
        if not 0 <= n <= len(self._history):
            raise EngineError(f"cannot roll back {n} tokens: {len(self._history)} accepted since the start")
        if n:
            self._engine_rollback(n)
            del self._history[-n:]

    def reset(self) -> None:
        """Back to the initial state (nothing accepted)."""
        self._engine_reset()
        self._history.clear()

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """Write the engine's own mask (one bit per engine token) into row ``index``.

        For a compressed grammar the bits are classes; for the full reference, tokens.
        After a stop token was accepted the row is all zeros (nothing may follow).

        Parameters
        ----------
        class_bitmask : numpy.ndarray or torch.Tensor
            Writable C-contiguous int32 on the CPU, shape ``(batch, engine_words)`` (see
            :attr:`CompiledGrammar.engine_words`) or ``(engine_words,)``.
        index : int
            Row to write.

        Raises
        ------
        EngineError
            On a read-only buffer, a wrong dtype, shape or device.
        BatchIndexError
            If ``index`` is not an integer row of ``class_bitmask``.
        """
        arr = as_int32_rows(class_bitmask, "class bitmask")
        c = self.compiled
        if arr.shape[1] != c.engine_words:
            raise EngineError(
                f"class bitmask must have {c.engine_words} int32 words per row, got {arr.shape[1]}"
            )
        self._fill_live(arr, check_row_index(index, arr.shape[0]))

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask (XGrammar layout) into row ``index`` of ``bitmask``.

        Bit ``j`` of word ``w`` is token ``32 * w + j``.  After a stop token was accepted
        the row is all zeros (nothing may follow).

        Parameters
        ----------
        bitmask : numpy.ndarray or torch.Tensor
            Writable C-contiguous int32 on the CPU, shape ``(batch, ceil(logit_width / 32))``
            or ``(ceil(logit_width / 32),)``.
        index : int
            Row to write.

        Raises
        ------
        EngineError
            On a read-only buffer, a wrong dtype, shape or device.
        BatchIndexError
            If ``index`` is not an integer row of ``bitmask``.

        Notes
        -----
        One engine fill of ``engine_size`` bits, then (compressed) one row expansion under
        the compiled grammar's :attr:`~CompiledGrammar.expander_lock`.
        """
        if (  # the common case, checked inline: no helper calls before the engine's fill
            type(bitmask) is np.ndarray
            and type(index) is int
            and bitmask.dtype is _INT32
            and bitmask.ndim == 2
            and bitmask.shape[1] == self._token_words
            and 0 <= index < bitmask.shape[0]
            and (flags := bitmask.flags).c_contiguous
            and flags.writeable
        ):
            arr = bitmask
        else:
            arr, index = self._checked_token_bitmask(bitmask, index)
        write = self._write_row
        if write is None and self.compiled.direct_fill:
            if self._fill_live(arr, index):
                self.compiled.clear_padding(arr[index : index + 1])
            return
        scratch = self._scratch
        if not self._fill_live(scratch, 0):
            arr[index] = 0
        elif write is not None:
            with self._lock:
                write(scratch, arr, index)
        else:
            self.compiled.finish_row(scratch[0], arr[index])

    def _checked_token_bitmask(self, bitmask: Any, index: object) -> tuple[npt.NDArray[np.int32], int]:
        """``bitmask`` as a numpy int32 array whose row ``index`` has the token width, and
        ``index`` as an int, or the typed error saying why not."""
        arr = as_int32_rows(bitmask, "token bitmask")
        c = self.compiled
        if arr.shape[1] != c.token_words:
            raise EngineError(
                f"token bitmask must have ceil({c.logit_width}/32) = {c.token_words} int32 words per row, "
                f"got {arr.shape[1]}"
            )
        row = check_row_index(index, arr.shape[0])
        return arr, row


class CompiledGrammar(ABC):
    """A grammar compiled by one engine over a compressed or a full engine vocabulary.

    Made by :func:`formalgram_cfgzip.engines.compile_grammar` (compressed) or
    :func:`~formalgram_cfgzip.engines.compile_full` (the reference); not constructed directly.

    Attributes
    ----------
    vocab : Vocabulary
        The real vocabulary (token ids seen by the caller).
    classes : TokenClasses or None
        The classes (``None`` for the full-vocabulary reference).
    logit_width : int
        Number of logits; token bitmasks have ``token_words = ceil(logit_width / 32)`` words.
    engine_size : int
        Number of engine tokens (classes, or logit indices, plus a dummy stop if needed).
    never : numpy.ndarray
        bool per engine id: never allowed by the special-token policy.
    engine_words : int
        Words per row of the engine's own bitmask.
    expander : MaskExpander or None
        The CPU expander of class masks (``None`` for the full-vocabulary reference), shared
        by every matcher.  See :meth:`torch_expander` for torch devices.
    expander_lock : threading.Lock
        Held while this grammar's expanders or batch buffers are in use.

    Notes
    -----
    One compiled grammar serves any number of matchers, processors and requests, on any
    number of threads: it owns one CPU :class:`~formalgram_cfgzip.expand.MaskExpander` and
    at most one :class:`~formalgram_cfgzip.expand.TorchMaskExpander` per torch device
    (:meth:`torch_expander`), made once.  Expanders keep scratch buffers and a row cache
    and are not thread-safe, so every use of them here (a row expansion, a batch fill,
    :meth:`mask_logits`) holds :attr:`expander_lock`; the engine's own fill of one matcher
    runs outside it.  The lock costs one uncontended acquire per fill, small next to the
    fill and the expansion themselves.  Code that calls :attr:`expander` or a
    :meth:`torch_expander` itself from several threads must hold :attr:`expander_lock` too.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        classes: TokenClasses | None,
        engine_tokens: Sequence[bytes],
        stop_ids: Sequence[int],
    ) -> None:
        engine_size = len(engine_tokens)
        self.vocab = vocab
        self.classes = classes
        self.logit_width = vocab.logit_width
        self.token_words = (self.logit_width + 31) // 32
        self.engine_size = engine_size
        self.engine_words = (engine_size + 31) // 32
        self.expander_lock = threading.Lock()
        self.expander: MaskExpander | None = None
        self._token_class: npt.NDArray[np.int64] | None = None
        if classes is not None:
            self._token_class = np.asarray(classes.token_class, dtype=np.int64)
            self.expander = MaskExpander(self._token_class, engine_size)
        self._torch_expanders: dict[Any, TorchMaskExpander] = {}
        self._batch_scratch = np.zeros((0, self.engine_words), dtype=np.int32)
        #: the engine writes token bitmasks itself (full reference of the same width: no
        #: scratch row, no copy)
        self.direct_fill = classes is None and self.engine_words == self.token_words
        rem = self.logit_width % 32
        self._pad_mask = np.int32((1 << rem) - 1) if rem else None
        never = np.array([not t for t in engine_tokens], dtype=bool)
        never[list(stop_ids)] = False
        #: engine ids that the policy never allows (empty bytes, not a stop token)
        self.never = never

    @property
    def compressed(self) -> bool:
        """True for a class-representative engine, False for the full-vocabulary reference."""
        return self.classes is not None

    @abstractmethod
    def matcher(self) -> EngineMatcher:
        """A fresh matcher in the initial state."""

    def engine_id(self, token_id: int) -> int:
        """Engine token for a real token id (its class, or itself).

        Raises
        ------
        TokenIdError
            If ``token_id`` is not an integer in ``0 .. logit_width - 1``.
        """
        t = _integer(token_id, "token id", TokenIdError)
        if not 0 <= t < self.logit_width:
            raise TokenIdError(f"token id {t} is outside the vocabulary (0..{self.logit_width - 1})")
        if self._token_class is None:
            return t
        return int(self._token_class[t])

    def allocate_token_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed int32 token bitmask of shape ``(batch, ceil(logit_width / 32))``."""
        return np.zeros((batch, self.token_words), dtype=np.int32)

    def allocate_class_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed int32 engine bitmask of shape ``(batch, engine_words)``."""
        return np.zeros((batch, self.engine_words), dtype=np.int32)

    # -- expanders ----------------------------------------------------------------------------
    def torch_expander(self, device: Any = "cpu") -> TorchMaskExpander:
        """The expander of this grammar's class masks on a torch ``device`` (made once per
        device and shared by every caller; hold :attr:`expander_lock` while using it).

        Parameters
        ----------
        device : str or torch.device
            Where the class bitmasks and logits live (``"cuda"`` and ``"cuda:0"`` share one).

        Returns
        -------
        TorchMaskExpander

        Raises
        ------
        EngineError
            For a full-vocabulary grammar (it has no class masks).
        ImportError
            Without PyTorch.

        Notes
        -----
        The first call per device builds the expander (O(logit_width) on the device; on
        the CPU it reuses :attr:`expander`); later calls are one dictionary lookup.
        """
        ex = self._torch_expanders.get(device)
        if ex is not None:
            return ex
        if self._token_class is None:
            raise EngineError("a full-vocabulary grammar has no class masks to expand")
        import torch

        resolved = torch.empty(0, device=device).device  # "cuda" -> "cuda:<current>"
        with self.expander_lock:
            ex = self._torch_expanders.get(resolved)
            if ex is None:
                ex = TorchMaskExpander(
                    self._token_class, self.engine_size, device=resolved, cpu_expander=self.expander
                )
                self._torch_expanders[resolved] = ex
            self._torch_expanders[device] = ex
        return ex

    def mask_logits(self, logits: Any, class_bitmask: Any) -> Any:
        """Set the logits of tokens whose class bit is 0 to ``-inf``, in place, on the
        logits' device (:meth:`torch_expander`, under :attr:`expander_lock`).

        Parameters
        ----------
        logits : torch.Tensor
            float ``(batch, n)`` with ``n >= logit_width`` (columns past it are set to
            ``-inf`` too).
        class_bitmask : numpy.ndarray or torch.Tensor
            int32 ``(batch, engine_words)``, e.g. from :meth:`fill_next_class_bitmask_batch`.

        Returns
        -------
        torch.Tensor
            ``logits``.

        Raises
        ------
        EngineError
            For a full-vocabulary grammar.
        ValueError
            On shapes that do not fit (from the expander).
        """
        ex = self.torch_expander(logits.device)
        with self.expander_lock:
            return ex.mask_logits(logits, class_bitmask)

    def finish_row(self, engine_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32]) -> None:
        """Engine-mask row -> token-mask row (expansion, or a copy with padding cleared)."""
        if self.expander is not None:
            with self.expander_lock:
                self.expander.expand_row(engine_row, out_row)
            return
        np.copyto(out_row, engine_row[: self.token_words])
        self.clear_padding(out_row[None, :])

    def clear_padding(self, rows: npt.NDArray[np.int32]) -> None:
        """Clear the bits past ``logit_width`` in the last word of each token-mask row."""
        if self._pad_mask is not None:
            rows[:, -1] &= self._pad_mask

    # -- batches ------------------------------------------------------------------------------
    @abstractmethod
    def _batch_engine_fill(
        self, matchers: Sequence[EngineMatcher], engine_bitmask: npt.NDArray[np.int32]
    ) -> None:
        """Fill rows ``0..len(matchers)-1`` of an engine-width bitmask, all at once."""

    def _check_matchers(self, matchers: Sequence[EngineMatcher]) -> None:
        """Every entry is a matcher made by this compiled grammar."""
        for j, m in enumerate(matchers):
            if getattr(m, "compiled", None) is not self or not isinstance(m, EngineMatcher):
                what = "None" if m is None else f"a matcher of another compiled grammar ({type(m).__name__})"
                raise EngineError(f"entry {j} of the batch is {what}, not a matcher of this grammar")

    def _batch_rows(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], words: int, what: str,
        indices: Iterable[object] | None,
    ) -> list[int]:  # fmt: skip
        """Validate a whole batch call before anything is filled; the target row of each matcher."""
        if arr.shape[1] != words:
            raise EngineError(f"{what} must have {words} int32 words per row, got {arr.shape[1]}")
        n = arr.shape[0]
        rows = list(range(len(matchers))) if indices is None else [check_row_index(i, n) for i in indices]
        if len(rows) != len(matchers):
            raise EngineError(f"{len(rows)} indices given for {len(matchers)} matchers")
        if len(set(rows)) != len(rows):
            raise BatchIndexError(f"a row is given twice in the batch indices {rows}")
        self._check_matchers(matchers)
        return rows

    def _run_batch(
        self,
        matchers: Sequence[EngineMatcher],
        bitmask: Any,
        words: int,
        what: str,
        indices: Iterable[object] | None,
        fill: Callable[[Sequence[EngineMatcher], npt.NDArray[np.int32], list[int], list[int]], None],
    ) -> None:
        """Validate a batch, then ``fill`` it (under :attr:`expander_lock`): optimistically,
        without termination checks, when the engine raises on a terminated matcher, and
        redone with the checks (terminated rows zeroed) if it does."""
        arr = as_int32_rows(bitmask, what)
        rows = self._batch_rows(matchers, arr, words, what, indices)
        with self.expander_lock:
            if bool(matchers) and all(m.FILL_RAISES_WHEN_TERMINATED for m in matchers):
                try:
                    fill(matchers, arr, rows, list(range(len(matchers))))
                    return
                except RuntimeError:
                    pass  # a terminated matcher: redo with the checks (rows are rewritten)
            live: list[int] = []
            for j, m in enumerate(matchers):
                if m.is_terminated():
                    arr[rows[j]] = 0
                else:
                    live.append(j)
            fill(matchers, arr, rows, live)

    def _scratch_rows(self, n: int) -> npt.NDArray[np.int32]:
        """``n`` rows of engine-width scratch (kept between calls; under the lock)."""
        if self._batch_scratch.shape[0] < n:
            self._batch_scratch = np.zeros((n, self.engine_words), dtype=np.int32)
        return self._batch_scratch[:n]

    def fill_next_token_bitmask_batch(
        self, matchers: Sequence[EngineMatcher], bitmask: Any, indices: Sequence[int] | None = None
    ) -> None:
        """Fill many matchers' full-vocabulary masks at once (the engine's batch API + expansion).

        Parameters
        ----------
        matchers : sequence of EngineMatcher
            Matchers made by this compiled grammar.
        bitmask : numpy.ndarray or torch.Tensor
            Writable int32 ``(batch, ceil(logit_width / 32))`` on the CPU.
        indices : sequence of int, optional
            Rows of ``bitmask`` to fill, one per matcher, all different (default ``0..len-1``).

        Raises
        ------
        EngineError
            On a bad buffer, a matcher of another grammar (or ``None``), or as many indices
            as matchers not given; nothing is filled then.
        BatchIndexError
            On an index that is not an integer row of ``bitmask``, or a repeated one.

        Notes
        -----
        One engine batch fill over the live matchers (rows of terminated matchers are
        zeroed) and one batch expansion, under :attr:`expander_lock`.
        """
        self._run_batch(matchers, bitmask, self.token_words, "token bitmask", indices, self._token_batch)

    def _token_batch(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], rows: list[int], live: list[int]
    ) -> None:
        n = len(live)
        if n == 0:
            return
        if self.direct_fill and n == len(matchers) and rows == list(range(n)):
            self._batch_engine_fill(matchers, arr[:n])
            self.clear_padding(arr[:n])
            return
        scratch = self._scratch_rows(n)
        self._batch_engine_fill([matchers[j] for j in live], scratch)
        if self.expander is not None:
            self.expander.expand(scratch, arr, indices=[rows[j] for j in live])
            return
        for src, j in enumerate(live):
            self.finish_row(scratch[src], arr[rows[j]])

    def fill_next_class_bitmask_batch(
        self, matchers: Sequence[EngineMatcher], class_bitmask: Any, indices: Sequence[int] | None = None
    ) -> None:
        """Fill many matchers' engine (class) masks at once; no expansion.

        Parameters
        ----------
        matchers : sequence of EngineMatcher
            Matchers made by this compiled grammar.
        class_bitmask : numpy.ndarray or torch.Tensor
            Writable int32 ``(batch, engine_words)`` on the CPU; rows of terminated
            matchers are zeroed.  Pair it with :meth:`mask_logits` to expand on the
            logits' device.
        indices : sequence of int, optional
            As for :meth:`fill_next_token_bitmask_batch`.

        Raises
        ------
        EngineError, BatchIndexError
            As for :meth:`fill_next_token_bitmask_batch`.
        """
        self._run_batch(
            matchers, class_bitmask, self.engine_words, "class bitmask", indices, self._class_batch
        )

    def _class_batch(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], rows: list[int], live: list[int]
    ) -> None:
        if not live:
            return
        if live == list(range(len(matchers))) and rows == live:
            self._batch_engine_fill(matchers, arr[: len(matchers)])
            return
        scratch = self._scratch_rows(len(live))
        self._batch_engine_fill([matchers[j] for j in live], scratch)
        for src, j in enumerate(live):
            arr[rows[j]] = scratch[src]

    def accept_token_batch(self, matchers: Sequence[EngineMatcher], token_ids: Sequence[int]) -> list[bool]:
        """Advance each matcher by its token; the whole batch is checked before any moves.

        Parameters
        ----------
        matchers : sequence of EngineMatcher
            Matchers made by this compiled grammar.
        token_ids : sequence of int
            One real token id per matcher.

        Returns
        -------
        list of bool
            Per matcher, whether its token was accepted (a refused token leaves it unchanged).

        Raises
        ------
        EngineError
            On a matcher of another grammar (or ``None``), or as many tokens as matchers
            not given.
        TokenIdError
            On a token id outside the vocabulary; no matcher has moved then.
        """
        if len(matchers) != len(token_ids):
            raise EngineError(f"{len(matchers)} matchers but {len(token_ids)} tokens")
        self._check_matchers(matchers)
        engine_ids = [self.engine_id(t) for t in token_ids]
        return [m._accept_engine_id(e) for m, e in zip(matchers, engine_ids, strict=True)]
