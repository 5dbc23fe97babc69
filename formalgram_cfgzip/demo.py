"""The main job on built-in defaults: decode a real text token by token under a grammar,
with the engine over the full vocabulary and over the token classes side by side.

``formalgram-cfgzip demo`` compresses a grammar (the built-in C-like one, a grammar file,
or XGrammar's grammar for a JSON Schema) against a vocabulary, tokenizes a text of the
grammar's language (a small program for ``builtin:minic``, an order document for
``builtin:json`` and the built-in ``order`` schema, or the user's ``--text``) and feeds it
to both matchers one token at a time.  At every step it times the full-vocabulary mask and
the compressed one (the class mask plus its expansion back to the vocabulary), checks
that the two are bit-identical and that they allow the text's next token, then accepts
that token in both.  After the last token it asks for a stop token: the grammar must
accept the text as a whole.  A token the engine refuses is located to the byte where the
text leaves the language with the Earley recognizer, and reported in one line.

Tokenization: a built-in quicktok vocabulary (``llama3``, ``qwen3``, ...) encodes with its
own BPE encoder, the model's real tokenization; any other vocabulary (it has no encoder
of its own) with :func:`greedy_tokenize`, a longest match over its text tokens that
does not look at the grammar.  Either way a text of the language becomes tokens the
grammar allows, since the engines judge a token by its bytes.
"""

from __future__ import annotations

import bisect
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from formalgram.errors import FormalgramError, GrammarTooLarge
from formalgram_cfgzip.sources import example_text, read_grammar_file, schema_grammar

if TYPE_CHECKING:
    import numpy.typing as npt

    from formalgram.grammar import Grammar
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.engines import CompiledGrammar, EngineName
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["classes_summary", "greedy_tokenize", "run_demo"]

_TEXT_SHOWN = 4000  # bytes of the decoded text printed at the end
_NL = b"\n"


