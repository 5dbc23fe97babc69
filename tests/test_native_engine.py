"""The native mask engine against independent oracles (proof: proofs/native_engine.md).

* Masks: at every step of seeded walks, the native token mask equals ``{t : w·t ∈ Pref(L)}``
  computed by the Earley recognizer (``formalgram.is_prefix``: no GNF, no displacement) for
  *every* token, the stop token equals ``w ∈ L``, special tokens are never allowed; random
  grammars × random small vocabularies (Hypothesis) and real grammars with a Llama-3 sample.
* The graph-structured stack holds exactly the stacks of the explicit PDA simulation
  (``PDA.stacks_after``), for both kernels.
* The domain automaton accepts, for each class, exactly the popped sequences of the
  displacement enumerated explicitly (``DisplacementSearch.displacement``).
* The C kernel gives the same masks as the pure-Python one; protocol, rollback, caches and
  bad input.
"""

from __future__ import annotations

import functools
import gc
import random
import weakref
from pathlib import Path
from typing import Any, Literal, cast

import _data
import numpy as np
import pytest
from _build import PURE_PYTHON, c_param, expected_kernels, require_kernel
from _counted import checks_at_least, gave_up
from _engine_oracle import row_tokens
from _native_helpers import accepted_words, compressed_or_rejected, sample_vocab, small_vocab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formalgram
from formalgram import PDA, EarleyRecognizer, Grammar, accepts
from formalgram.errors import GrammarTooLarge
from formalgram.testing import grammars
from formalgram_cfgzip import TokenClasses, Vocabulary, compress, engines
from formalgram_cfgzip.engines.native import NativeTables, build_tables
from formalgram_cfgzip.engines.native.matcher import (
    NativeCompiled,
    NativeMatcher,
    StateLike,
    _c_tables,
)
from formalgram_cfgzip.errors import CacheError, ClassesMismatchError, EngineError, TokenIdError
from formalgram_cfgzip.pipeline import searched_gnf
from formalgram_cfgzip.search.displacement import DisplacementSearch

Kernel = Literal["python", "c"]
# parametrized tests: the C kernel's cases are skipped (with a reason) in the pure-Python build;
# tests that compare the kernels in one run use every kernel the build must have
KERNELS: list[Any] = ["python", c_param("native")]
BOTH = cast(list[Kernel], expected_kernels("python"))
# random grammars often have rules that derive nothing; compress() warns about XGrammar there
pytestmark = pytest.mark.filterwarnings("ignore:grammar has nonterminals that derive no string")
ALPHABET = b"abc"


# -- oracles ------------------------------------------------------------------------------


class VocabTrie:
    """The text tokens of a vocabulary as a byte trie (for the Earley oracle)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.ends: list[list[int]] = [[]]
        for i in vocab.text_ids():
            if i in vocab.stop_ids:
                continue
            data = vocab.tokens[i]
            assert data is not None
            node = 0
            for b in data:
                nxt = self.children[node].get(b)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][b] = nxt
                    self.children.append({})
                    self.ends.append([])
                node = nxt
            self.ends[node].append(i)


def earley_allowed(rec: EarleyRecognizer, trie: VocabTrie) -> set[int]:
    """Text tokens ``t`` with ``w·t ∈ Pref(L)``, ``w`` the bytes ``rec`` has read (Earley only)."""
    out: set[int] = set()
    todo = [(0, rec)]
    while todo:
        node, r = todo.pop()
        ok = r.allowed_bytes()
        for b, child in trie.children[node].items():
            if b in ok:
                r2 = r.copy()
                assert r2.feed(b)
                out.update(trie.ends[child])
                todo.append((child, r2))
    return out


def oracle_mask(rec: EarleyRecognizer, trie: VocabTrie, vocab: Vocabulary) -> set[int]:
    """The expected token mask: text tokens by Earley, stop tokens iff the text is complete."""
    out = earley_allowed(rec, trie)
    if rec.is_accepting():
        out |= set(vocab.stop_ids)
    return out


def checked_next_token(
    row: np.ndarray[Any, Any], rec: EarleyRecognizer, trie: VocabTrie, vocab: Vocabulary, rng: random.Random
) -> int | None:
    """Assert that the token row holds Earley's mask; then a random allowed text token, or
    ``None`` when none is allowed (the walk ends)."""
    want = oracle_mask(rec, trie, vocab)
    assert row_tokens(row, vocab.logit_width) == want
    text = sorted(want - set(vocab.stop_ids))
    return rng.choice(text) if text else None


def check_walk(
    g: Grammar,
    grammar: NativeCompiled,
    others: list[NativeCompiled],
    steps: int,
    rng: random.Random,
    trie: VocabTrie,
) -> int:
    """Walk ``steps`` tokens, checking every token at every step against Earley; returns steps checked.

    ``others`` (other kernels over the same tables) must give identical class masks.
    """
    vocab = grammar.vocab
    m = grammar.matcher()
    peers = [o.matcher() for o in others]
    rec = EarleyRecognizer(g)
    bm = grammar.allocate_token_bitmask()
    cm = grammar.allocate_class_bitmask()
    other_cm = grammar.allocate_class_bitmask()
    checked = 0
    for _ in range(steps):
        m.fill_next_token_bitmask(bm)
        got = row_tokens(bm[0], vocab.logit_width)
        want = oracle_mask(rec, trie, vocab)
        assert got == want, (
            f"step {checked}: extra {sorted(got - want)[:10]}, missing {sorted(want - got)[:10]}"
        )
        m.fill_next_class_bitmask(cm)
        for p in peers:
            p.fill_next_class_bitmask(other_cm)
            assert np.array_equal(cm, other_cm)
        checked += 1
        text = sorted(want - set(vocab.stop_ids))
        if not text:
            break
        # a refused token leaves the state unchanged
        refused = [i for i in range(vocab.logit_width) if i not in want]
        if refused:
            bad = rng.choice(refused)
            assert not m.accept_token(bad)
            m.fill_next_token_bitmask(bm)
            assert row_tokens(bm[0], vocab.logit_width) == want
        tok = rng.choice(text)
        data = vocab.tokens[tok]
        assert data is not None
        assert m.accept_token(tok)
        for p in peers:
            assert p.accept_token(tok)
        assert rec.feed_bytes(data)
    return checked


# -- random grammars × random small vocabularies -----------------------------------------


token_lists = st.lists(
    st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3).map(bytes),
    min_size=1,
    max_size=8,
    unique=True,
)


@checks_at_least(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4, alphabet=ALPHABET), token_lists, st.integers(0, 2**32 - 1))
def test_mask_equals_earley_on_random_grammars(g: Grammar, tokens: list[bytes], seed: int) -> None:
    """proofs/native_engine.md, Theorem 1: every token at every step, against Earley."""
    vocab = small_vocab(tokens)
    classes = compressed_or_rejected(g, vocab)
    tables = build_tables(classes, g)
    grammars_ = [NativeCompiled(classes, tables, kernel=k) for k in BOTH]
    # peers that forget all but the last token (compacting every other step): same masks
    grammars_ += [NativeCompiled(classes, tables, kernel=k, max_rollback_tokens=1) for k in BOTH]
    check_walk(g, grammars_[0], grammars_[1:], 8, random.Random(seed), VocabTrie(vocab))


@checks_at_least(40)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4, max_rhs=6, alphabet=ALPHABET), token_lists, st.integers(0, 2**32 - 1))
def test_chain_summaries_keep_masks_exact_on_random_grammars(
    g: Grammar, tokens: list[bytes], seed: int
) -> None:
    """A C walk takes a top over a chain of nodes pushed together through the chain's summary
    (made once per push-trie node with the tables): every token mask equals Earley's and every
    class mask the pure-Python kernel's, which walks every pair.  Examples whose walks took no
    summary are not counted."""
    require_kernel("native")
    vocab = small_vocab(tokens)
    classes = compressed_or_rejected(g, vocab)
    tables = build_tables(classes, g)
    c, py = NativeCompiled(classes, tables, kernel="c"), NativeCompiled(classes, tables, kernel="python")
    rng, trie = random.Random(seed), VocabTrie(vocab)
    m, p, rec = c.matcher(), py.matcher(), EarleyRecognizer(g)
    bm, cm, pm = c.allocate_token_bitmask(), c.allocate_class_bitmask(), py.allocate_class_bitmask()
    chained = 0
    for _ in range(10):
        m.fill_next_class_bitmask(cm)
        chained += m.info()["last_chained"]
        p.fill_next_class_bitmask(pm)
        assert np.array_equal(cm, pm)
        m.fill_next_token_bitmask(bm)
        tok = checked_next_token(bm[0], rec, trie, vocab, rng)
        if tok is None:
            break
        data = vocab.tokens[tok]
        assert data is not None
        assert m.accept_token(tok) and p.accept_token(tok) and rec.feed_bytes(data)
    if not chained:
        gave_up()


@checks_at_least(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4, alphabet=ALPHABET), st.lists(st.sampled_from(ALPHABET), max_size=7))
def test_gss_holds_exactly_the_pda_stacks(g: Grammar, letters: list[int]) -> None:
    """proofs/native_engine.md, Lemma 2: the GSS's stacks equal the explicit PDA simulation."""
    vocab = small_vocab([bytes([b]) for b in ALPHABET])
    classes = compressed_or_rejected(g, vocab)
    gnf = searched_gnf(g, specialized=bool(classes.stats["specialized"]))
    tables = build_tables(classes, g, gnf=gnf)
    pda = PDA.from_gnf(gnf)
    for kernel in BOTH:
        state = NativeCompiled(classes, tables, kernel=kernel).new_state()
        w = b""
        for b in letters:
            try:
                expected = pda.stacks_after(w + bytes([b]))
            except GrammarTooLarge:  # more stacks than the explicit simulation lists (an ambiguous
                break  # grammar): the prefix so far was compared, the GSS keeps them shared
            ok = state.accept_bytes(bytes([b]))
            assert ok == bool(expected)
            if not ok:
                break
            w += bytes([b])
            got = _stacks(state)
            assert got == {tuple(reversed(s)) for s in expected}
            assert state.stop_allowed() == accepts(g, w) == (() in got)


