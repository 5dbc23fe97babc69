"""Offline benchmark: compress time, peak memory, classes and invalid tokens, side by side.

For every grammar (of increasing size, by compress cost) and vocabulary, run in a fresh subprocess each:

* ``formalgram_cfgzip.compress`` with 1 worker and with 2 workers;
* the published Rust tool ``cfgzip-preprocess`` (``pip install cfgzip``, 0.2.0) with one
  thread, when it can be found (``$CFGZIP_PREPROCESS``, ``PATH``, or
  ``/tmp/cfgzip-venv/bin``).  It reads tokenizers from a Hugging Face cache layout; we
  build one locally (``models--local--<name>/snapshots/<rev>/tokenizer.json`` plus
  ``refs/main``) from our :class:`~formalgram_cfgzip.vocabulary.Vocabulary`, so nothing is
  downloaded.

Each run gets a wall-clock timeout and a memory limit (the process tree's resident memory
is sampled every 100 ms and the tree is killed above the limit); a run that fails
(``GrammarTooLarge``, a parse error, a timeout, the memory limit) is a row with that status,
not a crash.  Peak memory is the ``ru_maxrss`` of the child (from ``wait4``, through a
small launcher so that the benchmark's own size does not leak into it), and for runs with
workers also the sampled peak of the whole process tree's proportional set size (PSS:
copy-on-write pages shared by the forked workers are counted once).

Times: for ``compress`` the ``seconds`` statistic of the call (grammar normalisation +
search + classes, without interpreter start and vocabulary loading); for the published tool
its own ``--timings`` total minus tokenizer loading and output writing.  The median of
``repeats`` runs is taken for runs shorter than ``repeat_below_s``; longer runs are done once.

Usage (from the repository root)::

    python -m bench.compress_bench                       # default configuration
    python -m bench.compress_bench --quick               # one small grammar set, llama3
    python -m bench.compress_bench -g llama_cpp/c.gbnf -v llama3 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from formalgram_cfgzip.vocabulary import Vocabulary

REPO = Path(__file__).resolve().parents[1]
GRAMMARS_DIR = Path(os.environ.get("FORMALGRAM_GRAMMARS", str(REPO.parent / "shared" / "grammars")))

# (label, path relative to the shared grammar folder), roughly by increasing compress cost
DEFAULT_GRAMMARS: tuple[tuple[str, str], ...] = (
    ("arithmetic", "llama_cpp/arithmetic.gbnf"),
    ("c", "llama_cpp/c.gbnf"),
    ("json JME_45", "derived/json_mode_eval_xgrammar/JME_45.gbnf"),
    ("json JME_20", "derived/json_mode_eval_xgrammar/JME_20.gbnf"),
    ("json JME_32", "derived/json_mode_eval_xgrammar/JME_32.gbnf"),
    ("c_syncode", "derived/lark_via_xgrammar/c_syncode.gbnf"),
    ("xml2rfc_v3", "derived/lark_via_xgrammar/xml2rfc_v3.gbnf"),
    ("go_syncode", "derived/lark_via_xgrammar/go_syncode.gbnf"),
    ("sql_syncode", "derived/lark_via_xgrammar/sql_syncode.gbnf"),
)
QUICK_GRAMMARS: tuple[tuple[str, str], ...] = (
    ("arithmetic", "llama_cpp/arithmetic.gbnf"),
    ("c", "llama_cpp/c.gbnf"),
    ("json JME_32", "derived/json_mode_eval_xgrammar/JME_32.gbnf"),
)
DEFAULT_VOCABS: tuple[str, ...] = ("llama3", "qwen3", "o200k_harmony")
QUICK_VOCABS: tuple[str, ...] = ("llama3",)

OURS = "formalgram"
PUBLISHED = "cfgzip-preprocess"


@dataclass
class Run:
    """One measured configuration: a grammar, a vocabulary, a tool and its worker count."""

    grammar: str
    path: str
    vocab: str
    tool: str
    workers: int
    status: str = "ok"
    seconds: float | None = None
    seconds_all: list[float] = field(default_factory=list)
    wall_seconds: float | None = None
    cpu_seconds: float | None = None
    peak_mib: float | None = None
    tree_peak_mib: float | None = None
    tokens: int | None = None
    classes: int | None = None
    invalid: int | None = None
    invalid_text: int | None = None  # invalid tokens that are text (not special tokens, not holes)
    rules: int | None = None
    gnf_rules: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ratio(self) -> float | None:
        if self.tokens is None or not self.classes:
            return None
        return self.tokens / self.classes

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["ratio"] = self.ratio
        return d


# ---------------------------------------------------------------- child process runner


@dataclass
class ChildResult:
    returncode: int | None
    stdout: str
    stderr: str
    wall: float
    maxrss_mib: float
    tree_peak_mib: float
    killed: str | None  # "timeout" or "memory" when we killed it
    cpu_seconds: float | None = None  # user + system CPU of the command and its waited-for children


# A tiny launcher between the benchmark and the measured command: a child forked from a
# big process starts with that process's resident-set high-water mark (Linux copies it at
# fork and keeps it across exec), so forking from this small interpreter keeps ru_maxrss
# honest.  It reports the command's ru_maxrss (KiB) as the last line of stderr.
_MARK = "@@formalgram-bench-maxrss-kib"
_LAUNCHER = f"""
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
sys.stderr.write("\\n{_MARK} %d %.3f\\n" % (usage.ru_maxrss, usage.ru_utime + usage.ru_stime))
sys.stderr.flush()
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def _proc_group(pgid: int) -> dict[int, float]:
    """pid -> resident memory (MiB) of every process in process group ``pgid`` (Linux /proc)."""
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        rest = raw[raw.rfind(b")") + 2 :].split()
        # rest[0] = state, rest[2] = pgrp, rest[21] = rss (pages)
        if len(rest) > 21 and int(rest[2]) == pgid:
            out[int(entry.name)] = int(rest[21]) * page / (1 << 20)
    return out


