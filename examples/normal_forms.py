"""Grammar research: normal forms of a real grammar and PDA simulation.

Run from the repository root: ``python examples/normal_forms.py [GRAMMAR]`` (default: the
built-in C-like demo grammar).  Prints the size of every normal form, checks each against
the Earley oracle on sampled strings and their one-byte mutations, and runs the GNF's PDA.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import formalgram as fg
from formalgram_cfgzip.sources import builtin_grammar_text


def main() -> None:
    text = Path(sys.argv[1]).read_text("utf-8") if len(sys.argv) > 1 else builtin_grammar_text("minic")
    g = fg.parse_gbnf(text)
    print(f"grammar: {g.stats()}")
    unused = ", ".join(g.names[i] for i in sorted(fg.unreachable(g))) or "none"
    print(f"unreachable rules: {unused}; nullable: {len(fg.nullable(g))} nonterminals")

    steps = [
        ("remove_useless", fg.remove_useless),
        ("remove_epsilon", fg.remove_epsilon),
        ("remove_unit", fg.remove_unit),
        ("to_gnf", fg.to_gnf),
    ]
    samples = fg.sample(g, 20, seed=1, max_len=120)
    rng = random.Random(0)
    mutants = []
    for s in samples:
        if s:
            i = rng.randrange(len(s))
            mutants.append(s[:i] + bytes([rng.randrange(32, 127)]) + s[i + 1 :])
    current = g
    for name, transform in steps:
        t0 = time.perf_counter()
        current = transform(current)
        dt = time.perf_counter() - t0
        agree = all(fg.accepts(current, s) == fg.accepts(g, s) for s in samples + mutants)
        print(
            f"{name:<15} {current.stats()['productions']:>6} rules  {dt * 1e3:8.1f} ms  agrees with Earley: {agree}"
        )
    gnf = current
    assert fg.is_gnf(gnf)

    pda = fg.PDA.from_gnf(gnf)
    adj = fg.stack_adjacency(gnf)
    print(f"PDA: {len(gnf.names)} stack symbols, {adj.number_of_edges()} stack-adjacency pairs")
    member = samples[0]
    print(f"sample member ({len(member)} bytes): {member[:60]!r}...")
    print(
        f"  PDA accepts: {pda.accepts(member)}; every prefix viable: "
        f"{all(pda.is_prefix(member[:k]) for k in range(len(member) + 1))}"
    )
    broken = member + b"\x00"
    print(f"  with a NUL byte appended: accepts={pda.accepts(broken)} is_prefix={pda.is_prefix(broken)}")


if __name__ == "__main__":
    main()
