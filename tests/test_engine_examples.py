"""The Examples sections of the engine, integration and command-line modules run as
doctests (on tiny vocabularies; the engines' examples need XGrammar and llguidance)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "formalgram_cfgzip.cli",
    "formalgram_cfgzip.engines._xgrammar_guard",
    "formalgram_cfgzip.engines.tokens",
]
ENGINE_MODULES = [
    "formalgram_cfgzip.engines",
    "formalgram_cfgzip.engines.llguidance",
    "formalgram_cfgzip.engines.xgrammar",
]
TORCH_MODULES = [
    "formalgram_cfgzip.integrations.transformers",
    "formalgram_cfgzip.integrations.vllm",
]


def run_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, name


@pytest.mark.parametrize("name", MODULES)
def test_examples(name: str) -> None:
    run_examples(name)


@pytest.mark.parametrize("name", ENGINE_MODULES)
def test_engine_examples(name: str) -> None:
    pytest.importorskip("xgrammar")
    pytest.importorskip("llguidance")
    run_examples(name)


@pytest.mark.parametrize("name", TORCH_MODULES)
def test_integration_examples(name: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("xgrammar")
    run_examples(name)