def _pss_mib(pids: Iterable[int]) -> float | None:
    """Sum of proportional set sizes (shared pages split between sharers), or ``None``."""
    total = 0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                m = re.search(rb"^Pss:\s+(\d+) kB", fh.read(), re.MULTILINE)
            if m is None:
                return None
            total += int(m.group(1))
    except OSError:
        return None
    return total / 1024.0


def run_child(
    cmd: Sequence[str],
    *,
    timeout: float,
    memory_mib: float | None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    poll: float = 0.1,
) -> ChildResult:
    """Run ``cmd`` in its own session; kill its tree on timeout or above ``memory_mib``.

    Returns the exit status (``None`` when killed), its output, wall time, the child's
    ``ru_maxrss`` (MiB, from ``wait4``) and the sampled peak of the whole tree.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        launch = [sys.executable, "-S", "-c", _LAUNCHER, *cmd]
        proc = subprocess.Popen(launch, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        killed: str | None = None
        rss_peak = pss_peak = 0.0
        polls = 0
        status = 0
        maxrss_kib = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                maxrss_kib = usage.ru_maxrss
                break
            group = _proc_group(proc.pid)
            rss = sum(group.values())
            polls += 1
            if len(group) > 2 and polls % 2 == 0:
                # workers: count copy-on-write pages shared with the parent once (PSS)
                pss = _pss_mib(group)
                if pss is not None:
                    pss_peak = max(pss_peak, pss)
            rss_peak = max(rss_peak, rss)
            elapsed = time.perf_counter() - t0
            if killed is None and (elapsed > timeout or (memory_mib is not None and rss > memory_mib)):
                killed = "timeout" if elapsed > timeout else "memory"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(poll)
        wall = time.perf_counter() - t0
        tree_peak = pss_peak if pss_peak > 0 else rss_peak
        proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting again
        if killed is not None:
            with contextlib.suppress(ProcessLookupError):  # leftover workers of a killed tree
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
        m = re.search(r"\n?" + _MARK + r" (\d+) ([0-9.]+)\n?$", stderr)
        cpu: float | None = None
        if m is not None:
            maxrss_kib = int(m.group(1))
            cpu = float(m.group(2))
            stderr = stderr[: m.start()]
        else:  # killed: only the sampled peak is known
            maxrss_kib = int(rss_peak * 1024)
        return ChildResult(
            None if killed else proc.returncode,
            out.read().decode("utf-8", "replace"),
            stderr,
            wall,
            maxrss_kib / 1024.0,
            max(tree_peak, maxrss_kib / 1024.0),
            killed,
            cpu,
        )


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


# ---------------------------------------------------------------- our compressor


def _child_main(argv: Sequence[str]) -> int:
    """Entry point of the measured subprocess: compress once, print one JSON line."""
    import resource

    from formalgram.errors import FormalgramError, GrammarTooLarge
    from formalgram.syntax.gbnf import load
    from formalgram_cfgzip.compress import compress
    from formalgram_cfgzip.vocabulary import Vocabulary

    ap = argparse.ArgumentParser(prog="compress_bench --child")
    ap.add_argument("--grammar", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--memory-mib", type=int, default=0)
    args = ap.parse_args(argv)
    res: dict[str, object] = {}
    try:
        vocab = Vocabulary.load(args.vocab)
        grammar = load(args.grammar)
        res["rules"] = len(grammar.rules)
        res["tokens"] = vocab.size
        tc = compress(
            grammar,
            vocab,
            workers=args.workers,
            progress=False,
            memory_budget=(args.memory_mib << 20) if args.memory_mib else None,
        )
        res.update(
            status="ok",
            seconds=tc.stats["seconds"],
            classes=tc.num_classes,
            invalid=len(tc.invalid),
            invalid_text=sum(
                1 for i in tc.invalid.tolist() if vocab.tokens[i] is not None and i not in vocab.special_ids
            ),
            gnf_rules=int(tc.stats.get("gnf_rules", 0)),
        )
    except GrammarTooLarge as exc:
        res["status"] = "too large: " + _one_line(str(exc))
    except MemoryError:
        res["status"] = "out of memory (MemoryError)"
    except FormalgramError as exc:
        res["status"] = f"{type(exc).__name__}: " + _one_line(str(exc))
    res["self_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    res["children_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def _one_line(text: str, limit: int = 90) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _killed_status(res: ChildResult, timeout: float, memory_mib: float | None) -> str:
    if res.killed == "timeout":
        return f"timeout (> {timeout:.0f} s)"
    return f"over memory limit (> {memory_mib:.0f} MiB)"


def run_ours(
    label: str,
    grammar: Path,
    vocab: str,
    workers: int,
    *,
    timeout: float,
    memory_mib: float | None,
) -> Run:
    """One ``compress`` run in a fresh interpreter."""
    run = Run(label, str(grammar), vocab, OURS, workers)
    cmd = [
        sys.executable,
        "-m",
        "bench.compress_bench",
        "--child",
        "--grammar",
        str(grammar),
        "--vocab",
        vocab,
        "--workers",
        str(workers),
    ]
    if memory_mib:
        cmd += ["--memory-mib", str(int(memory_mib))]
    res = run_child(cmd, timeout=timeout, memory_mib=memory_mib, env=_child_env(), cwd=str(REPO))
    run.wall_seconds = res.wall
    run.cpu_seconds = res.cpu_seconds
    run.peak_mib = res.maxrss_mib
    run.tree_peak_mib = res.tree_peak_mib
    if res.killed:
        run.status = _killed_status(res, timeout, memory_mib)
        return run
    m = re.search(r"^RESULT (\{.*\})$", res.stdout, re.MULTILINE)
    if m is None:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        run.status = f"crashed (rc={res.returncode}): {_one_line(tail)}"
        return run
    data = json.loads(m.group(1))
    run.status = str(data.get("status", "?"))
    run.tokens = _int(data.get("tokens"))
    run.rules = _int(data.get("rules"))
    if run.ok:
        run.seconds = float(data["seconds"])
        run.seconds_all = [run.seconds]
        run.classes = _int(data.get("classes"))
        run.invalid = _int(data.get("invalid"))
        run.invalid_text = _int(data.get("invalid_text"))
        run.gnf_rules = _int(data.get("gnf_rules"))
    return run


def _int(x: object) -> int | None:
    return None if x is None else int(str(x))


# ---------------------------------------------------------------- the published tool


def find_published_tool() -> str | None:
    """Path of ``cfgzip-preprocess``, or ``None`` (see the module docstring for where it looks)."""
    env = os.environ.get("CFGZIP_PREPROCESS")
    if env and os.access(env, os.X_OK):
        return env
    found = shutil.which("cfgzip-preprocess")
    if found:
        return found
    venv = Path("/tmp/cfgzip-venv/bin/cfgzip-preprocess")
    return str(venv) if os.access(venv, os.X_OK) else None


def _gpt2_byte_to_char() -> dict[int, str]:
    from formalgram_cfgzip.vocabulary import _gpt2_char_to_byte

    return {b: c for c, b in _gpt2_char_to_byte().items()}


def build_hf_cache(vocab_spec: str | Vocabulary, cache_root: Path) -> str:
    """Write a local Hugging Face cache entry for a vocabulary; return its model id.

    Layout: ``cache_root/models--local--<name>/snapshots/<rev>/{tokenizer.json,
    tokenizer_config.json,config.json}`` and ``refs/main`` naming ``<rev>``.  The
    ``tokenizer.json`` is a byte-level BPE (GPT-2 byte map) whose ids are the vocabulary's
    ids; merges are derived from the ranks as for tiktoken files (token id = merge rank):
    every split of a token into two tokens is a merge, ordered by the merged token's rank.
    Special tokens are ``added_tokens``; the stop tokens are named in the configs.
    Reused when already present for the same vocabulary fingerprint.
    """
    from formalgram_cfgzip.vocabulary import Vocabulary

    vocab = vocab_spec if isinstance(vocab_spec, Vocabulary) else Vocabulary.load(vocab_spec)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", vocab.name or "vocab") + "-" + vocab.fingerprint()[:8]
    model_id = f"local/{safe}"
    repo = cache_root / f"models--local--{safe}"
    rev = vocab.fingerprint()[:40].ljust(40, "0")
    snap = repo / "snapshots" / rev
    if (snap / "tokenizer.json").is_file() and (repo / "refs" / "main").is_file():
        return model_id
    b2c = _gpt2_byte_to_char()

    def enc(t: bytes) -> str:
        return "".join(b2c[x] for x in t)

    special = set(vocab.special_ids)
    ranks: dict[bytes, int] = {}
    added: list[dict[str, object]] = []
    for i, tok in enumerate(vocab.tokens):
        if tok is None:
            continue
        if i in special:
            added.append(
                {
                    "id": i,
                    "content": tok.decode("utf-8", "replace"),
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
        elif tok not in ranks:
            ranks[tok] = i
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for tok, r in ranks.items():
        for k in range(1, len(tok)):
            a, b = tok[:k], tok[k:]
            ra, rb = ranks.get(a), ranks.get(b)
            if ra is not None and rb is not None:
                merges.append((r, ra, rb, a, b))
    merges.sort()
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": {enc(t): i for t, i in ranks.items()},
            "merges": [[enc(a), enc(b)] for _, _, _, a, b in merges],
        },
    }
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), "utf-8")
    stops = sorted(vocab.stop_ids)
    eos = [(vocab.tokens[i] or b"").decode("utf-8", "replace") for i in stops]
    (snap / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos[0] if eos else None}), "utf-8")
    (snap / "config.json").write_text(
        json.dumps({"eos_token_id": stops, "vocab_size": vocab.logit_width}), "utf-8"
    )
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(rev, "utf-8")
    return model_id


def _read_torch_int_vector(path: Path) -> list[int] | None:
    """The raw int32 storage of a 1-D tensor saved by the tool (zip ``*/data/0``), no pickle."""
    import numpy as np

    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("/data/0")]
            if len(names) != 1:
                return None
            raw = z.read(names[0])
    except (OSError, zipfile.BadZipFile):
        return None
    return [int(x) for x in np.frombuffer(raw, dtype="<i4")]


def run_published(
    label: str,
    grammar: Path,
    vocab: str,
    *,
    tool: str,
    cache_root: Path,
    timeout: float,
    memory_mib: float | None,
) -> Run:
    """One ``cfgzip-preprocess --num-threads 1`` run on a locally built HF cache."""
    from formalgram_cfgzip.vocabulary import Vocabulary

    run = Run(label, str(grammar), vocab, PUBLISHED, 1)
    v = Vocabulary.load(vocab)
    run.tokens = v.size
    model_id = build_hf_cache(v, cache_root)
    with tempfile.TemporaryDirectory(prefix="cfgzip-out-") as outdir:
        cmd = [
            tool,
            "--model-id",
            model_id,
            "--grammar-file",
            str(grammar),
            "--output",
            outdir,
            "--cache-dir",
            str(cache_root),
            "--n-logits",
            str(v.logit_width),
            "--num-threads",
            "1",
            "--no-progress",
            "--timings",
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache_root))
        res = run_child(cmd, timeout=timeout, memory_mib=memory_mib, env=env)
        run.wall_seconds = res.wall
        run.cpu_seconds = res.cpu_seconds
        run.peak_mib = res.maxrss_mib
        run.tree_peak_mib = res.tree_peak_mib
        if res.killed:
            run.status = _killed_status(res, timeout, memory_mib)
            return run
        if res.returncode != 0:
            lines = [ln for ln in (res.stderr + res.stdout).strip().splitlines() if ln.strip()]
            msg = next(
                (ln for ln in reversed(lines) if "rror" in ln),
                lines[-1] if lines else "",
            )
            if res.returncode is not None and res.returncode > 128:
                msg = f"killed by signal {res.returncode - 128}; {msg}"
            run.status = f"failed (rc={res.returncode}): {_one_line(msg)}"
            return run
        timings = dict(
            (k, float(v_))
            for k, v_ in re.findall(r"cfgzip timing: (\w+)_s=([0-9.eE+-]+)", res.stdout + res.stderr)
        )
        total = timings.get("total", res.wall)
        run.seconds = total - timings.get("load_tokenizer", 0.0) - timings.get("write_output", 0.0)
        run.seconds_all = [run.seconds]
        tc = _read_torch_int_vector(Path(outdir) / "tc.pt")
        inv = _read_torch_int_vector(Path(outdir) / "inv.pt")
        if tc is not None:
            run.classes = len(set(tc))
        if inv is not None:
            run.invalid = len(inv)
    return run


# ---------------------------------------------------------------- the benchmark


def grammar_paths(grammars: Iterable[tuple[str, str]], root: Path = GRAMMARS_DIR) -> list[tuple[str, Path]]:
    """Resolve (label, relative path) pairs; missing files are dropped with a note on stderr."""
    out: list[tuple[str, Path]] = []
    for label, rel in grammars:
        p = Path(rel)
        if not p.is_absolute():
            p = root / rel
        if p.is_file():
            out.append((label, p))
        else:
            print(f"compress_bench: skipping {label}: {p} not found", file=sys.stderr)
    return out


def _repeat(first: Run, again: Callable[[], Run], repeats: int, repeat_below_s: float) -> Run:
    """Median of ``repeats`` runs when the first one was short; keeps the first run's data."""
    if not first.ok or first.seconds is None or repeats <= 1 or first.seconds > repeat_below_s:
        return first
    times = [first.seconds]
    peaks = [first.peak_mib or 0.0]
    for _ in range(repeats - 1):
        r = again()
        if r.ok and r.seconds is not None:
            times.append(r.seconds)
            peaks.append(r.peak_mib or 0.0)
    first.seconds_all = times
    first.seconds = statistics.median(times)
    first.peak_mib = statistics.median(peaks)
    return first


