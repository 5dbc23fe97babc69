"""Benchmark report: rerun the offline and online benchmarks, write Markdown with PNG plots.

Run from the repository root: ``python -m bench -o DIR [--quick]`` (or ``python -m
bench.report``).  The report and the benchmarks live in the checkout's ``bench/`` package,
not in the installed one.

* offline (``bench/compress_bench.py``): compress time at 1 and 2 workers, peak memory,
  classes, invalid tokens and compression ratio for grammars x vocabularies, and the
  published ``cfgzip-preprocess`` tool side by side when it is installed;
* online (``bench/online_bench.py``, when present): per-step mask time of the
  full-vocabulary engine against the compressed one (representatives + expansion) at
  batch 1, 8 and 16.

Each measurement runs in a fresh subprocess with a timeout and a memory limit, so one
failing grammar becomes a table entry, not a crashed report.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import compress_bench, online_bench

__all__ = ["main", "run_report"]

# online benchmark configuration: (case name in bench/online_bench.py CASES, label)
_ONLINE_DEFAULT = ("arithmetic", "json-schema", "c")
_ONLINE_QUICK = ("arithmetic", "json-schema")
# the default report must finish in under 20 minutes on a 2-core machine: no new offline run
# starts after this many seconds (one started run may add its timeout), nor an online one
# after _TOTAL_BUDGET_S
_OFFLINE_BUDGET_S = 780.0
_TOTAL_BUDGET_S = 1050.0


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text("utf-8", "replace")
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if m:
            model = m.group(1).strip()
    except OSError:
        pass
    mem = ""
    try:
        m2 = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text("utf-8"))
        if m2:
            mem = f", {int(m2.group(1)) / (1 << 20):.0f} GiB RAM"
    except OSError:
        pass
    return f"{os.cpu_count()} cores {platform.machine()}, {model}{mem}, Python {platform.python_version()}"


def _load() -> str:
    try:
        a, b, c = os.getloadavg()
    except OSError:
        return "?"
    return f"{a:.2f} / {b:.2f} / {c:.2f}"


# ---------------------------------------------------------------- online benchmark (subprocess)


def _online_child(argv: Sequence[str]) -> int:
    """Subprocess entry: time one online case with bench/online_bench.py's helpers; print JSON."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--vocab", default="llama3")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--walks", type=int, default=16)
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--engine", default="xgrammar")
    args = ap.parse_args(list(argv))
    mod = online_bench
    res: dict[str, Any] = {"case": args.case}
    from formalgram_cfgzip.compress import compress
    from formalgram_cfgzip.engines import compile_full, compile_grammar
    from formalgram_cfgzip.vocabulary import Vocabulary

    cases = dict(mod.CASES)
    if args.case not in cases:
        res["status"] = "no such case in bench/online_bench.py"
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    path = mod.pick_file(cases[args.case])
    if path is None:
        res["status"] = "grammar file absent"
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    res["file"] = str(path)
    text = path.read_text("utf-8")
    vocab = Vocabulary.load(args.vocab)
    try:
        full = compile_full(vocab, text, engine=args.engine)
    except Exception as exc:  # an engine refusing a grammar is a result, not a crash
        res["status"] = f"engine cannot compile: {' '.join(str(exc).split())[:80]}"
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    try:
        tc = compress(text, vocab, progress=False)
    except Exception as exc:
        res["status"] = f"compress failed: {type(exc).__name__}: {' '.join(str(exc).split())[:70]}"
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    small = compile_grammar(tc, text, engine=args.engine)
    walks = mod.record_walks(full, args.walks, args.steps, seed=0)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        rows.append(
            {
                "batch": batch,
                "full_us": float(mod.time_replay(full, walks, batch)),
                "compressed_us": float(mod.time_replay(small, walks, batch)),
            }
        )
    res.update(
        status="ok",
        classes=tc.num_classes,
        tokens=vocab.size,
        steps=min(len(w) for w in walks) if walks else 0,
        rows=rows,
    )
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def _run_online(
    cb: ModuleType,
    cases: Sequence[str],
    *,
    quick: bool,
    timeout: float,
    log: Any,
    budget_s: float | None = None,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    batches = "1,8" if quick else "1,8,16"
    steps = "25" if quick else "60"
    t0 = time.perf_counter()
    for case in cases:
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            out.append({"case": case, "status": "not run (report time budget spent)"})
            continue
        cmd = [
            sys.executable,
            "-c",
            "import sys; from bench.report import _online_child; sys.exit(_online_child(sys.argv[1:]))",
            "--case",
            case,
            "--batches",
            batches,
            "--steps",
            steps,
        ]
        res = cb.run_child(cmd, timeout=timeout, memory_mib=4096.0, env=cb._child_env(), cwd=str(cb.REPO))
        m = re.search(r"^RESULT (\{.*\})$", res.stdout, re.MULTILINE)
        if res.killed:
            data: dict[str, Any] = {
                "case": case,
                "status": f"{res.killed} (limit {timeout:.0f} s / 4096 MiB)",
            }
        elif m is None:
            tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
            data = {"case": case, "status": f"crashed (rc={res.returncode}): {tail[:90]}"}
        else:
            data = json.loads(m.group(1))
        out.append(data)
        log(f"online {case}: {data.get('status')}")
    return out


def _online_label(d: dict[str, Any]) -> str:
    """Case name, with the file's stem when the case is a folder (json-schema -> JME_1)."""
    stem = Path(str(d.get("file", ""))).stem
    case = str(d["case"])
    return f"{case} ({stem})" if stem and stem not in case else case


def _online_table(online: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| grammar | classes | batch | full vocabulary (µs/step) | compressed (µs/step) | full / compressed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for d in online:
        if d.get("status") != "ok":
            lines.append(
                f"| {_online_label(d)} | - | - | {str(d.get('status', '?')).replace('|', '/')} | - | - |"
            )
            continue
        for r in d["rows"]:
            f, c = r["full_us"], r["compressed_us"]
            ratio = f / c if c else float("nan")
            lines.append(
                f"| {_online_label(d)} | {d['classes']} | {r['batch']} | {f:.1f} | {c:.1f} | {ratio:.2f}"
                + (" (slower)" if ratio < 1 else "")
                + " |"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- plots


def _save(plt: Any, fig: Any, out: Path, name: str) -> str:
    """Lay out, write ``out / name`` and close ``fig``; return ``name``."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _vocab_panels(plt: Any, n_vocabs: int, n_grammars: int) -> tuple[Any, Any]:
    """A figure with one bar-chart panel per vocabulary, stacked vertically."""
    fig, axes = plt.subplots(
        n_vocabs, 1, figsize=(max(8.0, 0.9 * n_grammars + 3), 3.6 * n_vocabs), squeeze=False
    )
    return fig, axes


def _finish_vocab_panel(
    ax: Any, grammars: Sequence[str], ylim: tuple[float, float], ylabel: str, title: str
) -> None:
    """Log scale, grammar ticks, labels, grid and an outside legend for one vocabulary panel."""
    ax.set_yscale("log")
    ax.set_ylim(*ylim)
    ax.set_xlim(-0.6, len(grammars) - 0.4)
    ax.set_xticks(range(len(grammars)), grammars, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _plots(out: Path, runs: Sequence[Any], online: Sequence[dict[str, Any]], published: bool) -> list[str]:
    """Write the PNG plots; return their file names (empty without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names: list[str] = []
    ours1 = [r for r in runs if r.tool == "formalgram" and r.workers == 1]
    grammars = list(dict.fromkeys(r.grammar for r in ours1))
    vocabs = list(dict.fromkeys(r.vocab for r in ours1))
    by = {(r.grammar, r.vocab, r.tool, r.workers): r for r in runs}

    # 1. compression ratio per grammar and vocabulary
    if grammars:
        fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(grammars) * max(1, len(vocabs)) * 0.45 + 3), 4.8))
        width = 0.8 / max(1, len(vocabs))
        for j, v in enumerate(vocabs):
            xs, ys = [], []
            for i, g in enumerate(grammars):
                r = by.get((g, v, "formalgram", 1))
                if r is not None and r.ok and r.ratio:
                    xs.append(i + (j - (len(vocabs) - 1) / 2) * width)
                    ys.append(r.ratio)
            bars = ax.bar(xs, ys, width, label=v)
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=1)
        for i, g in enumerate(grammars):
            if not any((r := by.get((g, v, "formalgram", 1))) is not None and r.ok for v in vocabs):
                ax.text(
                    i,
                    1.3,
                    "no classes (failed)",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    color="C3",
                    rotation=90,
                )
        ax.set_yscale("log")
        ax.set_ylim(1, max([1.0, *(r.ratio or 1.0 for r in ours1 if r.ok)]) * 3)
        ax.set_xlim(-0.6, len(grammars) - 0.4)
        ax.set_xticks(range(len(grammars)), grammars, rotation=30, ha="right")
        ax.set_ylabel("tokens / classes (log scale)")
        ax.set_title("Compression ratio (vocabulary size / number of classes)")
        ax.legend(title="vocabulary", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(axis="y", which="both", alpha=0.3)
        names.append(_save(plt, fig, out, "compression_ratio.png"))

    # 2. compress time: ours (1 and 2 workers) vs the published tool, one panel per vocabulary
    if grammars:
        tools = [("formalgram", 1, "formalgram, 1 worker"), ("formalgram", 2, "formalgram, 2 workers")]
        if published:
            tools.append(("cfgzip-preprocess", 1, "cfgzip-preprocess 0.2.0, 1 thread"))
        fig, axes = _vocab_panels(plt, len(vocabs), len(grammars))
        width = 0.8 / len(tools)
        for ax, v in zip(axes[:, 0], vocabs, strict=True):
            top = 1.0
            for k, (tool, w, label) in enumerate(tools):
                xs, ys = [], []
                for i, g in enumerate(grammars):
                    r = by.get((g, v, tool, w))
                    x = i + (k - (len(tools) - 1) / 2) * width
                    if r is None:
                        continue
                    if r.ok and r.seconds is not None:
                        xs.append(x)
                        ys.append(max(r.seconds, 1e-3))
                        top = max(top, r.seconds)
                    else:
                        st = str(r.status)
                        tag = "fails"
                        for prefix, short in (
                            ("over memory", "OOM"),
                            ("timeout", "timeout"),
                            ("too large", "too large"),
                            ("not run", "not run"),
                        ):
                            if st.startswith(prefix):
                                tag = short
                        ax.text(x, 0.012, tag, ha="center", va="bottom", fontsize=7, color="C3", rotation=90)
                if xs:
                    bars = ax.bar(xs, ys, width, label=label, color=f"C{k}")
                    ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
            _finish_vocab_panel(ax, grammars, (0.01, top * 3), "seconds (log)", f"Compress time, {v}")
        names.append(_save(plt, fig, out, "compress_time.png"))

        # 3. peak memory, same layout
        fig, axes = _vocab_panels(plt, len(vocabs), len(grammars))
        for ax, v in zip(axes[:, 0], vocabs, strict=True):
            top = 100.0
            killed_legend = True
            for k, (tool, w, label) in enumerate(tools):
                xs, ys, kx, ky = [], [], [], []
                for i, g in enumerate(grammars):
                    r = by.get((g, v, tool, w))
                    x = i + (k - (len(tools) - 1) / 2) * width
                    if r is None:
                        continue
                    if r.ok and r.peak_mib is not None:
                        xs.append(x)
                        ys.append(r.tree_peak_mib if w > 1 and r.tree_peak_mib else r.peak_mib)
                    elif str(r.status).startswith("over memory"):
                        kx.append(x)
                        ky.append(float(r.tree_peak_mib or r.peak_mib or 0.0))
                top = max([top, *ys, *ky])
                if xs:
                    bars = ax.bar(xs, ys, width, label=label, color=f"C{k}")
                    ax.bar_label(bars, fmt="%.0f", fontsize=6, padding=1)
                if kx:
                    kb = ax.bar(
                        kx,
                        ky,
                        width,
                        color=f"C{k}",
                        alpha=0.45,
                        hatch="//",
                        edgecolor="C3",
                        label="killed at the memory limit" if killed_legend else None,
                    )
                    killed_legend = False
                    ax.bar_label(kb, labels=["killed"] * len(kx), fontsize=6, padding=1, color="C3")
            _finish_vocab_panel(
                ax,
                grammars,
                (50, top * 2.5),
                "peak memory, MiB (log)",
                f"Peak memory, {v} (2 workers: process tree PSS)",
            )
        names.append(_save(plt, fig, out, "peak_memory.png"))

    # 4. online: per-step mask time, full vs compressed, per batch size
    ok = [d for d in online if d.get("status") == "ok"]
    if ok:
        batches = sorted({r["batch"] for d in ok for r in d["rows"]})
        fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches) + 1, 4.4), squeeze=False)
        for ax, b in zip(axes[0], batches, strict=True):
            labels = [_online_label(d) for d in ok]
            full = [next((r["full_us"] for r in d["rows"] if r["batch"] == b), 0.0) for d in ok]
            comp = [next((r["compressed_us"] for r in d["rows"] if r["batch"] == b), 0.0) for d in ok]
            pos = list(range(len(labels)))
            b1 = ax.bar([x - 0.2 for x in pos], full, 0.4, label="full vocabulary")
            b2 = ax.bar([x + 0.2 for x in pos], comp, 0.4, label="classes + expansion")
            ax.bar_label(b1, fmt="%.0f", fontsize=6, padding=1)
            ax.bar_label(b2, fmt="%.0f", fontsize=6, padding=1)
            ax.set_yscale("log")
            vals = [x for x in (*full, *comp) if x > 0]
            if vals:
                ax.set_ylim(min(vals) / 4, max(vals) * 2.5)
            ax.set_xticks(pos, labels, rotation=25, ha="right", fontsize=8)
            ax.set_title(f"batch {b}", fontsize=10)
            ax.set_ylabel("µs per step, whole batch (log)")
            ax.grid(axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle("Per-step mask time (median over the walk)")
        names.append(_save(plt, fig, out, "mask_time.png"))
    return names


# ---------------------------------------------------------------- the report


def run_report(output: str, quick: bool) -> int:
    """Rerun the benchmarks and write ``output/report.md`` with PNG plots.

    Parameters
    ----------
    output : str
        Report directory (created).  Receives ``report.md``, ``results.json`` and the plots.
    quick : bool
        Small configuration (3 small grammars, llama3, 1 and 2 workers, the published tool,
        a 2-case online run at batch 1 and 8): about 2-3 minutes.  The default
        configuration (9 grammars x llama3/qwen3/o200k_harmony at 1 worker, llama3 also at
        2 workers, the published tool, a 3-case online run at batch 1/8/16) is sized for
        under 20 minutes on a 2-core machine: per-run timeouts (240 s, the published tool
        180 s), runs that cannot finish are skipped, and no run starts after 13 minutes
        (online: 17 minutes).

    Returns
    -------
    int
        0 (a measurement that fails is a table entry, not an error).

    Raises
    ------
    OSError
        If the output directory cannot be written.

    Notes
    -----
    One subprocess per measurement; dominated by the largest grammar's compress time.
    Run ``python -m bench -o bench-report --quick``, then open ``bench-report/report.md``.
    """
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    cb = compress_bench

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = _dt.datetime.now(_dt.UTC)
    load_before = _load()
    t0 = time.perf_counter()
    tool = cb.find_published_tool()
    log(f"report: published tool: {tool or 'not found'}")
    if quick:
        grammars, vocabs, timeout, budget = cb.QUICK_GRAMMARS, cb.QUICK_VOCABS, 90.0, 120.0
    else:
        grammars, vocabs, timeout, budget = cb.DEFAULT_GRAMMARS, cb.DEFAULT_VOCABS, 240.0, _OFFLINE_BUDGET_S
    runs = cb.run_bench(
        grammars,
        vocabs,
        workers=(1, 2),
        repeats=1,
        timeout=timeout,
        published_timeout=min(timeout, 180.0),
        memory_mib=4096.0,
        published=True,
        log=log,
        budget_s=budget,
        multi_worker_vocabs=None if quick else ("llama3",),
    )
    t_offline = time.perf_counter() - t0

    online: list[dict[str, Any]] = []
    online_note = ""
    cases = _ONLINE_QUICK if quick else _ONLINE_DEFAULT
    if cases:
        left = None if quick else max(0.0, _TOTAL_BUDGET_S - (time.perf_counter() - t0))
        online = _run_online(cb, cases, quick=quick, timeout=90.0 if quick else 150.0, log=log, budget_s=left)
    else:
        online_note = "No online case is configured: no online figures."
    t_total = time.perf_counter() - t0
    plots = _plots(out, runs, online, tool is not None)

    (out / "results.json").write_text(
        json.dumps(
            {
                "started": started.isoformat(timespec="seconds"),
                "machine": _machine(),
                "quick": quick,
                "published_tool": tool,
                "offline": [r.as_dict() for r in runs],
                "online": online,
            },
            indent=1,
        ),
        "utf-8",
    )
    md = _markdown(
        runs=runs,
        online=online,
        online_note=online_note,
        plots=plots,
        cb=cb,
        tool=tool,
        quick=quick,
        started=started,
        load_before=load_before,
        seconds=(t_offline, t_total),
    )
    (out / "report.md").write_text(md, "utf-8")
    log(f"report: wrote {out / 'report.md'} ({t_total:.0f} s)")
    return 0


def _markdown(
    *,
    runs: Sequence[Any],
    online: Sequence[dict[str, Any]],
    online_note: str,
    plots: Sequence[str],
    cb: ModuleType,
    tool: str | None,
    quick: bool,
    started: _dt.datetime,
    load_before: str,
    seconds: tuple[float, float],
) -> str:
    cmd = "python -m bench -o DIR" + (" --quick" if quick else "")
    parts = [
        "# formalgram-cfgzip benchmark report",
        "",
        f"* date: {started.strftime('%Y-%m-%d %H:%M UTC')}; command: `{cmd}` (from the repository root)",
        f"* machine: {_machine()}",
        f"* load average (1/5/15 min) before: {load_before}; after: {_load()} "
        "(the machine may be shared: times are wall-clock times under that load)",
        f"* duration: offline {seconds[0]:.0f} s, total {seconds[1]:.0f} s",
        f"* published tool: `{tool}` (cfgzip 0.2.0, one thread, tokenizers from a locally built "
        "Hugging Face cache layout)"
        if tool
        else "* published tool: `cfgzip-preprocess` not found (install with `python -m venv /tmp/cfgzip-venv && "
        "/tmp/cfgzip-venv/bin/pip install cfgzip==0.2.0`, or set `$CFGZIP_PREPROCESS`)",
        "",
        "## Offline: token classes",
        "",
        "Every run is a fresh subprocess with a 4096 MiB memory limit (the process tree is killed above it). "
        "*time*: the `compress()` call (GNF conversion, displacement search, classes), without interpreter start "
        "and vocabulary loading; for `cfgzip-preprocess` its own `--timings` total minus tokenizer loading and "
        "output writing. *peak*: the child's maximum resident set (`ru_maxrss`); with 2 workers the sampled "
        "peak of the process tree's proportional set size (PSS: pages shared by the forked workers counted once; "
        "sampled every 0.2 s, so short peaks can be missed). *process CPU*: user + system CPU of the whole "
        "process (ours includes interpreter start and vocabulary loading, theirs tokenizer loading); with "
        "the machine shared, CPU time is steadier than wall time. "
        "*ratio*: vocabulary size / classes; classes include the invalid class and the stop class. "
        "*invalid*: tokens allowed nowhere.",
        "",
        cb.markdown_tables(runs),
        "",
    ]
    if tool:
        parts += [
            "The published tool's classes are not comparable one to one: it drops valid tokens "
            "(see `../shared/reference/NOTES.md`: non-nullable `ws*` after its normalisation), which shows here as "
            "more invalid tokens and fewer classes on grammars with optional whitespace; ours is checked lossless "
            "against XGrammar (`tests/test_xgrammar_diff.py`).",
            "",
        ]
    for name, title in (
        ("compression_ratio.png", "Compression ratio"),
        ("compress_time.png", "Compress time"),
        ("peak_memory.png", "Peak memory"),
    ):
        if name in plots:
            parts += [f"![{title}]({name})", ""]
    parts += ["## Online: per-step mask time", ""]
    if online_note:
        parts += [online_note, ""]
    else:
        parts += [
            "XGrammar with the llama3 vocabulary, seeded random walks replayed in lockstep "
            "(`bench/online_bench.py`): median time of one mask fill for the whole batch, full vocabulary "
            "against representatives + expansion to the full logit width.",
            "",
            _online_table(online),
            "",
        ]
        if "mask_time.png" in plots:
            parts += ["![Per-step mask time](mask_time.png)", ""]
    failures = [r for r in runs if not r.ok and not r.status.startswith("not run")]
    skipped = [r for r in runs if r.status.startswith("not run")]
    if failures or skipped:
        parts += ["## Runs that did not finish", ""]
        parts += [
            f"* {r.grammar} / {r.vocab} / {r.tool}, {r.workers} worker(s): {r.status}" for r in failures
        ]
        if skipped:
            parts.append(
                f"* {len(skipped)} runs not started (a tool already failed on that grammar, or the "
                "benchmark's time budget was spent); the tables say which."
            )
        parts.append("")
    parts += ["Raw figures: `results.json`.", ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench [-o DIR] [--quick]``: parse the arguments and :func:`run_report`."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m bench", description="Rerun the benchmarks and write the report."
    )
    ap.add_argument("-o", "--output", default="bench-report", help="report directory (default bench-report)")
    ap.add_argument("--quick", action="store_true", help="small configuration (a few minutes)")
    args = ap.parse_args(argv)
    return run_report(output=args.output, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
