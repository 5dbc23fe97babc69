"""Bounded enumeration and random sampling of L(g), for property tests.

* :func:`enumerate_strings` lists every member of L(g) up to a length over an alphabet,
  walking the prefix tree and cutting dead branches with :class:`EarleyRecognizer`.
* :func:`sample` draws random members by random derivation, with a length-aware choice of
  rules so that derivations always terminate within the requested length.
* :func:`default_alphabet` gives one representative byte per class of bytes that no
  terminal of the grammar can tell apart.
"""

from __future__ import annotations

import heapq
import random

from formalgram.analysis import nonterminal_counts
from formalgram.errors import EmptyLanguageError, GrammarError, GrammarTooLarge
from formalgram.grammar import Grammar
from formalgram.recognize.earley import EarleyRecognizer

__all__ = ["default_alphabet", "enumerate_strings", "sample"]

_INF = 1 << 60
# derivations tried per sampled string when the first ones are much shorter than the target
_ATTEMPTS = 4


def default_alphabet(g: Grammar) -> bytes:
    """The smallest byte of each class of bytes that the terminals of ``g`` cannot tell apart.

    Two bytes are in the same class when every terminal mask of ``g`` contains both or
    neither.  The class of bytes that occur in no terminal is left out (no member of L(g)
    contains such a byte).  Enumerating over this alphabet gives one representative of every
    member of L(g) up to renaming bytes within their class.

    Parameters
    ----------
    g : Grammar
        The grammar.

    Returns
    -------
    bytes
        Sorted representatives, one per class (empty when ``g`` has no non-empty terminal).

    Notes
    -----
    O(256 * number of terminals); linear in the grammar, so it takes no budget, and raises
    nothing.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.from_range(97, 122), ByteSet.single(98)])], "S")
    >>> default_alphabet(g)
    b'ab'
    """
    masks = g.masks
    seen: set[tuple[int, ...]] = set()
    reps: list[int] = []
    for b in range(256):
        sig = tuple(i for i, m in enumerate(masks) if (m >> b) & 1)
        if not sig or sig in seen:
            continue
        seen.add(sig)
        reps.append(b)
    return bytes(reps)


def enumerate_strings(
    g: Grammar, max_len: int, alphabet: bytes | None = None, *, limit: int = 100_000
) -> list[bytes]:
    """All members of L(g) of length at most ``max_len`` over ``alphabet``.

    Parameters
    ----------
    g : Grammar
        The grammar.
    max_len : int
        Longest string to list (``>= 0``).
    alphabet : bytes, optional
        Bytes to build strings from (duplicates ignored).  Default: :func:`default_alphabet`,
        one representative per class of bytes the grammar cannot tell apart.
    limit : int, keyword-only
        Most strings to return.  The search also gives up after visiting
        ``16 * limit + 10_000`` viable prefixes (non-members included), so that languages with
        far more viable prefixes than short members fail fast instead of running for hours.

    Returns
    -------
    list[bytes]
        The members, sorted by ``(len(s), s)``.

    Raises
    ------
    GrammarTooLarge
        When more than ``limit`` members exist, or the prefix search exceeds its budget.
    ValueError
        When ``max_len`` is negative.

    Notes
    -----
    O(P * |alphabet| * c) where P is the number of viable prefixes of length ``< max_len``
    and ``c`` the cost of one Earley step; dead prefixes are never extended.  Bounded by
    ``limit``: at most ``16 * limit + 10_000`` prefixes are visited, and every prefix's
    recognizer has the default Earley work budget
    (:data:`~formalgram.recognize.earley.DEFAULT_BUDGET`), so a step that costs more raises
    :class:`~formalgram.errors.GrammarTooLarge` too.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> a, b = ByteSet.single(97), ByteSet.single(98)
    >>> g = Grammar([Production(S, [a, S, b]), Production(S, [])], "S")
    >>> enumerate_strings(g, 4)
    [b'', b'ab', b'aabb']
    """
    if max_len < 0:
        raise ValueError(f"max_len must be >= 0, got {max_len}")
    letters = sorted(set(default_alphabet(g) if alphabet is None else alphabet))
    out: list[bytes] = []
    budget = 16 * max(limit, 0) + 10_000
    visited = 0
    # depth-first over the tree of viable prefixes
    stack: list[tuple[bytes, EarleyRecognizer]] = []
    root = EarleyRecognizer(g)
    if root.is_viable():
        stack.append((b"", root))
    while stack:
        prefix, rec = stack.pop()
        visited += 1
        if visited > budget:
            raise GrammarTooLarge("enumerate_strings", budget, "viable prefixes visited")
        if rec.is_accepting():
            out.append(prefix)
            if len(out) > limit:
                raise GrammarTooLarge("enumerate_strings", limit, f"more members of length <= {max_len}")
        if len(prefix) >= max_len:
            continue
        allowed = rec.allowed_bytes().mask
        for b in letters:
            if (allowed >> b) & 1:
                child = rec.copy()
                child.feed(b)
                stack.append((prefix + bytes([b]), child))
    out.sort(key=lambda s: (len(s), s))
    return out


