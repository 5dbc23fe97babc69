"""to_gnf on real grammars (proofs/normal_forms.md §6, checked on real inputs).

For every real GBNF/EBNF grammar that parses, ``to_gnf`` must succeed within the default
budget, give a GNF grammar, and agree with the Earley oracle on the original grammar for
sampled members and one-byte mutations of them.  The default run checks a fixed selection
of the in-repository corpus (including the three big derived SynCode / xml2rfc grammars);
``-m heavy`` checks every file of both corpora (the shared one when present; tests/_data.py).
"""

from __future__ import annotations

import random

import _data
import pytest

from formalgram import Grammar, GrammarError, is_gnf, to_gnf
from formalgram.recognize import accepts, sample
from formalgram.recognize.enumerate import _min_lengths
from formalgram.syntax.gbnf import load

BUDGET = 200_000

DEFAULT_SET = [
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    "derived/lark_via_xgrammar/c_syncode.gbnf",
    "json_schemas/calendar_event.gbnf",
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


def _check(rel: str, g: Grammar, n_samples: int, max_len: int) -> None:
    h = to_gnf(g, budget=BUDGET)
    assert is_gnf(h)
    assert len(h.rules) <= SIZE_BOUNDS.get(rel, 1 << 30), (rel, len(h.rules))
    try:
        members = sample(g, n_samples, seed=7, max_len=max_len)
    except GrammarError:  # the shortest member is longer than max_len: a little longer than it
        shortest = _min_lengths(g)[0][g.start_id]
        members = sample(g, n_samples, seed=7, max_len=shortest + max_len)
    assert members
    rng = random.Random(rel)
    letters = bytes(sorted({b for w in members for b in w} | set(b" a0{\n")))
    for w in members:
        assert accepts(h, w), (rel, w)
        for m in _mutations(w, rng, letters):
            assert accepts(h, m) == accepts(g, m), (rel, m)


@pytest.mark.parametrize("rel", DEFAULT_SET)
def test_to_gnf_real_default(rel: str) -> None:
    """proofs/normal_forms.md §6 on real grammars: same verdicts as the Earley oracle."""
    _check(rel, load(_data.grammar(rel)), n_samples=4, max_len=40)


@pytest.mark.heavy
@pytest.mark.parametrize("rel", _data.sweep_files())
def test_to_gnf_real_all(rel: str) -> None:
    # lookahead assertions (xgrammar/builtin_json.ebnf) are hints: dropped, as test_parse.py does
    _check(rel, load(_data.real_grammar(rel), lookahead="drop"), n_samples=12, max_len=80)
