"""Grammar texts with random edits: the fuzz inputs of the parsers' error tests."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


@st.composite
def mutated_texts(draw: st.DrawFn, texts: Sequence[str], pieces: Sequence[str]) -> str:
    """One of ``texts`` with 1-4 random edits: a piece inserted, a character deleted, or a
    character replaced by a piece (pieces drawn from ``pieces``)."""
    text = draw(st.sampled_from(list(texts)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        op = draw(st.integers(0, 2))
        piece = draw(st.sampled_from(list(pieces)))
        if op == 0:
            text = text[:i] + piece + text[i:]
        elif op == 1:
            text = text[:i] + text[i + 1 :]
        else:
            text = text[:i] + piece + text[i + 1 :]
    return text
