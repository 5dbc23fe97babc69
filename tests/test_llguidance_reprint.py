"""llguidance on GBNF its own converter rejects: reprinted by formalgram, still lossless.

The grammar below uses ``\\-`` and ``\\^`` in classes and two rules (``Item``, ``item``) that
llguidance's name folding would merge.  Oracles: XGrammar's full-vocabulary mask on the
user's text (an independent engine) and llguidance's own full-vocabulary mask on the
reprinted text; the compressed llguidance path must equal both at every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("llguidance")
pytest.importorskip("xgrammar")

from formalgram_cfgzip.compress import compress
from formalgram_cfgzip.engines import compile_full
from formalgram_cfgzip.engines import compile_grammar as compile_compressed
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.vocabulary import Vocabulary

TEXT = r"""root ::= Item (sep Item)*
Item ::= [+\-]? item
item ::= [0-9]+ | "x" [\^a]*
sep ::= ","
"""

TOKENS = [b"+", b"-", b"1", b"12", b"x", b"^", b"a", b"x^a", b",", b",-", b"b", b"+1,", b"-x", b"^^", b"9,"]


def _allowed(bitmask: np.ndarray, width: int) -> list[int]:
    bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[:width]
    return [int(i) for i in np.flatnonzero(bits)]


def test_llguidance_rejects_the_text_as_written() -> None:
    import llguidance

    with pytest.raises(ValueError):
        llguidance.grammar_from("gbnf", TEXT)


@pytest.mark.parametrize("seed", range(4))
def test_reprinted_grammar_is_lossless_and_agrees_with_xgrammar(seed: int) -> None:
    vocab = Vocabulary.from_bytes([*TOKENS, b"</s>"], special_ids=[len(TOKENS)], stop_ids=[len(TOKENS)])
    classes = compress(TEXT, vocab, progress=False)
    assert classes.num_classes < len(TOKENS)
    small = compile_compressed(classes, TEXT, engine="llguidance")
    full = compile_full(vocab, TEXT, engine="llguidance")
    ref = compile_full(vocab, TEXT, engine="xgrammar")
    rng = np.random.default_rng(seed)
    ms, mf, mr = small.matcher(), full.matcher(), ref.matcher()
    a, b, c = (x.allocate_token_bitmask(1) for x in (small, full, ref))
    steps = 0
    while not mr.is_terminated() and steps < 12:
        ms.fill_next_token_bitmask(a)
        mf.fill_next_token_bitmask(b)
        mr.fill_next_token_bitmask(c)
        got, want, xgr = (_allowed(x, vocab.logit_width) for x in (a, b, c))
        assert got == want == xgr, (steps, got, want, xgr)
        tok = int(rng.choice(want))
        assert ms.accept_token(tok) and mf.accept_token(tok) and mr.accept_token(tok)
        steps += 1


@pytest.mark.parametrize("seed", range(2))
def test_regex_macros_are_reprinted_as_xgrammar_reads_them(seed: int) -> None:
    """A grammar with XGrammar's ``Regex`` macros (what ``from_json_schema`` writes for a
    ``pattern``): llguidance over the reprint allows what XGrammar allows, at every step."""
    text = 'root ::= "{" [a-z]+ ":" Regex("^[a-c]{1,3}-[0-9]+$", json_string=true) "}"\n'
    tokens = b"{ k kk : k: a ab c- -1 12 2} } b-9 3 abca".split()
    vocab = Vocabulary.from_bytes([*tokens, b"</s>"], special_ids=[len(tokens)], stop_ids=[len(tokens)])
    full = compile_full(vocab, text, engine="llguidance")
    ref = compile_full(vocab, text, engine="xgrammar")
    rng = np.random.default_rng(seed)
    mf, mr = full.matcher(), ref.matcher()
    b, c = full.allocate_token_bitmask(1), ref.allocate_token_bitmask(1)
    steps = 0
    while not mr.is_terminated() and steps < 12:
        mf.fill_next_token_bitmask(b)
        mr.fill_next_token_bitmask(c)
        want, xgr = _allowed(b, vocab.logit_width), _allowed(c, vocab.logit_width)
        assert want == xgr, (steps, want, xgr)
        tok = int(rng.choice(want))
        assert mf.accept_token(tok) and mr.accept_token(tok)
        steps += 1
    assert steps >= 4


def test_other_start_rule_is_reprinted() -> None:
    vocab = Vocabulary.from_bytes([b"(", b")", b"x", b"()"])
    text = 'expr ::= "(" expr ")" | "x"\nroot ::= "never"\n'
    full = compile_full(vocab, text, engine="llguidance", root="expr")
    m = full.matcher()
    assert m.accept_token(0) and m.accept_token(2) and m.accept_token(1)
    assert not m.accept_token(2) and not m.accept_token(0)  # "(x)" is a whole expr: nothing may follow


def test_unreadable_grammar_still_raises_engine_error() -> None:
    vocab = Vocabulary.from_bytes([b"a"])
    with pytest.raises(EngineError, match="llguidance cannot read"):
        compile_full(vocab, "root ::= (", engine="llguidance")


def _byte_engines(rel: str) -> tuple[Any, Any, Any]:
    """A real grammar (tests/data/grammars), and llguidance / XGrammar compiled over a byte vocabulary."""
    import _data

    import formalgram as fg

    text = _data.grammar(rel).read_text(encoding="utf-8")
    vocab = Vocabulary.from_bytes(
        [bytes([i]) for i in range(256)] + [b"</s>"], special_ids=[256], stop_ids=[256]
    )
    llg, xgr = (compile_full(vocab, text, engine=e) for e in ("llguidance", "xgrammar"))
    return fg.parse_gbnf(text), llg, xgr


def _walk(compiled: Any, data: bytes) -> bool:
    m = compiled.matcher()
    return all(m.accept_token(b) for b in data)


def test_llguidance_reads_sql_syncode_as_another_language() -> None:
    """Why the heavy sweep marks sql_syncode xfail for llguidance (tests/test_engines.py)."""
    import formalgram as fg

    g, llg, xgr = _byte_engines("derived/lark_via_xgrammar/sql_syncode.gbnf")
    for data in (b"SELECTask", b"SELECTalk"):
        assert fg.is_prefix(g, data) and _walk(xgr, data)
    assert _walk(llg, b"SELECTask") and not _walk(llg, b"SELECTalk")


def test_llguidance_reads_go_syncode_as_another_language() -> None:
    """Why the heavy sweep marks go_syncode xfail for llguidance (tests/test_engines.py):
    ``const`` followed by an identifier needs no space in this grammar (whitespace between
    its lexemes is optional), so b"constraints" and b"constants" are both valid after the
    package clause; llguidance (which splits bytes into lexemes with its own lexer) allows
    only the second."""
    import formalgram as fg

    g, llg, xgr = _byte_engines("derived/lark_via_xgrammar/go_syncode.gbnf")
    for data in (b"package main\nconstants", b"package main\nconstraints"):
        assert fg.is_prefix(g, data) and _walk(xgr, data)
    assert _walk(llg, b"package main\nconstants") and not _walk(llg, b"package main\nconstraints")


def test_llguidance_reads_smiles_acrylates_as_another_language() -> None:
    """Why the heavy sweep marks SMILES/acrylates xfail for llguidance (tests/test_engines.py):
    after ``O`` an atom ``C`` may be followed by another atom (b"OCC" is a valid prefix:
    Earley and XGrammar agree); llguidance's lexer rejects the second atom."""
    import formalgram as fg

    g, llg, xgr = _byte_engines("transformers_cfg/SMILES/acrylates.ebnf")
    for data in (b"OC", b"OCC", b"OCI", b"CC(C"):
        assert fg.is_prefix(g, data) and _walk(xgr, data)
    assert _walk(llg, b"OC")
    assert not _walk(llg, b"OCC") and not _walk(llg, b"OCI") and not _walk(llg, b"CC(C")


def test_llguidance_reads_smiles_isocyanates_as_another_language() -> None:
    """Why the heavy sweep marks SMILES/isocyanates xfail for llguidance (tests/test_engines.py):
    after b"O=C" the grammar allows the group b"O=C=N" and also atoms (b"O=CO": ``O``, a
    double bond, ``C``, ``O``); llguidance allows only the group."""
    import formalgram as fg

    g, llg, xgr = _byte_engines("transformers_cfg/SMILES/isocyanates.ebnf")
    for data in (b"O=C=N", b"O=CO", b"O=CN"):
        assert fg.is_prefix(g, data) and _walk(xgr, data)
    assert _walk(llg, b"O=C=N") and not _walk(llg, b"O=CO") and not _walk(llg, b"O=CN")
