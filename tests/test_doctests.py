"""Every docstring example of both packages runs as a doctest, on the build that is installed.

``pytest --doctest-modules`` would import the checkout's source files; the compiled build
must be checked too, so this test imports each module normally (compiled where it is), reads
the examples from the module's ``.py`` source next to it, and runs them in the imported
module's namespace.  A docstring whose examples stop on a missing optional dependency (the
first example that fails raised that package's import error, or the packages' own "needs the
X package" error, and X is indeed not installed) is left out, and the test then skips with
the reason once the module's other docstrings have passed.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType

import pytest
from _optional import missing_optional_package

import formalgram
import formalgram_cfgzip

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
        missing = missing_optional_package(exc)
        if missing is not None:
            pytest.skip(f"{name} needs the optional dependency {missing}")
        raise


class _NeedsPackage(Exception):
    def __init__(self, package: str) -> None:
        super().__init__(package)
        self.package = package


class _Runner(doctest.DocTestRunner):
    """Stops a docstring's examples at a missing optional package, unless one failed before."""

    failed_here = 0

    def report_failure(
        self, out: Callable[[str], object], test: doctest.DocTest, example: doctest.Example, got: str
    ) -> None:
        self.failed_here += 1
        super().report_failure(out, test, example, got)

    def report_unexpected_exception(
        self,
        out: Callable[[str], object],
        test: doctest.DocTest,
        example: doctest.Example,
        exc_info: tuple[type[BaseException], BaseException, TracebackType],
    ) -> None:
        package = missing_optional_package(exc_info[1])
        if package is not None and self.failed_here == 0:
            raise _NeedsPackage(package)
        self.failed_here += 1
        super().report_unexpected_exception(out, test, example, exc_info)


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples_run(name: str) -> None:
    path = _source_path(name)
    module = _import(name)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parser = doctest.DocTestParser()
    runner = _Runner(optionflags=FLAGS)
    report: list[str] = []
    needs: dict[str, list[str]] = {}
    for qual, text, line in _docstrings(tree):
        test = parser.get_doctest(text, dict(vars(module)), f"{name}.{qual}".rstrip("."), str(path), line)
        if test.examples:
            runner.failed_here = 0
            try:
                runner.run(test, out=report.append)
            except _NeedsPackage as exc:
                needs.setdefault(exc.package, []).append(test.name)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)
    if needs:
        pytest.skip("; ".join(f"examples of {', '.join(v)} need {k}" for k, v in sorted(needs.items())))


def test_examples_exist() -> None:
    """The packages document their public functions with runnable examples."""
    total = 0
    for name in _module_names():
        tree = ast.parse(_source_path(name).read_text(encoding="utf-8"))
        total += sum(len(doctest.DocTestParser().get_examples(d)) for _q, d, _l in _docstrings(tree))
    assert total >= 40
