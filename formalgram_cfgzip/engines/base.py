"""Engine-independent part of the decoding adapters: the protocol, checks and the mapping.

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
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import (
    BatchIndexError,
    ClassesMismatchError,
    EngineError,
    TokenIdError,
)
from formalgram_cfgzip.expand import MaskExpander
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
    "Matcher",
    "TokenIdError",
    "check_classes",
    "engine_vocabulary",
    "grammar_matches",
]


@runtime_checkable
class Matcher(Protocol):
    """What both engines' matchers provide (compressed and full-vocabulary alike)."""

    def accept_token(self, token_id: int) -> bool: ...

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None: ...

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None: ...

    def rollback(self, num_tokens: int = 1) -> None: ...

    def reset(self) -> None: ...

    def is_terminated(self) -> bool: ...


def grammar_matches(classes: TokenClasses, grammar_text: str) -> bool:
    """Whether ``classes`` were computed for ``grammar_text``.

    Accepts the canonical fingerprint of :func:`formalgram_cfgzip.classes.grammar_fingerprint`
    (formatting-independent) and the plain SHA-256 of the UTF-8 text.
    """
    if classes.grammar_sha256 == hashlib.sha256(grammar_text.encode("utf-8")).hexdigest():
        return True
    try:
        from formalgram_cfgzip.classes import grammar_fingerprint

        return classes.grammar_sha256 == grammar_fingerprint(grammar_text)
    except Exception:
        return False


def check_classes(classes: TokenClasses, grammar_text: str | None, vocab: Vocabulary | None = None) -> None:
    """Validate a TokenClasses against its grammar, vocabulary and the special-token policy.

    Parameters
    ----------
    classes : TokenClasses
    grammar_text : str or None
        The grammar the engine will compile (``None`` skips the grammar check).
    vocab : Vocabulary or None
        The vocabulary the caller decodes with (``None``: ``classes.vocab``).

    Raises
    ------
    ClassesMismatchError
        If the fingerprints differ, the arrays are malformed, or a special token, hole,
        empty text token or padding id is outside the invalid class, or the stop class is not
        exactly the stop tokens.

    Complexity
    ----------
    O(logit_width) numpy work (plus parsing the grammar for its fingerprint).
    """
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
    tc = np.asarray(classes.token_class)
    n = classes.num_classes
    if tc.shape != (v.logit_width,) or n < 1:
        raise ClassesMismatchError(
            f"token_class has shape {tc.shape}, expected ({v.logit_width},) for this vocabulary"
        )
    if int(tc.min()) < 0 or int(tc.max()) >= n:
        raise ClassesMismatchError(f"token_class holds ids outside 0..{n - 1}")
    inv, stop = classes.invalid_class, classes.stop_class
    never = [i for i, t in enumerate(v.tokens) if i not in v.stop_ids and (not t or i in v.special_ids)]
    never_arr = np.asarray(never + list(range(v.size, v.logit_width)), dtype=np.int64)
    if never_arr.size and (inv < 0 or bool(np.any(tc[never_arr] != inv))):
        raise ClassesMismatchError(
            "a hole, padding id, empty token or special token is not in the invalid class"
        )
    stops = np.asarray(sorted(v.stop_ids), dtype=np.int64)
    if stops.size:
        if stop < 0 or stop == inv or set(np.flatnonzero(tc == stop).tolist()) != set(stops.tolist()):
            raise ClassesMismatchError("the stop class is not exactly the vocabulary's stop tokens")
    elif stop >= 0:
        raise ClassesMismatchError("a stop class is given but the vocabulary has no stop token")


def engine_vocabulary(vocab: Vocabulary) -> list[bytes]:
    """Bytes the full-vocabulary engine sees for each token id (the special-token policy).

    Text tokens keep their bytes; special tokens, stop tokens and holes get ``b""``.
    The list has ``vocab.size`` entries (padding ids are added by the engines).
    """
    special, stop = vocab.special_ids, vocab.stop_ids
    return [b"" if t is None or i in special or i in stop else t for i, t in enumerate(vocab.tokens)]


def class_vocabulary(classes: TokenClasses) -> list[bytes]:
    """Bytes the compressed engine sees for each class: its representative's (policy applied)."""
    tokens = classes.vocab.tokens
    out: list[bytes] = []
    for k, rep in enumerate(classes.representatives.tolist()):
        if k in (classes.invalid_class, classes.stop_class) or rep < 0 or rep >= len(tokens):
            out.append(b"")
        else:
            t = tokens[rep]
            out.append(t if t is not None else b"")
    return out


_vocab_cache_lock = threading.Lock()


