"""The displacement search's C kernel (``formalgram_cfgzip/search/_csearch.c``).

Two oracles: the Earley recognizer (:func:`check_classes_with_earley`: tokens of one class
are interchangeable, invalid tokens are refused) and the Python search
(:class:`~formalgram_cfgzip.search.displacement.DisplacementSearch`, a separate
implementation of the same sets), whose partition, steps and work the kernel must reproduce
exactly.  Also the budgets, the hand-over to the Python search, and bad input to the kernel.
Skipped in the pure-Python build; failed in a compiled build without the kernel
(``tests/_build.py``).
"""

from __future__ import annotations

import itertools
import os

import _data
import numpy as np
import numpy.typing as npt
import pytest
from _blowup_grammars import deep_merge_grammar
from _build import kernel_module
from _class_oracle import check_classes_with_earley
from _counted import checks_at_least
from _data import grammar
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from formalgram import EmptyLanguageError, FormalgramError, Grammar, GrammarTooLarge, is_prefix, parse_gbnf
from formalgram.testing import grammars
from formalgram.transforms.gnf import to_gnf
from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram.transforms.useless import remove_useless
from formalgram_cfgzip import Vocabulary, compress
from formalgram_cfgzip.search.displacement import DisplacementSearch
from formalgram_cfgzip.search.driver import (
    SequenceTrie,
    pick_specialization,
    token_table,
    token_trie,
    walk_trie,
)
from formalgram_cfgzip.search.native import NativeSearch, c_module, new_search

MODULE = kernel_module("search")
pytestmark = pytest.mark.ckernel("search")

ALPHABET = b"abc"


def _partition(codes: npt.NDArray[np.int64]) -> list[int]:
    """Codes renumbered by first appearance (-1 kept): equal lists <=> equal partitions."""
    first: dict[int, int] = {}
    return [-1 if c < 0 else first.setdefault(c, len(first)) for c in codes.tolist()]


def _walk(search: DisplacementSearch | NativeSearch, vocab: Vocabulary, cells: int = 1 << 40) -> list[int]:
    toks = token_table(vocab)
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    codes, _ = walk_trie(search, token_trie(toks), class_of, int(toks.ids.size), False, cells, False)
    return _partition(codes)


def _both(gnf: Grammar, vocab: Vocabulary) -> tuple[NativeSearch, DisplacementSearch, list[int], list[int]]:
    native = NativeSearch(gnf, MODULE)
    python = DisplacementSearch(gnf)
    return native, python, _walk(native, vocab), _walk(python, vocab)


def _strings(max_len: int) -> list[bytes]:
    return [bytes(p) for n in range(max_len + 1) for p in itertools.product(ALPHABET, repeat=n)]


vocabularies = st.lists(
    st.binary(min_size=1, max_size=4).map(lambda b: bytes(ALPHABET[x % 3] for x in b)),
    min_size=1,
    max_size=20,
    unique=True,
)


@checks_at_least(160)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=grammars(alphabet=ALPHABET), tokens=vocabularies, special=st.booleans())
def test_kernel_matches_earley_and_the_python_search(g: Grammar, tokens: list[bytes], special: bool) -> None:
    """Random grammars and vocabularies: the kernel's classes are exact for Earley, and are the
    Python search's classes, found with the same steps and work."""
    try:
        gnf = to_gnf(remove_useless(g))
    except EmptyLanguageError:
        assume(False)
        return
    if special:
        gnf = specialize_terminal_symbols(gnf)
    vocab = Vocabulary(tokens)
    native, python, got, want = _both(gnf, vocab)
    assert got == want and _walk(NativeSearch(gnf, MODULE, dense_below=0), vocab) == want
    assert (native.expansions, native.work) == (python.expansions, python.work)
    contexts = [w for w in _strings(3) if is_prefix(g, w)]
    check_classes_with_earley(g, tokens, np.asarray(got), -1, contexts, _strings(2))


