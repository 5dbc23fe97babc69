"""The native engine's immutable tables: the PDA's transitions as a push trie, and the domains.

:func:`build_tables` turns ``(classes, grammar)`` into a :class:`NativeTables`: flat int32
arrays that both kernels (pure Python, C) read, that every matcher of a grammar shares, and
that :meth:`NativeTables.save` / :meth:`NativeTables.load` keep on disk (no pickle,
fingerprinted).

**The push trie.**  Reading a byte of byte class ``c`` with ``X`` on top pops ``X`` and pushes
the tail ``B1 ... Bn`` (``B1`` on top) of one rule ``X -> a B1 ... Bn`` with ``c ∈ a``.  All
distinct non-empty tails of all rules are stored once as a trie keyed top first: node ``τ``
stands for a tail prefix ``B1 ... Bi`` and records ``Bi`` (``trie_sym``), the node of
``B1 ... B(i-1)`` (``trie_up``, ``-1`` for ``i = 1``) and ``i - 1`` (``trie_depth``).  The
transitions of ``(c, X)`` are the trie nodes of their tails (``-1`` for the empty tail):
``trans_push[trans_start[j] : trans_start[j + 1]]`` where ``trans_key[j] == c * num_symbols + X``
(keys ascending).  Within one step of the graph-structured stack, one stack cell per trie
node is enough (see :mod:`formalgram_cfgzip.engines.native.gss`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from formalgram.analysis import generating, reachable
from formalgram.errors import GrammarError
from formalgram.grammar import Grammar
from formalgram.pda import PDA
from formalgram_cfgzip.cache import grammar_fingerprint, read_cache, write_cache
from formalgram_cfgzip.classes import TokenClasses, classes_fingerprint, searched_strategy
from formalgram_cfgzip.errors import CacheError, ClassesMismatchError
from formalgram_cfgzip.pipeline import searched_gnf
from formalgram_cfgzip.search.domains import (
    ClassDomains,
    DomainAutomaton,
    class_domains,
    domain_roots,
    gnf_digest,
    representative_texts,
)
from formalgram_cfgzip.search.native import answering, new_search

__all__ = ["TABLES_VERSION", "NativeTables", "build_tables"]

TABLES_VERSION = "native-tables-2"
I32 = npt.NDArray[np.int32]
_ARRAYS = (
    "byte_class",
    "trie_sym",
    "trie_up",
    "trie_depth",
    "trans_key",
    "trans_start",
    "trans_push",
    "edge_start",
    "edge_sym",
    "edge_to",
    "out",
    "set_start",
    "set_class",
    "domain_group",
)


@dataclass(frozen=True, eq=False)
class NativeTables:
    """Everything a native matcher reads: PDA transitions, domain automaton, class ids.

    Attributes
    ----------
    num_classes, stop_class, invalid_class : int
        As in :class:`~formalgram_cfgzip.classes.TokenClasses` (``-1``: none).
    num_symbols : int
        Stack symbols (GNF nonterminals); ids ``0 .. num_symbols - 1``.
    start_symbol : int
        The initial stack is ``(start_symbol)``.
    accepts_empty : bool
        Whether the empty string is in the language (the stop token is allowed at once).
    byte_class : numpy.ndarray
        uint8, 256 entries: byte -> byte class of the PDA.
    trie_sym, trie_up, trie_depth : numpy.ndarray
        The push trie (module docstring).
    trans_key, trans_start, trans_push : numpy.ndarray
        Transitions: key ``c * num_symbols + X`` -> trie nodes of the pushed tails (``-1``
        for an empty tail); ``trans_key`` is int64 and ascending.
    domains : DomainAutomaton
        Top-first automaton of the classes' popped sequences.
    domain_group : numpy.ndarray
        int32, class -> group of classes with equal domains (``-1`` for classes without
        text).  Classes of one group are allowed together in every context.
    grammar_sha256, vocab_sha256 : str
        Fingerprints of the grammar and vocabulary of the classes.
    classes_sha256 : str
        :func:`classes_fingerprint` of the classes the tables were built for.
    stats : dict
        Sizes and build times (informational).
    """

    num_classes: int
    stop_class: int
    invalid_class: int
    num_symbols: int
    start_symbol: int
    accepts_empty: bool
    byte_class: npt.NDArray[np.uint8]
    trie_sym: I32
    trie_up: I32
    trie_depth: I32
    trans_key: npt.NDArray[np.int64]
    trans_start: I32
    trans_push: I32
    domains: DomainAutomaton
    domain_group: I32
    grammar_sha256: str
    vocab_sha256: str
    classes_sha256: str
    stats: dict[str, float] = field(default_factory=dict)

    # -- persistence ----------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str], *, key: bytes | None = None) -> None:
        """Write the tables to ``directory`` (``arrays.npz`` + ``meta.json``, no pickle).

        With ``key`` (bytes, at least 16), the record is signed (HMAC-SHA-256), and
        :meth:`load` with the same key refuses it if it was changed or written without it.
        """
        d = self.domains
        arrays: dict[str, np.ndarray] = {
            "byte_class": self.byte_class,
            "trie_sym": self.trie_sym,
            "trie_up": self.trie_up,
            "trie_depth": self.trie_depth,
            "trans_key": self.trans_key,
            "trans_start": self.trans_start,
            "trans_push": self.trans_push,
            "edge_start": d.edge_start,
            "edge_sym": d.edge_sym,
            "edge_to": d.edge_to,
            "out": d.out,
            "set_start": d.set_start,
            "set_class": d.set_class,
            "domain_group": self.domain_group,
        }
        meta: dict[str, object] = {
            "kind": "formalgram_cfgzip.NativeTables",
            "algorithm": TABLES_VERSION,
            "grammar_sha256": self.grammar_sha256,
            "vocab_sha256": self.vocab_sha256,
            "classes_sha256": self.classes_sha256,
            "num_classes": self.num_classes,
            "stop_class": self.stop_class,
            "invalid_class": self.invalid_class,
            "num_symbols": self.num_symbols,
            "start_symbol": self.start_symbol,
            "accepts_empty": self.accepts_empty,
            "stats": {k: float(v) for k, v in self.stats.items()},
        }
        write_cache(directory, arrays, meta, key=key)

    @staticmethod
    def load(
        directory: str | os.PathLike[str], classes: TokenClasses, *, key: bytes | None = None
    ) -> NativeTables:
        """Load tables saved by :meth:`save` for ``classes`` (fingerprints and shapes checked).

        Parameters
        ----------
        directory : path
            What :meth:`save` wrote to.
        classes : TokenClasses
            The classes the tables must have been built for (their grammar, vocabulary and
            :func:`classes_fingerprint` are compared with the stored ones).
        key : bytes, optional, keyword-only
            The key :meth:`save` signed with: an unsigned or altered record is refused.

        Returns
        -------
        NativeTables
            Tables whose every index was checked (:meth:`inconsistency`).

        Raises
        ------
        CacheError
            If the cache is missing, corrupted, for another grammar, vocabulary or classes,
            of another format version, inconsistent, or (with ``key``) unsigned or signed
            with another key.

        Notes
        -----
        O(size of the arrays) (0.1-0.4 s for the largest shared grammar, SQL).
        """
        expect = {
            "kind": "formalgram_cfgzip.NativeTables",
            "algorithm": TABLES_VERSION,
            "grammar_sha256": classes.grammar_sha256,
            "vocab_sha256": classes.vocab.fingerprint(),
            "classes_sha256": classes_fingerprint(classes),
        }
        arrays, meta = read_cache(directory, expect=expect, key=key)
        try:
            got = {name: np.asarray(arrays[name]) for name in _ARRAYS}
            ints = {
                k: int(meta[k])  # type: ignore[call-overload]
                for k in ("num_classes", "stop_class", "invalid_class", "num_symbols", "start_symbol")
            }
            accepts_empty = bool(meta["accepts_empty"])
            raw = meta.get("stats", {})
        except (KeyError, TypeError, ValueError) as exc:
            raise CacheError(f"native tables in {os.fspath(directory)!r} are incomplete: {exc}") from exc
        if (
            ints["num_classes"] != classes.num_classes
            or ints["stop_class"] != classes.stop_class
            or ints["invalid_class"] != classes.invalid_class
        ):
            raise CacheError(f"native tables in {os.fspath(directory)!r} belong to other classes")
        stats = {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        tables = NativeTables(
            ints["num_classes"],
            ints["stop_class"],
            ints["invalid_class"],
            ints["num_symbols"],
            ints["start_symbol"],
            accepts_empty,
            got["byte_class"],
            got["trie_sym"],
            got["trie_up"],
            got["trie_depth"],
            got["trans_key"],
            got["trans_start"],
            got["trans_push"],
            DomainAutomaton(
                got["edge_start"],
                got["edge_sym"],
                got["edge_to"],
                got["out"],
                got["set_start"],
                got["set_class"],
            ),
            got["domain_group"],
            classes.grammar_sha256,
            expect["vocab_sha256"],
            expect["classes_sha256"],
            stats,
        )
        why = tables.inconsistency()
        if why:
            raise CacheError(f"native tables in {os.fspath(directory)!r} are inconsistent: {why}")
        return tables

    def inconsistency(self) -> str:
        """Why the arrays cannot be used safely by a kernel, or ``""`` when they can.

        Checks dtypes, shapes and that every index stays in range (the C kernel relies on it).
        """
        n, t = self.num_symbols, int(self.trie_sym.shape[0])
        d = self.domains
        if not isinstance(d, DomainAutomaton):
            return "domains is not a DomainAutomaton"
        i32 = [self.trie_sym, self.trie_up, self.trie_depth, self.trans_start, self.trans_push]
        if any(a.dtype != np.int32 or a.ndim != 1 for a in i32):
            return "an array is not 1-D int32"
        if self.byte_class.dtype != np.uint8 or self.byte_class.shape != (256,):
            return "byte_class is not 256 uint8 values"
        if self.trans_key.dtype != np.int64 or self.trans_key.ndim != 1:
            return "trans_key is not 1-D int64"
        ncls = int(self.byte_class.max()) + 1
        if n < 1 or not 0 <= self.start_symbol < n or self.num_classes < 1:
            return "bad symbol or class counts"
        if self.trie_up.shape != (t,) or self.trie_depth.shape != (t,):
            return "trie arrays differ in length"
        if t and (int(self.trie_sym.min()) < 0 or int(self.trie_sym.max()) >= n):
            return "trie symbol out of range"
        if t and (int(self.trie_up.min()) < -1 or bool(np.any(self.trie_up >= np.arange(t)))):
            return "trie parent out of range (parents must come first)"
        if t and bool(
            np.any(self.trie_depth != np.where(self.trie_up < 0, 0, self.trie_depth[self.trie_up] + 1))
        ):
            return "trie depths are inconsistent"
        k = int(self.trans_key.shape[0])
        if self.trans_start.shape != (k + 1,) or int(self.trans_start[0]) != 0:
            return "trans_start has the wrong shape"
        if (
            bool(np.any(np.diff(self.trans_start) < 1))
            or int(self.trans_start[-1]) != self.trans_push.shape[0]
        ):
            return "trans_start is not increasing"
        if k and (bool(np.any(np.diff(self.trans_key) <= 0)) or int(self.trans_key[0]) < 0):
            return "trans_key is not ascending"
        if k and int(self.trans_key[-1]) >= ncls * n:
            return "trans_key out of range"
        if self.trans_push.size and (int(self.trans_push.min()) < -1 or int(self.trans_push.max()) >= t):
            return "trans_push out of range"
        why = ClassDomains(d, self.domain_group, n, "").inconsistency(self.num_classes)
        if why:
            return why
        return ""


def _push_trie(pda: PDA) -> tuple[I32, I32, I32, npt.NDArray[np.int64], I32, I32]:
    """The push trie and the transition arrays of ``pda`` (module docstring)."""
    n = len(pda.names)
    # node of (parent node + 1) * n + symbol: the trie's edges, keyed by one int
    child: dict[int, int] = {}
    syms: list[int] = []
    ups: list[int] = []
    depths: list[int] = []
    # node of every distinct tail (a tail recurs in many transitions)
    known: dict[tuple[int, ...], int] = {(): -1}
    keys: list[int] = []
    starts = [0]
    pushes: list[int] = []
    for (c, x), tails in sorted(pda.table.items()):
        keys.append(c * n + x)
        for tail in tails:
            found = known.get(tail)
            if found is None:
                up = -1
                for depth, sym in enumerate(tail):
                    key = (up + 1) * n + sym
                    t = child.get(key)
                    if t is None:
                        t = len(syms)
                        child[key] = t
                        syms.append(sym)
                        ups.append(up)
                        depths.append(depth)
                    up = t
                known[tail] = found = up
            pushes.append(found)
        starts.append(len(pushes))
    a = np.asarray
    return (
        a(syms, dtype=np.int32),
        a(ups, dtype=np.int32),
        a(depths, dtype=np.int32),
        a(keys, dtype=np.int64),
        a(starts, dtype=np.int32),
        a(pushes, dtype=np.int32),
    )


def build_tables(
    classes: TokenClasses,
    grammar: Grammar | str,
    *,
    gnf: Grammar | None = None,
    check: bool = True,
    max_states: int = 4_000_000,
    root: str = "root",
) -> NativeTables:
    """Compute the native engine's tables for ``classes`` of ``grammar``.

    Parameters
    ----------
    classes : TokenClasses
        Classes computed by ``compress`` for ``grammar``.  When they carry the domains their
        own search recorded (``compress(..., domains=True)``: ``classes.domains``) and
        ``gnf`` is that search's GNF, no search is run.
    grammar : Grammar or str
        The grammar (or its GBNF text) of the classes.
    gnf : Grammar or None, keyword-only
        The GNF grammar to use (``None``: the one recorded with the classes' domains, else
        recomputed as ``compress`` did (:func:`~formalgram_cfgzip.pipeline.searched_gnf`),
        specialised when the classes say so).  The mask is exact for any GNF grammar of the
        language; the tables are smallest on the GNF the classes were computed on.
    check : bool, keyword-only
        Check the grammar's fingerprint against the classes (``False``: the caller did).
    max_states : int, keyword-only
        Bound on the domain automaton's states.
    root : str, keyword-only
        The start rule of a grammar text (as given to ``compress``).

    Returns
    -------
    NativeTables
        ``stats["domains_from_classes"]`` is 1.0 when the domains came from the classes, 0.0
        when a displacement search over the representatives computed them.

    Raises
    ------
    ClassesMismatchError
        If ``check`` and the classes belong to another grammar.
    GrammarTooLarge
        If the GNF conversion, the displacement search or the domain automaton exceeds its budget.

    Notes
    -----
    Cost: the push trie, and the GNF conversion and its PDA (seconds for the largest shared
    grammars) unless the classes' domains carry them; without domains in the classes, also a
    displacement search over the representatives (SynCode Go: 15 s, SQL: 210 s, pure
    Python) and the subset construction of
    :func:`~formalgram_cfgzip.search.domains.domain_automaton`.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> text, v = 'root ::= "(" root ")" | "x"', Vocabulary([b"(", b")", b"x", b"(("])
    >>> a = build_tables(compress(text, v, progress=False), text)
    >>> b = build_tables(compress(text, v, progress=False, domains=True), text)
    >>> a.stats["domains_from_classes"], b.stats["domains_from_classes"]
    (0.0, 1.0)
    >>> np.array_equal(a.domains.set_class, b.domains.set_class), a.domain_group.tolist()  # "(", "x", "((" pop root
    (True, [0, 1, 0, 0])
    """
    t0 = time.perf_counter()
    fp = grammar_fingerprint(grammar, start=root) if check else classes.grammar_sha256
    if check and fp != classes.grammar_sha256:
        raise ClassesMismatchError(
            "these TokenClasses were computed for another grammar "
            f"(classes: {classes.grammar_sha256[:12]}..., grammar: {fp[:12]}...)"
        )
    found = classes.domains
    kept = found.gnf if found is not None else None  # the search's own GNF, when carried
    if gnf is None:
        gnf = (
            kept
            if kept is not None
            else _generating_gnf(
                searched_gnf(
                    grammar,
                    specialized=bool(classes.stats.get("specialized", 0.0)),
                    strategy=searched_strategy(classes.stats),
                    root=root,
                )
            )
        )
    t_gnf = time.perf_counter() - t0
    own_pda = found.pda if found is not None and gnf is kept else None
    pda = own_pda if own_pda is not None else PDA.from_gnf(gnf)
    trie = _push_trie(pda)
    if found is None or not (gnf is kept or found.gnf_sha256 == gnf_digest(gnf)):
        found = _search_domains(classes, gnf, max_states)
        from_classes = 0.0
    else:
        from_classes = 1.0
    t_domains = time.perf_counter() - t0 - t_gnf
    auto = found.automaton
    stats = {
        "gnf_symbols": float(len(gnf.names)),
        "gnf_rules": float(len(gnf.rules)),
        "byte_classes": float(pda.n_classes),
        "trie_nodes": float(trie[0].shape[0]),
        "transitions": float(trie[5].shape[0]),
        "domain_states": float(auto.num_states),
        "domain_edges": float(auto.num_edges),
        "domain_sets": float(auto.num_sets),
        "domain_outputs": float(auto.set_class.shape[0]),
        "domain_groups": float(int(found.group.max(initial=-1)) + 1),
        "domains_from_classes": from_classes,
        "gnf_seconds": t_gnf,
        "search_seconds": t_domains,
        "seconds": time.perf_counter() - t0,
    }
    return NativeTables(
        classes.num_classes,
        classes.stop_class,
        classes.invalid_class,
        len(gnf.names),
        gnf.start_id,
        pda.accepts_empty,
        np.frombuffer(pda.byte_class_of, dtype=np.uint8).copy(),
        *trie,
        auto,
        found.group,
        fp,
        classes.vocab.fingerprint(),
        classes_fingerprint(classes),
        stats,
    )


def _generating_gnf(gnf: Grammar) -> Grammar:
    """``gnf``, checked: every nonterminal reachable from its start derives something (a
    :class:`GrammarError` otherwise; the stack graph relies on it)."""
    live = generating(gnf)
    for a in reachable(gnf):
        if a not in live:
            raise GrammarError(f"GNF symbol {gnf.names[a]!r} is reachable but derives nothing")
    return gnf


def _search_domains(classes: TokenClasses, gnf: Grammar, max_states: int) -> ClassDomains:
    """The classes' domains by a displacement search of their representatives over ``gnf``
    (the search kernel when built)."""
    search = new_search(gnf)
    texts = representative_texts(
        classes.vocab.tokens, classes.representatives.tolist(), (classes.invalid_class, classes.stop_class)
    )
    roots = domain_roots(search, texts)
    return class_domains(answering(search), roots, max_states=max_states)
