"""The version matrix (``.ci/matrix``) tests the lower bounds that ``pyproject.toml`` declares.

Its ``lowest`` cell pins one version per package (``LOWEST_PINS``); each must be exactly the
lower bound of that package's range in ``pyproject.toml`` (the required dependencies, every
extra but the developer tools, and lark, the tests' oracle), and each such range must have a
pin.  docs/versions.md states the same ranges.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV_TOOLS = {"pytest", "pytest-benchmark", "mypy", "ruff", "sentencepiece"}
# outside the matrix: the serving frameworks (each in its own environment, with its own torch
# pin) and the benchmarks' peers
OUTSIDE_MATRIX = {"sglang", "vllm", "bench"}


def _release(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared_specs(outside: bool = False) -> set[str]:
    """``NAME>=VERSION`` of the required dependencies, the extras and lark (no developer tool);
    the extras outside the matrix too where ``outside``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    specs = set(project["dependencies"])
    for extra, deps in project["optional-dependencies"].items():
        if extra in OUTSIDE_MATRIX and not outside:
            continue
        specs.update(d for d in deps if extra != "dev" or d.startswith("lark"))
    return {s for s in specs if _norm(re.split(r"[<>=!~ ]", s)[0]) not in DEV_TOOLS}


def _declared_lower_bounds() -> dict[str, tuple[int, ...]]:
    bounds: dict[str, tuple[int, ...]] = {}
    for spec in _declared_specs():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", spec.replace(" ", ""))
        assert match is not None, f"{spec!r}: a range is written NAME>=VERSION"
        name, low = _norm(match.group(1)), _release(match.group(2))
        assert bounds.setdefault(name, low) == low, f"{name}: two lower bounds"
    return bounds


def _lowest_pins() -> dict[str, tuple[int, ...]]:
    text = (ROOT / ".ci" / "matrix").read_text("utf-8")
    block = re.search(r"^LOWEST_PINS=\((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert block is not None
    pins = re.findall(r'"([A-Za-z0-9_.-]+)==([0-9.]+)"', block.group(1))
    return {_norm(name): _release(version) for name, version in pins}


def test_lowest_cell_pins_the_declared_lower_bounds() -> None:
    assert _lowest_pins() == _declared_lower_bounds()


def test_versions_doc_names_every_range() -> None:
    doc = (ROOT / "docs" / "versions.md").read_text("utf-8")
    missing = sorted(spec for spec in _declared_specs(outside=True) if f"`{spec}`" not in doc)
    assert not missing, missing
