"""Grammar engines over token classes: compile a grammar with XGrammar or llguidance over
class representatives (:func:`compile_grammar`) or over the full vocabulary
(:func:`compile_full`, the reference), or with the native engine, which reads class masks
off the classes' displacements (``engine="native"``, classes only), by engine name.

No engine is imported until used: ``formalgram_cfgzip.engines.xgrammar``,
``formalgram_cfgzip.engines.llguidance`` and ``formalgram_cfgzip.engines.native`` are
loaded on first attribute access (or an explicit import).  The compiled grammar and its
threading contract are in :mod:`formalgram_cfgzip.engines.base`, the matcher protocol in
:mod:`formalgram_cfgzip.engines.matcher`, the special-token policy in
:mod:`formalgram_cfgzip.engines.tokens` and the errors in :mod:`formalgram_cfgzip.errors`
(``engines.base`` re-exports them all).

Examples
--------
>>> from formalgram_cfgzip import Vocabulary, compress, engines
>>> vocab = Vocabulary([b"[", b"]", b"[]", b"x", b"</s>"], special_ids=[4], stop_ids=[4])
>>> text = 'root ::= "[" "x"* "]"'
>>> compiled = engines.compile_grammar(compress(text, vocab, progress=False), text)
>>> m = compiled.matcher()
>>> m.accept_token(0), m.accept_token(2)
(True, False)
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Literal

from formalgram_cfgzip.engines.base import CompiledGrammar, Syntax
from formalgram_cfgzip.engines.matcher import EngineMatcher, Matcher
from formalgram_cfgzip.errors import (
    BatchIndexError,
    ClassesMismatchError,
    EngineError,
    GrammarViolation,
    TokenIdError,
)

if TYPE_CHECKING:
    from llguidance import LLParserLimits

    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.engines import llguidance, native, xgrammar
    from formalgram_cfgzip.engines.native import NativeTables
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "ENGINES",
    "BatchIndexError",
    "ClassesMismatchError",
    "CompiledGrammar",
    "EngineError",
    "EngineMatcher",
    "EngineName",
    "GrammarViolation",
    "Matcher",
    "TokenIdError",
    "compile_full",
    "compile_grammar",
    "llguidance",
    "native",
    "xgrammar",
]

#: Engine names accepted by :func:`compile_grammar` and :func:`compile_full`.
EngineName = Literal["xgrammar", "llguidance", "native"]
ENGINES: tuple[EngineName, ...] = ("xgrammar", "llguidance", "native")


def __getattr__(name: str) -> Any:
    if name in ENGINES:
        return importlib.import_module(f"formalgram_cfgzip.engines.{name}")
    raise AttributeError(f"module 'formalgram_cfgzip.engines' has no attribute {name!r}")


def _backend(
    engine: object,
    max_threads: int | None,
    syntax: Syntax,
    limits: LLParserLimits | None,
    native: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The backend module for ``engine`` and the options only that backend takes
    (``native``: the native engine's options that were given, not ``None``)."""
    native = {k: v for k, v in (native or {}).items() if v is not None}
    if native and engine != "native":
        raise EngineError(f"{' and '.join(sorted(native))} apply to the native engine only")
    if engine == "native":
        if syntax != "gbnf":
            raise EngineError(f"the native engine reads GBNF only, not syntax={syntax!r}")
        if limits is not None:
            raise EngineError("limits (llguidance's parser limits) apply to the llguidance engine only")
        extra: dict[str, Any] = {"max_threads": max_threads, **native}
    elif engine == "xgrammar":
        if syntax != "gbnf":
            raise EngineError(f"the xgrammar engine reads GBNF only, not syntax={syntax!r}")
        if limits is not None:
            raise EngineError("limits (llguidance's parser limits) apply to the llguidance engine only")
        extra = {} if max_threads is None else {"max_threads": max_threads}
    elif engine == "llguidance":
        extra = {"max_threads": max_threads, "syntax": syntax, "limits": limits}
    else:
        raise EngineError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return importlib.import_module(f"formalgram_cfgzip.engines.{engine}"), extra


