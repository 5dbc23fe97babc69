"""Class bitmask -> token bitmask / masked logits with torch tensors, on the CPU or a GPU.

:class:`TorchMaskExpander` expands on the logits' device, and
:func:`apply_token_bitmask_inplace` applies an XGrammar-layout token bitmask to logits.
Backends:

* ``"numpy"`` (CPU tensors): a :class:`~formalgram_cfgzip.expand.MaskExpander` (its C
  kernel when built) on the tensors' memory, no copy; logits of any float type, bfloat16
  included, through an integer view of the same width;
* ``"triton"`` (CUDA with Triton): the kernels of :mod:`~formalgram_cfgzip.expand._triton`,
  one launch per batch (each program reads the class ids of 1024 logit indices, tests
  their bits in the class bitmask and ORs them into 32 words);
* ``"torch"`` (any device): a gather on the device (unpack the class bits,
  ``index_select`` them by token class, pack 32 bits per word), with buffers kept per
  batch size.

No backend allocates on the host per step.  PyTorch is imported when an expander is built
(or the function called), not when this module is imported.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import EngineError
from formalgram_cfgzip.expand.cpu import MaskExpander
from formalgram_cfgzip.expand.layout import (
    as_int32_rows,
    check_int32_rows,
    check_logits_shape,
    check_token_class,
)

__all__ = ["TorchMaskExpander", "apply_token_bitmask_inplace"]


def _triton_kernels() -> Any:
    """The :mod:`formalgram_cfgzip.expand._triton` module, or ``None`` without Triton.

    The module imports whether or not Triton does (it is loaded here, on first use, so that
    Triton is imported only where the expansion may use it).
    """
    from formalgram_cfgzip.expand import _triton

    return _triton if _triton.AVAILABLE else None


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("TorchMaskExpander needs PyTorch (pip install torch)") from exc
    return torch


class TorchMaskExpander:
    """Class bitmask -> token bitmask / masked logits with torch tensors, on the CPU or a GPU.

    Parameters
    ----------
    token_class : array of int
        Class id per logit index (negative: never allowed).
    num_classes : int
        Width of the class bitmask.
    device : str or torch.device, keyword-only
        Where the class bitmasks, outputs and logits live.
    backend : {"auto", "numpy", "torch", "triton"}, keyword-only
        ``"auto"``: numpy on the CPU; on other devices Triton when it can be imported,
        else torch (see the module docstring).  ``"triton"`` needs a CUDA device (or
        ``TRITON_INTERPRET=1``).
    cpu_expander : MaskExpander or None, keyword-only
        The CPU expander the numpy backend uses, when the caller already has one for the
        same ``token_class`` and ``num_classes`` (a compiled grammar shares its own); by
        default the numpy backend builds one.

    Raises
    ------
    EngineError
        On a malformed ``token_class``, a numpy backend on a non-CPU device, a
        ``"triton"`` backend without Triton, or a ``cpu_expander`` of another width.

    Examples
    --------
    >>> import numpy as np, torch
    >>> ex = TorchMaskExpander(np.array([0, 1, 1, 2]), 3, backend="torch")
    >>> ex.expand(torch.tensor([[0b101]], dtype=torch.int32)).tolist()
    [[9]]
    """

    def __init__(
        self,
        token_class: npt.ArrayLike,
        num_classes: int,
        *,
        device: Any = "cpu",
        backend: Literal["auto", "numpy", "torch", "triton"] = "auto",
        cpu_expander: MaskExpander | None = None,
    ) -> None:
        torch = _torch()
        tc = check_token_class(token_class, num_classes)
        # resolve 'cuda' to 'cuda:<current>' so that device comparisons with tensors hold
        self.device = torch.empty(0, device=device).device
        self.logit_width = int(tc.shape[0])
        self.num_classes = num_classes
        self.num_words = (self.logit_width + 31) // 32
        self.class_words = (num_classes + 31) // 32
        if backend == "auto":
            if self.device.type == "cpu":
                backend = "numpy"
            else:
                backend = "triton" if _triton_kernels() is not None else "torch"
        if backend == "numpy" and self.device.type != "cpu":
            raise EngineError("the numpy backend runs on the CPU only")
        self._kernels: Any = None
        if backend == "triton":
            from formalgram_cfgzip.expand import _triton

            _triton.require()  # EngineError "... needs triton ..." with the import failure
            self._kernels = _triton
            if self.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
                raise EngineError(
                    "the triton backend needs a CUDA device (or TRITON_INTERPRET=1 for its interpreter)"
                )
            idx32 = np.full(self.num_words * 32, -1, dtype=np.int32)
            idx32[: self.logit_width] = np.where(tc >= 0, tc, -1)
            self._index32 = torch.from_numpy(idx32).to(self.device)
        self.backend = backend
        self._numpy: MaskExpander | None = None
        if backend == "numpy":
            if cpu_expander is None:
                cpu_expander = MaskExpander(tc, num_classes)
            elif (cpu_expander.logit_width, cpu_expander.num_classes) != (self.logit_width, num_classes):
                raise EngineError(
                    f"cpu_expander expands {cpu_expander.num_classes} classes to {cpu_expander.logit_width} "
                    f"logits, not {num_classes} to {self.logit_width}"
                )
            self._numpy = cpu_expander
        zero_slot = self.class_words * 32  # an extra, always-zero column of the class table
        idx = np.full(self.num_words * 32, zero_slot, dtype=np.int64)
        idx[: self.logit_width] = np.where(tc >= 0, tc, zero_slot)
        self._index = torch.from_numpy(idx).to(self.device)
        self._shifts = torch.arange(32, dtype=torch.int32, device=self.device)
        self._buffers: dict[int, tuple[Any, Any, Any]] = {}
        self._staging: dict[int, Any] = {}

    def _buffers_for(self, batch: int) -> tuple[Any, Any, Any]:
        buf = self._buffers.get(batch)
        if buf is None:
            torch = _torch()
            table = torch.zeros((batch, self.class_words * 32 + 1), dtype=torch.int32, device=self.device)
            gathered = torch.empty((batch, self.num_words * 32), dtype=torch.int32, device=self.device)
            packed = torch.empty((batch, self.num_words), dtype=torch.int32, device=self.device)
            buf = (table, gathered, packed)
            self._buffers[batch] = buf
        return buf

    def _gather(self, class_bitmask: Any) -> Any:
        """(batch, num_words * 32) int32 tensor of 0/1 per logit index (torch backend)."""
        torch = _torch()
        batch = int(class_bitmask.shape[0])
        table, gathered, _ = self._buffers_for(batch)
        cw = self.class_words
        bits = table[:, : cw * 32].view(batch, cw, 32)
        torch.bitwise_right_shift(class_bitmask.unsqueeze(-1), self._shifts, out=bits)
        bits.bitwise_and_(1)
        if self.num_classes < cw * 32:
            table[:, self.num_classes : cw * 32] = 0
        torch.index_select(table, 1, self._index, out=gathered)
        return gathered

    def _check(self, class_bitmask: Any) -> Any:
        """A class bitmask as a 2-D int32 tensor on :attr:`device` (checked by the layout's
        rule; a host tensor is copied into a persistent device buffer)."""
        torch = _torch()
        if not isinstance(class_bitmask, torch.Tensor):
            rows = as_int32_rows(class_bitmask, "class bitmask", self.class_words, writable=False)
            class_bitmask = torch.from_numpy(rows)
        check_int32_rows(
            "class bitmask",
            class_bitmask.dtype == torch.int32,
            class_bitmask.dtype,
            tuple(class_bitmask.shape),
            self.class_words,
        )
        if class_bitmask.dim() == 1:
            class_bitmask = class_bitmask.unsqueeze(0)
        if class_bitmask.device != self.device:
            # copy into a persistent device buffer: no device allocation per step
            batch = int(class_bitmask.shape[0])
            staged = self._staging.get(batch)
            if staged is None:
                staged = torch.empty((batch, self.class_words), dtype=torch.int32, device=self.device)
                self._staging[batch] = staged
            staged.copy_(class_bitmask)  # blocking: the caller may reuse its host buffer at once
            class_bitmask = staged
        return class_bitmask

    def expand(self, class_bitmask: Any, out: Any = None) -> Any:
        """Token bitmask ``(batch, ceil(logit_width / 32))`` int32 on :attr:`device`.

        Parameters
        ----------
        class_bitmask : torch.Tensor
            int32 ``(batch, ceil(num_classes / 32))`` (moved to the device if needed).
        out : torch.Tensor or None
            Written in place when given.

        Returns
        -------
        torch.Tensor

        Raises
        ------
        EngineError
            On a dtype or shape mismatch, or an ``out`` that is not a contiguous tensor of
            the batch's shape on :attr:`device`.
        """
        torch = _torch()
        cm = self._check(class_bitmask)
        batch = int(cm.shape[0])
        if out is None:
            out = torch.empty((batch, self.num_words), dtype=torch.int32, device=self.device)
        elif (
            out.dtype != torch.int32
            or tuple(out.shape) != (batch, self.num_words)
            or out.device != self.device
            or not out.is_contiguous()
        ):
            raise EngineError(
                f"token bitmask must be a contiguous int32 tensor of shape ({batch}, {self.num_words}) "
                f"on {self.device}, got {out.dtype} {tuple(out.shape)} on {out.device}"
            )
        if self._numpy is not None:
            self._numpy.expand(cm.contiguous().numpy(), out.numpy())
            return out
        if self._kernels is not None:
            self._kernels.launch_expand(cm.contiguous(), self._index32, out)
            return out
        gathered = self._gather(cm)
        words = gathered.view(batch, self.num_words, 32)
        words.bitwise_left_shift_(self._shifts)
        # the 32 shifted bits are distinct, so their int32 sum is their OR (no carries)
        torch.sum(words, dim=-1, dtype=torch.int32, out=out)
        return out

    def mask_logits(self, logits: Any, class_bitmask: Any) -> Any:
        """Set disallowed logits to ``-inf`` in place (columns past ``logit_width`` too).

        Parameters
        ----------
        logits : torch.Tensor
            float ``(batch, n)`` with ``n >= logit_width``, on :attr:`device`.
        class_bitmask : torch.Tensor
            int32 ``(batch, ceil(num_classes / 32))``.

        Returns
        -------
        torch.Tensor
            ``logits``.

        Raises
        ------
        EngineError
            On a shape mismatch, or (CPU) logits that are not floats of 2, 4 or 8 bytes.
        """
        cm = self._check(class_bitmask)
        check_logits_shape(tuple(logits.shape), tuple(cm.shape), self.logit_width)
        w = self.logit_width
        if self._numpy is not None:
            # through an integer view of the same width, so that bfloat16 / float16 work too
            torch = _torch()
            size = logits.element_size()
            if not logits.dtype.is_floating_point or size not in (2, 4, 8):
                raise EngineError(f"logits must be a float tensor of 2, 4 or 8 bytes, got {logits.dtype}")
            int_type = {2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
            pattern = int(torch.tensor(float("-inf"), dtype=logits.dtype).view(int_type).item())
            raw = logits.detach().view(int_type).numpy()
            unsigned = np.dtype(f"u{size}")
            self._numpy._mask_raw(raw.view(unsigned), cm.contiguous().numpy(), pattern % (1 << (8 * size)))
            return logits
        if self._kernels is not None and logits.stride(1) == 1:
            self._kernels.launch_mask_logits(logits, cm.contiguous(), self._index32, w)
            return logits
        gathered = self._gather(cm)
        logits[:, :w].masked_fill_(gathered[:, :w] == 0, float("-inf"))
        if logits.shape[1] > w:
            logits[:, w:] = float("-inf")
        return logits


def apply_token_bitmask_inplace(logits: Any, bitmask: Any) -> Any:
    """Set logits whose bit is 0 in an XGrammar-layout bitmask to ``-inf`` (torch, any device).

    Columns past ``32 * bitmask.shape[1]`` are set to ``-inf`` as well.  Equivalent to
    ``xgrammar.apply_token_bitmask_inplace`` without the XGrammar dependency.

    Parameters
    ----------
    logits : torch.Tensor
        float ``(batch, n)``.
    bitmask : torch.Tensor
        int32 ``(batch, words)`` on the same device.

    Returns
    -------
    torch.Tensor
        ``logits``.

    Examples
    --------
    >>> import torch
    >>> logits = torch.zeros(1, 4)
    >>> apply_token_bitmask_inplace(logits, torch.tensor([[0b0101]], dtype=torch.int32)).tolist()
    [[0.0, -inf, 0.0, -inf]]
    """
    torch = _torch()
    if logits.dim() == 1:
        logits = logits.unsqueeze(0)
    if bitmask.dim() == 1:
        bitmask = bitmask.unsqueeze(0)
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).view(bitmask.shape[0], -1)
    n = min(int(logits.shape[1]), int(bits.shape[1]))
    logits[:, :n].masked_fill_(bits[:, :n] == 0, float("-inf"))
    if logits.shape[1] > n:
        logits[:, n:] = float("-inf")
    return logits
