"""compress(), TokenClasses persistence and the command line (issue 4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

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


def test_workers_give_the_same_classes() -> None:
    g = parse_gbnf(
        'root ::= ("[" ws (item (ws "," ws item)*)? ws "]") \nitem ::= [a-z]+ | root\nws ::= [ \\n]*'
    )
    import itertools

    alphabet = b"[], ab\n"
    toks = sorted({bytes(p) for n in (1, 2, 3) for p in itertools.product(alphabet, repeat=n)})
    vocab = Vocabulary(toks)
    one = compress(g, vocab, progress=False)
    two = compress(g, vocab, progress=False, workers=2)

    # same partition (class ids may be numbered alike, but compare as partitions)
    def partition(tc: TokenClasses) -> set[frozenset[int]]:
        groups: dict[int, set[int]] = {}
        for i, c in enumerate(tc.token_class.tolist()):
            groups.setdefault(c, set()).add(i)
        return {frozenset(s) for s in groups.values()}

    assert partition(one) == partition(two)


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
