"""The ``formalgram-cfgzip`` command line: ``compress``, ``compress-many`` and ``demo``.

``compress`` computes token classes for a grammar (or a JSON Schema) and a tokenizer and
writes them to a cache directory; ``compress-many`` does so for every pair of a manifest,
on local processes or a Dask cluster; ``demo`` does the whole job on a built-in grammar (or
a JSON Schema) and vocabulary: it decodes a text of the language token by token and checks
the compressed masks against the full-vocabulary engine.  Bad arguments exit with status 2
and one line; so do the library's own errors (:class:`~formalgram.errors.FormalgramError`),
never with a traceback.  The benchmark report is not part of the installed command: it runs
from a source checkout (``python -m bench``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypedDict

from formalgram.errors import FormalgramError, GrammarSyntaxError
from formalgram_cfgzip.budgets import DEFAULT_BUDGETS
from formalgram_cfgzip.engines import ENGINES
from formalgram_cfgzip.vocabulary.builtins import BUILTIN_NAMES

__all__ = ["CompressOptions", "build_parser", "compress_options", "main"]


class CompressOptions(TypedDict):
    """The keyword arguments of :func:`~formalgram_cfgzip.compress` set by flags."""

    workers: int
    progress: bool
    gnf_budget: int
    memory_budget: int | None
    specialize: bool | None


def compress_options(args: argparse.Namespace) -> CompressOptions:
    """The keyword arguments of :func:`~formalgram_cfgzip.compress` that ``compress``'s
    flags select (``--memory-budget`` in MiB, 0 for no limit).

    Examples
    --------
    >>> args = build_parser().parse_args(
    ...     ["compress", "g.gbnf", "--tokenizer", "llama3", "-o", "out", "--workers", "2",
    ...      "--memory-budget", "0", "--no-specialize", "-q"])
    >>> sorted(compress_options(args).items())
    [('gnf_budget', 2000000), ('memory_budget', None), ('progress', False), ('specialize', False), ('workers', 2)]
    """
    return {
        "workers": args.workers,
        "progress": not args.quiet,
        "gnf_budget": args.budget,
        "memory_budget": args.memory_budget << 20 if args.memory_budget else None,
        "specialize": args.specialize,
    }


def cmd_compress(args: argparse.Namespace) -> int:
    """``formalgram-cfgzip compress``: compute the classes, save them, print a summary."""
    from formalgram_cfgzip.compress import compress
    from formalgram_cfgzip.demo import classes_summary
    from formalgram_cfgzip.sources import read_grammar_file, schema_grammar
    from formalgram_cfgzip.vocabulary import Vocabulary

    if (args.grammar is None) == (args.json_schema is None):
        raise FormalgramError("give a grammar file or --json-schema FILE (exactly one)")
    if args.json_schema is not None:
        if args.root not in (None, "root"):
            raise FormalgramError(
                "--root does not apply to --json-schema (XGrammar's grammar starts at root)"
            )
        source = schema_grammar(args.json_schema, _schema_options(args.json_schema_options))
        named = args.json_schema
    else:
        source = read_grammar_file(args.grammar, args.root)
        named = args.grammar
    vocab = Vocabulary.load(args.tokenizer)
    t0 = time.perf_counter()
    classes = compress(source.text, vocab, root=source.root, domains=args.native, **compress_options(args))
    seconds = time.perf_counter() - t0
    classes.save(args.output)
    print(f"compressed {named} for {args.tokenizer} -> {args.output}")
    if args.native:  # the native engine's tables, from this very search, beside the classes
        from formalgram_cfgzip.engines.native import build_tables
        from formalgram_cfgzip.engines.native.matcher import TABLES_SUBDIR

        t1 = time.perf_counter()
        tables = build_tables(classes, source.text, check=False, root=source.root)
        tables.save(Path(args.output) / TABLES_SUBDIR)
        print(
            f"native tables: {Path(args.output) / TABLES_SUBDIR} "
            f"({tables.stats['domain_states']:.0f} domain states, {time.perf_counter() - t1:.2f} s)"
        )
    if source.converted:  # the engine must compile exactly this text
        (Path(args.output) / "grammar.gbnf").write_text(source.text, encoding="utf-8")
        root = "" if source.root == "root" else f", root={source.root!r}"
        print(
            f"engine grammar text: {Path(args.output) / 'grammar.gbnf'} (compile_grammar(classes, text{root}))"
        )
    print(classes_summary(classes, seconds))
    return 0


def _schema_options(options: str | None) -> dict[str, Any]:
    """The keywords of ``--json-schema-options`` (a JSON object)."""
    import json

    try:
        kwargs = json.loads(options) if options else {}
    except ValueError as exc:
        raise FormalgramError(f"--json-schema-options is not JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise FormalgramError("--json-schema-options must be a JSON object")
    return kwargs


def cmd_compress_many(args: argparse.Namespace) -> int:
    from formalgram_cfgzip.many import JobResult, compress_many, read_manifest

    jobs = read_manifest(args.manifest)

    def report(result: JobResult) -> None:
        where = Path(result.directory).name if result.directory else "-"
        extra = f"  {result.error}" if result.error else f"  {result.num_classes} classes"
        print(
            f"{result.status:<8} {result.job.describe()}  [{where}]  {result.seconds:.2f} s{extra}",
            flush=True,
        )

    if args.dask_scheduler:
        import importlib

        try:
            distributed: Any = importlib.import_module("distributed")  # untyped: kept as Any
        except ImportError as exc:
            raise FormalgramError(
                "--dask-scheduler needs Dask's 'distributed' package (pip install formalgram[distributed])"
            ) from exc
        if args.dask_scheduler == "local":
            with (
                distributed.LocalCluster(
                    n_workers=args.workers or None, threads_per_worker=1, dashboard_address=None
                ) as cluster,
                distributed.Client(cluster) as client,
            ):
                summary = compress_many(jobs, args.output, executor=client.get_executor(), on_result=report)
        else:
            with distributed.Client(args.dask_scheduler) as client:
                summary = compress_many(jobs, args.output, executor=client.get_executor(), on_result=report)
    else:
        summary = compress_many(jobs, args.output, workers=args.workers or None, on_result=report)
    print(f"{len(jobs)} pairs: {summary.line()} (summary in {Path(args.output) / 'summary.json'})")
    return 1 if summary.count("failed") else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``formalgram-cfgzip demo``: :func:`formalgram_cfgzip.demo.run_demo` with the flags."""
    from formalgram_cfgzip.demo import run_demo

    return run_demo(
        grammar=args.grammar,
        schema=args.schema,
        text=args.text,
        tokenizer=args.tokenizer,
        steps=args.steps,
        engine=args.engine,
    )