REAL = [
    "llama_cpp/json.gbnf",
    "llama_cpp/arithmetic.gbnf",
    "llama_cpp/c.gbnf",
    "json_schemas/invoice.gbnf",
    "json_schemas/calendar_event.gbnf",
]


def _byte_vocabulary(text: str) -> Vocabulary:
    """Every substring of up to 4 bytes of a grammar's own text, and every single byte."""
    data = text.encode()
    subs = {data[i:j] for i in range(len(data)) for j in range(i + 1, min(i + 4, len(data)) + 1)}
    return Vocabulary(sorted(subs | {bytes([b]) for b in range(256)}))


@pytest.mark.parametrize("rel", REAL)
def test_real_grammars_same_partition_as_the_python_search(rel: str) -> None:
    """Real grammars (plain and specialised GNF), a vocabulary of their texts' substrings; the
    kernel with its bit sets of what may lie below each symbol and with member lists alone."""
    text = grammar(rel).read_text()
    gnf = to_gnf(remove_useless(parse_gbnf(text)))
    vocab = _byte_vocabulary(text)
    for form in (gnf, specialize_terminal_symbols(gnf)):
        native, python, got, want = _both(form, vocab)
        assert got == want and max(got) > 10, rel
        assert (native.expansions, native.work) == (python.expansions, python.work)
        lists = NativeSearch(form, MODULE, dense_below=0)
        assert _walk(lists, vocab) == want and (lists.expansions, lists.work) == (
            python.expansions,
            python.work,
        )


def test_compress_uses_the_kernel_and_earley_agrees() -> None:
    """``compress`` searches with the kernel (its steps are the kernel's) and the classes are exact."""
    g = parse_gbnf(grammar("llama_cpp/arithmetic.gbnf").read_text())
    toks = sorted({bytes(p) for n in (1, 2, 3) for p in itertools.product(b"(1+)x= \n", repeat=n)})
    vocab = Vocabulary(toks)
    tc = compress(g, vocab, progress=False)
    os.environ["FORMALGRAM_NO_CSEARCH"] = "1"
    try:
        assert isinstance(new_search(to_gnf(remove_useless(g))), DisplacementSearch)
        reference = compress(g, vocab, progress=False)
    finally:
        del os.environ["FORMALGRAM_NO_CSEARCH"]
    assert np.array_equal(tc.token_class, reference.token_class)
    assert (
        tc.stats["expansions"] == reference.stats["expansions"]
        and tc.stats["work"] == reference.stats["work"]
    )
    contexts = [b"", b"(", b"1+", b"((1", b"x=1\n"]
    compared, refused = check_classes_with_earley(
        g, toks, tc.token_class, tc.invalid_class, contexts, (b"", b")", b"1", b"\n"), per_class=3
    )
    assert compared > 100 and refused > 0, (compared, refused)


def test_deep_unions_and_the_hand_over_when_too_deep() -> None:
    """Merges 300 levels deep run in the kernel; with a nesting bound of 50 the walk is handed
    to the Python search, with the same classes (and Earley agrees on them)."""
    from formalgram import accepts

    g = deep_merge_grammar()
    k = 300
    deep, deeper = b"s" + b"a" * k + b"c", b"s" + b"a" * (k + 1) + b"c"
    vocab = Vocabulary([deep, deeper, b"p", b"q", b"c", b"a", b"z"])
    gnf = to_gnf(g)
    roomy = NativeSearch(gnf, MODULE)
    shallow = NativeSearch(gnf, MODULE, max_depth=50)
    want = _walk(DisplacementSearch(gnf), vocab)
    assert _walk(roomy, vocab) == want and roomy._fallback is None
    assert _walk(shallow, vocab) == want and shallow._fallback is not None
    assert want[0] != want[1] and want[6] == -1
    assert accepts(g, b"x" + deep + b"c" + b"p" * k) and not accepts(g, b"x" + deeper + b"c" + b"p" * k)