def _stacks(state: StateLike) -> set[tuple[int, ...]]:
    """Every stack (top first) of a kernel state, enumerated from its tops."""
    out: set[tuple[int, ...]] = set()
    todo: list[tuple[int, tuple[int, ...]]] = [(v, ()) for v in state.tops()]
    while todo:
        v, above = todo.pop()
        if v == 0:
            out.add(above)
            continue
        sym, parents = state.node(v)
        for u in parents:
            todo.append((u, (*above, sym)))
    return out


@checks_at_least(80)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(max_nonterminals=4, alphabet=ALPHABET), token_lists)
def test_domain_automaton_reads_exactly_the_popped_sequences(g: Grammar, tokens: list[bytes]) -> None:
    """proofs/native_engine.md, Lemma 3: class k's words are dom(k) of the explicit displacement."""
    vocab = small_vocab(tokens)
    classes = compressed_or_rejected(g, vocab)
    gnf = searched_gnf(g, specialized=bool(classes.stats["specialized"]))
    tables = build_tables(classes, g, gnf=gnf)
    search = DisplacementSearch(gnf)
    for k, rep in enumerate(classes.representatives.tolist()):
        words = accepted_words(tables.domains, k)
        if k in (classes.stop_class, classes.invalid_class):
            assert words == set()
            continue
        data = vocab.tokens[rep]
        assert data is not None
        dom = {s_in for s_in, _ in search.displacement(search.run(data))}
        assert words == dom


# -- real grammars --------------------------------------------------------------------------


# in the repository (tests/data/grammars): the default run needs nothing else
REAL_FAST = ["llama_cpp/c.gbnf", "json_schemas/purchase_order.gbnf"]
REAL_HEAVY = [
    "derived/json_mode_eval_xgrammar/JME_0.gbnf",  # the shared corpus only (skipped without it)
    "derived/json_mode_eval_xgrammar/JME_32.gbnf",
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
]


def _real_walks(rel: str, n_tokens: int, walks: int, steps: int) -> int:
    text = _data.real_grammar(rel).read_text(encoding="utf-8")
    vocab = sample_vocab(n_tokens, seed=3)
    classes = compress(text, vocab, progress=False)
    tables = build_tables(classes, text)
    # the first through the engines' entry point, the other kernels on the same tables
    first = engines.compile_grammar(classes, text, engine="native", tables=tables, kernel=BOTH[0])
    assert isinstance(first, NativeCompiled)
    grammars_ = [first] + [NativeCompiled(classes, tables, kernel=k) for k in BOTH[1:]]
    from formalgram.syntax.gbnf import parse_gbnf

    g = parse_gbnf(text)
    trie = VocabTrie(vocab)
    total = 0
    for seed in range(walks):
        total += check_walk(g, grammars_[0], grammars_[1:], steps, random.Random(seed), trie)
    return total


@pytest.mark.parametrize("rel", REAL_FAST)
def test_real_grammar_walks_match_earley(rel: str) -> None:
    """proofs/native_engine.md, Theorem 1 on real grammars: every token of a 2,000-token Llama-3 sample."""
    assert _real_walks(rel, 2000, walks=3, steps=25) > 0


@pytest.mark.heavy
@pytest.mark.parametrize("rel", REAL_FAST + REAL_HEAVY)
def test_real_grammar_walks_match_earley_heavy(rel: str) -> None:
    """proofs/native_engine.md, Theorem 1: as above with a 20,000-token sample and longer walks."""
    assert _real_walks(rel, 20_000, walks=4, steps=60) > 0


# -- row updates -----------------------------------------------------------------------------


@functools.cache
def _real_tables(rel: str) -> tuple[TokenClasses, NativeTables, str, Grammar]:
    """The real grammar ``rel`` over 20,000 Llama-3 tokens: its classes, native tables, text
    and parsed grammar (for the Earley recognizer)."""
    from formalgram.syntax.gbnf import parse_gbnf

    text = _data.real_grammar(rel).read_text(encoding="utf-8")
    classes = compress(text, sample_vocab(20_000, seed=4), progress=False)
    return classes, build_tables(classes, text), text, parse_gbnf(text)


@functools.cache
def _update_case() -> tuple[NativeCompiled, Grammar, VocabTrie]:
    """A real grammar over 20,000 Llama-3 tokens: enough classes and tokens for every kind of
    row update (nothing written, classes flipped in place, a whole row)."""
    classes, tables, text, g = _real_tables(REAL_FAST[1])
    grammar = engines.compile_grammar(classes, text, engine="native", tables=tables)
    assert isinstance(grammar, NativeCompiled)
    return grammar, g, VocabTrie(classes.vocab)


