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
  per-row bookkeeping and calls one :class:`RequestGrammarProcessor` per request that sets
  ``SamplingParams(extra_args={"formalgram_grammar": <key>})``.

Usage with vLLM (not a dependency of this package)::

    compiled = {"arith": engines.compile_grammar(classes, grammar_text)}
    Adapter = vllm_adapter_class(compiled)
    llm = LLM(model=..., logits_processors=[Adapter])
    llm.generate(prompts, SamplingParams(extra_args={"formalgram_grammar": "arith"}))

Both are tested without vLLM, the adapter class against a stand-in for vLLM's
``AdapterLogitsProcessor`` (``tests/test_integrations.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from formalgram_cfgzip.errors import EngineError, GrammarViolation
from formalgram_cfgzip.expand import apply_token_bitmask_inplace

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.base import CompiledGrammar

__all__ = ["EXTRA_ARG", "RequestGrammarProcessor", "vllm_adapter_class"]

EXTRA_ARG = "formalgram_grammar"


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


def vllm_adapter_class(compiled: Mapping[str, CompiledGrammar]) -> type:
    """A vLLM v1 ``AdapterLogitsProcessor`` subclass serving the given grammars by key.

    Requests opt in with ``SamplingParams(extra_args={"formalgram_grammar": key})``; other
    requests are left alone.

    Parameters
    ----------
    compiled : mapping of str to CompiledGrammar
        The grammars requests may name, by key.

    Returns
    -------
    type
        The class to pass to ``LLM(..., logits_processors=[...])``.

    Raises
    ------
    EngineError
        If vLLM is not installed (or has no ``AdapterLogitsProcessor``).  The class's
        ``validate_params`` raises it too (a ``ValueError``, as vLLM expects) for a key
        that is not in ``compiled``.

    Notes
    -----
    vLLM keeps the rows' bookkeeping and makes one :class:`RequestGrammarProcessor` per
    opting request; all requests for one key share its compiled grammar, so the grammar
    and its expander per device are built once, not per request.
    """
    try:
        from vllm.v1.sample.logits_processor import AdapterLogitsProcessor
    except ImportError as exc:
        raise EngineError("vllm_adapter_class needs vLLM >= 0.10 (vllm.v1.sample.logits_processor)") from exc
    table = dict(compiled)

    class FormalgramAdapter(AdapterLogitsProcessor):  # type: ignore[misc]
        @classmethod
        def validate_params(cls, params: Any) -> None:
            key = (getattr(params, "extra_args", None) or {}).get(EXTRA_ARG)
            if key is not None and key not in table:
                raise EngineError(f"unknown grammar {key!r}; known: {', '.join(sorted(table))}")

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> RequestGrammarProcessor | None:
            key = (getattr(params, "extra_args", None) or {}).get(EXTRA_ARG)
            return None if key is None else RequestGrammarProcessor(table[key])

    return FormalgramAdapter
