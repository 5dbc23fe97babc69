"""JSON Schema through XGrammar's own converter (``formalgram_cfgzip.from_json_schema``).

Oracles: XGrammar itself.  (1) The returned text is XGrammar's grammar respelled: the
language formalgram reads from it (Earley) is the language of XGrammar's own grammar
object for the schema (its matcher), on the dataset's documents in several renderings and
on their mutations.  (2) The classes computed from the text are lossless for the masks
XGrammar enforces from its own, unmodified grammar (lookaheads included) over the full
Llama-3 vocabulary, on seeded walks; and for llguidance enforcing the same text.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from _data import JSON_SCHEMAS, SHARED_GRAMMARS

from formalgram import accepts, is_prefix, parse_gbnf
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.json_schema import from_json_schema, xgrammar_core_gbnf

xgr = pytest.importorskip("xgrammar")

pytestmark = pytest.mark.xgrammar

# The default run reads the schemas written for these tests (tests/data/json_schemas, valid
# instances under "examples"); the json-mode-eval schemas of the shared corpus are heavy cases.
SCHEMAS = SHARED_GRAMMARS / "json_schemas" / "json_mode_eval"
# the schemas whose XGrammar grammar keeps a Regex(...) macro (a "pattern"): refused
WITH_PATTERNS = {"JME_1", "JME_18", "JME_24", "JME_26"} | {
    p.stem for p in JSON_SCHEMAS.glob("*.json") if '"pattern"' in p.read_text(encoding="utf-8")
}
CORPORA = ["repo", pytest.param("shared", marks=pytest.mark.heavy)]
OPTION_SETS: list[dict[str, Any]] = [
    {},
    {"any_whitespace": False, "indent": 2},
    {"any_whitespace": False, "separators": (",", ":"), "strict_mode": False},
    {"max_whitespace_cnt": 2, "any_order": True},
]


def _schema_files(corpus: str = "repo") -> list[Path]:
    """The schema files of one corpus; the shared one skips (a heavy case) when absent."""
    if corpus == "repo":
        return sorted(JSON_SCHEMAS.glob("*.json"))
    if not SCHEMAS.is_dir():
        pytest.skip(f"shared schemas not found at {SCHEMAS}")
    return sorted(SCHEMAS.glob("JME_*.json"), key=lambda p: int(p.stem.split("_")[1]))


def _case(path: Path) -> dict[str, Any]:
    """``{"schema": ..., "tests": [{"data": ...}, ...]}`` for a file of either corpus."""
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if path.parent == JSON_SCHEMAS:  # a schema with its valid instances under "examples"
        return {"schema": case, "tests": [{"data": e} for e in case["examples"]]}
    return case


def _schema_path(name: str) -> Path:
    """A schema by name: written for the tests, else json-mode-eval's (skipped when absent)."""
    path = JSON_SCHEMAS / f"{name}.json"
    if path.is_file():
        return path
    path = SCHEMAS / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"shared schema {name} is absent")
    return path


def _xgrammar_verdicts(grammar: Any) -> Any:
    from xgrammar.testing import _get_matcher_from_grammar

    matcher = _get_matcher_from_grammar(grammar)

    def verdict(data: bytes) -> tuple[bool, bool]:
        matcher.reset()
        viable = bool(matcher.accept_string(data))
        return viable and bool(matcher.is_terminated()), viable

    return verdict


def _documents(case: dict[str, Any], options: dict[str, Any], rng: random.Random) -> list[bytes]:
    docs: list[bytes] = []
    for test in case.get("tests", []):
        data = test["data"]
        docs += [
            json.dumps(data).encode(),
            json.dumps(data, separators=(",", ":")).encode(),
            json.dumps(data, indent=2).encode(),
        ]
        if options.get("indent") is not None:
            docs.append(json.dumps(data, indent=options["indent"]).encode())
    mutated = []
    for doc in docs[:2]:
        for _ in range(3):
            i = rng.randrange(len(doc) + 1)
            mutated += [
                doc[:i],
                doc[:i] + bytes([rng.choice(b' "{}[],:0a\\')]) + doc[i:],
                doc[:i] + doc[i + 1 :],
            ]
    return docs + mutated


@pytest.mark.parametrize("corpus", CORPORA)
def test_every_schema_parses_in_both_or_is_refused_for_its_pattern(corpus: str) -> None:
    files = _schema_files(corpus)
    assert files
    for n, path in enumerate(files):
        schema = _case(path)["schema"]
        # every schema with XGrammar's defaults, every fifth with the other option sets too
        for options in OPTION_SETS if n % 5 == 0 or path.stem in WITH_PATTERNS else OPTION_SETS[:1]:
            if path.stem in WITH_PATTERNS:
                with pytest.raises(EngineError, match=r"Regex\(\.\.\.\)"):
                    from_json_schema(schema, **options)
                continue
            text = from_json_schema(schema, **options)
            parse_gbnf(text)  # formalgram reads it
            xgr.Grammar.from_ebnf(text)  # and so does XGrammar
            assert "(=" not in text and "-1}" not in text