def run_bench(
    grammars: Sequence[tuple[str, str]] = DEFAULT_GRAMMARS,
    vocabs: Sequence[str] = DEFAULT_VOCABS,
    *,
    workers: Sequence[int] = (1, 2),
    repeats: int = 1,
    repeat_below_s: float = 10.0,
    timeout: float = 300.0,
    memory_mib: float | None = 4096.0,
    published: bool = True,
    published_timeout: float | None = None,
    cache_root: Path | None = None,
    log: Callable[[str], None] | None = None,
    skip_hopeless: bool = True,
    budget_s: float | None = None,
    multi_worker_vocabs: Sequence[str] | None = None,
) -> list[Run]:
    """Run the offline benchmark; return one :class:`Run` per (grammar, vocabulary, tool, workers).

    Grammars are taken in the given order (small first), each with every vocabulary.
    ``published`` runs ``cfgzip-preprocess`` too when it is found.  ``timeout`` (seconds)
    and ``memory_mib`` apply to every run (the published tool gets ``published_timeout``
    when given).  ``log`` receives one line per finished run.

    To keep the benchmark's own time bounded, with ``skip_hopeless`` (default) runs that
    cannot finish are not started: more workers after one worker failed on the same grammar
    and vocabulary; a tool on a grammar where it already hit the time or memory limit (or
    failed after more than a minute) with an earlier vocabulary; the published tool on a
    grammar it cannot parse.  Once ``budget_s`` seconds have passed, the remaining runs are
    not started either.  Such rows say ``not run (...)``.  ``multi_worker_vocabs`` limits
    the runs with more than one worker to these vocabularies (``None``: all).
    """
    tool = find_published_tool() if published else None
    if cache_root is None:
        cache_root = Path(tempfile.gettempdir()) / "formalgram-bench-hf"
    t_start = time.perf_counter()
    runs: list[Run] = []

    def hopeless(r: Run) -> bool:
        return (
            r.status.startswith(("timeout", "over memory", "failed"))
            or (r.wall_seconds or 0.0) > 60.0
            or r.status.startswith("not run (with")
        )

    def emit(r: Run) -> None:
        runs.append(r)
        if log:
            log(_describe(r))

    def skipped(label: str, path: Path, vocab: str, tool_name: str, w: int, why: str) -> Run:
        r = Run(label, str(path), vocab, tool_name, w)
        r.status = f"not run ({why})"
        return r

    def skip_reason(hopeless_why: str | None) -> str | None:
        """Why a run is not started: the time budget is spent, or (with ``skip_hopeless``) an
        earlier failure that makes it hopeless, described by ``hopeless_why``."""
        if budget_s is not None and time.perf_counter() - t_start > budget_s:
            return f"benchmark time budget of {budget_s:.0f} s spent"
        return hopeless_why if skip_hopeless else None

    for label, path in grammar_paths(grammars):
        ours_failed: Run | None = None
        pub_failed: Run | None = None
        for vocab in vocabs:
            first_failure: Run | None = None
            for w in workers:
                if w > 1 and multi_worker_vocabs is not None and vocab not in multi_worker_vocabs:
                    continue
                hopeless_why = None
                if first_failure is not None:
                    hopeless_why = f"{first_failure.workers} worker(s): {first_failure.status}"
                elif ours_failed is not None:
                    hopeless_why = f"with {ours_failed.vocab}: {ours_failed.status}"
                why = skip_reason(hopeless_why)
                if why is not None:
                    emit(skipped(label, path, vocab, OURS, w, why))
                    continue

                def once(
                    w: int = w,
                    vocab: str = vocab,
                    label: str = label,
                    path: Path = path,
                ) -> Run:
                    return run_ours(label, path, vocab, w, timeout=timeout, memory_mib=memory_mib)

                r = _repeat(once(), once, repeats, repeat_below_s)
                if not r.ok:
                    first_failure = first_failure or r
                    if hopeless(r):
                        ours_failed = ours_failed or r
                emit(r)
            if tool is None:
                continue
            why = skip_reason(None if pub_failed is None else f"with {pub_failed.vocab}: {pub_failed.status}")
            if why is not None:
                emit(skipped(label, path, vocab, PUBLISHED, 1, why))
                continue

            def pub(vocab: str = vocab, label: str = label, path: Path = path) -> Run:
                return run_published(
                    label,
                    path,
                    vocab,
                    tool=tool,
                    cache_root=cache_root,
                    timeout=published_timeout or timeout,
                    memory_mib=memory_mib,
                )

            r = _repeat(pub(), pub, repeats, repeat_below_s)
            if not r.ok and hopeless(r):
                pub_failed = r
            emit(r)
    return runs


