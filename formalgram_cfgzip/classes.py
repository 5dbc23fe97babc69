"""Token equivalence classes (:class:`TokenClasses`): their data, their invariants, checked in one place, and their persistence.

A :class:`TokenClasses` maps every logit index of a vocabulary to a class id.  Tokens in
one class are interchangeable for the grammar (equal displacement), so a grammar engine
may run over one representative per class and expand its class mask back.  They are
computed by :func:`formalgram_cfgzip.compress.compress`; :meth:`TokenClasses.validate` is
the one check of what the engines and the expander rely on, run at construction, by
:meth:`TokenClasses.load` and by the engines.  Persistence goes through
:mod:`formalgram_cfgzip.cache` (checksummed, optionally signed with a key);
``TokenClasses.load(..., verify=...)`` can also re-derive classes from the grammar with the
displacement search (:mod:`formalgram_cfgzip.verify`, imported only then), since neither a
checksum nor the invariants can tell a cache whose arrays were rewritten consistently.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from formalgram.errors import GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint, read_cache, write_cache
from formalgram_cfgzip.errors import CacheError, ClassesInvariantError
from formalgram_cfgzip.search.domains import ClassDomains
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "ALGORITHM_VERSION",
    "DOMAINS_SUBDIR",
    "VERIFY_SAMPLE",
    "TokenClasses",
    "classes_fingerprint",
    "searched_strategy",
]

ALGORITHM_VERSION = "cfgzip-displacement-1"
DOMAINS_SUBDIR = "domains"  # where TokenClasses.save keeps the classes' domains, when they have them
VERIFY_SAMPLE = 1024  # text tokens drawn by TokenClasses.load(..., verify="sample")
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
    cache_dir : str
        The directory the classes were loaded from (:meth:`load`, or a
        :class:`~formalgram_cfgzip.compress.Compressor`'s cache entry), ``""`` otherwise:
        where engines keep what they derive from the classes (the native engine's tables,
        in its ``native`` subdirectory).  Informational: no fingerprint covers it.
    domains : ClassDomains or None
        The popped sequences of every class, recorded by the search that computed them
        (``compress(..., domains=True)``), for the native engine; ``None`` otherwise.
        :meth:`save` writes them (without the GNF and PDA they carry in memory) and
        :meth:`load` reads them back, bound to the classes by :func:`classes_fingerprint`.
        Checked with the rest (:meth:`validate`).

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
    cache_dir: str = ""
    domains: ClassDomains | None = None

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
        O(vocab.logit_width) numpy work, plus one pass over the vocabulary's tokens the first
        time (:meth:`Vocabulary.invalid_ids <formalgram_cfgzip.vocabulary.Vocabulary.invalid_ids>`).

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
    def save(self, directory: str | os.PathLike[str], *, key: bytes | None = None) -> None:
        """Write the classes to ``directory`` (``arrays.npz`` + ``meta.json``, no pickle).

        The metadata carries the fingerprints of the grammar, the vocabulary and the
        algorithm version; :meth:`load` refuses a cache whose fingerprints do not match.
        Classes with :attr:`domains` also write them, bound to these classes, in the
        ``domains`` subdirectory (:data:`DOMAINS_SUBDIR`; the GNF they carry is not written);
        classes without remove one left there by an earlier save.

        Parameters
        ----------
        directory : path
            The cache directory (created if needed).
        key : bytes, optional
            A secret of at least 16 bytes: the cache is signed (HMAC-SHA-256), and
            :meth:`load` given the same key refuses any cache not signed with it.  Use it
            for caches that cross a trust boundary; the checksum alone is integrity only.

        Raises
        ------
        CacheError
            If the directory cannot be written, or the key is too short.

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
            "unicode_version": unicodedata.unidata_version,
        }
        write_cache(
            directory,
            {"token_class": self.token_class, "representatives": self.representatives},
            meta,
            key=key,
        )
        below = Path(directory) / DOMAINS_SUBDIR
        if self.domains is not None:
            self.domains.save(below, classes_fingerprint(self), key=key)
        elif below.is_dir() and not below.is_symlink():
            shutil.rmtree(below, ignore_errors=True)  # domains of classes saved here before

    @staticmethod
    def load(
        directory: str | os.PathLike[str],
        *,
        grammar: Grammar | str,
        vocab: Vocabulary,
        root: str = "root",
        verify: Literal["none", "sample", "all"] | int = "none",
        seed: int | None = None,
        key: bytes | None = None,
    ) -> TokenClasses:
        """Load classes saved by :meth:`save`, checking they were computed for ``grammar`` and ``vocab``.

        Parameters
        ----------
        directory : path
            The cache directory.
        grammar : Grammar or str
            The grammar (object or GBNF text) the classes must belong to.
        vocab : Vocabulary
            The vocabulary they must belong to.
        root : str
            The start rule of a grammar text (as given to ``compress``).
        verify : {"none", "sample", "all"} or int
            How much of the classes to re-derive from ``grammar`` with the displacement
            search (the pipeline of :func:`~formalgram_cfgzip.compress.compress`) before
            trusting them.  ``"none"`` (default): the fingerprints, the checksum and the
            invariants (:meth:`validate`) only.  ``"sample"``: the classes must also be
            numbered as ``compress`` numbers them (each representative the shortest member,
            lowest id on ties; classes in the order of their representatives, then the
            stop and the invalid class), and :data:`VERIFY_SAMPLE` text tokens drawn at
            random, with the representatives of their classes, are searched: each must
            share its representative's displacement (or have none, in the invalid class),
            and the drawn classes' representatives must differ.  An int: the same with
            that many drawn tokens.  ``"all"``: every token is searched, and the classes
            must be exactly those ``compress`` derives.
        seed : int, optional
            Seed of the drawn tokens (reproducible checks); by default a fresh random seed,
            so that which members are checked cannot be foreseen.  It is named in the error.
        key : bytes, optional
            The secret the cache was saved with: the cache must be signed with it.

        Returns
        -------
        TokenClasses
            Classes that passed :meth:`validate` (and the requested verification).

        Raises
        ------
        CacheError
            If the cache is missing, unreadable, corrupted, truncated, over its size (the
            arrays of ``vocab`` need at most ``8 * vocab.logit_width`` bytes), from another
            grammar, vocabulary or algorithm version, not signed with ``key``, its metadata
            is malformed, its arrays break an invariant (:meth:`validate`), or the
            verification finds classes the grammar does not give (or cannot run: a grammar
            text that does not parse, a GNF or search over the budgets of ``compress``'s
            defaults); also for a ``verify`` that is none of the above, or a negative ``seed``;
            and when the directory holds class domains (:attr:`domains`) that are corrupted,
            unsigned (with a key), for other classes, or inconsistent.  A grammar mismatch
            names the Unicode version the cache was written under when it is not this
            Python's (Lark terminals and regular expressions read ``\\w``, ``\\d`` and
            ``\\s`` by the running Python's tables).

        Notes
        -----
        O(vocab.logit_width) without verification.  A grammar given as the very text the
        classes were computed from is recognised by its text fingerprint; any other text is
        parsed for its canonical fingerprint.

        The checksum is integrity, not authenticity: whoever can write the directory can
        write arrays with a matching checksum and intact invariants (a member moved to
        another class, a cache of another grammar relabelled), and the masks would then be
        wrong.  ``key`` authenticates the writer; ``verify`` checks the content against the
        grammar itself.  Verification costs what ``compress`` costs on the grammar's side
        (GNF conversion, search tables) plus a search over the checked tokens: ``"all"``
        is a recompression without the specialisation trial, ``"sample"`` saves most of
        the vocabulary's search (figures in docs/benchmarks.md, "Caches and budgets").  A sample
        catches a cache of another grammar or a widespread corruption; a single moved
        member is caught with probability about ``sample / len(text tokens)``, so only
        ``"all"`` (or a key) rules out targeted tampering.

        Examples
        --------
        >>> import tempfile
        >>> from formalgram_cfgzip.compress import compress
        >>> text, v, key = 'root ::= "(" root ")" | "x"', Vocabulary([b"(", b")", b"x", b"y"]), b"k" * 16
        >>> d = tempfile.mkdtemp()
        >>> compress(text, v, progress=False).save(d, key=key)
        >>> TokenClasses.load(d, grammar=text, vocab=v, verify="all", key=key).num_classes
        4
        >>> TokenClasses.load(d, grammar=text, vocab=v, key=b"another key, 16+")
        Traceback (most recent call last):
        ...
        formalgram_cfgzip.errors.CacheError: '...meta.json' fails its HMAC check: written with another key, or modified
        """
        where = os.fspath(directory)
        sample = _sample_size(verify)
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise CacheError(f"seed must be an int >= 0 or None, got {seed!r}")
        width = vocab.logit_width
        spec = {
            "token_class": (np.dtype(np.int32), (width,)),
            "representatives": (np.dtype(np.int32), (None,)),
        }
        arrays, meta = read_cache(
            directory,
            expect={"kind": _KIND, "algorithm": ALGORITHM_VERSION, "vocab_sha256": vocab.fingerprint()},
            spec=spec,
            max_bytes=8 * width + 4096,
            key=key,
        )
        stored = meta.get("grammar_sha256")
        text_sha = meta.get("grammar_text_sha256", "")
        if not isinstance(stored, str) or not isinstance(text_sha, str):
            raise CacheError(
                f"cache metadata in {where!r} lacks the grammar fingerprint; recompute the cache"
            )
        same_text = (
            isinstance(grammar, str) and bool(text_sha) and text_sha == fingerprint_text(grammar, root=root)
        )
        if not same_text and stored != grammar_fingerprint(grammar, start=root):
            written = meta.get("unicode_version")
            why = ""
            if isinstance(written, str) and written != unicodedata.unidata_version:
                why = (
                    f"; it was written under Unicode {written} and this Python has Unicode "
                    f"{unicodedata.unidata_version}: Lark terminals and regular expressions read \\w, "
                    "\\d and \\s by these tables, so the same source can give another grammar"
                )
            raise CacheError(f"cache was computed for another grammar (grammar_sha256 differs){why}")
        token_class = arrays["token_class"]
        reps = arrays["representatives"]
        invalid_class = meta.get("invalid_class")
        stop_class = meta.get("stop_class")
        num_classes = meta.get("num_classes")
        raw_stats = meta.get("stats", {})
        for name, value in (("invalid_class", invalid_class), ("stop_class", stop_class)):
            if type(value) is not int:
                raise CacheError(f"cache in {where!r} is malformed: {name} is {value!r}, not an int")
        if type(num_classes) is not int or num_classes != reps.shape[0]:
            raise CacheError(
                f"cache in {where!r} is malformed: num_classes is {num_classes!r} "
                f"but it holds {reps.shape[0]} representatives"
            )
        if meta.get("logit_width") != width:
            raise CacheError(f"cache in {where!r} is malformed: logit_width differs from the vocabulary's")
        if not isinstance(raw_stats, dict) or not all(type(v) in (int, float) for v in raw_stats.values()):
            raise CacheError(f"cache in {where!r} is malformed: stats must map names to numbers")
        stats = {str(k): float(v) for k, v in raw_stats.items()}
        assert isinstance(invalid_class, int) and isinstance(stop_class, int)
        try:
            tc = TokenClasses(
                token_class, reps, invalid_class, stop_class, vocab, stored, stats, text_sha, where
            )
        except ClassesInvariantError as exc:
            raise CacheError(f"cache in {where!r} has inconsistent arrays: {exc}") from None
        below = Path(where) / DOMAINS_SUBDIR
        if below.exists() or below.is_symlink():
            found = ClassDomains.load(below, classes_fingerprint(tc), tc.num_classes, key=key)
            try:
                tc = replace(tc, domains=found)
            except ClassesInvariantError as exc:
                raise CacheError(
                    f"class domains in {os.fspath(below)!r} do not fit the classes: {exc}"
                ) from None
        if sample:
            from formalgram_cfgzip.verify import mismatch  # it runs the pipeline, which imports this module

            drawn = secrets.randbits(63) if seed is None else seed
            try:
                why = mismatch(tc, grammar, sample, drawn, root=root)
            except (GrammarError, GrammarTooLarge) as exc:
                raise CacheError(f"cache in {where!r} cannot be verified: {exc}") from None
            if why:
                raise CacheError(
                    f"cache in {where!r} does not match the grammar: {why} (verify={verify!r}, seed={drawn})"
                )
        return tc


