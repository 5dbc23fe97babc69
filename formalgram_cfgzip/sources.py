"""Where the commands' grammars, JSON Schemas and texts come from: files and the package's built-ins.

The one reader of grammar files (:func:`read_grammar_file`) serves ``formalgram-cfgzip
compress``, ``compress-many`` manifests and ``demo``: a GBNF / XGrammar EBNF file, a Lark
file (``.lark``, converted to GBNF text whose start rule is ``start``) or a built-in grammar
(``builtin:NAME``); it returns the GBNF text the engine compiles and its start rule, both
read later by :func:`~formalgram_cfgzip.grammar_text.read_grammar`.  JSON Schemas go through
:func:`schema_grammar` (XGrammar's converter).  The built-in grammars, schemas and the texts
the demo decodes are files of ``formalgram_cfgzip/data`` listed here; the built-in
vocabularies are :data:`formalgram_cfgzip.vocabulary.builtins.BUILTIN_NAMES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from formalgram.errors import FormalgramError

__all__ = [
    "BUILTIN_EXAMPLES",
    "BUILTIN_GRAMMARS",
    "BUILTIN_SCHEMAS",
    "GrammarSource",
    "builtin_grammar_text",
    "builtin_schema_text",
    "example_text",
    "read_grammar_file",
    "read_schema_file",
    "schema_grammar",
]

BUILTIN_GRAMMARS = ("minic", "json")
"""Grammars shipped with the package (``builtin:minic``: a small C-like language;
``builtin:json``: JSON), as ``data/NAME.gbnf``."""

BUILTIN_SCHEMAS = ("order",)
"""JSON Schemas shipped with the package, as ``data/NAME.schema.json``."""

BUILTIN_EXAMPLES: dict[str, str] = {
    "grammar builtin:minic": "minic.example.c",
    "grammar builtin:json": "order.example.json",
    "schema builtin:order": "order.example.json",
}
"""The text the demo decodes for a built-in grammar or schema (a file of the package's data)."""

_BUILTIN = "builtin:"


def _data(name: str) -> Any:
    return resources.files("formalgram_cfgzip").joinpath("data", name)


def _builtin_text(kind: str, name: str, names: tuple[str, ...], suffix: str) -> str:
    """The text of the built-in ``kind`` called ``name`` (one of ``names``), ``data/NAME+suffix``."""
    if name not in names:
        raise FormalgramError(f"unknown built-in {kind} {name!r}; choose one of {', '.join(names)}")
    text: str = _data(name + suffix).read_text("utf-8")
    return text


def builtin_grammar_text(name: str) -> str:
    """Text of a grammar shipped with the package (``minic`` or ``json``).

    Raises
    ------
    FormalgramError
        For another name.

    Examples
    --------
    >>> builtin_grammar_text("json").splitlines()[1]
    'root    ::= ws value ws'
    """
    return _builtin_text("grammar", name, BUILTIN_GRAMMARS, ".gbnf")


def builtin_schema_text(name: str) -> str:
    """Text of a JSON Schema shipped with the package (``order``: an order with a nested
    customer, an array of items, an enum and optional fields).

    Raises
    ------
    FormalgramError
        For another name.

    Examples
    --------
    >>> import json
    >>> sorted(json.loads(builtin_schema_text("order"))["required"])
    ['customer', 'id', 'items', 'status']
    """
    return _builtin_text("schema", name, BUILTIN_SCHEMAS, ".schema.json")


def example_text(*, grammar: str | None = None, schema: str | None = None) -> bytes:
    """The built-in text of a built-in grammar (``builtin:minic``, ``builtin:json``) or
    schema (``builtin:order``): a member of its language.

    Parameters
    ----------
    grammar, schema : str or None, keyword-only
        Exactly one of them.

    Returns
    -------
    bytes

    Raises
    ------
    FormalgramError
        If both or neither are given, or the grammar or schema has no built-in text.

    Examples
    --------
    >>> example_text(grammar="builtin:minic").splitlines()[0]
    b'int gcd(int a, int b) {'
    >>> example_text(schema="./order.json")
    Traceback (most recent call last):
    ...
    formalgram.errors.FormalgramError: ./order.json has no built-in text: give one with --text FILE (built-in texts: --grammar builtin:minic, --grammar builtin:json, --schema builtin:order)
    """
    if (grammar is None) == (schema is None):
        raise FormalgramError("give a grammar or a schema (exactly one)")
    key = f"grammar {grammar}" if grammar is not None else f"schema {schema}"
    name = BUILTIN_EXAMPLES.get(key)
    if name is None:
        known = ", ".join("--" + k for k in BUILTIN_EXAMPLES)
        raise FormalgramError(
            f"{key.split(' ', 1)[1]} has no built-in text: give one with --text FILE (built-in texts: {known})"
        )
    data: bytes = _data(name).read_bytes()
    return data


@dataclass(frozen=True)
class GrammarSource:
    """A grammar as the commands compress and compile it.

    Attributes
    ----------
    text : str
        GBNF / XGrammar EBNF text: what ``compress`` reads and the engine compiles.
    root : str
        Its start rule (``compress(..., root=root)``, ``compile_grammar(..., root=root)``).
    converted : bool
        Whether ``text`` was converted from another syntax (a Lark file, a JSON Schema): the
        engine must then be given ``text``, not the file.
    """

    text: str
    root: str = "root"
    converted: bool = False


def _read_file(spec: str, what: str) -> str:
    """The UTF-8 text of the file ``spec`` (one error for every way of failing to read it)."""
    try:
        return Path(spec).read_text("utf-8")
    except OSError as exc:
        raise FormalgramError(f"cannot read {what} {spec}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FormalgramError(
            f"cannot read {what} {spec}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def read_grammar_file(spec: str, root: str | None = None) -> GrammarSource:
    """The grammar of ``spec``: a built-in (``builtin:minic``, ``builtin:json``), a Lark file
    (``.lark``) or a GBNF / XGrammar EBNF file.

    Parameters
    ----------
    spec : str
        The file, or ``builtin:NAME``.
    root : str or None
        The start rule; ``None`` for the syntax's own: ``start`` for Lark, ``root`` otherwise.

    Returns
    -------
    GrammarSource
        The GBNF text (a Lark file converted by :func:`formalgram.parse_lark`) and its root.

    Raises
    ------
    FormalgramError
        If the file is missing, unreadable or not UTF-8, or names an unknown built-in; a
        :class:`~formalgram.errors.GrammarSyntaxError` for a Lark file that does not parse.

    Notes
    -----
    Reads the file; a Lark file is also parsed and printed (linear in its size).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.lark"
    >>> _ = path.write_text('start: NAME ("," NAME)*\\nNAME: /[a-z]+/\\n')
    >>> source = read_grammar_file(str(path))
    >>> source.root, source.converted, source.text.splitlines()[0]
    ('start', True, 'start ::= NAME start-star')
    >>> read_grammar_file("builtin:json").root
    'root'
    """
    if spec.startswith(_BUILTIN):
        return GrammarSource(builtin_grammar_text(spec[len(_BUILTIN) :]), root or "root")
    text = _read_file(spec, "grammar file")
    if spec.endswith(".lark"):
        from formalgram.syntax.lark import parse_lark

        start = root or "start"
        return GrammarSource(parse_lark(text, start=start).to_gbnf(), start, converted=True)
    return GrammarSource(text, root or "root")


def read_schema_file(spec: str) -> str:
    """The JSON Schema text of a file or of ``builtin:NAME``.

    Raises
    ------
    FormalgramError
        If the file cannot be read or the built-in is unknown.

    Examples
    --------
    >>> read_schema_file("builtin:order") == builtin_schema_text("order")
    True
    """
    if spec.startswith(_BUILTIN):
        return builtin_schema_text(spec[len(_BUILTIN) :])
    return _read_file(spec, "JSON schema")


def schema_grammar(spec: str, options: Mapping[str, Any] | None = None) -> GrammarSource:
    """XGrammar's grammar for the JSON Schema of a file or of ``builtin:NAME``.

    Parameters
    ----------
    spec : str
        The schema file, or ``builtin:NAME``.
    options : mapping or None
        Keyword arguments of :func:`~formalgram_cfgzip.json_schema.from_json_schema`
        (a list where it wants a tuple, as JSON gives it, is accepted).

    Returns
    -------
    GrammarSource
        The converter's GBNF text, start rule ``root``.

    Raises
    ------
    FormalgramError
        If the schema cannot be read, an option is unknown, or the converter refuses it.

    Notes
    -----
    XGrammar's conversion (milliseconds for real schemas).
    """
    from formalgram_cfgzip.json_schema import from_json_schema

    schema = read_schema_file(spec)
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in (options or {}).items()}
    try:
        return GrammarSource(from_json_schema(schema, **kwargs), converted=True)
    except TypeError as exc:
        raise FormalgramError(f"JSON schema options: {exc}") from exc