def _describe(r: Run) -> str:
    what = f"{r.grammar} / {r.vocab} / {r.tool} w={r.workers}"
    if not r.ok:
        wall = f" after {r.wall_seconds:.1f} s" if r.wall_seconds is not None else ""
        return f"{what}: {r.status}{wall}"
    return (
        f"{what}: {r.seconds:.2f} s, peak {r.peak_mib:.0f} MiB (tree {r.tree_peak_mib:.0f}), "
        f"{r.classes} classes, {r.invalid} invalid"
    )


# ---------------------------------------------------------------- tables


def _fmt_s(r: Run | None) -> str:
    if r is None:
        return "-"
    if not r.ok or r.seconds is None:
        return r.status.replace("|", "/")
    s = f"{r.seconds:.2f}"
    if len(r.seconds_all) > 1:
        s += f" (n={len(r.seconds_all)})"
    return s


def _fmt_cpu(r: Run | None) -> str:
    if r is None or not r.ok or r.cpu_seconds is None:
        return "-"
    return f"{r.cpu_seconds:.2f}"


def _fmt_mib(r: Run | None, tree: bool = False) -> str:
    if r is None or r.peak_mib is None:
        return "-"
    v = r.tree_peak_mib if tree and r.tree_peak_mib is not None else r.peak_mib
    return f"{v:.0f}"