def test_outgrown_tables_hand_over_to_the_python_search() -> None:
    """A cell budget of a few hundred (walk_trie gives the kernel NATIVE_CELLS times the Python
    search's), or a memory budget of 64 KiB: the kernel gives up, the Python search compacts
    and finds the same classes."""
    text = grammar("llama_cpp/json.gbnf").read_text()
    gnf = to_gnf(remove_useless(parse_gbnf(text)))
    vocab = _byte_vocabulary(text)
    want = _walk(DisplacementSearch(gnf), vocab)
    small = NativeSearch(gnf, MODULE)
    assert _walk(small, vocab, cells=20) == want
    assert small._fallback is not None and small.expansions > small._fallback.expansions > 0
    assert small.answered() is small._fallback
    tight = NativeSearch(gnf, MODULE, memory_budget=64 << 10)
    assert _walk(tight, vocab) == want and tight.answered() is tight._fallback
    roomy = NativeSearch(gnf, MODULE, memory_budget=64 << 20)
    assert _walk(roomy, vocab) == want and roomy.answered() is roomy and roomy._fallback is None
    unbounded = NativeSearch(gnf, MODULE)  # a cell budget past int64 once multiplied: no limit
    assert _walk(unbounded, vocab, cells=1 << 62) == want and unbounded._fallback is None


def test_budgets_raise_grammar_too_large() -> None:
    """``max_states`` and ``max_work`` stop the kernel's walk with GrammarTooLarge."""
    g = parse_gbnf('root ::= "(" root ")" | "[" root "]" | "x" | "(" "x" ")" root')
    gnf = to_gnf(g)
    vocab = Vocabulary([b"))))", b"]])", b"x", b"(("])
    with pytest.raises(GrammarTooLarge, match="stack tops"):
        _walk(NativeSearch(gnf, MODULE, max_states=1), vocab)
    with pytest.raises(GrammarTooLarge, match="units of work"):
        _walk(NativeSearch(gnf, MODULE, max_work=50), vocab)
    roomy = NativeSearch(gnf, MODULE)
    assert _walk(roomy, vocab) == _walk(DisplacementSearch(gnf), vocab)


def test_specialisation_trial_chooses_alike() -> None:
    """The bounded trial's choice and work are the same with the kernel as with Python."""
    import random

    rng = random.Random(7)
    words = sorted({"".join(rng.choice("abcdefghij") for _ in range(10)) for _ in range(400)})
    g = parse_gbnf("root ::= (" + " | ".join(f'"{w}"' for w in words) + ') ("," root)?')
    plain = to_gnf(g)
    special = specialize_terminal_symbols(plain)
    toks = sorted(
        {w.encode()[i:j] for w in words[:60] for i in range(10) for j in range(i + 1, min(i + 4, 10) + 1)}
    )
    table = token_table(Vocabulary([*toks, b",", b"zz"]))
    for factor in (0, 3, 10**6):
        choices = [
            pick_specialization(plain, special, table, 200_000, None, factor, 1, native=native)
            for native in (False, True)
        ]
        (g0, s0), (g1, s1) = choices
        assert g0 is g1 and (s0.expansions, s0.work) == (s1.expansions, s1.work), factor
        assert isinstance(s1, NativeSearch)


def _trie(levels: list[tuple[list[int], list[int], list[int], list[int]]]) -> SequenceTrie:
    return SequenceTrie(
        tuple(np.asarray(p, dtype=np.int64) for p, _, _, _ in levels),
        tuple(np.asarray(lab, dtype=np.uint8) for _, lab, _, _ in levels),
        tuple(np.asarray(e, dtype=np.int64) for _, _, e, _ in levels),
        tuple(np.asarray(n, dtype=np.int64) for _, _, _, n in levels),
        sum(len(p) for p, _, _, _ in levels),
    )


