"""JSON Schema through XGrammar's own converter (``formalgram_cfgzip.from_json_schema``).

Oracles: XGrammar itself.  (1) The returned text is XGrammar's grammar respelled: the
language formalgram reads from it (Earley) is the language of XGrammar's own grammar
object for the schema (its matcher, ``Regex(...)`` macros and lookaheads kept), on the
dataset's documents in several renderings and on their mutations, and for ``pattern``s
(the schemas' own and generated ones) on generated strings.  (2) The classes computed
from the text are lossless for the masks XGrammar enforces from its own, unmodified
grammar over the full Llama-3 vocabulary, on seeded walks; and for llguidance enforcing
the same text.  (3) ``pattern``s stay XGrammar's ``Regex(...)`` macros and are read from
XGrammar's own automaton, including where XGrammar's reading differs from the pattern's
textbook one; those differences are pinned against XGrammar's own matcher.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from _data import JSON_SCHEMAS, SHARED_GRAMMARS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formalgram import accepts, is_prefix, parse_gbnf
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.grammar_text import read_grammar
from formalgram_cfgzip.json_schema import from_json_schema, xgrammar_core_gbnf

xgr = pytest.importorskip("xgrammar")

pytestmark = pytest.mark.xgrammar

# The default run reads the schemas written for these tests (tests/data/json_schemas, valid
# instances under "examples"); the json-mode-eval schemas of the shared corpus are heavy cases.
SCHEMAS = SHARED_GRAMMARS / "json_schemas" / "json_mode_eval"
# the schemas whose XGrammar grammar keeps a Regex(...) macro (a "pattern"); JME_1's
# "^(/[^/]+)+$" and JME_24's "^/dev/[^/]+(/[^/]+)*$" hold a negated class, which XGrammar's
# automaton encodes with overlong UTF-8 sequences
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
        # inside the string values, where the patterns are: characters of other classes
        quotes = [m.start() for m in re.finditer(rb'"', doc)]
        for i in rng.sample(quotes, min(6, len(quotes))):
            for insert in (b"A", b"z", b"7", b"-", b"_", b" ", "\u00e9".encode(), b"\xe0\x80", b"\\n"):
                mutated.append(doc[:i] + insert + doc[i:])
            mutated.append(doc[:i] + doc[i + 1 :])
    return docs + mutated


@pytest.mark.parametrize("corpus", CORPORA)
def test_every_schema_parses_in_both(corpus: str) -> None:
    files = _schema_files(corpus)
    assert files
    for n, path in enumerate(files):
        schema = _case(path)["schema"]
        # every schema with XGrammar's defaults, every fifth with the other option sets too
        for options in OPTION_SETS if n % 5 == 0 or path.stem in WITH_PATTERNS else OPTION_SETS[:1]:
            text = from_json_schema(schema, **options)
            read_grammar(text)  # formalgram reads it, macros from XGrammar's automata
            xgr.Grammar.from_ebnf(text)  # and so does XGrammar
            assert "(=" not in text and "-1}" not in text
            # a pattern stays XGrammar's macro, exactly where XGrammar's own grammar has one
            assert ("Regex(" in text) == (path.stem in WITH_PATTERNS)
            if path.stem in WITH_PATTERNS:
                assert "Regex(" in str(xgr.Grammar.from_json_schema(json.dumps(schema), **options))


@pytest.mark.parametrize(
    ("corpus", "stride"),
    [("repo", 0), *(pytest.param("shared", k, marks=pytest.mark.heavy) for k in range(4))],
)
def test_text_has_the_language_of_xgrammars_own_grammar(corpus: str, stride: int) -> None:
    """Every schema written for the tests (a quarter of the shared ones per heavy case), each
    with one option set, on its documents and their mutations."""
    step = 1 if corpus == "repo" else 4
    files = _schema_files(corpus)[stride::step]
    assert files
    rng = random.Random(stride)
    problems = []
    for n, path in enumerate(files):
        case = _case(path)
        options = OPTION_SETS[(n + stride) % len(OPTION_SETS)]
        text = from_json_schema(case["schema"], **options)
        ours = read_grammar(text)
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
    with pytest.raises(EngineError, match=r"XGrammar cannot convert the schema.*Backreference"):
        from_json_schema({"type": "string", "pattern": "(a)\\1"})


def test_llguidance_exposes_no_grammar_text_for_a_schema() -> None:
    """The fact the refusal rests on: llguidance's JSON compiler returns the schema itself."""
    llg = pytest.importorskip("llguidance")
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    compiled = json.loads(llg.JsonCompiler().compile(json.dumps(schema)))
    (grammar,) = compiled["grammars"]
    assert grammar.get("lark_grammar") is None
    assert grammar["json_schema"]["properties"] == schema["properties"]


