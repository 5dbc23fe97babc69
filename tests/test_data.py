"""The test data is what its provenance says: every copied grammar byte for byte, with its
licence text beside it, and every JSON-schema grammar generated from a schema that is kept.

Oracle: ``tests/data/grammars/PROVENANCE.md`` (sizes and SHA-256 digests written when the
files were copied from their projects) and the files themselves.
"""

from __future__ import annotations

import hashlib
import json
import re

import _data
import pytest

PROVENANCE = _data.GRAMMARS / "PROVENANCE.md"
_ROW = re.compile(
    r"^\| `([^`]+)` \| (\d+) \| `([0-9a-f]{64})` \|.* (MIT|Apache-2\.0) \(`(LICENSES/[^`]+)`\) \|$"
)
_LICENCE_TITLE = {"MIT": "MIT License", "Apache-2.0": "Apache License"}


def _rows() -> dict[str, tuple[int, str, str, str]]:
    """file -> (bytes, SHA-256, licence, licence text) from the provenance table."""
    rows: dict[str, tuple[int, str, str, str]] = {}
    for line in PROVENANCE.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), m.group(3), m.group(4), m.group(5))
    return rows


COPIED = sorted(
    [rel for rel in _data.grammar_files() if not rel.startswith("json_schemas/")] + _data.lark_files()
)


def test_every_copied_grammar_is_listed() -> None:
    assert sorted(_rows()) == COPIED


@pytest.mark.parametrize("rel", COPIED)
def test_copied_grammar_is_byte_for_byte(rel: str) -> None:
    size, digest, licence, text = _rows()[rel]
    data = _data.grammar(rel).read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest)
    assert (_data.GRAMMARS / text).read_text(encoding="utf-8").lstrip().startswith(_LICENCE_TITLE[licence])


def test_json_schema_grammars_match_the_schemas() -> None:
    names = _data.json_schema_names()
    grammars = sorted(r for r in _data.grammar_files() if r.startswith("json_schemas/"))
    assert grammars == [f"json_schemas/{n}.gbnf" for n in names]
    assert 8 <= len(names) <= 12
    for name in names:
        schema = json.loads((_data.JSON_SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
        assert schema["examples"], name
        header = _data.grammar(f"json_schemas/{name}.gbnf").read_text(encoding="utf-8").splitlines()[0]
        assert f"tests/data/json_schemas/{name}.json" in header