def test_bad_input_is_refused_with_clear_errors() -> None:
    """Out-of-range indices, ragged levels and bad tables raise ValueError or TypeError, never crash."""
    gnf = to_gnf(parse_gbnf('root ::= "(" root ")" | "x"'))
    search = NativeSearch(gnf, MODULE)
    class_of = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)
    good = [([0, 0], [ord("("), ord("x")], [0, 1], [0, 1])]
    codes = _run(search, _trie(good), class_of)
    assert codes is not None and _partition(codes) == [0, 1]
    bad_cases = [
        ([([1], [ord("x")], [0], [0])], "parent or label"),  # parent 1 at depth 0
        ([([0], [ord("x")], [0], [1])], "ending node"),  # ending node 1 of a 1-node level
        ([([0], [ord("x")], [5], [0])], "ending node or position"),  # position past the end
        ([([0, 0], [ord("x")], [0], [0])], "differ in length"),
    ]
    for levels, message in bad_cases:
        with pytest.raises(ValueError, match=message):
            _run(search, _trie(levels), class_of)
    with pytest.raises(ValueError, match="class out of range"):
        _run(search, _trie(good), np.full(256, 200, dtype=np.uint8))
    with pytest.raises(ValueError, match="out of range"):
        MODULE.Search(2, 1, {(0, 5): ((),)}, [0, 0], 9, -1)
    with pytest.raises(ValueError, match="tail symbol"):
        MODULE.Search(2, 1, {(0, 0): ((7,),)}, [0, 0], 9, -1)
    with pytest.raises(TypeError):
        MODULE.Search(2, 1, {(0, 0): [1]}, [0, 0], 9, -1)
    with pytest.raises(TypeError, match="one int per symbol"):
        MODULE.Search(2, 1, {}, [0], 9, -1)
    for bad in (-1, 4, 1 << 70):  # a negative set, a set naming symbol 2 of 2, a huge one
        with pytest.raises(ValueError, match="out of range"):
            MODULE.Search(2, 1, {}, [0, bad], 9, -1)


def _run(
    search: NativeSearch, trie: SequenceTrie, class_of: npt.NDArray[np.uint8]
) -> npt.NDArray[np.int64] | None:
    """The kernel's walk over ``trie`` (two sequences)."""
    levels = (list(trie.parents), list(trie.labels), list(trie.end_positions), list(trie.end_nodes))
    return search.walk(*levels, class_of, 2, 1 << 40)


def test_kernel_can_be_turned_off() -> None:
    """``FORMALGRAM_NO_CSEARCH=1`` and ``native=False`` give the Python search."""
    gnf = to_gnf(parse_gbnf('root ::= "a"+'))
    assert isinstance(new_search(gnf), NativeSearch)
    assert isinstance(new_search(gnf, native=False), DisplacementSearch)
    os.environ["FORMALGRAM_NO_CSEARCH"] = "1"
    try:
        assert c_module() is None and isinstance(new_search(gnf), DisplacementSearch)
    finally:
        del os.environ["FORMALGRAM_NO_CSEARCH"]