def classes_summary(classes: TokenClasses, seconds: float) -> str:
    """The lines ``compress`` and the demo print about a compression: vocabulary, classes,
    ratio, invalid tokens, GNF size, time and peak memory.

    Parameters
    ----------
    classes : TokenClasses
        The classes.
    seconds : float
        The compression's wall time.

    Returns
    -------
    str
        Indented ``name  value`` lines.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> classes = compress('root ::= "a"+', Vocabulary([b"a", b"aa", b"b"], name="toy"), progress=False)
    >>> print(classes_summary(classes, 0.5).splitlines()[1])
      classes         2
    """
    v = classes.vocab
    st = classes.stats
    ratio = v.size / max(classes.num_classes, 1)
    rows = [
        ("vocabulary", f"{v.name or '?'} ({v.size} tokens, logit width {v.logit_width})"),
        ("classes", f"{classes.num_classes}"),
        ("compression", f"{ratio:.1f} : 1"),
        ("invalid tokens", f"{len(classes.invalid)}"),
        ("GNF", f"{int(st.get('gnf_rules', 0))} rules, {int(st.get('gnf_nonterminals', 0))} nonterminals"),
        ("time", f"{seconds:.2f} s (GNF {st.get('gnf_seconds', 0.0):.2f} s)"),
        ("peak memory", f"{st.get('peak_rss_mib', 0.0):.0f} MiB"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {val}" for k, val in rows)


def greedy_tokenize(vocab: Vocabulary, data: bytes) -> list[int]:
    """Tokenize ``data`` by greedy longest match over the vocabulary's text tokens.

    At every position the longest text token (not special, not a hole) that ``data``
    continues with is taken; of tokens with equal bytes, the lowest id.  The grammar plays
    no part.

    Parameters
    ----------
    vocab : Vocabulary
    data : bytes

    Returns
    -------
    list of int
        Token ids whose bytes, joined, are ``data``.

    Raises
    ------
    FormalgramError
        At a byte that no text token starts with (a vocabulary without byte fallback).

    Notes
    -----
    O(size) to index the vocabulary, then O(len(data) * L) dictionary probes for the
    longest token length ``L``.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> vocab = Vocabulary([b"a", b"b", b"ab", b"abc", b"<s>"], special_ids=[4])
    >>> greedy_tokenize(vocab, b"abcab")
    [3, 2]
    >>> greedy_tokenize(vocab, b"abx")
    Traceback (most recent call last):
    ...
    formalgram.errors.FormalgramError: the vocabulary has no token for byte 2 of the text (b'x')
    """
    by_bytes: dict[bytes, int] = {}
    tokens = vocab.tokens
    for i in vocab.text_ids():
        tok = tokens[i]
        if tok:
            by_bytes.setdefault(tok, i)
    lengths = sorted({len(t) for t in by_bytes}, reverse=True)
    out: list[int] = []
    pos, n = 0, len(data)
    while pos < n:
        for length in lengths:
            tid = by_bytes.get(data[pos : pos + length]) if pos + length <= n else None
            if tid is not None:
                out.append(tid)
                pos += length
                break
        else:
            raise FormalgramError(
                f"the vocabulary has no token for byte {pos} of the text ({data[pos : pos + 1]!r})"
            )
    return out


def _tokenize(tokenizer: str, vocab: Vocabulary, data: bytes) -> tuple[list[int], str]:
    """The text's tokens and how they were made: quicktok's encoder for its built-in
    vocabularies (checked to spell ``data`` with this vocabulary's text tokens), else
    :func:`greedy_tokenize`."""
    from formalgram_cfgzip.vocabulary.builtins import BUILTIN_NAMES

    if tokenizer in BUILTIN_NAMES:  # quicktok names its encodings as the built-ins are named
        try:
            import quicktok

            ids = [int(i) for i in quicktok.get_encoding(tokenizer).encode_ordinary(data.decode("utf-8"))]
        except (ImportError, RuntimeError, UnicodeDecodeError):  # not quicktok's, or not text
            ids = []
        special = vocab.special_ids
        spelled = bool(ids) and all(
            0 <= i < vocab.size and vocab.tokens[i] is not None and i not in special for i in ids
        )
        if spelled and vocab.decode(ids) == data:
            return ids, f"quicktok's {tokenizer} encoder, the model's own tokenization"
    return greedy_tokenize(vocab, data), "greedy longest match over the vocabulary's tokens"


def _read_text(spec: str) -> bytes:
    """The bytes of ``--text``: a file, or ``-`` for standard input."""
    if spec == "-":
        return sys.stdin.buffer.read()
    path = Path(spec)
    if not path.is_file():
        raise FormalgramError(f"text file not found: {spec}")
    return path.read_bytes()


def _where(data: bytes, pos: int) -> str:
    """``byte N (line L, column C)`` of position ``pos`` in ``data`` (lines and columns from 1)."""
    line = data.count(b"\n", 0, pos) + 1
    column = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    return f"byte {pos} (line {line}, column {column})"


def _leaving_byte(g: Grammar, data: bytes, end: int) -> int | None:
    """The first byte of ``data[:end]`` after which no member of L(g) starts so (the
    Earley recognizer's reading), or ``None`` when it finds none or runs out of budget."""
    from formalgram.recognize.earley import EarleyRecognizer

    r = EarleyRecognizer(g)
    try:
        for k in range(end):
            if not r.feed(data[k]) or not r.is_viable():
                return k
    except GrammarTooLarge:
        return None
    return None


def _show(tok: bytes, width: int = 18) -> str:
    try:
        text = repr(tok.decode("utf-8"))
    except UnicodeDecodeError:
        text = repr(tok)
    return text if len(text) <= width else text[: width - 3] + "..."


def _line_so_far(data: bytes, end: int, newlines: list[int], width: int = 44) -> str:
    """The line of ``data[:end]`` being written, numbered, its tail when it is long (a token
    that ends lines shows the last line it ended)."""
    while end > 0 and data[end - 1] == 10:
        end -= 1
    start = data.rfind(_NL, 0, end) + 1
    line = data[start:end].decode("utf-8", "replace").replace("\t", " ")
    if len(line) > width:
        line = "..." + line[-(width - 3) :]
    return f"{bisect.bisect_left(newlines, end) + 1:>3}| {line}"


def _bit(mask: npt.NDArray[np.int32], token: int) -> bool:
    return bool((int(mask[0, token >> 5]) >> (token & 31)) & 1)


@dataclass
class _Decoding:
    """What the token-by-token decoding saw."""

    t_full: list[float] = field(default_factory=list)  # microseconds per step
    t_comp: list[float] = field(default_factory=list)
    mismatches: list[int] = field(default_factory=list)  # steps whose masks differed
    allowed: int = 0  # steps whose token both masks allowed and both matchers accepted
    decoded: int = 0  # bytes of the text accepted
    ended: bool = False  # the stop token was accepted and both matchers terminated
    failure: str = ""  # why the decoding stopped early, if it did


def _decode(
    full: CompiledGrammar,
    comp: CompiledGrammar,
    g: Grammar,
    data: bytes,
    tokens: list[int],
    stop: int | None,
    engine: str,
) -> _Decoding:
    """Feed ``tokens`` (then ``stop``, unless it is ``None``) to both grammars, one line per
    step; stops at the first token a mask or a matcher refuses."""
    vocab = full.vocab
    fm, cm = full.matcher(), comp.matcher()
    fb, cb = full.allocate_token_bitmask(1), comp.allocate_token_bitmask(1)
    width = vocab.logit_width
    newlines = [i for i, b in enumerate(data) if b == 10]
    run = _Decoding()
    todo = [*tokens, stop] if stop is not None else tokens
    for step, tid in enumerate(todo):
        a = time.perf_counter()
        fm.fill_next_token_bitmask(fb)
        b = time.perf_counter()
        cm.fill_next_token_bitmask(cb)
        c = time.perf_counter()
        run.t_full.append((b - a) * 1e6)
        run.t_comp.append((c - b) * 1e6)
        same = bool(np.array_equal(fb, cb))
        if not same:
            run.mismatches.append(step)
        count = int(np.unpackbits(fb.view(np.uint8), bitorder="little")[:width].sum())
        in_full, in_comp = _bit(fb, tid), _bit(cb, tid)
        is_stop = step == len(tokens)
        tok = vocab.tokens[tid] or b""
        label = tok.decode("utf-8", "replace") if is_stop else _show(tok)
        end = run.decoded + (len(tok) if in_full and in_comp and not is_stop else 0)
        where = "(the stop token: end of text)" if is_stop else _line_so_far(data, end, newlines)
        print(
            f"  {step:>4}  {count:>7}  {run.t_full[-1]:>7.0f}  {run.t_comp[-1]:>7.0f}  "
            f"{'yes' if same else 'NO':>4}  {'ok' if in_full and in_comp else 'NO':>4}  {label:<18}  {where}"
        )
        if not (in_full and in_comp):
            run.failure = _refusal(engine, g, data, run.decoded, tok, step, is_stop, in_full, in_comp)
            break
        if not fm.accept_token(tid) or not cm.accept_token(tid):
            run.failure = f"step {step}: a matcher refused token {tid} {_show(tok)} that its mask allowed"
            break
        run.allowed += 1
        if is_stop:
            run.ended = fm.is_terminated() and cm.is_terminated()
            if not run.ended:
                run.failure = "a matcher did not terminate after the stop token"
        else:
            run.decoded = end
    return run


def run_demo(
    *,
    grammar: str | None = None,
    schema: str | None = None,
    text: str | None = None,
    tokenizer: str = "llama3",
    steps: int | None = None,
    engine: EngineName = "xgrammar",
) -> int:
    """Decode a text under a grammar with the full-vocabulary and the compressed engine.

    Parameters
    ----------
    grammar : str or None, keyword-only
        ``builtin:minic``, ``builtin:json`` or a grammar file (GBNF, or Lark with ``.lark``:
        :func:`~formalgram_cfgzip.sources.read_grammar_file`); the default (with no
        ``schema``) is ``builtin:minic``.
    schema : str or None, keyword-only
        A JSON Schema file or ``builtin:order``, compiled to XGrammar's grammar for it.
    text : str or None, keyword-only
        The text to decode: a file, or ``-`` for standard input; the default is the
        built-in text of the built-in grammar or schema (:func:`example_text`).
    tokenizer : str, keyword-only
        A built-in vocabulary name or a tokenizer file (see ``Vocabulary.load``).
    steps : int or None, keyword-only
        Decode at most this many tokens of the text (then the end is not checked).
    engine : {"xgrammar", "llguidance", "native"}, keyword-only
        The engine run over the full vocabulary and over the classes.  ``"native"`` runs
        over the classes only (its tables built from the compression's own search,
        ``compress(..., domains=True)``), against XGrammar over the full vocabulary.

    Returns
    -------
    int
        0 when every mask was bit-identical, every token of the text allowed by both and
        (unless ``steps`` stopped it early) the whole text accepted; 1 otherwise, with one
        line on standard error saying why.

    Raises
    ------
    FormalgramError
        On both ``grammar`` and ``schema``, no text for a grammar without a built-in one,
        a file that cannot be read, a grammar or schema the parser or engine rejects.

    Notes
    -----
    The compression (once), two engine compilations, then per token two mask fills, two
    accepts and one printed line.  Without a stop token in the vocabulary the end of the
    text is judged by the Earley recognizer (within its default budget).
    """
    from formalgram_cfgzip.compress import compress
    from formalgram_cfgzip.engines import compile_full, compile_grammar
    from formalgram_cfgzip.grammar_text import read_grammar
    from formalgram_cfgzip.vocabulary import Vocabulary

    if grammar is not None and schema is not None:
        raise FormalgramError("give --grammar or --schema, not both")
    if schema is not None:
        source = schema_grammar(schema)
        what = f"JSON schema {schema}, XGrammar's grammar for it"
    else:
        grammar = grammar or "builtin:minic"
        source = read_grammar_file(grammar)
        what = grammar
    grammar_text, root = source.text, source.root
    g = read_grammar(grammar_text, root)
    data = _read_text(text) if text is not None else example_text(grammar=grammar, schema=schema)
    print(f"grammar    {what}: {len(g.rules)} rules, {len(g.names)} nonterminals")
    origin = {None: f"the built-in example of {schema or grammar}", "-": "standard input"}.get(text, text)
    print(f"text       {origin}: {len(data)} bytes, {len(data.splitlines())} lines")
    t0 = time.perf_counter()
    vocab = Vocabulary.load(tokenizer)
    print(f"tokenizer  {tokenizer}: {vocab.size} tokens, loaded in {time.perf_counter() - t0:.1f} s")
    tokens, how = _tokenize(tokenizer, vocab, data)
    print(f"tokens     {len(tokens)} ({how})")
    t0 = time.perf_counter()
    native = engine == "native"
    classes = compress(grammar_text, vocab, root=root, progress=sys.stderr.isatty(), domains=native)
    offline = time.perf_counter() - t0
    print("\ncompression (offline, once per grammar and tokenizer):")
    print(classes_summary(classes, offline))

    reference: EngineName = "xgrammar" if native else engine  # the native engine has no full form
    full = compile_full(vocab, grammar_text, engine=reference, root=root)
    t0 = time.perf_counter()
    comp = compile_grammar(classes, grammar_text, engine=engine, root=root)
    if native:
        print(f"native tables: built in {time.perf_counter() - t0:.2f} s from the compression's own search")
    capped = steps is not None and steps < len(tokens)
    stop = min(vocab.stop_ids) if vocab.stop_ids and not capped else None
    under = (
        f"{reference} over the full vocabulary, the native engine over the classes"
        if native
        else (f"{engine}, over the full vocabulary and over the classes")
    )
    print(f"\ndecoding the text under {under}:")
    print(
        "  (allowed: tokens the mask allows; full, classes: mask times in microseconds, the second\n"
        "  with the expansion to the vocabulary; same: bit-identical; next: the text's next token allowed)"
    )
    head = (
        f"{'step':>4}  {'allowed':>7}  {'full':>7}  {'classes':>7}  {'same':>4}  {'next':>4}  {'token':<18}"
    )
    print(f"  {head}  text")
    run = _decode(full, comp, g, data, tokens[:steps] if capped else tokens, stop, engine)
    if not capped and stop is None and not run.failure:
        from formalgram.recognize.earley import accepts

        try:
            run.ended = accepts(g, data)
        except GrammarTooLarge:
            run.ended = False
        if not run.ended:
            run.failure = (
                f"the text ends at {_where(data, len(data))} but is not a member of the language (Earley)"
            )
    if run.failure and len(run.t_full) <= len(tokens):
        whole = f"not reached: the decoding stopped at step {len(run.t_full) - 1}"
    elif capped:
        whole = f"not checked: stopped after {steps} of {len(tokens)} tokens (--steps)"
    elif run.ended and stop is not None:
        label = (vocab.tokens[stop] or b"").decode("utf-8", "replace")
        whole = f"accepted: after the last token the grammar allows {label} and both matchers terminate"
    elif run.ended:
        whole = "accepted (Earley; the vocabulary has no stop token to ask the engines)"
    else:
        whole = "NOT accepted"
    _print_summary(run, len(tokens), vocab.size, classes.num_classes, offline, whole)
    done = data[: run.decoded]
    print(f"\ndecoded text ({len(done)} bytes, the accepted tokens joined):")
    shown = done[:_TEXT_SHOWN].decode("utf-8", "replace").rstrip("\n")
    print("  " + shown.replace("\n", "\n  ") + (" ..." if len(done) > _TEXT_SHOWN else ""))
    failure = run.failure
    if run.mismatches and not failure:
        failure = f"the masks differed at {len(run.mismatches)} steps (first: step {run.mismatches[0]})"
    if failure:
        print(f"\nresult: FAILED: {failure}")
        print(f"formalgram-cfgzip: demo: {failure}", file=sys.stderr)
        return 1
    end = "not checked (--steps stopped it early)" if capped else "accepted as a whole"
    print(f"\nresult: OK: every mask bit-identical, every token of the text allowed, the text {end}")
    return 0


def _refusal(
    engine: str,
    g: Grammar,
    data: bytes,
    pos: int,
    tok: bytes,
    step: int,
    is_stop: bool,
    by_full: bool,
    by_comp: bool,
) -> str:
    """The one line that says where the text left the language (or which mask refused)."""
    if by_full != by_comp:
        side = "the compressed" if by_full else "the full-vocabulary"
        return (
            f"step {step}: only {side} mask refuses the text's next token {_show(tok)} at {_where(data, pos)}"
        )
    if is_stop:
        return (
            f"the text is only a prefix of the language: at its end, {_where(data, pos)}, "
            "the grammar does not allow it to stop"
        )
    k = _leaving_byte(g, data, pos + len(tok))
    if k is None or k < pos:
        return (
            f"step {step}: {engine} does not allow token {_show(tok)} at {_where(data, pos)}, where the "
            f"Earley recognizer reads the text on: {engine} reads this grammar as another language"
        )
    return (
        f"the text leaves the language at {_where(data, k)}, byte {data[k : k + 1]!r}, "
        f"in token {step} {_show(tok)}"
    )


def _ratio(full: float, compressed: float) -> str:
    """``N.Nx faster`` (or ``slower``, or ``about equal``): the compressed time against the full one."""
    if max(full, compressed) <= 1.05 * min(full, compressed):
        return "about equal"
    if full > compressed:
        return f"{full / max(compressed, 1e-9):.1f}x faster"
    return f"{compressed / max(full, 1e-9):.1f}x slower"


def _print_summary(
    run: _Decoding, text_tokens: int, vocab_size: int, num_classes: int, offline: float, whole: str
) -> None:
    n = len(run.t_full)
    med_f = statistics.median(run.t_full) if run.t_full else 0.0
    med_c = statistics.median(run.t_comp) if run.t_comp else 0.0
    tot_f, tot_c = sum(run.t_full), sum(run.t_comp)
    if n > text_tokens:
        steps = f"{n} ({text_tokens} tokens of the text + the stop token)"
    else:
        steps = f"{n} of the text's {text_tokens} tokens"
    rows = [
        ("steps", steps),
        ("masks identical", f"{n - len(run.mismatches)} of {n}"),
        ("next token allowed", f"{run.allowed} of {n}"),
        (
            "mask time, median",
            f"full vocabulary {med_f:.0f} us, classes + expansion {med_c:.0f} us ({_ratio(med_f, med_c)})",
        ),
        (
            "mask time, total",
            f"full vocabulary {tot_f / 1e3:.1f} ms, classes + expansion {tot_c / 1e3:.1f} ms "
            f"({_ratio(tot_f, tot_c)})",
        ),
        (
            "compression",
            f"{vocab_size} tokens -> {num_classes} classes ({vocab_size / max(num_classes, 1):.1f} : 1), "
            f"{offline:.2f} s offline",
        ),
        ("whole text", whole),
    ]
    w = max(len(k) for k, _ in rows)
    print("\nsummary:")
    for key, value in rows:
        print(f"  {key:<{w}}  {value}")
