"""Which optional package an error says is missing (for skipping, never for passing).

Both packages refuse a feature whose optional package is absent, either with an error of
their own that names it (``... needs the quicktok-v1 package (pip install 'formalgram[vocabs]')``)
or by letting the import fail.  :func:`missing_optional_package` reads an exception (and the
exceptions it was raised from) and returns the package's name only when that package is
indeed not installed; ``tests/conftest.py`` and ``tests/test_doctests.py`` skip on it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re

from formalgram.errors import FormalgramError

# import names of the extras' packages and of the tests' own oracles
OPTIONAL_MODULES = frozenset(
    {
        "torch",
        "triton",
        "xgrammar",
        "llguidance",
        "transformers",
        "tokenizers",
        "quicktok",
        "mistral_common",
        "matplotlib",
        "distributed",
        "dask",
        "hypothesis",
        "lark",
        "jsonschema",
        "sentencepiece",
        "vllm",
        "sglang",
    }
)

# "needs the quicktok-v1 package", "needs the 'xgrammar' package", "needs triton (pip install triton)"
_NEEDS = re.compile(r"needs (?:the )?'?([A-Za-z0-9][A-Za-z0-9_.-]*)'? (?:package|\(pip install)")


def _distribution_missing(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return True
    return False


def missing_optional_package(exc: BaseException | None) -> str | None:
    """The optional package ``exc`` (or its cause or context) says is missing, if it is missing.

    A :class:`ModuleNotFoundError` counts for the modules of :data:`OPTIONAL_MODULES` that
    cannot be found; a deliberate error of the packages counts when it names a package
    ("needs the X package") that is not installed.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            top = exc.name.split(".")[0]
            if top in OPTIONAL_MODULES and importlib.util.find_spec(top) is None:
                return top
        if isinstance(exc, FormalgramError):
            match = _NEEDS.search(str(exc))
            if match is not None and _distribution_missing(match.group(1)):
                return match.group(1)
        exc = exc.__cause__ or exc.__context__
    return None
