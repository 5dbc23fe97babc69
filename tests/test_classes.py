"""TokenClasses invariants: one check, refused by load (CacheError), by construction and by the engines.

Every corruption below keeps a valid cache checksum (the arrays are written back with
:func:`write_cache`), so only the invariant check can catch it.  The oracle for "the
engines would mask wrongly" is the invariant list itself: each corruption breaks one of the
properties the engine adapters and the expander read (representatives, class ids, the
invalid and stop classes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from formalgram_cfgzip import (
    CacheError,
    ClassesInvariantError,
    ClassesMismatchError,
    TokenClasses,
    Vocabulary,
)
from formalgram_cfgzip.cache import fingerprint_text, grammar_fingerprint, read_cache, write_cache
from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines.tokens import check_classes, grammar_matches

PAREN = 'root ::= "(" root ")" | "x"'
Arrays = tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]


def vocab() -> Vocabulary:
    """Text tokens, a hole, an empty token, a special and a stop token, and two padding ids."""
    return Vocabulary(
        [b"(", b"((", b")", b"x", b"(x)", None, b"", b"<tool>", b"</s>", b"y"],
        special_ids=[7, 8],
        stop_ids=[8],
        logit_width=12,
    )


def classes() -> TokenClasses:
    return compress(PAREN, vocab(), progress=False)


def _set(a: npt.NDArray[np.int32], i: int, value: int) -> npt.NDArray[np.int32]:
    out = a.copy()
    out[i] = value
    return out


def _text_class(tc: TokenClasses) -> int:
    """A class that is neither the invalid nor the stop class."""
    return next(c for c in range(tc.num_classes) if c not in (tc.invalid_class, tc.stop_class))


CORRUPTIONS: dict[str, Callable[[TokenClasses], Arrays]] = {
    "representative -5": lambda tc: (tc.token_class, _set(tc.representatives, _text_class(tc), -5)),
    "representative -2**31": lambda tc: (
        tc.token_class,
        _set(tc.representatives, _text_class(tc), int(np.iinfo(np.int32).min)),
    ),
    "representative a padding id": lambda tc: (tc.token_class, _set(tc.representatives, _text_class(tc), 10)),
    "invalid class represented by a padding id": lambda tc: (
        tc.token_class,
        _set(tc.representatives, tc.invalid_class, 11),
    ),
    "representative of another class": lambda tc: (
        tc.token_class,
        _set(tc.representatives, _text_class(tc), int(tc.representatives[tc.stop_class])),
    ),
    "all zeros": lambda tc: (np.zeros_like(tc.token_class), np.zeros_like(tc.representatives)),
    "classes reversed": lambda tc: (tc.token_class[::-1].copy(), tc.representatives),
    "classes rolled": lambda tc: (np.roll(tc.token_class, 1), tc.representatives),
    "representatives reversed": lambda tc: (tc.token_class, tc.representatives[::-1].copy()),
    "representatives rolled": lambda tc: (tc.token_class, np.roll(tc.representatives, 1)),
    "representatives one longer": lambda tc: (
        tc.token_class,
        np.append(tc.representatives, tc.representatives[:1]).astype(np.int32),
    ),
    "special token moved out of the invalid class": lambda tc: (
        _set(tc.token_class, 7, _text_class(tc)),
        tc.representatives,
    ),
    "stop token moved to the invalid class": lambda tc: (
        _set(tc.token_class, 8, tc.invalid_class),
        tc.representatives,
    ),
    "class id out of range": lambda tc: (_set(tc.token_class, 3, tc.num_classes), tc.representatives),
    "int64 classes": lambda tc: (tc.token_class.astype(np.int64), tc.representatives),  # type: ignore[dict-item]
}


def test_compress_output_is_valid_and_has_the_expected_shape() -> None:
    tc = classes()
    tc.validate()
    assert tc.invalid_class >= 0 and tc.stop_class >= 0
    assert {5, 6, 7, 9, 10, 11} <= set(np.flatnonzero(tc.token_class == tc.invalid_class).tolist())
    assert np.flatnonzero(tc.token_class == tc.stop_class).tolist() == [8]


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_load_refuses_broken_invariants_behind_a_valid_checksum(tmp_path: Path, name: str) -> None:
    tc = classes()
    tc.save(tmp_path)
    arrays, meta = read_cache(tmp_path)
    token_class, reps = CORRUPTIONS[name](tc)
    arrays["token_class"], arrays["representatives"] = token_class, reps
    write_cache(tmp_path, arrays, meta)  # checksum recomputed: only the invariants can tell
    # wrong dtypes and lengths are caught on the .npy header, against the metadata, before the rest
    with pytest.raises(CacheError, match=r"inconsistent arrays|expected int32|num_classes is"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_construction_refuses_broken_invariants(name: str) -> None:
    tc = classes()
    token_class, reps = CORRUPTIONS[name](tc)
    with pytest.raises(ClassesInvariantError):
        TokenClasses(token_class, reps, tc.invalid_class, tc.stop_class, tc.vocab, tc.grammar_sha256)


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_engines_refuse_classes_broken_after_construction(name: str) -> None:
    """The arrays are writable numpy arrays: the engines check again before use."""
    tc = classes()
    token_class, reps = CORRUPTIONS[name](tc)
    object.__setattr__(tc, "token_class", token_class)
    object.__setattr__(tc, "representatives", reps)
    with pytest.raises(ClassesMismatchError, match="inconsistent TokenClasses"):
        check_classes(tc, PAREN)
    pytest.importorskip("xgrammar")
    from formalgram_cfgzip.engines import compile_grammar

    with pytest.raises(ClassesMismatchError):
        compile_grammar(tc, PAREN)


@pytest.mark.parametrize(
    ("invalid", "stop", "message"),
    [
        (-2, None, "invalid_class must be"),
        (None, 99, "stop_class must be"),
        (None, -1, "no stop class"),
        ("same", None, "both"),
    ],
)
def test_construction_refuses_bad_class_ids(invalid: object, stop: object, message: str) -> None:
    tc = classes()
    inv = tc.invalid_class if invalid is None else (tc.stop_class if invalid == "same" else invalid)
    st = tc.stop_class if stop is None else stop
    with pytest.raises(ClassesInvariantError, match=message):
        TokenClasses(tc.token_class, tc.representatives, inv, st, tc.vocab, "")  # type: ignore[arg-type]


def test_invalid_class_may_go_without_a_representative() -> None:
    """The engines give the invalid class empty bytes, so ``-1`` is allowed there, and only there."""
    tc = classes()
    reps = _set(tc.representatives, tc.invalid_class, -1)
    TokenClasses(tc.token_class, reps, tc.invalid_class, tc.stop_class, tc.vocab, "").validate()
    with pytest.raises(ClassesInvariantError, match="not a token id"):
        TokenClasses(
            tc.token_class, _set(reps, tc.stop_class, -1), tc.invalid_class, tc.stop_class, tc.vocab, ""
        )


def test_meta_values_of_the_wrong_type_are_cache_errors(tmp_path: Path) -> None:
    tc = classes()
    for key, value in (("invalid_class", 1e300), ("invalid_class", "x"), ("stats", {"a": "not a number"})):
        tc.save(tmp_path)
        arrays, meta = read_cache(tmp_path)
        meta[key] = value
        write_cache(tmp_path, arrays, meta)
        with pytest.raises(CacheError):
            TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())
    # a number JSON reads as infinity (write_cache refuses to write one)
    tc.save(tmp_path)
    meta_file = tmp_path / "meta.json"
    text = meta_file.read_text()
    meta_file.write_text(text.replace(f'"invalid_class": {tc.invalid_class}', '"invalid_class": 1e999'))
    assert "1e999" in meta_file.read_text()
    with pytest.raises(CacheError, match="number 1e999 is out of range"):
        TokenClasses.load(tmp_path, grammar=PAREN, vocab=vocab())


def test_the_same_text_is_recognised_without_parsing(tmp_path: Path) -> None:
    """compress records the text's fingerprint: load and the engines need no parse for that text."""
    text = "this is not a grammar ((("  # parsing it would fail
    tc = classes()
    fake = TokenClasses(
        tc.token_class, tc.representatives, tc.invalid_class, tc.stop_class, tc.vocab, "0" * 64, {},
        fingerprint_text(text),
    )  # fmt: skip
    assert grammar_matches(fake, text)
    assert not grammar_matches(fake, text + " ")  # another text is parsed, and does not parse
    fake.save(tmp_path)
    assert TokenClasses.load(tmp_path, grammar=text, vocab=vocab()).grammar_sha256 == "0" * 64
    # the real classes: same text, reformatted text (parsed), other grammar
    assert tc.grammar_text_sha256 == fingerprint_text(PAREN)
    assert tc.grammar_sha256 == grammar_fingerprint(PAREN)
    assert grammar_matches(tc, PAREN) and grammar_matches(tc, PAREN.replace(" | ", "|") + "\n# same\n")
    assert not grammar_matches(tc, 'root ::= "(" root ")" | "y"')