def _min_lengths(g: Grammar) -> tuple[list[int], list[int]]:
    """Shortest yield length per nonterminal and a well-founded shortest rule per nonterminal.

    Returns ``(minlen, short_rule)``: ``minlen[A]`` is the length of a shortest string derived
    from ``A`` (``_INF`` when ``A`` derives nothing, or nothing shorter than ``_INF``);
    ``short_rule[A]`` is an index into ``g.rules`` of a rule of ``A`` whose right-hand side
    yields a string of length ``minlen[A]`` and whose nonterminals were all settled strictly
    before ``A``, so following ``short_rule`` always terminates (``-1`` when ``A`` derives
    nothing).  Settling goes in rounds: round 1 settles every nonterminal with a shortest rule
    free of nonterminals, round ``k + 1`` every other nonterminal with a shortest rule whose
    nonterminals were settled by round ``k``; the chosen rule is the first such one.

    The lengths come from Knuth's generalisation of Dijkstra's algorithm (a rule's length is
    known once all its nonterminals are), the rounds from counters per shortest rule: both
    O(|G| log |G|), so long chains are fine.
    """
    n = len(g.names)
    masks = g.masks
    rules = g.rules
    # -- shortest lengths -----------------------------------------------------------------
    minlen = [_INF] * n
    pending, occurs = nonterminal_counts(g, [m != 0 for m in masks])
    # per rule, its length so far: its terminals, then the nonterminals' lengths as they settle
    partial = [len(rhs) - c if c >= 0 else 0 for (_, rhs), c in zip(rules, pending, strict=True)]
    heap: list[tuple[int, int]] = []
    for r, (lhs, _) in enumerate(rules):
        if pending[r] == 0:
            heapq.heappush(heap, (partial[r], lhs))
    done = [False] * n
    while heap:
        length, a = heapq.heappop(heap)
        if done[a] or length >= _INF:
            continue
        done[a] = True
        minlen[a] = length
        for r in occurs[a]:
            if pending[r] <= 0:
                continue
            partial[r] += length
            pending[r] -= 1
            if pending[r] == 0:
                lhs = rules[r][0]
                if not done[lhs]:
                    heapq.heappush(heap, (partial[r], lhs))
    # -- rounds of settling over the shortest rules ---------------------------------------
    short_rule = [-1] * n
    waiting = [0] * len(rules)
    users: list[list[int]] = [[] for _ in range(n)]
    ready: list[int] = []
    for r, (lhs, rhs) in enumerate(rules):
        if minlen[lhs] >= _INF or pending[r] != 0:
            continue
        if sum(minlen[s] if s >= 0 else 1 for s in rhs) != minlen[lhs]:
            continue
        count = 0
        for s in rhs:
            if s >= 0:
                count += 1
                users[s].append(r)
        waiting[r] = count
        if count == 0:
            ready.append(r)
    settled = [False] * n
    while ready:
        ready.sort()
        newly: list[int] = []
        for r in ready:
            lhs = rules[r][0]
            if not settled[lhs]:
                settled[lhs] = True
                short_rule[lhs] = r
                newly.append(lhs)
        ready = []
        for a in newly:
            for r in users[a]:
                waiting[r] -= 1
                if waiting[r] == 0 and not settled[rules[r][0]]:
                    ready.append(r)
    return minlen, short_rule


def _pick(
    rng: random.Random,
    candidates: tuple[int, ...],
    suffix: list[list[int]],
    short: int,
    budget: int,
    free: bool,
) -> int:
    """A rule among ``candidates`` whose shortest yield fits ``budget`` (uniform), or ``short``."""
    if not free:
        return short
    fits = [r for r in candidates if suffix[r][0] <= budget]
    return fits[rng.randrange(len(fits))]


