"""How a schema's compression scales with the bounds of its counted repetitions.

A JSON Schema's ``maxLength`` becomes a counted repetition in XGrammar's grammar for it
(``x{0, 1000}``), and the displacement search of a grammar with long ones is the tail of the
MaskBench time to first mask.  This takes one schema (a MaskBench record, or any file whose
JSON is a schema or holds one under ``"schema"``), writes its grammar with
:func:`~formalgram_cfgzip.json_schema.from_json_schema`, and compresses it again with every
repetition bound over ``--keep`` multiplied by each ``--scale`` (a scaled upper bound of at
least 1, a lower bound no greater than it), printing per scale the compression's time by
stage, its search work and its number of classes::

    python -m bench.repetition_scaling DATA/Github_hard---o79409.json --scale 1,0.5,0.1

Only the classes' count is compared: a scaled grammar has another language, so its classes
say nothing about losslessness; the table shows where the time goes as the bounds grow.

With ``--cut N`` it checks a conjecture instead, on every schema given: that the grammar
with every bound over ``N`` cut to ``N`` (``N`` above the vocabulary's longest token) splits
the vocabulary into exactly the same classes as the grammar itself.  It compresses both
(without domains) and compares the two partitions token by token, up to class numbering::

    python -m bench.repetition_scaling DATA/Snowplow---sp_1*.json --cut 130

The package does not use such a cut: this only measures how often the partitions agree and
what the cut would save.  (What the package does instead is exact: its search never guesses
the chain symbols of a repetition past the longest token, :mod:`formalgram_cfgzip.search.symmetry`,
so the scaled runs above now show what is still linear in the bounds: the GNF and the
search's setup.)  The conjecture is false in general: ``root ::= "a"{0,300} "b" |
"a"{0,1000} "c"`` cut to 130 has ``b`` and ``c`` in one class, the grammar itself does not
(after 200 ``a``: ``b`` is refused, ``c`` allowed); bounds cut to one value lose the
comparisons between them.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from formalgram_cfgzip.compress import Compressor

_BOUNDS = re.compile(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}")


def _rebound(text: str, keep: int, top_of: Callable[[int], int]) -> str:
    """``text`` with every ``{m, n}`` whose ``n`` is over ``keep`` made ``{min(m, t), t}``,
    ``t = top_of(n)``."""

    def rebound(m: re.Match[str]) -> str:
        low, high = int(m.group(1)), int(m.group(2))
        if high <= keep:
            return m.group(0)
        top = top_of(high)
        return f"{{{min(low, top)}, {top}}}"

    return _BOUNDS.sub(rebound, text)


def scale_bounds(text: str, factor: float, keep: int) -> str:
    """``text`` with every ``{m, n}`` whose ``n`` is over ``keep`` scaled by ``factor``.

    Examples
    --------
    >>> scale_bounds('a ::= [0-9]{0, 1000} [a-z]{2, 16}', 0.1, 24)
    'a ::= [0-9]{0, 100} [a-z]{2, 16}'
    """
    return _rebound(text, keep, lambda high: max(1, int(high * factor)))


def cut_bounds(text: str, cap: int) -> str:
    """``text`` with every ``{m, n}`` whose ``n`` is over ``cap`` made ``{min(m, cap), cap}``.

    Examples
    --------
    >>> cut_bounds('a ::= [0-9]{0, 1000} [a-z]{500, 600} "x"{2, 16}', 130)
    'a ::= [0-9]{0, 130} [a-z]{130, 130} "x"{2, 16}'
    """
    return _rebound(text, cap, lambda high: cap)


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two class-id arrays split the tokens alike (the ids themselves may differ).

    Examples
    --------
    >>> same_partition(np.array([0, 1, 0, 2]), np.array([5, 3, 5, 4]))
    True
    >>> same_partition(np.array([0, 1, 0]), np.array([0, 1, 1]))
    False
    """
    if a.shape != b.shape:
        return False
    pairs = np.unique(np.stack([a, b]), axis=1)  # each class of a meets one class of b, and back
    return bool(pairs.shape[1] == np.unique(a).size == np.unique(b).size)


def _schema_text(path: Path) -> str:
    from formalgram_cfgzip.json_schema import from_json_schema

    record = json.loads(path.read_text(encoding="utf-8"))
    return from_json_schema(record["schema"] if isinstance(record, dict) and "schema" in record else record)


def _check_cuts(compressor: Compressor, paths: list[Path], cap: int) -> None:
    """The ``--cut`` table: per schema whose text the cut changes, both compressions' time and
    classes, and whether the partitions are the same; a count of each verdict at the end."""
    print(f"| schema | seconds | cut to {cap}: seconds | classes | cut: classes | same partition |")
    print("|---|---:|---:|---:|---:|---|")
    verdicts = {True: 0, False: 0}
    for path in paths:
        text = _schema_text(path)
        cut = cut_bounds(text, cap)
        if cut == text:
            continue
        start = time.perf_counter()
        full = compressor.compress(text)
        middle = time.perf_counter()
        short = compressor.compress(cut)
        end = time.perf_counter()
        same = same_partition(full.token_class, short.token_class)
        verdicts[same] += 1
        print(
            f"| {path.stem} | {middle - start:.2f} | {end - middle:.2f} | {full.num_classes:,} | "
            f"{short.num_classes:,} | {'yes' if same else '**no**'} |",
            flush=True,
        )
    print(f"\nsame partition on {verdicts[True]}, different on {verdicts[False]} (schemas the cut changes)")


def main(argv: list[str] | None = None) -> None:
    from formalgram_cfgzip import Vocabulary

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("schema", type=Path, nargs="+", help="MaskBench records or JSON Schema files")
    ap.add_argument("--scale", default="1,0.5,0.1", help="comma-separated factors (default 1,0.5,0.1)")
    ap.add_argument("--keep", type=int, default=24, help="bounds up to this are left alone (default 24)")
    ap.add_argument("--cut", type=int, default=0, help="compare partitions with bounds cut to this")
    ap.add_argument("--vocab", default="llama3", help="a built-in vocabulary (default llama3)")
    args = ap.parse_args(argv)
    vocab = Vocabulary.builtin(args.vocab)
    # a compression per request, as the progressive engine's (no domains for the --cut check)
    compressor = Compressor(vocab, cache_size=0, domains=not args.cut, specialize=False, gnf_strategy="fast")
    compressor.compress('root ::= "a"')  # the vocabulary prepared before the first timing
    if args.cut:
        _check_cuts(compressor, args.schema, args.cut)
        return
    text = _schema_text(args.schema[0])
    print("| scale | bounds (sum) | seconds | GNF | search setup | search | domains | work | classes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for factor in (float(f) for f in args.scale.split(",")):
        scaled = scale_bounds(text, factor, args.keep)
        total = sum(int(m.group(2)) for m in _BOUNDS.finditer(scaled))
        start = time.perf_counter()
        classes = compressor.compress(scaled)
        seconds = time.perf_counter() - start
        st = classes.stats
        print(
            f"| {factor:g} | {total:,} | {seconds:.2f} | {st['gnf_seconds']:.2f} | "
            f"{st['search_setup_seconds']:.2f} | {st['search_seconds']:.2f} | "
            f"{st.get('domain_seconds', 0.0):.2f} | {st['work']:,.0f} | {classes.num_classes:,} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
