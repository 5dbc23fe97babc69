"""Merging nonterminals with identical GNF rule sets (coarsest stable partition, by refinement).

The last step of :func:`formalgram.transforms.gnf.to_gnf`, computed like DFA minimisation.
"""

from __future__ import annotations

from typing import cast

from formalgram.transforms.budget import Meter
from formalgram.transforms.gnf_rules import Body

__all__ = ["minimise", "partition", "quotient", "quotient_size"]


def _zeros(cache: list[object], n: int) -> object:
    """The tuple of ``n`` zeros (block 0), kept in ``cache`` by length."""
    while len(cache) <= n:
        cache.append(tuple([0] * len(cache)))
    return cache[n]


def minimise(
    rules: dict[int, dict[Body, int]], start: int, meter: Meter
) -> tuple[dict[int, dict[Body, int]], int, list[int]]:
    """Merge nonterminals with identical rule sets: :func:`partition`, then :func:`quotient`.

    Returns the quotient rules keyed by representative (the smallest member of each
    block, the start for its own block), the start's representative and the
    representative of each nonterminal (indexable by id, -1 when absent).
    """
    reps, rep = partition(rules, start, meter)
    return quotient(rules, reps, rep), rep[start], rep


def partition(rules: dict[int, dict[Body, int]], start: int, meter: Meter) -> tuple[list[int], list[int]]:
    """The coarsest stable partition of the nonterminals of ``rules``, by refinement.

    The partition starts with one block and is refined until every block is stable:
    the *signature* of a nonterminal (its rules with every tail symbol replaced by its
    block, the byte sets of rules that become equal merged) is the same for all members
    of a block.  Refinement runs on a worklist in the manner of Hopcroft's automaton
    minimisation: when a block splits, the largest part keeps its number and only the
    nonterminals whose tails mention a member of another part are looked at again, so a
    chain of n nonterminals takes O(n log n) signature computations, not O(n^2).

    Returns the representatives (the smallest member of each block, the start for its own
    block), in the order of their blocks' smallest members, and the representative of each
    nonterminal (indexable by id, -1 when absent).  Every step is charged to ``meter``.
    """
    ids = sorted(rules)
    top = max(ids) + 1 if ids else 1
    # who mentions whom: users[s] = the nonterminals with ``s`` in some tail (each once,
    # in the order of ``ids``: ``last[s]`` is the latest user listed)
    users: list[list[int]] = [[] for _ in range(top)]
    last = [-1] * top
    # per nonterminal: the work of one signature of it
    sig_work = [0] * top
    # the first round, with every nonterminal in block 0, is computed on the way: a tail over
    # blocks is then all zeros, so the nonterminals are grouped by a stand-in signature with
    # each tail's length in place of its zeros (equal exactly when the signatures are), and
    # each group gets the true signature, with one shared tuple of zeros per length, below
    first: dict[object, list[int]] = {}
    work = 0
    for a in ids:
        tails = rules[a]
        own = 0
        for tail in tails:
            own += 1 + len(tail)
            for s in tail:
                if last[s] != a:
                    last[s] = a
                    users[s].append(a)
        sig_work[a] = own
        work += own
        key: object = None
        if len(tails) == 1:
            for tail, m in tails.items():
                key = (len(tail), m)
        else:
            by_len: dict[int, int] = {}
            for tail, m in tails.items():
                n = len(tail)
                by_len[n] = by_len.get(n, 0) | m
            key = next(iter(by_len.items())) if len(by_len) == 1 else frozenset(by_len.items())
        got = first.get(key)
        if got is None:
            first[key] = [a]
        else:
            got.append(a)
    meter.spend(work)
    block = [-1] * top
    # the same block ids as objects: a compiled build then builds the signatures' tuples
    # from them without boxing every id again
    block_obj: list[object] = [-1] * top
    zero: object = 0
    for a in ids:
        block[a] = 0
        block_obj[a] = zero
    size = [len(ids)]
    # the signature every member of a block has (None: not computed yet): the frozenset of
    # its (tail over blocks, merged mask) pairs, or that pair alone when there is one (equal
    # signatures are still equal objects, and the common one-rule case needs no set)
    block_sig: list[object | None] = [None]
    members: list[set[int]] = [set(ids)]
    zeros: list[object] = []
    first_sigs: dict[object, list[int]] = {}
    for key, group in first.items():
        sig0: object
        if isinstance(key, tuple):
            n, m = cast("tuple[int, int]", key)
            sig0 = (_zeros(zeros, n), m)
        else:
            stand_in = cast("frozenset[tuple[int, int]]", key)
            sig0 = frozenset([(_zeros(zeros, n), m) for n, m in stand_in])
        first_sigs[sig0] = group
    touched: set[int] = set()
    pending: dict[int, dict[object, list[int]]] | None = {0: first_sigs} if ids else None
    while pending is not None or touched:
        # signatures of every touched nonterminal, all under the same partition
        groups: dict[int, dict[object, list[int]]] = {}
        work = 0
        if pending is not None:
            groups = pending
            pending = None
            touched = set()
            for a in ids:
                work += sig_work[a]
        for a in sorted(touched):
            work += sig_work[a]
            if size[block[a]] == 1:
                # a block of one cannot split: its signature would only be stored, and a
                # block's stored signature is read only while some member is not looked at
                continue
            tails = rules[a]
            sig: object = None
            if len(tails) == 1:
                for tail, m in tails.items():
                    sig = (tuple([block_obj[s] for s in tail]), m)
            else:
                keyed: list[tuple[object, int]] = [
                    (tuple([block_obj[s] for s in tail]), m) for tail, m in tails.items()
                ]
                if len({k for k, _ in keyed}) == len(keyed):
                    # no two tails meet: the pairs as they are (one hash of each tail saved)
                    sig = frozenset(keyed)
                else:
                    merged: dict[object, int] = {}
                    for k, m in keyed:
                        merged[k] = merged.get(k, 0) | m
                    sig = next(iter(merged.items())) if len(merged) == 1 else frozenset(merged.items())
            by_sig = groups.get(block[a])
            if by_sig is None:
                groups[block[a]] = {sig: [a]}
            else:
                lst = by_sig.get(sig)
                if lst is None:
                    by_sig[sig] = [a]
                else:
                    lst.append(a)
        meter.spend(work)
        touched = set()
        for c, parts in groups.items():
            old = block_sig[c]
            untouched = size[c] - sum(len(p) for p in parts.values())
            if untouched:
                # the members not looked at again still have the block's signature
                assert old is not None
                parts.setdefault(old, [])
            pieces = list(parts.items())
            if len(pieces) == 1:
                block_sig[c] = pieces[0][0]
                continue
            counts = [len(part) + (untouched if sig == old else 0) for sig, part in pieces]
            keep = counts.index(max(counts))
            block_sig[c] = pieces[keep][0]
            for i, (sig, part) in enumerate(pieces):
                if i == keep:
                    continue
                moving = list(part)
                work = 1
                if untouched and sig == old:
                    looked_at: set[int] = set()
                    for other in parts.values():
                        looked_at.update(other)
                    moving.extend(a for a in members[c] if a not in looked_at)
                    work += len(looked_at) + len(members[c])
                new = len(size)
                size.append(len(moving))
                block_sig.append(sig)
                members.append(set(moving))
                size[c] -= len(moving)
                new_obj: object = new
                for a in moving:
                    members[c].discard(a)
                    block[a] = new
                    block_obj[a] = new_obj
                    work += 1 + len(users[a])
                    touched.update(users[a])
                meter.spend(work)
    rep_of_block: dict[int, int] = {}
    for a in ids:
        if block[a] not in rep_of_block:
            rep_of_block[block[a]] = a
    rep_of_block[block[start]] = start
    rep = [-1] * top
    for a in ids:
        rep[a] = rep_of_block[block[a]]
    return list(rep_of_block.values()), rep


