"""SGLang's grammar backend over compressed grammars: the classes' engine behind ``--grammar-backend``.

SGLang picks a grammar backend by name (``--grammar-backend NAME``, or
``Engine(grammar_backend=NAME)``) from a registry that plugins fill
(``sglang.srt.constrained.base_grammar_backend.register_grammar_backend``).  This package
declares the plugin ``formalgram`` in the ``sglang.srt.plugins`` entry-point group, which
SGLang loads in each of its processes; :func:`register` adds two names:

* ``formalgram``: the native engine over the token classes (the default);
* ``formalgram-xgrammar``: XGrammar over the class representatives.

Both give every request's full-vocabulary mask, bit for bit the mask of XGrammar over the
full vocabulary for the same grammar text.  The backend (:class:`FormalgramBackend`) compiles
what SGLang's requests carry with a
:class:`~formalgram_cfgzip.integrations.request_grammars.RequestCompiler` (one compressor per
tokenizer, shared by the process, with an on-disk cache):

* ``json_schema``: XGrammar's own grammar for the schema; ``"$$ANY$$"`` is any JSON value;
* ``ebnf``: GBNF / XGrammar EBNF, or a Lark grammar (a text without ``::=``; SGLang has no
  request field of its own for Lark);
* ``regex``: :func:`formalgram.parse_regex` with XGrammar's ASCII reading of ``\\d \\w \\s``;
* ``structural_tag``: not supported.

A grammar that does not parse or compile (or a structural tag) becomes SGLang's
``InvalidGrammarObject`` with the message, so the request fails with it and the scheduler goes
on.

The mask travels in XGrammar's layout (int32 rows of ``ceil(vocab_size / 32)`` words, all bits
set for rows that no grammar fills): the class mask is expanded on the CPU by the compiled
grammar's expander, and applied with XGrammar's own kernel for that layout.  That layout is
what SGLang's speculative decoding reads bit by bit (``sglang.srt.speculative.spec_utils``),
and one batch mixes requests of different grammars, each with its own class map.

SGLang is not a dependency: the classes subclass SGLang's ``BaseGrammarObject`` and
``BaseGrammarBackend`` when it is installed, and plain ``object`` otherwise, so that the module
imports, and its matchers can be used, without it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from formalgram.errors import FormalgramError
from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.expand import apply_token_bitmask_inplace
from formalgram_cfgzip.integrations.request_grammars import RequestCompiler

if TYPE_CHECKING:
    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.engines import EngineName
    from formalgram_cfgzip.engines.base import CompiledGrammar
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["BACKEND_NAMES", "FormalgramBackend", "FormalgramGrammar", "create_backend", "register"]

logger = logging.getLogger(__name__)

#: The names :func:`register` gives SGLang, and the engine each runs over the classes.
BACKEND_NAMES: dict[str, EngineName] = {"formalgram": "native", "formalgram-xgrammar": "xgrammar"}

if TYPE_CHECKING:
    _GrammarBase = object
    _BackendBase = object
else:
    try:  # subclass SGLang's real base classes when SGLang is installed
        from sglang.srt.constrained.base_grammar_backend import BaseGrammarBackend as _BackendBase
        from sglang.srt.constrained.base_grammar_backend import BaseGrammarObject as _GrammarBase
    except ImportError:  # pragma: no cover - depends on the environment
        _GrammarBase = object
        _BackendBase = object


def _apply(logits: Any, vocab_mask: Any) -> None:
    """Mask ``logits`` in place: XGrammar's kernel for its own layout when XGrammar is
    installed (a C++ loop on the CPU, a GPU kernel on CUDA), else
    :func:`~formalgram_cfgzip.expand.apply_token_bitmask_inplace` (torch operations)."""
    try:
        from xgrammar import apply_token_bitmask_inplace as xgrammar_apply
    except ImportError:  # pragma: no cover - depends on the environment
        apply_token_bitmask_inplace(logits, vocab_mask)
        return
    xgrammar_apply(logits, vocab_mask.to(logits.device, non_blocking=True))


def _invalid(message: str) -> Any:
    """SGLang's ``InvalidGrammarObject`` carrying ``message`` (the request fails with it).

    Raises
    ------
    EngineError
        With ``message``, when SGLang is not installed.
    """
    try:
        from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject
    except ImportError:
        raise EngineError(message) from None
    return InvalidGrammarObject(message)


class FormalgramGrammar(_GrammarBase):
    """One request's grammar state, as SGLang's ``BaseGrammarObject``.

    Parameters
    ----------
    compiled : CompiledGrammar
        The request's compiled grammar (shared by every request of the same grammar).
    key_string : str
        The request's grammar key (for messages).

    Raises
    ------
    ValueError
        (from :meth:`accept_token`) for a token the grammar does not allow; SGLang then aborts
        that request.

    Notes
    -----
    A token costs one matcher step, a mask one fill of the classes' engine and one expansion
    into the row (:meth:`fill_vocab_mask`); a batch of rows of one grammar is filled with one
    batch call (:meth:`fill_vocab_mask_batched`).

    Examples
    --------
    >>> import torch
    >>> from formalgram_cfgzip import Vocabulary, compress, engines
    >>> vocab = Vocabulary([b"a", b"b", b"</s>"], special_ids=[2], stop_ids=[2])
    >>> text = 'root ::= "a" "b"'
    >>> g = FormalgramGrammar(engines.compile_grammar(compress(text, vocab, progress=False), text))
    >>> mask = g.allocate_vocab_mask(3, 1, "cpu")
    >>> g.accept_token(0); g.fill_vocab_mask(mask, 0)
    >>> logits = torch.zeros(1, 3); FormalgramGrammar.apply_vocab_mask(logits, mask); logits.tolist()
    [[-inf, 0.0, -inf]]
    >>> g.accept_token(1); g.accept_token(2); g.is_terminated()
    True
    >>> g.rollback(1); g.is_terminated()
    False
    """

    def __init__(self, compiled: CompiledGrammar, key_string: str = "") -> None:
        super().__init__()
        self._finished = False
        self.grammar_stats = None
        self.current_token: int | None = None
        self.compiled = compiled
        self.matcher = compiled.matcher()
        self.key_string = key_string
        self.accepted = 0

    def accept_token(self, token: int) -> None:
        """Advance by one token (nothing once terminated).

        Raises
        ------
        ValueError
            If the grammar does not allow ``token`` here (the state is unchanged).
        """
        if self.matcher.is_terminated():
            return
        self.current_token = int(token)
        if not self.matcher.accept_token(int(token)):
            raise ValueError(
                f"token {token} is not allowed by the grammar after {self.accepted} tokens "
                f"(grammar: {self.key_string[:200]!r})"
            )
        self.accepted += 1

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens (a stop token included)."""
        if k <= 0:
            return
        self.matcher.rollback(k)
        self.accepted -= k

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
        """``batch_size`` rows of ``ceil(vocab_size / 32)`` int32 words, every bit set, on the CPU."""
        import torch

        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)

    def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
        """Write this request's full-vocabulary mask into row ``idx``."""
        self.matcher.fill_next_token_bitmask(_rows(vocab_mask, self.compiled), idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: Sequence[Any], vocab_mask: Any) -> None:
        """Fill SGLang's ``GrammarRow`` entries: one batch call per compiled grammar."""
        groups: dict[int, tuple[CompiledGrammar, list[Any], list[int]]] = {}
        for entry in entries:
            grammar = entry.grammar
            if not isinstance(grammar, FormalgramGrammar):
                grammar.fill_vocab_mask(vocab_mask, entry.row)
                continue
            compiled = grammar.compiled
            group = groups.setdefault(id(compiled), (compiled, [], []))
            group[1].append(grammar.matcher)
            group[2].append(int(entry.row))
        for compiled, matchers, rows in groups.values():
            compiled.fill_next_token_bitmask_batch(matchers, _rows(vocab_mask, compiled), indices=rows)

    @staticmethod
    def reset_vocab_mask(vocab_mask: Any) -> None:
        """Set every bit (no constraint)."""
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        """The mask on the logits' device."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        """Set the logits of the tokens whose bit is 0 to ``-inf``, in place, on any device."""
        _apply(logits, vocab_mask)

    def copy(self) -> FormalgramGrammar:
        """A fresh state of the same compiled grammar (SGLang copies its cached grammars)."""
        return FormalgramGrammar(self.compiled, self.key_string)

    def try_jump_forward(self, tokenizer: Any) -> None:
        """No jump-forward: SGLang then decodes token by token."""
        return None

    def __repr__(self) -> str:
        return f"FormalgramGrammar(key={self.key_string[:60]!r}, accepted={self.accepted})"


def _rows(vocab_mask: Any, compiled: CompiledGrammar) -> Any:
    """The first ``token_words`` columns of SGLang's mask: the compiled grammar's row width.

    SGLang sizes the mask for the model's ``vocab_size``, the grammar for its vocabulary's
    logit width; they are equal when the vocabulary was read from the model's tokenizer with
    the model's width (:func:`create_backend`).
    """
    words = compiled.token_words
    if vocab_mask.shape[1] == words:
        return vocab_mask
    raise EngineError(
        f"SGLang's mask has {vocab_mask.shape[1]} words per row, the grammar's vocabulary {words} "
        f"({compiled.logit_width} logits): give the backend the model's vocab_size"
    )


class FormalgramBackend(_BackendBase):
    """SGLang's ``BaseGrammarBackend`` over compressed grammars.

    Parameters
    ----------
    vocab : Vocabulary
        The model's vocabulary, its logit width the model's ``vocab_size`` and its stop tokens
        the model's end-of-sequence tokens.
    engine : {"native", "xgrammar"}, keyword-only
        The engine over the classes.
    compressor : Compressor or None, keyword-only
        Compresses the grammars (``None``: the process's
        :func:`~formalgram_cfgzip.integrations.request_grammars.shared_compressor` for
        ``vocab``).
    any_whitespace : bool, keyword-only
        JSON Schemas with free whitespace between elements.

    Attributes
    ----------
    compiler : RequestCompiler
        Compiles the requests' grammars.

    Raises
    ------
    EngineError
        For an unknown engine.

    Notes
    -----
    SGLang calls the ``dispatch_*`` methods on a thread of its scheduler process and caches the
    results per grammar key.  A dispatch costs the grammar's compression (once per grammar and
    vocabulary, then a cache hit in memory or on disk) and the engine's compile over the
    classes; past the compressor's work budget, XGrammar's compile over the full vocabulary.

    Examples
    --------
    >>> import tempfile
    >>> from formalgram_cfgzip import Vocabulary
    >>> from formalgram_cfgzip.integrations.request_grammars import shared_compressor
    >>> vocab = Vocabulary([b"a", b"b", b"ab", b"</s>"], special_ids=[3], stop_ids=[3])
    >>> backend = FormalgramBackend(vocab, compressor=shared_compressor(vocab, tempfile.mkdtemp()))
    >>> g = backend.dispatch_regex("(ab)+")
    >>> g.accept_token(2); g.accept_token(0); g.accept_token(1); g.accept_token(3); g.is_terminated()
    True
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        engine: EngineName = "native",
        compressor: Compressor | None = None,
        any_whitespace: bool = True,
    ) -> None:
        if _BackendBase is not object:
            super().__init__()
        self.compiler = RequestCompiler(
            vocab, engine=engine, compressor=compressor, any_whitespace=any_whitespace
        )

    def _dispatch(self, kind: str, key_string: str) -> Any:
        try:
            return FormalgramGrammar(self.compiler.compile(kind, key_string), key_string)
        except (FormalgramError, ValueError, RuntimeError) as exc:
            logger.error("formalgram: invalid %s grammar: %s", kind, exc)
            return _invalid(f"{type(exc).__name__}: {exc}")

    def dispatch_json(self, key_string: str) -> Any:
        """A JSON Schema (``"$$ANY$$"``: any JSON value)."""
        return self._dispatch("json", key_string)

    def dispatch_ebnf(self, key_string: str) -> Any:
        """GBNF / XGrammar EBNF, or Lark (a text without ``::=``)."""
        return self._dispatch("ebnf", key_string)

    def dispatch_regex(self, key_string: str) -> Any:
        """A regular expression matched as a whole."""
        return self._dispatch("regex", key_string)

    def dispatch_structural_tag(self, key_string: str) -> Any:
        """Not supported: the request fails with SGLang's error for it."""
        return _invalid("the formalgram backend does not support structural tags")

    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any) -> Any:
        """As :meth:`FormalgramGrammar.allocate_vocab_mask`."""
        import torch

        return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        """As :meth:`FormalgramGrammar.move_vocab_mask`."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        """As :meth:`FormalgramGrammar.apply_vocab_mask`."""
        _apply(logits, vocab_mask)


def _vocabulary(tokenizer: Any, vocab_size: int, eos_token_ids: Iterable[int] | None) -> Vocabulary:
    """The vocabulary of SGLang's tokenizer, ``vocab_size`` logits wide, its stops SGLang's."""
    from formalgram_cfgzip.vocabulary import Vocabulary

    stops = sorted({int(i) for i in eos_token_ids or ()})
    if not stops and getattr(tokenizer, "eos_token_id", None) is not None:
        stops = [int(tokenizer.eos_token_id)]
    return Vocabulary.from_transformers(tokenizer, stop_ids=stops, logit_width=int(vocab_size))


def create_backend(
    server_args: Any,
    tokenizer: Any,
    vocab_size: int,
    eos_token_ids: Iterable[int] | None = None,
    *,
    engine: EngineName = "native",
) -> FormalgramBackend:
    """SGLang's backend factory (``init_func(server_args, tokenizer, vocab_size, eos_token_ids)``).

    Parameters
    ----------
    server_args : sglang ServerArgs
        Read for ``constrained_json_disable_any_whitespace`` (``None`` or missing: off).
    tokenizer : transformers tokenizer
        SGLang's tokenizer of the model.
    vocab_size : int
        The model's logit width.
    eos_token_ids : iterable of int or None
        The model's end-of-sequence tokens (the tokenizer's ``eos_token_id`` when empty).
    engine : {"native", "xgrammar"}, keyword-only
        The engine over the classes.

    Returns
    -------
    FormalgramBackend

    Raises
    ------
    VocabularyError
        If the tokenizer's vocabulary cannot be read.

    Notes
    -----
    Reads the tokenizer's vocabulary (O(vocabulary)); the compressor for it is shared by the
    process (:func:`~formalgram_cfgzip.integrations.request_grammars.shared_compressor`).
    """
    strict = bool(getattr(server_args, "constrained_json_disable_any_whitespace", False))
    vocab = _vocabulary(tokenizer, vocab_size, eos_token_ids)
    return FormalgramBackend(vocab, engine=engine, any_whitespace=not strict)


def register() -> None:
    """Register :data:`BACKEND_NAMES` with SGLang (the ``sglang.srt.plugins`` entry point).

    Raises
    ------
    EngineError
        If SGLang is not installed.

    Notes
    -----
    Idempotent; adds the names to the choices of ``--grammar-backend`` as well.
    """
    try:
        from sglang.srt.constrained.base_grammar_backend import register_grammar_backend
    except ImportError as exc:
        raise EngineError("the formalgram grammar backend needs SGLang (pip install sglang)") from exc
    for name, engine in BACKEND_NAMES.items():
        register_grammar_backend(name, functools.partial(create_backend, engine=engine))
    try:
        from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES
    except ImportError:  # pragma: no cover - older SGLang: choices live elsewhere
        return
    GRAMMAR_BACKEND_CHOICES.extend(n for n in BACKEND_NAMES if n not in GRAMMAR_BACKEND_CHOICES)