def test_rewrite_keeps_literals_and_regex_macros_and_refuses_other_macros() -> None:
    assert xgrammar_core_gbnf('a ::= ("{0, -1}" [(=)]{0, -1})') == 'a ::= ("{0, -1}" [(=)]{0,})'
    assert xgrammar_core_gbnf('a ::= (("x")) (=("(=" [)]))\nb ::= a{2, -1}') == 'a ::= (("x"))\nb ::= a{2,}'
    for text in (
        'a ::= "x"\nb ::= ("x" Regex("[0-9]+", json_string=true) [a-z ])',
        'a ::= "x"\nb ::= Regex("[0-9\\"(]+\\)")',
    ):
        assert xgrammar_core_gbnf(text) == text
    with pytest.raises(EngineError, match=r"line 2: XGrammar keeps the macro TagDispatch"):
        xgrammar_core_gbnf('a ::= "x"\nb ::= TagDispatch(("<", a))')
    with pytest.raises(EngineError, match="unterminated"):
        xgrammar_core_gbnf('a ::= "x')


# -- patterns: the language of XGrammar's Regex(..., json_string=true) ---------------------


def _patterns(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
        return found.union(*(_patterns(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_patterns(v) for v in node))
    return set()


REPO_PATTERNS = sorted(
    set().union(*(_patterns(json.loads(p.read_text())) for p in JSON_SCHEMAS.glob("*.json")))
)

# simple ECMA-262 patterns, among them the shapes XGrammar reads loosely
_ATOMS = [
    "a",
    "b",
    "Z",
    "7",
    "-",
    "_",
    " ",
    ":",
    "\\.",
    "\\-",
    "\\/",
    "[a-c]",
    "[0-9]",
    "[A-Z_]",
    "[\\-.x]",
    "[a-z\\s]",
    "\\d",
    "\\w",
    "\\s",
    "[\\u00e0-\\u00ff]",
    "[\\u4e00-\\u9fff]",
    "\\u00e9",
    ".",
    "[^/]",
    "\\W",
    "\\D",
    "[\\^a]",
]
_QUANTIFIERS = ["", "", "", "?", "*", "+", "{2}", "{1,3}", "{2,}", "*?"]


@st.composite
def _simple_patterns(draw: st.DrawFn) -> str:
    def piece(depth: int) -> str:
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            inner = "|".join(sequence(depth + 1) for _ in range(draw(st.integers(1, 2))))
            return draw(st.sampled_from(["(", "(?:"])) + inner + ")" + draw(st.sampled_from(_QUANTIFIERS))
        return draw(st.sampled_from(_ATOMS)) + draw(st.sampled_from(_QUANTIFIERS))

    def sequence(depth: int) -> str:
        return "".join(piece(depth) for _ in range(draw(st.integers(1, 3))))

    return draw(st.sampled_from(["", "^"])) + sequence(0) + draw(st.sampled_from(["", "$"]))


def _strings_for(pattern: str) -> st.SearchStrategy[bytes]:
    """Bytes near the pattern's language: its strings (Python's reading, close to ECMA's for
    these shapes), arbitrary text, and either with a byte the JSON string forbids or an
    invalid UTF-8 sequence put in."""
    try:
        matching = st.from_regex(pattern, fullmatch=True).map(lambda t: t.encode())
    except re.error:  # pragma: no cover - every generated pattern is Python-readable
        matching = st.nothing()
    alphabet = st.sampled_from(sorted(set(re.sub(r"\\.", "", pattern)) | set('aZ7-_ "\\\n\té中')))
    text = st.text(alphabet, max_size=12).map(lambda t: t.encode())
    spice = st.sampled_from([b"", b'"', b"\\", b"\x00", b"\x1f", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xc3"])
    return st.one_of(
        matching,
        text,
        st.tuples(matching, st.integers(0, 12), spice).map(lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]),
    )


def _pattern_oracles(pattern: str) -> tuple[Any, Any, Any]:
    """(XGrammar on its own grammar, formalgram on the text, XGrammar on the text) for a
    ``{"type": "string", "pattern": ...}`` schema."""
    schema = {"type": "string", "pattern": pattern}
    own = xgr.Grammar.from_json_schema(json.dumps(schema))
    text = from_json_schema(schema)
    assert "Regex(" in str(own) and "Regex(" in text, "no macro; the test would not test the reading"
    return _xgrammar_verdicts(own), read_grammar(text), _xgrammar_verdicts(xgr.Grammar.from_ebnf(text))


def _check_strings(pattern: str, oracles: tuple[Any, Any, Any], samples: list[bytes]) -> list[bytes]:
    theirs, ours, theirs_on_text = oracles
    wrong = []
    for sample in samples:
        for doc in (b'"' + sample + b'"', b'"' + sample):
            verdict = theirs(doc)
            if (accepts(ours, doc), is_prefix(ours, doc)) != verdict or theirs_on_text(doc) != verdict:
                wrong.append(doc)
    return wrong


@pytest.mark.parametrize("pattern", REPO_PATTERNS)
def test_the_schemas_patterns_have_xgrammars_language(pattern: str) -> None:
    oracles = _pattern_oracles(pattern)

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_strings_for(pattern), min_size=1, max_size=8))
    def check(samples: list[bytes]) -> None:
        assert _check_strings(pattern, oracles, samples) == []

    check()


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(_simple_patterns(), st.data())
def test_generated_patterns_have_xgrammars_language(pattern: str, data: st.DataObject) -> None:
    oracles = _pattern_oracles(pattern)
    samples = data.draw(st.lists(_strings_for(pattern), min_size=4, max_size=12))
    assert _check_strings(pattern, oracles, samples) == []


@pytest.mark.parametrize(
    ("pattern", "theirs_accepts", "not_in_pattern"),
    [
        # a negated class, '.', \W: XGrammar's automaton takes overlong and surrogate sequences
        ("^[^/]+$", b'"\xe0\x80\x80"', None),
        (".", b'"\xed\xa0\x80"', None),
        ("a\\W", b'"a\xf0\x80\x80\x80"', None),
        # an optional group holding a variable repetition: XGrammar takes "b" for (ab*)?
        ("(ab*)?", b'"b"', "(ab*)?"),
        ("(ab{0,2}){2,}", b'"aabbbab"', "(ab{0,2}){2,}"),
        ("((ab*))?", b'"b"', "((ab*))?"),  # nested
        # a lazy quantifier is the greedy one under a whole-string match
        ("^https://x/.+?$", b'"https://x/a?b"', None),
    ],
)
def test_xgrammars_own_reading_of_a_pattern_is_the_one_read(
    pattern: str, theirs_accepts: bytes, not_in_pattern: str | None
) -> None:
    """Where XGrammar's automaton is not the pattern's textbook language, the text's grammar
    is XGrammar's: it accepts what XGrammar accepts and the pattern does not."""
    schema = {"type": "string", "pattern": pattern}
    accepted, _ = _xgrammar_verdicts(xgr.Grammar.from_json_schema(json.dumps(schema)))(theirs_accepts)
    assert accepted  # the fact: XGrammar's own grammar takes it
    assert accepts(read_grammar(from_json_schema(schema)), theirs_accepts)
    body = theirs_accepts[1:-1]
    if not_in_pattern is not None:  # the pattern does not hold it (Python's reading agrees here)
        assert re.fullmatch(not_in_pattern, body.decode()) is None
    elif pattern != "^https://x/.+?$":  # not UTF-8 at all
        with pytest.raises(UnicodeDecodeError):
            body.decode()


def test_xgrammar_reads_json_string_patterns_as_a_whole_string_without_json_escapes() -> None:
    """The json_string facts the rewrite rests on: anchors change nothing, the match is the
    whole string, escapes are not read, and the forbidden bytes go from every class."""
    for pattern in ("[a-z\\s]+", "^[a-z\\s]+$"):
        verdict = _xgrammar_verdicts(
            xgr.Grammar.from_json_schema(json.dumps({"type": "string", "pattern": pattern}))
        )
        assert verdict(b'"ab c"') == (True, True)
        assert verdict(b'"ab\tc"')[1] is False  # \s holds a tab, json_string does not
        assert verdict(b'"ab\\tc"')[1] is False  # nor the JSON escape for it
        assert verdict(b'"1ab"')[1] is False  # a whole-string match
    text = from_json_schema({"type": "string", "pattern": "[a-z\\s]+"})
    assert accepts(read_grammar(text), b'"ab c"') and not is_prefix(read_grammar(text), b'"ab\t')


def test_key_patterns_and_escaped_punctuation_are_read_too() -> None:
    """patternProperties and propertyNames keep the same macro; a pattern with '?' prints
    escaped (``\\?``) and is read back as the schema's pattern."""
    cases = [
        (
            {"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer"}}},
            b'{"x_ab": 1}',
            b'{"y": 1}',
        ),
        ({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}, b'{"ab": [1]}', b'{"aB": 1}'),
        ({"type": "string", "pattern": "a\\?b?[?*+]{2}"}, b'"a?b?*"', b'"ab?*"'),
    ]
    for schema, good, bad in cases:
        own = xgr.Grammar.from_json_schema(json.dumps(schema))
        assert "Regex(" in str(own)
        ours = read_grammar(from_json_schema(schema))
        theirs = _xgrammar_verdicts(own)
        for doc in (good, bad, good[:-1], bad[:-1]):
            assert (accepts(ours, doc), is_prefix(ours, doc)) == theirs(doc)
        assert accepts(ours, good) and not is_prefix(ours, bad)