def _renames(rules: dict[Body, int], rep: list[int]) -> bool:
    """Whether some tail symbol of ``rules`` is not its own representative."""
    for tail in rules:
        for s in tail:
            if rep[s] != s:
                return True
    return False


def quotient(
    rules: dict[int, dict[Body, int]], reps: list[int], rep: list[int]
) -> dict[int, dict[Body, int]]:
    """The rules of the representatives ``reps`` with every tail symbol replaced by its ``rep``.

    Rules that meet are merged (their byte sets united).  Not charged: it writes what
    :func:`partition` read.
    """
    out: dict[int, dict[Body, int]] = {}
    for a in reps:
        tails = rules[a]
        # a rule set none of whose tail symbols is replaced is kept as it is (its tails stay
        # distinct); otherwise the tails are renamed and the rules that meet are merged
        if not _renames(tails, rep):
            out[a] = dict(tails)
            continue
        merged: dict[Body, int] = {}
        for tail, m in tails.items():
            k = tuple([rep[s] for s in tail])
            old = merged.setdefault(k, m)
            if old != m:
                merged[k] = old | m
        out[a] = merged
    return out


def quotient_size(rules: dict[int, dict[Body, int]], reps: list[int], rep: list[int]) -> int:
    """The number of rules :func:`quotient` would return, without building them."""
    count = 0
    for a in reps:
        tails = rules[a]
        if not _renames(tails, rep):
            count += len(tails)
        else:
            count += len({tuple([rep[s] for s in tail]) for tail in tails})
    return count
