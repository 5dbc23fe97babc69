"""compress(), TokenClasses persistence, the search driver and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _blowup_grammars import deep_merge_grammar
from _class_oracle import check_classes_with_earley

from formalgram import GrammarTooLarge, parse_gbnf
from formalgram_cfgzip import CacheError, TokenClasses, Vocabulary, VocabularyError, compress
from formalgram_cfgzip.cli import main

PAREN = 'root ::= "(" root ")" | "x"'


def small_vocab() -> Vocabulary:
    return Vocabulary(
        [b"(", b"((", b")", b"))", b"x", b"x)", b"(x)", b"()", b"</s>"],
        special_ids=[8],
        stop_ids=[8],
        logit_width=12,
    )


def test_classes_of_balanced_parentheses() -> None:
    vocab = small_vocab()
    tc = compress(PAREN, vocab, progress=False)
    cls = tc.token_class
    assert cls.dtype == np.int32 and cls.shape == (12,)
    assert cls[4] == cls[6]  # "x" and "(x)" are congruent in (^n x )^n
    assert len({int(cls[i]) for i in (0, 1, 2, 3, 4, 5)}) == 6
    assert cls[7] == tc.invalid_class and all(cls[i] == tc.invalid_class for i in (9, 10, 11))
    assert cls[8] == tc.stop_class
    assert tc.representatives[cls[6]] == 4  # byte-wise shortest member
    assert set(tc.invalid.tolist()) == {7}  # "()" occurs in no member of the language


def test_save_load_roundtrip_and_fingerprints(tmp_path: Path) -> None:
    vocab = small_vocab()
    tc = compress(PAREN, vocab, progress=False)
    tc.save(tmp_path / "c")
    back = TokenClasses.load(tmp_path / "c", grammar=PAREN, vocab=vocab)
    assert np.array_equal(back.token_class, tc.token_class)
    assert np.array_equal(back.representatives, tc.representatives)
    assert (back.invalid_class, back.stop_class) == (tc.invalid_class, tc.stop_class)
    # equal grammar written differently: same fingerprint
    TokenClasses.load(tmp_path / "c", grammar='# comment\nroot ::= "x" | "(" root ")"\n', vocab=vocab)
    with pytest.raises(CacheError, match="grammar"):
        TokenClasses.load(tmp_path / "c", grammar='root ::= "(" root ")" | "y"', vocab=vocab)
    other = Vocabulary([b"(", b")", b"x"])
    with pytest.raises(CacheError, match="vocab"):
        TokenClasses.load(tmp_path / "c", grammar=PAREN, vocab=other)


def test_truncated_cache_is_refused(tmp_path: Path) -> None:
    vocab = small_vocab()
    compress(PAREN, vocab, progress=False).save(tmp_path / "c")
    npz = tmp_path / "c" / "arrays.npz"
    npz.write_bytes(npz.read_bytes()[:-20])
    with pytest.raises(CacheError):
        TokenClasses.load(tmp_path / "c", grammar=PAREN, vocab=vocab)


def test_empty_vocabulary_is_refused() -> None:
    with pytest.raises(VocabularyError):
        Vocabulary([])


def test_search_budget_is_enforced() -> None:
    # every prefix of a long run of "a" keeps many stacks alive in this ambiguous grammar
    g = parse_gbnf('root ::= a+ \na ::= "a" | "a" "a" | "a" a "a"')
    vocab = Vocabulary([b"a" * n for n in range(1, 40)])
    with pytest.raises(GrammarTooLarge):
        compress(g, vocab, progress=False, max_states=3)


def _budget_grammar_and_vocab() -> tuple[str, Vocabulary]:
    """A grammar whose search builds tables of several MiB over ~9,000 tokens."""
    import itertools

    alphabet = b"[]{}, ab\n:"
    toks = sorted({bytes(p) for n in (1, 2, 3, 4) for p in itertools.product(alphabet, repeat=n)})
    text = (
        'root ::= value\nvalue ::= "[" ws (value (ws "," ws value)*)? ws "]" | "{" ws (pair (ws "," ws pair)*)? ws "}" | [ab]+\n'
        'pair ::= [ab]+ ws ":" ws value\nws ::= [ \\n]*'
    )
    return text, Vocabulary(toks)


def test_memory_budget_counts_the_search_growth_only() -> None:
    """memory_budget bounds what the search adds, not what the process already holds: a
    caller holding more than the budget (here 192 MiB of touched pages against 64 MiB)
    still gets its classes; a budget of one byte is exceeded by the search's own tables."""
    from formalgram_cfgzip.search.memory import current_rss

    text, vocab = _budget_grammar_and_vocab()
    held = np.ones(192 << 17)  # 192 MiB, every page touched
    assert current_rss() > 64 << 20
    classes = compress(text, vocab, progress=False, memory_budget=64 << 20)
    assert classes.num_classes > 10 and held[-1] == 1.0
    del held
    # The one-byte case runs in a fresh interpreter: here the search could be served from
    # pages that earlier work freed but the allocator kept, and resident memory need not grow.
    tests = str(Path(__file__).resolve().parent)
    code = (
        "import sys\n"
        f"sys.path.insert(0, {tests!r})\n"
        "from test_compress import _budget_grammar_and_vocab\n"
        "from formalgram_cfgzip import compress\n"
        "from formalgram import GrammarTooLarge\n"
        "text, vocab = _budget_grammar_and_vocab()\n"
        "try:\n"
        "    compress(text, vocab, progress=False, memory_budget=1)\n"
        "except GrammarTooLarge as e:\n"
        "    print('refused:', e)\n"
        "    sys.exit(0)\n"
        "sys.exit('not refused')\n"
    )
    # -P: the build this process imports, not the checkout in the current directory; the
    # timeout is a guard against a hang (the child takes about a second)
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "memory grew by" in done.stdout


