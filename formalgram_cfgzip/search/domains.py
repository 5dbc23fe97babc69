"""The domain automaton: every class's popped sequences σ_in, read top of stack first.

For a class ``k`` with representative ``t``, the displacement search ends on a trie of the
strings ``σ_out · # · reverse(σ_in)``.  The strings below its separator edges are the
reversed popped sequences; their union is one canonical trie node ``r_k`` (equal sets have
equal ids), the *domain root* of ``k``: :func:`domain_roots`.  Classes with equal roots
have equal domains ``dom(k) = {σ_in}``, hence equal masks in every context.

The mask walk reads stacks from the top, so the domains are needed top first: the
automaton built by :func:`domain_automaton` is the subset construction of the *reversed*
tries (a state is the set of trie nodes ``n`` from which ``reverse(x)`` leads to a final
node, ``x`` the symbols read so far).  A state's *output* is the set of classes ``k`` with
``r_k`` in it, i.e. with ``x ∈ dom(k)``.  The automaton is acyclic (popped sequences are at
most as long as their token) and stored as flat arrays (:class:`DomainAutomaton`).

Outputs hold all of ``dom(k)``, not only its minimal elements: a stack that starts with a
longer ``σ_in`` also starts with its prefix, so the extra outputs never change a mask (the
walk simply ORs a class it already has).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from formalgram.errors import GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.pda import PDA
from formalgram_cfgzip.cache import read_cache, write_cache
from formalgram_cfgzip.errors import CacheError
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.driver import build_trie, walk_trie
from formalgram_cfgzip.search.native import NativeSearch
from formalgram_cfgzip.search.trie import DEAD

__all__ = [
    "DOMAINS_VERSION",
    "ClassDomains",
    "DomainAutomaton",
    "class_domains",
    "domain_automaton",
    "domain_groups",
    "domain_roots",
    "gnf_digest",
    "representative_texts",
]

DOMAINS_VERSION = "class-domains-1"
_DOMAINS_KIND = "formalgram_cfgzip.ClassDomains"
_DOMAIN_ARRAYS = ("edge_start", "edge_sym", "edge_to", "out", "set_start", "set_class")

I32 = npt.NDArray[np.int32]


@dataclass(frozen=True, eq=False)
class DomainAutomaton:
    """A deterministic acyclic automaton over stack symbols with class sets on its states.

    State 0 is the initial state (nothing read).  Edges of state ``d`` are
    ``edge_sym[edge_start[d] : edge_start[d + 1]]`` (ascending symbols) with targets
    ``edge_to[...]``.  ``out[d]`` is the id of the class set of ``d`` (``-1``: none); set
    ``s`` holds the classes ``set_class[set_start[s] : set_start[s + 1]]`` (ascending).

    Attributes
    ----------
    edge_start, edge_sym, edge_to, out, set_start, set_class : numpy.ndarray
        int32 arrays as above.
    """

    edge_start: I32
    edge_sym: I32
    edge_to: I32
    out: I32
    set_start: I32
    set_class: I32

    @property
    def num_states(self) -> int:
        """Number of states."""
        return int(self.out.shape[0])

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return int(self.edge_sym.shape[0])

    @property
    def num_sets(self) -> int:
        """Number of distinct class sets."""
        return int(self.set_start.shape[0]) - 1

    def inconsistency(self, num_symbols: int, num_classes: int) -> str:
        """Why the arrays cannot be walked safely, or ``""`` when they can.

        Checks dtypes and shapes, that edges are sorted by symbol within each state and that
        every symbol, target, set and class id is in range (the C kernel relies on it).

        Parameters
        ----------
        num_symbols, num_classes : int
            The stack alphabet and the classes the automaton must stay within.

        Returns
        -------
        str
            The first problem found, ``""`` if none.

        Notes
        -----
        O(states + edges + class entries), numpy work.

        Examples
        --------
        >>> import numpy as np
        >>> a = np.asarray
        >>> d = DomainAutomaton(a([0, 1, 1], np.int32), a([7], np.int32), a([1], np.int32),
        ...                     a([-1, 0], np.int32), a([0, 2], np.int32), a([3, 5], np.int32))
        >>> d.inconsistency(8, 6), d.inconsistency(7, 6), d.inconsistency(8, 5)
        ('', 'domain edge symbol out of range', 'set class out of range')
        """
        arrays = (self.edge_start, self.edge_sym, self.edge_to, self.out, self.set_start, self.set_class)
        if any(not isinstance(a, np.ndarray) or a.dtype != np.int32 or a.ndim != 1 for a in arrays):
            return "a domain array is not 1-D int32"
        ns, ne = int(self.out.shape[0]), int(self.edge_sym.shape[0])
        nsets = int(self.set_start.shape[0]) - 1
        if ns < 1:
            return "the domain automaton has no initial state"
        if (
            self.edge_start.shape != (ns + 1,)
            or int(self.edge_start[0]) != 0
            or int(self.edge_start[-1]) != ne
        ):
            return "edge_start has the wrong shape"
        if bool(np.any(np.diff(self.edge_start) < 0)) or self.edge_to.shape != (ne,):
            return "domain edges are inconsistent"
        if ne and (int(self.edge_to.min()) < 0 or int(self.edge_to.max()) >= ns):
            return "domain edge target out of range"
        if ne > 1:
            inside = np.ones(ne - 1, dtype=bool)  # consecutive edges of one state
            firsts = self.edge_start[1:-1]
            inside[firsts[(firsts > 0) & (firsts < ne)] - 1] = False
            if bool(np.any(np.diff(self.edge_sym)[inside] <= 0)):
                return "domain edges are not sorted by symbol"
        if ne and (int(self.edge_sym.min()) < 0 or int(self.edge_sym.max()) >= num_symbols):
            return "domain edge symbol out of range"
        if nsets < 0 or int(self.set_start[0]) != 0 or int(self.set_start[-1]) != self.set_class.shape[0]:
            return "set_start has the wrong shape"
        if ns and (int(self.out.min()) < -1 or int(self.out.max()) >= nsets):
            return "domain output out of range"
        if bool(np.any(np.diff(self.set_start) < 0)):
            return "set_start is not increasing"
        if self.set_class.size and (
            int(self.set_class.min()) < 0 or int(self.set_class.max()) >= num_classes
        ):
            return "set class out of range"
        return ""

    def accepted(self, word: Sequence[int]) -> frozenset[int]:
        """The classes whose domain contains ``word`` (stack symbols, top first).

        Examples
        --------
        >>> import numpy as np
        >>> a = np.asarray
        >>> d = DomainAutomaton(a([0, 1, 1], np.int32), a([7], np.int32), a([1], np.int32),
        ...                     a([-1, 0], np.int32), a([0, 2], np.int32), a([3, 5], np.int32))
        >>> sorted(d.accepted([7])), sorted(d.accepted([8]))
        ([3, 5], [])
        """
        d = 0
        for sym in word:
            lo, hi = int(self.edge_start[d]), int(self.edge_start[d + 1])
            i = lo + int(np.searchsorted(self.edge_sym[lo:hi], sym))
            if i >= hi or int(self.edge_sym[i]) != sym:
                return frozenset()
            d = int(self.edge_to[i])
        s = int(self.out[d])
        if s < 0:
            return frozenset()
        return frozenset(self.set_class[self.set_start[s] : self.set_start[s + 1]].tolist())


def representative_texts(
    tokens: Sequence[bytes | None], representatives: Sequence[int], textless: Sequence[int]
) -> list[bytes | None]:
    """The bytes of each class's representative, ``None`` for the classes in ``textless`` (stop,
    invalid) and for a representative that is no token id: what :func:`domain_roots` reads.

    Examples
    --------
    >>> representative_texts([b"a", b"b", None], [1, 0, -1], (2,))
    [b'b', b'a', None]
    """
    n = len(tokens)
    return [None if k in textless or not 0 <= r < n else tokens[r] for k, r in enumerate(representatives)]


def domain_roots(search: DisplacementSearch | NativeSearch, tokens: Sequence[bytes | None]) -> list[int]:
    """The domain root of each token: the trie node of the set of its reversed popped sequences.

    Parameters
    ----------
    search : DisplacementSearch or NativeSearch
        A search over the GNF the classes were computed on; the roots are nodes of the
        search that answers the walk over the tokens' trie
        (:func:`~formalgram_cfgzip.search.native.answering`: the kernel's fallback when it
        hands the walk over).
    tokens : sequence of bytes or None
        One byte string per class (its representative), ``None`` or ``b""`` for a class
        with no text (stop, invalid).

    Returns
    -------
    list of int
        ``-1`` for a class without text or with an empty displacement; otherwise
        :meth:`DisplacementSearch.popped` of the token's set: a node of ``search`` whose
        strings are exactly ``{reverse(σ_in) : (σ_in, σ_out) ∈ Δ(t)}``.  Equal domains give
        equal nodes.

    Notes
    -----
    :func:`~formalgram_cfgzip.search.driver.walk_trie` over the tokens' trie (one search
    step per distinct (state, byte class) pair per level), plus
    :meth:`DisplacementSearch.popped` of each distinct displacement.
    :func:`~formalgram_cfgzip.compress.compress` with ``domains=True`` takes the roots from
    its own search instead, as it codes each displacement.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> s = DisplacementSearch(to_gnf(parse_gbnf('root ::= "(" root ")" | "x"')))
    >>> a, b, c, d = domain_roots(s, [b"(", b"((", None, b"y"])
    >>> a == b, c, d
    (True, -1, -1)
    """
    texts = [(i, t) for i, t in enumerate(tokens) if t]
    roots = [-1] * len(tokens)
    if not texts:
        return roots
    lengths = np.asarray([len(t) for _, t in texts], dtype=np.int64)
    offsets = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    trie = build_trie(np.frombuffer(b"".join(t for _, t in texts), dtype=np.uint8), offsets, lengths)
    popped: list[int] = []  # per code, its domain root
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    codes, _ = walk_trie(search, trie, class_of, len(texts), False, 1 << 40, False, popped)
    for (i, _), code in zip(texts, codes.tolist(), strict=True):
        if code >= 0 and popped[code] != DEAD:
            roots[i] = popped[code]
    return roots


def domain_automaton(
    search: DisplacementSearch | NativeSearch,
    roots: Sequence[int],
    *,
    max_states: int = 4_000_000,
    max_edges: int = 40_000_000,
) -> DomainAutomaton:
    """Build the top-first domain automaton of the classes whose domain roots are ``roots``.

    Parameters
    ----------
    search : DisplacementSearch or NativeSearch
        The search that produced ``roots`` (its :meth:`~DisplacementSearch.edges` and
        :meth:`~DisplacementSearch.is_final` are read).
    roots : sequence of int
        Class id -> domain root (:func:`domain_roots`), ``-1`` for a class never allowed by text.
    max_states, max_edges : int, keyword-only
        Bounds on the automaton; exceeding one raises :class:`GrammarTooLarge`.

    Returns
    -------
    DomainAutomaton
        Reading ``x`` from state 0 reaches a state whose output holds exactly the classes
        ``k`` with ``x ∈ dom(k)``.

    Raises
    ------
    GrammarTooLarge
        If the automaton passes ``max_states`` states or ``max_edges`` edges.

    Notes
    -----
    Subset construction of the reversed tries: O(sum over states of the trie edges into
    their nodes), in practice about the size of the tries below the domain roots (SynCode Go:
    14k trie nodes, 13k states; xml2rfc: 110k nodes, 109k states).  On a
    :class:`~formalgram_cfgzip.search.native.NativeSearch` the kernel builds it
    (:meth:`~formalgram_cfgzip.search.native.NativeSearch.domain_arrays`: the same states,
    numbered alike, several times faster).
    """
    if isinstance(search, NativeSearch):
        status, arrays = search.domain_arrays(list(roots), max_states, max_edges)
        if status == 1:
            raise GrammarTooLarge("domain automaton", max_states, "states")
        if status != 0:
            raise GrammarTooLarge("domain automaton", max_edges, "edges")
        built = [np.frombuffer(b, dtype=np.int32).copy() for b in arrays]
        return DomainAutomaton(built[0], built[1], built[2], built[3], built[4], built[5])
    classes_at: dict[int, list[int]] = {}
    for k, r in enumerate(roots):
        if r >= 0:
            classes_at.setdefault(r, []).append(k)
    # the tries below the roots, with their edges reversed
    into: dict[int, list[tuple[int, int]]] = {}  # node -> (symbol, node above it)
    seen: set[int] = set(classes_at)
    todo = list(classes_at)
    finals: list[int] = []
    while todo:
        n = todo.pop()
        if search.is_final(n):
            finals.append(n)
        for sym, child in search.edges(n):
            lst = into.get(child)
            if lst is None:
                into[child] = [(sym, n)]
            else:
                lst.append((sym, n))
            if child not in seen:  # the tries share nodes: each is walked once
                seen.add(child)
                todo.append(child)
    first = tuple(sorted(finals))
    ids: dict[tuple[int, ...], int] = {first: 0}
    states: list[tuple[int, ...]] = [first]
    edge_start = [0]
    edge_sym: list[int] = []
    edge_to: list[int] = []
    out: list[int] = []
    set_ids: dict[tuple[int, ...], int] = {}
    i = 0
    while i < len(states):
        state = states[i]
        hit = sorted(k for n in state for k in classes_at.get(n, ()))
        if hit:
            key = tuple(hit)
            s = set_ids.get(key)
            if s is None:
                s = len(set_ids)
                set_ids[key] = s
            out.append(s)
        else:
            out.append(-1)
        step: dict[int, set[int]] = {}
        for n in state:
            for sym, above in into.get(n, ()):
                bucket = step.get(sym)
                if bucket is None:
                    step[sym] = {above}
                else:
                    bucket.add(above)
        for sym in sorted(step):
            target = tuple(sorted(step[sym]))
            j = ids.get(target)
            if j is None:
                j = len(states)
                if j >= max_states:
                    raise GrammarTooLarge("domain automaton", max_states, "states")
                ids[target] = j
                states.append(target)
            edge_sym.append(sym)
            edge_to.append(j)
        if len(edge_sym) > max_edges:
            raise GrammarTooLarge("domain automaton", max_edges, "edges")
        edge_start.append(len(edge_sym))
        i += 1
    set_start = [0]
    set_class: list[int] = []
    for key in sorted(set_ids, key=set_ids.__getitem__):
        set_class.extend(key)
        set_start.append(len(set_class))
    a = np.asarray
    return DomainAutomaton(
        a(edge_start, dtype=np.int32),
        a(edge_sym, dtype=np.int32),
        a(edge_to, dtype=np.int32),
        a(out, dtype=np.int32),
        a(set_start, dtype=np.int32),
        a(set_class, dtype=np.int32),
    )


def domain_groups(roots: Sequence[int]) -> npt.NDArray[np.int32]:
    """Class -> group of classes with equal domains (equal roots), ``-1`` for a root of ``-1``.

    Groups are numbered in order of first appearance; O(classes).

    Examples
    --------
    >>> domain_groups([5, -1, 7, 5]).tolist()
    [0, -1, 1, 0]
    """
    group_of: dict[int, int] = {}
    return np.asarray([-1 if r < 0 else group_of.setdefault(r, len(group_of)) for r in roots], dtype=np.int32)


def gnf_digest(gnf: Grammar) -> str:
    """SHA-256 (hex) of a grammar's interned view *as numbered*: names, masks, start, rules in order.

    Unlike :func:`~formalgram_cfgzip.cache.grammar_fingerprint` (canonical: rule order and ids
    do not matter), this changes with any renumbering, which is what arrays indexed by
    symbol ids (a :class:`DomainAutomaton`) must be bound to.

    Parameters
    ----------
    gnf : Grammar

    Returns
    -------
    str
        64 hex digits.

    Notes
    -----
    O(|G|).

    Examples
    --------
    >>> from formalgram import parse_gbnf
    >>> a, b = parse_gbnf('root ::= "a" x\\nx ::= "b"'), parse_gbnf('root ::= "a" x\\nx ::= "b"')
    >>> gnf_digest(a) == gnf_digest(b), gnf_digest(a) == gnf_digest(parse_gbnf('root ::= "a"'))
    (True, False)
    """
    h = hashlib.sha256(b"formalgram.Grammar ids\0")
    h.update(repr((gnf.names, gnf.masks, gnf.start_id)).encode())
    for lhs, rhs in gnf.rules:
        h.update(repr((lhs, rhs)).encode())
    return h.hexdigest()


@dataclass(frozen=True, eq=False)
class ClassDomains:
    """The popped sequences of every class, as the search that computed the classes found them.

    Computed by :func:`~formalgram_cfgzip.compress.compress` with ``domains=True`` from its own
    search (no second search) and carried by the :class:`~formalgram_cfgzip.classes.TokenClasses`
    it returns, in memory; the native engine builds its tables from it.

    Attributes
    ----------
    automaton : DomainAutomaton
        Top-first automaton of the classes' popped sequences (:func:`domain_automaton`).
    group : numpy.ndarray
        int32, class -> group of classes with equal domains (:func:`domain_groups`).
    num_symbols : int
        Stack symbols of the GNF the automaton reads.
    gnf_sha256 : str
        :func:`gnf_digest` of that GNF: whoever uses the automaton with a GNF checks that it is
        the same one, numbered the same way.
    gnf : Grammar or None
        That GNF itself (so that a consumer need not convert the grammar again); ``None`` when
        not kept.
    pda : PDA or None
        Its PDA (``PDA.from_gnf(gnf)``, the search's own), when kept.
    """

    automaton: DomainAutomaton
    group: npt.NDArray[np.int32]
    num_symbols: int
    gnf_sha256: str
    gnf: Grammar | None = None
    pda: PDA | None = None

    def save(
        self, directory: str | os.PathLike[str], classes_sha256: str, *, key: bytes | None = None
    ) -> None:
        """Write the domains to ``directory`` (``arrays.npz`` + ``meta.json``, no pickle).

        The GNF and PDA are not written (:meth:`load` gives ``None`` for them; whoever
        needs the GNF converts the grammar again and compares :attr:`gnf_sha256`).

        Parameters
        ----------
        directory : path
            Created if needed; written atomically.
        classes_sha256 : str
            The fingerprint of the classes the domains belong to (what :meth:`load` must be
            given to accept them).
        key : bytes, optional
            Sign the record (HMAC-SHA-256), as :meth:`TokenClasses.save
            <formalgram_cfgzip.classes.TokenClasses.save>`.

        Raises
        ------
        CacheError
            If the directory cannot be written or the key is too short.

        Notes
        -----
        O(size of the arrays).
        """
        a = self.automaton
        arrays = {name: getattr(a, name) for name in _DOMAIN_ARRAYS}
        arrays["group"] = self.group
        meta: dict[str, object] = {
            "kind": _DOMAINS_KIND,
            "algorithm": DOMAINS_VERSION,
            "classes_sha256": classes_sha256,
            "gnf_sha256": self.gnf_sha256,
            "num_symbols": self.num_symbols,
        }
        write_cache(directory, arrays, meta, key=key)

    @staticmethod
    def load(
        directory: str | os.PathLike[str], classes_sha256: str, num_classes: int, *, key: bytes | None = None
    ) -> ClassDomains:
        """Load domains written by :meth:`save` for the classes with fingerprint ``classes_sha256``.

        Parameters
        ----------
        directory : path
        classes_sha256 : str
            The classes' fingerprint; the stored one must be equal.
        num_classes : int
            Their number of classes (every index is checked against it).
        key : bytes, optional
            The record must be signed with it.

        Returns
        -------
        ClassDomains
            Without GNF and PDA; every array checked (:meth:`inconsistency`).

        Raises
        ------
        CacheError
            If the record is missing, corrupted, of another format version, for other
            classes, unsigned (with a key), or its arrays are inconsistent.

        Notes
        -----
        O(size of the arrays).

        Examples
        --------
        >>> import tempfile
        >>> from formalgram import parse_gbnf, to_gnf
        >>> s = DisplacementSearch(to_gnf(parse_gbnf('root ::= "(" root ")" | "x"')))
        >>> cd = class_domains(s, domain_roots(s, [b"(", b"x", b")", None]))
        >>> d = tempfile.mkdtemp()
        >>> cd.save(d, "ab" * 32)
        >>> ClassDomains.load(d, "ab" * 32, 4).group.tolist()
        [0, 0, 1, -1]
        >>> ClassDomains.load(d, "cd" * 32, 4)
        Traceback (most recent call last):
        ...
        formalgram_cfgzip.errors.CacheError: cache was computed for other classes (classes_sha256 differs)
        """
        i32 = np.dtype(np.int32)
        spec: dict[str, tuple[np.dtype, tuple[int | None, ...]]] = {
            name: (i32, (None,)) for name in _DOMAIN_ARRAYS
        }
        spec["group"] = (i32, (num_classes,))
        arrays, meta = read_cache(
            directory,
            expect={"kind": _DOMAINS_KIND, "algorithm": DOMAINS_VERSION, "classes_sha256": classes_sha256},
            spec=spec,
            key=key,
        )
        gnf_sha = meta.get("gnf_sha256")
        nsym = meta.get("num_symbols")
        where = os.fspath(directory)
        if not isinstance(gnf_sha, str) or type(nsym) is not int or nsym < 1:
            raise CacheError(f"class domains in {where!r} are malformed: gnf_sha256 or num_symbols")
        auto = DomainAutomaton(*(arrays[name] for name in _DOMAIN_ARRAYS))
        found = ClassDomains(auto, arrays["group"], nsym, gnf_sha)
        why = found.inconsistency(num_classes)
        if why:
            raise CacheError(f"class domains in {where!r} are inconsistent: {why}")
        return found

    def inconsistency(self, num_classes: int) -> str:
        """Why the domains cannot be used for ``num_classes`` classes, or ``""`` (see
        :meth:`DomainAutomaton.inconsistency`); O(size of the arrays)."""
        g = self.group
        if not isinstance(g, np.ndarray) or g.dtype != np.int32 or g.shape != (num_classes,):
            return "domain_group has the wrong shape"
        return self.automaton.inconsistency(self.num_symbols, num_classes)


def class_domains(
    search: DisplacementSearch | NativeSearch, roots: Sequence[int], *, max_states: int = 4_000_000
) -> ClassDomains:
    """:class:`ClassDomains` of classes whose domain roots in ``search`` are ``roots``.

    Parameters
    ----------
    search : DisplacementSearch or NativeSearch
        The search the roots are nodes of (its tables as they are now).
    roots : sequence of int
        Class id -> domain root (``-1``: a class never allowed by text).
    max_states : int, keyword-only
        Bound on the automaton's states.

    Returns
    -------
    ClassDomains
        With ``search.gnf`` and ``search.pda`` kept.

    Raises
    ------
    GrammarTooLarge
        If the automaton exceeds its bounds.

    Notes
    -----
    :func:`domain_automaton` (closed by :func:`~formalgram_cfgzip.search.symmetry.close_domains`
    when ``search`` skipped the guesses of twins) plus O(|G|) for the digest.

    Examples
    --------
    >>> from formalgram import parse_gbnf, to_gnf
    >>> s = DisplacementSearch(to_gnf(parse_gbnf('root ::= "(" root ")" | "x"')))
    >>> cd = class_domains(s, domain_roots(s, [b"(", b"x", b")", None]))
    >>> cd.group.tolist(), cd.inconsistency(4)
    ([0, 0, 1, -1], '')
    """
    automaton = domain_automaton(search, roots, max_states=max_states)
    if search.twins:  # a search that skipped the guesses of chain symbols: copy their edges
        from formalgram_cfgzip.search.symmetry import close_domains

        automaton = close_domains(automaton, search.twins)
    return ClassDomains(
        automaton,
        domain_groups(roots),
        len(search.gnf.names),
        gnf_digest(search.gnf),
        search.gnf,
        search.pda,
    )
