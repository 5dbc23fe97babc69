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
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

_BOUNDS = re.compile(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}")


def scale_bounds(text: str, factor: float, keep: int) -> str:
    """``text`` with every ``{m, n}`` whose ``n`` is over ``keep`` scaled by ``factor``.

    Examples
    --------
    >>> scale_bounds('a ::= [0-9]{0, 1000} [a-z]{2, 16}', 0.1, 24)
    'a ::= [0-9]{0, 100} [a-z]{2, 16}'
    """

    def scaled(m: re.Match[str]) -> str:
        low, high = int(m.group(1)), int(m.group(2))
        if high <= keep:
            return m.group(0)
        top = max(1, int(high * factor))
        return f"{{{min(low, top)}, {top}}}"

    return _BOUNDS.sub(scaled, text)


def main(argv: list[str] | None = None) -> None:
    from formalgram_cfgzip import Vocabulary
    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.json_schema import from_json_schema

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("schema", type=Path, help="a MaskBench record or a JSON Schema file")
    ap.add_argument("--scale", default="1,0.5,0.1", help="comma-separated factors (default 1,0.5,0.1)")
    ap.add_argument("--keep", type=int, default=24, help="bounds up to this are left alone (default 24)")
    ap.add_argument("--vocab", default="llama3", help="a built-in vocabulary (default llama3)")
    args = ap.parse_args(argv)
    record = json.loads(args.schema.read_text(encoding="utf-8"))
    schema = record["schema"] if isinstance(record, dict) and "schema" in record else record
    text = from_json_schema(schema)
    compressor = Compressor(
        Vocabulary.builtin(args.vocab), cache_size=0, domains=True, specialize=False, gnf_strategy="fast"
    )
    compressor.compress('root ::= "a"')  # the vocabulary prepared before the first timing
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