def test_workers_give_the_same_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes (the Python search; the compiled build's kernel, which would search in
    this process whatever ``workers`` says, is turned off for them) give the classes of one
    process."""
    g = parse_gbnf(
        'root ::= ("[" ws (item (ws "," ws item)*)? ws "]") \nitem ::= [a-z]+ | root\nws ::= [ \\n]*'
    )
    import itertools

    alphabet = b"[], ab\n"
    # more than 2,000 tokens, so that the worker pool is really used
    toks = sorted({bytes(p) for n in (1, 2, 3, 4) for p in itertools.product(alphabet, repeat=n)})
    assert len(toks) > 2000
    vocab = Vocabulary(toks)
    one = compress(g, vocab, progress=False)
    monkeypatch.setenv("FORMALGRAM_NO_CSEARCH", "1")
    two = compress(g, vocab, progress=False, workers=2)
    assert two.stats["search_kernel"] == 0.0

    # same partition (class ids may be numbered alike, but compare as partitions)
    def partition(tc: TokenClasses) -> set[frozenset[int]]:
        groups: dict[int, set[int]] = {}
        for i, c in enumerate(tc.token_class.tolist()):
            groups.setdefault(c, set()).add(i)
        return {frozenset(s) for s in groups.values()}

    assert partition(one) == partition(two)
    # and the partition is right (Earley), so that both agreeing on a wrong one fails
    contexts = [b"", b"[", b"[a", b"[ab, ", b"[[", b"[a,[b", b"[\n"]
    compared, refused = check_classes_with_earley(
        g, toks, two.token_class, two.invalid_class, contexts, (b"", b"]", b",", b"a", b" "), per_class=3
    )
    assert compared > 200 and refused == len(two.invalid) > 1000, (compared, refused)


def test_search_tables_reset_between_depths_keep_the_classes() -> None:
    """Resetting the search tables at every depth (keeping only the live sets) changes nothing.

    Oracle: the Earley recognizer decides, for short contexts, which tokens are valid; the
    classes found with resets must agree with it and with the classes found without resets.
    """
    import itertools

    from formalgram.transforms.gnf import to_gnf
    from formalgram_cfgzip.search.displacement import DisplacementSearch
    from formalgram_cfgzip.search.driver import run_levels

    g = parse_gbnf('root ::= "(" root ")" root | "x" | "[" [a-c]* "]"')
    toks = sorted({bytes(p) for n in (1, 2, 3, 4) for p in itertools.product(b"()x[ab]", repeat=n)})
    flat = np.frombuffer(b"".join(toks), dtype=np.uint8)
    lengths = np.asarray([len(t) for t in toks], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    gnf = to_gnf(g)
    runs = []
    for reset_size in (0, 10**9):
        search = DisplacementSearch(gnf)
        class_bytes = np.frombuffer(bytes(search.byte_class), dtype=np.uint8)[flat]
        codes, digests = run_levels(search, class_bytes, offsets, lengths, False, reset_size, False)
        assert (len(digests) > 0) == (reset_size == 0)  # a reset switches to digests
        runs.append(codes.tolist())
    with_resets, without = runs
    pairs = {}
    for a, b in zip(with_resets, without, strict=True):
        assert pairs.setdefault(a, b) == b  # same partition, same invalid tokens
    assert len(set(pairs.values())) == len(pairs)
    # the classes found with resets (negative codes: invalid) are right for Earley
    contexts = [b"", b"(", b"((x)", b"[a", b"(x)("]
    compared, refused = check_classes_with_earley(
        g, toks, np.asarray(with_resets), -1, contexts, (b"", b")", b"]", b"x")
    )
    assert compared > 100 and refused == with_resets.count(-1) > 0, (compared, refused)


def test_deep_trie_merges_need_no_recursion_limit() -> None:
    """A token whose search merges tries 2,000 levels deep, at a recursion limit of 1,000."""
    from formalgram import accepts

    g = deep_merge_grammar()
    k = 2000
    deep, deeper = b"s" + b"a" * k + b"c", b"s" + b"a" * (k + 1) + b"c"
    vocab = Vocabulary([deep, deeper, b"p", b"q", b"c", b"z"])
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default; library code must not raise it
    try:
        tc = compress(g, vocab, progress=False, specialize=False)
        assert sys.getrecursionlimit() == 1000
    finally:
        sys.setrecursionlimit(old)
    cls = tc.token_class.tolist()
    # Earley: ``deep`` and ``deeper`` are valid and need different numbers of closing letters
    assert accepts(g, b"x" + deep + b"c" + b"p" * k) and not accepts(g, b"x" + deeper + b"c" + b"p" * k)
    assert accepts(g, b"x" + deeper + b"c" + b"q" * (k + 1))
    assert cls[0] != cls[1] and tc.invalid_class not in (cls[0], cls[1])
    assert tc.invalid.tolist() == [5]  # "z" occurs nowhere


def _many_words_grammar() -> str:
    """400 ten-letter words: specialising copies about 3,200 single-byte symbols (a trial)."""
    import random

    rng = random.Random(7)
    words = sorted({"".join(rng.choice("abcdefghij") for _ in range(10)) for _ in range(400)})
    return "root ::= (" + " | ".join(f'"{w}"' for w in words) + ') ("," root)?'


def test_specialization_is_chosen_by_a_bounded_trial() -> None:
    """Above SPECIALIZE_LIMIT the default runs a trial; either outcome is lossless (Earley oracle)."""

    from formalgram.transforms.gnf import to_gnf
    from formalgram.transforms.specialize import specialize_terminal_symbols
    from formalgram_cfgzip.pipeline import SPECIALIZE_LIMIT, SPECIALIZE_SAMPLE
    from formalgram_cfgzip.search.driver import pick_specialization, token_table

    text = _many_words_grammar()
    g = parse_gbnf(text)
    words = [w.encode() for w in text.split('"')[1::2]]
    toks = sorted({w[i:j] for w in words[:40] for i in range(10) for j in range(i + 1, min(i + 4, 10) + 1)})
    toks += [b",", b"a,", b"zz"]
    # whole words (and words with the comma) end an item alike: classes of many tokens
    toks += sorted(set(words[:40]) - set(toks)) + [w + b"," for w in words[:40]]
    vocab = Vocabulary(toks)
    plain = to_gnf(g)
    special = specialize_terminal_symbols(plain)
    assert len(special.names) > max(SPECIALIZE_LIMIT, 4 * len(plain.names))  # the default must try
    table = token_table(vocab)
    # no budget at all: the plain GNF is kept; a huge one: the specialised GNF is kept
    assert pick_specialization(plain, special, table, 200_000, None, 0, SPECIALIZE_SAMPLE)[0] is plain
    assert pick_specialization(plain, special, table, 200_000, None, 10**6, SPECIALIZE_SAMPLE)[0] is special
    tc = compress(g, vocab, progress=False)
    assert tc.stats["specialize_trial"] in (0.0, 1.0)
    assert tc.stats["specialized"] == tc.stats["specialize_trial"]
    forced = compress(g, vocab, progress=False, specialize=bool(tc.stats["specialized"]))
    assert np.array_equal(tc.token_class, forced.token_class)
    # either choice is lossless (Earley, a few contexts): the chosen one and the other; the
    # specialised classes merge the whole words (and the words with a comma), the plain GNF's
    # classes may be finer
    other = compress(g, vocab, progress=False, specialize=not tc.stats["specialized"])
    by_choice = {bool(c.stats["specialized"]): c for c in (tc, other)}
    assert set(by_choice) == {False, True}
    # (words are sorted: take them from far apart) the last two continuations need a whole item
    contexts = [b"", words[0][:3], words[1] + b",", words[2][:7], words[250][:5]]
    continuations = (b"", b",", words[3][:2], words[200][:4], b"," + words[300][:4])
    checked = {
        choice: check_classes_with_earley(g, toks, c.token_class, c.invalid_class, contexts, continuations)
        for choice, c in by_choice.items()
    }
    assert checked[True][0] >= 78 and checked[True][1] == checked[False][1] == 1, checked


def test_cli_compress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = tmp_path / "tiny.tiktoken"
    import base64

    words = [b"{", b"}", b"[", b"]", b'"', b":", b",", b" ", b"true", b"1", b"a", b'":', b"{}"]
    tok.write_text("".join(f"{base64.b64encode(w).decode()} {i}\n" for i, w in enumerate(words)))
    rc = main(["compress", "builtin:json", "--tokenizer", str(tok), "-o", str(tmp_path / "out"), "-q"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "classes" in out and "compression" in out
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert "grammar_sha256" in json.dumps(meta)


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    rc = main(["compress", "builtin:json", "--tokenizer", str(bad), "-o", str(tmp_path / "o")])
    assert rc == 2
    assert "error" in capsys.readouterr().err
    rc = main(
        ["compress", str(tmp_path / "missing.gbnf"), "--tokenizer", "llama3", "-o", str(tmp_path / "o")]
    )
    assert rc == 2


def test_collector_paused_only_while_compressing() -> None:
    """The cyclic collector is back on after a compression, also after one that fails, and a
    caller's own pause is kept."""
    import gc

    from formalgram import EmptyLanguageError

    v = Vocabulary([b"(", b")", b"x"])
    seen: list[bool] = []
    assert gc.isenabled()
    compress('root ::= "(" root ")" | "x"', v, progress=False)
    seen.append(gc.isenabled())
    with pytest.raises(EmptyLanguageError):
        compress("root ::= root", v, progress=False)
    seen.append(gc.isenabled())
    gc.disable()
    try:
        compress('root ::= "x"', v, progress=False)
        seen.append(gc.isenabled())
    finally:
        gc.enable()
    assert seen == [True, True, False]


def test_no_trial_for_a_huge_specialised_alphabet() -> None:
    """Past SPECIALIZE_MAX symbols the default keeps the plain GNF without a trial (its set-up
    alone would cost seconds): the plan, and a grammar whose specialisation is that large."""
    from formalgram_cfgzip.pipeline import SPECIALIZE_MAX, specialization_plan

    assert specialization_plan(100, SPECIALIZE_MAX, None) == "trial"
    assert specialization_plan(100, SPECIALIZE_MAX + 1, None) == "plain"
    assert specialization_plan(100, SPECIALIZE_MAX + 1, True) == "special"
    # 20,000 ten-letter words: about 180,000 single-byte symbols once specialised
    import random

    rng = random.Random(3)
    words = sorted({"".join(rng.choice("abcdefghij") for _ in range(10)) for _ in range(20_000)})
    text = "root ::= (" + " | ".join(f'"{w}"' for w in words) + ') ("," root)?'
    vocab = Vocabulary([*sorted({w[:k].encode() for w in words[:50] for k in (3, 6, 10)}), b","])
    tc = compress(text, vocab, progress=False)
    assert tc.stats["specialize_trial"] == -1.0 and tc.stats["specialized"] == 0.0
