"""A batch-aware ``transformers`` LogitsProcessor over a compiled grammar.

``GrammarLogitsProcessor(compiled)`` plugs any :class:`~formalgram_cfgzip.engines.base.CompiledGrammar`
(compressed or full-vocabulary, XGrammar or llguidance) into ``model.generate``::

    compiled = formalgram_cfgzip.engines.xgrammar.compile(classes, grammar_text)
    out = model.generate(input_ids, logits_processor=LogitsProcessorList([GrammarLogitsProcessor(compiled)]))

Per step it feeds each row's newest token to that row's matcher, fills all rows' masks
with the engine's batch API and masks the scores in place.  For a compressed grammar the
engine fills *class* bitmasks and :class:`~formalgram_cfgzip.expand.TorchMaskExpander`
expands them on the scores' device (CPU: numpy; GPU: a gather on the device); for the
full-vocabulary reference the token bitmask is applied directly.  Rows whose matcher has
accepted a stop token are left unmasked (``generate`` pads them anyway).

A processor holds per-sequence state: use a new one (or :meth:`reset`) per ``generate``
call.  Beam search reorders rows and is not supported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from formalgram_cfgzip.errors import GrammarViolation
from formalgram_cfgzip.expand import TorchMaskExpander, apply_token_bitmask_inplace

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.base import CompiledGrammar, EngineMatcher

__all__ = ["GrammarLogitsProcessor", "GrammarViolation"]


if TYPE_CHECKING:
    _Base = object
else:
    try:  # subclass the real base class when transformers is installed
        from transformers import LogitsProcessor as _Base
    except ImportError:  # pragma: no cover - depends on the environment
        _Base = object


class GrammarLogitsProcessor(_Base):
    """Constrain ``model.generate`` to a grammar (batch-aware).

    Parameters
    ----------
    compiled : CompiledGrammar
        From ``engines.xgrammar.compile`` / ``compile_full`` (or llguidance).

    Raises
    ------
    GrammarViolation
        (on a call) if a row's newest token is not allowed by its matcher.

    Example
    -------
    >>> # processor = GrammarLogitsProcessor(compiled)
    >>> # model.generate(ids, logits_processor=LogitsProcessorList([processor]))
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._matchers: list[EngineMatcher] = []
        self._prompt_len = -1
        self._expander: TorchMaskExpander | None = None
        self._class_mask = compiled.allocate_class_bitmask(1)
        self._token_mask = compiled.allocate_token_bitmask(1)

    def reset(self) -> None:
        """Forget all sequences (call between ``generate`` calls)."""
        self._matchers = []
        self._prompt_len = -1

    def _expander_for(self, device: Any) -> TorchMaskExpander:
        ex = self._expander
        if ex is None or ex.device != device:
            classes = self.compiled.classes
            assert classes is not None
            ex = TorchMaskExpander(classes.token_class, self.compiled.engine_size, device=device)
            self._expander = ex
        return ex

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        batch, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        if self._prompt_len < 0 or len(self._matchers) != batch:
            self._matchers = [self.compiled.matcher() for _ in range(batch)]
            self._prompt_len = length
        elif length > self._prompt_len:
            new = input_ids[:, -1].tolist()
            for b, (m, tok) in enumerate(zip(self._matchers, new, strict=True)):
                if m.is_terminated():
                    continue
                if not m.accept_token(int(tok)):
                    raise GrammarViolation(f"row {b}: token {tok} is not allowed by the grammar here")
            self._prompt_len = length
        live = [b for b, m in enumerate(self._matchers) if not m.is_terminated()]
        if not live:
            return scores
        matchers = [self._matchers[b] for b in live]
        c = self.compiled
        if c.compressed:
            if self._class_mask.shape[0] < len(live):
                self._class_mask = c.allocate_class_bitmask(len(live))
            cm = self._class_mask[: len(live)]
            c.fill_next_class_bitmask_batch(matchers, cm)
            ex = self._expander_for(scores.device)
            rows = torch.as_tensor(live, device=scores.device)
            sub = scores.index_select(0, rows) if len(live) != batch else scores
            ex.mask_logits(sub, torch.from_numpy(np.ascontiguousarray(cm)))
            if len(live) != batch:
                scores.index_copy_(0, rows, sub)
            return scores
        if self._token_mask.shape[0] < len(live):
            self._token_mask = c.allocate_token_bitmask(len(live))
        tm = self._token_mask[: len(live)]
        c.fill_next_token_bitmask_batch(matchers, tm)
        bits = torch.from_numpy(np.ascontiguousarray(tm)).to(scores.device, non_blocking=True)
        rows = torch.as_tensor(live, device=scores.device)
        sub = scores.index_select(0, rows)
        apply_token_bitmask_inplace(sub, bits)
        scores.index_copy_(0, rows, sub)
        return scores
