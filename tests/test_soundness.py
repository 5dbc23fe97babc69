"""Executable form of the paper's Theorem 2 (proofs/congruence.md, proofs/stack_adjacency.md).

For random grammars and random small vocabularies, tokens that :func:`compress` puts in one
class must be interchangeable in every context, and tokens it calls invalid must never be a
valid continuation.  The oracle is the Earley recognizer (``formalgram.is_prefix``), which
shares no code with the GNF conversion or the displacement search.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from formalgram import EmptyLanguageError, Grammar, is_prefix, parse_gbnf
from formalgram.testing import grammars
from formalgram_cfgzip import Vocabulary, compress

ALPHABET = b"abc"


def _strings(alphabet: bytes, max_len: int) -> list[bytes]:
    out = [b""]
    for n in range(1, max_len + 1):
        out.extend(bytes(p) for p in itertools.product(alphabet, repeat=n))
    return out


def _check_congruence(g: Grammar, vocab: Vocabulary, ctx_len: int = 3, cont_len: int = 2) -> None:
    try:
        classes = compress(g, vocab, progress=False)
    except EmptyLanguageError:
        assume(False)
        return
    contexts = [w for w in _strings(ALPHABET, ctx_len) if is_prefix(g, w)]
    continuations = _strings(ALPHABET, cont_len)
    by_class: dict[int, list[int]] = {}
    for i in vocab.text_ids():
        by_class.setdefault(int(classes.token_class[i]), []).append(i)
    for cid, members in by_class.items():
        toks = [vocab.tokens[i] for i in members]
        if cid == classes.invalid_class:
            for t in toks:
                assert t is not None
                for w in contexts:
                    assert not is_prefix(g, w + t), f"invalid token {t!r} is valid after {w!r}"
            continue
        first = toks[0]
        assert first is not None
        for other in toks[1:]:
            assert other is not None
            for w in contexts:
                for z in continuations:
                    a = is_prefix(g, w + first + z)
                    b = is_prefix(g, w + other + z)
                    assert a == b, (
                        f"tokens {first!r} and {other!r} share class {cid} but differ "
                        f"in context {w!r} .. {z!r}: {a} vs {b}"
                    )


vocabularies = st.lists(
    st.binary(min_size=1, max_size=3).map(lambda b: bytes(ALPHABET[x % 3] for x in b)),
    min_size=1,
    max_size=14,
    unique=True,
)


@pytest.mark.filterwarnings("ignore:grammar has nonterminals that derive no string")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=grammars(alphabet=ALPHABET), tokens=vocabularies)
def test_equal_displacement_implies_congruence(g: Grammar, tokens: list[bytes]) -> None:
    """Theorem 2 (proofs/congruence.md): one class => same prefix validity in all contexts."""
    _check_congruence(g, Vocabulary(tokens))


@pytest.mark.parametrize("specialize", [None, True, False])
def test_nullable_whitespace_tokens_survive(specialize: bool | None) -> None:
    """NOTES.md item 1: a token crossing an optional-whitespace position must stay valid."""
    g = parse_gbnf(
        'root ::= (expr "=" ws term "\\n")+\n'
        "expr ::= term ([-+*/] term)*\n"
        'term ::= ident | num | "(" ws expr ")" ws\n'
        "ident ::= [a-z] [a-z0-9_]* ws\n"
        "num ::= [0-9]+ ws\n"
        "ws ::= [ \\t\\n]*\n"
    )
    toks = [b"((", b"(f", b"=x", b"=false", b"x", b" ", b"#", b"=", b"(", b"))", b"1=2"]
    vocab = Vocabulary(toks)
    classes = compress(g, vocab, progress=False, specialize=specialize)
    invalid = {vocab.tokens[i] for i in classes.invalid.tolist()}
    assert invalid == {b"#"}
    # and the classes are congruent by the oracle on short contexts
    contexts = [b"", b"a", b"a=", b"a= ", b"(", b"a=1\n", b"a=(b"]
    for i, j in itertools.combinations(range(len(toks)), 2):
        if classes.token_class[i] == classes.token_class[j] and toks[i] not in invalid:
            for w in contexts:
                for z in (b"", b")", b"\n", b"1", b" "):
                    assert is_prefix(g, w + toks[i] + z) == is_prefix(g, w + toks[j] + z)


def test_stop_and_special_tokens_have_their_own_classes() -> None:
    g = parse_gbnf('root ::= "a"+')
    vocab = Vocabulary(
        [b"a", b"aa", b"b", b"<s>", b"</s>", None], special_ids=[3, 4], stop_ids=[4], logit_width=8
    )
    classes = compress(g, vocab, progress=False)
    tc = classes.token_class
    assert tc.shape == (8,)
    assert tc[0] == tc[1]  # "a" and "aa" are congruent under a+
    assert tc[4] == classes.stop_class and np.count_nonzero(tc == classes.stop_class) == 1
    for i in (2, 3, 5, 6, 7):
        assert tc[i] == classes.invalid_class
    assert classes.representatives[tc[0]] == 0  # byte-wise shortest
    assert classes.num_classes == 3