def per_vocabulary(cache: dict[str, Any], vocab: Vocabulary, build: Callable[[], Any]) -> Any:
    """``cache[vocab.fingerprint()]``, made by ``build()`` on a miss and kept (the engines'
    full-vocabulary tokenizers: immutable, and 0.3 s or more to build at 128k tokens).

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
    checks arguments and expands masks.
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
    def _engine_accept(self, engine_id: int) -> bool: ...

    @abstractmethod
    def _engine_fill(self, bitmask: npt.NDArray[np.int32], index: int) -> None:
        """Fill row ``index`` of an engine-width int32 bitmask."""

    @abstractmethod
    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""

    @abstractmethod
    def reset(self) -> None:
        """Back to the initial state."""

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
            If ``token_id`` is not in ``0 .. logit_width - 1``.
        """
        eid = self.compiled.engine_id(token_id)
        if self.compiled.never[eid]:
            return False  # never allowed by the policy; spares the engine's warning
        return self._engine_accept(eid)

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """Write the engine's own mask (one bit per engine token) into row ``index``.

        For a compressed grammar the bits are classes; for the full reference, tokens.
        After a stop token was accepted the row is all zeros (nothing may follow).
        Shape ``(batch, engine_words)``; see :attr:`CompiledGrammar.engine_words`.
        """
        arr = as_int32_rows(class_bitmask, "class bitmask")
        c = self.compiled
        if arr.shape[1] != c.engine_words:
            raise EngineError(
                f"class bitmask must have {c.engine_words} int32 words per row, got {arr.shape[1]}"
            )
        if not 0 <= index < arr.shape[0]:
            check_row_index(index, arr.shape[0])
        self._fill_live(arr, index)

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask (XGrammar layout) into row ``index`` of ``bitmask``.

        ``bitmask`` is int32 of shape ``(batch, ceil(logit_width / 32))`` (numpy, or a CPU
        torch tensor); bit ``j`` of word ``w`` is token ``32 * w + j``.  After a stop token
        was accepted the row is all zeros (nothing may follow).

        Raises
        ------
        EngineError
            On a dtype or shape mismatch.
        BatchIndexError
            If ``index`` is not a row of ``bitmask``.
        """
        if (  # the common case, checked inline: no helper calls before the engine's fill
            type(bitmask) is np.ndarray
            and bitmask.dtype is _INT32
            and bitmask.ndim == 2
            and bitmask.shape[1] == self._token_words
            and 0 <= index < bitmask.shape[0]
            and bitmask.flags.c_contiguous
        ):
            arr = bitmask
        else:
            arr = self._checked_token_bitmask(bitmask, index)
        write = self._write_row
        if write is None and self.compiled.direct_fill:
            if self._fill_live(arr, index):
                self.compiled.clear_padding(arr[index : index + 1])
            return
        scratch = self._scratch
        if not self._fill_live(scratch, 0):
            arr[index] = 0
        elif write is not None:
            write(scratch, arr, index)
        else:
            self.compiled.finish_row(scratch[0], arr[index])

    def _checked_token_bitmask(self, bitmask: Any, index: int) -> npt.NDArray[np.int32]:
        """``bitmask`` as a numpy int32 array whose row ``index`` has the token width, or the
        typed error saying why not."""
        arr = as_int32_rows(bitmask, "token bitmask")
        c = self.compiled
        if arr.shape[1] != c.token_words:
            raise EngineError(
                f"token bitmask must have ceil({c.logit_width}/32) = {c.token_words} int32 words per row, "
                f"got {arr.shape[1]}"
            )
        check_row_index(index, arr.shape[0])
        return arr


class CompiledGrammar(ABC):
    """A grammar compiled by one engine over a compressed or a full engine vocabulary.

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
        self.expander: MaskExpander | None = None
        self._token_class: npt.NDArray[np.int64] | None = None
        if classes is not None:
            self._token_class = np.asarray(classes.token_class, dtype=np.int64)
            self.expander = MaskExpander(self._token_class, engine_size)
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
        """Engine token for a real token id (its class, or itself)."""
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise TokenIdError(f"token id must be an integer, got {token_id!r}")
        t = int(token_id)
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

    def finish_row(self, engine_row: npt.NDArray[np.int32], out_row: npt.NDArray[np.int32]) -> None:
        """Engine-mask row -> token-mask row (expansion, or a copy with padding cleared)."""
        if self.expander is not None:
            self.expander.expand_row(engine_row, out_row)
            return
        np.copyto(out_row, engine_row[: self.token_words])
        self.clear_padding(out_row[None, :])

    def clear_padding(self, rows: npt.NDArray[np.int32]) -> None:
        """Clear the bits past ``logit_width`` in the last word of each token-mask row."""
        if self._pad_mask is not None:
            rows[:, -1] &= self._pad_mask

    @abstractmethod
    def _batch_engine_fill(
        self, matchers: Sequence[EngineMatcher], engine_bitmask: npt.NDArray[np.int32]
    ) -> None:
        """Fill rows ``0..len(matchers)-1`` of an engine-width bitmask, all at once."""

    def _batch_rows(
        self,
        matchers: Sequence[EngineMatcher],
        arr: npt.NDArray[np.int32],
        words: int,
        what: str,
        indices: Sequence[int] | None,
        check_terminated: bool = True,
    ) -> tuple[list[int], list[int]]:
        """Validate a batch call; zero the rows of terminated matchers.

        Returns the target row of each matcher and the positions of the live matchers
        (all of them, unchecked, when ``check_terminated`` is false).
        """
        if arr.shape[1] != words:
            raise EngineError(f"{what} must have {words} int32 words per row, got {arr.shape[1]}")
        rows = list(range(len(matchers))) if indices is None else [int(i) for i in indices]
        if len(rows) != len(matchers):
            raise EngineError(f"{len(rows)} indices given for {len(matchers)} matchers")
        for r in rows:
            check_row_index(r, arr.shape[0])
        for m in matchers:
            if m.compiled is not self:
                raise EngineError("a matcher of another compiled grammar was passed")
        if not check_terminated:
            return rows, list(range(len(matchers)))
        live: list[int] = []
        for j, m in enumerate(matchers):
            if m.is_terminated():
                arr[rows[j]] = 0
            else:
                live.append(j)
        return rows, live

    @staticmethod
    def _optimistic(matchers: Sequence[EngineMatcher]) -> bool:
        """Whether a batch may be filled without checking termination first (the engine
        raises on a terminated matcher, and the call is then redone with the checks)."""
        return bool(matchers) and all(m.FILL_RAISES_WHEN_TERMINATED for m in matchers)

    def fill_next_token_bitmask_batch(
        self, matchers: Sequence[EngineMatcher], bitmask: Any, indices: Sequence[int] | None = None
    ) -> None:
        """Fill many matchers' full-vocabulary masks at once (the engine's batch API + expansion).

        Parameters
        ----------
        matchers : sequence of matchers from this compiled grammar
        bitmask : int32 array ``(batch, ceil(logit_width / 32))`` (numpy or CPU torch)
        indices : rows of ``bitmask`` to fill, one per matcher (default ``0..len-1``)

        Raises
        ------
        EngineError, BatchIndexError
        """
        arr = as_int32_rows(bitmask, "token bitmask")
        self._run_batch(matchers, arr, self.token_words, "token bitmask", indices, self._token_batch)

    def _run_batch(
        self,
        matchers: Sequence[EngineMatcher],
        arr: npt.NDArray[np.int32],
        words: int,
        what: str,
        indices: Sequence[int] | None,
        fill: Callable[[Sequence[EngineMatcher], npt.NDArray[np.int32], list[int], list[int]], None],
    ) -> None:
        """Validate a batch and ``fill`` it: optimistically (no termination checks) when the
        engine raises on a terminated matcher, redone with the checks if it does."""
        if self._optimistic(matchers):
            rows, live = self._batch_rows(matchers, arr, words, what, indices, False)
            try:
                fill(matchers, arr, rows, live)
                return
            except RuntimeError:
                pass  # a terminated matcher: redo with the checks (rows are rewritten)
        rows, live = self._batch_rows(matchers, arr, words, what, indices)
        fill(matchers, arr, rows, live)

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
        if self._batch_scratch.shape[0] < n:
            self._batch_scratch = np.zeros((n, self.engine_words), dtype=np.int32)
        scratch = self._batch_scratch[:n]
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

        ``class_bitmask`` is int32 ``(batch, engine_words)``; rows of terminated matchers
        are zeroed.  Pair it with :class:`~formalgram_cfgzip.expand.TorchMaskExpander`
        to expand on the logits' device.
        """
        arr = as_int32_rows(class_bitmask, "class bitmask")
        self._run_batch(matchers, arr, self.engine_words, "class bitmask", indices, self._class_batch)

    def _class_batch(
        self, matchers: Sequence[EngineMatcher], arr: npt.NDArray[np.int32], rows: list[int], live: list[int]
    ) -> None:
        if not live:
            return
        if live == list(range(len(matchers))) and rows == live:
            self._batch_engine_fill(matchers, arr[: len(matchers)])
            return
        n = len(live)
        if self._batch_scratch.shape[0] < n:
            self._batch_scratch = np.zeros((n, self.engine_words), dtype=np.int32)
        scratch = self._batch_scratch[:n]
        self._batch_engine_fill([matchers[j] for j in live], scratch)
        for src, j in enumerate(live):
            arr[rows[j]] = scratch[src]

    def accept_token_batch(self, matchers: Sequence[EngineMatcher], token_ids: Sequence[int]) -> list[bool]:
        """Advance each matcher by its token (default: one by one)."""
        if len(matchers) != len(token_ids):
            raise EngineError(f"{len(matchers)} matchers but {len(token_ids)} tokens")
        return [m.accept_token(t) for m, t in zip(matchers, token_ids, strict=True)]
