"""The package layout: no module-level import cycle, no module reaching into ``bench/`` or the
working directory, and an opening docstring in every module.

The modules are read as source (``ast``), so the test is the same for the compiled and the
pure-Python build.  Only module-level imports count (those under ``if TYPE_CHECKING:`` do
not, and neither do imports inside functions, which run after every module is loaded).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import formalgram
import formalgram_cfgzip


def _sources() -> dict[str, Path]:
    """Module name -> source file, for every Python module of both packages."""
    out: dict[str, Path] = {}
    for pkg in (formalgram, formalgram_cfgzip):
        assert pkg.__file__ is not None
        top = Path(pkg.__file__).parent
        for path in sorted(top.rglob("*.py")):
            parts = [pkg.__name__, *path.relative_to(top).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


SOURCES = _sources()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(name: str, path: Path) -> set[str]:
    """The modules of both packages that ``name`` imports when it is loaded."""
    found: set[str] = set()
    todo: list[ast.stmt] = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.If) and not _is_type_checking(node.test):
            todo.extend(node.body)
            todo.extend(node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body)
            todo.extend(node.orelse)
            todo.extend(node.finalbody)
            for handler in node.handlers:
                todo.extend(handler.body)
    return {m for m in found if m in SOURCES and m != name}


def _cycle(graph: dict[str, list[str]]) -> list[str]:
    """One cycle of ``graph`` (node -> successors), or ``[]`` (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for root in graph:
        if root in state:
            continue
        path = [root]
        frames = [(root, 0)]
        state[root] = 1
        while frames:
            node, i = frames[-1]
            if i < len(graph[node]):
                frames[-1] = (node, i + 1)
                nxt = graph[node][i]
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt) :], nxt]
                if nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    frames.append((nxt, 0))
                continue
            state[node] = 2
            path.pop()
            frames.pop()
    return []


def test_no_module_level_import_cycle() -> None:
    graph = {name: sorted(_module_level_imports(name, path)) for name, path in SOURCES.items()}
    assert sum(map(len, graph.values())) > len(graph)  # the imports were found at all
    assert _cycle(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert _cycle({"a": ["b", "c"], "b": ["c"], "c": []}) == []
    assert _cycle({"a": ["a"]}) == ["a", "a"]


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_module_reads_nothing_of_the_checkout(name: str) -> None:
    """No package module imports ``bench`` or looks at the working directory."""
    tree = ast.parse(SOURCES[name].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "bench" for a in node.names), node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level:
            assert (node.module or "").split(".")[0] != "bench", node.lineno
        elif isinstance(node, ast.Attribute):
            assert node.attr not in ("getcwd", "getcwdb", "chdir"), f"os.{node.attr} at line {node.lineno}"
            if node.attr == "cwd":
                raise AssertionError(f"Path.cwd() at line {node.lineno}")


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_module_opens_with_a_docstring(name: str) -> None:
    tree = ast.parse(SOURCES[name].read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and doc.strip(), f"{name} has no opening docstring"