def sample(g: Grammar, n: int, seed: int = 0, max_len: int = 64) -> list[bytes]:
    """``n`` random members of L(g), each of length at most ``max_len``.

    Each string comes from a random derivation: a target length ``T`` is drawn uniformly
    between the shortest member's length and ``max_len``; then every nonterminal is expanded
    by a rule chosen uniformly among those whose shortest yield still fits the remaining
    budget (so the result never exceeds ``T``), and every terminal by a byte chosen uniformly
    from its byte set.  When a derivation yields fewer than ``T / 2`` bytes, up to three more
    are drawn and the longest is kept (uniform rule choice alone favours short strings).  After many expansions the sampler switches to shortest rules, which
    guarantees termination even with unit cycles and nullable recursion.

    Parameters
    ----------
    g : Grammar
        The grammar.
    n : int
        Number of strings (repeats possible).
    seed : int
        Seed of the private random generator; equal seeds give equal results.
    max_len : int
        Longest string allowed.

    Returns
    -------
    list[bytes]
        ``n`` members of L(g), in the order drawn.

    Raises
    ------
    EmptyLanguageError
        When L(g) is empty.
    GrammarError
        When no member of L(g) has length ``<= max_len``.

    Notes
    -----
    An O(|G| log |G|) precomputation (shortest yields by Knuth's generalisation of
    Dijkstra's algorithm, then the rounds in which shortest rules become usable), then
    O(n * (max_len + expansions)) where a derivation makes at most ``50 * max_len + 200``
    free expansions before it follows shortest rules, which reach a leaf within O(|V|)
    unit steps per written byte (subtrees deriving only the empty string are skipped).
    Needs no budget.

    Examples
    --------
    >>> from formalgram import ByteSet, Grammar, Nonterminal, Production
    >>> S = Nonterminal("S")
    >>> g = Grammar([Production(S, [ByteSet.from_bytes(b"xy"), S]), Production(S, [])], "S")
    >>> all(set(s) <= set(b"xy") for s in sample(g, 5, seed=1))
    True
    """
    minlen, short_rule = _min_lengths(g)
    start = g.start_id
    if minlen[start] >= _INF:
        raise EmptyLanguageError(f"L(g) is empty: start symbol {g.names[start]!r} derives no string")
    if minlen[start] > max_len:
        raise GrammarError(
            f"no member of L(g) has length <= max_len={max_len}; the shortest has length {minlen[start]}"
        )
    rng = random.Random(seed)
    masks = g.masks
    rules = g.rules
    # per rule: suffix sums of minimal yields (suffix[k] = minimal length of rhs[k:])
    suffix: list[list[int]] = []
    for _lhs, rhs in rules:
        suf = [0] * (len(rhs) + 1)
        for k in range(len(rhs) - 1, -1, -1):
            s = rhs[k]
            v = minlen[s] if s >= 0 else (1 if masks[~s] else _INF)
            suf[k] = min(_INF, suf[k + 1] + v)
        suffix.append(suf)
    # byte lists per terminal
    choices: list[list[int]] = [[b for b in range(256) if (m >> b) & 1] for m in masks]
    sampler = _Sampler(rng, g, suffix, minlen, short_rule, choices, 50 * max_len + 200)
    out: list[bytes] = []
    for _ in range(n):
        target = rng.randint(minlen[start], max_len)
        best = sampler.derive(start, target)
        for _attempt in range(_ATTEMPTS - 1):
            if 2 * len(best) >= target:
                break
            again = sampler.derive(start, target)
            if len(again) > len(best):
                best = again
        out.append(best)
    return out


class _Sampler:
    """Random derivations within a length budget (see :func:`sample`)."""

    def __init__(
        self,
        rng: random.Random,
        g: Grammar,
        suffix: list[list[int]],
        minlen: list[int],
        short_rule: list[int],
        choices: list[list[int]],
        expansion_cap: int,
    ) -> None:
        self.minlen = minlen
        self.rng = rng
        self.rules = g.rules
        self.by_lhs = g.rules_by_lhs
        self.suffix = suffix
        self.short_rule = short_rule
        self.choices = choices
        self.expansion_cap = expansion_cap

    def derive(self, start: int, target: int) -> bytes:
        """One string derived from ``start`` of length at most ``target`` (>= its minimal length)."""
        rng = self.rng
        rules = self.rules
        by_lhs = self.by_lhs
        suffix = self.suffix
        short_rule = self.short_rule
        choices = self.choices
        buf = bytearray()
        expansions = 1
        # frames: [rule index, next rhs position, output length at frame start, frame budget]
        frames: list[list[int]] = [
            [_pick(rng, by_lhs[start], suffix, short_rule[start], target, True), 0, 0, target]
        ]
        while frames:
            fr = frames[-1]
            r, k, begin, budget = fr
            rhs = rules[r][1]
            if k == len(rhs):
                frames.pop()
                continue
            fr[1] = k + 1
            s = rhs[k]
            if s < 0:
                opts = choices[~s]
                buf.append(opts[rng.randrange(len(opts))])
            else:
                # what this symbol may use: the frame budget minus what is already produced
                # and the minimum the rest of the rule still needs (never below minlen[s])
                sub = budget - (len(buf) - begin) - suffix[r][k + 1]
                expansions += 1
                free = expansions <= self.expansion_cap
                if not free and self.minlen[s] == 0:
                    # shortest rules derive the empty string here: nothing to write, and the
                    # derivation tree can be exponentially large (A -> B B, B -> C C, ...)
                    continue
                frames.append([_pick(rng, by_lhs[s], suffix, short_rule[s], sub, free), 0, len(buf), sub])
        return bytes(buf)
