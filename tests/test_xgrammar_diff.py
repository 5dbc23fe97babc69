"""Differential test of the GBNF front end against XGrammar 0.2.x.

For every ``.gbnf`` / ``.ebnf`` file of the grammar corpus (tests/_data.py) that both
formalgram and XGrammar parse:

1. strings sampled from our grammar (:func:`formalgram.sample`) must be accepted by XGrammar;
2. random byte mutations and truncations of them must get the same verdicts from both sides,
   for membership (``accepts``) and for viability (``is_prefix``).

For the JSON schemas of ``tests/data/json_schemas``, each schema's ``examples`` (serialised
in several whitespace styles) and mutations of them must get the same verdicts from
formalgram and XGrammar on the checked-in grammar ``json_schemas/NAME.gbnf``, and the same
membership verdict from XGrammar's own grammar for the schema
(``Grammar.from_json_schema``, lookaheads and ``Regex`` macros included): that checks the
rewriting of ``tests/data/regenerate_json_schema_grammars.py``.  The examples are accepted.
With the shared corpus present, ``-m heavy`` also checks the json-mode-eval instances on
its derived grammars ``derived/json_mode_eval_xgrammar/JME_k.gbnf`` (accepted except the
documented JME_39, which XGrammar's own schema grammar rejects too).

XGrammar side: a :class:`xgrammar.GrammarMatcher` with an empty vocabulary, fed with
``accept_string(bytes)`` (byte-level, so non-UTF-8 input is fine).  ``accept_string`` returning
True means "the bytes form a viable prefix"; ``is_terminated()`` afterwards means "member".
A refused string leaves the matcher unchanged, so the matcher is reset before every string.

The default run checks every file of the in-repository corpus with a few strings (except
grammars whose members are all very long); ``pytest -m heavy`` sweeps every file of the
shared corpus when present and the in-repository one with more strings, longer ones and
three seeds.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _data
import pytest
from _counted import checks_at_least, gave_up
from _recognize_oracles import generating
from _xgrammar_child import Crash, Refused, prestart_shared_worker, shared_worker
from hypothesis import HealthCheck, given, settings

import formalgram
from formalgram import Grammar, accepts, is_prefix, sample
from formalgram.recognize.enumerate import _min_lengths, default_alphabet
from formalgram.testing import grammar_and_strings

xgr = pytest.importorskip("xgrammar")
xgr_testing = pytest.importorskip("xgrammar.testing")

pytestmark = pytest.mark.xgrammar
prestart_shared_worker()  # XGrammar on random grammars runs in this child process

JME_SCHEMAS = _data.SHARED_GRAMMARS / "json_schemas" / "json_mode_eval"

# Files whose shortest member is very long (nested {200} repeats: ~20 KB): heavy run only.
HEAVY_ONLY = {"xgrammar/test_fixtures/repeat_ref_complex_nested.ebnf"}


def _jme_ids() -> list[int]:
    if not JME_SCHEMAS.is_dir():
        return []
    return sorted(int(p.stem.split("_")[1]) for p in JME_SCHEMAS.glob("JME_*.json"))


class XGrammarOracle:
    """Verdicts of XGrammar on byte strings for one grammar text."""

    def __init__(self, text: str, root: str = "root") -> None:
        grammar = xgr.Grammar.from_ebnf(text, root_rule_name=root)
        self._matcher = xgr_testing._get_matcher_from_grammar(grammar)

    def verdict(self, data: bytes) -> tuple[bool, bool]:
        """``(is member, is viable prefix)`` according to XGrammar."""
        m = self._matcher
        m.reset()
        if not m.accept_string(data):
            return False, False
        return bool(m.is_terminated()), True


# Files XGrammar 0.2.9 refuses to read, and its message: the test checks the refusal (there
# is nothing to compare).  llama.cpp allows an empty alternative (``ws ::= | ...``).
XGRAMMAR_REFUSES = {
    "llama_cpp/json.gbnf": "Expect element, but got |",
    "llama_cpp/json_arr.gbnf": "Expect element, but got |",
}


def _load_both(rel: str, path: Path) -> tuple[Grammar, XGrammarOracle] | None:
    """formalgram's grammar and XGrammar's verdicts for one file; ``None`` after checking
    that XGrammar refuses a file of ``XGRAMMAR_REFUSES``."""
    text = path.read_text(encoding="utf-8")
    if rel in XGRAMMAR_REFUSES:
        with pytest.raises(RuntimeError, match=re.escape(XGRAMMAR_REFUSES[rel])):
            XGrammarOracle(text)
        return None
    oracle = XGrammarOracle(text)
    # lookahead assertions (xgrammar/builtin_json.ebnf) are hints that XGrammar reads too;
    # formalgram refuses them unless told to drop them (pinned by test_parse.py)
    return formalgram.load(path, lookahead="drop"), oracle


def _mutants(rng: random.Random, members: list[bytes], letters: bytes, count: int) -> Iterator[bytes]:
    """Random one- to three-byte mutations and truncations of ``members``."""
    pool = letters or bytes(range(32, 127))
    for _ in range(count):
        s = bytearray(rng.choice(members))
        kind = rng.randrange(5)
        if kind == 0 and s:  # truncation: exercises is_prefix
            del s[rng.randrange(len(s) + 1) :]
        else:
            for _ in range(rng.randint(1, 3)):
                op = rng.randrange(3)
                b = rng.choice(pool) if rng.random() < 0.8 else rng.randrange(256)
                if op == 0 or not s:
                    s.insert(rng.randrange(len(s) + 1), b)
                elif op == 1:
                    del s[rng.randrange(len(s))]
                else:
                    s[rng.randrange(len(s))] = b
        yield bytes(s)


def _diff_one(rel: str, path: Path, n_samples: int, n_mutants: int, max_len: int, seed: int) -> None:
    both = _load_both(rel, path)
    if both is None:
        return
    g, oracle = both
    try:
        members = sample(g, n_samples, seed=seed, max_len=max_len)
    except formalgram.GrammarError:
        # every member is longer than max_len (e.g. nested {200} repeats): allow the shortest plus slack
        shortest = _min_lengths(g)[0][g.start_id]
        members = sample(g, n_samples, seed=seed, max_len=shortest + max_len)
    problems: list[str] = []
    for s in members:
        ours = accepts(g, s)
        theirs = oracle.verdict(s)
        if not (ours and theirs[0]):
            problems.append(f"sampled {s!r}: formalgram accepts={ours}, xgrammar member/prefix={theirs}")
    rng = random.Random(f"{rel}:{seed}")
    for s in _mutants(rng, members, default_alphabet(g), n_mutants):
        ours_v = (accepts(g, s), is_prefix(g, s))
        theirs = oracle.verdict(s)
        if ours_v != theirs:
            problems.append(f"mutant {s!r}: formalgram (member, prefix)={ours_v}, xgrammar={theirs}")
    assert not problems, f"{rel}: {len(problems)} disagreement(s):\n" + "\n".join(problems[:10])


@pytest.mark.parametrize("rel", [r for r in _data.grammar_files() if r not in HEAVY_ONLY])
def test_diff_default(rel: str) -> None:
    _diff_one(rel, _data.GRAMMARS / rel, n_samples=12, n_mutants=50, max_len=64, seed=0)


@pytest.mark.heavy
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("rel", _data.sweep_files())
def test_diff_full(rel: str, seed: int) -> None:
    _diff_one(rel, _data.real_grammar(rel), n_samples=60, n_mutants=300, max_len=200, seed=seed)


# -- JSON-schema instances ------------------------------------------------------------------


def _renderings(doc: Any) -> list[bytes]:
    return [
        json.dumps(doc).encode(),
        json.dumps(doc, separators=(",", ":")).encode(),
        json.dumps(doc, indent=2).encode(),
        json.dumps(doc, ensure_ascii=False).encode(),
    ]


@pytest.mark.parametrize("name", _data.json_schema_names())
def test_json_schema_examples(name: str) -> None:
    rel = f"json_schemas/{name}.gbnf"
    both = _load_both(rel, _data.grammar(rel))
    assert both is not None
    g, oracle = both
    schema_text = (_data.JSON_SCHEMAS / f"{name}.json").read_text(encoding="utf-8")
    converted = xgr.Grammar.from_json_schema(schema_text, any_whitespace=True, strict_mode=True)
    direct = xgr_testing._get_matcher_from_grammar(converted)
    examples = json.loads(schema_text)["examples"]
    docs = [doc for case in examples for doc in _renderings(case)]
    rng = random.Random(name)
    problems: list[str] = []
    for doc in docs + list(_mutants(rng, docs, b'{}[]",:0123456789.-eE atrufnl', 200)):
        ours = (accepts(g, doc), is_prefix(g, doc))
        theirs = oracle.verdict(doc)
        direct.reset()
        schema_member = bool(direct.accept_string(doc)) and bool(direct.is_terminated())
        if ours != theirs or ours[0] != schema_member:
            problems.append(
                f"{doc[:80]!r}: formalgram={ours}, xgrammar={theirs}, schema grammar={schema_member}"
            )
    for doc in docs:
        if not accepts(g, doc):
            problems.append(f"example rejected: {doc[:80]!r}")
    assert not problems, f"{name}:\n" + "\n".join(problems[:10])


# the json-mode-eval schemas cannot be redistributed: the shared corpus only
def _jme_check(k: int) -> None:
    rel = f"derived/json_mode_eval_xgrammar/JME_{k}.gbnf"
    both = _load_both(rel, _data.SHARED_GRAMMARS / rel)
    assert both is not None
    g, oracle = both
    spec = json.loads((JME_SCHEMAS / f"JME_{k}.json").read_text(encoding="utf-8"))
    problems: list[str] = []
    for case in spec.get("tests", []):
        for doc in _renderings(case["data"]):
            ours = (accepts(g, doc), is_prefix(g, doc))
            theirs = oracle.verdict(doc)
            if ours != theirs:
                problems.append(f"{doc[:80]!r}...: formalgram={ours}, xgrammar={theirs}")
            elif case.get("valid", True) and k != 39 and not ours[0]:
                problems.append(f"valid instance rejected by both: {doc[:80]!r}...")
    assert not problems, f"JME_{k}:\n" + "\n".join(problems)


@pytest.mark.heavy
@pytest.mark.parametrize("k", _jme_ids())
def test_jme_instances(k: int) -> None:
    _jme_check(k)


# -- random grammars, printed with to_gbnf --------------------------------------------------


def _has_dead_rule(g: Grammar) -> bool:
    gen = generating(g)
    return any(any((x not in gen) if x >= 0 else g.masks[~x] == 0 for x in rhs) for _, rhs in g.rules)


# XGrammar runs in a child process (tests/_xgrammar_child.py) so that a crash on a random grammar
# is reported with the grammar text instead of killing pytest.  The printer never writes {m,n},
# so the known XGrammar 0.2.9 crash (a rule repeating itself with {m,n}) cannot occur here:
# any crash fails the test.
@checks_at_least(60)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    grammar_and_strings(max_nonterminals=4, max_rules_per_nt=3, max_rhs=3, alphabet=b"abc", max_strings=10)
)
def test_random_grammars_against_xgrammar(gs: tuple[Grammar, list[bytes]]) -> None:
    """Membership always agrees; viability agrees when every rule can complete.

    Known difference (XGrammar 0.2.9): XGrammar treats a prefix as viable as soon as some
    rule matches it, even a rule with a non-generating symbol that can never complete; e.g. for
    ``root ::= "a" x | "b"`` and ``x ::= x "c"`` it accepts the prefix ``a``.  formalgram's
    ``is_prefix`` is exact, so viability is compared exactly only on grammars without such
    rules; on the others, a prefix Earley calls viable must be viable for XGrammar too (pinned
    with tokens in ``test_soundness.py::test_xgrammar_allows_a_token_no_parse_accepts``).
    """
    g, strings = gs
    if g.start_id not in generating(g):
        return gave_up()
    text = formalgram.to_gbnf(g)
    result = shared_worker().run(text, strings, root=g.names[g.start_id])
    if isinstance(result, Crash):
        pytest.fail(result.describe())
    assert not isinstance(result, Refused), f"{result.message}\n{text}"
    exact = not _has_dead_rule(g)
    for s, (member, viable) in zip(strings, result, strict=True):
        assert accepts(g, s) == member, s
        if exact:
            assert is_prefix(g, s) == viable, s
        else:  # XGrammar may call more prefixes viable (through rules that cannot complete), never fewer
            assert viable or not is_prefix(g, s), s
