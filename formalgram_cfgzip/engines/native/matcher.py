"""The native backend of :mod:`formalgram_cfgzip.engines`: compiled grammars and matchers over
real token ids, behind the protocol of :mod:`formalgram_cfgzip.engines.base`.

:func:`compile_grammar` (``engines.compile_grammar(classes, text, engine="native")``) checks
the classes as the other backends do, builds or loads the grammar's
:class:`~formalgram_cfgzip.engines.native.tables.NativeTables` and returns a
:class:`NativeCompiled`; its :class:`NativeMatcher` advances a graph-structured stack by the
bytes of each accepted token's class representative (tokens of one class have one
displacement, so they leave the same stacks) and fills class masks with one walk of that
stack through the domain automaton.  Token masks, batches, rollback, the special-token
policy, the expanders (one per torch device) and every argument check are the shared ones
of :class:`~formalgram_cfgzip.engines.base.CompiledGrammar` and
:class:`~formalgram_cfgzip.engines.matcher.EngineMatcher`.  The start rule is the ``root``
every engine and ``compress`` take.

Kernels: the C kernel ``_cnative`` when it is built (``kernel="auto"``; not with
``FORMALGRAM_NO_CNATIVE=1``), else the pure-Python
:class:`~formalgram_cfgzip.engines.native.gss.PyState`; both give identical masks.  The
native engine needs classes: there is no full-vocabulary variant (:func:`compile_full`
refuses).
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from formalgram.grammar import Grammar
from formalgram_cfgzip.classes import TokenClasses, classes_fingerprint
from formalgram_cfgzip.engines.arguments import prepare_compressed
from formalgram_cfgzip.engines.base import CompiledGrammar
from formalgram_cfgzip.engines.matcher import EngineMatcher
from formalgram_cfgzip.engines.native.gss import PyState
from formalgram_cfgzip.engines.native.prewarm import reachable_class_rows, remember_prefixes
from formalgram_cfgzip.engines.native.tables import NativeTables, build_tables
from formalgram_cfgzip.engines.tokens import class_vocabulary
from formalgram_cfgzip.errors import CacheError, EngineError
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "TABLES_SUBDIR",
    "Kernel",
    "NativeCompiled",
    "NativeMatcher",
    "StateLike",
    "c_module",
    "compile_full",
    "compile_grammar",
    "resolve_tables",
]

#: Which kernel runs the matchers: the C kernel when built (``"auto"``), or one of them.
Kernel = Literal["auto", "c", "python"]


class StateLike(Protocol):
    """What both kernels' states provide."""

    def accept_bytes(self, data: bytes, /) -> bool: ...

    def accept_class(self, data: bytes, cls: int, /) -> bool: ...

    def accept_stop(self) -> bool: ...

    def rollback(self, num_tokens: int, /) -> None: ...

    def compact(self, keep: int, /) -> None: ...

    def reset(self) -> None: ...

    def fill(self, row: Any, /) -> None: ...

    def forget_row(self) -> None: ...

    def fill_into(self, bitmask: Any, index: int, /) -> None: ...

    def stop_allowed(self) -> bool: ...

    def is_terminated(self) -> bool: ...

    def tops(self) -> tuple[int, ...]: ...

    def node(self, i: int, /) -> tuple[int, tuple[int, ...]]: ...

    def info(self) -> dict[str, int]: ...


def c_module() -> Any:
    """The compiled kernel module, or ``None`` (not built, or ``FORMALGRAM_NO_CNATIVE=1``)."""
    if os.environ.get("FORMALGRAM_NO_CNATIVE", "") not in ("", "0"):
        return None
    try:
        from formalgram_cfgzip.engines.native import _cnative
    except ImportError:
        return None
    return _cnative


def _c_tables(module: Any, t: NativeTables) -> Any:
    d = t.domains
    try:
        return module.Tables(
            t.num_symbols,
            t.start_symbol,
            t.accepts_empty,
            t.num_classes,
            t.stop_class,
            t.byte_class,
            t.trie_sym,
            t.trie_up,
            t.trans_key,
            t.trans_start,
            t.trans_push,
            d.edge_start,
            d.edge_sym,
            d.edge_to,
            d.out,
            d.set_start,
            d.set_class,
        )
    except (ValueError, TypeError, OverflowError) as exc:
        raise EngineError(f"the native C kernel refuses the tables: {exc}") from None


