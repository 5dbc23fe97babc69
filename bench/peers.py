"""The native engine against GLRMask and XGrammar on the same walks, in one process.

``python -m bench.native_bench --peers`` runs this module: for every grammar that all three
engines read (SynCode's Go, C, Java and SQL, lark's json and csv, the JSON schemas of
``tests/data/json_schemas``; Llama-3 by default):

* the native engine compiles the grammar's GBNF (a Lark file through
  :func:`formalgram.syntax.lark.parse_lark`, a schema through XGrammar's own converter
  :func:`~formalgram_cfgzip.json_schema.from_json_schema`): classes with their domains, then
  the native tables;
* XGrammar compiles the same GBNF over the full vocabulary (the reference);
* GLRMask (PyPI ``glrmask``; optional) compiles the Lark text itself, with the lazy
  quantifiers of its regular expressions made greedy (``*?`` -> ``*``, ``+?`` -> ``+``: the
  same language) and rule and terminal priorities dropped (it refuses both), or the schema
  itself.  Its compile runs in a child process under ``--glrmask-timeout`` and is kept
  (``Constraint.save``) under ``--cache-dir``.

Walks (seeded, kept under ``--cache-dir``): at every step a token that the native engine and
GLRMask both allow (stop tokens excluded), drawn with probability 0.6 in proportion to its
length in bytes and otherwise uniformly (``--walk-mode tokens``), or from a uniformly drawn
allowed class (``--walk-mode classes``: structure-heavy text with more distinct states).

One pass checks every native full-vocabulary mask against XGrammar's own full-vocabulary
mask, bit for bit, and times XGrammar's fill.  Then ``--repeats`` timed passes replay the
walks with fresh matchers, rotating the order of the variants at every step; each pass starts
cold (native row caches emptied, GLRMask's constraint loaded afresh from its saved form), or
with ``--warm`` both engines keep what the check pass and an untimed pass left (a server
decoding many requests of one grammar):

* ``native``      ``fill_next_token_bitmask`` of the native engine (class fill + expansion);
* ``update``      ``update_next_token_bitmask`` of the native engine on a row that the same
  matcher keeps for its walk (a decoding loop with one row per sequence): only what
  changed since the last step is written; a compiled grammar of its own, so that a row the
  fill just made is not a hit for the update (or the other way round) in the same step;
* ``class-fill``  / ``expansion``  the same split in two (another compiled grammar and
  expander, so that neither shares the other's row cache): ``fill_next_class_bitmask``,
  then :meth:`~formalgram_cfgzip.expand.MaskExpander.expand_at`;
* ``glrmask``     GLRMask's ``fill_mask`` into a 128k-bit int32 row;
* ``accept`` / ``commit``  after every variant's mask, the walk's token accepted by the update
  variant's matcher (``accept_token``) and by GLRMask (``commit_token``): a third table puts
  them side by side, and per token the mask and the acceptance together.

With ``--evict MIB`` every variant's step follows an untimed rewrite of a buffer of that size
(the split's expansion follows its class fill), the same for every engine: the rest of a serving
step between two masks of one sequence (the other sequences of a batch, sampling, the
framework), which leaves the caches cold.

With ``--prewarm ROWS`` each native variant pins the token rows of up to ROWS class masks that
:meth:`NativeCompiled.prewarm <formalgram_cfgzip.engines.native.matcher.NativeCompiled.prewarm>`
meets from the start, and stores the class masks of up to ``--prefixes`` paths of token
classes from the start in the prefix memo (timed into the native compile): a compile-time
step, like GLRMask's own, whose rows and masks outlive the cold passes' emptied row caches.

Reported per grammar: median and p99 over all timed steps of all passes, the p99 of each
step's minimum over the passes and the total (the sum of those minima), which drop the
preemptions of a loaded machine (XGrammar's from its one pass), of each,
the ratios native / GLRMask, the class-fill / expansion split and the expander's plans; a
Markdown table at the end, under it the run's verdict on the update (:func:`targets_lines`: the
grammars whose median is at most 0.5x GLRMask's and whose p99 is at most GLRMask's, the
largest ratios to three places, the mismatches), and with ``--plot`` a figure of the per-step
times (each step's minimum over the passes) per engine.  With ``--kinds`` an untimed cold replay sorts the update's
steps by what its call did (:func:`update_kinds`), with both engines' medians over each kind: where
the update's median lies.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.engines import compile_full
from formalgram_cfgzip.engines import compile_grammar as compile_compressed
from formalgram_cfgzip.engines.native.matcher import NativeCompiled
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["CASES", "PeerCase", "glrmask_lark", "main_peers", "record_peer_walks"]

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "tests" / "data" / "json_schemas"
LENGTH_BIAS = 0.6  # share of the steps whose token is drawn in proportion to its length


@dataclass(frozen=True)
class PeerCase:
    """One grammar of the comparison: ``kind`` ``"lark"`` (``path`` under the grammar
    folder, or absolute) or ``"schema"`` (a JSON Schema file)."""

    name: str
    kind: str
    path: str


CASES = [
    PeerCase("go", "lark", "syncode/go_grammar.lark"),
    PeerCase("c", "lark", "syncode/c_grammar.lark"),
    PeerCase("java", "lark", "syncode/java_grammar.lark"),
    PeerCase("sql", "lark", "syncode/sql_grammar.lark"),
    PeerCase("json", "lark", "lark/json.lark"),
    PeerCase("csv", "lark", "lark/csv.lark"),
] + [PeerCase(f"schema:{p.stem}", "schema", str(p)) for p in sorted(SCHEMAS.glob("*.json"))]


def glrmask_lark(text: str) -> str:
    """Lark text as GLRMask reads it: lazy quantifiers in regular expressions made greedy
    (``*?`` -> ``*``, ``+?`` -> ``+``; a regular expression's language is the same either way)
    and the priorities of rule and terminal definitions (``name.2:``) dropped.  String
    literals and comments are left alone.

    Examples
    --------
    >>> glrmask_lark('A.2: /a.*?b/ | "x*?"\\nstart: A+ // c*?')
    'A: /a.*b/ | "x*?"\\nstart: A+ // c*?'
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"' or (ch == "/" and not text.startswith("//", i)):
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            body = text[i : j + 1]
            if ch == "/":
                body = re.sub(r"(?<!\\)([*+])\?", r"\1", body)
            out.append(body)
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
        else:
            out.append(ch)
            i += 1
    return re.sub(r"(?m)^(\s*[?!]?[A-Za-z_][A-Za-z_0-9]*)\.-?\d+(\s*:)", r"\1\2", "".join(out))


@dataclass
class Loaded:
    """One case, compiled by every engine that could."""

    case: PeerCase
    gbnf: str
    glr_source: str
    classes: TokenClasses
    native: NativeCompiled
    split: NativeCompiled  # a second compiled grammar: its own expander and row cache
    update: NativeCompiled  # a third one, for the update variant: its own expander and row cache
    compile_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    glr: Any = None  # the GLRMask Constraint, or None
    glr_bytes: bytes = b""  # its saved form: each timed pass loads a fresh one


def case_source(case: PeerCase, root: Path, overrides: dict[str, str]) -> tuple[str, str] | None:
    """(GBNF for the native engine and XGrammar, source for GLRMask), or None when absent."""
    path = Path(overrides.get(case.name, case.path))
    if not path.is_absolute():
        path = root / path
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    if case.kind == "schema":
        from formalgram_cfgzip.json_schema import from_json_schema

        return from_json_schema(json.loads(text)), text
    from formalgram.syntax.lark import parse_lark

    return "root ::= start\n" + parse_lark(text, start="start").to_gbnf(), glrmask_lark(text)


def glrmask_vocab(vocab: Vocabulary) -> Any:
    """GLRMask's vocabulary: every token with bytes, special tokens left out (as
    ``bench/maskbench.py``)."""
    import glrmask

    return glrmask.Vocab.from_id_to_bytes(
        {i: t for i, t in enumerate(vocab.tokens) if t and i not in vocab.special_ids}
    )


def _glrmask_child(kind: str, source_file: str, vocab_name: str, out_file: str) -> None:
    """Child process: compile with GLRMask, write the saved constraint and the seconds."""
    import glrmask

    vocab = Vocabulary.builtin(vocab_name)
    gv = glrmask_vocab(vocab)
    source = Path(source_file).read_text(encoding="utf-8")
    t0 = time.perf_counter()
    grammar = (
        glrmask.Grammar.from_json_schema(source) if kind == "schema" else glrmask.Grammar.from_lark(source)
    )
    constraint = grammar.compile(gv)
    seconds = time.perf_counter() - t0
    Path(out_file).write_bytes(constraint.save())
    Path(out_file + ".json").write_text(json.dumps({"seconds": seconds}))


def glrmask_constraint(
    loaded: Loaded, vocab: Vocabulary, gv: Any, cache_dir: Path, timeout: float
) -> tuple[Any, float | None, str]:
    """GLRMask's constraint (loaded from ``cache_dir`` or compiled in a child process under
    ``timeout``), its compile seconds, and a note (``""``, ``"loaded"``, or why not)."""
    import glrmask

    key = hashlib.sha256(
        f"{glrmask.__version__}\0{vocab.fingerprint()}\0{loaded.case.kind}\0{loaded.glr_source}".encode()
    ).hexdigest()[:16]
    out = cache_dir / f"glrmask-{loaded.case.name.replace(':', '_')}-{key}.bin"
    note = "loaded"
    if not out.exists():
        note = ""
        src = cache_dir / f"{out.stem}.src"
        src.write_text(loaded.glr_source, encoding="utf-8")
        code = (
            "import sys; from bench.peers import _glrmask_child; "
            "_glrmask_child(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])"
        )
        cmd = [sys.executable, "-c", code, loaded.case.kind, str(src), vocab.name or "llama3", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)
        except subprocess.TimeoutExpired:
            return None, None, f"GLRMask compile timed out after {timeout:.0f} s"
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return None, None, f"GLRMask refused it: {tail[:160]}"
    seconds = float(json.loads(Path(str(out) + ".json").read_text())["seconds"])
    loaded.glr_bytes = out.read_bytes()
    return glrmask.Constraint.load(loaded.glr_bytes, gv), seconds, note


def load_case(case: PeerCase, gbnf: str, glr_source: str, vocab: Vocabulary, cache_dir: Path) -> Loaded:
    """Compress (with domains) and build the native tables, both kept under ``cache_dir``."""
    from bench.online_bench import load_or_compress

    name = case.name.replace(":", "_")
    t0 = time.perf_counter()
    classes = load_or_compress(gbnf, vocab, name, str(cache_dir), domains=True)
    t1 = time.perf_counter()
    tables = cache_dir / f"{name}-{vocab.name}-native"
    native = compile_compressed(classes, gbnf, engine="native", tables=tables)
    t2 = time.perf_counter()
    assert isinstance(native, NativeCompiled)
    split = NativeCompiled(classes, native.tables)
    update = NativeCompiled(classes, native.tables)
    loaded = Loaded(case, gbnf, glr_source, classes, native, split, update)
    loaded.compile_s.update(compress=t1 - t0, tables=t2 - t1)
    return loaded


def _bits(row: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.bool_]:
    return np.unpackbits(row.view(np.uint8), bitorder="little")[:width].astype(bool)


def record_peer_walks(
    native: NativeCompiled, glr: Any, n: int, steps: int, seed: int, mode: str
) -> list[list[int]]:
    """Seeded walks over the tokens both the native engine (XGrammar's masks, checked in the
    replay) and GLRMask (when given) allow, stop tokens excluded: ``mode="tokens"`` draws the
    token in proportion to its length with probability :data:`LENGTH_BIAS`, else uniformly;
    ``mode="classes"`` draws an allowed class uniformly, then one of its allowed tokens.  A walk
    ends early when nothing is allowed."""
    rng = np.random.default_rng(seed)
    vocab = native.vocab
    width = native.logit_width
    lengths = np.array([len(t) for t in vocab.tokens] + [0] * (width - len(vocab.tokens)), dtype=float)
    token_class = np.asarray(native.classes.token_class) if native.classes is not None else None
    never = np.zeros(width, dtype=bool)
    never[sorted(vocab.stop_ids)] = True
    bm = native.allocate_token_bitmask(1)
    gb = np.zeros(max(native.token_words, glr.mask_len() if glr is not None else 0), dtype=np.int32)
    walks = []
    for _ in range(n):
        m = native.matcher()
        state = glr.start() if glr is not None else None
        seq: list[int] = []
        while len(seq) < steps:
            m.fill_next_token_bitmask(bm)
            ok = _bits(bm[0], width) & ~never
            if state is not None:
                state.fill_mask(gb)
                ok &= _bits(gb[: native.token_words], width)
            allowed = np.flatnonzero(ok)
            if allowed.size == 0:
                break
            if mode == "classes" and token_class is not None:
                k = int(rng.choice(np.unique(token_class[allowed])))
                tok = int(rng.choice(allowed[token_class[allowed] == k]))
            elif rng.random() < LENGTH_BIAS:
                p = lengths[allowed]
                tok = int(rng.choice(allowed, p=p / p.sum()))
            else:
                tok = int(rng.choice(allowed))
            if not m.accept_token(tok) or (state is not None and not state.commit_token(tok)):
                break
            seq.append(tok)
        walks.append(seq)
    return walks


def cached_peer_walks(
    loaded: Loaded, n: int, steps: int, mode: str, cache_dir: Path
) -> tuple[list[list[int]], str]:
    """:func:`record_peer_walks` (seed 0), kept as JSON under ``cache_dir`` keyed by the
    grammar, GLRMask's source and the vocabulary."""
    key = hashlib.sha256(
        f"{loaded.classes.grammar_sha256}\0{loaded.glr_source if loaded.glr is not None else ''}\0"
        f"{loaded.native.vocab.fingerprint()}\0{n}\0{steps}\0{mode}\0{LENGTH_BIAS}".encode()
    ).hexdigest()[:16]
    f = cache_dir / f"walks-{loaded.case.name.replace(':', '_')}-{key}.json"
    if f.exists():
        return [list(map(int, w)) for w in json.loads(f.read_text())], "loaded"
    walks = record_peer_walks(loaded.native, loaded.glr, n, steps, 0, mode)
    f.write_text(json.dumps(walks))
    return walks, "recorded"


def check_pass(loaded: Loaded, full: Any, walks: list[list[int]]) -> tuple[list[float], dict[str, int]]:
    """XGrammar's full-vocabulary fill timed at every step, and the native engine's mask (and
    GLRMask's, for information) compared with it bit for bit."""
    native = loaded.native
    width = native.logit_width
    bm_x = native.allocate_token_bitmask(1)
    bm_n = native.allocate_token_bitmask(1)
    gb = np.zeros(max(native.token_words, loaded.glr.mask_len() if loaded.glr is not None else 0), np.int32)
    bm_u = native.allocate_token_bitmask(1)
    counts = {"steps": 0, "native_mismatch": 0, "update_mismatch": 0, "glrmask_differs": 0, "refused": 0}
    times: list[float] = []
    perf = time.perf_counter
    for walk in walks:
        mx = full.matcher()
        raw = getattr(mx, "_m", mx)
        mn, mu = native.matcher(), loaded.update.matcher()
        state = loaded.glr.start() if loaded.glr is not None else None
        for tok in walk:
            t = perf()
            raw.fill_next_token_bitmask(bm_x, 0)
            times.append(perf() - t)
            mn.fill_next_token_bitmask(bm_n, 0)
            mu.update_next_token_bitmask(bm_u, 0)
            counts["steps"] += 1
            if not np.array_equal(bm_x, bm_n):
                counts["native_mismatch"] += 1
            if not np.array_equal(bm_x, bm_u):
                counts["update_mismatch"] += 1
            if state is not None:
                state.fill_mask(gb)
                if not np.array_equal(_bits(gb[: native.token_words], width), _bits(bm_x[0], width)):
                    counts["glrmask_differs"] += 1
                state.commit_token(tok)
            if not (mx.accept_token(tok) and mn.accept_token(tok) and mu.accept_token(tok)):
                counts["refused"] += 1
                break
    for c in (native, loaded.update):
        c.expander.clear_cache()  # type: ignore[union-attr]
    return times, counts


def timed_pass(
    loaded: Loaded,
    walks: list[list[int]],
    seed: int,
    glr: Any,
    cold: bool,
    evict: np.ndarray | None = None,
) -> tuple[dict[str, list[float]], Counter[str], int]:
    """One replay of every walk by every variant, the variants' order rotated per step; with
    ``cold`` the native row caches are emptied first (the caller gives GLRMask a freshly loaded
    constraint ``glr``), else both keep what earlier passes left.  With ``evict`` (a buffer)
    every variant's step follows an untimed rewrite of that buffer: the memory traffic of the
    rest of a serving step between two masks of one sequence.  The walk's token is then accepted
    by every matcher: the update variant's ``accept_token`` is timed (``accept``), and GLRMask's
    ``commit_token`` (``commit``).  Returns the times, the split's expansion plans and the
    update's fills answered by the prefix memo."""
    native, split, update = loaded.native, loaded.split, loaded.update
    if cold:
        for c in (native, split, update):
            c.expander.clear_cache()  # type: ignore[union-attr]
    ex = split.expander
    assert ex is not None
    bm = native.allocate_token_bitmask(1)
    bm2 = native.allocate_token_bitmask(1)
    cm = split.allocate_class_bitmask(1)
    gb = np.zeros(max(native.token_words, glr.mask_len() if glr is not None else 0), np.int32)
    variants = ["native", "update", "split"] + (["glrmask"] if glr is not None else [])
    times: dict[str, list[float]] = {
        k: [] for k in ("native", "update", "class-fill", "expansion", "glrmask", "accept", "commit")
    }
    plans: Counter[str] = Counter()
    perf = time.perf_counter
    rng = np.random.default_rng(seed)
    memo = 0
    # each walk's own row for the update variant, made and written before the timed steps (a
    # decoding loop's bitmask is allocated once, its pages already mapped; GLRMask's `gb` too)
    own_rows = [update.allocate_token_bitmask(1) for _ in walks]
    for r in own_rows:
        r.fill(-1)
    for walk, bm_u in zip(walks, own_rows, strict=True):
        mn, ms, mu = native.matcher(), split.matcher(), update.matcher()
        state = glr.start() if glr is not None else None
        for tok in walk:
            for j in rng.permutation(len(variants)):
                v = variants[j]
                if evict is not None:
                    evict += 1
                if v == "native":
                    t = perf()
                    mn.fill_next_token_bitmask(bm, 0)
                    times["native"].append(perf() - t)
                elif v == "update":
                    t = perf()
                    mu.update_next_token_bitmask(bm_u, 0)
                    times["update"].append(perf() - t)
                elif v == "split":
                    t = perf()
                    ms.fill_next_class_bitmask(cm, 0)
                    t1 = perf()
                    ex.expand_at(cm, bm2, 0)
                    t2 = perf()
                    times["class-fill"].append(t1 - t)
                    times["expansion"].append(t2 - t1)
                    plans[ex.last_strategy] += 1
                elif state is not None:
                    t = perf()
                    state.fill_mask(gb)
                    times["glrmask"].append(perf() - t)
            mn.accept_token(tok)
            ms.accept_token(tok)
            t = perf()
            mu.accept_token(tok)
            times["accept"].append(perf() - t)
            if state is not None:
                t = perf()
                state.commit_token(tok)
                times["commit"].append(perf() - t)
        memo += mu.info().get("prefix_hits", 0)
    return times, plans, memo


def update_kinds(loaded: Loaded, walks: list[list[int]]) -> list[str]:
    """What the update variant's call did at every step of a cold pass, replayed untimed (its
    row cache emptied, fresh matchers, the same walks): ``kept`` (the tops did not move, so the
    last fill's class mask and the row in place stand: nothing done), ``unchanged`` (a class
    fill whose mask equals the last), ``in place`` (the differing classes flipped where the row
    lies), ``hit`` (a copy from the row cache or a pinned row), ``built`` (a miss computed class
    by class) or ``patched`` (a miss patched from a cached row or kept set); `` (memo)`` is
    appended where the class mask came from the prefix memo."""
    update = loaded.update
    ex = update.expander
    assert ex is not None
    ex.clear_cache()
    kinds: list[str] = []
    names = (("unchanged", "unchanged"), ("in_place", "in place"), ("hits", "hit"), ("deltas", "patched"))
    for walk in walks:
        m = update.matcher()
        bm = update.allocate_token_bitmask(1)
        for tok in walk:
            before, memo = ex.cache_stats, m.info().get("prefix_hits", 0)
            m.update_next_token_bitmask(bm, 0)
            after = ex.cache_stats
            moved = {k for k in after if after[k] != before.get(k)}
            kind = next(
                (label for key, label in names if key in moved), "built" if "misses" in moved else "kept"
            )
            kinds.append(
                kind + (" (memo)" if m.info().get("prefix_hits", 0) > memo and kind != "kept" else "")
            )
            m.accept_token(tok)
    return kinds


def targets_lines(results: list[tuple[str, float, float, int]]) -> list[str]:
    """Lines of a run's verdict on the update variant, per grammar ``(name, median / GLRMask's
    median, p99 / GLRMask's p99, mismatches of fill and update)``: on how many grammars the
    median is at most 0.5x GLRMask's and the p99 at most GLRMask's, the grammars past either
    line, the largest ratios to three places (the tables round to two) and the mismatches.
    Grammars GLRMask did not run (a ratio that is NaN) are left out and named."""
    ran = [r for r in results if not (math.isnan(r[1]) or math.isnan(r[2]))]
    skipped = [r[0] for r in results if math.isnan(r[1]) or math.isnan(r[2])]
    out = []
    medians, p99s = [(r[0], r[1]) for r in ran], [(r[0], r[2]) for r in ran]
    for label, limit, ratios in (("median", 0.5, medians), ("p99", 1.0, p99s)):
        past = [f"{name} {x:.3f}" for name, x in ratios if x > limit]
        top = max(ratios, key=lambda nx: nx[1], default=None)
        out.append(
            f"# update {label} <= {limit:g}x GLRMask's: {len(ran) - len(past)} of {len(ran)} grammars"
            + (f"; the largest {top[1]:.3f} ({top[0]})" if top is not None else "")
            + (f"; past it: {', '.join(past)}" if past else "")
        )
    out.append(f"# mismatches against XGrammar's masks (fill and update): {sum(r[3] for r in results)}")
    if skipped:
        out.append(f"# without GLRMask: {', '.join(skipped)}")
    return out


def kinds_table(
    kinds: list[str], update: npt.NDArray[np.float64], glr: npt.NDArray[np.float64] | None
) -> list[str]:
    """Lines of a table: per kind of update step (:func:`update_kinds`), its steps, the update's
    and GLRMask's medians over those steps (each step's minimum over the passes, µs), and the
    steps at or below the overall median of the update."""
    median = float(np.median(update))
    out = []
    for kind, n in Counter(kinds).most_common():
        at = np.array([k == kind for k in kinds])
        g = f"{np.median(glr[at]) * 1e6:6.2f}" if glr is not None else "     -"
        out.append(
            f"    {kind:18} {n:4d} steps  update {np.median(update[at]) * 1e6:6.2f} µs  GLRMask {g} µs  "
            f"at or below the update's median: {int(np.sum(update[at] <= median))}"
        )
    return out


def row_copy_us(vocab: Vocabulary) -> float:
    """One ``np.copyto`` of a token row of ``vocab`` (its fastest of 5 x 20,000), in µs: the
    floor of a fill that copies a stored row, call included, on the machine as it is now."""
    import timeit

    a = np.zeros(-(-vocab.logit_width // 32), dtype=np.int32)
    b = np.ones_like(a)
    return min(timeit.repeat(lambda: np.copyto(a, b), number=20_000, repeat=5)) / 20_000 * 1e6


def _stats(xs: list[float]) -> tuple[float, float, float]:
    """(median µs, p99 µs, total ms)."""
    if not xs:
        return float("nan"), float("nan"), float("nan")
    a = np.asarray(xs)
    return float(np.median(a)) * 1e6, float(np.percentile(a, 99)) * 1e6, float(a.sum()) * 1e3


def plot(per_step: dict[str, dict[str, npt.NDArray[np.float64]]], path: str) -> None:
    """Per-step times (µs, log scale) per engine, one panel per grammar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(per_step)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.4 * rows), squeeze=False)
    styles = {
        "XGrammar full": ("tab:gray", 0.8),
        "GLRMask": ("tab:orange", 1.0),
        "native": ("tab:blue", 1.0),
        "native update": ("tab:purple", 1.0),
        "native expansion": ("tab:green", 0.6),
    }
    for ax, name in zip(axes.flat, names, strict=False):
        for label, ys in per_step[name].items():
            color, width = styles.get(label, ("k", 1.0))
            ax.plot(np.arange(ys.size), ys * 1e6, label=label, color=color, linewidth=width)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("step (all walks)")
        ax.set_ylabel("µs")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"# plot: {path}")


def main_peers(args: Any) -> None:
    """The ``--peers`` run of ``bench/native_bench.py`` (see the module docstring)."""
    vocab = Vocabulary.builtin(args.vocab)
    root = Path(args.grammars or os.environ.get("FORMALGRAM_GRAMMARS") or REPO.parent / "shared" / "grammars")
    overrides = dict(item.split("=", 1) for item in (args.grammar or []))
    cache_dir = Path(args.cache_dir or tempfile.mkdtemp(prefix="peers-"))
    cache_dir.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    try:
        import glrmask

        gv = glrmask_vocab(vocab)
        glr_version = glrmask.__version__
    except ImportError:
        gv, glr_version = None, "not installed"
    from importlib.metadata import version

    print(
        f"# vocab={args.vocab} ({vocab.size} tokens); walks {args.walks} x {args.steps} ({args.walk_mode}); "
        f"{'warm' if args.warm else 'cold'} passes; "
        + (f"{args.evict:g} MiB rewritten before every timed mask; " if args.evict else "")
        + (
            f"prewarm: up to {args.prewarm} class masks pinned and {args.prefixes} paths remembered per grammar; "
            if args.prewarm
            else ""
        )
        + f"{args.repeats} timed passes; GLRMask {glr_version}, XGrammar {version('xgrammar')}; cache {cache_dir}"
    )
    print(
        f"# the machine now: one np.copyto of a {4 * -(-vocab.logit_width // 32):,}-byte row {row_copy_us(vocab):.2f} µs"
    )
    evict = np.zeros(int(args.evict * (1 << 18)), np.int32) if args.evict > 0 else None
    rows: list[str] = []
    targets: list[tuple[str, float, float, int]] = []
    split_rows: list[str] = []
    accept_rows: list[str] = []
    per_step: dict[str, dict[str, npt.NDArray[np.float64]]] = {}
    for case in CASES:
        if only and case.name not in only and case.kind not in only:
            continue
        src = case_source(case, root, overrides)
        if src is None:
            print(
                f"\n{case.name}: grammar file absent ({case.path} under {root}; --grammar {case.name}=PATH)"
            )
            continue
        loaded = load_case(case, src[0], src[1], vocab, cache_dir)
        t0 = time.perf_counter()
        full = compile_full(vocab, loaded.gbnf)
        loaded.compile_s["xgrammar"] = time.perf_counter() - t0
        glr_note = "GLRMask not installed"
        if gv is not None:
            loaded.glr, glr_s, glr_note = glrmask_constraint(
                loaded, vocab, gv, cache_dir, args.glrmask_timeout
            )
            if glr_s is not None:
                loaded.compile_s["glrmask"] = glr_s
        pinned_note = ""
        if args.prewarm > 0:  # each variant's own expander; timed for one (they are alike)
            t0 = time.perf_counter()
            pinned = loaded.native.prewarm(max_rows=args.prewarm, max_prefixes=args.prefixes)
            loaded.compile_s["prewarm"] = time.perf_counter() - t0
            paths = loaded.native.matcher().info().get("prefixes", 0)
            pinned_note = f"; {pinned} class masks pinned, {paths} paths remembered"
            loaded.split.prewarm(max_rows=args.prewarm, max_prefixes=args.prefixes)
            loaded.update.prewarm(max_rows=args.prewarm, max_prefixes=args.prefixes)
        walks, how = cached_peer_walks(loaded, args.walks, args.steps, args.walk_mode, cache_dir)
        ex = loaded.native.expander
        assert ex is not None
        print(
            f"\n{case.name}: {loaded.classes.num_classes} classes ({ex.num_dense} with a precomputed row, "
            f"{ex.num_small_tokens} tail tokens); walks {how}: {[len(w) for w in walks]} steps; compile s: "
            + ", ".join(f"{k} {v:.2f}" for k, v in loaded.compile_s.items())
            + pinned_note
            + (f"; {glr_note}" if glr_note else "")
        )
        x_times, counts = check_pass(loaded, full, walks)
        print(f"  check: {counts}")
        merged: dict[str, list[float]] = {}
        plans: Counter[str] = Counter()
        memo_fills = 0
        reps: dict[str, list[list[float]]] = {}
        if args.warm:  # an untimed pass: the split path's cache too holds the walks' rows
            timed_pass(loaded, walks, args.repeats, loaded.glr, cold=False)
        for r in range(args.repeats):
            glr = loaded.glr
            if not args.warm and loaded.glr is not None:
                glr = glrmask.Constraint.load(loaded.glr_bytes, gv)
            times, p, hits = timed_pass(loaded, walks, r, glr, cold=not args.warm, evict=evict)
            plans += p
            memo_fills += hits
            for k, v in times.items():
                merged.setdefault(k, []).extend(v)
                reps.setdefault(k, []).append(v)
        stats = {k: _stats(v) for k, v in merged.items()}
        stats["xgrammar"] = _stats(x_times)
        floors = {"xgrammar": np.asarray(x_times)}
        for k, passes in reps.items():  # each step's minimum over the passes drops preemptions
            if passes and passes[0] and all(len(x) == len(passes[0]) for x in passes):
                floors[k] = np.min(np.asarray(passes), axis=0)
        p99f = {k: float(np.percentile(v, 99)) * 1e6 for k, v in floors.items()}
        total = {k: float(v.sum()) * 1e3 for k, v in floors.items()}
        for k in ("native", "update", "glrmask", "xgrammar", "class-fill", "expansion"):
            med, p99, _ = stats[k]
            print(
                f"  {k:10} median {med:9.1f} µs  p99 {p99:9.1f} µs  p99 of the step minima "
                f"{p99f.get(k, float('nan')):9.1f} µs  total {total.get(k, float('nan')):10.2f} ms"
            )
        print(f"  expansion plans: {dict(plans)}; update fills from the prefix memo: {memo_fills}")
        if args.kinds and "update" in floors and len(floors["update"]) == sum(map(len, walks)):
            print("  the update's steps by kind (medians of the step minima):")
            for line in kinds_table(update_kinds(loaded, walks), floors["update"], floors.get("glrmask")):
                print(line)

        def cell(k: str, digits: int = 1, st: Any = stats, pf: Any = p99f, tot: Any = total) -> str:
            med, p99, _ = st[k]
            nan = float("nan")
            return f"{med:,.{digits}f} / {p99:,.{digits}f} ({pf.get(k, nan):,.{digits}f}) / {tot.get(k, nan):,.{digits}f}"

        comp = loaded.compile_s
        native_compile = comp.get("compress", 0.0) + comp.get("tables", 0.0) + comp.get("prewarm", 0.0)
        glr_compile = f"{comp['glrmask']:.1f}" if "glrmask" in comp else glr_note or "-"
        n, u, g = stats["native"], stats["update"], stats["glrmask"]
        nan = float("nan")
        update_median, update_p99 = u[0] / g[0], u[1] / g[1]  # against GLRMask's
        rows.append(
            f"| {case.name} | {loaded.classes.num_classes:,} | {sum(map(len, walks))} | {cell('native')} | "
            f"{cell('update')} | {cell('glrmask')} | {cell('xgrammar', 0)} | {n[0] / g[0]:.2f}, {update_median:.2f} | "
            f"{n[1] / g[1]:.2f}, {update_p99:.2f} "
            f"({p99f.get('native', nan) / p99f.get('glrmask', nan):.2f}, {p99f.get('update', nan) / p99f.get('glrmask', nan):.2f}) | "
            f"{counts['native_mismatch']}, {counts['update_mismatch']} | "
            f"{native_compile:.1f} / {glr_compile} / {comp['xgrammar']:.1f} |"
        )
        targets.append(
            (case.name, update_median, update_p99, counts["native_mismatch"] + counts["update_mismatch"])
        )
        if "accept" in floors and "commit" in floors and len(floors["commit"]) == len(floors["update"]):
            # per token: the mask and the token's acceptance, each step's minima summed
            per_token = {
                "native": floors["update"] + floors["accept"],
                "glrmask": floors["glrmask"] + floors["commit"],
            }
            pt = {
                k: (float(np.median(v)) * 1e6, float(np.percentile(v, 99)) * 1e6, float(v.sum()) * 1e3)
                for k, v in per_token.items()
            }
            accept_rows.append(
                f"| {case.name} | {cell('accept')} | {cell('commit')} | {stats['accept'][0] / stats['commit'][0]:.2f} | "
                + " | ".join(
                    f"{pt[k][0]:,.1f} / {pt[k][1]:,.1f} / {pt[k][2]:,.1f}" for k in ("native", "glrmask")
                )
                + f" | {pt['native'][0] / pt['glrmask'][0]:.2f}, {pt['native'][2] / pt['glrmask'][2]:.2f} |"
            )
        split_rows.append(
            f"| {case.name} | {cell('class-fill')} | {cell('expansion')} | {cell('native')} | "
            + ", ".join(f"{k} {v}" for k, v in plans.most_common())
            + " |"
        )
        labels = {
            "xgrammar": "XGrammar full",
            "glrmask": "GLRMask",
            "native": "native",
            "update": "native update",
            "expansion": "native expansion",
        }
        per_step[case.name] = {label: floors[k] for k, label in labels.items() if k in floors}
    print(
        "\n# median / p99 (p99 of the steps' minima over the passes) / total: medians and p99 in µs over every "
        "timed step of every pass, the total in ms is the sum of each step's minimum over the passes; XGrammar "
        "full: its own fill, checked pass only; compile s: native (classes + tables; loaded when cached) / "
        "GLRMask / XGrammar"
    )
    print(
        "| grammar | classes | steps | native fill: median / p99 / total | native update: median / p99 / total | "
        "GLRMask: median / p99 / total | XGrammar full: median / p99 / total | median / GLRMask: fill, update | "
        "p99 / GLRMask: fill, update | mismatches: fill, update | compile s: native / GLRMask / XGrammar |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)
    print()
    print("\n".join(targets_lines(targets)))
    print("\n# the native mask split: class fill and expansion (another expander, its own row cache)")
    print(
        "| grammar | class fill: median / p99 / total | expansion: median / p99 / total | native: median / p99 / total | expansion plans |"
    )
    print("|---|---:|---:|---:|---|")
    for row in split_rows:
        print(row)
    if accept_rows:
        print(
            "\n# accepting the walk's token (the update variant's accept_token, GLRMask's commit_token: median / p99 / "
            "total as above), and per token the mask and the acceptance together (each step's minima summed: median "
            "/ p99 / total)"
        )
        print(
            "| grammar | native accept | GLRMask commit | median: accept / commit | per token, native update + accept | "
            "per token, GLRMask fill + commit | per token / GLRMask: median, total |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for row in accept_rows:
            print(row)
    if args.plot and per_step:
        plot(per_step, args.plot)
