"""Decoding-framework integrations of a compiled grammar: a ``transformers`` logits processor
(:mod:`~formalgram_cfgzip.integrations.transformers`), vLLM's per-request and batch
logits-processor interfaces (:mod:`~formalgram_cfgzip.integrations.vllm`), an SGLang grammar
backend (:mod:`~formalgram_cfgzip.integrations.sglang`), and the request grammars both servers
compile (:mod:`~formalgram_cfgzip.integrations.request_grammars`).

No framework is a dependency: each module imports it only when used (the SGLang classes
subclass SGLang's own base classes when it is installed).
"""

__all__: list[str] = []