class _Parser(argparse.ArgumentParser):
    """``argparse`` with one-line errors (exit status 2), for the subcommands too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def _output_dir(text: str) -> str:
    """An argparse type: a directory to write (not empty, not an existing file)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the output directory must not be empty")
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``formalgram-cfgzip`` (one-line errors, exit status 2).

    Returns
    -------
    argparse.ArgumentParser

    Examples
    --------
    >>> args = build_parser().parse_args(["compress", "builtin:json", "--tokenizer", "llama3", "-o", "out"])
    >>> args.workers, args.memory_budget, args.specialize, args.root
    (1, 4096, None, None)
    """
    p = _Parser(
        prog="formalgram-cfgzip",
        description="Lossless token-space compression for grammar-constrained decoding (CFGzip).",
        epilog="The benchmark report runs from a source checkout: python -m bench -o DIR.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compress", help="compute token classes for a grammar and a tokenizer")
    c.add_argument(
        "grammar", nargs="?", help="GBNF / XGrammar EBNF file, a .lark file, or builtin:minic / builtin:json"
    )
    c.add_argument(
        "--json-schema",
        metavar="FILE",
        help="compress XGrammar's grammar for this JSON Schema (a file or builtin:order) instead "
        "(written to OUTPUT/grammar.gbnf)",
    )
    c.add_argument(
        "--json-schema-options",
        metavar="JSON",
        help='options of XGrammar\'s converter, e.g. \'{"any_whitespace": false, "indent": 2}\'',
    )
    c.add_argument(
        "--tokenizer",
        required=True,
        help=f"tokenizer.json path, .tiktoken path, or built-in name ({', '.join(BUILTIN_NAMES)})",
    )
    c.add_argument(
        "-o", "--output", required=True, type=_output_dir, help="output directory for the class cache"
    )
    c.add_argument(
        "--root",
        default=None,
        help="start rule, as compress and the engines take it (default: root; start for .lark)",
    )
    c.add_argument(
        "--workers",
        type=_int_at_least(1),
        default=1,
        help="worker processes of the Python search (default 1; the compiled search kernel runs in one process)",
    )
    c.add_argument(
        "--budget", type=_int_at_least(1), default=DEFAULT_BUDGETS.gnf_budget, help="GNF size budget (rules)"
    )
    c.add_argument(
        "--memory-budget",
        type=_int_at_least(0),
        default=DEFAULT_BUDGETS.memory_budget_mib,
        help=f"memory the search may add, in MiB (0: no limit; default {DEFAULT_BUDGETS.memory_budget_mib})",
    )
    c.add_argument(
        "--specialize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="copy single-byte symbols per occurrence: fewer classes, slower search (default: auto)",
    )
    c.add_argument(
        "--native",
        action="store_true",
        help="also write the native engine's tables (OUTPUT/native), from the same search",
    )
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=cmd_compress)

    m = sub.add_parser("compress-many", help="compress every grammar x tokenizer pair of a manifest")
    m.add_argument("manifest", help="JSON Lines manifest (see formalgram_cfgzip.many)")
    m.add_argument(
        "-o", "--output", required=True, type=_output_dir, help="output (cache) directory, one entry per pair"
    )
    m.add_argument(
        "--workers", type=_int_at_least(0), default=0, help="worker processes (default 0: one per CPU)"
    )
    m.add_argument(
        "--dask-scheduler",
        metavar="ADDRESS",
        help="run on a Dask cluster (scheduler address, or 'local' for a local one); needs 'distributed'",
    )
    m.set_defaults(func=cmd_compress_many)

    d = sub.add_parser(
        "demo",
        help="decode a text token by token under a grammar, full vocabulary against classes",
        description="Compress a grammar, then decode a text of its language token by token with the "
        "engine over the full vocabulary and over the classes; per step: allowed tokens, both mask "
        "times, whether the masks are identical and the next token allowed.",
    )
    which = d.add_mutually_exclusive_group()
    which.add_argument(
        "--grammar",
        metavar="FILE|builtin:NAME",
        help="grammar file, or builtin:minic (the default) / builtin:json",
    )
    which.add_argument(
        "--schema",
        metavar="FILE|builtin:NAME",
        help="JSON Schema file, or builtin:order: decode under XGrammar's grammar for it",
    )
    d.add_argument(
        "--text",
        metavar="FILE",
        help="the text to decode ('-': standard input); default: the built-in grammar's or schema's example",
    )
    d.add_argument("--tokenizer", default="llama3", help="tokenizer (default llama3, shipped offline)")
    d.add_argument(
        "--steps", type=_int_at_least(1), help="decode at most this many tokens (default: the whole text)"
    )
    d.add_argument(
        "--engine",
        choices=ENGINES,
        default="xgrammar",
        help="grammar engine (default xgrammar; llguidance's lexer reads grammars with optional "
        "whitespace between lexemes, the built-in C-like one among them, as another language)",
    )
    d.set_defaults(func=cmd_demo)
    return p


def _one_line(exc: Exception) -> str:
    """An error as one line (a grammar syntax error keeps its position, not its caret)."""
    if isinstance(exc, GrammarSyntaxError):
        return f"line {exc.line}, column {exc.column}: {exc.message}"
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``formalgram-cfgzip`` command.

    Parameters
    ----------
    argv : sequence of str or None
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success; 1 when the demo found differing masks or a text the grammar
        refuses, or a file could not be written or read; 2 on bad arguments or a library
        error (one line on stderr); 130 when interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc: int = args.func(args)
    except FormalgramError as exc:
        print(f"formalgram-cfgzip: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"formalgram-cfgzip: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("formalgram-cfgzip: interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
