"""The classes' domains recorded by ``compress(..., domains=True)`` from its own search.

The oracle is the displacement enumerated explicitly (``DisplacementSearch.displacement`` on
a fresh search, one token at a time: no trie walk, no compaction, no union of subtries): the
recorded automaton must read, for each class, exactly the popped sequences of its
representative, and the roots must survive the search's compactions.  The native tables
built from recorded domains must equal, array for array, those built by a search of the
representatives, and the native engine must use them (no second search).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import _data
import numpy as np
import pytest
from _counted import checks_at_least
from _native_helpers import accepted_words, compressed_or_rejected, sample_vocab, small_vocab
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench.domains_bench import same_tables
from formalgram import EmptyLanguageError, Grammar
from formalgram.testing import grammars
from formalgram_cfgzip import Compressor, TokenClasses, compress, engines
from formalgram_cfgzip.classes import DOMAINS_SUBDIR
from formalgram_cfgzip.engines.native import NativeCompiled, build_tables
from formalgram_cfgzip.errors import CacheError, ClassesInvariantError
from formalgram_cfgzip.pipeline import searched_gnf
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.domains import ClassDomains
from formalgram_cfgzip.search.driver import token_table, token_trie, walk_trie

pytestmark = pytest.mark.filterwarnings("ignore:grammar has nonterminals that derive no string")
ALPHABET = b"abc"
token_lists = st.lists(
    st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=4).map(bytes),
    min_size=1,
    max_size=10,
    unique=True,
)


def explicit_domain(gnf: Grammar, data: bytes) -> set[tuple[int, ...]]:
    """The popped sequences of ``data``'s displacement, enumerated on a fresh search."""
    search = DisplacementSearch(gnf)
    return {s_in for s_in, _ in search.displacement(search.run(data))}


@checks_at_least(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4, alphabet=ALPHABET), token_lists)
def test_recorded_domains_are_the_popped_sequences(g: Grammar, tokens: list[bytes]) -> None:
    vocab = small_vocab(tokens)
    plain = compressed_or_rejected(g, vocab)
    classes = compress(g, vocab, progress=False, domains=True)
    # recording the domains changes nothing about the classes
    assert np.array_equal(classes.token_class, plain.token_class)
    assert np.array_equal(classes.representatives, plain.representatives)
    assert plain.domains is None and classes.domains is not None
    gnf = searched_gnf(g, specialized=bool(classes.stats["specialized"]))
    auto = classes.domains.automaton
    for k, rep in enumerate(classes.representatives.tolist()):
        if k in (classes.stop_class, classes.invalid_class):
            assert accepted_words(auto, k) == set() and int(classes.domains.group[k]) == -1
            continue
        data = vocab.tokens[rep]
        assert data is not None
        assert accepted_words(auto, k) == explicit_domain(gnf, data)
    # classes with equal groups have equal domains, and conversely
    for j in range(classes.num_classes):
        for k in range(classes.num_classes):
            gj, gk = int(classes.domains.group[j]), int(classes.domains.group[k])
            if gj >= 0 and gk >= 0:
                assert (gj == gk) == (accepted_words(auto, j) == accepted_words(auto, k))


@checks_at_least(80)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4, alphabet=ALPHABET), token_lists, st.sampled_from([0, 3, 50]))
def test_domain_roots_survive_compaction(g: Grammar, tokens: list[bytes], reset_cells: int) -> None:
    """Compacting the search tables after every token depth keeps each code's root exact."""
    vocab = small_vocab(tokens)
    try:
        gnf = searched_gnf(g, specialized=False)
    except EmptyLanguageError:
        assume(False)
        return
    toks = token_table(vocab)
    search = DisplacementSearch(gnf)
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    roots: list[int] = []
    codes, _ = walk_trie(
        search, token_trie(toks), class_of, int(toks.ids.size), False, reset_cells, False, roots
    )
    assert len(roots) == (int(codes.max()) + 1 if codes.size and int(codes.max()) >= 0 else 0)
    for i, tid in enumerate(toks.ids.tolist()):
        data = vocab.tokens[tid]
        assert data is not None
        want = explicit_domain(gnf, data)
        code = int(codes[i])
        if code < 0:
            assert want == set()
            continue
        # the root's strings are the reversed popped sequences
        got = {tuple(reversed(s)) for s in search.strings(roots[code])}
        assert got == want


