"""``TokenClasses.load(..., verify=...)``: classes re-derived from the grammar, tampering refused.

Every tampered cache below keeps a valid checksum and every invariant of
:meth:`TokenClasses.validate` (most are renumbered with ``number_classes``, so they are even
numbered as ``compress`` numbers classes): only a search against the grammar can tell.
The oracle of "tampered" is the set of token pairs put together or apart differently
from the untampered classes, which the engine tests check against XGrammar's own masks.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from _data import grammar

from formalgram_cfgzip import CacheError, TokenClasses, Vocabulary
from formalgram_cfgzip.cache import read_cache, write_cache
from formalgram_cfgzip.classes import VERIFY_SAMPLE
from formalgram_cfgzip.compress import compress, number_classes
from formalgram_cfgzip.search.driver import token_table

PAREN = 'root ::= "(" root ")" | "x"'
OTHER = 'root ::= "(" root ")" | "x" | "(" ")"'


def vocab() -> Vocabulary:
    return Vocabulary(
        [b"(", b"((", b")", b"x", b"(x)", None, b"", b"<tool>", b"</s>", b"y", b"()", b"x)", b"))"],
        special_ids=[7, 8],
        stop_ids=[8],
        logit_width=15,
    )


def codes_of(tc: TokenClasses) -> npt.NDArray[np.int64]:
    """The class of each searched token, -1 for the invalid class (what number_classes reads)."""
    toks = token_table(tc.vocab)
    codes = tc.token_class[toks.ids].astype(np.int64)
    codes[codes == tc.invalid_class] = -1
    return codes


def save_tampered(tc: TokenClasses, directory: Path, codes: npt.NDArray[np.int64]) -> TokenClasses:
    """Save ``tc`` with the partition ``codes``, numbered as compress numbers it (invariants intact)."""
    token_class, reps, stop, inv = number_classes(tc.vocab, token_table(tc.vocab), codes)
    fake = TokenClasses(
        token_class, reps, inv, stop, tc.vocab, tc.grammar_sha256, tc.stats, tc.grammar_text_sha256
    )
    fake.save(directory)
    return fake


def pairs_differ(a: TokenClasses, b: TokenClasses) -> bool:
    """Whether some two tokens are together in one and apart in the other (the masks can differ)."""
    ia, ib = a.token_class.astype(np.int64), b.token_class.astype(np.int64)
    pairs = np.unique(ia * (int(ib.max()) + 1) + ib).size
    return not pairs == np.unique(ia).size == np.unique(ib).size


@pytest.fixture(scope="module")
def paren() -> TokenClasses:
    return compress(PAREN, vocab(), progress=False)


@pytest.mark.parametrize("verify", ["none", "sample", "all", 1, 3, 10**9])
def test_untampered_cache_passes_every_level(paren: TokenClasses, tmp_path: Path, verify: str | int) -> None:
    paren.save(tmp_path)
    back = TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=verify)
    assert np.array_equal(back.token_class, paren.token_class)
    assert np.array_equal(back.representatives, paren.representatives)


# arguments of the wrong type are refused by the compiled build at the call (TypeError), and by
# the pure-Python one with the CacheError that values outside the range get in both
WRONG_TYPE = (CacheError, TypeError)


@pytest.mark.parametrize("verify", ["yes", "", 0, -3, True])
def test_bad_verify_argument(paren: TokenClasses, tmp_path: Path, verify: object) -> None:
    paren.save(tmp_path)
    with pytest.raises(CacheError, match="verify must be"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=verify)  # type: ignore[arg-type]


@pytest.mark.parametrize("verify", [2.5, None, b"all"])
def test_verify_argument_of_the_wrong_type(paren: TokenClasses, tmp_path: Path, verify: object) -> None:
    paren.save(tmp_path)
    with pytest.raises(WRONG_TYPE, match=r"verify must be|expected"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=verify)  # type: ignore[arg-type]


def tamper_cases(tc: TokenClasses) -> dict[str, npt.NDArray[np.int64]]:
    """Partitions of the searched tokens that differ from ``tc``'s, each a plausible tampering."""
    codes = codes_of(tc)
    ids = token_table(tc.vocab).ids.tolist()
    at = {t: i for i, t in enumerate(ids)}
    out: dict[str, npt.NDArray[np.int64]] = {}
    moved = codes.copy()
    moved[at[4]] = codes[at[0]]  # "(x)" moved from the class of "x" to the class of "("
    out["member moved to another class"] = moved
    merged = codes.copy()
    merged[merged == codes[at[1]]] = codes[at[0]]  # "((" and "(" made one class
    out["two classes merged"] = merged
    split = codes.copy()
    split[at[4]] = codes.max() + 1  # "(x)" alone in a new class
    out["a class split"] = split
    dropped = codes.copy()
    dropped[at[11]] = -1  # "x)" (valid) moved to the invalid class
    out["valid token made invalid"] = dropped
    raised = codes.copy()
    raised[at[9]] = codes[at[3]]  # "y" (valid nowhere) put with "x"
    out["invalid token made valid"] = raised
    return out


