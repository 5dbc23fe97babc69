"""The shift symmetry of counted repetitions (formalgram_cfgzip/search/symmetry.py; proof:
proofs/shift_symmetry.md).

A search that skips the guesses of the chain symbols :func:`shift_twins` names must give
exactly the full search's partition of the tokens, and, once its domain automaton is closed,
exactly the full search's domains; the native engine built from those domains must give
Earley's mask for every token at every step.  Random grammars with counted repetitions (long
enough to have twins for the vocabulary's longest token) × random small vocabularies, and
JSON Schemas whose strings have a ``maxLength``, walked with Llama-3 against XGrammar.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np
import pytest
from _build import c_param
from _counted import checks_at_least, gave_up
from _native_helpers import accepted_words, small_vocab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_native_engine import VocabTrie, check_walk

from formalgram import PDA, parse_gbnf, to_gnf
from formalgram.adjacency import below_bits
from formalgram_cfgzip import TokenClasses, Vocabulary, compress
from formalgram_cfgzip.engines.native import build_tables
from formalgram_cfgzip.engines.native.matcher import NativeCompiled
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.driver import token_table, token_trie, walk_trie
from formalgram_cfgzip.search.symmetry import shift_twins

pytestmark = pytest.mark.filterwarnings("ignore:grammar has nonterminals that derive no string")
COMPRESS = sys.modules["formalgram_cfgzip.compress"]


def _compress(text: str, vocab: Vocabulary, *, twins: bool) -> TokenClasses:
    """``compress(text, vocab, domains=True)``, with the twins' guesses skipped or not."""
    with pytest.MonkeyPatch.context() as m:
        if not twins:
            m.setattr(COMPRESS, "shift_twins", lambda *a, **k: {})
        return compress(text, vocab, progress=False, domains=True, specialize=False)


def _same_partition(a: TokenClasses, b: TokenClasses) -> bool:
    """Whether two class assignments split the tokens alike (up to class numbering)."""
    x, y = np.asarray(a.token_class).tolist(), np.asarray(b.token_class).tolist()
    return len(set(zip(x, y, strict=True))) == len(set(x)) == len(set(y))


def _domains_by_rep(c: TokenClasses) -> dict[bytes | None, set[tuple[int, ...]]]:
    """Each class's domain (the popped sequences its automaton reads), keyed by its
    representative's bytes."""
    assert c.domains is not None
    reps = np.asarray(c.representatives).tolist()
    return {c.vocab.tokens[r]: accepted_words(c.domains.automaton, k) for k, r in enumerate(reps)}


def test_the_twins_of_a_counted_repetition_are_its_symbols_past_the_horizon() -> None:
    gnf = to_gnf(parse_gbnf('root ::= "[" [a-z]{0,12} "]"'))
    pda = PDA.from_gnf(gnf)
    twins = shift_twins(pda, below_bits(gnf), 4)
    # root-rep_k__t_set reads one letter and leaves root-rep_(k-1): "at most k+1 more letters"
    names = {gnf.names[x]: gnf.names[m] for x, m in twins.items()}
    assert names == {f"root-rep_{k}__t_set": "root-rep_4__t_set" for k in range(5, 11)}
    assert shift_twins(pda, below_bits(gnf), 9) == {}
    # a chain whose item mentions the chain is left alone: the renaming would change the item
    nested = to_gnf(parse_gbnf('root ::= ("(" root ")" | "x"){0,12}'))
    assert shift_twins(PDA.from_gnf(nested), below_bits(nested), 2) == {}


def test_a_search_with_twins_refuses_tokens_past_its_horizon() -> None:
    gnf = to_gnf(parse_gbnf('root ::= [a-z]{0,30} "!"'))
    search = DisplacementSearch(gnf)
    twins = shift_twins(search.pda, search.below_bits, 3)
    assert twins
    search.use_twins(twins, 3)
    trie = token_trie(token_table(Vocabulary([b"abcd", b"ab"])))
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    with pytest.raises(ValueError, match="at most 3 bytes"):
        walk_trie(search, trie, class_of, 2, False, 10**6, False)


# -- random grammars with counted repetitions ---------------------------------------------

ITEMS = ["[a-c]", '"ab"', '([ab] | "cd")', "[^,]", '[a-b] "c"?']


@st.composite
def chain_grammars(draw: Any) -> str:
    """GBNF text with one to three counted repetitions long enough to have twins."""
    fields = []
    for _ in range(draw(st.integers(1, 3))):
        item = draw(st.sampled_from(ITEMS))
        top = draw(st.integers(6, 30))
        low = draw(st.sampled_from([0, 1, min(3, top)]))
        fields.append(f"{item}{{{low},{top}}}")
    shape = draw(st.sampled_from(["seq", "alt", "list"]))
    if shape == "seq":
        body = ' "," '.join(fields)
    elif shape == "alt":
        body = " | ".join(f'"{i}" {f}' for i, f in enumerate(fields))
    else:
        body = f'"[" ({" | ".join(fields)}) ("," ({" | ".join(fields)}))* "]"'
    return f'root ::= "{{" ({body}) "}}"'