@checks_at_least(15)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_row_updates_equal_the_earley_masks(seed: int) -> None:
    """proofs/native_engine.md, Remark 3: a row kept by one matcher and brought up to date at
    every step holds the Earley mask, through rollbacks, resets, stop tokens, refused tokens
    and writes of that row by other paths (a batch fill, another array, another row), and
    class fills in between."""
    require_kernel("native")
    require_kernel("expand")
    grammar, g, trie = _update_case()
    vocab = grammar.vocab
    kernel = grammar.expander.c_kernel if grammar.expander is not None else None
    assert kernel is not None
    before = kernel.cache_info()["unchanged"]
    rng = random.Random(seed)
    m = grammar.matcher()
    rows = grammar.allocate_token_bitmask(3)
    other = grammar.allocate_token_bitmask(1)
    classes = grammar.allocate_class_bitmask(1)
    rec = EarleyRecognizer(g)
    history: list[EarleyRecognizer] = []
    for _ in range(40):
        r = rng.random()
        if r < 0.08 and history:  # roll back 1-3 tokens
            k = rng.randint(1, min(3, len(history)))
            m.rollback(k)
            rec = history[-k]
            del history[-k:]
        elif r < 0.1:
            m.reset()
            rec, history = EarleyRecognizer(g), []
        elif r < 0.14:  # another path writes the kept row: the matcher must not patch it
            grammar.fill_next_token_bitmask_batch([m], rows, [0])
        elif r < 0.18:  # the kept row is left alone while the matcher writes elsewhere
            m.update_next_token_bitmask(rows, rng.randint(1, 2))
        elif r < 0.22:
            m.fill_next_token_bitmask(other)
        elif r < 0.24:  # another array object over the same memory
            m.update_next_token_bitmask(rows[:], 0)
        elif r < 0.3:  # a class fill between two updates (it renews the matcher's memo)
            m.fill_next_class_bitmask(classes)
        m.update_next_token_bitmask(rows, 0)
        want = oracle_mask(rec, trie, vocab) if not m.is_terminated() else set()
        assert row_tokens(rows[0], vocab.logit_width) == want
        text = sorted(want - set(vocab.stop_ids))
        if m.is_terminated():
            continue
        if not text or rng.random() < 0.03:
            if want & set(vocab.stop_ids):
                assert m.accept_token(min(vocab.stop_ids))
                history.append(rec)
            continue
        if rng.random() < 0.1:
            assert not m.accept_token(rng.choice([i for i in range(vocab.logit_width) if i not in want]))
        # long tokens first: steps inside strings, where the class mask repeats
        tok = max(rng.sample(text, min(4, len(text))), key=lambda i: len(vocab.tokens[i] or b""))
        assert m.accept_token(tok)
        history.append(rec.copy())
        data = vocab.tokens[tok]
        assert data is not None and rec.feed_bytes(data)
    kept = m._state.info().get("rows_kept", 0) + kernel.cache_info()["unchanged"] - before
    assert kept > 0  # the test exercised the path it checks


_MISUSE = [
    "int64",
    "1-D",
    "read-only",
    "index-out",
    "index-negative",
    "index-float",
    "numpy-index",
    "keyword",
]
_OTHER = ["fill", "class-fill", "batch", *_MISUSE]  # calls between two updates of the kept row


def _other_call(m: NativeMatcher, grammar: NativeCompiled, rows: Any, op: str) -> None:
    """One call of kind ``op`` that is not an update of row 0 of ``rows`` (a refused one raises
    its typed error)."""
    words = grammar.token_words
    if op == "fill":
        m.fill_next_token_bitmask(rows, 1)
    elif op == "class-fill":
        m.fill_next_class_bitmask(grammar.allocate_class_bitmask(1))
    elif op == "batch":
        grammar.fill_next_token_bitmask_batch([m], rows, [0])
    elif op == "int64":
        m.update_next_token_bitmask(np.zeros((1, words), dtype=np.int64), 0)
    elif op == "1-D":
        m.update_next_token_bitmask(rows[0], 0)  # a 1-D view of the kept row, written whole
    elif op == "read-only":
        ro = rows.copy()
        ro.flags.writeable = False
        m.update_next_token_bitmask(ro, 0)
    elif op == "index-out":
        m.update_next_token_bitmask(rows, 2)
    elif op == "index-negative":
        m.update_next_token_bitmask(rows, -1)
    elif op == "index-float":
        m.update_next_token_bitmask(rows, cast(Any, 0.0))
    elif op == "numpy-index":
        m.update_next_token_bitmask(rows, cast(Any, np.int64(0)))
    elif op == "keyword":
        m.update_next_token_bitmask(rows, index=0)


def _structural_token(grammar: NativeCompiled, probe: NativeMatcher, rng: random.Random) -> int | None:
    """A token ``probe`` allows, from a class drawn uniformly (structure, where masks change)."""
    vocab = grammar.vocab
    assert grammar.classes is not None
    row = grammar.allocate_token_bitmask(1)
    probe.fill_next_token_bitmask(row)
    by_class: dict[int, list[int]] = {}
    for i in sorted(row_tokens(row[0], vocab.logit_width) - set(vocab.stop_ids)):
        by_class.setdefault(int(grammar.classes.token_class[i]), []).append(i)
    return rng.choice(by_class[rng.choice(sorted(by_class))]) if by_class else None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["update", "accept", "rollback", *_OTHER]), min_size=3, max_size=30))
def test_row_updates_survive_any_mix_of_calls(ops: list[str]) -> None:
    """Remark 3 under misuse: refused calls (typed errors) and writes by other paths between
    updates never leave the kept row stale, and nothing crashes."""
    require_kernel("native")
    require_kernel("expand")
    grammar, _, _ = _update_case()
    m, probe = grammar.matcher(), grammar.matcher()  # probe: the same tokens, its own fills
    rows, want = grammar.allocate_token_bitmask(2), grammar.allocate_token_bitmask(1)
    rng = random.Random(len(ops))
    walk: list[int] = []
    for j, op in enumerate(ops):
        if op == "accept":
            tok = _structural_token(grammar, probe, rng)
            if tok is not None:
                assert m.accept_token(tok) and probe.accept_token(tok)
                walk.append(tok)
        elif op == "rollback":
            if walk:
                m.rollback(1)
                probe.rollback(1)
                walk.pop()
        elif op != "update":
            try:
                _other_call(m, grammar, rows, op)
            except (EngineError, TokenIdError):
                assert op in _MISUSE, op
        if op == "update" or j == len(ops) - 1:  # the row as the calls since the last check left it
            m.update_next_token_bitmask(rows, 0)
            probe.fill_next_token_bitmask(want)
            assert np.array_equal(rows[0], want[0]), (ops, j)


@pytest.mark.parametrize("op", _OTHER)
def test_a_row_written_by_another_call_is_not_patched(op: str) -> None:
    """Remark 3: after any other call (a write of the kept row by another path, a refused
    call, a class fill) the next update still leaves the mask there, step after step of a
    walk whose class masks change."""
    require_kernel("native")
    require_kernel("expand")
    grammar, _, _ = _update_case()
    changed = 0
    for seed in range(3):
        m, probe = grammar.matcher(), grammar.matcher()
        rows, want = grammar.allocate_token_bitmask(2), grammar.allocate_token_bitmask(1)
        rng = random.Random(seed)
        for _ in range(30):
            m.update_next_token_bitmask(rows, 0)
            before = rows[0].copy()
            tok = _structural_token(grammar, probe, rng)
            if tok is None:
                break
            assert m.accept_token(tok) and probe.accept_token(tok)
            try:
                _other_call(m, grammar, rows, op)
            except (EngineError, TokenIdError):
                assert op in _MISUSE, op
            m.update_next_token_bitmask(rows, 0)
            probe.fill_next_token_bitmask(want)
            assert np.array_equal(rows[0], want[0]), (op, seed)
            changed += not np.array_equal(before, want[0])
    assert changed > 10  # the walks' masks change: a stale row would show


