"""Both packages import, module by module, with every optional dependency absent.

A child interpreter installs an import hook that refuses the optional packages (as if they
were not installed) and imports every module of ``formalgram`` and ``formalgram_cfgzip``.
The one module allowed to refuse is ``formalgram.testing``, the ``formalgram[testing]``
extra itself, and it must name the extra.  The Triton expansion backend, without Triton,
is refused where it is chosen, with a typed error that says it needs triton.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

OPTIONAL = (
    "triton",
    "lark",
    "llguidance",
    "xgrammar",
    "torch",
    "transformers",
    "tokenizers",
    "hypothesis",
    "matplotlib",
    "distributed",
    "dask",
    "quicktok",
    "quicktok_v1",
    "mistral_common",
    "vllm",
    "sglang",
    "sentencepiece",
    "jsonschema",
)

_BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        def __init__(self, names):
            self.names = frozenset(names)

        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {fullname!r} (blocked)", name=fullname)
            return None

    sys.meta_path.insert(0, Absent(BLOCKED))
    """
)


def _run_child(blocked: tuple[str, ...], body: str) -> str:
    code = f"BLOCKED = {list(blocked)!r}\n{_BLOCKER}\n{textwrap.dedent(body)}"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False, cwd="/"
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def test_every_module_imports_without_the_optional_packages() -> None:
    body = """
    import importlib, json, pkgutil, sys
    import formalgram, formalgram_cfgzip

    names, failed = [], {}
    for pkg in (formalgram, formalgram_cfgzip):
        names.append(pkg.__name__)
        names.extend(i.name for i in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".", onerror=names.append))
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print(json.dumps({"count": len(names), "failed": failed, "leaked": leaked}))
    """
    result = json.loads(_run_child(OPTIONAL, body))
    failed = result["failed"]
    testing = failed.pop("formalgram.testing", "")
    assert 'pip install "formalgram[testing]"' in testing
    assert failed == {}
    assert result["leaked"] == []
    assert result["count"] > 50


def test_triton_backend_without_triton_is_refused_where_it_is_chosen() -> None:
    pytest.importorskip("torch")
    body = """
    import json
    import numpy as np
    from formalgram_cfgzip.errors import EngineError
    from formalgram_cfgzip.expand import TorchMaskExpander, _triton

    out = {"available": _triton.AVAILABLE, "reason": _triton.UNAVAILABLE_REASON}
    try:
        TorchMaskExpander(np.array([0, 1, 0]), 2, backend="triton")
    except EngineError as exc:
        out["error"] = str(exc)
    try:
        _triton.launch_expand(None, None, None)
    except EngineError as exc:
        out["launch"] = str(exc)
    out["auto"] = TorchMaskExpander(np.array([0, 1, 0]), 2).backend
    print(json.dumps(out))
    """
    out = json.loads(_run_child(("triton",), body))
    assert out["available"] is False
    assert "triton" in out["reason"]
    assert "needs triton" in out["error"]
    assert "needs triton" in out["launch"]
    assert out["auto"] == "numpy"