@pytest.mark.parametrize("rel", ["llama_cpp/c.gbnf", "json_schemas/purchase_order.gbnf"])
def test_native_tables_from_recorded_domains_equal_searched_ones(rel: str) -> None:
    text = _data.grammar(rel).read_text(encoding="utf-8")
    vocab = sample_vocab(2500, seed=5)
    searched = build_tables(compress(text, vocab, progress=False), text)
    classes = compress(text, vocab, progress=False, domains=True)
    recorded = build_tables(classes, text)
    assert searched.stats["domains_from_classes"] == 0.0
    assert recorded.stats["domains_from_classes"] == 1.0
    assert same_tables(searched, recorded)
    # the engine's entry point takes them too (no tables given, no cache directory)
    compiled = engines.compile_grammar(classes, text, engine="native")
    assert isinstance(compiled, NativeCompiled)
    assert compiled.tables.stats["domains_from_classes"] == 1.0


def test_worker_processes_give_the_same_domains(monkeypatch: pytest.MonkeyPatch) -> None:
    """With workers the roots come from a search of the representatives: same automaton.

    The workers run the Python search, so the compiled build's kernel is turned off for them
    (it would search in this process whatever ``workers`` says)."""
    text = _data.grammar("llama_cpp/c.gbnf").read_text(encoding="utf-8")
    vocab = sample_vocab(3000, seed=7)
    one = compress(text, vocab, progress=False, domains=True)
    monkeypatch.setenv("FORMALGRAM_NO_CSEARCH", "1")
    two = compress(text, vocab, progress=False, domains=True, workers=2)
    assert two.stats["search_kernel"] == 0.0
    assert one.domains is not None and two.domains is not None
    assert np.array_equal(one.token_class, two.token_class)
    assert same_tables(build_tables(one, text), build_tables(two, text))


def test_domains_of_another_gnf_are_not_used() -> None:
    text = 'root ::= "(" root ")" | "x" | "[" root "]"'
    vocab = small_vocab([b"(", b")", b"x", b"[", b"]", b"((", b"x)"])
    classes = compress(text, vocab, progress=False, domains=True, specialize=True)
    other = searched_gnf(text, specialized=False)
    tables = build_tables(classes, text, gnf=other)
    assert tables.stats["domains_from_classes"] == 0.0
    assert build_tables(classes, text).stats["domains_from_classes"] == 1.0


def _broken(d: ClassDomains, **change: object) -> ClassDomains:
    auto = dataclasses.replace(d.automaton, **{k: v for k, v in change.items() if k != "group"})
    group = change.get("group", d.group)
    assert isinstance(group, np.ndarray)
    return ClassDomains(auto, group, d.num_symbols, d.gnf_sha256)


def test_inconsistent_domains_are_refused() -> None:
    text = 'root ::= "(" root ")" | "x"'
    vocab = small_vocab([b"(", b")", b"x", b"(("])
    classes = compress(text, vocab, progress=False, domains=True)
    d = classes.domains
    assert d is not None
    n = classes.num_classes
    bad_class = d.automaton.set_class.copy()
    bad_class[0] = n
    bad_sym = d.automaton.edge_sym.copy()
    bad_sym[-1] = d.num_symbols  # the last edge of its state: still sorted
    group_stop = d.group.copy()
    group_stop[classes.stop_class] = 0
    cases: list[tuple[ClassDomains, str]] = [
        (_broken(d, set_class=bad_class), "set class out of range"),
        (_broken(d, edge_sym=bad_sym), "domain edge symbol out of range"),
        (_broken(d, group=d.group[:-1]), "domain_group has the wrong shape"),
        (_broken(d, group=group_stop), "to the stop or invalid class"),
        (_broken(d, out=d.automaton.out.astype(np.int64)), "not 1-D int32"),
    ]
    for broken, why in cases:
        with pytest.raises(ClassesInvariantError, match=why):
            dataclasses.replace(classes, domains=broken)
    # an ill-typed field is refused by the compiled build at the call (TypeError), by the
    # pure-Python one in validate()
    with pytest.raises(
        (ClassesInvariantError, TypeError), match=r"domains must be ClassDomains|ClassDomains or None"
    ):
        TokenClasses(
            classes.token_class,
            classes.representatives,
            classes.invalid_class,
            classes.stop_class,
            vocab,
            classes.grammar_sha256,
            domains="nope",  # type: ignore[arg-type]
        )