def test_row_updates_take_every_path() -> None:
    """proofs/native_engine.md, Remark 3: the walks above leave rows unchanged, patch them in
    place and rewrite them, so each path is checked (not only the whole-row one)."""
    require_kernel("native")
    require_kernel("expand")
    grammar, g, trie = _update_case()
    kernel = grammar.expander.c_kernel if grammar.expander is not None else None
    assert kernel is not None
    vocab = grammar.vocab
    kernel.clear_cache()
    rng = random.Random(0)
    rows = grammar.allocate_token_bitmask(1)
    kept = 0
    for _ in range(6):
        m = grammar.matcher()
        rec = EarleyRecognizer(g)
        for _ in range(40):
            m.update_next_token_bitmask(rows, 0)
            tok = checked_next_token(rows[0], rec, trie, vocab, rng)
            if tok is None:
                break
            assert m.accept_token(tok)
            assert rec.feed_bytes(vocab.tokens[tok] or b"")
        kept += m._state.info()["rows_kept"]
    info = kernel.cache_info()
    # rows left alone (the memo's row, or an equal row), patched in place, and written whole
    assert kept > 0 and info["unchanged"] > 0 and info["in_place"] > 0, info
    assert info["misses"] + info["hits"] > 0, info


@pytest.mark.parametrize(
    ("limit", "chains"), [(0, False), (1, False), (4, False), (32, False), (4, True), (32, True)]
)
def test_class_walks_of_every_size_equal_the_python_kernel(limit: int, chains: bool) -> None:
    """The C class walk keeps the (node, state) pairs it has visited in a list while they are
    few (32 by default; ``small_walk`` lowers it) and in a hash table past that; the root
    state's edges are read from a table indexed by symbol, and a top over a chain of nodes
    pushed together takes the chain's summary (``chain_walks``).  With the list at 0, 1, 4 and
    32 pairs and no summaries, on random walks of a real grammar whose class walks fall on both
    sides of 32 (a JSON schema's dates and keys), and with summaries (which leave the same
    walks far shorter), every class mask equals the pure-Python kernel's (which keeps a set),
    and the Earley recognizer accepts every prefix.  (The C kernel's token masks are checked
    against Earley's by the tests above.)"""
    module = require_kernel("native")
    previous, previous_chains = module.small_walk(limit), module.chain_walks(chains)
    try:
        infos = _walks_against_the_python_kernel("json_schemas/calendar_event.gbnf", seed=3, walks=6)
    finally:
        module.small_walk(previous)
        module.chain_walks(previous_chains)
    pairs = [i["last_pairs"] for i in infos]
    chained = [i["last_chained"] for i in infos]
    if chains:  # the summaries stood for most of the pairs
        assert sum(chained) > sum(pairs), (sum(chained), sum(pairs))
    else:
        assert min(pairs) <= 32 < max(pairs) and not any(chained), (min(pairs), max(pairs))
    with pytest.raises(ValueError, match=r"0\.\.32"):
        module.small_walk(33)


def test_a_class_walk_past_the_visited_tables_first_size_is_exact() -> None:
    """Past the small list, a class walk keeps the (node, state) pairs it has visited in a hash
    table of 1,024 slots at first, which doubles, its pairs rehashed, whenever it is half full.
    After the first byte of a grammar of 1,500 alternatives the stack has 1,500 tops, so the
    first class walk doubles the table twice; the walks after the next tokens are short again.
    Every mask is the Earley recognizer's."""
    from formalgram.syntax.gbnf import parse_gbnf

    require_kernel("native")
    n = 1500
    text = "\n".join(
        ["root ::= " + " | ".join(f'"x" a{i}' for i in range(n))]
        + [f'a{i} ::= "k" ' + " ".join(f'"{d}"' for d in str(i)) + ' ";"' for i in range(n)]
    )
    vocab = small_vocab([b"x", b"k", *(str(d).encode() for d in range(10)), b";", b"k1", b"49", b"9;"])
    classes = compress(text, vocab, progress=False)
    grammar = engines.compile_grammar(classes, text, engine="native", kernel="c")
    g, trie = parse_gbnf(text), VocabTrie(vocab)
    ids = {data: i for i, data in enumerate(vocab.tokens) if data is not None}
    m = grammar.matcher()
    bm = grammar.allocate_token_bitmask()
    walked: list[int] = []
    text_so_far = b""
    for token in [b"x", b"k1", b"4", b"9;"]:
        assert m.accept_token(ids[token])
        text_so_far += token
        m.fill_next_token_bitmask(bm)
        walked.append(m.info()["last_pairs"])
        rec = EarleyRecognizer(g)
        assert rec.feed_bytes(text_so_far)
        assert row_tokens(bm[0], vocab.logit_width) == oracle_mask(rec, trie, vocab), text_so_far
    assert walked[0] >= n > 2 * 512 and max(walked[1:]) < 512, walked


@pytest.mark.parametrize("dense", [True, False])
def test_dense_edge_words_leave_the_class_masks_those_of_the_python_kernel(dense: bool) -> None:
    """A domain state with nine edges or more, its symbols rising, also has bit words over the
    symbols (``dense_edges``): a walk asks it for a parent's symbol with one word instead of a
    search of its edge list.  On random walks of c.gbnf, whose walks ask such states hundreds of
    times, every class mask equals the pure-Python kernel's (which keeps the edges in a dict)
    with the words and without, the Earley recognizer accepts every prefix, and the walks asked
    the words exactly when they are on."""
    module = require_kernel("native")
    previous = module.dense_edges(dense)
    try:
        infos = _walks_against_the_python_kernel(REAL_FAST[0], seed=5, walks=4)
    finally:
        module.dense_edges(previous)
    asked = [i["last_dense"] for i in infos]
    assert (sum(asked) > 0) == dense, sum(asked)


def _walks_against_the_python_kernel(rel: str, seed: int, walks: int) -> list[dict[str, int]]:
    """Random walks of up to 40 tokens on the real grammar ``rel``, each token drawn from the C
    kernel's token mask: at every step the C kernel's class mask equals the pure-Python kernel's
    and the Earley recognizer accepts the prefix.  Returns the C state's ``info()`` after each
    class fill."""
    c, py, g = _c_and_python_case(rel)
    vocab = c.vocab
    rng = random.Random(seed)
    infos: list[dict[str, int]] = []
    cm, pm = c.allocate_class_bitmask(), py.allocate_class_bitmask()
    bm = c.allocate_token_bitmask()
    for _ in range(walks):
        mc, mp = c.matcher(), py.matcher()
        rec = EarleyRecognizer(g)
        for _ in range(40):
            mc.fill_next_class_bitmask(cm)
            mp.fill_next_class_bitmask(pm)
            assert np.array_equal(cm, pm)
            infos.append(mc.info())
            mc.fill_next_token_bitmask(bm)
            text = sorted(row_tokens(bm[0], vocab.logit_width) - set(vocab.stop_ids))
            if not text:
                break
            tok = rng.choice(text)
            data = vocab.tokens[tok]
            assert data is not None
            assert mc.accept_token(tok) and mp.accept_token(tok)
            assert rec.feed_bytes(data)  # the walk stays in the language
    return infos


