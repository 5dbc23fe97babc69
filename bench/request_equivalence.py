"""Equivalence record of per-request compression: what a speed change must leave bit for bit alone.

For a fixed set of (grammar, vocabulary, specialisation) combinations this records, per
combination, the SHA-256 of the token classes and of the representatives, the stop and
invalid classes, the class count, the search's expansions and work, and the SHA-256 of the
GNF (before and after :func:`~formalgram.transforms.specialize.specialize_terminal_symbols`:
names, masks, start and rules, in order) -- everything a change to the conversion or the
search could move.  ``record`` writes them as JSON; ``compare`` recomputes them and lists
every combination that differs (exit status 1 if any).

Grammars: the in-repository llama.cpp grammars, JSON-schema grammars and ``c_syncode.gbnf``,
plus every ``--step``-th grammar of the shared ``derived/json_mode_eval_xgrammar`` corpus
when ``--grammars`` points at it (skipped when absent).  Vocabularies: ``--vocabs``
(default ``llama3,qwen3``).  Specialisation: the default (``None``) and ``False``.

``bench/results/request_equivalence.json`` is the recorded reference (with the
shared corpus; without it, its 40 JSON-corpus combinations are reported as missing).

Run from the repository root::

    python bench/request_equivalence.py record OUT.json [--grammars DIR] [--vocabs llama3,qwen3]
    python bench/request_equivalence.py compare OUT.json [--grammars DIR] [--vocabs llama3,qwen3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from formalgram.grammar import Grammar
from formalgram.syntax.gbnf import parse_gbnf
from formalgram.transforms.gnf import to_gnf
from formalgram.transforms.specialize import specialize_terminal_symbols
from formalgram.transforms.useless import remove_useless
from formalgram_cfgzip.compress import Compressor
from formalgram_cfgzip.vocabulary import Vocabulary

ROOT = Path(__file__).resolve().parents[1]
REPO_GRAMMARS = ROOT / "tests" / "data" / "grammars"
SHARED = ROOT.parent / "shared" / "grammars"
CORPUS = "derived/json_mode_eval_xgrammar"


def grammar_files(shared: Path, step: int) -> list[Path]:
    """The grammars of the record, in a fixed order."""
    files = sorted((REPO_GRAMMARS / "llama_cpp").glob("*.gbnf"))
    files += sorted((REPO_GRAMMARS / "json_schemas").glob("*.gbnf"))
    files.append(REPO_GRAMMARS / "derived" / "lark_via_xgrammar" / "c_syncode.gbnf")
    corpus = shared / CORPUS
    if corpus.is_dir():
        jme = sorted(corpus.glob("*.gbnf"), key=lambda p: int(p.stem.split("_")[1]))
        files += jme[::step]
    return files


def _grammar_sha(g: Grammar) -> str:
    """SHA-256 of a grammar's integer view, order included."""
    return hashlib.sha256(repr((g.names, g.masks, g.start_id, g.rules)).encode()).hexdigest()


def _label(path: Path) -> str:
    for base in (REPO_GRAMMARS, SHARED):
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return path.name


def measure(shared: Path, step: int, vocabs: list[str]) -> dict[str, dict[str, object]]:
    """The record: combination label -> its figures."""
    out: dict[str, dict[str, object]] = {}
    files = grammar_files(shared, step)
    texts = [(p, p.read_text(encoding="utf-8")) for p in files]
    gnfs: dict[str, tuple[str, str]] = {}
    for path, text in texts:
        gnf = to_gnf(remove_useless(parse_gbnf(text)), budget=2_000_000)
        gnfs[_label(path)] = (_grammar_sha(gnf), _grammar_sha(specialize_terminal_symbols(gnf)))
    for name in vocabs:
        vocab = Vocabulary.builtin(name)
        default = Compressor(vocab, cache_size=0)
        plain = Compressor(default.prepared, cache_size=0, specialize=False)
        for path, text in texts:
            label = _label(path)
            for spec, compressor in (("default", default), ("plain", plain)):
                tc = compressor.compress(text)
                out[f"{label}|{name}|{spec}"] = {
                    "token_class": hashlib.sha256(tc.token_class.tobytes()).hexdigest(),
                    "representatives": hashlib.sha256(tc.representatives.tobytes()).hexdigest(),
                    "classes": int(tc.num_classes),
                    "stop_class": int(tc.stop_class),
                    "invalid_class": int(tc.invalid_class),
                    "expansions": int(tc.stats["expansions"]),
                    "work": int(tc.stats["work"]),
                    "specialized": int(tc.stats["specialized"]),
                    "gnf": gnfs[label][0],
                    "gnf_specialized": gnfs[label][1],
                }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("path", type=Path, help="the JSON record")
    ap.add_argument("--grammars", type=Path, default=SHARED, help="the shared grammar corpus (optional)")
    ap.add_argument("--step", type=int, default=8, help="every STEP-th grammar of the JSON corpus")
    ap.add_argument("--vocabs", default="llama3,qwen3", help="built-in vocabularies, comma-separated")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    got = measure(args.grammars, args.step, args.vocabs.split(","))
    elapsed = time.perf_counter() - t
    if args.mode == "record":
        args.path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"recorded {len(got)} combinations in {elapsed:.0f} s to {args.path}")
        return 0
    want = json.loads(args.path.read_text(encoding="utf-8"))
    bad = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    for k in bad:
        print(f"DIFFERS {k}: recorded {want.get(k)} now {got.get(k)}")
    print(f"{len(got)} combinations compared in {elapsed:.0f} s: {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
