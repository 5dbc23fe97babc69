"""Vocabularies, compression of a drawn grammar and an automaton reader shared by the native engine's tests (no tests here)."""

from __future__ import annotations

import random

from hypothesis import assume

from formalgram import EmptyLanguageError, Grammar
from formalgram_cfgzip import TokenClasses, Vocabulary, compress
from formalgram_cfgzip.search.domains import DomainAutomaton


def small_vocab(tokens: list[bytes]) -> Vocabulary:
    """``tokens`` plus a special token and a stop token."""
    n = len(tokens)
    return Vocabulary([*tokens, b"<s>", b"</s>"], special_ids=[n, n + 1], stop_ids=[n + 1])


def compressed_or_rejected(g: Grammar, vocab: Vocabulary) -> TokenClasses:
    """``compress(g, vocab)``; a grammar of the empty language rejects the Hypothesis example."""
    try:
        return compress(g, vocab, progress=False)
    except EmptyLanguageError:
        assume(False)
        raise  # not reached: assume(False) raises


def sample_vocab(n: int, seed: int) -> Vocabulary:
    """``n`` Llama-3 tokens chosen at random (single bytes always included), a special and a stop token."""
    full = Vocabulary.builtin("llama3")
    rng = random.Random(seed)
    text = [t for i, t in enumerate(full.tokens) if t and i not in full.special_ids]
    singles = [t for t in text if len(t) == 1]
    rest = [t for t in text if len(t) > 1]
    return small_vocab(singles + rng.sample(rest, n))


def accepted_words(d: DomainAutomaton, k: int) -> set[tuple[int, ...]]:
    """Every word the domain automaton reads into a state whose output holds class ``k``."""
    out: set[tuple[int, ...]] = set()
    todo: list[tuple[int, tuple[int, ...]]] = [(0, ())]
    while todo:
        s, word = todo.pop()
        o = int(d.out[s])
        if o >= 0 and k in d.set_class[d.set_start[o] : d.set_start[o + 1]].tolist():
            out.add(word)
        for e in range(int(d.edge_start[s]), int(d.edge_start[s + 1])):
            todo.append((int(d.edge_to[e]), (*word, int(d.edge_sym[e]))))
    return out