@functools.cache
def _c_and_python_case(rel: str) -> tuple[NativeCompiled, NativeCompiled, Grammar]:
    """The real grammar ``rel`` over 20,000 Llama-3 tokens, compiled for the C and Python kernels."""
    classes, tables, _, g = _real_tables(rel)
    return NativeCompiled(classes, tables, kernel="c"), NativeCompiled(classes, tables, kernel="python"), g


def test_the_kept_array_is_released() -> None:
    """A matcher keeps the last array it wrote alive (exported) until it writes another one,
    forgets it, or is dropped; nothing leaks."""
    require_kernel("native")
    require_kernel("expand")
    grammar, _, _ = _update_case()
    m = grammar.matcher()
    first = grammar.allocate_token_bitmask(1)
    ref = weakref.ref(first)
    m.fill_next_token_bitmask(first, 0)
    del first
    gc.collect()
    assert ref() is not None  # kept: the next update on it may patch it
    m.update_next_token_bitmask(grammar.allocate_token_bitmask(2), 1)
    gc.collect()
    assert ref() is None
    second = grammar.allocate_token_bitmask(1)
    ref = weakref.ref(second)
    m.update_next_token_bitmask(second, 0)
    del second
    with pytest.raises(EngineError):  # the shared path (which refuses it): the kept array is forgotten
        m.fill_next_token_bitmask(np.zeros((1, grammar.token_words), dtype=np.int64))
    gc.collect()
    assert ref() is None
    third = grammar.allocate_token_bitmask(1)
    ref = weakref.ref(third)
    m.update_next_token_bitmask(third, 0)
    del third, m
    gc.collect()
    assert ref() is None


# -- protocol, rollback, caches, bad input ---------------------------------------------------
JSON_LIST = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= "a" | "bb" | root'


@pytest.fixture(scope="module")
def json_list() -> tuple[TokenClasses, NativeTables, Vocabulary]:
    vocab = small_vocab([b"[", b"]", b",", b"a", b"b", b"bb", b"a,", b"],", b"[[", b"x"])
    classes = compress(JSON_LIST, vocab, progress=False)
    return classes, build_tables(classes, JSON_LIST), vocab


@pytest.mark.parametrize("kernel", KERNELS)
def test_rollback_reset_and_termination(
    kernel: Kernel, json_list: tuple[TokenClasses, NativeTables, Vocabulary]
) -> None:
    """proofs/native_engine.md, Corollary 2 and Theorem 1: rollback is exact; a stop token terminates."""
    classes, tables, vocab = json_list
    grammar = engines.compile_grammar(classes, JSON_LIST, engine="native", tables=tables, kernel=kernel)
    assert isinstance(grammar, NativeCompiled)
    m = grammar.matcher()
    bm = grammar.allocate_token_bitmask()
    masks = []
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    for t in [b"[", b"[[", b"a,", b"bb", b"],", b"a", b"]"]:
        m.fill_next_token_bitmask(bm)
        masks.append(bm.copy())
        assert m.accept_token(ids[t]), t
    m.fill_next_token_bitmask(bm)
    assert row_tokens(bm[0], vocab.logit_width) == {ids[b"]"], ids[b","]}  # after "[[[a,bb],a]"
    m.rollback(3)
    m.fill_next_token_bitmask(bm)
    assert np.array_equal(bm, masks[4])
    assert m.accept_token(ids[b"]"]) and m.accept_token(ids[b"]"]) and m.accept_token(ids[b"]"])
    stop = vocab.size - 1
    assert m.stop_allowed() and m.accept_token(stop) and m.is_terminated()
    m.fill_next_token_bitmask(bm)
    assert not bm.any()
    assert not m.accept_token(ids[b"a"]) and not m.accept_token(stop)
    m.rollback(1)
    assert not m.is_terminated() and m.stop_allowed()
    with pytest.raises(EngineError):
        m.rollback(100)
    m.reset()
    m.fill_next_token_bitmask(bm)
    assert np.array_equal(bm, masks[0])
    assert not m.accept_token(vocab.size - 2)  # the special token is never allowed


NESTED_FIELDS = 'root ::= item*\nitem ::= "(" root ")" | [ab]+ ","'
NESTED_TOKENS = [
    b"(",
    b")",
    b"))",
    b")))",
    b"))))",
    b")))))",
    b"))))))))",
    b"a",
    b"b",
    b"ab",
    b"a,",
    b",",
    b"((",
    b"(a",
    b"),",
    b"b)",
]


@functools.cache
def _nested_fields() -> tuple[NativeCompiled, Grammar, VocabTrie]:
    """Fields read byte by byte (a new node per byte on the same parents) inside parentheses
    nested to any depth (tops with the same symbols over other stacks): the C state's memo
    meets both kinds of change of its key."""
    from formalgram.syntax.gbnf import parse_gbnf

    vocab = small_vocab(NESTED_TOKENS)
    classes = compress(NESTED_FIELDS, vocab, progress=False)
    grammar = engines.compile_grammar(classes, NESTED_FIELDS, engine="native", kernel="c")
    assert isinstance(grammar, NativeCompiled)
    return grammar, parse_gbnf(NESTED_FIELDS), VocabTrie(vocab)


