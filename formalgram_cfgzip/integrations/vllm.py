"""vLLM's logits-processor interfaces over a compiled grammar (per request and batch level).

vLLM has had two shapes of logits processor:

* **per request** (vLLM v0 ``SamplingParams.logits_processors``, and in v1 through
  ``vllm.v1.sample.logits_processor.AdapterLogitsProcessor``): a callable
  ``(output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor`` called once per
  decoding step with the request's generated tokens so far and its 1-D logits row.
  :class:`RequestGrammarProcessor` is such a callable: it advances its matcher over the new
  tokens (rolling back when the list got shorter, e.g. after preemption and recompute),
  fills the class mask and expands it onto the logits' device with the compiled grammar's
  expander for that device (one per grammar and device, shared by every request).
* **batch level** (v1 ``LogitsProcessor`` subclasses with ``update_state(batch_update)`` /
  ``apply(logits)``): rows come and go.  The adapter class returned by
  :func:`vllm_adapter_class` subclasses ``AdapterLogitsProcessor`` so vLLM keeps the
  per-row bookkeeping and calls one :class:`RequestGrammarProcessor` per request that names
  a grammar in ``SamplingParams(extra_args=...)``: ``{"formalgram_grammar": <key>}`` for one
  of the grammars compiled in advance, or, with a
  :class:`~formalgram_cfgzip.integrations.request_grammars.RequestCompiler`, the grammar
  itself (:data:`REQUEST_ARGS`): ``{"formalgram_json": <schema>}``, ``"formalgram_ebnf"``,
  ``"formalgram_lark"`` or ``"formalgram_regex"``, compiled on the first request that
  carries it.

vLLM v1 has no registry of structured-output backends (they are chosen by an if/elif inside
vLLM), and a request with ``structured_outputs`` (or the server's ``response_format`` /
``guided_json``) is always compiled by vLLM's own backend as well, so ``extra_args`` is the
route that reaches this processor without patching vLLM.

Usage with vLLM (not a dependency of this package)::

    compiled = {"arith": engines.compile_grammar(classes, grammar_text)}
    Adapter = vllm_adapter_class(compiled, compiler=RequestCompiler(vocab))
    llm = LLM(model=..., logits_processors=[Adapter])
    llm.generate(prompts, SamplingParams(extra_args={"formalgram_grammar": "arith"}))
    llm.generate(prompts, SamplingParams(extra_args={"formalgram_json": schema}))

The class is made in the calling process: give it to an ``LLM`` whose engine runs there too
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), or define it at module level and pass its qualified
name.  ``tests/test_vllm.py`` runs it inside vLLM's own ``LLM.generate`` when vLLM is
installed; ``tests/test_integrations.py`` checks the bookkeeping without vLLM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from formalgram.errors import FormalgramError
from formalgram_cfgzip.errors import EngineError, GrammarViolation
from formalgram_cfgzip.expand import apply_token_bitmask_inplace

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.base import CompiledGrammar
    from formalgram_cfgzip.integrations.request_grammars import RequestCompiler

__all__ = ["EXTRA_ARG", "REQUEST_ARGS", "RequestGrammarProcessor", "request_grammar", "vllm_adapter_class"]

EXTRA_ARG = "formalgram_grammar"
#: ``extra_args`` keys that carry a request's own grammar, and the kind each is
#: (:func:`~formalgram_cfgzip.integrations.request_grammars.grammar_text_for`).
REQUEST_ARGS = {
    "formalgram_json": "json",
    "formalgram_ebnf": "ebnf",
    "formalgram_lark": "lark",
    "formalgram_regex": "regex",
}


class RequestGrammarProcessor:
    """Per-request logits processor ``(output_token_ids, logits) -> logits``.

    Parameters
    ----------
    compiled : CompiledGrammar
        Compressed or full-vocabulary grammar (XGrammar or llguidance).

    Raises
    ------
    GrammarViolation
        (on a call) if a generated token is not allowed by the grammar.

    Notes
    -----
    Construction makes one matcher and two one-row bitmasks (no expander: the compiled
    grammar's is shared).  A call costs one accept per new token (one rollback when the
    list got shorter), one mask fill and one expansion on the logits' device.

    Examples
    --------
    >>> import torch
    >>> from formalgram_cfgzip import Vocabulary, compress, engines
    >>> vocab = Vocabulary([b"a", b"b", b"</s>"], special_ids=[2], stop_ids=[2])
    >>> text = 'root ::= "a" "b"'
    >>> compiled = engines.compile_grammar(compress(text, vocab, progress=False), text)
    >>> processor = RequestGrammarProcessor(compiled)
    >>> processor([0], torch.zeros(3)).tolist()  # after "a", only "b"
    [-inf, 0.0, -inf]
    >>> processor([0, 1], torch.zeros(3)).tolist()  # after "ab", only the stop token
    [-inf, -inf, 0.0]
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self.matcher = compiled.matcher()
        self._seen: list[int] = []
        self._class_mask = compiled.allocate_class_bitmask(1)
        self._token_mask = compiled.allocate_token_bitmask(1)

    def _sync(self, output_token_ids: Sequence[int]) -> None:
        seen = self._seen
        common = 0
        limit = min(len(seen), len(output_token_ids))
        while common < limit and seen[common] == output_token_ids[common]:
            common += 1
        if common < len(seen):
            self.matcher.rollback(len(seen) - common)
            del seen[common:]
        for tok in output_token_ids[common:]:
            t = int(tok)
            if self.matcher.is_terminated():
                break
            if not self.matcher.accept_token(t):
                raise GrammarViolation(f"token {t} is not allowed by the grammar after {len(seen)} tokens")
            seen.append(t)

    def __call__(self, output_token_ids: Sequence[int], logits: Any) -> Any:
        import torch

        self._sync(output_token_ids)
        if self.matcher.is_terminated():
            return logits
        row = logits.unsqueeze(0) if logits.dim() == 1 else logits
        c = self.compiled
        if c.compressed:
            self.matcher.fill_next_class_bitmask(self._class_mask)
            c.mask_logits(row, torch.from_numpy(self._class_mask))
        else:
            self.matcher.fill_next_token_bitmask(self._token_mask)
            apply_token_bitmask_inplace(row, torch.from_numpy(self._token_mask).to(row.device))
        return logits


