"""JSON Schema through XGrammar's own converter (``formalgram_cfgzip.from_json_schema``).

Oracles: XGrammar itself.  (1) The returned text is XGrammar's grammar respelled: the
language formalgram reads from it (Earley) is the language of XGrammar's own grammar
object for the schema (its matcher, ``Regex(...)`` macros and lookaheads kept), on the
dataset's documents in several renderings and on their mutations, and for ``pattern``s
(the schemas' own and generated ones) on generated strings.  (2) The classes computed
from the text are lossless for the masks XGrammar enforces from its own, unmodified
grammar over the full Llama-3 vocabulary, on seeded walks; and for llguidance enforcing
the same text.  (3) The facts the pattern refusals rest on are pinned against XGrammar's
own matcher.
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
from formalgram_cfgzip.json_schema import from_json_schema, xgrammar_core_gbnf

xgr = pytest.importorskip("xgrammar")

pytestmark = pytest.mark.xgrammar

# The default run reads the schemas written for these tests (tests/data/json_schemas, valid
# instances under "examples"); the json-mode-eval schemas of the shared corpus are heavy cases.
SCHEMAS = SHARED_GRAMMARS / "json_schemas" / "json_mode_eval"
# the schemas whose XGrammar grammar keeps a Regex(...) macro (a "pattern")
WITH_PATTERNS = {"JME_1", "JME_18", "JME_24", "JME_26"} | {
    p.stem for p in JSON_SCHEMAS.glob("*.json") if '"pattern"' in p.read_text(encoding="utf-8")
}
# ... and those among them refused: JME_1's "^(/[^/]+)+$" and JME_24's "^/dev/[^/]+(/[^/]+)*$"
# have a negated class, which XGrammar's automaton encodes with overlong UTF-8 sequences
REFUSED = {"JME_1", "JME_24"}
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
def test_every_schema_parses_in_both_or_is_refused_for_its_pattern(corpus: str) -> None:
    files = _schema_files(corpus)
    assert files
    for n, path in enumerate(files):
        schema = _case(path)["schema"]
        # every schema with XGrammar's defaults, every fifth with the other option sets too
        for options in OPTION_SETS if n % 5 == 0 or path.stem in WITH_PATTERNS else OPTION_SETS[:1]:
            if path.stem in REFUSED:
                with pytest.raises(EngineError, match=r"the JSON Schema pattern '.+' \(XGrammar's Regex"):
                    from_json_schema(schema, **options)
                continue
            text = from_json_schema(schema, **options)
            parse_gbnf(text)  # formalgram reads it
            xgr.Grammar.from_ebnf(text)  # and so does XGrammar
            assert "(=" not in text and "-1}" not in text and "Regex(" not in text
            if path.stem in WITH_PATTERNS:  # the macro was there and is expanded
                assert "Regex(" in str(xgr.Grammar.from_json_schema(json.dumps(schema), **options))


@pytest.mark.parametrize(
    ("corpus", "stride"),
    [("repo", 0), *(pytest.param("shared", k, marks=pytest.mark.heavy) for k in range(4))],
)
def test_text_has_the_language_of_xgrammars_own_grammar(corpus: str, stride: int) -> None:
    """Every schema written for the tests (a quarter of the shared ones per heavy case), each
    with one option set, on its documents and their mutations."""
    step = 1 if corpus == "repo" else 4
    files = [p for p in _schema_files(corpus) if p.stem not in REFUSED][stride::step]
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
    with pytest.raises(EngineError, match=r"the JSON Schema pattern '\^\[\^a\]\+\$'"):
        from_json_schema({"type": "string", "pattern": "^[^a]+$"})


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
    expanded = 'a ::= "x"\nb ::= ("x" ([0-9]+) [a-z ])'
    assert xgrammar_core_gbnf('a ::= "x"\nb ::= ("x" Regex("[0-9]+", json_string=true) [a-z ])') == expanded
    with pytest.raises(EngineError, match=r"line 2: XGrammar keeps the macro Regex"):
        xgrammar_core_gbnf('a ::= "x"\nb ::= Regex("[0-9]+")')  # not inside a JSON string
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

# simple ECMA-262 patterns of the shapes the rewrite expands (and some it refuses)
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


def _pattern_oracles(pattern: str) -> tuple[Any, Any, Any] | None:
    """(XGrammar on its own grammar, formalgram on the text, XGrammar on the text) for a
    ``{"type": "string", "pattern": ...}`` schema, None when the pattern is refused."""
    schema = {"type": "string", "pattern": pattern}
    own = xgr.Grammar.from_json_schema(json.dumps(schema))
    try:
        text = from_json_schema(schema)
    except EngineError as exc:
        assert pattern in str(exc) or repr(pattern) in str(exc)
        return None
    assert "Regex(" in str(own), "XGrammar kept no macro; the test would not test the rewrite"
    return _xgrammar_verdicts(own), parse_gbnf(text), _xgrammar_verdicts(xgr.Grammar.from_ebnf(text))


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
    assert oracles is not None, f"{pattern!r} is refused"

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_strings_for(pattern), min_size=1, max_size=8))
    def check(samples: list[bytes]) -> None:
        assert _check_strings(pattern, oracles, samples) == []

    check()


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(_simple_patterns(), st.data())
def test_generated_patterns_have_xgrammars_language_or_are_refused(pattern: str, data: st.DataObject) -> None:
    oracles = _pattern_oracles(pattern)
    if oracles is None:
        return
    samples = data.draw(st.lists(_strings_for(pattern), min_size=4, max_size=12))
    assert _check_strings(pattern, oracles, samples) == []


@pytest.mark.parametrize(
    ("pattern", "why", "theirs_accepts", "not_in_pattern"),
    [
        # a negated class, '.', \W: XGrammar's automaton takes overlong and surrogate sequences
        ("^[^/]+$", "overlong or surrogate", b'"\xe0\x80\x80"', None),
        (".", "overlong or surrogate", b'"\xed\xa0\x80"', None),
        ("a\\W", "overlong or surrogate", b'"a\xf0\x80\x80\x80"', None),
        # an optional group holding a variable repetition: XGrammar takes "b" for (ab*)?
        ("(ab*)?", "made optional or repeated without bound", b'"b"', "(ab*)?"),
        ("(ab{0,2}){2,}", "made optional or repeated without bound", b'"aabbbab"', "(ab{0,2}){2,}"),
        ("((ab*))?", "made optional or repeated without bound", b'"b"', "((ab*))?"),  # nested
        # XGrammar's regex converter reads [\^a] as [^a]
        ("[\\^a]", "reads", None, None),
        ("(?i)ab", "assertions, names, flags", None, None),
        ("a^b", "not at an end", None, None),
        ("a|", "empty alternative", None, None),
        ("[a\\bz]", "is not supported", None, None),
    ],
)
def test_pattern_refusals_are_typed_and_rest_on_xgrammars_behaviour(
    pattern: str, why: str, theirs_accepts: bytes | None, not_in_pattern: str | None
) -> None:
    schema = {"type": "string", "pattern": pattern}
    with pytest.raises(EngineError, match=re.escape(repr(pattern)) + ".*" + re.escape(why)):
        from_json_schema(schema)
    if theirs_accepts is not None:  # the fact the refusal rests on, on XGrammar's own grammar
        accepted, _ = _xgrammar_verdicts(xgr.Grammar.from_json_schema(json.dumps(schema)))(theirs_accepts)
        assert accepted
        body = theirs_accepts[1:-1]
        if not_in_pattern is not None:  # the pattern does not hold it (Python's reading agrees here)
            assert re.fullmatch(not_in_pattern, body.decode()) is None
        else:  # not UTF-8 at all
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
    assert accepts(parse_gbnf(text), b'"ab c"') and not is_prefix(parse_gbnf(text), b'"ab\t')


def test_key_patterns_and_escaped_punctuation_are_expanded_too() -> None:
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
        ours = parse_gbnf(from_json_schema(schema))
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
