"""What ``TokenClasses.load(..., verify=...)`` costs, side by side with ``compress``.

For each grammar, with one vocabulary, in one process: ``compress`` (one worker, the
vocabulary's token table already built), then ``TokenClasses.load`` of its cache with
``verify="none"``, ``"sample"`` (:data:`~formalgram_cfgzip.classes.VERIFY_SAMPLE` tokens),
a sample of 64, and ``"all"``.  Each is timed ``--repeats`` times (median); the columns
are measured alternately, so that a change of machine load hits them alike.

Usage (from the repository root)::

    python -m bench.verify_bench                                  # the default grammars, llama3
    python -m bench.verify_bench -g llama_cpp/c.gbnf --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from formalgram_cfgzip import TokenClasses, Vocabulary
from formalgram_cfgzip.classes import VERIFY_SAMPLE
from formalgram_cfgzip.compress import PreparedVocabulary, compress

REPO = Path(__file__).resolve().parents[1]
GRAMMARS_DIR = REPO.parent / "shared" / "grammars"
DEFAULT_GRAMMARS = (
    "llama_cpp/arithmetic.gbnf",
    "llama_cpp/c.gbnf",
    "derived/json_mode_eval_xgrammar/JME_32.gbnf",
    "derived/lark_via_xgrammar/c_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
)
LEVELS: tuple[str | int, ...] = ("none", 64, "sample", "all")


def measure(text: str, vocab: Vocabulary, repeats: int) -> dict[str, float]:
    """Median seconds of compress and of each verification level, plus the class count."""
    times: dict[str, list[float]] = {"compress": [], **{str(level): [] for level in LEVELS}}
    classes = 0
    with tempfile.TemporaryDirectory() as d:
        for _ in range(repeats):
            t = time.perf_counter()
            tc = compress(text, vocab, progress=False)
            times["compress"].append(time.perf_counter() - t)
            classes = tc.num_classes
            tc.save(d)
            for level in LEVELS:
                t = time.perf_counter()
                TokenClasses.load(d, grammar=text, vocab=vocab, verify=level, seed=0)  # type: ignore[arg-type]
                times[str(level)].append(time.perf_counter() - t)
    out = {key: statistics.median(values) for key, values in times.items()}
    out["classes"] = float(classes)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-g", "--grammar", action="append", help="path under shared/grammars (repeatable)")
    ap.add_argument("-v", "--vocab", default="llama3")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    vocab = Vocabulary.builtin(args.vocab)
    PreparedVocabulary.of(vocab)  # the token table built once, outside every timing
    header = [
        "grammar",
        "classes",
        "compress s",
        "none s",
        "64 s",
        f"sample ({VERIFY_SAMPLE}) s",
        "all s",
        "sample/compress",
        "all/compress",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for rel in args.grammar or DEFAULT_GRAMMARS:
        path = Path(rel) if Path(rel).is_absolute() else GRAMMARS_DIR / rel
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # grammars with dead rules warn once per compress
            m = measure(path.read_text(), vocab, args.repeats)
        row = [
            path.stem,
            f"{m['classes']:.0f}",
            f"{m['compress']:.3f}",
            f"{m['none']:.4f}",
            f"{m['64']:.3f}",
            f"{m['sample']:.3f}",
            f"{m['all']:.3f}",
            f"{m['sample'] / m['compress']:.2f}",
            f"{m['all'] / m['compress']:.2f}",
        ]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