@pytest.mark.parametrize("rel", ["json_schemas/invoice.gbnf", "llama_cpp/arithmetic.gbnf"])
def test_domains_recorded_by_the_kernel_give_the_native_tables(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compress(..., domains=True)`` records the domains from the kernel's tables, and
    ``build_tables`` of classes without domains searches their representatives with the
    kernel; the native engine's tables from either equal those from the Python search."""
    from bench.domains_bench import same_tables
    from formalgram_cfgzip.engines.native.tables import build_tables

    text = grammar(rel).read_text()
    vocab = _byte_vocabulary(text)
    recorded = compress(text, vocab, progress=False, domains=True)
    assert recorded.domains is not None and recorded.stats["domain_states"] > 10
    assert recorded.stats["search_kernel"] == 1.0
    plain = compress(text, vocab, progress=False)
    assert np.array_equal(recorded.token_class, plain.token_class)
    by_kernel = build_tables(plain, text)
    monkeypatch.setenv("FORMALGRAM_NO_CSEARCH", "1")
    by_python = build_tables(plain, text)
    assert same_tables(build_tables(recorded, text), by_python)
    assert same_tables(by_kernel, by_python)


def test_domain_roots_by_the_kernel_name_the_python_searchs_sets() -> None:
    """``domain_roots`` with the kernel: equal roots exactly where the Python search's roots are
    equal, -1 for the same tokens (no text, or valid nowhere)."""
    from formalgram_cfgzip.search.domains import domain_roots

    text = grammar("llama_cpp/json.gbnf").read_text()
    gnf = to_gnf(remove_useless(parse_gbnf(text)))
    tokens: list[bytes | None] = [
        None,
        b"",
        b"{",
        b"[",
        b'{"a',
        b"1",
        b"12",
        b"}",
        b"]]",
        b"\x00",
        b'"x"',
        b"true",
    ]
    got = domain_roots(NativeSearch(gnf, MODULE), tokens)
    want = domain_roots(DisplacementSearch(gnf), tokens)
    assert [r < 0 for r in got] == [r < 0 for r in want] and got.count(-1) >= 3
    pairs = {}
    for a, b in zip(got, want, strict=True):
        assert pairs.setdefault(a, b) == b
    assert len(set(pairs.values())) == len(pairs)


@checks_at_least(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=grammars(alphabet=ALPHABET), tokens=vocabularies)
def test_kernel_domain_automaton_is_the_python_construction(g: Grammar, tokens: list[bytes]) -> None:
    """The kernel's domain automaton equals, array for array, the Python subset construction
    over the Python search's tables (states are numbered as they are found, edges by symbol,
    so the numbering depends on the sets only, not on either search's node ids)."""
    from formalgram_cfgzip.search.domains import domain_automaton, domain_roots

    try:
        gnf = to_gnf(remove_useless(g))
    except EmptyLanguageError:
        assume(False)
        return
    native, python = NativeSearch(gnf, MODULE), DisplacementSearch(gnf)
    texts: list[bytes | None] = [None, *tokens]
    got = domain_automaton(native, domain_roots(native, texts))
    want = domain_automaton(python, domain_roots(python, texts))
    for name in ("edge_start", "edge_sym", "edge_to", "out", "set_start", "set_class"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
        assert getattr(got, name).dtype == np.int32
    # the bounds: the same typed error as the Python construction's
    if got.num_states > 1:
        with pytest.raises(GrammarTooLarge, match="states"):
            domain_automaton(native, domain_roots(native, texts), max_states=got.num_states - 1)
    if got.num_edges > 1:
        with pytest.raises(GrammarTooLarge, match="edges"):
            domain_automaton(native, domain_roots(native, texts), max_edges=0)
    with pytest.raises(ValueError, match="not a node"):
        native.domain_arrays([1 << 30], 10, 10)


@pytest.mark.heavy
@pytest.mark.parametrize("rel", _data.sweep_files())
def test_kernel_classes_equal_the_python_search_heavy(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every grammar of the corpora (both when present), Llama-3: the kernel's classes and
    representatives are the Python search's (a grammar either refuses alike)."""
    text = _data.real_grammar(rel).read_text(encoding="utf-8")
    vocab = Vocabulary.builtin("llama3")
    outcomes = []
    for off in ("0", "1"):
        monkeypatch.setenv("FORMALGRAM_NO_CSEARCH", off)
        try:
            outcomes.append(compress(text, vocab, progress=False))
        except FormalgramError as e:
            outcomes.append(type(e).__name__)
    kernel, python = outcomes
    if isinstance(kernel, str) or isinstance(python, str):
        assert kernel == python, (kernel, python)
        return
    assert np.array_equal(kernel.token_class, python.token_class), rel
    assert np.array_equal(kernel.representatives, python.representatives), rel
    # the same steps, but where the Python search compacted its tables (it then steps some
    # sets again: SynCode SQL 57,779 against 44,977)
    assert kernel.stats["expansions"] <= python.stats["expansions"], rel
    assert (kernel.stats["search_kernel"], python.stats["search_kernel"]) in ((1.0, 0.0), (0.0, 0.0))
