"""Where the tests' data lives (no tests here).

* ``GRAMMARS`` -- ``tests/data/grammars``: real grammars (GBNF / EBNF, and Lark ones listed
  by :func:`lark_files`) copied byte for byte from their projects (sources, commits and licences in its ``PROVENANCE.md``, licence texts in
  ``LICENSES/``) and the grammars XGrammar generates from ``JSON_SCHEMAS``.  The default
  run reads nothing else.
* ``JSON_SCHEMAS`` -- ``tests/data/json_schemas``: JSON schemas written for these tests,
  each with valid instances under ``examples``; ``tests/data/regenerate_json_schema_grammars.py``
  turns them into ``GRAMMARS / "json_schemas"``.
* ``SHARED_GRAMMARS`` -- ``../shared/grammars`` beside the repository, when present: a
  larger corpus (the same layout, plus grammars that cannot be redistributed).  The heavy
  sweeps cover both corpora (:func:`sweep_files`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
GRAMMARS = TESTS / "data" / "grammars"
JSON_SCHEMAS = TESTS / "data" / "json_schemas"
SHARED_GRAMMARS = TESTS.parents[1] / "shared" / "grammars"

GRAMMAR_SUFFIXES = (".gbnf", ".ebnf")


def grammar(rel: str) -> Path:
    """``GRAMMARS / rel``; a missing file is an error (the default run needs it)."""
    path = GRAMMARS / rel
    if not path.is_file():
        raise FileNotFoundError(f"{rel} is not in {GRAMMARS}")
    return path


def corpus_of(rel: str) -> Path:
    """The corpus holding ``rel``: the in-repository one, else the shared one.

    For lists that mix default and heavy cases: a heavy case may name a grammar kept only in
    the shared corpus, and is skipped with the reason when that corpus is absent.
    """
    for root in (GRAMMARS, SHARED_GRAMMARS):
        if (root / rel).is_file():
            return root
    pytest.skip(f"{rel} is kept only in the shared grammar corpus, absent at {SHARED_GRAMMARS}")


def real_grammar(rel: str) -> Path:
    """``rel`` from the in-repository corpus, else from the shared one (see :func:`corpus_of`)."""
    return corpus_of(rel) / rel


def grammar_files(root: Path = GRAMMARS) -> list[str]:
    """Paths (relative to ``root``) of every GBNF / EBNF file under it, sorted."""
    if not root.is_dir():
        return []
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in GRAMMAR_SUFFIXES and p.is_file()
    )


def lark_files(root: Path = GRAMMARS) -> list[str]:
    """Paths (relative to ``root``) of every Lark grammar (``.lark``) under it, sorted."""
    if not root.is_dir():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.lark") if p.is_file())


def lark_sweep_files() -> list[str]:
    """The Lark grammars of both corpora (read with :func:`real_grammar`)."""
    return sorted(set(lark_files(GRAMMARS)) | set(lark_files(SHARED_GRAMMARS)))


def sweep_files() -> list[str]:
    """What a heavy sweep covers: every grammar of the shared corpus when present, and the
    in-repository ones (the same files where both have them; read with :func:`real_grammar`)."""
    return sorted(set(grammar_files(GRAMMARS)) | set(grammar_files(SHARED_GRAMMARS)))


def json_schema_names() -> list[str]:
    """Names (file stems) of the JSON schemas, each with a grammar ``json_schemas/NAME.gbnf``."""
    return sorted(p.stem for p in JSON_SCHEMAS.glob("*.json"))