def compile_grammar(
    classes: TokenClasses,
    grammar_text: str,
    *,
    engine: EngineName = "xgrammar",
    root: str = "root",
    vocab: Vocabulary | None = None,
    check: bool = True,
    max_threads: int | None = None,
    syntax: Syntax = "gbnf",
    limits: LLParserLimits | None = None,
    tables: NativeTables | str | os.PathLike[str] | None = None,
    kernel: Literal["auto", "c", "python"] | None = None,
    max_rollback_tokens: int | None = None,
) -> CompiledGrammar:
    """Compile ``grammar_text`` with ``engine`` over the representatives of ``classes``.

    Parameters
    ----------
    classes : TokenClasses
        Classes computed by :func:`formalgram_cfgzip.compress` for this grammar.
    grammar_text : str
        The grammar text the classes were computed from.
    engine : {"xgrammar", "llguidance", "native"}, keyword-only
        Which engine runs the grammar.
    root : str, keyword-only
        Start rule.
    vocab : Vocabulary or None, keyword-only
        The vocabulary the caller decodes with; checked against ``classes.vocab``.
    check : bool, keyword-only
        Validate fingerprints and the special-token policy
        (:func:`~formalgram_cfgzip.engines.tokens.check_classes`); ``False`` skips it.
    max_threads : int or None, keyword-only
        Threads of compilation and batch fills (``None``: the engine's default, 1 for
        XGrammar, most of the cores for llguidance's batch fills).
    syntax : {"gbnf", "lark"}, keyword-only
        How ``grammar_text`` is written; Lark is read by llguidance only.
    limits : llguidance.LLParserLimits or None, keyword-only
        llguidance's parser limits (llguidance only).
    tables : NativeTables, path or None, keyword-only
        The native engine's tables (native only): a directory is loaded (or built and
        saved there); ``None`` uses the classes' own cache directory when they were loaded
        from one (``classes.cache_dir``), else builds them; see
        :func:`formalgram_cfgzip.engines.native.matcher.resolve_tables`.
    kernel : {"auto", "c", "python"} or None, keyword-only
        The native engine's kernel (native only; ``None``: ``"auto"``, the C kernel when built).
    max_rollback_tokens : int or None, keyword-only
        Native only: how far back a matcher can roll back; bounds its memory on long texts
        (``None``: to the start).

    Returns
    -------
    CompiledGrammar

    Raises
    ------
    TypeError
        On an unknown keyword (as for any Python function).
    EngineError
        On an unknown engine, an option of the wrong type or value or for another
        engine, a grammar the engine rejects, or an engine that is not installed.
    ClassesMismatchError
        With ``check``: classes of another vocabulary or grammar, or breaking the policy.
    CacheError
        A native tables directory that is corrupted or for other classes.

    Notes
    -----
    The engine's compilation over ``num_classes`` tokens plus O(logit_width) for the
    expander; see :func:`formalgram_cfgzip.engines.xgrammar.compile_grammar`,
    :func:`formalgram_cfgzip.engines.llguidance.compile_grammar` and
    :func:`formalgram_cfgzip.engines.native.matcher.compile_grammar`.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary, compress
    >>> vocab = Vocabulary([b"[", b"]", b"[]", b"x", b"</s>"], special_ids=[4], stop_ids=[4])
    >>> text = 'root ::= "[" "x"* "]"'
    >>> m = compile_grammar(compress(text, vocab, progress=False), text, engine="native").matcher()
    >>> m.accept_token(0), m.accept_token(3), m.accept_token(2), m.accept_token(1), m.accept_token(4)
    (True, True, False, True, True)
    """
    native = {"tables": tables, "kernel": kernel, "max_rollback_tokens": max_rollback_tokens}
    module, extra = _backend(engine, max_threads, syntax, limits, native)
    result: CompiledGrammar = module.compile_grammar(
        classes, grammar_text, root=root, vocab=vocab, check=check, **extra
    )
    return result


def compile_full(
    vocab: Vocabulary,
    grammar_text: str,
    *,
    engine: EngineName = "xgrammar",
    root: str = "root",
    max_threads: int | None = None,
    syntax: Syntax = "gbnf",
    limits: LLParserLimits | None = None,
) -> CompiledGrammar:
    """The uncompressed reference: ``engine`` over every token of ``vocab``, same protocol.

    Parameters
    ----------
    vocab : Vocabulary
    grammar_text : str
    engine, root, max_threads, syntax, limits : keyword-only
        As for :func:`compile_grammar` (the native engine has no full-vocabulary form).

    Returns
    -------
    CompiledGrammar

    Raises
    ------
    TypeError
        On an unknown keyword.
    EngineError
        As for :func:`compile_grammar`; always for ``engine="native"``.

    Notes
    -----
    The engine's compilation over ``logit_width`` tokens (its tokenizer is built once per
    vocabulary and shared).

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> full = compile_full(Vocabulary([b"[", b"]", b"x"]), 'root ::= "[" "x"* "]"', engine="llguidance")
    >>> full.compressed, full.engine_size  # 3 tokens and llguidance's dummy stop token
    (False, 4)
    """
    module, extra = _backend(engine, max_threads, syntax, limits)
    result: CompiledGrammar = module.compile_full(vocab, grammar_text, root=root, **extra)
    return result
