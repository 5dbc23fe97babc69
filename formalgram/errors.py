"""Exception hierarchy shared by every formalgram module.

Every error raised on purpose by formalgram derives from :class:`FormalgramError`,
so callers can catch the whole family with one ``except`` clause.
"""

from __future__ import annotations

__all__ = [
    "EmptyLanguageError",
    "FormalgramError",
    "GrammarError",
    "GrammarSyntaxError",
    "GrammarTooLarge",
    "UnsupportedConstruct",
]


class FormalgramError(Exception):
    """Base class of every error raised on purpose by formalgram."""


class GrammarError(FormalgramError, ValueError):
    """A grammar is well formed as text but not as a grammar (undefined rule, bad start)."""


class GrammarSyntaxError(GrammarError):
    """Grammar text that cannot be parsed.

    Attributes
    ----------
    message : str
        What is wrong, without the position.
    line, column : int
        1-based position of the offending character.
    source_line : str
        The text of that line (for the caret display).
    """

    def __init__(self, message: str, line: int, column: int, source_line: str = "") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self._render())

    def _render(self) -> str:
        text = f"line {self.line}, column {self.column}: {self.message}"
        if self.source_line:
            shown = self.source_line.rstrip("\n")
            if len(shown) > 160:
                start = max(0, self.column - 80)
                shown = shown[start : start + 160]
                caret_col = self.column - start
            else:
                caret_col = self.column
            text += "\n    " + shown + "\n    " + " " * max(0, caret_col - 1) + "^"
        return text


class UnsupportedConstruct(GrammarSyntaxError):
    """Syntactically valid grammar text using a construct the byte-level model cannot represent exactly.

    Attributes
    ----------
    construct : str
        Short name of the construct (for example ``"lookahead"``).
    """

    def __init__(self, construct: str, message: str, line: int, column: int, source_line: str = "") -> None:
        self.construct = construct
        super().__init__(f"unsupported construct '{construct}': {message}", line, column, source_line)


class EmptyLanguageError(GrammarError):
    """The grammar generates no string at all (its start symbol is not generating)."""


class GrammarTooLarge(FormalgramError):
    """A transformation or search exceeded its size or memory budget.

    Attributes
    ----------
    what : str
        The operation that gave up.
    limit : int
        The budget that was exceeded.
    """

    def __init__(self, what: str, limit: int, detail: str = "") -> None:
        self.what = what
        self.limit = limit
        msg = f"{what} exceeded its budget of {limit}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)
