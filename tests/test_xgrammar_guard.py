"""The XGrammar backend refuses the grammar shape that crashes XGrammar 0.2.9.

The refusal is checked in a child process: should the guard regress, XGrammar's stack
overflow kills the child, not the test run.  The crash itself is pinned in
``tests/test_parse.py::test_known_xgrammar_crash_pinned``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from formalgram_cfgzip.engines._xgrammar_guard import crash_cycle

pytest.importorskip("xgrammar")

_CHILD = textwrap.dedent(
    """
    import sys
    from formalgram_cfgzip.engines import compile_full
    from formalgram_cfgzip.errors import EngineError
    from formalgram_cfgzip.vocabulary import Vocabulary

    for text in sys.argv[1:]:
        try:
            compile_full(Vocabulary([b"a", b"b"]), text)
        except EngineError as exc:
            print("refused:", str(exc).replace(chr(10), " "), flush=True)
        else:
            print("compiled", flush=True)
    """
)


CRASH_SHAPES = [
    ("root ::= root{2}", ["root"]),
    ("root ::= root{0,1}", ["root"]),
    ('root ::= r0 "a"\nr0 ::= r1{2}\nr1 ::= r0', ["r0", "r1"]),
    ('root ::= "a" r0\nr0 ::= (r0){1,3} ""', ["r0"]),
]


def test_crash_shapes_are_refused_with_an_engine_error() -> None:
    for text, cycle in CRASH_SHAPES:
        assert crash_cycle(text) == cycle, text
    texts = [text for text, _ in CRASH_SHAPES]
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _CHILD, *texts], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    lines = proc.stdout.splitlines()
    assert len(lines) == len(texts), proc.stdout
    for text, line in zip(texts, lines, strict=True):
        assert line.startswith("refused:") and "crashes" in line, (text, line)


@pytest.mark.parametrize("text", ['root ::= root{2} | "a"', 'root ::= "a" root{2} | "b"', "root ::= [ab]+"])
def test_near_misses_still_compile(text: str) -> None:
    """Compiled, and read as written: each of these languages has members starting with "a"."""
    assert crash_cycle(text) is None
    from formalgram_cfgzip.engines import compile_full
    from formalgram_cfgzip.vocabulary import Vocabulary

    assert compile_full(Vocabulary([b"a", b"b"]), text).matcher().accept_token(0)
