"""Every docstring example of both packages runs as a doctest, on the build that is installed.

``pytest --doctest-modules`` would import the checkout's source files; the compiled build
must be checked too, so this test imports each module normally (compiled where it is), reads
the examples from the module's ``.py`` source next to it, and runs them in the imported
module's namespace.  A module is left out only when an optional dependency it needs is
missing.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import formalgram
import formalgram_cfgzip

OPTIONAL = {"torch", "triton", "xgrammar", "llguidance", "transformers", "tokenizers", "vllm", "matplotlib"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_names() -> list[str]:
    """Every module of both packages written in Python (hand-written C extensions have no
    docstring examples)."""
    names: list[str] = []
    for pkg in (formalgram, formalgram_cfgzip):
        names.append(pkg.__name__)
        names.extend(info.name for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
    return sorted(n for n in names if _source_path(n).exists())


def _source_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    origin = Path(spec.origin)
    if origin.suffix != ".py":  # a compiled module: its source ships beside it
        origin = origin.with_name(origin.name.split(".")[0] + ".py")
    return origin


def _docstrings(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(qualified name, docstring, line) of the module and of every class and function."""
    found: list[tuple[str, str, int]] = []
    doc = ast.get_docstring(tree, clean=False)
    if doc:
        found.append(("", doc, 1))
    todo: list[tuple[str, ast.AST]] = [("", tree)]
    while todo:
        prefix, node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                qual = f"{prefix}{child.name}"
                text = ast.get_docstring(child, clean=False)
                if text:
                    found.append((qual, text, child.lineno))
                todo.append((qual + ".", child))
    return found


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in OPTIONAL:
            pytest.skip(f"{name} needs the optional dependency {missing}")
        raise


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples_run(name: str) -> None:
    path = _source_path(name)
    module = _import(name)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for qual, text, line in _docstrings(tree):
        test = parser.get_doctest(text, dict(vars(module)), f"{name}.{qual}".rstrip("."), str(path), line)
        if test.examples:
            runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)


def test_examples_exist() -> None:
    """The packages document their public functions with runnable examples."""
    total = 0
    for name in _module_names():
        tree = ast.parse(_source_path(name).read_text(encoding="utf-8"))
        total += sum(len(doctest.DocTestParser().get_examples(d)) for _q, d, _l in _docstrings(tree))
    assert total >= 40
