"""The native engine's first compile: tables by a second search, against tables from ``compress``'s own.

For each grammar, in one process: ``compress`` then ``build_tables`` (which searches the class
representatives again), against ``compress(..., domains=True)`` then ``build_tables`` (which
reads the domains the compression recorded).  Checks that the classes and every array of the
domain automaton are identical, and prints the times, the automaton's size and the peak memory.
Run from the repository root::

    python -m bench.domains_bench [--vocab llama3] [--grammars DIR] REL [REL ...]

``REL`` is a grammar path relative to ``--grammars`` (default: ``../shared/grammars``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

from formalgram_cfgzip import Vocabulary, compress
from formalgram_cfgzip.engines.native.tables import NativeTables, build_tables

GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
FIELDS = ("edge_start", "edge_sym", "edge_to", "out", "set_start", "set_class")


def same_tables(a: NativeTables, b: NativeTables) -> bool:
    """Whether two tables have the same domain automaton, groups, transitions and stack alphabet."""
    return (
        all(np.array_equal(getattr(a.domains, f), getattr(b.domains, f)) for f in FIELDS)
        and np.array_equal(a.domain_group, b.domain_group)
        and np.array_equal(a.trans_push, b.trans_push)
        and a.num_symbols == b.num_symbols
    )


def measure(text: str, vocab: Vocabulary) -> str:
    """One grammar: both ways, one line."""
    t0 = time.perf_counter()
    before = compress(text, vocab, progress=False)
    t1 = time.perf_counter()
    searched = build_tables(before, text)
    t2 = time.perf_counter()
    after = compress(text, vocab, progress=False, domains=True)
    t3 = time.perf_counter()
    recorded = build_tables(after, text)
    t4 = time.perf_counter()
    same = (
        np.array_equal(before.token_class, after.token_class)
        and np.array_equal(before.representatives, after.representatives)
        and same_tables(searched, recorded)
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return (
        f"classes {before.num_classes}; before: compress {t1 - t0:.2f} s + tables {t2 - t1:.2f} s "
        f"(search {searched.stats['search_seconds']:.2f} s) | after: compress(domains) {t3 - t2:.2f} s "
        f"(automaton {after.stats['domain_seconds']:.2f} s) + tables {t4 - t3:.2f} s "
        f"(from the classes: {recorded.stats['domains_from_classes'] == 1.0}) | identical: {same} | "
        f"automaton {recorded.stats['domain_states']:.0f} states | peak {peak:.0f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grammars_rel", nargs="+", metavar="REL")
    ap.add_argument("--grammars", type=Path, default=GRAMMARS)
    ap.add_argument("--vocab", default="llama3")
    args = ap.parse_args(argv)
    vocab = Vocabulary.builtin(args.vocab)
    ok = True
    for rel in args.grammars_rel:
        line = measure((args.grammars / rel).read_text(encoding="utf-8"), vocab)
        ok = ok and "identical: True" in line
        print(f"{rel}: {line}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