CASES = sorted(tamper_cases(compress(PAREN, vocab(), progress=False)))


@pytest.mark.parametrize("case", CASES)
def test_tampering_with_invariants_intact(paren: TokenClasses, tmp_path: Path, case: str) -> None:
    """Accepted without verification (the documented limit of a checksum), refused with ``"all"``."""
    fake = save_tampered(paren, tmp_path, tamper_cases(paren)[case])
    assert pairs_differ(fake, paren)
    plain = TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())
    assert np.array_equal(plain.token_class, fake.token_class)
    with pytest.raises(CacheError, match="does not match the grammar: the search derives other classes"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify="all")
    # a sample as large as the vocabulary's text tokens is the same check
    with pytest.raises(CacheError, match="does not match the grammar"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=VERIFY_SAMPLE)


def test_sample_messages_name_the_token(paren: TokenClasses, tmp_path: Path) -> None:
    """A sample short of every token still checks each drawn one; over seeds, each tampering is found."""
    for case, message in (
        ("member moved to another class", "its displacement differs from that of the representative"),
        (
            "valid token made invalid",
            r"token 11 \(b'x\)'\) is in the invalid class but the grammar allows it",
        ),
        ("invalid token made valid", "differs from that of the representative"),
        ("a class split", "has the displacement of another class"),
    ):
        save_tampered(paren, tmp_path, tamper_cases(paren)[case])
        found = set()
        for seed in range(40):
            try:
                TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=3, seed=seed)
            except CacheError as exc:
                assert f"seed={seed}" in str(exc)
                found.add(str(exc).split(": ", 1)[1])
        assert any(re.search(message, m) for m in found), (case, found)


def test_renumbered_or_other_representative(paren: TokenClasses, tmp_path: Path) -> None:
    """Same partition, other numbering or representative: equal masks, but not what compress writes."""
    paren.save(tmp_path)
    arrays, meta = read_cache(tmp_path)
    tc, reps = arrays["token_class"], arrays["representatives"]
    a, b = 0, 1  # two text classes swapped, with their representatives
    swapped = tc.copy()
    swapped[tc == a], swapped[tc == b] = b, a
    arrays["token_class"], arrays["representatives"] = (
        swapped,
        reps[[b, a, *range(2, reps.size)]].astype(np.int32),
    )
    write_cache(tmp_path, arrays, meta)
    TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())  # passes the invariants
    with pytest.raises(CacheError, match="not numbered as compress numbers them"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify="sample")
    paren.save(tmp_path)
    arrays, meta = read_cache(tmp_path)
    c = int(paren.token_class[4])  # the class of "x" and "(x)"
    arrays["representatives"] = arrays["representatives"].copy()
    arrays["representatives"][c] = 4  # "(x)" is not the shortest member
    write_cache(tmp_path, arrays, meta)
    TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())
    with pytest.raises(CacheError, match=r"not numbered as compress numbers them \(first at token 4"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=1)


def test_cache_of_another_grammar_relabelled(paren: TokenClasses, tmp_path: Path) -> None:
    """Another grammar's cache with this grammar's fingerprints: only verification tells."""
    compress(OTHER, vocab(), progress=False).save(tmp_path)
    arrays, meta = read_cache(tmp_path)
    meta["grammar_sha256"], meta["grammar_text_sha256"] = paren.grammar_sha256, paren.grammar_text_sha256
    write_cache(tmp_path, arrays, meta)
    TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())
    for verify in ("sample", "all"):
        with pytest.raises(CacheError, match="does not match the grammar"):
            TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify=verify)


