"""The oracle of token classes: the Earley recognizer, on sampled contexts (no tests here).

:func:`check_classes_with_earley` states what lossless classes promise, with
``formalgram.is_prefix`` (the Earley recognizer, which shares no code with the GNF
conversion or the displacement search of ``compress``) deciding every case:

* tokens of one class are interchangeable: after each context ``w`` and before each
  continuation ``z``, ``w + t + z`` is a viable prefix for every member ``t`` or for none;
* a token of the invalid class is refused after every context.

Tests that compare two ``compress`` results with each other (workers, search-table resets,
specialisation) check one of them with it, so that agreeing on a wrong answer fails.
:func:`sampled_contexts` gives contexts for a grammar of any alphabet.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from formalgram import Grammar, GrammarError, is_prefix, sample


def check_classes_with_earley(
    grammar: Grammar,
    tokens: Sequence[bytes | None],
    token_class: npt.NDArray[np.integer],
    invalid_class: int,
    contexts: Sequence[bytes],
    continuations: Sequence[bytes] = (b"",),
    per_class: int | None = None,
) -> tuple[int, int]:
    """Assert both promises on ``contexts`` x ``continuations``; return what was checked.

    Parameters
    ----------
    grammar : Grammar
        The grammar the classes were computed for.
    tokens : sequence of bytes or None
        Token bytes by id (``None``: a hole, skipped).
    token_class : numpy.ndarray
        Class id of every token id (at least ``len(tokens)`` entries).
    invalid_class : int
        Id of the invalid class (``-1``: none).
    contexts : sequence of bytes
        Viable prefixes of the language (asserted) to put before the tokens.
    continuations : sequence of bytes
        Strings to put after the tokens.
    per_class : int or None
        Compare at most this many members of each class (in id order) with its first member;
        ``None``: all of them.  Every token of the invalid class is checked.

    Returns
    -------
    tuple of int
        ``(members compared with the first member of their class, invalid tokens checked)``,
        for the caller to assert that neither check was vacuous.
    """
    for w in contexts:
        assert is_prefix(grammar, w), f"context {w!r} is not a viable prefix"
    members: dict[int, list[bytes]] = {}
    for i, t in enumerate(tokens):
        if t is not None:
            members.setdefault(int(token_class[i]), []).append(t)
    compared = refused = 0
    for cid, toks in members.items():
        limit = len(toks) if per_class is None else per_class
        if cid == invalid_class:
            for t in toks:
                for w in contexts:
                    assert not is_prefix(grammar, w + t), f"invalid token {t!r} is valid after {w!r}"
                refused += 1
            continue
        first = toks[0]
        for t in toks[1 : limit + 1]:
            for w in contexts:
                for z in continuations:
                    a, b = is_prefix(grammar, w + first + z), is_prefix(grammar, w + t + z)
                    assert a == b, (
                        f"tokens {first!r} and {t!r} share class {cid} but differ after {w!r} "
                        f"before {z!r}: {a} vs {b}"
                    )
            compared += 1
    return compared, refused


def sampled_contexts(grammar: Grammar, n: int = 8, seed: int = 0, max_len: int = 24) -> list[bytes]:
    """Viable prefixes of ``grammar``: ``b""`` and four prefixes of each of ``n`` sampled
    members (of at most ``max_len`` bytes, or longer where no member is that short), at most
    ``4 * n + 1`` of them, shortest first."""
    members: list[bytes] = []
    for limit in (max_len, 16 * max_len, 1 << 14):
        try:
            members = sample(grammar, n, seed=seed, max_len=limit)
            break
        except GrammarError:  # no member that short
            continue
    cuts: set[bytes] = {b""}
    for member in members:
        step = max(1, len(member) // 4)
        cuts.update(member[:i] for i in range(step, len(member) + 1, step))
    return sorted(cuts, key=lambda w: (len(w), w))[: 4 * n + 1]
