"""The per-request compressor and the token trie it walks.

Oracles: the Earley recognizer (``tests/_class_oracle.py``: the classes a :class:`Compressor`
gives are exact, independently of ``compress``); :func:`formalgram_cfgzip.compress` run on
its own (a :class:`Compressor` must give its classes bit for bit, whichever vocabulary was
used last); the sequences themselves for
the trie (every sequence read back from its end node, one node per distinct prefix); and
the search run token by token (``DisplacementSearch.run``) for the level-by-level walk.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from _class_oracle import check_classes_with_earley, sampled_contexts
from _data import real_grammar
from _native_helpers import sample_vocab
from hypothesis import given, settings
from hypothesis import strategies as st

from formalgram import parse_gbnf, to_gnf
from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.compress import Compressor, PreparedVocabulary, cache_entry_name, compress
from formalgram_cfgzip.errors import CacheError
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.driver import build_trie, token_table, token_trie, walk_trie
from formalgram_cfgzip.search.trie import DEAD
from formalgram_cfgzip.vocabulary import Vocabulary

SMALL_GRAMMARS = [
    'root ::= "(" root ")" root | "x" | "[" [a-c]* "]"',
    'root ::= obj\nobj ::= "{" ws (pair ("," ws pair)*)? "}"\npair ::= "\\"" [a-z]+ "\\"" ws ":" ws [0-9]+ ws\nws ::= [ \\n]*',
    'root ::= ("ab" | "a" "b" "c")+ ("." [0-9]{1,3})?',
]


def _same(a: TokenClasses, b: TokenClasses) -> bool:
    return (
        np.array_equal(a.token_class, b.token_class)
        and np.array_equal(a.representatives, b.representatives)
        and (a.invalid_class, a.stop_class, a.grammar_sha256, a.grammar_text_sha256)
        == (b.invalid_class, b.stop_class, b.grammar_sha256, b.grammar_text_sha256)
    )


def _small_vocab(seed: int) -> Vocabulary:
    rng = np.random.default_rng(seed)
    alphabet = list(b'()[]abcx{}":, \n0123456789.z')
    tokens = {bytes(rng.choice(alphabet, size=int(rng.integers(1, 6))).tolist()) for _ in range(300)}
    ordered = sorted(tokens)
    return Vocabulary([*ordered, b"<s>", b"</s>"], special_ids=[len(ordered)], stop_ids=[len(ordered) + 1])


def test_compressor_matches_compress_bit_for_bit_on_small_grammars() -> None:
    v1, v2 = _small_vocab(1), _small_vocab(2)
    c1, c2 = Compressor(v1), Compressor(v2)
    for text in SMALL_GRAMMARS:
        # alternate vocabularies, so that no "last vocabulary" cache carries the result
        got1, got2 = c1.compress(text), c2.compress(text)
        assert _same(got1, compress(text, v1, progress=False))
        assert _same(got2, compress(text, v2, progress=False))
        assert _same(c1.compress(parse_gbnf(text)), compress(parse_gbnf(text), v1, progress=False))


def test_compressor_classes_are_exact_for_earley() -> None:
    """Independently of ``compress``: the classes of one :class:`Compressor` used with two
    vocabularies in turn, on the small grammars and on a real one with 3,000 Llama-3
    tokens, are exact for the Earley recognizer after sampled contexts."""
    cases = [(text, _small_vocab(1 + i % 2)) for i, text in enumerate(SMALL_GRAMMARS)]
    cases.append(
        (real_grammar("json_schemas/recipe.gbnf").read_text(encoding="utf-8"), sample_vocab(3000, 5))
    )
    compressors: dict[int, Compressor] = {}
    for text, vocab in cases:
        compressor = compressors.setdefault(id(vocab), Compressor(vocab))
        classes = compressor.compress(text)
        g = parse_gbnf(text)
        compared, refused = check_classes_with_earley(
            g,
            vocab.tokens,
            classes.token_class,
            classes.invalid_class,
            sampled_contexts(g, 6, seed=1),
            (b"",),
            per_class=4,
        )
        assert compared > 0 and refused > 0, (text[:40], compared, refused)


@pytest.mark.parametrize(
    ("rel", "vocab_name"),
    [
        ("json_schemas/recipe.gbnf", "llama3"),
        ("json_schemas/invoice.gbnf", "llama3"),  # the specialisation trial runs
        ("llama_cpp/c.gbnf", "qwen3"),
        pytest.param("derived/json_mode_eval_xgrammar/JME_15.gbnf", "llama3", marks=pytest.mark.heavy),
    ],
)
def test_compressor_matches_compress_bit_for_bit_on_real_grammars(rel: str, vocab_name: str) -> None:
    text = real_grammar(rel).read_text(encoding="utf-8")
    vocab = Vocabulary.builtin(vocab_name)
    expected = compress(text, vocab, progress=False)
    PreparedVocabulary.of(Vocabulary([b"a"]))  # compress()'s kept preparation is now another one
    got = Compressor(vocab).compress(text)
    assert _same(got, expected)
    assert got.stats["expansions"] == expected.stats["expansions"]
    assert got.stats["specialize_trial"] == expected.stats["specialize_trial"]


def test_cache_by_text_and_by_canonical_fingerprint() -> None:
    c = Compressor(_small_vocab(3), cache_size=4)
    text = SMALL_GRAMMARS[0]
    first = c.compress(text)
    assert c.compress(text) is first and (c.hits, c.misses) == (1, 1)
    reformatted = "# same grammar\n" + text.replace(" | ", "\n    | ")
    again = c.compress(reformatted)
    assert (c.hits, c.misses) == (2, 1)  # found by its canonical fingerprint, not recomputed
    assert _same(again, compress(reformatted, c.vocab, progress=False))  # its own text fingerprint
    plain = c.compress(parse_gbnf(text))
    assert plain.grammar_text_sha256 == "" and (c.hits, c.misses) == (3, 1)
    for other in SMALL_GRAMMARS[1:]:
        c.compress(other)
    assert len(c._lru) <= 4  # bounded
    c.compress(text)  # evicted by the two others (two entries each): computed again
    assert c.misses == 4


def test_no_cache_recomputes_and_negative_size_is_refused() -> None:
    c = Compressor(_small_vocab(4), cache_size=0)
    a = c.compress(SMALL_GRAMMARS[2])
    b = c.compress(SMALL_GRAMMARS[2])
    assert a is not b and _same(a, b) and c.misses == 2
    with pytest.raises(CacheError, match="cache_size"):
        Compressor(c.vocab, cache_size=-1)


def test_cache_directory_is_used_and_repaired(tmp_path: Path) -> None:
    vocab = _small_vocab(5)
    text = SMALL_GRAMMARS[1]
    first = Compressor(vocab, cache_dir=tmp_path)
    computed = first.compress(text)
    (entry,) = tmp_path.iterdir()
    assert entry.name == cache_entry_name(computed.grammar_sha256, vocab.fingerprint())
    second = Compressor(vocab, cache_dir=tmp_path)
    loaded = second.compress(text)
    assert second.disk_hits == 1 and second.misses == 0 and _same(loaded, computed)
    # a damaged entry is not trusted: it is computed again and rewritten
    arrays = entry / "arrays.npz"
    arrays.write_bytes(arrays.read_bytes()[:-7])
    third = Compressor(vocab, cache_dir=tmp_path)
    assert _same(third.compress(text), computed) and third.misses == 1
    assert TokenClasses.load(entry, grammar=text, vocab=vocab).num_classes == computed.num_classes
    # an entry of another vocabulary under this name is refused by its fingerprints
    other = _small_vocab(6)
    fake = tmp_path / cache_entry_name(computed.grammar_sha256, other.fingerprint())
    fake.mkdir()
    for f in entry.iterdir():
        (fake / f.name).write_bytes(f.read_bytes())
    fourth = Compressor(other, cache_dir=tmp_path)
    assert _same(fourth.compress(text), compress(text, other, progress=False)) and fourth.misses == 1


# -- the trie and the level-by-level walk ---------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=40))
def test_trie_holds_every_sequence_once_per_prefix(seqs: list[bytes]) -> None:
    flat = np.frombuffer(b"".join(seqs), dtype=np.uint8)
    lengths = np.asarray([len(s) for s in seqs], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    trie = build_trie(flat, offsets, lengths)
    assert trie.size == len({s[:k] for s in seqs for k in range(1, len(s) + 1)})
    found = {}
    for k, (positions, nodes) in enumerate(zip(trie.end_positions, trie.end_nodes, strict=True)):
        for pos, node in zip(positions.tolist(), nodes.tolist(), strict=True):
            read = []
            for d in range(k, -1, -1):  # back to the root
                read.append(int(trie.labels[d][node]))
                node = int(trie.parents[d][node])
            found[pos] = bytes(reversed(read))
    assert found == dict(enumerate(seqs))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2), st.integers(0, 10**6))
def test_walk_gives_the_partition_of_token_by_token_runs(which: int, seed: int) -> None:
    vocab = _small_vocab(seed)
    gnf = to_gnf(parse_gbnf(SMALL_GRAMMARS[which]))
    toks = token_table(vocab)
    search = DisplacementSearch(gnf)
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    codes, _ = walk_trie(search, token_trie(toks), class_of, int(toks.ids.size), False, 10**9, False)
    alone = DisplacementSearch(gnf)
    keys = []
    for i in toks.ids.tolist():
        tok = vocab.tokens[i]
        assert tok is not None
        node = alone.run(tok)
        keys.append(None if node == DEAD else alone.canonical(node))
    pairs: dict[int, object] = {}
    for code, key in zip(codes.tolist(), keys, strict=True):
        assert (code < 0) == (key is None)
        assert pairs.setdefault(code, key) == key
    assert len(set(pairs.values())) == len(pairs)  # equal codes <=> equal displacements


def test_root_is_one_rule_for_compress_compressor_and_load(tmp_path: Path) -> None:
    """A text whose start rule is not ``root``: ``compress``, ``Compressor.compress`` and
    ``TokenClasses.load`` take the same ``root``, give the classes of the grammar parsed from
    that rule, and never take classes of one root for another (the text fingerprint binds it)."""
    text = 'start ::= item ("," item)*\nitem ::= [a-c]+ | "(" start ")"\nroot ::= "x"'
    vocab = Vocabulary([b"a", b"b", b",", b"(", b")", b"x", b"ab", b"a,"])
    from_rule = compress(parse_gbnf(text, "start"), vocab, progress=False)
    classes = compress(text, vocab, root="start", progress=False)
    assert np.array_equal(classes.token_class, from_rule.token_class)
    assert classes.grammar_sha256 == from_rule.grammar_sha256
    plain = compress(text, vocab, progress=False)  # the same text read from `root`
    assert plain.grammar_text_sha256 != classes.grammar_text_sha256
    assert plain.grammar_sha256 != classes.grammar_sha256
    c = Compressor(vocab)
    assert _same(c.compress(text, root="start"), classes)
    assert _same(c.compress(text), plain) and c.misses == 2
    classes.save(tmp_path)
    assert _same(TokenClasses.load(tmp_path, grammar=text, vocab=vocab, root="start", verify="all"), classes)
    with pytest.raises(CacheError, match="another grammar"):
        TokenClasses.load(tmp_path, grammar=text, vocab=vocab)


def test_a_grammar_mismatch_names_another_unicode_version(tmp_path: Path) -> None:
    """Lark terminals read ``\\w`` by the running Python's Unicode tables, so a cache written
    under another Python can belong to another grammar made from the same source: the refusal
    says so, and only then (the version alone refuses nothing)."""
    text, other = 'root ::= "a" root | "b"', 'root ::= "a" root | "c"'
    vocab = Vocabulary([b"a", b"b", b"c", b"ab"])
    compress(text, vocab, progress=False).save(tmp_path)
    meta_file = tmp_path / "meta.json"
    record = json.loads(meta_file.read_text())
    assert record["meta"]["unicode_version"] == unicodedata.unidata_version
    with pytest.raises(CacheError, match="another grammar") as plain:
        TokenClasses.load(tmp_path, grammar=other, vocab=vocab)
    assert "Unicode" not in str(plain.value)
    record["meta"]["unicode_version"] = "1.1.0"
    meta_file.write_text(json.dumps(record))
    assert TokenClasses.load(tmp_path, grammar=text, vocab=vocab).num_classes > 0
    with pytest.raises(CacheError, match=r"written under Unicode 1\.1\.0 and this Python has Unicode"):
        TokenClasses.load(tmp_path, grammar=other, vocab=vocab)
    del record["meta"]["unicode_version"]  # a cache written before the field existed
    meta_file.write_text(json.dumps(record))
    with pytest.raises(CacheError, match=r"another grammar \(grammar_sha256 differs\)$"):
        TokenClasses.load(tmp_path, grammar=other, vocab=vocab)
