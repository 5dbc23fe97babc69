"""A batch-aware ``transformers`` logits processor over a compiled grammar.

``GrammarLogitsProcessor(compiled)`` plugs any
:class:`~formalgram_cfgzip.engines.base.CompiledGrammar` (compressed or full-vocabulary,
XGrammar or llguidance) into ``model.generate``::

    compiled = formalgram_cfgzip.engines.compile_grammar(classes, grammar_text)
    out = model.generate(input_ids, logits_processor=LogitsProcessorList([GrammarLogitsProcessor(compiled)]))

Per step it feeds each row's new tokens to that row's matcher, fills all rows' masks
with the engine's batch API and masks the scores in place.  For a compressed grammar the
engine fills *class* bitmasks and the compiled grammar's expander for the scores' device
(:meth:`~formalgram_cfgzip.engines.base.CompiledGrammar.mask_logits`: one per grammar and
device, shared by every processor) expands them there; for the full-vocabulary reference
the token bitmask is applied directly.  Rows whose matcher has accepted a stop token are
left unmasked (``generate`` pads them anyway).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from formalgram_cfgzip.errors import GrammarViolation
from formalgram_cfgzip.expand import apply_token_bitmask_inplace

if TYPE_CHECKING:
    from formalgram_cfgzip.engines.base import CompiledGrammar
    from formalgram_cfgzip.engines.matcher import EngineMatcher

__all__ = ["GrammarLogitsProcessor"]


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
        From :func:`formalgram_cfgzip.engines.compile_grammar` or
        :func:`~formalgram_cfgzip.engines.compile_full`.

    Raises
    ------
    GrammarViolation
        (on a call) if a row's new token is not allowed by its matcher.

    Notes
    -----
    A processor holds the matchers of one ``generate`` call.  A call whose sequences are
    not longer than the previous call's starts new matchers by itself (a new ``generate``
    call); call :meth:`reset` between ``generate`` calls all the same, since a new call
    with longer prompts cannot be told from a continuation.  Tokens appended since the
    previous call (one per step; more after assisted decoding) are all fed to the
    matchers.  Beam search reorders rows and is not supported.  Per step: one batch fill
    of the live rows' masks, and one expansion on the scores' device.

    Examples
    --------
    >>> import torch
    >>> from formalgram_cfgzip import Vocabulary, compress, engines
    >>> vocab = Vocabulary([b"a", b"b", b"</s>"], special_ids=[2], stop_ids=[2])
    >>> text = 'root ::= "a" "b"'
    >>> processor = GrammarLogitsProcessor(engines.compile_grammar(compress(text, vocab, progress=False), text))
    >>> processor(torch.tensor([[2]]), torch.zeros((1, 3))).tolist()  # only "a" may start
    [[0.0, -inf, -inf]]
    >>> processor(torch.tensor([[2, 0]]), torch.zeros((1, 3))).tolist()
    [[-inf, 0.0, -inf]]
    """

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._matchers: list[EngineMatcher] = []
        self._length = -1
        self._class_mask = compiled.allocate_class_bitmask(1)
        self._token_mask = compiled.allocate_token_bitmask(1)

    def reset(self) -> None:
        """Forget all sequences (call between ``generate`` calls)."""
        self._matchers = []
        self._length = -1

    def _advance(self, input_ids: Any) -> None:
        """Bring the matchers to ``input_ids`` (new matchers for a new batch of sequences)."""
        batch, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        if self._length < 0 or len(self._matchers) != batch or length <= self._length:
            self._matchers = [self.compiled.matcher() for _ in range(batch)]
            self._length = length
            return
        new = input_ids[:, self._length :].tolist()
        for b, (m, tokens) in enumerate(zip(self._matchers, new, strict=True)):
            for tok in tokens:
                if m.is_terminated():
                    break
                if not m.accept_token(int(tok)):
                    raise GrammarViolation(f"row {b}: token {tok} is not allowed by the grammar here")
        self._length = length

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self._advance(input_ids)
        batch = len(self._matchers)
        live = [b for b, m in enumerate(self._matchers) if not m.is_terminated()]
        if not live:
            return scores
        matchers = [self._matchers[b] for b in live]
        c = self.compiled
        rows = torch.as_tensor(live, device=scores.device)
        whole = len(live) == batch
        sub = scores if whole else scores.index_select(0, rows)
        if c.compressed:
            if self._class_mask.shape[0] < len(live):
                self._class_mask = c.allocate_class_bitmask(len(live))
            cm = self._class_mask[: len(live)]
            c.fill_next_class_bitmask_batch(matchers, cm)
            c.mask_logits(sub, torch.from_numpy(cm))
        else:
            if self._token_mask.shape[0] < len(live):
                self._token_mask = c.allocate_token_bitmask(len(live))
            tm = self._token_mask[: len(live)]
            c.fill_next_token_bitmask_batch(matchers, tm)
            bits = torch.from_numpy(np.ascontiguousarray(tm)).to(scores.device, non_blocking=True)
            apply_token_bitmask_inplace(sub, bits)
        if not whole:
            scores.index_copy_(0, rows, sub)
        return scores