def test_stats_must_name_the_searched_form(paren: TokenClasses, tmp_path: Path) -> None:
    paren.save(tmp_path)
    arrays, meta = read_cache(tmp_path)
    stats = meta["stats"]
    assert isinstance(stats, dict)
    del stats["specialized"]
    write_cache(tmp_path, arrays, meta)
    TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())
    with pytest.raises(CacheError, match="do not say which form of the grammar was searched"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify="sample")
    # the other form: a sound check too, and this small grammar gives the same classes both ways
    stats["specialized"] = 1.0 - paren.stats["specialized"]
    write_cache(tmp_path, arrays, meta)
    TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify="all")


def test_verification_that_cannot_run_is_a_cache_error(paren: TokenClasses, tmp_path: Path) -> None:
    """A text recognised by its fingerprint is not parsed on load; verification must parse it."""
    from formalgram_cfgzip.cache import fingerprint_text

    text = "not a grammar ((("
    fake = TokenClasses(
        paren.token_class, paren.representatives, paren.invalid_class, paren.stop_class, paren.vocab,
        paren.grammar_sha256, paren.stats, fingerprint_text(text),
    )  # fmt: skip
    fake.save(tmp_path)
    TokenClasses.load(tmp_path, grammar=text, vocab=vocab())
    with pytest.raises(CacheError, match=r"cannot be verified: .*line 1"):
        TokenClasses.load(tmp_path, grammar=text, vocab=vocab(), verify="sample")


# -- a real grammar and tokenizer -------------------------------------------------------------


def _real(name: str) -> str:
    return grammar(f"llama_cpp/{name}").read_text()


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return Vocabulary.builtin("llama3")


def test_real_grammar_with_llama3(llama3: Vocabulary, tmp_path: Path) -> None:
    """arithmetic.gbnf: the real cache passes; list.gbnf's cache relabelled as it is refused by a sample."""
    arith, other = _real("arithmetic.gbnf"), _real("list.gbnf")
    tc = compress(arith, llama3, progress=False)
    tc.save(tmp_path / "a")
    for verify in ("sample", "all"):
        TokenClasses.load(tmp_path / "a", grammar=arith, vocab=llama3, verify=verify, seed=0)
    compress(other, llama3, progress=False).save(tmp_path / "b")
    arrays, meta = read_cache(tmp_path / "b")
    meta["grammar_sha256"], meta["grammar_text_sha256"] = tc.grammar_sha256, tc.grammar_text_sha256
    write_cache(tmp_path / "b", arrays, meta)
    TokenClasses.load(tmp_path / "b", grammar=arith, vocab=llama3)
    with pytest.raises(CacheError, match="does not match the grammar"):
        TokenClasses.load(tmp_path / "b", grammar=arith, vocab=llama3, verify=64, seed=0)
    # one member moved to another class: "all" finds it
    codes = codes_of(tc)
    big = np.bincount(codes[codes >= 0])
    a, b = (int(c) for c in np.argsort(-big)[:2])
    moved = codes.copy()
    moved[int(np.flatnonzero(codes == a)[-1])] = b
    save_tampered(tc, tmp_path / "c", moved)
    TokenClasses.load(tmp_path / "c", grammar=arith, vocab=llama3)
    with pytest.raises(CacheError, match="the search derives other classes"):
        TokenClasses.load(tmp_path / "c", grammar=arith, vocab=llama3, verify="all")


@pytest.mark.parametrize("seed", [-1, -(1 << 70), 1.5, "0"])
def test_bad_seed(paren: TokenClasses, tmp_path: Path, seed: object) -> None:
    paren.save(tmp_path)
    wanted = CacheError if isinstance(seed, int) else WRONG_TYPE
    with pytest.raises(wanted, match=r"seed must be an int >= 0|expected"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab(), verify="sample", seed=seed)  # type: ignore[arg-type]
