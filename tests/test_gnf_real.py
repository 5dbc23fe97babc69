"""to_gnf on the shared real grammars (proofs/normal_forms.md §6, checked on real inputs).

For every shared GBNF/EBNF grammar that parses, ``to_gnf`` must succeed within the default
budget, give a GNF grammar, and agree with the Earley oracle on the original grammar for
sampled members and one-byte mutations of them.  The default run checks a fixed selection
(including the three big derived grammars named in issue 3); ``-m heavy`` checks all.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from formalgram import FormalgramError, Grammar, GrammarError, is_gnf, to_gnf
from formalgram.recognize import accepts, sample
from formalgram.syntax.gbnf import load

GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
BUDGET = 200_000

DEFAULT_SET = [
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    "derived/lark_via_xgrammar/c_syncode.gbnf",
    "derived/json_mode_eval_xgrammar/JME_29.gbnf",
    "llama_cpp/arithmetic.gbnf",
    "llama_cpp/json.gbnf",
    "llama_cpp/c.gbnf",
    "transformers_cfg/SMILES/acrylates.ebnf",
    "transformers_cfg/balanced_parentheses.ebnf",
    "xgrammar/test_fixtures/nullable_grammar.ebnf",
]


# Upper bounds on the number of GNF rules (bench/results/gnf_sizes.md has the measured sizes;
# the bounds leave ~10% slack so that a size regression is caught, not an improvement).
SIZE_BOUNDS = {
    "derived/lark_via_xgrammar/go_syncode.gbnf": 11_500,
    "derived/lark_via_xgrammar/sql_syncode.gbnf": 12_600,
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf": 7_700,
    "derived/lark_via_xgrammar/c_syncode.gbnf": 1_050,
    "llama_cpp/json.gbnf": 330,
}


def _all_files() -> list[str]:
    if not GRAMMARS.is_dir():
        return []
    out = [p for p in GRAMMARS.rglob("*") if p.suffix in (".gbnf", ".ebnf") and p.is_file()]
    return sorted(str(p.relative_to(GRAMMARS)) for p in out)


def _load(rel: str) -> Grammar:
    if not GRAMMARS.is_dir():
        pytest.skip(f"shared grammars not found at {GRAMMARS}")
    path = GRAMMARS / rel
    if not path.exists():
        pytest.skip(f"{rel} not in the shared corpus")
    try:
        return load(path)
    except FormalgramError as exc:
        pytest.skip(f"{rel} does not parse: {str(exc).splitlines()[0]}")


def _mutations(w: bytes, rng: random.Random, letters: bytes) -> list[bytes]:
    out: list[bytes] = []
    for _ in range(3):
        i = rng.randrange(len(w) + 1)
        c = letters[rng.randrange(len(letters))]
        out.append(w[:i] + bytes([c]) + w[i:])
        if w:
            j = rng.randrange(len(w))
            out.append(w[:j] + w[j + 1 :])
            out.append(w[:j] + bytes([c]) + w[j + 1 :])
    return out


def _check(rel: str, n_samples: int, max_len: int) -> None:
    g = _load(rel)
    h = to_gnf(g, budget=BUDGET)
    assert is_gnf(h)
    assert len(h.rules) <= SIZE_BOUNDS.get(rel, 1 << 30), (rel, len(h.rules))
    try:
        members = sample(g, n_samples, seed=7, max_len=max_len)
    except GrammarError:  # the shortest member is longer than max_len
        try:
            members = sample(g, n_samples, seed=7, max_len=4 * max_len)
        except GrammarError:
            members = []  # members are thousands of bytes long: only the shape is checked
    rng = random.Random(rel)
    letters = bytes(sorted({b for w in members for b in w} | set(b" a0{\n")))
    for w in members:
        assert accepts(h, w), (rel, w)
        for m in _mutations(w, rng, letters):
            assert accepts(h, m) == accepts(g, m), (rel, m)


@pytest.mark.parametrize("rel", DEFAULT_SET)
def test_to_gnf_real_default(rel: str) -> None:
    """proofs/normal_forms.md §6 on real grammars: same verdicts as the Earley oracle."""
    _check(rel, n_samples=4, max_len=40)


@pytest.mark.heavy
@pytest.mark.parametrize("rel", _all_files())
def test_to_gnf_real_all(rel: str) -> None:
    _check(rel, n_samples=12, max_len=80)
