"""Optional dependencies stay optional: Hypothesis is needed by ``formalgram.testing`` only
(the ``formalgram[testing]`` extra), and the grammar engines are imported when used.

Each check runs in a fresh interpreter and reads its ``sys.modules``.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_packages_do_not_import_hypothesis() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "def walk(pkg):\n"
        "    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if info.name == 'formalgram.testing':\n"
        "            continue\n"
        "        module = importlib.import_module(info.name)\n"
        "        if info.ispkg:\n"
        "            walk(module)\n"
        "import formalgram, formalgram_cfgzip\n"
        "walk(formalgram)\n"
        "walk(formalgram_cfgzip)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hypothesis', 'xgrammar', 'llguidance')))\n"
    )
    assert run(code) == "[]"


def test_testing_module_says_which_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['hypothesis'] = None  # as if it were not installed\n"
        "try:\n"
        "    import formalgram.testing\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert 'pip install "formalgram[testing]"' in run(code)


def test_testing_module_imports_with_hypothesis() -> None:
    pytest.importorskip("hypothesis")
    assert (
        run("import formalgram.testing as t; print(sorted(t.__all__))")
        == "['grammar_and_strings', 'grammars']"
    )


def test_testing_extra_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert not any(d.startswith("hypothesis") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert [d for d in extras["testing"] if d.startswith("hypothesis")]
    for bundle in ("dev", "all"):
        assert set(extras["testing"]) <= set(extras[bundle]), bundle