def searched_strategy(stats: Mapping[str, float]) -> str:
    """The GNF construction ``compress`` searched, read from its classes' ``stats``.

    What re-derives the searched grammar (the native engine's tables, cache verification)
    must convert with the same construction.  Classes that do not record it were made with
    ``"auto"``.

    Examples
    --------
    >>> searched_strategy({"gnf_strategy": 1.0}), searched_strategy({})
    ('fast', 'auto')
    """
    from formalgram.transforms.gnf import STRATEGIES

    code = int(stats.get("gnf_strategy", 0.0))
    return STRATEGIES[code] if 0 <= code < len(STRATEGIES) else "auto"


def classes_fingerprint(classes: TokenClasses) -> str:
    """SHA-256 of the classes themselves (class of every logit index, representatives, stop
    and invalid class): what binds saved tables to the very classes they were built for.

    Parameters
    ----------
    classes : TokenClasses

    Returns
    -------
    str
        64 hex digits.

    Notes
    -----
    O(logit_width): one hash over the two int32 arrays (about 0.5 ms at 128k tokens).

    Examples
    --------
    >>> from formalgram_cfgzip.compress import compress
    >>> v = Vocabulary([b"a", b"b"])
    >>> a, b = compress('root ::= "a"', v, progress=False), compress('root ::= "a" | "b"', v, progress=False)
    >>> classes_fingerprint(a) == classes_fingerprint(a), classes_fingerprint(a) == classes_fingerprint(b)
    (True, False)
    """
    h = hashlib.sha256(b"formalgram_cfgzip.TokenClasses\0")
    h.update(f"{classes.num_classes},{classes.stop_class},{classes.invalid_class};".encode())
    h.update(np.ascontiguousarray(classes.token_class, dtype="<i4").tobytes())
    h.update(b";")
    h.update(np.ascontiguousarray(classes.representatives, dtype="<i4").tobytes())
    return h.hexdigest()


# -- invariants ---------------------------------------------------------------------------


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
    never = np.asarray(vocab.invalid_ids(), dtype=np.int64)
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
    if tc.domains is not None:
        if not isinstance(tc.domains, ClassDomains):
            return f"domains must be ClassDomains or None, got {type(tc.domains).__name__}"
        why = tc.domains.inconsistency(n)
        if why:
            return f"the class domains are inconsistent: {why}"
        if bool(np.any((tc.domains.group >= 0) == np.isin(ids, (inv, stop)))):
            return "the class domains give a domain to the stop or invalid class, or none to a text class"
    return ""


# -- verification against the grammar ----------------------------------------------------


def _sample_size(verify: object) -> int:
    """Tokens to draw for ``verify``: 0 for none, -1 for all of them."""
    if verify == "none":
        return 0
    if verify == "sample":
        return VERIFY_SAMPLE
    if verify == "all":
        return -1
    if isinstance(verify, int) and not isinstance(verify, bool) and verify >= 1:
        return verify
    raise CacheError(f"verify must be 'none', 'sample', 'all' or a sample size >= 1, got {verify!r}")