def request_grammar(
    extra_args: Mapping[str, Any] | None,
    compiled: Mapping[str, CompiledGrammar],
    compiler: RequestCompiler | None,
) -> CompiledGrammar | None:
    """The grammar a request's ``extra_args`` name (``None``: the request has none).

    Parameters
    ----------
    extra_args : mapping or None
        ``SamplingParams.extra_args``.
    compiled : mapping of str to CompiledGrammar
        The grammars that ``{"formalgram_grammar": key}`` may name.
    compiler : RequestCompiler or None
        Compiles the grammars given in full (:data:`REQUEST_ARGS`); ``None``: refused.

    Returns
    -------
    CompiledGrammar or None

    Raises
    ------
    EngineError
        For an unknown key, more than one grammar, a grammar in full without a compiler, or a
        value of the wrong type.
    FormalgramError
        If the grammar does not parse or compile.

    Notes
    -----
    A key costs a lookup; a grammar in full :meth:`RequestCompiler.compile` (a lookup after
    its first request).

    Examples
    --------
    >>> request_grammar({"temperature_hint": 1}, {}, None) is None
    True
    >>> request_grammar({"formalgram_regex": "a+"}, {}, None)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.EngineError: formalgram_regex needs the adapter to have a RequestCompiler
    """
    args = extra_args or {}
    named = [k for k in (EXTRA_ARG, *REQUEST_ARGS) if args.get(k) is not None]
    if not named:
        return None
    if len(named) > 1:
        raise EngineError(f"a request names one grammar, not {len(named)} ({', '.join(named)})")
    arg = named[0]
    value = args[arg]
    if arg == EXTRA_ARG:
        if not isinstance(value, str) or value not in compiled:
            raise EngineError(f"unknown grammar {value!r}; known: {', '.join(sorted(compiled))}")
        return compiled[value]
    if compiler is None:
        raise EngineError(f"{arg} needs the adapter to have a RequestCompiler")
    if REQUEST_ARGS[arg] == "json" and not isinstance(value, str):
        value = json.dumps(value)
    if not isinstance(value, str):
        raise EngineError(f"{arg} must be a string, not {type(value).__name__}")
    return compiler.compile(REQUEST_ARGS[arg], value)


def vllm_adapter_class(
    compiled: Mapping[str, CompiledGrammar] | None = None, *, compiler: RequestCompiler | None = None
) -> type:
    """A vLLM v1 ``AdapterLogitsProcessor`` subclass serving grammars named in ``extra_args``.

    Requests opt in with ``SamplingParams(extra_args={"formalgram_grammar": key})``, or with
    their grammar in full (:data:`REQUEST_ARGS`, given a ``compiler``); other requests are
    left alone.

    Parameters
    ----------
    compiled : mapping of str to CompiledGrammar, optional
        The grammars requests may name, by key.
    compiler : RequestCompiler or None, keyword-only
        Compiles the grammars that requests give in full (``None``: such requests are
        refused).

    Returns
    -------
    type
        The class to pass to ``LLM(..., logits_processors=[...])``.

    Raises
    ------
    EngineError
        If vLLM is not installed (or has no ``AdapterLogitsProcessor``).  The class's
        ``validate_params`` raises it too (a ``ValueError``, as vLLM expects) for what
        :func:`request_grammar` refuses, so that vLLM rejects the request with the message.

    Notes
    -----
    vLLM keeps the rows' bookkeeping and makes one :class:`RequestGrammarProcessor` per
    opting request; all requests for one grammar share its compiled grammar, so the grammar
    and its expander per device are built once, not per request.  ``validate_params`` compiles
    a grammar given in full, so a bad one fails its request before it is scheduled.
    """
    try:
        from vllm.v1.sample.logits_processor import AdapterLogitsProcessor
    except ImportError as exc:
        raise EngineError("vllm_adapter_class needs vLLM >= 0.10 (vllm.v1.sample.logits_processor)") from exc
    table = dict(compiled or {})

    class FormalgramAdapter(AdapterLogitsProcessor):  # type: ignore[misc]
        @classmethod
        def validate_params(cls, params: Any) -> None:
            try:
                request_grammar(getattr(params, "extra_args", None), table, compiler)
            except FormalgramError as exc:
                raise EngineError(f"{type(exc).__name__}: {exc}") from exc

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> RequestGrammarProcessor | None:
            grammar = request_grammar(getattr(params, "extra_args", None), table, compiler)
            return None if grammar is None else RequestGrammarProcessor(grammar)

    return FormalgramAdapter