@checks_at_least(50)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 2**16), min_size=40, max_size=80))
def test_the_memo_of_the_last_fill_is_exact_through_rollbacks(choices: list[int]) -> None:
    """The C state answers a fill from its memo when the tops have the last fill's symbols and
    their parents are the same nodes or nodes with the same stacks below (one symbol, and
    parents again the same or such nodes, a few levels down); a rollback forgets the memo when it
    frees a node the key names.  (This grammar makes no copies among a node's parents: those are
    lark's csv's, ``test_native_fused.py``.)  Random walks with rollbacks, closing tokens long
    enough to read past the levels compared: every mask is the Earley oracle's.  Along the way, a
    rollback leaves the stack's nodes and parent entries as many as they were before the tokens
    it takes back (what those tokens made is freed)."""
    require_kernel("native")
    grammar, g, trie = _nested_fields()
    vocab = grammar.vocab
    m = grammar.matcher()
    bm = grammar.allocate_token_bitmask()
    text: list[bytes] = []
    sizes = [_stack_sizes(m)]
    for x in choices:
        rec = EarleyRecognizer(g)
        assert rec.feed_bytes(b"".join(text))
        m.fill_next_token_bitmask(bm)
        want = oracle_mask(rec, trie, vocab)
        assert row_tokens(bm[0], vocab.logit_width) == want, text
        options = sorted(want - set(vocab.stop_ids))
        if text and (x % 4 == 0 or not options):
            k = 1 + (x // 4) % min(3, len(text))
            m.rollback(k)
            del text[-k:]
            del sizes[-k:]
            assert _stack_sizes(m) == sizes[-1], text
        elif options:
            tok = options[x % len(options)]
            assert m.accept_token(tok)
            data = vocab.tokens[tok]
            assert data is not None
            text.append(data)
            sizes.append(_stack_sizes(m))


def _stack_sizes(m: NativeMatcher) -> tuple[int, int]:
    """The C state's nodes and parent entries in use."""
    info = m.info()
    return info["nodes"], info["parents"]


def test_a_rollback_forgets_a_memo_key_replaced_by_other_nodes() -> None:
    """When the memo answers a fill from nodes with the same stacks as its key's (not the same
    nodes), its key names the new nodes from then on.  A rollback that frees those nodes must
    forget the memo even though the nodes of the fill that made the row are still there: freed
    numbers are given to the next nodes made, whatever their stacks.  The walk below: a fill, a
    field and a second fill answered by the memo over the new copies, a rollback past them, and a
    fill that must be a walk of its own (the memo's count stays).  Every mask is the Earley
    recognizer's."""
    require_kernel("native")
    grammar, g, trie = _nested_fields()
    vocab = grammar.vocab
    ids = {data: i for i, data in enumerate(vocab.tokens) if data is not None}
    m = grammar.matcher()
    bm = grammar.allocate_token_bitmask()
    text: list[bytes] = []
    hits: list[int] = []
    steps: list[bytes | int | None] = [b"(", b"ab", None, b"a,", b"ab", None, b"a,", 3, None]
    for step in steps:
        if step is None:
            m.fill_next_token_bitmask(bm)
            rec = EarleyRecognizer(g)
            assert rec.feed_bytes(b"".join(text))
            assert row_tokens(bm[0], vocab.logit_width) == oracle_mask(rec, trie, vocab), text
            hits.append(m.info()["memo_hits"])
        elif isinstance(step, int):
            m.rollback(step)
            del text[-step:]
        else:
            assert m.accept_token(ids[step])
            text.append(step)
    assert hits == [0, 1, 1]


@pytest.mark.parametrize("kernel", KERNELS)
def test_batch_fills_equal_single_fills(
    kernel: Kernel, json_list: tuple[TokenClasses, NativeTables, Vocabulary]
) -> None:
    """proofs/native_engine.md, Theorem 1 (batches): batch fills equal one-by-one fills."""
    classes, tables, vocab = json_list
    grammar = NativeCompiled(classes, tables, kernel=kernel)
    rng = random.Random(5)
    ms: list[NativeMatcher] = [grammar.matcher() for _ in range(4)]
    batch = grammar.allocate_token_bitmask(4)
    one = grammar.allocate_token_bitmask()
    cbatch = grammar.allocate_class_bitmask(4)
    for _ in range(6):
        grammar.fill_next_token_bitmask_batch(ms, batch)
        grammar.fill_next_class_bitmask_batch(ms, cbatch)
        picks = []
        for i, m in enumerate(ms):
            m.fill_next_token_bitmask(one)
            assert np.array_equal(one[0], batch[i])
            assert np.array_equal(row_tokens(one[0], vocab.logit_width) != set(), cbatch[i].any())
            picks.append(rng.choice(sorted(row_tokens(one[0], vocab.logit_width)) or [0]))
        expected = [not m.is_terminated() for m in ms]
        assert grammar.accept_token_batch(ms, picks) == expected


def test_bad_input_errors(json_list: tuple[TokenClasses, NativeTables, Vocabulary]) -> None:
    """proofs/native_engine.md (bad input): typed errors, no crash."""
    classes, tables, _ = json_list
    grammar = NativeCompiled(classes, tables)
    m = grammar.matcher()
    for bad in (-1, 10**9, "3", 1.0, True):
        with pytest.raises(TokenIdError):
            m.accept_token(bad)  # type: ignore[arg-type]
    with pytest.raises(EngineError):
        m.fill_next_token_bitmask(np.zeros((1, 3), dtype=np.int64))
    with pytest.raises(EngineError):
        m.fill_next_token_bitmask(grammar.allocate_token_bitmask(), index=1)
    with pytest.raises(EngineError):
        m.fill_next_class_bitmask(np.zeros((1, grammar.engine_words + 1), dtype=np.int32))
    with pytest.raises(EngineError):
        grammar.fill_next_token_bitmask_batch([m, m], grammar.allocate_token_bitmask(1))
    with pytest.raises(EngineError):
        NativeCompiled(classes, tables, kernel="gpu")  # type: ignore[arg-type]
    with pytest.raises(ClassesMismatchError):
        build_tables(classes, 'root ::= "z"')


def test_tables_cache_roundtrip_and_corruption(
    tmp_path: Path, json_list: tuple[TokenClasses, NativeTables, Vocabulary]
) -> None:
    """proofs/native_engine.md (bad input): the tables' cache round-trips and refuses foreign or cut files."""
    classes, tables, vocab = json_list
    tables.save(tmp_path / "t")
    back = NativeTables.load(tmp_path / "t", classes)
    assert back.inconsistency() == ""
    for name in ("trie_sym", "trans_key", "trans_push"):
        assert np.array_equal(getattr(back, name), getattr(tables, name))
    assert np.array_equal(back.domains.set_class, tables.domains.set_class)
    other = compress('root ::= "a"', vocab, progress=False)
    with pytest.raises(CacheError):
        NativeTables.load(tmp_path / "t", other)
    raw = (tmp_path / "t" / "arrays.npz").read_bytes()
    (tmp_path / "t" / "arrays.npz").write_bytes(raw[:-40])
    with pytest.raises(CacheError):
        NativeTables.load(tmp_path / "t", classes)


def test_inconsistent_tables_are_refused(json_list: tuple[TokenClasses, NativeTables, Vocabulary]) -> None:
    """proofs/native_engine.md (bad input): out-of-range arrays are named and refused, never followed."""
    import dataclasses

    classes, tables, _ = json_list
    bad_trie = tables.trie_up.copy()
    bad_trie[-1] = len(bad_trie) + 5
    bad = dataclasses.replace(tables, trie_up=bad_trie)
    assert bad.inconsistency() != ""
    d = tables.domains
    to = d.edge_to.copy()
    to[0] = d.num_states + 3
    bad2 = dataclasses.replace(tables, domains=dataclasses.replace(d, edge_to=to))
    assert "domain" in bad2.inconsistency()
    for t in (bad, bad2):
        with pytest.raises(EngineError, match="inconsistent"):
            NativeCompiled(classes, t)
    if not PURE_PYTHON:  # the C kernel checks every index itself too
        module = require_kernel("native")
        for t in (bad, bad2):
            with pytest.raises(EngineError, match="C kernel refuses"):
                _c_tables(module, t)


def test_masks_are_exact_for_any_gnf_of_the_language(
    json_list: tuple[TokenClasses, NativeTables, Vocabulary],
) -> None:
    """proofs/native_engine.md, Remark 2: tables built on an unspecialised GNF give the same masks."""
    classes, tables, vocab = json_list
    plain = searched_gnf(JSON_LIST, specialized=False)
    other = build_tables(classes, JSON_LIST, gnf=plain)
    a, b = NativeCompiled(classes, tables).matcher(), NativeCompiled(classes, other).matcher()
    ma, mb = np.zeros((1, 1), dtype=np.int32), np.zeros((1, 1), dtype=np.int32)
    rng = random.Random(1)
    for _ in range(30):
        a.fill_next_class_bitmask(ma)
        b.fill_next_class_bitmask(mb)
        assert np.array_equal(ma, mb)
        bm = NativeCompiled(classes, tables).allocate_token_bitmask()
        a.fill_next_token_bitmask(bm)
        choices = sorted(row_tokens(bm[0], vocab.logit_width) - set(vocab.stop_ids))
        if not choices:
            break
        t = rng.choice(choices)
        assert a.accept_token(t) and b.accept_token(t)


# -- the engines' entry point: options, the tables' cache directory --------------------------
LARK_PAIRS = r"""
start: pair ("," pair)*
pair: NAME "=" (NAME | NUMBER)
NAME: /[a-c]+/
NUMBER: /[0-9]+/
"""


@pytest.mark.parametrize("kernel", KERNELS)
def test_lark_root_start_through_compress_and_native_engine(kernel: Kernel) -> None:
    """A Lark grammar (start rule ``start``) needs no editing: ``compress(..., root="start")`` and
    ``compile_grammar(..., root="start", engine="native")`` give Earley's masks at every step;
    the classes are refused from another root."""
    g = formalgram.parse_lark(LARK_PAIRS)
    text = g.to_gbnf()
    vocab = small_vocab([b"a", b"b", b"ab", b"=", b",", b"1", b"12", b"a=", b",b", b"=1", b"c,"])
    for domains in (True, False):
        classes = compress(text, vocab, root="start", domains=domains, progress=False)
        compiled = engines.compile_grammar(classes, text, root="start", engine="native", kernel=kernel)
        assert isinstance(compiled, NativeCompiled)
        for seed in range(4):
            assert check_walk(g, compiled, [], 12, random.Random(seed), VocabTrie(vocab)) > 0
    with pytest.raises(ClassesMismatchError):
        engines.compile_grammar(classes, text, engine="native")
    with pytest.raises(ClassesMismatchError):
        engines.compile_grammar(
            compress(text.replace("start", "root"), vocab, progress=False),
            text,
            root="start",
            engine="native",
        )


def test_engine_options_are_typed(json_list: tuple[TokenClasses, NativeTables, Vocabulary]) -> None:
    """Bad options through ``engines.compile_grammar(..., engine="native")``: typed errors."""
    classes, tables, vocab = json_list
    with pytest.raises(EngineError, match="token classes only"):
        engines.compile_full(vocab, JSON_LIST, engine="native")
    with pytest.raises(EngineError, match="native engine only"):
        engines.compile_grammar(classes, JSON_LIST, engine="xgrammar", tables=tables)
    with pytest.raises(EngineError, match="native engine only"):
        engines.compile_grammar(classes, JSON_LIST, engine="llguidance", kernel="python")
    with pytest.raises(EngineError, match="GBNF only"):
        engines.compile_grammar(classes, JSON_LIST, engine="native", syntax="lark")
    with pytest.raises(ClassesMismatchError):  # classes read from root, compiled from another rule
        engines.compile_grammar(classes, JSON_LIST, engine="native", root="item")
    with pytest.raises(EngineError, match="kernel"):
        engines.compile_grammar(classes, JSON_LIST, engine="native", kernel="gpu")  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="tables must be"):
        engines.compile_grammar(classes, JSON_LIST, engine="native", tables=42)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="max_rollback_tokens"):
        engines.compile_grammar(classes, JSON_LIST, engine="native", max_rollback_tokens=-1)
    with pytest.raises(EngineError, match="max_rollback_tokens"):
        bad: object = 2.5
        engines.compile_grammar(classes, JSON_LIST, engine="native", max_rollback_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="native engine only"):
        engines.compile_grammar(classes, JSON_LIST, engine="xgrammar", max_rollback_tokens=4)
    with pytest.raises(EngineError, match="max_threads"):
        engines.compile_grammar(classes, JSON_LIST, engine="native", max_threads=0)
    with pytest.raises(ClassesMismatchError):
        engines.compile_grammar(classes, 'root ::= "a"', engine="native")
    other = compress('root ::= "a" | "[" "]"', vocab, progress=False)
    with pytest.raises(EngineError, match="other classes"):
        engines.compile_grammar(other, 'root ::= "a" | "[" "]"', engine="native", tables=tables)


