"""Token equivalence classes (:class:`TokenClasses`): their invariants, checked in one place, and their persistence.

A :class:`TokenClasses` maps every logit index of a vocabulary to a class id.  Tokens in
one class are interchangeable for the grammar (equal displacement), so a grammar engine
may run over one representative per class and expand its class mask back.  They are
computed by :func:`formalgram_cfgzip.compress.compress`; :meth:`TokenClasses.validate` is
the one check of what the engines and the expander rely on, run at construction, by
:meth:`TokenClasses.load` and by the engines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from formalgram.grammar import Grammar
from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint, read_cache, write_cache
from formalgram_cfgzip.errors import CacheError, ClassesInvariantError
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["ALGORITHM_VERSION", "TokenClasses", "compress", "grammar_fingerprint"]

ALGORITHM_VERSION = "cfgzip-displacement-1"
_KIND = "formalgram_cfgzip.TokenClasses"


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """Classes of interchangeable tokens for one (grammar, vocabulary) pair.

    Construction checks every invariant (:meth:`validate`).  The arrays stay writable numpy
    arrays, so the engines check them again before use.

    Attributes
    ----------
    token_class : numpy.ndarray
        int32 array of shape ``(vocab.logit_width,)``: logit index -> class id.
    representatives : numpy.ndarray
        int32 array of shape ``(num_classes,)``: class id -> token id of its representative
        (the byte-wise shortest member; ``-1`` only for an invalid class with no real token).
    invalid_class : int
        Class of tokens never valid in any context (holes, padding ids, special
        non-stop tokens, empty tokens, tokens the grammar rejects everywhere); ``-1`` if
        there is none.
    stop_class : int
        Class holding exactly the stop tokens; ``-1`` if the vocabulary has none.
    vocab : Vocabulary
        The vocabulary the classes were computed for.
    grammar_sha256 : str
        Fingerprint of the grammar (:func:`~formalgram_cfgzip.cache.grammar_fingerprint`,
        formatting-independent) they were computed from.
    stats : dict
        Free-form statistics (time, peak memory, ...), informational only.
    grammar_text_sha256 : str
        :func:`~formalgram_cfgzip.cache.fingerprint_text` of the grammar text they were
        computed from (``""`` when computed from a :class:`~formalgram.grammar.Grammar`):
        an engine given the same text recognises it without parsing it.

    Raises
    ------
    ClassesInvariantError
        If the arrays break an invariant (:meth:`validate`).

    Examples
    --------
    >>> import numpy as np
    >>> v = Vocabulary([b"a", b"b", b"<eos>"], stop_ids=[2], logit_width=4)
    >>> tc = TokenClasses(np.array([0, 0, 1, 2], dtype=np.int32), np.array([0, 2, -1], dtype=np.int32),
    ...                   2, 1, v, "")
    >>> tc.num_classes, tc.members(0).tolist(), tc.invalid.tolist()
    (3, [0, 1], [])
    >>> TokenClasses(np.zeros(4, dtype=np.int32), np.array([0], dtype=np.int32), -1, -1, v, "")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.ClassesInvariantError: a hole, padding id, empty token or special token is not in the invalid class
    """

    token_class: npt.NDArray[np.int32]
    representatives: npt.NDArray[np.int32]
    invalid_class: int
    stop_class: int
    vocab: Vocabulary
    grammar_sha256: str
    stats: dict[str, float] = field(default_factory=dict)
    grammar_text_sha256: str = ""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_classes(self) -> int:
        """Number of classes (the engine's vocabulary size)."""
        return int(self.representatives.shape[0])

    @property
    def invalid(self) -> npt.NDArray[np.int32]:
        """Token ids (below ``vocab.size``) that are never valid anywhere, stop tokens excluded."""
        if self.invalid_class < 0:
            return np.zeros(0, dtype=np.int32)
        ids = np.flatnonzero(self.token_class[: self.vocab.size] == self.invalid_class)
        return ids.astype(np.int32)

    def members(self, class_id: int) -> npt.NDArray[np.int32]:
        """Token ids (logit indices) of one class."""
        return np.flatnonzero(self.token_class == class_id).astype(np.int32)

    def validate(self) -> None:
        """Check every invariant the engines and the expander rely on.

        * ``token_class`` is an int32 array of shape ``(vocab.logit_width,)`` and
          ``representatives`` a non-empty 1-D int32 array; ``n`` is its length;
        * every class id in ``0 .. n-1`` has a member, and ``token_class`` holds no other id
          (so no class is empty: an invalid class exists only when it has members);
        * each class ``c`` has a representative ``0 <= r < vocab.size`` with
          ``token_class[r] == c``; the one exception is the invalid class, whose
          representative is ``-1`` when it holds no real token (only holes and padding ids)
          or when its maker chose none: the engines give the invalid class empty bytes, so
          they never read it;
        * ``invalid_class`` and ``stop_class`` lie in ``-1 .. n-1`` and differ unless both
          are ``-1``;
        * the invalid class holds every token the special-token policy never allows (holes,
          padding ids, empty text tokens and special tokens that are not stop tokens); it
          may also hold text tokens the grammar rejects everywhere, which only the grammar
          can tell;
        * the stop class holds exactly the vocabulary's stop tokens, and exists iff there
          are stop tokens.

        Raises
        ------
        ClassesInvariantError
            Naming the first invariant that fails.

        Notes
        -----
        O(vocab.logit_width) numpy work, plus one pass over the vocabulary's tokens (cached
        for the last vocabulary checked).

        Examples
        --------
        >>> import numpy as np
        >>> v = Vocabulary([b"a", b"b"])
        >>> tc = TokenClasses(np.array([0, 1], dtype=np.int32), np.array([0, 1], dtype=np.int32), -1, -1, v, "")
        >>> tc.representatives[1] = 0  # a representative from another class
        >>> tc.validate()
        Traceback (most recent call last):
        ...
        formalgram_cfgzip.errors.ClassesInvariantError: class 1 has representative 0, a token of class 0
        """
        why = _violation(self)
        if why:
            raise ClassesInvariantError(why)

    # -- persistence ----------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the classes to ``directory`` (``arrays.npz`` + ``meta.json``, no pickle).

        The metadata carries the fingerprints of the grammar, the vocabulary and the
        algorithm version; :meth:`load` refuses a cache whose fingerprints do not match.

        Parameters
        ----------
        directory : path
            The cache directory (created if needed).

        Raises
        ------
        CacheError
            If the directory cannot be written.

        Notes
        -----
        O(vocab.logit_width); written atomically (:func:`~formalgram_cfgzip.cache.write_cache`).

        Examples
        --------
        >>> import tempfile
        >>> from formalgram_cfgzip.compress import compress
        >>> v = Vocabulary([b"(", b")", b"x"])
        >>> tc = compress('root ::= "(" root ")" | "x"', v, progress=False)
        >>> d = tempfile.mkdtemp()
        >>> tc.save(d)
        >>> TokenClasses.load(d, grammar='root ::= "(" root ")" | "x"', vocab=v).num_classes
        3
        """
        meta: dict[str, object] = {
            "kind": _KIND,
            "algorithm": ALGORITHM_VERSION,
            "grammar_sha256": self.grammar_sha256,
            "grammar_text_sha256": self.grammar_text_sha256,
            "vocab_sha256": self.vocab.fingerprint(),
            "vocab_name": self.vocab.name,
            "logit_width": self.vocab.logit_width,
            "num_classes": self.num_classes,
            "invalid_class": self.invalid_class,
            "stop_class": self.stop_class,
            "stats": {k: float(v) for k, v in self.stats.items()},
        }
        write_cache(
            directory,
            {"token_class": self.token_class, "representatives": self.representatives},
            meta,
        )

    @staticmethod
    def load(directory: str | os.PathLike[str], *, grammar: Grammar | str, vocab: Vocabulary) -> TokenClasses:
        """Load classes saved by :meth:`save`, checking they were computed for ``grammar`` and ``vocab``.

        Parameters
        ----------
        directory : path
            The cache directory.
        grammar : Grammar or str
            The grammar (object or GBNF text) the classes must belong to.
        vocab : Vocabulary
            The vocabulary they must belong to.

        Returns
        -------
        TokenClasses
            Classes that passed :meth:`validate`.

        Raises
        ------
        CacheError
            If the cache is missing, corrupted, truncated, from another grammar, vocabulary
            or algorithm version, or its arrays break an invariant (:meth:`validate`).

        Notes
        -----
        O(vocab.logit_width).  A grammar given as the very text the classes were computed
        from is recognised by its text fingerprint; any other text is parsed for its
        canonical fingerprint.  See :meth:`save` for an example.
        """
        where = os.fspath(directory)
        arrays, meta = read_cache(
            directory,
            expect={"kind": _KIND, "algorithm": ALGORITHM_VERSION, "vocab_sha256": vocab.fingerprint()},
        )
        stored = meta.get("grammar_sha256")
        text_sha = meta.get("grammar_text_sha256", "")
        if not isinstance(stored, str) or not isinstance(text_sha, str):
            raise CacheError(
                f"cache metadata in {where!r} lacks the grammar fingerprint; recompute the cache"
            )
        same_text = isinstance(grammar, str) and bool(text_sha) and text_sha == fingerprint_text(grammar)
        if not same_text and stored != grammar_fingerprint(grammar):
            raise CacheError("cache was computed for another grammar (grammar_sha256 differs)")
        try:
            token_class = np.asarray(arrays["token_class"])
            reps = np.asarray(arrays["representatives"])
            invalid_class = int(meta["invalid_class"])  # type: ignore[call-overload]
            stop_class = int(meta["stop_class"])  # type: ignore[call-overload]
            raw_stats = meta.get("stats", {})
            stats = {str(k): float(v) for k, v in raw_stats.items()} if isinstance(raw_stats, dict) else {}
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CacheError(f"cache in {where!r} is incomplete or malformed: {exc}") from exc
        try:
            return TokenClasses(token_class, reps, invalid_class, stop_class, vocab, stored, stats, text_sha)
        except ClassesInvariantError as exc:
            raise CacheError(f"cache in {where!r} has inconsistent arrays: {exc}") from exc


def compress(
    grammar: Grammar | str,
    vocab: Vocabulary,
    *,
    workers: int = 1,
    progress: bool = True,
    gnf_budget: int = 2_000_000,
    max_states: int = 200_000,
    memory_budget: int | None = 4 << 30,
    specialize: bool | None = None,
) -> TokenClasses:
    """The same as :func:`formalgram_cfgzip.compress.compress`, importable from here too.

    Parameters
    ----------
    grammar, vocab, workers, progress, gnf_budget, max_states, memory_budget, specialize
        See :func:`formalgram_cfgzip.compress.compress`.

    Returns
    -------
    TokenClasses

    Notes
    -----
    The pipeline imports this module, so this module imports it only when called.

    Examples
    --------
    >>> compress('root ::= "x"', Vocabulary([b"x", b"y"]), progress=False).invalid.tolist()
    [1]
    """
    from formalgram_cfgzip.compress import compress as run

    return run(
        grammar,
        vocab,
        workers=workers,
        progress=progress,
        gnf_budget=gnf_budget,
        max_states=max_states,
        memory_budget=memory_budget,
        specialize=specialize,
    )


# -- invariants ---------------------------------------------------------------------------

_NEVER: list[tuple[Vocabulary, npt.NDArray[np.int64]]] = []  # the last vocabulary checked


def _never_allowed(vocab: Vocabulary) -> npt.NDArray[np.int64]:
    """Logit indices the special-token policy never allows: holes, padding, empty or special non-stop tokens."""
    for v, ids in _NEVER:
        if v is vocab:
            return ids
    stop = vocab.stop_ids
    special = vocab.special_ids
    never = [i for i, t in enumerate(vocab.tokens) if not t and i not in stop]
    never.extend(i for i in special if i not in stop)
    out = np.unique(np.asarray(never + list(range(vocab.size, vocab.logit_width)), dtype=np.int64))
    _NEVER.clear()
    _NEVER.append((vocab, out))
    return out


def _violation(tc: TokenClasses) -> str:
    """The first invariant of :meth:`TokenClasses.validate` that ``tc`` breaks, or ``""``."""
    vocab = tc.vocab
    classes = tc.token_class
    reps = tc.representatives
    if (
        not isinstance(classes, np.ndarray)
        or classes.dtype != np.int32
        or classes.shape != (vocab.logit_width,)
    ):
        what = (
            f"{classes.dtype} array of shape {classes.shape}"
            if isinstance(classes, np.ndarray)
            else type(classes)
        )
        return f"token_class must be an int32 array of shape ({vocab.logit_width},), got {what}"
    if not isinstance(reps, np.ndarray) or reps.dtype != np.int32 or reps.ndim != 1 or reps.size == 0:
        what = f"{reps.dtype} array of shape {reps.shape}" if isinstance(reps, np.ndarray) else type(reps)
        return f"representatives must be a non-empty 1-D int32 array, got {what}"
    n = int(reps.size)
    inv, stop = tc.invalid_class, tc.stop_class
    for name, c in (("invalid_class", inv), ("stop_class", stop)):
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not -1 <= c < n:
            return f"{name} must be an int in -1..{n - 1}, got {c!r}"
    if inv >= 0 and inv == stop:
        return f"the invalid class and the stop class are both {inv}"
    low, high = int(classes.min()), int(classes.max())
    if low < 0 or high >= n:
        return f"token_class holds class ids outside 0..{n - 1} ({low if low < 0 else high})"
    sizes = np.bincount(classes, minlength=n)
    if not bool(sizes.all()):
        return f"class {int(np.flatnonzero(sizes == 0)[0])} has no member"
    r = reps.astype(np.int64)
    ids = np.arange(n, dtype=np.int64)
    in_range = (r >= 0) & (r < vocab.size)
    owner = np.full(n, -1, dtype=np.int64)
    owner[in_range] = classes[r[in_range]]
    bad = owner != ids
    if inv >= 0 and int(r[inv]) == -1:
        bad[inv] = False
    if bool(bad.any()):
        c = int(np.flatnonzero(bad)[0])
        if not in_range[c]:
            return f"class {c} has representative {int(r[c])}, not a token id in 0..{vocab.size - 1}"
        return f"class {c} has representative {int(r[c])}, a token of class {int(owner[c])}"
    never = _never_allowed(vocab)
    if never.size and (inv < 0 or bool(np.any(classes[never] != inv))):
        return "a hole, padding id, empty token or special token is not in the invalid class"
    stops = vocab.stop_ids
    if stops:
        if stop < 0:
            return "the vocabulary has stop tokens but there is no stop class"
        stop_ids = np.asarray(sorted(stops), dtype=np.int64)
        if int(sizes[stop]) != stop_ids.size or bool(np.any(classes[stop_ids] != stop)):
            return "the stop class is not exactly the vocabulary's stop tokens"
    elif stop >= 0:
        return "a stop class is given but the vocabulary has no stop token"
    return ""
