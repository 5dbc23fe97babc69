"""Executable form of the paper's Theorem 2 (proofs/congruence.md, proofs/stack_adjacency.md).

For random grammars and random small vocabularies, tokens that :func:`compress` puts in one
class must be interchangeable in every context, and tokens it calls invalid must never be a
valid continuation.  The oracle is the Earley recognizer (``formalgram.is_prefix``), which
shares no code with the GNF conversion or the displacement search.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from _class_oracle import check_classes_with_earley
from _engine_oracle import row_tokens
from _recognize_oracles import generating
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram import EmptyLanguageError, Grammar, is_prefix, parse_gbnf
from formalgram.testing import grammars
from formalgram_cfgzip import TokenClasses, Vocabulary, compress, engines

ALPHABET = b"abc"


def _strings(alphabet: bytes, max_len: int) -> list[bytes]:
    out = [b""]
    for n in range(1, max_len + 1):
        out.extend(bytes(p) for p in itertools.product(alphabet, repeat=n))
    return out


DEAD_RULES_WARNING = "grammar has nonterminals that derive no string"


def dead_nonterminals(g: Grammar) -> list[str]:
    """Names, sorted, of the nonterminals that have rules but derive no string (the span-free
    fixpoint of ``_recognize_oracles.generating``, not formalgram's analysis)."""
    live = generating(g)
    return sorted(g.names[a] for a in range(len(g.names)) if g.rules_by_lhs[a] and a not in live)


def compress_and_check_warning(g: Grammar, vocab: Vocabulary) -> TokenClasses:
    """``compress(g, vocab)``, asserting that it warns about rules deriving no string exactly
    when ``g`` has some, naming them (XGrammar's masks may differ there: see
    :func:`test_xgrammar_allows_a_token_no_parse_accepts`)."""
    dead = dead_nonterminals(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return compress(g, vocab, progress=False)
        finally:
            said = [str(w.message) for w in caught if DEAD_RULES_WARNING in str(w.message)]
            if dead:
                assert len(said) == 1 and f"({', '.join(dead[:5])})" in said[0], (dead, said)
            else:
                assert said == [], said


def _check_congruence(
    g: Grammar, vocab: Vocabulary, ctx_len: int = 3, cont_len: int = 2
) -> tuple[int, int] | None:
    """Check ``compress``'s classes with the Earley oracle; ``None`` for an empty language
    (which ``compress`` refuses), else what was checked (``check_classes_with_earley``)."""
    try:
        classes = compress_and_check_warning(g, vocab)
    except EmptyLanguageError:
        assert g.start_id not in generating(g)  # refused only for an empty language
        return None
    contexts = [w for w in _strings(ALPHABET, ctx_len) if is_prefix(g, w)]
    return check_classes_with_earley(
        g, vocab.tokens, classes.token_class, classes.invalid_class, contexts, _strings(ALPHABET, cont_len)
    )


vocabularies = st.lists(
    st.binary(min_size=1, max_size=3).map(lambda b: bytes(ALPHABET[x % 3] for x in b)),
    min_size=1,
    max_size=14,
    unique=True,
)


def test_equal_displacement_implies_congruence() -> None:
    """Theorem 2 (proofs/congruence.md): one class => same prefix validity in all contexts.

    Grammars with rules that derive no string are included: compress must warn about them
    (checked) and still be exact for the Earley oracle.  Half the vocabularies also hold every
    token of one or two bytes, so that classes with several members are common.  The cases
    checked are counted, so that the property cannot pass vacuously."""
    checked: list[tuple[int, int]] = []

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(g=grammars(alphabet=ALPHABET), tokens=vocabularies, short=st.booleans())
    def congruent(g: Grammar, tokens: list[bytes], short: bool) -> None:
        if short:  # and every token of one or two bytes: classes with several members are common
            tokens = list(dict.fromkeys([*tokens, *_strings(ALPHABET, 2)[1:]]))
        counts = _check_congruence(g, Vocabulary(tokens))
        if counts is not None:
            checked.append(counts)

    congruent()
    # about 120-140 of the 200 have a non-empty language; members of one class are compared
    # in 15-50 of those, invalid tokens refused in about 90 (several seeds)
    assert len(checked) >= 100, len(checked)
    assert sum(1 for compared, _ in checked if compared) >= 10, checked
    assert sum(1 for _, refused in checked if refused) >= 60, checked


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


def test_xgrammar_allows_a_token_no_parse_accepts() -> None:
    """The divergence the warning is about, pinned: XGrammar 0.2.9 treats a prefix that enters
    a nonterminal deriving no string as viable.

    In ``root ::= "a" x | "b"`` with ``x ::= x "c"``, ``x`` derives no string, so no member
    starts with "a" (Earley: ``is_prefix`` is false).  XGrammar's full-vocabulary mask still
    allows the token "a" at the start, and accepts it into a dead end (nothing may follow, the
    grammar cannot end).  compress() warns, puts "a" in the invalid class, and the compressed
    mask allows exactly what Earley allows: it differs from XGrammar's at that one token.
    """
    xgr = pytest.importorskip("xgrammar")
    text = 'root ::= "a" x | "b"\nx ::= x "c"\n'
    tokens = [b"a", b"b", b"c", b"ac", b"</s>"]
    vocab = Vocabulary(tokens, special_ids=[4], stop_ids=[4])
    g = parse_gbnf(text)
    earley = {i for i, t in enumerate(tokens[:4]) if is_prefix(g, t)}
    assert earley == {1}
    with pytest.warns(UserWarning, match=r"derive no string \(x\)"):
        classes = compress(text, vocab, progress=False)
    # XGrammar used directly: its tokenizer over these bytes, its compiler and matcher
    info = xgr.TokenizerInfo(tokens, vocab_size=vocab.logit_width, stop_token_ids=[4])
    compiled = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False).compile_grammar(text)
    raw = xgr.GrammarMatcher(compiled)
    row = np.zeros((1, 1), dtype=np.int32)
    raw.fill_next_token_bitmask(row)
    assert row_tokens(row[0], 5) == {0, 1}, "XGrammar 0.2.9 allows the token 'a', which enters x"
    assert raw.accept_token(0), "XGrammar 0.2.9 accepts 'a', which no complete parse accepts"
    raw.fill_next_token_bitmask(row)
    assert row_tokens(row[0], 5) == set() and not raw.is_terminated()  # a dead end
    # the engine adapter's full-vocabulary reference shows the same mask
    full = engines.compile_full(vocab, text, engine="xgrammar")
    full_row = full.allocate_token_bitmask(1)
    full.matcher().fill_next_token_bitmask(full_row)
    assert row_tokens(full_row[0], 5) == {0, 1}
    # the compressed path follows Earley
    assert int(classes.token_class[0]) == classes.invalid_class
    adapter = engines.compile_grammar(classes, text, engine="xgrammar")
    m = adapter.matcher()
    ours = adapter.allocate_token_bitmask(1)
    m.fill_next_token_bitmask(ours)
    assert row_tokens(ours[0], 5) == earley
    assert not m.accept_token(0)
