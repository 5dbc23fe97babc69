"""MaskBench: time to first mask and mask time per token on real-world JSON Schemas, every engine in one run.

MaskBench (the ``maskbench/data`` folder of the public repository guidance-ai/jsonschemabench;
its files are not part of this repository, the benchmark takes their folder) holds about 11,300
JSON Schemas (JSONSchemaBench, json-mode-eval, BFCL), each with valid and invalid instances.
For a seeded sample of the schemas that have a valid instance, in one warm worker process and
one engine after the other on the same schema (in an order drawn for each schema from the
seed, ``--order``: an engine runs slower after another's heavy run, so a fixed order, or one
rotated, which keeps each engine's predecessor, favours the engines that follow light ones), this
measures:

* **TTFM** (time to first mask): schema in -> the first token mask written.  For each engine
  that is its whole compile of the schema plus its first mask:

  - ``xgrammar``: XGrammar's ``GrammarCompiler.compile_json_schema`` over the full vocabulary
    (one thread, cache off), the reference every other XGrammar-language engine is compared with;
  - ``classes``: :func:`~formalgram_cfgzip.json_schema.from_json_schema`, then
    :meth:`Compressor.compress <formalgram_cfgzip.compress.Compressor.compress>` (cache off) and
    XGrammar over the class representatives (``compile_grammar(..., engine="xgrammar")``);
  - ``native``: the same with ``Compressor(..., domains=True)`` and ``engine="native"``
    (both compressors with the options of a compression per request, :data:`PER_REQUEST`:
    the plain GNF of the fast construction);
  - ``progressive``: :func:`~formalgram_cfgzip.engines.progressive.compile_json_schema`, the
    engine a server would use: XGrammar's compile over the full vocabulary and the
    compression started at once, the first mask from whichever is ready first; the
    compression is tried in this process within :data:`QUICK_WORK` units of search work and,
    past them, handed to a worker process (:class:`~formalgram_cfgzip.background.BackgroundCompressor`);
    the walk's masks are XGrammar's until the classes are ready (``--progressive-wait``
    waits for them before the walk, so that its masks are the native engine's);
  - ``glrmask`` (PyPI ``glrmask``) and ``llguidance`` as peers, each with its own reading of
    JSON Schema (so their masks are not compared with XGrammar's).

* **Masks**: the schema's first valid instance, ``json.dumps`` with default separators,
  tokenized with the vocabulary's own encoder (quicktok), walked token by token: the time of
  each full-vocabulary mask fill, whether every token and the end are allowed, and, for the
  XGrammar-language engines, whether each mask is bit-identical to XGrammar's own.
* **Invalid instances**: every invalid instance of the schema (up to ``--invalid``), walked
  with ``accept_token``; refused when a token or the end is refused.

A schema whose compile or walk runs past ``--timeout`` seconds in one engine is counted as not
compiled by it (the worker is restarted).  Results are written as JSON lines (``--out``), one
per schema and engine, and a run can be resumed (``--resume``); then a table is printed and,
with ``--plots DIR``, CDFs of TTFM and of mask time per engine are drawn with matplotlib.

Run from the repository root::

    python -m bench.maskbench DATA_DIR [--sample N] [--seed S] [--engines xgrammar,native,...]
        [--timeout 120] [--compress-timeout S] [--out results.jsonl] [--plots docs/img] [--table table.md]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ENGINES = ("xgrammar", "classes", "native", "progressive", "glrmask", "llguidance")
# engines whose language is XGrammar's reading of the schema: their masks must equal XGrammar's
XGRAMMAR_LANGUAGE = ("classes", "native", "progressive")
WORKER_MEMORY = 16 << 30  # address-space limit of the worker process
# the compressor options of a compression per request (what the engines below use)
PER_REQUEST: dict[str, Any] = {"domains": True, "specialize": False, "gnf_strategy": "fast"}
# the progressive engine's quick attempt in the serving process (about 30-40 ms of search)
QUICK_WORK = 1_000_000


@dataclass(frozen=True)
class Case:
    """One schema of the data set: its name, the schema, its valid and invalid instances."""

    name: str
    schema: Any
    valid: list[Any]
    invalid: list[Any]


def load_cases(data_dir: Path, sample: int | None, seed: int) -> list[Case]:
    """The schemas of ``data_dir`` that have a valid instance, a seeded sample of ``sample`` of them.

    Files are read in name order before sampling, so a seed names the same sample everywhere.
    """
    cases: list[Case] = []
    for path in sorted(data_dir.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        tests = record.get("tests", [])
        valid = [t["data"] for t in tests if t.get("valid") is True]
        if not valid:
            continue
        invalid = [t["data"] for t in tests if t.get("valid") is False]
        cases.append(Case(path.stem, record["schema"], valid, invalid))
    if sample is not None and sample < len(cases):
        cases = random.Random(seed).sample(cases, sample)
    return cases


# --------------------------------------------------------------------------------------------
# the worker: one warm process holding the vocabulary and every engine's tokenizer


@dataclass(frozen=True)
class Settings:
    """What the run's worker process is started with (the command line's choices)."""

    vocab: str
    engines: tuple[str, ...]
    progressive_wait: bool
    timeout: float
    compress_timeout: float | None = None


class Walker:
    """What every engine offers the benchmark: compile a schema, then a state to walk."""

    def __init__(self, settings: Settings) -> None:
        from formalgram_cfgzip import Vocabulary
        from formalgram_cfgzip.compress import Compressor

        vocab_name, engines, timeout = settings.vocab, settings.engines, settings.timeout
        compress_timeout = settings.compress_timeout
        progressive_wait = settings.progressive_wait
        self.vocab = Vocabulary.builtin(vocab_name)
        self.width = self.vocab.logit_width
        self.stops = sorted(self.vocab.stop_ids)
        self.eos = self.stops[0]
        self.progressive_wait = progressive_wait
        self.timeout = timeout
        import quicktok

        self.encoder = quicktok.get_encoding(vocab_name)
        # per request: the plain GNF of the fast construction (the first mask matters more
        # than the number of classes); the native engine's domains recorded by the search
        classes_options = {k: v for k, v in PER_REQUEST.items() if k != "domains"}
        self.compressors = {"classes": Compressor(self.vocab, cache_size=0, **classes_options)}
        prepared = self.compressors["classes"].prepared
        self.compressors["native"] = Compressor(prepared, cache_size=0, **PER_REQUEST)
        # the progressive engine compresses in a worker process beside this one
        from formalgram_cfgzip.background import BackgroundCompressor

        # ... after a quick attempt in this process, within QUICK_WORK units of search work
        self.compressors["quick"] = Compressor(prepared, cache_size=0, max_work=QUICK_WORK, **PER_REQUEST)
        self.background: Any = None
        if "progressive" in engines:
            # the progressive engine's compression budget: past it the grammar stays on
            # XGrammar's masks (a server's choice; the benchmark's --compress-timeout)
            budget = timeout if compress_timeout is None else min(compress_timeout, timeout)
            self.background = BackgroundCompressor(self.vocab, timeout=budget, **PER_REQUEST)
        self.settle: Any = None
        self._xgr_info: Any = None
        self._glr_vocab: Any = None
        self._llg_tokenizer: Any = None
        # XGrammar's masks of the current schema's valid walk, the reference of the others
        # ... and a factory of XGrammar's states of that schema, whose matcher judges a mismatch
        self.reference: tuple[str, list[npt.NDArray[np.int32]], Callable[[], Any]] | None = None
        # the valid walk's masks of the XGrammar-language engines that ran before the reference
        self.pending: dict[str, tuple[str, list[npt.NDArray[np.int32]]]] = {}
        # warm every engine (tokenizer tables, first-call costs) outside any measurement
        warm = Case("warm-up", {"type": "object", "properties": {"a": {"type": "string"}}}, [{"a": "x"}], [])
        for engine in engines:
            self.run(engine, warm, 0)
        if self.background is not None:
            # every compression worker started (a server's are, long before a request), so
            # that the first schemas do not wait for them
            self.background.wait_ready()
        self.reference = None
        self.pending.clear()

    def tokens(self, document: Any) -> list[int]:
        """The document as ``json.dumps`` writes it, in the model's own tokens."""
        return [int(t) for t in self.encoder.encode_ordinary(json.dumps(document))]

    # ---- engines: each returns (fill(bitmask) -> None, accept(token) -> bool, end() -> bool, reset)

    def compile(self, engine: str, schema: Any) -> tuple[dict[str, float], Callable[[], Any]]:
        """Compile ``schema`` with ``engine``; returns stage times and a factory of states."""
        text = json.dumps(schema)
        stages: dict[str, float] = {}
        if engine == "xgrammar":
            import xgrammar

            from formalgram_cfgzip.engines.xgrammar import full_tokenizer_info

            if self._xgr_info is None:
                self._xgr_info = full_tokenizer_info(self.vocab)
            compiler = xgrammar.GrammarCompiler(self._xgr_info, max_threads=1, cache_enabled=False)
            t0 = time.perf_counter()
            compiled = compiler.compile_json_schema(text, any_whitespace=True, strict_mode=True)
            stages["compile"] = time.perf_counter() - t0
            return stages, lambda: XGrammarState(compiled, self.width)
        if engine in ("classes", "native"):
            from formalgram_cfgzip import compile_grammar, from_json_schema

            t0 = time.perf_counter()
            grammar = from_json_schema(schema)
            t1 = time.perf_counter()
            classes = self.compressors[engine].compress(grammar)
            t2 = time.perf_counter()
            compiled_ours = compile_grammar(
                classes, grammar, engine="native" if engine == "native" else "xgrammar"
            )
            t3 = time.perf_counter()
            stages.update(convert=t1 - t0, compress=t2 - t1, engine=t3 - t2, compile=t3 - t0)
            stages.update(
                {f"compress:{k[:-8]}": v for k, v in classes.stats.items() if k.endswith("_seconds")}
            )
            stages["classes"] = float(classes.num_classes)
            return stages, lambda: OursState(compiled_ours)
        if engine == "progressive":
            from formalgram_cfgzip.engines.progressive import compile_json_schema

            t0 = time.perf_counter()
            compiled_p = compile_json_schema(
                schema,
                self.compressors["quick"],
                max_threads=1,
                compress_timeout=self.background.timeout,
                background=self.background,
            )
            stages["compile"] = time.perf_counter() - t0
            self.settle = compiled_p
            return stages, lambda: OursState(compiled_p)
        if engine == "glrmask":
            import glrmask

            if self._glr_vocab is None:
                self._glr_vocab = glrmask.Vocab.from_id_to_bytes(
                    {i: t for i, t in enumerate(self.vocab.tokens) if t and i not in self.vocab.special_ids}
                )
            t0 = time.perf_counter()
            constraint = glrmask.Grammar.from_json_schema(text).compile(self._glr_vocab)
            stages["compile"] = time.perf_counter() - t0
            return stages, lambda: GLRMaskState(constraint, self.width)
        if engine == "llguidance":
            import llguidance

            from formalgram_cfgzip.engines.llguidance import _tokenizer
            from formalgram_cfgzip.engines.tokens import full_engine_tokens

            if self._llg_tokenizer is None:
                self._llg_tokenizer = _tokenizer(list(full_engine_tokens(self.vocab)), self.stops)
            t0 = time.perf_counter()
            grammar_llg = llguidance.LLMatcher.grammar_from_json_schema(text)
            matcher = llguidance.LLMatcher(self._llg_tokenizer, grammar_llg, log_level=0)
            error = matcher.get_error()
            stages["compile"] = time.perf_counter() - t0
            if error:
                raise RuntimeError(f"llguidance: {error}")
            return stages, lambda: LLGuidanceState(self._llg_tokenizer, grammar_llg, self.width)
        raise ValueError(f"unknown engine {engine!r}")

    def _compare(self, tokens: list[int], masks: list[npt.NDArray[np.int32]]) -> dict[str, Any]:
        """An engine's masks of the valid walk against the reference's (XGrammar's) of the
        same schema: the record's comparison fields."""
        assert self.reference is not None
        _, ref, new_state = self.reference
        n = min(len(ref), len(masks))
        steps = [k for k in range(n) if not np.array_equal(ref[k], masks[k])]
        # a mismatch where XGrammar's own matcher (accept_token) takes every token on which
        # the masks differ exactly as this engine's mask does: XGrammar's mask contradicts
        # its matcher there, this engine agrees with it
        errors = sum(self._matcher_agrees(new_state, tokens[:k], ref[k], masks[k]) for k in steps)
        return {
            "mismatches": len(steps),
            "xgrammar_mask_errors": errors,
            "compared": n,
            "diverged": len(ref) != len(masks),
        }

    def _matcher_agrees(
        self,
        new_state: Callable[[], Any],
        prefix: list[int],
        ours: npt.NDArray[np.int32],
        theirs: npt.NDArray[np.int32],
    ) -> bool:
        """Does XGrammar's matcher (of a state from ``new_state``), after ``prefix``, take each
        token on which XGrammar's mask ``ours`` and another engine's mask ``theirs`` differ
        exactly as ``theirs`` says?"""
        import xgrammar

        matcher = new_state().m
        assert isinstance(matcher, xgrammar.GrammarMatcher)
        if not all(matcher.accept_token(t) for t in prefix):
            return False
        theirs_ids = _bits(theirs, self.width)
        differ = np.setxor1d(_bits(ours, self.width), theirs_ids)
        theirs_bits = set(theirs_ids.tolist())
        for token in differ.tolist():
            taken = bool(matcher.accept_token(token))
            if taken:
                matcher.rollback(1)
            if taken != (token in theirs_bits):
                return False
        return True

    def run(self, engine: str, case: Case, invalid_limit: int) -> dict[str, Any]:
        """Compile and walk one schema with one engine: the benchmark's record of it."""
        out: dict[str, Any] = {"schema": case.name, "engine": engine}
        t0 = time.perf_counter()
        try:
            stages, new_state = self.compile(engine, case.schema)
            state = new_state()
            bitmask = np.zeros((1, (self.width + 31) // 32), dtype=np.int32)
            t1 = time.perf_counter()
            state.fill(bitmask)
            t2 = time.perf_counter()
            if engine == "progressive":
                grammar = self.settle
                if self.progressive_wait:  # the walk's masks: the classes' engine's
                    grammar.wait()
                    state = new_state()
                stages["xgrammar_ready"] = grammar.full_seconds or -1.0
                stages["classes_ready"] = grammar.compressed_seconds or -1.0
        except Exception as exc:
            out.update(compiled=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            out["seconds"] = time.perf_counter() - t0
            return out
        out.update(compiled=True, ttfm=t2 - t0, first_mask=t2 - t1, stages=stages)
        tokens = self.tokens(case.valid[0])
        masks: list[npt.NDArray[np.int32]] = []
        times: list[float] = []
        accepted = True
        first_mask = bitmask[0].copy()
        for i, tok in enumerate(tokens):
            if i:
                t = time.perf_counter()
                state.fill(bitmask)
                times.append(time.perf_counter() - t)
            row = first_mask if i == 0 else bitmask[0].copy()
            masks.append(row)
            if not (row[tok >> 5] >> (tok & 31)) & 1 or not state.accept(tok):
                accepted = False
                break
        if accepted:
            t = time.perf_counter()
            state.fill(bitmask)
            times.append(time.perf_counter() - t)
            masks.append(bitmask[0].copy())
            accepted = state.end(bitmask[0], self.eos)
        out.update(valid_tokens=len(tokens), valid_accepted=accepted, mask_times=times, steps=len(masks))
        if engine == "xgrammar":
            self.reference = (case.name, masks, new_state)
            # the engines that ran on this schema before the reference: compared now
            out["deferred"] = {
                e: self._compare(tokens, theirs)
                for e, (name, theirs) in self.pending.items()
                if name == case.name
            }
            self.pending.clear()
        elif engine in XGRAMMAR_LANGUAGE:
            if self.reference is not None and self.reference[0] == case.name:
                out.update(self._compare(tokens, masks))
            else:
                self.pending[engine] = (case.name, masks)
        refused = 0
        for doc in case.invalid[:invalid_limit]:
            state = new_state()
            ok = all(state.accept(tok) for tok in self.tokens(doc))
            if ok:
                state.fill(bitmask)
                ok = state.end(bitmask[0], self.eos)
            refused += not ok
        out.update(invalid=min(len(case.invalid), invalid_limit), invalid_refused=refused)
        out["seconds"] = time.perf_counter() - t0
        if engine == "progressive":
            # each schema measured alone: its compression finishes (or times out) before the
            # next schema starts, so that no worker is busy with a grammar no longer needed
            # ... within the record's time limit (the pool ends a record past it): a first mask
            # in time is a compiled schema, whatever the compression does after it
            left = 0.9 * self.timeout - (time.perf_counter() - t0)
            self.settle.wait(timeout=max(left, 0.0))
            # XGrammar's thread runs on: never beside the next measurement
            self.settle.wait_full(timeout=max(0.9 * self.timeout - (time.perf_counter() - t0), 0.0))
            out["stages"]["classes_ready"] = self.settle.compressed_seconds or -1.0
            out["stages"]["handed_over"] = float(self.settle.handed_over)
            out["path"] = self.settle.path
            self.settle.close()
        return out


def engines_order(engines: Sequence[str], how: str, seed: int, index: int) -> list[str]:
    """The order of the engines on the ``index``-th schema: ``"fixed"`` (as given), ``"rotate"``
    (shifted by ``index``) or ``"shuffle"`` (a permutation drawn from ``seed`` and ``index``,
    the same in every run).

    Examples
    --------
    >>> engines_order(["a", "b", "c"], "rotate", 0, 4)
    ['b', 'c', 'a']
    >>> sorted(engines_order(["a", "b", "c"], "shuffle", 0, 4)) == ["a", "b", "c"]
    True
    >>> engines_order(["a", "b", "c"], "shuffle", 0, 4) == engines_order(["a", "b", "c"], "shuffle", 0, 4)
    True
    """
    order = list(engines)
    if how == "rotate":
        shift = index % len(order)
        return order[shift:] + order[:shift]
    if how == "shuffle":
        random.Random(f"{seed}:{index}").shuffle(order)
    return order


def _bits(row: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.intp]:
    """The token ids whose bit is set in a packed bitmask row."""
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:width])


class XGrammarState:
    """XGrammar's own matcher over the full vocabulary."""

    def __init__(self, compiled: Any, width: int) -> None:
        import xgrammar

        # no closure over self: a state in a reference cycle would be freed by the cyclic
        # collector, inside whichever engine's measurement that collection falls
        self.m = m = xgrammar.GrammarMatcher(compiled)
        self.fill = lambda bm: m.fill_next_token_bitmask(bm)
        self.accept = m.accept_token

    def end(self, row: npt.NDArray[np.int32], eos: int) -> bool:
        return bool((row[eos >> 5] >> (eos & 31)) & 1) and bool(self.m.accept_token(eos))


class OursState:
    """A matcher of this project's engines (full-vocabulary masks through the adapter)."""

    def __init__(self, compiled: Any) -> None:
        self.m = compiled.matcher()
        self.fill = self.m.fill_next_token_bitmask
        self.accept = self.m.accept_token

    def end(self, row: npt.NDArray[np.int32], eos: int) -> bool:
        return bool((row[eos >> 5] >> (eos & 31)) & 1) and bool(self.m.accept_token(eos))


class GLRMaskState:
    """A GLRMask state; the end is its ``is_accepting``."""

    def __init__(self, constraint: Any, width: int) -> None:
        self.s = s = constraint.start()
        self.fill = lambda bm: s.fill_mask(bm[0])  # no closure over self (see XGrammarState)
        self.accept = self.s.commit_token

    def end(self, row: npt.NDArray[np.int32], eos: int) -> bool:
        return bool(self.s.is_accepting())


class LLGuidanceState:
    """An llguidance matcher with the vocabulary's stop tokens as its end."""

    def __init__(self, tokenizer: Any, grammar: str, width: int) -> None:
        import llguidance
        import llguidance.numpy

        self.m = m = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        fill = llguidance.numpy.fill_next_token_bitmask
        self.fill = lambda bm: fill(m, bm, 0)  # no closure over self (see XGrammarState)
        self.accept = self.m.consume_token

    def end(self, row: npt.NDArray[np.int32], eos: int) -> bool:
        return bool(self.m.is_accepting())


def _worker(conn: Connection, settings: Settings) -> None:
    """The worker loop: receives (engine, case, invalid limit), answers the record."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    walker = Walker(settings)
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        engine, case, invalid_limit = job
        try:
            conn.send(walker.run(engine, case, invalid_limit))
        except Exception:
            conn.send(
                {
                    "schema": case.name,
                    "engine": engine,
                    "compiled": False,
                    "error": traceback.format_exc()[-400:],
                }
            )


class Pool:
    """One warm worker process, restarted when it runs past the time limit or dies."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ctx = mp.get_context("spawn")
        self.proc: Any = None
        self.conn: Connection | None = None

    def _start(self) -> Connection:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(
            target=_worker,
            args=(child, self.settings),
            daemon=False,  # the progressive engine starts worker processes of its own
        )
        self.proc.start()
        if parent.recv() != "ready":
            raise RuntimeError("the benchmark worker did not start")
        self.conn = parent
        return parent

    def run(self, engine: str, case: Case, invalid_limit: int, timeout: float) -> dict[str, Any]:
        conn = self.conn or self._start()
        conn.send((engine, case, invalid_limit))
        if conn.poll(timeout):
            try:
                result: dict[str, Any] = conn.recv()
                return result
            except EOFError:
                pass
            why = f"worker died (exit code {self.proc.exitcode})"
        else:
            why = f"timeout after {timeout:.0f} s"
        self.close(kill=True)
        return {
            "schema": case.name,
            "engine": engine,
            "compiled": False,
            "error": why,
            "timeout": "timeout" in why,
        }

    def close(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:
                self.proc.kill()
            elif self.conn is not None:
                self.conn.send(None)
            self.proc.join(10)
        self.proc = None
        self.conn = None


# --------------------------------------------------------------------------------------------
# the summary


def percentiles(values: Sequence[float], qs: Iterable[float] = (50, 75, 99)) -> list[float]:
    """Percentiles of ``values`` (``nan`` for none), the max last."""
    if not values:
        return [float("nan")] * (len(list(qs)) + 1)
    arr = np.asarray(values, dtype=np.float64)
    return [float(np.percentile(arr, q)) for q in qs] + [float(arr.max())]


def summarize(records: list[dict[str, Any]], engines: Sequence[str]) -> str:
    """The Markdown table of a run (one column per engine)."""
    by_engine = {e: [r for r in records if r["engine"] == e] for e in engines}
    schemas = sorted({r["schema"] for r in records})
    rows: list[tuple[str, list[str]]] = []

    def cell(e: str, f: Callable[[list[dict[str, Any]]], str]) -> str:
        return f(by_engine[e])

    def ms(v: float) -> str:
        return f"{v * 1e3:,.1f}" if v < 10 else f"{v * 1e3:,.0f}"

    def us(v: float) -> str:
        return f"{v * 1e6:,.1f}"

    rows.append(
        (
            "schemas compiled",
            [cell(e, lambda rs: f"{sum(r['compiled'] for r in rs)}/{len(rs)}") for e in engines],
        )
    )
    rows.append(
        (
            "valid instance accepted",
            [
                cell(
                    e,
                    lambda rs: (
                        f"{sum(bool(r.get('valid_accepted')) for r in rs)} of {sum('valid_accepted' in r for r in rs)}"
                    ),
                )
                for e in engines
            ],
        )
    )
    rows.append(
        (
            "invalid instances refused",
            [
                cell(
                    e,
                    lambda rs: (
                        f"{sum(r.get('invalid_refused', 0) for r in rs)} of {sum(r.get('invalid', 0) for r in rs)}"
                    ),
                )
                for e in engines
            ],
        )
    )
    rows.append(
        (
            "TTFM p50 / p75 / p99 / max (ms)",
            [
                cell(
                    e,
                    lambda rs: " / ".join(
                        ms(v) for v in percentiles([r["ttfm"] for r in rs if r["compiled"]])
                    ),
                )
                for e in engines
            ],
        )
    )
    rows.append(
        (
            "mask p50 / p75 / p99 / max (µs)",
            [
                cell(
                    e,
                    lambda rs: " / ".join(
                        us(v) for v in percentiles([t for r in rs for t in r.get("mask_times", [])])
                    ),
                )
                for e in engines
            ],
        )
    )
    rows.append(
        (
            "masks compared with XGrammar's / mismatched / of which XGrammar's mask contradicts its own matcher",
            [
                cell(
                    e,
                    lambda rs: (
                        f"{sum(r.get('compared', 0) for r in rs):,} / {sum(r.get('mismatches', 0) for r in rs)}"
                        f" / {sum(r.get('xgrammar_mask_errors', 0) for r in rs)}"
                    ),
                )
                if e in XGRAMMAR_LANGUAGE
                else "-"
                for e in engines
            ],
        )
    )
    # acceptance must be XGrammar's on every schema both compile
    ref = {r["schema"]: r for r in by_engine.get("xgrammar", []) if r["compiled"]}
    rows.append(
        (
            "valid verdict differs from XGrammar's",
            [
                cell(
                    e,
                    lambda rs: str(
                        sum(
                            r["compiled"]
                            and r["schema"] in ref
                            and r.get("valid_accepted") != ref[r["schema"]].get("valid_accepted")
                            for r in rs
                        )
                    ),
                )
                if e in XGRAMMAR_LANGUAGE
                else "-"
                for e in engines
            ],
        )
    )

    # TTFM against XGrammar's, schema by schema
    def ratio(rs: list[dict[str, Any]]) -> str:
        qs = [r["ttfm"] / ref[r["schema"]]["ttfm"] for r in rs if r["compiled"] and r["schema"] in ref]
        if not qs:
            return "-"
        return f"{statistics.median(qs):.2f}x, sooner on {sum(q < 1.0 for q in qs)} of {len(qs)}"

    rows.append(
        (
            "TTFM / XGrammar's: median, sooner on",
            [cell(e, ratio) if e != "xgrammar" else "1" for e in engines],
        )
    )

    def ready(rs: list[dict[str, Any]]) -> str:
        vals = [
            r["stages"]["classes_ready"]
            for r in rs
            if r["compiled"] and r["stages"].get("classes_ready", -1) > 0
        ]
        if not vals:
            return "-"
        return f"{len(vals)}: " + " / ".join(ms(v) for v in percentiles(vals))

    if "progressive" in engines:
        rows.append(
            (
                "classes' engine ready: count, p50 / p75 / p99 / max (ms)",
                [cell(e, ready) if e == "progressive" else "-" for e in engines],
            )
        )
    # mask time on the documents every engine accepts
    common = [
        s
        for s in schemas
        if all(any(r["schema"] == s and r.get("valid_accepted") for r in by_engine[e]) for e in engines)
    ]
    rows.append(
        (
            f"mask time total on the {len(common)} documents all accept (ms)",
            [
                cell(
                    e,
                    lambda rs: f"{sum(sum(r['mask_times']) for r in rs if r['schema'] in common) * 1e3:,.1f}",
                )
                for e in engines
            ],
        )
    )
    lines = ["| | " + " | ".join(engines) + " |", "|---" * (len(engines) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], engines: Sequence[str], out_dir: Path) -> list[Path]:
    """CDFs of TTFM and of mask time per engine (matplotlib PNGs in ``out_dir``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for key, title, scale, unit, name in (
        ("ttfm", "Time to first mask, MaskBench schemas", 1e3, "ms", "maskbench_ttfm_cdf.png"),
        ("mask_times", "Mask time per token, MaskBench valid instances", 1e6, "µs", "maskbench_mask_cdf.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for e in engines:
            rs = [r for r in records if r["engine"] == e and r["compiled"]]
            vals = (
                [r["ttfm"] for r in rs] if key == "ttfm" else [t for r in rs for t in r.get("mask_times", [])]
            )
            if not vals:
                continue
            xs = np.sort(np.asarray(vals)) * scale
            ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=f"{e} ({len(rs)} compiled)")
        ax.set_xscale("log")
        ax.set_xlabel(unit)
        ax.set_ylabel("fraction")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def slowest(records: list[dict[str, Any]], engine: str, n: int) -> str:
    """The ``n`` slowest schemas of ``engine`` (TTFM), with their stages."""
    rs = sorted((r for r in records if r["engine"] == engine and r["compiled"]), key=lambda r: -r["ttfm"])[:n]
    lines = []
    for r in rs:
        st = r.get("stages", {})
        parts = ", ".join(
            f"{k} {v * 1e3:.0f}" for k, v in st.items() if not k.startswith("compress:") and k != "classes"
        )
        inner = ", ".join(
            f"{k[9:]} {v * 1e3:.0f}" for k, v in st.items() if k.startswith("compress:") and v >= 0.01
        )
        lines.append(
            f"{r['schema']}: {r['ttfm'] * 1e3:,.0f} ms ({parts}; classes {st.get('classes', 0):.0f}; {inner})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "data", type=Path, help="MaskBench's data folder (guidance-ai/jsonschemabench, maskbench/data)"
    )
    ap.add_argument(
        "--sample", type=int, default=None, help="a seeded sample of this many schemas (default all)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    ap.add_argument("--vocab", default="llama3", help="a built-in quicktok vocabulary (default llama3)")
    ap.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per schema and engine (default 120)"
    )
    ap.add_argument(
        "--compress-timeout",
        type=float,
        default=None,
        help="the progressive engine's compression budget in seconds, past which a grammar stays on "
        "XGrammar's masks (default: --timeout)",
    )
    ap.add_argument("--invalid", type=int, default=8, help="invalid instances walked per schema (default 8)")
    ap.add_argument(
        "--progressive-wait", action="store_true", help="the progressive engine waits for its classes"
    )
    ap.add_argument(
        "--order",
        choices=("shuffle", "rotate", "fixed"),
        default="shuffle",
        help="engine order per schema: drawn from the seed (default), rotated by one each schema, "
        "or as given",
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON lines of the records (default: none kept)")
    ap.add_argument("--resume", action="store_true", help="keep the records already in --out and skip them")
    ap.add_argument("--plots", type=Path, default=None, help="write the CDF plots into this folder")
    ap.add_argument("--table", type=Path, default=None, help="also write the Markdown table to this file")
    ap.add_argument("--slowest", type=int, default=20, help="list the N slowest schemas of the native engine")
    args = ap.parse_args(argv)

    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        ap.error(f"unknown engines: {', '.join(unknown)}")
    if "xgrammar" in engines:  # the reference: the table's first column
        engines.remove("xgrammar")
        engines.insert(0, "xgrammar")
    cases = load_cases(args.data, args.sample, args.seed)
    records: list[dict[str, Any]] = []
    done: set[tuple[str, str]] = set()
    if args.resume and args.out is not None and args.out.exists():
        for line in args.out.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            records.append(r)
            done.add((r["schema"], r["engine"]))
    sink = args.out.open("a", encoding="utf-8") if args.out is not None else None
    from bench._checkout import describe

    build = describe()  # the build measured (the installed one unless PYTHONPATH names the checkout)
    print(f"{len(cases)} schemas, engines {', '.join(engines)}, vocabulary {args.vocab}", file=sys.stderr)
    print(build, file=sys.stderr)
    pool = Pool(
        Settings(args.vocab, tuple(engines), args.progressive_wait, args.timeout, args.compress_timeout)
    )
    t_start = time.perf_counter()
    try:
        for i, case in enumerate(cases):
            # an engine's run leaves the caches, the heap and the memory it gave back (and,
            # for the progressive engine, its finished background work) to whichever runs
            # next: the engine after the native one's Python compression of the same schema
            # compiled up to 1.3x slower at the median (100 schemas).  A fixed order favours
            # the engines that always follow light ones, and so does a rotation (each engine
            # keeps its predecessor); a drawn order gives every engine every predecessor
            order = engines_order(engines, args.order, args.seed, i)
            mine_new: dict[str, dict[str, Any]] = {}
            for engine in order:
                if (case.name, engine) not in done:
                    mine_new[engine] = pool.run(engine, case, args.invalid, args.timeout)
            deferred = mine_new.get("xgrammar", {}).pop("deferred", {})
            for engine in engines:  # the records in the engines' own order
                if engine not in mine_new:
                    continue
                r = mine_new[engine]
                r.update(deferred.get(engine, {}))
                records.append(r)
                if sink is not None:
                    sink.write(json.dumps(r) + "\n")
                    sink.flush()
            mine = [r for r in records if r["schema"] == case.name]
            status = " ".join(
                f"{r['engine']}={r['ttfm'] * 1e3:.0f}ms" if r["compiled"] else f"{r['engine']}=x"
                for r in mine
            )
            print(
                f"[{i + 1}/{len(cases)} {time.perf_counter() - t_start:.0f}s] {case.name}: {status}",
                file=sys.stderr,
            )
    finally:
        pool.close()
        if sink is not None:
            sink.close()
    table = summarize(records, engines)
    print(table)
    if "native" in engines:
        print(f"\nslowest native TTFM (ms):\n{slowest(records, 'native', args.slowest)}")
    if args.table is not None:
        args.table.write_text(f"{build}\n\n{table}\n", encoding="utf-8")
    if args.plots is not None:
        for path in plot(records, engines, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
