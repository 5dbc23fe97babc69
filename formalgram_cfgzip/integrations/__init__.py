"""Decoding-framework integrations of a compiled grammar: a ``transformers`` logits processor
(:mod:`~formalgram_cfgzip.integrations.transformers`) and vLLM's per-request and batch
logits-processor interfaces (:mod:`~formalgram_cfgzip.integrations.vllm`).

Neither framework is a dependency: each module imports it only when used.
"""

__all__: list[str] = []