def _shared_path(matcher: weakref.ReferenceType[NativeMatcher], bitmask: Any, index: int = 0) -> None:
    """The fused fills' way to a matcher's shared path (what they do not take themselves), the
    matcher held weakly; only its own attributes call it, so it is alive."""
    alive = matcher()
    assert alive is not None
    alive._fill_shared(bitmask, index)


class NativeMatcher(EngineMatcher):
    """Matcher over real token ids backed by a native kernel state (one sequence).

    See :class:`~formalgram_cfgzip.engines.matcher.EngineMatcher` for the protocol and its errors.
    """

    # The kernels' fills write an all-zero row once a stop token was accepted -- what the
    # checked path of the batch fills would write -- so batches take the unchecked path
    # (no per-matcher is_terminated() call).
    FILL_RAISES_WHEN_TERMINATED = True

    def __init__(self, compiled: NativeCompiled) -> None:
        super().__init__(compiled)
        self._state: StateLike = compiled.new_state()
        self._bytes = compiled.engine_tokens
        self._stop = compiled.stop_class
        self._fill_into = self._state.fill_into
        self._class_of = compiled.class_list
        self._never = compiled.never_list
        self._width = compiled.logit_width
        keep = compiled.max_rollback_tokens
        #: history length that triggers a compaction down to ``keep`` tokens (amortised O(1))
        self._keep = keep if keep is not None else -1
        self._compact_at = 2 * keep + 1 if keep is not None else -1
        # The fused fill and expansion (both C kernels): the state expands its class mask through
        # the compiled grammar's expansion kernel in one call.  It is bound as this matcher's
        # fill_next_token_bitmask (no Python frame on the hot path); any argument it does not
        # take itself goes to the shared path, which raises the typed errors.
        ex = compiled.expander
        kernel = ex.c_kernel if ex is not None else None
        bind = getattr(self._state, "bind", None)
        fill_bound = getattr(self._state, "fill_bound", None)
        update_bound = getattr(self._state, "update_bound", None)
        if kernel is not None and bind is not None and fill_bound is not None and update_bound is not None:
            # the shared path held weakly: a bound method kept in this matcher's own dict would
            # make a reference cycle, and every matcher, with its compiled grammar and their C
            # buffers, would wait for the cyclic collector (then freed in whichever request's
            # time that collection falls: a new schema's first mask, on MaskBench)
            bind(kernel, partial(_shared_path, weakref.ref(self)))
            self.__dict__["fill_next_token_bitmask"] = fill_bound
            self.__dict__["update_next_token_bitmask"] = update_bound

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask (XGrammar layout) into row ``index`` of ``bitmask``.

        As :meth:`EngineMatcher.fill_next_token_bitmask
        <formalgram_cfgzip.engines.matcher.EngineMatcher.fill_next_token_bitmask>` (same
        arguments, rows and errors).

        Notes
        -----
        With both C kernels each matcher binds this name to its state's fused C entry
        ``State.fill_bound`` (``State.fill_token`` with the grammar's expansion kernel and the
        shared path kept by ``State.bind``, so no Python callable stands between the call and
        C): a 2-D int32 numpy bitmask in shape and a plain int row take one call into C, the
        class fill (answered from the state's memo when the stack's tops are those of its last
        fill) and the expansion through the compiled grammar's row cache.
        That call holds the GIL throughout, so it needs no
        :attr:`~formalgram_cfgzip.engines.base.CompiledGrammar.expander_lock`: no other
        thread can use the expander in between.  Other arguments (torch tensors, 1-D rows,
        numpy integers, anything to refuse) take the shared path.  The matcher keeps the
        last array it wrote through this entry referenced and its buffer exported (checked
        once), until it writes another array, takes the shared path or is dropped; an array
        made read-only after that export is still written.
        """
        self._fill_shared(bitmask, index)

    def update_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Bring row ``index`` of ``bitmask`` to the full-vocabulary mask, writing only what changed.

        As :meth:`EngineMatcher.update_next_token_bitmask
        <formalgram_cfgzip.engines.matcher.EngineMatcher.update_next_token_bitmask>` (the
        row must hold this matcher's last mask written there).

        Notes
        -----
        With both C kernels each matcher binds this name to its state's fused C entry
        ``State.update_bound`` (``State.update_token``, bound as for
        :meth:`fill_next_token_bitmask`): on the array object and row of this matcher's last
        fused fill or update (it keeps a reference to the array), the class fill, then nothing written
        when the class mask is that fill's, the differing classes' tokens flipped where the
        row lies when the cost model finds that cheaper than copying a whole row, else the
        whole row; on any other array or row, the fused fill.  Any write by another path (a
        batch fill, the shared path) makes the matcher forget the row.
        """
        self._fill_shared(bitmask, index)

    def _fill_shared(self, bitmask: Any, index: int = 0) -> None:
        EngineMatcher.fill_next_token_bitmask(self, bitmask, index)

    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it.

        Raises
        ------
        TokenIdError
            If ``token_id`` is not an integer in ``0 .. logit_width - 1``.
        """
        if type(token_id) is int and 0 <= token_id < self._width:  # the common case, inline
            k = self._class_of[token_id]
        else:  # numpy integers, and the typed errors
            k = self.compiled.engine_id(token_id)
        return self._accept_engine_id(k)

    def _accept_engine_id(self, engine_id: int) -> bool:
        if self._never[engine_id]:
            return False
        state = self._state
        ok = (
            state.accept_stop()
            if engine_id == self._stop
            else state.accept_class(self._bytes[engine_id], engine_id)
        )
        if ok:
            history = self._history
            history.append(engine_id)
            if len(history) == self._compact_at:
                self._compact()
        return ok

    def _compact(self) -> None:
        """Forget all but the last ``max_rollback_tokens`` tokens, freeing their stack nodes."""
        keep = self._keep
        self._state.compact(keep)
        if keep:
            del self._history[:-keep]
        else:
            self._history.clear()

    # -- engine hooks -----------------------------------------------------------------------
    def _engine_accept(self, engine_id: int) -> bool:
        if engine_id == self._stop:
            return self._state.accept_stop()
        return self._state.accept_class(self._bytes[engine_id], engine_id)

    def _engine_fill(self, bitmask: npt.NDArray[np.int32], index: int) -> None:
        self._fill_into(bitmask, index)

    def _fill_live(self, bitmask: npt.NDArray[np.int32], index: int) -> bool:
        # the kernel writes an all-zero row once a stop token was accepted: no separate check
        self._fill_into(bitmask, index)
        return True

    def _engine_rollback(self, num_tokens: int) -> None:
        self._state.rollback(num_tokens)

    def _engine_reset(self) -> None:
        self._state.reset()

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return self._state.is_terminated()

    # -- extras -----------------------------------------------------------------------------
    def stop_allowed(self) -> bool:
        """Whether the text so far is in the language (a stop token may come next)."""
        return self._state.stop_allowed()

    def info(self) -> dict[str, int]:
        """Sizes of the graph-structured stack and of the last walk (benchmarks)."""
        return self._state.info()


class NativeCompiled(CompiledGrammar):
    """A grammar compiled for the native engine over token classes.

    Made by :func:`compile_grammar`; see
    :class:`~formalgram_cfgzip.engines.base.CompiledGrammar` for the shared attributes.

    Parameters
    ----------
    classes : TokenClasses
    tables : NativeTables
        Tables built for ``classes`` (:func:`~formalgram_cfgzip.engines.native.tables.build_tables`).
    kernel : {"auto", "c", "python"}, keyword-only
        ``"auto"``: the C kernel when built, else pure Python.
    max_rollback_tokens : int or None, keyword-only
        Bound on :meth:`~formalgram_cfgzip.engines.matcher.EngineMatcher.rollback`: once a
        matcher holds twice this many accepted tokens it forgets all but the last this many
        (a rollback never reaches past a forgotten position) and frees the stack nodes that
        only older positions reached, so its memory stays bounded however long the text.
        ``None`` (default): everything since the start can be undone, and the stack grows
        with the text.

    Raises
    ------
    EngineError
        If ``kernel`` is unknown, ``kernel="c"`` and the C kernel is not built,
        ``max_rollback_tokens`` is not ``None`` or an integer >= 0, or the tables were built
        for other classes or are inconsistent.

    Attributes
    ----------
    kernel : str
        ``"c"`` or ``"python"``: the kernel in use.
    tables : NativeTables
    engine_tokens : list of bytes
        Per class, the bytes a matcher advances by (the representative's; ``b""`` for the
        stop and the invalid class).
    stop_class : int
        ``classes.stop_class``.
    max_rollback_tokens : int or None
        As given.

    Notes
    -----
    Construction copies the tables into the C kernel once (O(size of the tables)) and builds
    the expander (O(logit_width)).  All matchers share the kernel's tables and scratch;
    every kernel call holds the GIL, so the shared scratch is never used by two threads at
    once.  Batch fills run in the calling thread (microseconds per row).
    """

    def __init__(
        self,
        classes: TokenClasses,
        tables: NativeTables,
        *,
        kernel: Kernel = "auto",
        max_rollback_tokens: int | None = None,
        _tokens: list[bytes] | None = None,
        _own_tables: bool = False,
    ) -> None:
        # compile_grammar's shortcuts: ``_tokens`` is class_vocabulary(classes), already
        # computed; ``_own_tables``: the tables were built from these very classes in the same
        # call, so their classes' fingerprint (a hash of the 128k-entry class array) is theirs
        if kernel not in ("auto", "c", "python"):
            raise EngineError(f"kernel must be 'auto', 'c' or 'python', got {kernel!r}")
        if max_rollback_tokens is not None and (
            isinstance(max_rollback_tokens, bool)
            or not isinstance(max_rollback_tokens, (int, np.integer))
            or max_rollback_tokens < 0
        ):
            raise EngineError(
                f"max_rollback_tokens must be None or an integer >= 0, got {max_rollback_tokens!r}"
            )
        _check_tables(tables, classes, fingerprint=not _own_tables)
        module = c_module() if kernel != "python" else None
        if kernel == "c" and module is None:
            raise EngineError("the native C kernel (formalgram_cfgzip.engines.native._cnative) is not built")
        tokens = class_vocabulary(classes) if _tokens is None else _tokens
        stops = [classes.stop_class] if classes.stop_class >= 0 else []
        super().__init__(classes.vocab, classes, tokens, stops)
        self.tables = tables
        self.kernel = "c" if module is not None else "python"
        self.engine_tokens = tokens
        self.stop_class = classes.stop_class
        self.max_rollback_tokens = None if max_rollback_tokens is None else int(max_rollback_tokens)
        #: class of every logit index (a view of the int64 copy made above: its items index
        #: as Python ints, with no 128k-item list built before the first mask) and the
        #: policy's never-allowed classes as a list: one index per accepted token instead of
        #: a numpy scalar lookup
        assert self._token_class is not None  # classes given
        self.class_list: Sequence[int] = self._token_class.data
        self.never_list: list[bool] = self.never.tolist()
        self._module = module
        self._ctables = _c_tables(module, tables) if module is not None else None
        if self.expander is not None:
            # every class mask is a union of the domain automaton's class sets: the expander
            # keeps the token rows of the large ones and patches a miss from the nearest
            self.expander.keep_sets(tables.domains.set_start, tables.domains.set_class)

    def prewarm(
        self,
        *,
        max_rows: int = 256,
        max_prefixes: int = 1024,
        max_seconds: float = 1.0,
        memory_budget: int = 8 << 20,
        min_cost_ns: float = 0.0,
    ) -> int:
        """Meet the first states ahead of the first request: their class masks stored, their token rows pinned.

        Two bounded explorations from the start.
        :func:`~formalgram_cfgzip.engines.native.prewarm.remember_prefixes` stores the class
        masks of the first paths of token classes in the C kernel's prefix memo (a matcher
        on one of those paths fills without walking its stack);
        :func:`~formalgram_cfgzip.engines.native.prewarm.reachable_class_rows` goes deeper,
        each distinct stack once, the states that show a new class mask first.  The class
        masks of both go to the expander's
        :meth:`~formalgram_cfgzip.expand.cpu.MaskExpander.pin_rows` (the memo's first,
        replacing the rows pinned so far): a row-cache miss on one of them is one copy of its
        pinned token row.  The memo and the pinned rows outlive
        :meth:`~formalgram_cfgzip.expand.cpu.MaskExpander.clear_cache`; masks are unchanged.

        Parameters
        ----------
        max_rows : int
            Most class masks of the deeper exploration (see ``reachable_class_rows``).
        max_prefixes : int
            Most paths in the prefix memo (see ``remember_prefixes``).
        max_seconds : float
            Each exploration's wall-clock budget.
        memory_budget, min_cost_ns : int, float
            As for ``pin_rows``: bytes of pinned token rows (the masks met first are pinned
            first), and the least modelled cost of a row worth pinning.

        Returns
        -------
        int
            Rows pinned; 0 with the numpy expansion kernel, which pins none.  (The memo's
            paths: a matcher's ``info()["prefixes"]``; none with the pure-Python kernel.)

        Raises
        ------
        EngineError
            On bounds that are not as above.

        Notes
        -----
        Cost: the two explorations (each within ``max_seconds``), then one row expansion per
        pinned row (within ``memory_budget``); the memo holds ``max_prefixes`` class rows at
        most.

        Examples
        --------
        >>> from formalgram_cfgzip import Vocabulary, compress
        >>> from formalgram_cfgzip.engines import compile_grammar
        >>> words = [b"{", b"}", b'"', b"x", b"xy", b"</s>"]
        >>> vocab = Vocabulary(words, special_ids=[5], stop_ids=[5])
        >>> text = 'root ::= "{" ("\\"" [xy]* "\\"")? "}"'
        >>> native = compile_grammar(compress(text, vocab, progress=False), text, engine="native")
        >>> native.prewarm(min_cost_ns=0.0) == native.expander.num_pinned_rows
        True
        """
        _, first = remember_prefixes(self, max_prefixes=max_prefixes, max_seconds=max_seconds)
        rows = reachable_class_rows(self, max_rows=max_rows, max_seconds=max_seconds)
        if self.expander is None:
            return 0
        both = np.concatenate([first, rows]) if first.shape[0] else rows
        return self.expander.pin_rows(both, memory_budget=memory_budget, min_cost_ns=min_cost_ns)

    def new_state(self) -> StateLike:
        """A fresh kernel state (empty prefix)."""
        if self._module is not None:
            state: StateLike = self._module.State(self._ctables)
            return state
        return PyState(self.tables)

    def matcher(self) -> NativeMatcher:
        """A fresh matcher in the initial state."""
        return NativeMatcher(self)

    def accept_token_batch(self, matchers: Sequence[EngineMatcher], token_ids: Sequence[int]) -> list[bool]:
        """Advance each matcher by its token; the whole batch is checked before any moves
        (as :meth:`CompiledGrammar.accept_token_batch
        <formalgram_cfgzip.engines.base.CompiledGrammar.accept_token_batch>`, with the
        matchers' list lookups for plain int ids).

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
        cls, width = self.class_list, self.logit_width
        ids = [cls[t] if type(t) is int and 0 <= t < width else self.engine_id(t) for t in token_ids]
        return [m._accept_engine_id(e) for m, e in zip(matchers, ids, strict=True)]

    def _batch_engine_fill(
        self, matchers: Sequence[EngineMatcher], engine_bitmask: npt.NDArray[np.int32]
    ) -> None:
        states = [m._state for m in matchers if isinstance(m, NativeMatcher)]
        if len(states) != len(matchers):
            raise EngineError("matchers of another engine were passed to a native batch")
        for s in states:  # a batch may write the rows their updates would patch
            s.forget_row()
        if self._module is not None:
            self._module.fill_batch(states, engine_bitmask)
            return
        for i, s in enumerate(states):
            s.fill(engine_bitmask[i])


def _check_tables(tables: object, classes: TokenClasses, *, fingerprint: bool = True) -> None:
    """The typed error when ``tables`` were not built for ``classes`` or cannot be used
    (``fingerprint=False``: the classes' fingerprint is not compared, for tables just built
    from them)."""
    if not isinstance(tables, NativeTables):
        raise EngineError(f"tables must be NativeTables, got {type(tables).__name__}")
    if (
        tables.num_classes != classes.num_classes
        or tables.stop_class != classes.stop_class
        or tables.invalid_class != classes.invalid_class
        or tables.grammar_sha256 != classes.grammar_sha256
        or tables.vocab_sha256 != classes.vocab.fingerprint()
        or (fingerprint and tables.classes_sha256 != classes_fingerprint(classes))
    ):
        raise EngineError("the native tables were built for other classes (or another grammar or vocabulary)")
    why = tables.inconsistency()
    if why:
        raise EngineError(f"the native tables are inconsistent: {why}")


#: The subdirectory of a classes' cache directory that holds their native tables.
TABLES_SUBDIR = "native"


def resolve_tables(
    classes: TokenClasses,
    grammar: Grammar | str,
    tables: NativeTables | str | os.PathLike[str] | None,
    *,
    root: str = "root",
) -> NativeTables:
    """The tables to compile with: given, loaded from a directory, or built (and saved there).

    Parameters
    ----------
    classes : TokenClasses
        The classes (already checked against ``grammar``).
    grammar : Grammar or str
        Their grammar.
    tables : NativeTables, path or None
        A :class:`NativeTables`: used as it is.  A directory: loaded from it when it holds
        saved tables (:meth:`NativeTables.load`), else built and saved there.  ``None``:
        the ``native`` subdirectory of ``classes.cache_dir`` (classes loaded with
        :meth:`TokenClasses.load <formalgram_cfgzip.classes.TokenClasses.load>` or from a
        :class:`~formalgram_cfgzip.compress.Compressor` cache), loaded when it holds tables
        of these classes, else built and saved there (a stale or corrupted file there is
        rebuilt and replaced, with a warning; one that cannot be written only warns); for
        classes without a cache directory, built now
        (:func:`~formalgram_cfgzip.engines.native.tables.build_tables`).
    root : str, keyword-only
        The start rule of a grammar text.

    Returns
    -------
    NativeTables

    Raises
    ------
    CacheError
        If the directory given holds tables that are corrupted or belong to other classes,
        a grammar or a vocabulary other than ``classes``' (refused, never rebuilt), or the
        new tables cannot be written there.
    EngineError
        If ``tables`` is of another type.
    GrammarTooLarge
        If building the tables exceeds a budget.

    Notes
    -----
    Loading costs O(size of the tables) (0.1-0.4 s for the largest shared grammar); a
    build costs a GNF conversion and a displacement search over the representatives
    (docs/native-engine.md: 0.1 s to 245 s).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from formalgram_cfgzip import TokenClasses, Vocabulary, compress
    >>> text, v = 'root ::= "(" root ")" | "x"', Vocabulary([b"(", b")", b"x"])
    >>> d = Path(tempfile.mkdtemp())
    >>> compress(text, v, progress=False).save(d)
    >>> classes = TokenClasses.load(d, grammar=text, vocab=v)
    >>> built = resolve_tables(classes, text, None)  # built, and kept in d / "native"
    >>> (d / TABLES_SUBDIR / "meta.json").is_file()
    True
    >>> resolve_tables(classes, text, None).classes_sha256 == built.classes_sha256  # loaded
    True
    """
    return _resolved(classes, grammar, tables, root)[0]


def _resolved(
    classes: TokenClasses,
    grammar: Grammar | str,
    tables: NativeTables | str | os.PathLike[str] | None,
    root: str,
) -> tuple[NativeTables, bool]:
    """:func:`resolve_tables`, and whether the tables were built from ``classes`` in this
    call (then their classes' fingerprint is ``classes``' by construction)."""
    if isinstance(tables, NativeTables):
        return tables, False
    if tables is None:
        if not classes.cache_dir:
            return build_tables(classes, grammar, check=False, root=root), True
        return _beside_classes(classes, grammar, Path(classes.cache_dir) / TABLES_SUBDIR, root), False
    if not isinstance(tables, (str, os.PathLike)):
        raise EngineError(f"tables must be NativeTables, a directory or None, got {type(tables).__name__}")
    where = Path(tables)
    if _holds_tables(where):
        return NativeTables.load(where, classes), False
    built = build_tables(classes, grammar, check=False, root=root)
    built.save(where)
    return built, True


def _holds_tables(where: Path) -> bool:
    return (where / "meta.json").exists() or (where / "arrays.npz").exists()


def _beside_classes(classes: TokenClasses, grammar: Grammar | str, where: Path, root: str) -> NativeTables:
    """The tables kept in the classes' own cache directory: loaded, else (re)built and kept."""
    if _holds_tables(where):
        try:
            return NativeTables.load(where, classes)
        except CacheError as exc:
            warnings.warn(f"rebuilding the native tables: {exc}", stacklevel=4)
    built = build_tables(classes, grammar, check=False, root=root)
    try:
        built.save(where)
    except CacheError as exc:
        warnings.warn(f"the native tables are not kept: {exc}", stacklevel=4)
    return built


def compile_grammar(
    classes: TokenClasses,
    grammar_text: str,
    *,
    root: str = "root",
    vocab: Vocabulary | None = None,
    check: bool = True,
    max_threads: int | None = None,
    tables: NativeTables | str | os.PathLike[str] | None = None,
    kernel: Kernel = "auto",
    max_rollback_tokens: int | None = None,
) -> NativeCompiled:
    """Compile ``grammar_text`` for the native engine over ``classes``.

    Parameters
    ----------
    classes : TokenClasses
        Classes computed by :func:`formalgram_cfgzip.compress` for this grammar.
    grammar_text : str
        The GBNF text the classes were computed from.
    root : str, keyword-only
        Start rule, the one the classes were computed from (``compress(..., root=...)``).
    vocab : Vocabulary or None, keyword-only
        The vocabulary the caller decodes with; checked against ``classes.vocab``.
    check : bool, keyword-only
        Validate fingerprints and the special-token policy
        (:func:`~formalgram_cfgzip.engines.tokens.check_classes`).
    max_threads : int or None, keyword-only
        Accepted for the common signature (checked, at least 1); the native engine fills
        batches in the calling thread.
    tables : NativeTables, path or None, keyword-only
        Where the tables come from (:func:`resolve_tables`): given, a directory (loaded, or
        built and saved there), or by default the classes' own cache directory when they
        have one (``classes.cache_dir``), else built now.
    kernel : {"auto", "c", "python"}, keyword-only
        Which kernel runs the matchers.
    max_rollback_tokens : int or None, keyword-only
        Bound on rollback that keeps a matcher's memory bounded (:class:`NativeCompiled`).

    Returns
    -------
    NativeCompiled

    Raises
    ------
    ClassesMismatchError
        With ``check``: classes of another vocabulary or grammar, or breaking the policy.
    CacheError
        A tables directory that is corrupted or for other classes.
    EngineError
        On an option of the wrong type or value, tables for other classes, or ``kernel="c"``
        without the C kernel.
    GrammarTooLarge, GrammarError
        If building the tables exceeds a budget or the grammar cannot be converted.

    Notes
    -----
    With saved tables: a load (O(size of the tables)) and the expander (O(logit_width)),
    milliseconds to a fraction of a second; without, the build of :func:`resolve_tables`.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> text = 'root ::= "[" ("a" ("," "a")*)? "]"'
    >>> v = Vocabulary([b"[", b"a", b",", b"]", b"a,", b"<eos>"], stop_ids=[5], special_ids=[5])
    >>> g = compile_grammar(compress(text, v, progress=False), text)
    >>> m = g.matcher()
    >>> mask = g.allocate_token_bitmask()
    >>> m.accept_token(0), m.accept_token(4), m.accept_token(3)
    (True, True, False)
    >>> m.fill_next_token_bitmask(mask)
    >>> [i for i in range(6) if mask[0, 0] >> i & 1]  # "a" or "a," may follow "[a,"
    [1, 4]
    """
    tokens = prepare_compressed(
        classes, grammar_text, root=root, vocab=vocab, check=check, max_threads=max_threads
    )
    if kernel not in ("auto", "c", "python"):
        raise EngineError(f"kernel must be 'auto', 'c' or 'python', got {kernel!r}")
    resolved, built_now = _resolved(classes, grammar_text, tables, root)
    return NativeCompiled(
        classes,
        resolved,
        kernel=kernel,
        max_rollback_tokens=max_rollback_tokens,
        _tokens=tokens,
        _own_tables=built_now,
    )


def compile_full(vocab: Vocabulary, grammar_text: str, **options: Any) -> CompiledGrammar:
    """Refused: the native engine reads masks off token classes, so it has no full-vocabulary form.

    Raises
    ------
    EngineError
        Always; compress the vocabulary (:func:`formalgram_cfgzip.compress`) and use
        :func:`compile_grammar`, or use another engine for the reference.
    """
    raise EngineError(
        "the native engine works over token classes only: use compile_grammar(compress(...), text, "
        "engine='native'), or engine='xgrammar' / 'llguidance' for a full-vocabulary reference"
    )