@pytest.mark.parametrize(
    ("corpus", "stride"),
    [("repo", 0), *(pytest.param("shared", k, marks=pytest.mark.heavy) for k in range(4))],
)
def test_text_has_the_language_of_xgrammars_own_grammar(corpus: str, stride: int) -> None:
    """Every schema written for the tests (a quarter of the shared ones per heavy case), each
    with one option set, on its documents and their mutations."""
    step = 1 if corpus == "repo" else 4
    files = [p for p in _schema_files(corpus) if p.stem not in WITH_PATTERNS][stride::step]
    assert files
    rng = random.Random(stride)
    problems = []
    for n, path in enumerate(files):
        case = _case(path)
        options = OPTION_SETS[(n + stride) % len(OPTION_SETS)]
        text = from_json_schema(case["schema"], **options)
        ours = parse_gbnf(text)
        theirs = _xgrammar_verdicts(xgr.Grammar.from_json_schema(json.dumps(case["schema"]), **options))
        for doc in _documents(case, options, rng):
            if (accepts(ours, doc), is_prefix(ours, doc)) != theirs(doc):
                problems.append(f"{path.stem} {options}: {doc[:60]!r}")
    assert problems == []


def test_options_reach_the_converter() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    compact = parse_gbnf(from_json_schema(schema, any_whitespace=False, separators=(",", ":")))
    indented = parse_gbnf(from_json_schema(schema, any_whitespace=False, indent=2))
    free = parse_gbnf(from_json_schema(schema))
    assert accepts(compact, b'{"a":1}') and not accepts(compact, b'{"a": 1}')
    assert accepts(indented, b'{\n  "a": 1\n}') and not accepts(indented, b'{"a":1}')
    assert accepts(free, b'{ "a" :\n 1 }')
    assert from_json_schema(json.dumps(schema)) == from_json_schema(schema)  # text or value


def test_refusals_are_typed() -> None:
    schema = {"type": "string"}
    with pytest.raises(EngineError, match="llguidance compiles a JSON Schema inside its Rust code"):
        from_json_schema(schema, engine="llguidance")
    with pytest.raises(EngineError, match="unknown engine"):
        from_json_schema(schema, engine="outlines")
    with pytest.raises(EngineError, match="XGrammar cannot convert the schema"):
        from_json_schema("{not json")
    with pytest.raises(EngineError, match="not a JSON value"):
        from_json_schema({"type": object()})  # type: ignore[dict-item]
    with pytest.raises(EngineError, match="Regex"):
        from_json_schema({"type": "string", "pattern": "^a+$"})


def test_llguidance_exposes_no_grammar_text_for_a_schema() -> None:
    """The fact the refusal rests on: llguidance's JSON compiler returns the schema itself."""
    llg = pytest.importorskip("llguidance")
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    compiled = json.loads(llg.JsonCompiler().compile(json.dumps(schema)))
    (grammar,) = compiled["grammars"]
    assert grammar.get("lark_grammar") is None
    assert grammar["json_schema"]["properties"] == schema["properties"]


def test_rewrite_keeps_literals_and_refuses_macros() -> None:
    assert xgrammar_core_gbnf('a ::= ("{0, -1}" [(=)]{0, -1})') == 'a ::= ("{0, -1}" [(=)]{0,})'
    assert xgrammar_core_gbnf('a ::= (("x")) (=("(=" [)]))\nb ::= a{2, -1}') == 'a ::= (("x"))\nb ::= a{2,}'
    with pytest.raises(EngineError, match=r"line 2: XGrammar keeps the macro Regex"):
        xgrammar_core_gbnf('a ::= "x"\nb ::= Regex("[0-9]+", json_string=true)')
    with pytest.raises(EngineError, match="unterminated"):
        xgrammar_core_gbnf('a ::= "x')


# -- lossless against XGrammar's own grammar, Llama-3 -------------------------------------

LOSSLESS_CASES = [
    ("calendar_event", {}),
    ("geo_feature", {"any_whitespace": False, "indent": 2}),
    ("recipe", {}),
    pytest.param("JME_0", {}, marks=pytest.mark.heavy),
    pytest.param("JME_3", {"any_whitespace": False, "indent": 2}, marks=pytest.mark.heavy),
    pytest.param("JME_15", {}, marks=pytest.mark.heavy),
]


@pytest.mark.parametrize(("name", "options"), LOSSLESS_CASES)
def test_classes_lossless_against_xgrammars_own_grammar(name: str, options: dict[str, Any]) -> None:
    from test_engines import differential_walk

    from formalgram_cfgzip import Vocabulary, compress, engines

    schema = _case(_schema_path(name))["schema"]
    vocab = Vocabulary.builtin("llama3")
    text = from_json_schema(schema, **options)
    classes = compress(text, vocab, progress=False)
    compressed = engines.compile(classes, text)
    # the reference: XGrammar's grammar for the schema as XGrammar prints it, lookaheads kept
    own = str(xgr.Grammar.from_json_schema(json.dumps(schema), **options))
    assert "(=" in own
    full = engines.compile_full(vocab, own)
    assert differential_walk(compressed, full, steps=40, seed=1, batch=1, bias="long") == []
    assert differential_walk(compressed, full, steps=20, seed=2, batch=8, bias="stop") == []


def test_llguidance_enforcing_the_text_is_lossless_too() -> None:
    pytest.importorskip("llguidance")
    from test_engines import differential_walk

    from formalgram_cfgzip import Vocabulary, compress, engines

    vocab = Vocabulary.builtin("llama3")
    text = from_json_schema(_case(_schema_path("recipe"))["schema"])
    classes = compress(text, vocab, progress=False)
    compressed = engines.compile(classes, text, engine="llguidance")
    full = engines.compile_full(vocab, text, engine="llguidance")
    assert differential_walk(compressed, full, steps=20, seed=3, batch=2, bias="long") == []
