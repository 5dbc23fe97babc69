"""Class mask -> full-vocabulary token mask expansion (CPU with C or numpy, CPU/CUDA with torch).

A grammar engine run over one representative per token class fills a *class bitmask*;
this package turns it into the *token bitmask* over every logit index (XGrammar's layout),
or masks logits directly.  One job per module:

* :mod:`~formalgram_cfgzip.expand.layout`: the bitmask layout and every argument check on
  bitmasks and class maps (shared with the engines);
* :mod:`~formalgram_cfgzip.expand.cpu`: :class:`MaskExpander`, over one kernel protocol
  (:mod:`~formalgram_cfgzip.expand.kernel`) implemented by the C kernel
  (:mod:`~formalgram_cfgzip.expand._c_kernel`, ``_cexpand.c``) and the numpy kernel
  (:mod:`~formalgram_cfgzip.expand._numpy_kernel`, with its
  :mod:`~formalgram_cfgzip.expand.row_cache`); both report plans by the names of
  :mod:`~formalgram_cfgzip.expand.plans`;
* :mod:`~formalgram_cfgzip.expand.torch`: :class:`TorchMaskExpander` and
  :func:`apply_token_bitmask_inplace` (CPU through the C / numpy path, CUDA through the
  Triton kernels of :mod:`~formalgram_cfgzip.expand._triton` or torch operations).
"""

from __future__ import annotations

from formalgram_cfgzip.expand.cpu import MaskExpander
from formalgram_cfgzip.expand.layout import bitmask_shape
from formalgram_cfgzip.expand.torch import TorchMaskExpander, apply_token_bitmask_inplace

__all__ = ["MaskExpander", "TorchMaskExpander", "apply_token_bitmask_inplace", "bitmask_shape"]