def markdown_tables(runs: Sequence[Run]) -> str:
    """Two Markdown tables: our compressor (1 vs 2 workers) and ours vs the published tool."""
    keys: list[tuple[str, str]] = []
    by: dict[tuple[str, str, str, int], Run] = {}
    for r in runs:
        if (r.grammar, r.vocab) not in keys:
            keys.append((r.grammar, r.vocab))
        by[(r.grammar, r.vocab, r.tool, r.workers)] = r
    lines = [
        "| grammar | productions | vocabulary | tokens | classes | ratio | invalid | GNF rules | "
        "time 1 worker (s) | peak 1 worker (MiB) | time 2 workers (s) | peak 2 workers, tree (MiB) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g, v in keys:
        r1 = by.get((g, v, OURS, 1))
        r2 = by.get((g, v, OURS, 2))
        ref = r1 if r1 is not None and r1.ok else r2
        ok = ref is not None and ref.ok
        lines.append(
            "| "
            + " | ".join(
                [
                    g,
                    str(ref.rules) if ref is not None and ref.rules is not None else "-",
                    v,
                    str(ref.tokens) if ref is not None and ref.tokens is not None else "-",
                    str(ref.classes) if ok and ref is not None else "-",
                    f"{ref.ratio:.0f}" if ok and ref is not None and ref.ratio else "-",
                    str(ref.invalid) if ok and ref is not None else "-",
                    str(ref.gnf_rules) if ok and ref is not None else "-",
                    _fmt_s(r1),
                    _fmt_mib(r1),
                    _fmt_s(r2),
                    _fmt_mib(r2, tree=True),
                ]
            )
            + " |"
        )
    out = "\n".join(lines)
    if any(r.tool == PUBLISHED for r in runs):
        lines = [
            "",
            "",
            "| grammar | vocabulary | ours: time 1 worker (s) | ours: process CPU (s) | ours: peak (MiB) | "
            "ours: classes | ours: invalid text tokens | cfgzip-preprocess: time 1 thread (s) | "
            "cfgzip-preprocess: process CPU (s) | cfgzip-preprocess: peak (MiB) | "
            "cfgzip-preprocess: classes | cfgzip-preprocess: invalid | time ratio (theirs / ours) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for g, v in keys:
            r1 = by.get((g, v, OURS, 1))
            p = by.get((g, v, PUBLISHED, 1))
            if p is None:
                continue
            speed = "-"
            if r1 is not None and p.ok and r1.ok and r1.seconds and p.seconds is not None:
                speed = f"{p.seconds / r1.seconds:.1f}x"
            lines.append(
                "| "
                + " | ".join(
                    [
                        g,
                        v,
                        _fmt_s(r1),
                        _fmt_cpu(r1),
                        _fmt_mib(r1),
                        str(r1.classes) if r1 is not None and r1.ok else "-",
                        str(r1.invalid_text) if r1 is not None and r1.ok else "-",
                        _fmt_s(p),
                        _fmt_cpu(p),
                        _fmt_mib(p, tree=True) if p.ok or p.status.startswith("over") else "-",
                        str(p.classes) if p.ok else "-",
                        str(p.invalid) if p.ok else "-",
                        speed,
                    ]
                )
                + " |"
            )
        out += "\n".join(lines)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        return _child_main(argv[1:])
    ap = argparse.ArgumentParser(
        prog="python -m bench.compress_bench",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    ap.add_argument(
        "-g",
        "--grammar",
        action="append",
        help="grammar path (relative to shared/grammars or absolute); repeatable",
    )
    ap.add_argument(
        "-v",
        "--vocab",
        action="append",
        help="vocabulary (built-in name or tokenizer file); repeatable",
    )
    ap.add_argument("--quick", action="store_true", help="3 small grammars, llama3 only")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma separated (default 1,2)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="median of N runs for runs under --repeat-below",
    )
    ap.add_argument("--repeat-below", type=float, default=10.0, help="seconds (default 10)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="per-run timeout in seconds (default 300)",
    )
    ap.add_argument(
        "--memory-mib",
        type=float,
        default=4096.0,
        help="per-run memory limit (default 4096; 0: none)",
    )
    ap.add_argument("--no-published", action="store_true", help="do not run cfgzip-preprocess")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.grammar:
        grammars: Sequence[tuple[str, str]] = [(Path(g).stem, g) for g in args.grammar]
    else:
        grammars = QUICK_GRAMMARS if args.quick else DEFAULT_GRAMMARS
    vocabs = args.vocab or (QUICK_VOCABS if args.quick else DEFAULT_VOCABS)
    tool = None if args.no_published else find_published_tool()
    print(
        f"published tool: {tool or 'not found (pip install cfgzip in a venv; see bench/compress_bench.py)'}"
    )
    runs = run_bench(
        grammars,
        vocabs,
        workers=[int(x) for x in args.workers.split(",") if x.strip()],
        repeats=args.repeats,
        repeat_below_s=args.repeat_below,
        timeout=args.timeout,
        memory_mib=args.memory_mib or None,
        published=not args.no_published,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    print(markdown_tables(runs))
    if args.json:
        args.json.write_text(json.dumps([r.as_dict() for r in runs], indent=1), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
