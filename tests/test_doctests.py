"""The Examples sections of the grammar toolkit and the compression pipeline run as doctests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "formalgram.adjacency",
    "formalgram.analysis",
    "formalgram.pda",
    "formalgram.recognize.earley",
    "formalgram.transforms.byte_classes",
    "formalgram.transforms.epsilon",
    "formalgram.transforms.gnf",
    "formalgram.transforms.left_recursion",
    "formalgram.transforms.specialize",
    "formalgram.transforms.unit",
    "formalgram.transforms.useless",
    "formalgram_cfgzip.cache",
    "formalgram_cfgzip.classes",
    "formalgram_cfgzip.compress",
    "formalgram_cfgzip.search.displacement",
    "formalgram_cfgzip.search.driver",
]


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    if str(module.__file__).endswith(".py"):  # compiled functions may hide their docstrings
        assert result.attempted > 0