def test_compressor_records_domains_and_the_engine_keeps_its_tables(tmp_path: Path) -> None:
    text = 'root ::= "(" root ")" | "x"'
    vocab = small_vocab([b"(", b")", b"x", b"(("])
    first = Compressor(vocab, cache_dir=tmp_path, domains=True)
    classes = first.compress(text)
    assert classes.domains is not None and classes.cache_dir
    compiled = engines.compile_grammar(classes, text, engine="native")
    assert isinstance(compiled, NativeCompiled)
    assert compiled.tables.stats["domains_from_classes"] == 1.0
    # a later process finds the classes, their domains and the tables beside them
    again = Compressor(vocab, cache_dir=tmp_path, domains=True).compress(text)
    assert again.domains is not None and again.domains.gnf is None
    loaded = engines.compile_grammar(again, text, engine="native")
    assert isinstance(loaded, NativeCompiled)
    assert same_tables(loaded.tables, compiled.tables)


def test_saved_domains_are_loaded_checked_and_used(tmp_path: Path) -> None:
    text = _data.grammar("llama_cpp/c.gbnf").read_text(encoding="utf-8")
    vocab = sample_vocab(1500, seed=11)
    classes = compress(text, vocab, progress=False, domains=True)
    assert classes.domains is not None
    where = tmp_path / "classes"
    classes.save(where)
    loaded = TokenClasses.load(where, grammar=text, vocab=vocab)
    assert loaded.domains is not None and loaded.domains.gnf is None
    for f in ("edge_start", "edge_sym", "edge_to", "out", "set_start", "set_class"):
        assert np.array_equal(getattr(loaded.domains.automaton, f), getattr(classes.domains.automaton, f))
    # the GNF is converted again and recognised by its digest: no search
    tables = build_tables(loaded, text)
    assert tables.stats["domains_from_classes"] == 1.0
    assert same_tables(tables, build_tables(compress(text, vocab, progress=False), text))
    # saving classes without domains over them removes the stale ones
    plain = compress(text, vocab, progress=False)
    plain.save(where)
    assert not (where / DOMAINS_SUBDIR).exists()
    assert TokenClasses.load(where, grammar=text, vocab=vocab).domains is None


def test_corrupted_or_foreign_domains_are_refused(tmp_path: Path) -> None:
    text = 'root ::= "(" root ")" | "x" | "[" root "]"'
    other_text = 'root ::= "(" root ")" | "x"'
    vocab = small_vocab([b"(", b")", b"x", b"[", b"]", b"((", b"x)"])
    classes = compress(text, vocab, progress=False, domains=True)
    where = tmp_path / "a"
    classes.save(where, key=b"k" * 16)
    assert TokenClasses.load(where, grammar=text, vocab=vocab, key=b"k" * 16).domains is not None
    # another key: refused (the classes' own record fails first or the domains' does)
    with pytest.raises(CacheError, match="HMAC"):
        TokenClasses.load(where, grammar=text, vocab=vocab, key=b"other key 16 bytes")
    # one flipped byte in the domains' arrays
    classes.save(where)
    npz = where / DOMAINS_SUBDIR / "arrays.npz"
    raw = bytearray(npz.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    npz.write_bytes(bytes(raw))
    with pytest.raises(CacheError):
        TokenClasses.load(where, grammar=text, vocab=vocab)
    # the domains of other classes put beside these classes
    other = compress(other_text, vocab, progress=False, domains=True)
    elsewhere = tmp_path / "b"
    other.save(elsewhere)
    classes.save(where)
    shutil.rmtree(where / DOMAINS_SUBDIR)
    shutil.copytree(elsewhere / DOMAINS_SUBDIR, where / DOMAINS_SUBDIR)
    with pytest.raises(CacheError, match="other classes"):
        TokenClasses.load(where, grammar=text, vocab=vocab)
    # not a directory of domains at all
    shutil.rmtree(where / DOMAINS_SUBDIR)
    (where / DOMAINS_SUBDIR).write_text("junk")
    with pytest.raises(CacheError):
        TokenClasses.load(where, grammar=text, vocab=vocab)