# -- lossless against XGrammar's own grammar, Llama-3 -------------------------------------

LOSSLESS_CASES = [
    ("calendar_event", {}),
    ("invoice", {}),
    ("user_profile", {"any_whitespace": False, "indent": 2}),
    ("geo_feature", {"any_whitespace": False, "indent": 2}),
    ("recipe", {}),
    pytest.param("JME_0", {}, marks=pytest.mark.heavy),
    pytest.param("JME_3", {"any_whitespace": False, "indent": 2}, marks=pytest.mark.heavy),
    pytest.param("JME_15", {}, marks=pytest.mark.heavy),
    pytest.param("JME_18", {}, marks=pytest.mark.heavy),  # a pattern
]


@pytest.mark.parametrize(("name", "options"), LOSSLESS_CASES)
def test_classes_lossless_against_xgrammars_own_grammar(name: str, options: dict[str, Any]) -> None:
    from test_engines import differential_walk

    from formalgram_cfgzip import Vocabulary, compress, engines

    schema = _case(_schema_path(name))["schema"]
    vocab = Vocabulary.builtin("llama3")
    text = from_json_schema(schema, **options)
    classes = compress(text, vocab, progress=False)
    compressed = engines.compile_grammar(classes, text)
    # the reference: XGrammar's grammar for the schema as XGrammar prints it, lookaheads kept
    own = str(xgr.Grammar.from_json_schema(json.dumps(schema), **options))
    assert "(=" in own
    full = engines.compile_full(vocab, own)
    assert differential_walk(compressed, full, steps=40, seed=1, batch=1, bias="long") == []
    assert differential_walk(compressed, full, steps=20, seed=2, batch=8, bias="stop") == []


