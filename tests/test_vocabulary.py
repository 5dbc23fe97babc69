"""Tests of formalgram_cfgzip.vocabulary: the Vocabulary model, piece decoding, the package.

The loaders have their own files (test_vocabulary_hf.py, test_vocabulary_files.py,
test_vocabulary_builtins.py).  Oracles: Hugging Face ``tokenizers`` for the GPT-2 byte
map; field-by-field comparison for the fingerprint.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formalgram.errors import FormalgramError
from formalgram_cfgzip import CfgzipError, Vocabulary, VocabularyError
from formalgram_cfgzip.vocabulary import byte_level_decode
from formalgram_cfgzip.vocabulary.pieces import byte_piece_value, gpt2_char_to_byte

# -- the model ----------------------------------------------------------------------------


def test_basic_attributes() -> None:
    v = Vocabulary([b"a", b"bc", None, b"</s>"], special_ids=[3], stop_ids=[3], logit_width=8, name="t")
    assert v.tokens == (b"a", b"bc", None, b"</s>")
    assert v.special_ids == frozenset({3}) and v.stop_ids == frozenset({3})
    assert (v.size, len(v), v.logit_width, v.name) == (4, 4, 8, "t")
    assert v.token_bytes(1) == b"bc" and v.token_bytes(2) is None
    assert v.text_ids() == [0, 1]
    assert v.decode([1, 0]) == b"bca"
    assert v.max_token_length() == 2
    assert Vocabulary([b"x"]).logit_width == 1
    loose: list[object] = [bytearray(b"x"), memoryview(b"yz")]
    assert Vocabulary.from_bytes(loose).tokens == (b"x", b"yz")  # type: ignore[arg-type]


def test_immutable() -> None:
    v = Vocabulary([b"a"])
    with pytest.raises(AttributeError):
        v.tokens = (b"b",)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        v.logit_width = 3  # type: ignore[misc]
    assert isinstance(v.special_ids, frozenset)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": []}, "empty vocabulary"),
        ({"tokens": [None, None]}, "every id is a hole"),
        ({"tokens": [b"a"], "special_ids": [1]}, "special id 1 is out of range"),
        ({"tokens": [b"a"], "stop_ids": [-1]}, "stop id -1 is out of range"),
        ({"tokens": [b"a", None], "stop_ids": [1]}, "stop id 1 is a hole"),
        ({"tokens": [b"a", None], "special_ids": [1]}, "special id 1 is a hole"),
        ({"tokens": [b"a", b"b"], "logit_width": 1}, "logit_width 1 is smaller"),
        ({"tokens": [b"a", "b"]}, "token 1 must be bytes or None"),
        ({"tokens": b"abc"}, "not a single string"),
        ({"tokens": [b"a"], "stop_ids": [True]}, "ids must be integers"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], message: str) -> None:
    tokens = kwargs.pop("tokens")
    with pytest.raises(VocabularyError, match=message) as info:
        Vocabulary(tokens, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, CfgzipError) and isinstance(info.value, FormalgramError)


def test_token_bytes_and_decode_errors() -> None:
    v = Vocabulary([b"a", None])
    with pytest.raises(VocabularyError, match="out of range"):
        v.token_bytes(2)
    with pytest.raises(VocabularyError, match="hole"):
        v.decode([0, 1])


_token = st.one_of(st.none(), st.binary(max_size=4))


@st.composite
def _vocab_fields(draw: st.DrawFn) -> tuple[tuple[bytes | None, ...], frozenset[int], frozenset[int], int]:
    tokens = draw(st.lists(_token, min_size=1, max_size=6))
    if all(t is None for t in tokens):
        tokens[0] = b""
    real = [i for i, t in enumerate(tokens) if t is not None]
    special = draw(st.frozensets(st.sampled_from(real)))
    stop = draw(st.frozensets(st.sampled_from(real)))
    width = len(tokens) + draw(st.integers(0, 3))
    return tuple(tokens), special, stop, width


@settings(max_examples=150, deadline=None)
@given(_vocab_fields(), _vocab_fields())
def test_fingerprint_and_equality_match_fields(
    a: tuple[tuple[bytes | None, ...], frozenset[int], frozenset[int], int],
    b: tuple[tuple[bytes | None, ...], frozenset[int], frozenset[int], int],
) -> None:
    va = Vocabulary(a[0], special_ids=a[1], stop_ids=a[2], logit_width=a[3], name="x")
    vb = Vocabulary(b[0], special_ids=b[1], stop_ids=b[2], logit_width=b[3], name="y")
    same = a == b
    assert (va.fingerprint() == vb.fingerprint()) == same
    assert (va == vb) == same
    # the same fields (rebuilt, another name) always compare equal: both outcomes are checked
    again = Vocabulary(
        list(a[0]), special_ids=sorted(a[1]), stop_ids=sorted(a[2]), logit_width=a[3], name="z"
    )
    assert again == va and again.fingerprint() == va.fingerprint()
    assert len(va.fingerprint()) == 64
    assert va.tokens == a[0] and va.special_ids == a[1] and va.stop_ids == a[2] and va.logit_width == a[3]


def test_fingerprint_separates_boundaries() -> None:
    # Concatenation must not collide: [b"ab"] vs [b"a", b"b"] vs [b"a", None, b"b"].
    prints = {
        Vocabulary([b"ab"]).fingerprint(),
        Vocabulary([b"a", b"b"]).fingerprint(),
        Vocabulary([b"a", None, b"b"]).fingerprint(),
        Vocabulary([b"a", b"", b"b"]).fingerprint(),
        Vocabulary([b"a", b"b"], logit_width=3).fingerprint(),
        Vocabulary([b"a", b"b"], special_ids=[1]).fingerprint(),
        Vocabulary([b"a", b"b"], stop_ids=[1]).fingerprint(),
    }
    assert len(prints) == 7


# -- GPT-2 byte map ---------------------------------------------------------------------


def test_byte_level_map_against_tokenizers() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    pre = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    samples = [chr(c) for c in range(1, 0x800)] + ["日", "🙂", "\U0010fffd", "\x00"]
    for ch in samples:
        (mapped, _), *_ = pre.pre_tokenize_str(ch)
        assert byte_level_decode(mapped) == ch.encode(), ch
    alphabet = set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    decoded = {byte_level_decode(c) for c in alphabet}
    assert decoded == {bytes([b]) for b in range(256)}


def test_pickle_for_worker_processes() -> None:
    import pickle

    v = Vocabulary([b"a", None, b"</s>"], special_ids=[2], stop_ids=[2], logit_width=5, name="n")
    w = pickle.loads(pickle.dumps(v))
    assert w == v and w.name == "n" and w.fingerprint() == v.fingerprint()


def test_numpy_ids_accepted() -> None:
    import numpy as np

    v = Vocabulary(
        [b"a", b"b"],
        special_ids=np.array([1]),
        stop_ids=[np.int64(1)],  # type: ignore[list-item]
        logit_width=np.int32(4),  # type: ignore[arg-type]
    )
    assert v.logit_width == 4 and type(v.logit_width) is int
    assert v.stop_ids == frozenset({1}) and all(type(i) is int for i in v.special_ids)


# -- piece decoding ---------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="latin-1"), max_size=8), st.integers(0, 255))
def test_byte_piece_value(junk: str, value: int) -> None:
    assert byte_piece_value(f"<0x{value:02X}>") == value
    assert byte_piece_value(f"<0x{value:02x}>") == value
    piece = f"<0x{value:02X}>{junk}"
    assert (byte_piece_value(piece) is None) == bool(junk)


def test_gpt2_table_is_a_bijection() -> None:
    table = gpt2_char_to_byte()
    assert sorted(table.values()) == list(range(256))
    assert all(len(ch) == 1 and ch.isprintable() for ch in table)


# -- the package --------------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "formalgram_cfgzip" / "vocabulary"


def _module_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parents[1]).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULE_FILES = _module_files()
MODULES = sorted(MODULE_FILES)


def _module_level_imports(path: Path) -> set[str]:
    """Modules of the package a module imports at its top level (not inside functions)."""
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        out.update(n for n in names if n in MODULE_FILES)
    return out


def test_no_import_cycles_in_the_package() -> None:
    assert {"formalgram_cfgzip.vocabulary.model", "formalgram_cfgzip.vocabulary.loaders.hf"} <= set(MODULES)
    remaining = {name: _module_level_imports(path) for name, path in MODULE_FILES.items()}
    assert remaining["formalgram_cfgzip.vocabulary.loaders.hf"]  # the parse sees imports
    while remaining:
        free = [name for name, deps in remaining.items() if not deps & remaining.keys()]
        assert free, f"module-level import cycle among {sorted(remaining)}"
        for name in free:
            del remaining[name]


def test_every_module_imports_first() -> None:
    """Each module can be the first one imported (a cycle would fail on some order)."""
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('formalgram_cfgzip')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
    )
    subprocess.run([sys.executable, "-P", "-c", code], check=True, timeout=120)


def test_every_module_states_its_job_exports_and_shows_examples() -> None:
    """Each module says what it does, lists its public names and shows them at work."""
    for name in MODULES:
        module = importlib.import_module(name)
        assert (module.__doc__ or "").strip(), name
        assert isinstance(getattr(module, "__all__", None), list), name
        for public in module.__all__:
            assert hasattr(module, public), (name, public)
        if MODULE_FILES[name].name != "__init__.py":
            examples = sum(len(test.examples) for test in doctest.DocTestFinder().find(module))
            assert examples > 0, f"{name} has no docstring example"


def test_old_import_paths() -> None:
    from formalgram_cfgzip.vocabulary import (
        BUILTIN_NAMES,
        COMMON_STOP_TOKENS,
        _gpt2_char_to_byte,
    )

    assert _gpt2_char_to_byte is gpt2_char_to_byte  # the old name is the same function
    assert "<|endoftext|>" in COMMON_STOP_TOKENS and "llama3" in BUILTIN_NAMES
