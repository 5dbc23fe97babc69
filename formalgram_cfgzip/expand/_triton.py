"""The Triton kernels of the GPU mask expansion (defined only where Triton imports).

Two kernels, each one launch per batch:

* :func:`launch_expand` writes the full-vocabulary int32 bitmask (XGrammar's layout) from a
  class bitmask: every program handles ``WORDS`` output words of one row; for each of the
  ``32 * WORDS`` logit indices it reads the token's class id (``-1``: never allowed), tests
  that class's bit in the row's class bitmask, and ORs the 32 bits of a word together.
* :func:`launch_mask_logits` applies the same test directly to a logits row, writing
  ``-inf`` where the token is not allowed (and in every column past the logit width).

Compared with the plain torch path (unpack, ``index_select``, shift, sum: five kernels and a
memset) the work is the same gather, but in one launch and with no intermediate buffer.

The module imports without Triton: it then defines no kernel, :data:`AVAILABLE` is
``False`` and :data:`UNAVAILABLE_REASON` says why, and the launchers raise
:class:`~formalgram_cfgzip.errors.EngineError`.  The place that chooses the Triton backend
(:class:`~formalgram_cfgzip.expand.TorchMaskExpander`) reads :data:`AVAILABLE` and refuses
there; it also checks that the tensors live on a CUDA device.  With ``TRITON_INTERPRET=1``
set before Triton is imported, the kernels run in Triton's interpreter on CPU tensors (the
test suite uses that to check them without a GPU).
"""

from __future__ import annotations

from typing import Any

from formalgram_cfgzip.errors import EngineError

__all__ = ["AVAILABLE", "UNAVAILABLE_REASON", "launch_expand", "launch_mask_logits", "require"]


UNAVAILABLE_REASON = ""
"""Why Triton could not be imported (``""`` when it was)."""
try:
    import triton
    import triton.language as tl
except Exception as exc:  # missing, or installed but unusable (no driver, ABI mismatch)
    UNAVAILABLE_REASON = f"{type(exc).__name__}: {exc}"
AVAILABLE = not UNAVAILABLE_REASON
"""Whether Triton imported, and so whether the kernels below are defined."""


def require() -> None:
    """Raise unless Triton imported.

    Raises
    ------
    EngineError
        Triton is not installed or cannot be imported; the message says why.

    Notes
    -----
    Cost: O(1).

    Examples
    --------
    >>> from formalgram_cfgzip.expand import _triton
    >>> _triton.AVAILABLE == (_triton.UNAVAILABLE_REASON == "")
    True
    >>> if _triton.AVAILABLE:
    ...     _triton.require()  # returns None
    """
    if not AVAILABLE:
        raise EngineError(
            f"the triton expansion backend needs triton (pip install triton); importing it failed: "
            f"{UNAVAILABLE_REASON}"
        )


_WORDS = 32  # output words per program (1024 logit indices)
_LOGIT_BLOCK = 1024  # logit columns per program


if AVAILABLE:

    @triton.jit
    def _or_combine(a, b):
        return a | b

    @triton.jit
    def _expand_kernel(
        class_mask_ptr,
        class_stride,
        token_class_ptr,
        out_ptr,
        out_stride,
        num_words,
        WORDS: tl.constexpr,
    ):
        row = tl.program_id(0)
        block = tl.program_id(1)
        words = block * WORDS + tl.arange(0, WORDS)
        bits = tl.arange(0, 32)
        tokens = words[:, None] * 32 + bits[None, :]
        in_range = words[:, None] < num_words
        cls = tl.load(token_class_ptr + tokens, mask=in_range, other=-1)
        valid = cls >= 0
        cword = tl.load(class_mask_ptr + row * class_stride + (cls >> 5), mask=valid, other=0)
        bit = (cword >> (cls & 31)) & 1
        shifted = bit << bits[None, :]
        packed = tl.reduce(shifted, 1, _or_combine)
        tl.store(out_ptr + row * out_stride + words, packed, mask=words < num_words)

    @triton.jit
    def _mask_logits_kernel(
        logits_ptr,
        logits_stride,
        n_cols,
        class_mask_ptr,
        class_stride,
        token_class_ptr,
        logit_width,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        in_cols = cols < n_cols
        cls = tl.load(token_class_ptr + cols, mask=cols < logit_width, other=-1)
        valid = cls >= 0
        cword = tl.load(class_mask_ptr + row * class_stride + (cls >> 5), mask=valid, other=0)
        allowed = ((cword >> (cls & 31)) & 1) != 0
        ptrs = logits_ptr + row * logits_stride + cols
        tl.store(ptrs, tl.full([BLOCK], float("-inf"), tl.float32), mask=in_cols & ~allowed)


def launch_expand(class_mask: Any, token_class: Any, out: Any) -> None:
    """Expand ``class_mask`` (int32 ``(B, class_words)``) into ``out`` (int32 ``(B, num_words)``).

    Parameters
    ----------
    class_mask : torch.Tensor
        int32, row stride arbitrary, last dimension contiguous.
    token_class : torch.Tensor
        int32 ``(num_words * 32,)``, class id per logit index, ``-1`` for never allowed
        (padding bits of the last word included).
    out : torch.Tensor
        int32 ``(B, num_words)``, last dimension contiguous; overwritten.

    Raises
    ------
    EngineError
        Triton is not available (see :func:`require`).

    Notes
    -----
    Cost: one kernel launch; O(B * num_words * 32) work on the device.
    """
    require()
    batch, num_words = int(out.shape[0]), int(out.shape[1])
    if batch == 0:
        return
    grid = (batch, triton.cdiv(num_words, _WORDS))
    _expand_kernel[grid](
        class_mask, class_mask.stride(0), token_class, out, out.stride(0), num_words, WORDS=_WORDS
    )


def launch_mask_logits(logits: Any, class_mask: Any, token_class: Any, logit_width: int) -> None:
    """Write ``-inf`` into the logits of tokens whose class bit is 0 (and past ``logit_width``).

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, n)`` floating point, last dimension contiguous; modified in place.
    class_mask : torch.Tensor
        int32 ``(B, class_words)``.
    token_class : torch.Tensor
        int32, at least ``logit_width`` entries.
    logit_width : int
        Number of real logit indices; columns ``>= logit_width`` are always masked.

    Raises
    ------
    EngineError
        Triton is not available (see :func:`require`).

    Notes
    -----
    Cost: one kernel launch; O(B * n) work on the device.
    """
    require()
    batch, n_cols = int(logits.shape[0]), int(logits.shape[1])
    if batch == 0 or n_cols == 0:
        return
    grid = (batch, triton.cdiv(n_cols, _LOGIT_BLOCK))
    _mask_logits_kernel[grid](
        logits,
        logits.stride(0),
        n_cols,
        class_mask,
        class_mask.stride(0),
        token_class,
        logit_width,
        BLOCK=_LOGIT_BLOCK,
    )
