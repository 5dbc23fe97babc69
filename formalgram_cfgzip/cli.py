"""Command line: ``formalgram-cfgzip compress | demo | bench``.

``compress`` computes token classes for a grammar and a tokenizer and writes them to a
cache directory; ``demo`` does the whole job on a built-in grammar and vocabulary and
checks the compressed masks against the full-vocabulary engine; ``bench`` writes the
benchmark report.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from formalgram.errors import FormalgramError

BUILTIN_GRAMMARS = ("minic", "json")


def builtin_grammar_text(name: str) -> str:
    """Text of a grammar shipped with the package (``minic`` or ``json``)."""
    if name not in BUILTIN_GRAMMARS:
        raise FormalgramError(
            f"unknown built-in grammar {name!r}; choose one of {', '.join(BUILTIN_GRAMMARS)}"
        )
    return resources.files("formalgram_cfgzip").joinpath("data", f"{name}.gbnf").read_text("utf-8")


def _read_grammar(spec: str) -> str:
    if spec.startswith("builtin:"):
        return builtin_grammar_text(spec.split(":", 1)[1])
    path = Path(spec)
    if not path.is_file():
        raise FormalgramError(f"grammar file not found: {spec} (or use builtin:minic / builtin:json)")
    try:
        return path.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise FormalgramError(f"grammar file {spec} is not UTF-8 text: {exc}") from exc


def _summary(classes: object, seconds: float) -> str:
    from formalgram_cfgzip.classes import TokenClasses

    assert isinstance(classes, TokenClasses)
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


def cmd_compress(args: argparse.Namespace) -> int:
    from formalgram.syntax.gbnf import parse_gbnf
    from formalgram_cfgzip.classes import compress
    from formalgram_cfgzip.vocabulary import Vocabulary

    text = _read_grammar(args.grammar)
    grammar = parse_gbnf(text, start=args.start)
    vocab = Vocabulary.load(args.tokenizer)
    t0 = time.perf_counter()
    classes = compress(
        grammar,
        vocab,
        workers=args.workers,
        progress=not args.quiet,
        gnf_budget=args.budget,
        memory_budget=args.memory_budget << 20 if args.memory_budget else None,
        specialize=args.specialize,
    )
    seconds = time.perf_counter() - t0
    classes.save(args.output)
    print(f"compressed {args.grammar} for {args.tokenizer} -> {args.output}")
    print(_summary(classes, seconds))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from formalgram_cfgzip.demo import run_demo

    return run_demo(grammar=args.grammar, tokenizer=args.tokenizer, steps=args.steps, seed=args.seed)


def cmd_bench(args: argparse.Namespace) -> int:
    from formalgram_cfgzip.report import run_report

    return run_report(output=args.output, quick=args.quick)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="formalgram-cfgzip",
        description="Lossless token-space compression for grammar-constrained decoding (CFGzip).",
    )
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compress", help="compute token classes for a grammar and a tokenizer")
    c.add_argument("grammar", help="GBNF / XGrammar EBNF file, or builtin:minic / builtin:json")
    c.add_argument(
        "--tokenizer",
        required=True,
        help="tokenizer.json path, .tiktoken path, or built-in name (llama3, qwen3, o200k_harmony, ...)",
    )
    c.add_argument("-o", "--output", required=True, help="output directory for the class cache")
    c.add_argument("--start", default="root", help="start rule (default: root)")
    c.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    c.add_argument("--budget", type=int, default=2_000_000, help="GNF size budget (rules)")
    c.add_argument(
        "--memory-budget", type=int, default=4096, help="memory the search may add, in MiB (0: none)"
    )
    c.add_argument(
        "--specialize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="copy single-byte symbols per occurrence: fewer classes, slower search (default: auto)",
    )
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=cmd_compress)

    d = sub.add_parser("demo", help="compress a built-in grammar and compare masks with the full engine")
    d.add_argument("--grammar", default="builtin:minic", help="grammar (default builtin:minic)")
    d.add_argument("--tokenizer", default="llama3", help="tokenizer (default llama3, shipped offline)")
    d.add_argument("--steps", type=int, default=64, help="constrained steps to walk")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_demo)

    b = sub.add_parser("bench", help="rerun the benchmarks and write a Markdown report with plots")
    b.add_argument("-o", "--output", default="bench-report", help="report directory")
    b.add_argument("--quick", action="store_true", help="small configuration (a few minutes)")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``formalgram-cfgzip`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc: int = args.func(args)
    except FormalgramError as exc:
        print(f"formalgram-cfgzip: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("formalgram-cfgzip: interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