# patterns XGrammar reads loosely or with its own automaton (overlong UTF-8 under '.' and
# negated classes, lazy quantifiers, \w, large counted repetitions, an optional group holding
# a variable repetition)
LOOSE_PATTERNS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "pattern": "^https://example\\.org/.+?$"},
        "handle": {"type": "string", "pattern": "^[\\+\\w-]{5,96}$"},
        "path": {"type": "string", "pattern": "^(/[^/]+)+$"},
        "escaped": {"type": "string", "pattern": "^([a-z]|%[0-9a-fA-F]{2})*$"},
        "loose": {"type": "string", "pattern": "^(ab*)?c$"},
        "note": {"type": "string", "maxLength": 40},
    },
    "required": ["url", "handle", "path"],
}


@pytest.mark.parametrize("engine", ["xgrammar", "native"])
def test_classes_lossless_on_loosely_read_patterns(engine: str) -> None:
    """Classes computed from XGrammar's own automata of the patterns give XGrammar's masks."""
    from test_engines import differential_walk

    from formalgram_cfgzip import Vocabulary, compress, engines

    vocab = Vocabulary.builtin("llama3")
    text = from_json_schema(LOOSE_PATTERNS_SCHEMA)
    assert text.count("Regex(") == 5
    classes = compress(text, vocab, progress=False, domains=engine == "native")
    compressed = engines.compile_grammar(classes, text, engine=engine)  # type: ignore[arg-type]
    own = str(xgr.Grammar.from_json_schema(json.dumps(LOOSE_PATTERNS_SCHEMA)))
    full = engines.compile_full(vocab, own)
    assert differential_walk(compressed, full, steps=60, seed=4, batch=1, bias="long") == []
    assert differential_walk(compressed, full, steps=30, seed=5, batch=4, bias="stop") == []


def test_llguidance_enforcing_the_text_is_lossless_too() -> None:
    pytest.importorskip("llguidance")
    from test_engines import differential_walk

    from formalgram_cfgzip import Vocabulary, compress, engines

    vocab = Vocabulary.builtin("llama3")
    text = from_json_schema(_case(_schema_path("recipe"))["schema"])
    classes = compress(text, vocab, progress=False)
    compressed = engines.compile_grammar(classes, text, engine="llguidance")
    full = engines.compile_full(vocab, text, engine="llguidance")
    assert differential_walk(compressed, full, steps=20, seed=3, batch=2, bias="long") == []
