"""Plugging a compiled grammar into vLLM's logits-processor interfaces.

vLLM has had two shapes of logits processor:

* **per request** (vLLM v0 ``SamplingParams.logits_processors``, and in v1 through
  ``vllm.v1.sample.logits_processor.AdapterLogitsProcessor``): a callable
  ``(output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor`` called once per
  decoding step with the request's generated tokens so far and its 1-D logits row.
  :class:`RequestGrammarProcessor` is such a callable: it advances its matcher over the new
  tokens (rolling back when the list got shorter, e.g. after preemption and recompute),
  fills the class mask and expands it onto the logits' device.
* **batch level** (v1 ``LogitsProcessor`` subclasses with ``update_state(batch_update)`` /
  ``apply(logits)``): rows come and go.  The adapter class returned by
  :func:`vllm_adapter_class` subclasses ``AdapterLogitsProcessor`` so vLLM keeps the
  per-row bookkeeping and calls one :class:`RequestGrammarProcessor` per request that sets
  ``SamplingParams(extra_args={"formalgram_grammar": <key>})``.

Usage with vLLM (not a dependency of this package)::

    compiled = {"arith": engines.xgrammar.compile(classes, grammar_text)}
    Adapter = vllm_adapter_class(compiled)
    llm = LLM(model=..., logits_processors=[Adapter])
    llm.generate(prompts, SamplingParams(extra_args={"formalgram_grammar": "arith"}))

The per-request callable is tested without vLLM (``tests/test_integrations.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from formalgram_cfgzip.errors import EngineError, GrammarViolation
from formalgram_cfgzip.expand import TorchMaskExpander, apply_token_bitmask_inplace

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
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self.matcher = compiled.matcher()
        self._seen: list[int] = []
        self._expander: TorchMaskExpander | None = None
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
            ex = self._expander
            if ex is None or ex.device != row.device:
                assert c.classes is not None
                ex = TorchMaskExpander(c.classes.token_class, c.engine_size, device=row.device)
                self._expander = ex
            ex.mask_logits(row, torch.from_numpy(self._class_mask))
        else:
            self.matcher.fill_next_token_bitmask(self._token_mask)
            apply_token_bitmask_inplace(row, torch.from_numpy(self._token_mask).to(row.device))
        return logits


def vllm_adapter_class(compiled: Mapping[str, CompiledGrammar]) -> type:
    """A vLLM v1 ``AdapterLogitsProcessor`` subclass serving the given grammars by key.

    Requests opt in with ``SamplingParams(extra_args={"formalgram_grammar": key})``.

    Raises
    ------
    EngineError
        If vLLM is not installed (or has no ``AdapterLogitsProcessor``).
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
                raise ValueError(f"unknown grammar {key!r}; known: {', '.join(sorted(table))}")

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> RequestGrammarProcessor | None:
            key = (getattr(params, "extra_args", None) or {}).get(EXTRA_ARG)
            return None if key is None else RequestGrammarProcessor(table[key])

    return FormalgramAdapter