ALPHABET = [b"a", b"b", b"c", b"d", b",", b"{", b"}", b"[", b"]", b"0", b"1", "é".encode()]
token_lists = st.lists(
    st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3).map(b"".join),
    min_size=3,
    max_size=14,
    unique=True,
)


@checks_at_least(40)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain_grammars(), token_lists, st.integers(0, 2**32 - 1))
def test_twins_keep_the_partition_the_domains_and_the_masks(
    text: str, tokens: list[bytes], seed: int
) -> None:
    """proofs/shift_symmetry.md, Theorem: the partition, every domain and Earley's masks."""
    vocab = small_vocab(tokens)
    with_twins = _compress(text, vocab, twins=True)
    if not with_twins.stats["twins"]:
        return gave_up()
    full = _compress(text, vocab, twins=False)
    assert full.stats["twins"] == 0
    assert _same_partition(with_twins, full)
    assert _domains_by_rep(with_twins) == _domains_by_rep(full)
    g = parse_gbnf(text)
    tables = build_tables(with_twins, text)
    assert tables.stats["domains_from_classes"] == 1.0
    check_walk(g, NativeCompiled(with_twins, tables), [], 40, random.Random(seed), VocabTrie(vocab))
    return None


@pytest.mark.parametrize("kernel", ["python", c_param("search")])
def test_both_searches_skip_the_same_guesses(kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python search and the C kernel's, both with twins, agree with the full search."""
    if kernel == "python":
        monkeypatch.setenv("FORMALGRAM_NO_CSEARCH", "1")
    text = 'root ::= "<" ([a-c] | "\\\\" [nt]){0,40} ">" ("," [0-9]{2,25})*'
    vocab = small_vocab([b"a", b"ab", b"abc", b"\\n", b"c\\", b"<", b">", b",1", b"12", b"2>", b"<a"])
    with_twins = _compress(text, vocab, twins=True)
    assert with_twins.stats["twins"] > 0
    assert with_twins.stats["search_kernel"] == float(kernel != "python")
    full = _compress(text, vocab, twins=False)
    assert _same_partition(with_twins, full)
    assert _domains_by_rep(with_twins) == _domains_by_rep(full)


# -- JSON Schemas with maxLength, Llama-3, against XGrammar -------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_long_strings_walk_like_xgrammar(seed: int) -> None:
    pytest.importorskip("xgrammar")
    import quicktok

    from formalgram_cfgzip import compile_grammar, from_json_schema
    from formalgram_cfgzip.engines import compile_full

    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 200},
            "b": {"type": "string", "maxLength": 700},
            "k": {
                "type": "object",
                "patternProperties": {"^[a-z0-9_]{1,300}$": {"type": "string", "maxLength": 300}},
                "additionalProperties": False,
            },
        },
        "required": ["a", "b", "k"],
        "additionalProperties": False,
    }
    vocab = Vocabulary.builtin("llama3")
    text = from_json_schema(schema)
    classes = compress(text, vocab, progress=False, domains=True, specialize=False)
    assert classes.stats["twins"] > 500  # the four chains past the longest token (128 bytes)
    native = compile_grammar(classes, text, engine="native")
    xgr = compile_full(vocab, text)
    rng = random.Random(seed)
    pieces = [*"abcxyz 0189_-", "é", "日本", "\U0001f600", "ab"]

    def chars(n: int) -> str:  # n JSON characters of the string (no escapes: maxLength strings have none)
        out = ""
        while len(out) < n:
            out += rng.choice(pieces)
        return out[:n]

    encoder = quicktok.get_encoding("llama3")
    steps = 0
    for a, b, key, value in [(0, 699, 1, 0), (200, 700, 300, 300), (129, 128, 130, 127), (201, 3, 299, 301)]:
        doc = f'{{"a": "{chars(a)}", "b": "{chars(b)}", "k": {{"{"k" * key}": "{chars(value)}"}}}}'
        valid = a <= 200 and b <= 700 and 1 <= key <= 300 and value <= 300
        ours, theirs = native.matcher(), xgr.matcher()
        bm, bx = native.allocate_token_bitmask(), xgr.allocate_token_bitmask()
        refused = False
        for tok in encoder.encode_ordinary(doc):
            ours.fill_next_token_bitmask(bm)
            theirs.fill_next_token_bitmask(bx)
            assert np.array_equal(bm, bx), f"step {steps}"
            steps += 1
            took = ours.accept_token(int(tok))
            assert took == theirs.accept_token(int(tok))
            if not took:
                refused = True
                break
        assert refused != valid
    assert steps > 800