def _relabelled(classes: TokenClasses) -> TokenClasses:
    """The same partition with two text classes' ids swapped: valid classes, other ids."""
    text = [k for k in range(classes.num_classes) if k not in (classes.stop_class, classes.invalid_class)]
    a, b = text[0], text[1]
    perm = np.arange(classes.num_classes, dtype=np.int32)
    perm[a], perm[b] = b, a
    reps = classes.representatives.copy()
    reps[a], reps[b] = reps[b], reps[a]
    return TokenClasses(
        perm[classes.token_class],
        reps,
        classes.invalid_class,
        classes.stop_class,
        classes.vocab,
        classes.grammar_sha256,
        dict(classes.stats),
        classes.grammar_text_sha256,
    )


def test_tables_directory_is_built_once_then_loaded_and_checked(
    tmp_path: Path, json_list: tuple[TokenClasses, NativeTables, Vocabulary], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tables=DIR``: built and saved on the first compile, loaded afterwards (no build), and a
    corrupted file or tables of other classes are refused with CacheError, never rebuilt."""
    import formalgram_cfgzip.engines.native.matcher as matcher_module

    classes, _, vocab = json_list
    where = tmp_path / "classes" / "native"
    classes.save(tmp_path / "classes")  # the tables live next to the classes
    first = engines.compile_grammar(classes, JSON_LIST, engine="native", tables=where)
    assert (where / "meta.json").is_file()

    def no_build(*args: object, **kw: object) -> NativeTables:
        raise AssertionError("the tables were rebuilt instead of loaded")

    monkeypatch.setattr(matcher_module, "build_tables", no_build)
    back = TokenClasses.load(tmp_path / "classes", grammar=JSON_LIST, vocab=vocab)
    second = engines.compile_grammar(back, JSON_LIST, engine="native", tables=where)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    m1, m2 = first.matcher(), second.matcher()
    b1, b2 = first.allocate_token_bitmask(), second.allocate_token_bitmask()
    for t in [b"[", b"[[", b"a,", b"bb", b"],", b"a", b"]"]:
        m1.fill_next_token_bitmask(b1)
        m2.fill_next_token_bitmask(b2)
        assert np.array_equal(b1, b2)
        assert m1.accept_token(ids[t]) and m2.accept_token(ids[t])
    # the same grammar and vocabulary, other class ids: the classes' own fingerprint refuses it
    with pytest.raises(CacheError, match="classes_sha256"):
        engines.compile_grammar(_relabelled(classes), JSON_LIST, engine="native", tables=where)
    other_vocab = small_vocab([b"[", b"]", b",", b"a", b"bb"])
    with pytest.raises(CacheError):
        engines.compile_grammar(
            compress(JSON_LIST, other_vocab, progress=False), JSON_LIST, engine="native", tables=where
        )
    raw = (where / "arrays.npz").read_bytes()
    (where / "arrays.npz").write_bytes(raw[:100] + bytes([raw[100] ^ 1]) + raw[101:])
    with pytest.raises(CacheError):
        engines.compile_grammar(classes, JSON_LIST, engine="native", tables=where)
    (where / "meta.json").write_text("{not json")
    with pytest.raises(CacheError):
        engines.compile_grammar(classes, JSON_LIST, engine="native", tables=where)


def test_signed_tables_load_only_with_their_key(
    tmp_path: Path, json_list: tuple[TokenClasses, NativeTables, Vocabulary]
) -> None:
    """Tables saved with a key load with that key; unsigned ones, another key or a changed
    record are refused with CacheError."""
    classes, tables, _ = json_list
    key, other = b"k" * 32, b"o" * 32
    tables.save(tmp_path / "signed", key=key)
    back = NativeTables.load(tmp_path / "signed", classes, key=key)
    assert np.array_equal(back.trans_push, tables.trans_push) and back.inconsistency() == ""
    with pytest.raises(CacheError, match="HMAC"):
        NativeTables.load(tmp_path / "signed", classes, key=other)
    tables.save(tmp_path / "plain")
    with pytest.raises(CacheError, match="not signed"):
        NativeTables.load(tmp_path / "plain", classes, key=key)
    meta = tmp_path / "signed" / "meta.json"
    meta.write_text(meta.read_text().replace('"start_symbol": ', '"start_symbol": 1'))
    with pytest.raises(CacheError):
        NativeTables.load(tmp_path / "signed", classes, key=key)


def test_tables_are_kept_in_the_classes_cache_directory(
    tmp_path: Path, json_list: tuple[TokenClasses, NativeTables, Vocabulary], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Classes from a cache (``TokenClasses.load``, a ``Compressor`` entry) keep their native
    tables beside them: built on the first compile, loaded on the next; a stale file there
    (classes recomputed into the same entry) is rebuilt with a warning, never used."""
    import formalgram_cfgzip.engines.native.matcher as matcher_module
    from formalgram_cfgzip.compress import Compressor

    classes, _, vocab = json_list
    assert classes.cache_dir == ""
    classes.save(tmp_path / "c")
    loaded = TokenClasses.load(tmp_path / "c", grammar=JSON_LIST, vocab=vocab)
    assert loaded.cache_dir == str(tmp_path / "c")
    engines.compile_grammar(loaded, JSON_LIST, engine="native")
    assert (tmp_path / "c" / "native" / "meta.json").is_file()
    built: list[object] = []
    real_build = build_tables

    def counting(*args: object, **kw: object) -> NativeTables:
        built.append(args)
        return real_build(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(matcher_module, "build_tables", counting)
    again = TokenClasses.load(tmp_path / "c", grammar=JSON_LIST, vocab=vocab)
    engines.compile_grammar(again, JSON_LIST, engine="native")
    assert built == []  # loaded, not rebuilt
    # a Compressor's entries: classes computed and saved, then found on disk, tables beside them
    comp = Compressor(vocab, cache_dir=tmp_path / "entries")
    fresh = comp.compress(JSON_LIST)
    assert fresh.cache_dir and Path(fresh.cache_dir).parent == tmp_path / "entries"
    engines.compile_grammar(fresh, JSON_LIST, engine="native")
    assert len(built) == 1
    disk = Compressor(vocab, cache_dir=tmp_path / "entries").compress(JSON_LIST)
    engines.compile_grammar(disk, JSON_LIST, engine="native")
    assert len(built) == 1 and disk.cache_dir == fresh.cache_dir
    # stale tables in the entry (relabelled classes saved over it): rebuilt, with a warning
    relabelled = _relabelled(loaded)
    relabelled.save(tmp_path / "c")
    stale = TokenClasses.load(tmp_path / "c", grammar=JSON_LIST, vocab=vocab)
    with pytest.warns(UserWarning, match="rebuilding the native tables"):
        compiled = engines.compile_grammar(stale, JSON_LIST, engine="native")
    assert len(built) == 2
    assert isinstance(compiled, NativeCompiled)
    assert (
        NativeTables.load(tmp_path / "c" / "native", stale).classes_sha256 == compiled.tables.classes_sha256
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_batch_rows_of_terminated_matchers_are_empty(
    kernel: Kernel, json_list: tuple[TokenClasses, NativeTables, Vocabulary]
) -> None:
    """A matcher that accepted a stop token fills an all-zero row in a batch (any row order),
    and the live rows beside it are their single fills."""
    classes, tables, vocab = json_list
    grammar = NativeCompiled(classes, tables, kernel=kernel)
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    done, live = grammar.matcher(), grammar.matcher()
    stop = vocab.size - 1
    assert done.accept_token(ids[b"[["]) and done.accept_token(ids[b"]"]) and done.accept_token(ids[b"]"])
    assert done.accept_token(stop) and done.is_terminated()
    numpy_id: object = np.int64(ids[b"["])  # numpy integers are token ids too
    assert grammar.accept_token_batch([live], [numpy_id]) == [True]  # type: ignore[list-item]
    single = grammar.allocate_token_bitmask()
    live.fill_next_token_bitmask(single)
    for fill, width in (
        (grammar.fill_next_token_bitmask_batch, grammar.token_words),
        (grammar.fill_next_class_bitmask_batch, grammar.engine_words),
    ):
        out = np.full((3, width), -1, dtype=np.int32)
        fill([done, live], out, indices=[2, 0])
        assert not out[2].any() and out[1].tolist() == [-1] * width
        if width == grammar.token_words:
            assert np.array_equal(out[0], single[0])
        else:
            assert out[0].any()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("keep", [0, 1, 3])
def test_bounded_history_keeps_masks_exact_and_memory_bounded(
    kernel: Kernel, keep: int, json_list: tuple[TokenClasses, NativeTables, Vocabulary]
) -> None:
    """``max_rollback_tokens``: compactions never change a mask (every token at every step
    against Earley, rollbacks within the bound included), rollback past the bound is a typed
    error, and the stack stays bounded on a long walk while an unbounded matcher's grows."""
    from formalgram.syntax.gbnf import parse_gbnf

    classes, tables, vocab = json_list
    grammar = engines.compile_grammar(
        classes, JSON_LIST, engine="native", tables=tables, kernel=kernel, max_rollback_tokens=keep
    )
    unbounded = engines.compile_grammar(classes, JSON_LIST, engine="native", tables=tables, kernel=kernel)
    assert isinstance(grammar, NativeCompiled) and isinstance(unbounded, NativeCompiled)
    m, u = grammar.matcher(), unbounded.matcher()
    assert isinstance(m, NativeMatcher) and isinstance(u, NativeMatcher)
    trie = VocabTrie(vocab)
    recs = [EarleyRecognizer(parse_gbnf(JSON_LIST))]  # one per position since the start
    rng = random.Random(keep)
    bm = grammar.allocate_token_bitmask()
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    largest = 0
    for step in range(150):
        m.fill_next_token_bitmask(bm)
        want = oracle_mask(recs[-1], trie, vocab)
        assert row_tokens(bm[0], vocab.logit_width) == want, step
        text = sorted(want - set(vocab.stop_ids))
        undo = min(keep, m.info()["position"])  # never past a forgotten position
        if rng.random() < 0.2 and undo:
            n = rng.randint(1, undo)
            m.rollback(n)
            u.rollback(n)
            del recs[-n:]
            continue
        # mostly open lists: the stacks grow, and so would the graph without compactions
        tok = ids[b"[["] if ids[b"[["] in want and rng.random() < 0.5 else rng.choice(text)
        data = vocab.tokens[tok]
        assert data is not None and m.accept_token(tok) and u.accept_token(tok)
        rec = recs[-1].copy()
        assert rec.feed_bytes(data)
        recs.append(rec)
        largest = max(largest, m.info()["nodes"])
    with pytest.raises(EngineError, match="cannot roll back"):
        m.rollback(2 * keep + 1)
    assert m.info()["position"] <= 2 * keep
    assert largest < u.info()["nodes"] / 2, (largest, u.info())
