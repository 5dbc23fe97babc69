"""The bitmask layout (XGrammar's) and every argument check on bitmasks and class maps.

A *bitmask* has one bit per position: per class for a class bitmask, per logit index for
a token bitmask.  Both use XGrammar's layout, so that ``xgrammar.apply_token_bitmask_inplace``
and llguidance's helpers work unchanged:

* int32 words, shape ``(batch, ceil(width / 32))``;
* bit ``j`` (least significant first) of word ``w`` of a row is position ``32 * w + j``;
* the bits past ``width`` in the last word ("pad bits") are zero in every row this package
  writes; readers of a class bitmask ignore them (an engine may leave junk there).

A *class map* (``token_class``) gives the class id of every logit index; a negative id
marks a logit index that is never allowed.  Token ``i`` is allowed exactly when class
``token_class[i]`` is.

The checks raise :class:`~formalgram_cfgzip.errors.EngineError` (a ``ValueError``) or
:class:`~formalgram_cfgzip.errors.BatchIndexError` (an ``IndexError``), with the argument's
name in the message; the engines, :class:`~formalgram_cfgzip.expand.MaskExpander` and
:class:`~formalgram_cfgzip.expand.TorchMaskExpander` all take them from here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.errors import BatchIndexError, EngineError

__all__ = [
    "allocate_bitmask",
    "as_int32_rows",
    "bitmask_shape",
    "check_int32_rows",
    "check_logits_shape",
    "check_row_index",
    "check_token_class",
]


def bitmask_shape(batch: int, width: int) -> tuple[int, int]:
    """XGrammar's bitmask shape ``(batch, ceil(width / 32))``.

    Parameters
    ----------
    batch : int
        Number of rows.
    width : int
        Number of bit positions (logit width or number of classes).

    Returns
    -------
    tuple of int
        ``(batch, (width + 31) // 32)``.

    Examples
    --------
    >>> bitmask_shape(2, 33)
    (2, 2)
    """
    return (batch, (width + 31) // 32)


def allocate_bitmask(batch: int, width: int) -> npt.NDArray[np.int32]:
    """A zeroed int32 bitmask of :func:`bitmask_shape` ``(batch, width)``.

    Parameters
    ----------
    batch : int
        Number of rows.
    width : int
        Number of bit positions.

    Returns
    -------
    numpy.ndarray
        C-contiguous int32 zeros.

    Examples
    --------
    >>> allocate_bitmask(1, 40).tolist()
    [[0, 0]]
    """
    return np.zeros(bitmask_shape(batch, width), dtype=np.int32)


def check_row_index(index: object, rows: int) -> int:
    """``index`` as a row of a bitmask of ``rows`` rows, or the typed error saying why not.

    Parameters
    ----------
    index : int
        The row asked for: a Python or numpy integer (a bool, float or ``None`` is refused,
        never truncated).
    rows : int
        Number of rows of the bitmask.

    Returns
    -------
    int
        ``index`` as a Python int.

    Raises
    ------
    BatchIndexError
        If ``index`` is not an integer in ``0 .. rows - 1``.

    Notes
    -----
    O(1).

    Examples
    --------
    >>> import numpy as np
    >>> check_row_index(np.int64(1), 2)
    1
    >>> check_row_index(2, 2)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.BatchIndexError: batch index 2 out of range for a bitmask of 2 rows
    >>> check_row_index(0.0, 2)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.BatchIndexError: a batch index must be an integer, got 0.0
    """
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise BatchIndexError(f"a batch index must be an integer, got {index!r}")
    row = int(index)
    if not 0 <= row < rows:
        raise BatchIndexError(f"batch index {row} out of range for a bitmask of {rows} rows")
    return row


def check_int32_rows(
    what: str, is_int32: bool, dtype: object, shape: tuple[int, ...], words: int | None
) -> None:
    """The dtype and shape rule of every bitmask argument, for any array type.

    A bitmask is int32, 1-D (one row) or 2-D ``(batch, words)``; ``words`` is checked when
    given.  The caller says whether its array's dtype is int32 (numpy and torch spell it
    differently) and passes the dtype and shape for the message.

    Parameters
    ----------
    what : str
        The argument's name in the message (``"class bitmask"``, ``"token bitmask"``).
    is_int32 : bool
        Whether the array's dtype is (native-order) int32.
    dtype : object
        The array's dtype, for the message.
    shape : tuple of int
        The array's shape.
    words : int or None
        Required words per row; ``None`` accepts any.

    Raises
    ------
    EngineError
        If the dtype is not int32, the array is not 1-D or 2-D, or a row has another
        number of words.

    Examples
    --------
    >>> check_int32_rows("class bitmask", True, "int32", (4, 2), 2)
    >>> check_int32_rows("class bitmask", True, "int32", (4, 3), 2)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.EngineError: class bitmask must be int32 of shape (batch, 2), got int32 of shape (4, 3)
    """
    if is_int32 and len(shape) in (1, 2) and (words is None or shape[-1] == words):
        return
    expected = "a 1-D or 2-D int32 array" if words is None else f"int32 of shape (batch, {words})"
    raise EngineError(f"{what} must be {expected}, got {dtype} of shape {tuple(shape)}")


def as_int32_rows(
    bitmask: Any, what: str, words: int | None = None, *, writable: bool = True
) -> npt.NDArray[np.int32]:
    """A bitmask argument as a C-contiguous 2-D int32 numpy array (a 1-D row becomes one row).

    Parameters
    ----------
    bitmask : numpy.ndarray or torch.Tensor
        A numpy array or a CPU torch tensor (viewed, not copied).  With
        ``writable=False`` any array-like is accepted.
    what : str
        The argument's name in error messages.
    words : int or None, optional
        Required words per row (``None``: any).
    writable : bool, keyword-only
        ``True`` (the default) for an array the caller's results are written into: it
        must be writable and C-contiguous, and the result is a view of its memory.
        ``False`` for an input that is only read: a non-contiguous array is copied.

    Returns
    -------
    numpy.ndarray
        int32 of shape ``(batch, words)``, C-contiguous.

    Raises
    ------
    EngineError
        On another dtype or shape (:func:`check_int32_rows`), a tensor on another device,
        or, with ``writable``, a non-contiguous or read-only array or an object that is
        neither a numpy array nor a CPU torch tensor.

    Notes
    -----
    O(1) for an array already in shape; a copy of the array when ``writable=False`` and it
    is not C-contiguous.

    Examples
    --------
    >>> import numpy as np
    >>> as_int32_rows(np.zeros(3, dtype=np.int32), "token bitmask").shape
    (1, 3)
    >>> as_int32_rows(np.zeros((2, 3), dtype=np.int64), "token bitmask")
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.EngineError: token bitmask must be a 1-D or 2-D int32 array, got int64 of shape (2, 3)
    """
    if (  # the common case first: a C-contiguous 2-D int32 numpy array of the right width
        type(bitmask) is np.ndarray
        and bitmask.ndim == 2
        and bitmask.dtype == np.int32
        and bitmask.flags.c_contiguous
        and (words is None or bitmask.shape[1] == words)
        and (bitmask.flags.writeable or not writable)
    ):
        return bitmask
    arr = _as_numpy(bitmask, what, writable)
    check_int32_rows(what, arr.dtype == np.int32, arr.dtype, arr.shape, words)
    if arr.ndim == 1:
        arr = arr[None, :]
    if not arr.flags.c_contiguous:
        if writable:
            raise EngineError(f"{what} must be C-contiguous")
        arr = np.ascontiguousarray(arr)
    if writable and not arr.flags.writeable:
        raise EngineError(f"{what} is read-only: it must be writable, results are written into it")
    out: npt.NDArray[np.int32] = arr
    return out


def _as_numpy(bitmask: Any, what: str, writable: bool) -> npt.NDArray[Any]:
    """``bitmask`` as a numpy array: itself, a CPU tensor's view, or (read-only use) a copy."""
    if isinstance(bitmask, np.ndarray):
        return bitmask
    to_numpy = getattr(bitmask, "numpy", None)
    if to_numpy is not None:
        try:
            arr: npt.NDArray[Any] = to_numpy()
        except (RuntimeError, TypeError) as exc:
            raise EngineError(f"{what} must be on the CPU: {exc}") from exc
        return arr
    if writable:
        raise EngineError(f"{what} must be a numpy array or a CPU torch tensor, got {type(bitmask)}")
    return np.asarray(bitmask)


def check_logits_shape(logits_shape: tuple[int, ...], class_shape: tuple[int, ...], width: int) -> None:
    """Raise unless logits of ``logits_shape`` can be masked by a class bitmask of
    ``class_shape``: one row of at least ``width`` logits per class-bitmask row.

    Parameters
    ----------
    logits_shape : tuple of int
        Shape of the logits.
    class_shape : tuple of int
        Shape of the (2-D) class bitmask.
    width : int
        The logit width of the class map.

    Raises
    ------
    EngineError
        If the logits are not 2-D, have another number of rows, or fewer columns.

    Examples
    --------
    >>> check_logits_shape((2, 70), (2, 1), 70)
    >>> check_logits_shape((2, 60), (2, 1), 70)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.EngineError: logits of shape (2, 60) do not fit a class bitmask of (2, 1)
    """
    if len(logits_shape) != 2 or logits_shape[0] != class_shape[0] or logits_shape[1] < width:
        raise EngineError(
            f"logits of shape {tuple(logits_shape)} do not fit a class bitmask of {tuple(class_shape)}"
        )


def check_token_class(token_class: npt.ArrayLike, num_classes: int) -> npt.NDArray[np.int64]:
    """A class map checked against ``num_classes``, as a fresh int64 array.

    Parameters
    ----------
    token_class : array of int
        Class id of every logit index; negative ids mean "never allowed".
    num_classes : int
        Number of classes (the width of the class bitmask).

    Returns
    -------
    numpy.ndarray
        int64 copy of ``token_class``.

    Raises
    ------
    EngineError
        If ``token_class`` is not a non-empty 1-D integer array, ``num_classes < 1``, or
        an id is ``>= num_classes``.

    Notes
    -----
    O(len(token_class)).

    Examples
    --------
    >>> check_token_class([0, 2, -1], 3).tolist()
    [0, 2, -1]
    >>> check_token_class([0, 3], 3)
    Traceback (most recent call last):
    ...
    formalgram_cfgzip.errors.EngineError: token_class holds class 3 >= num_classes=3
    """
    tc = np.asarray(token_class)
    if tc.ndim != 1 or tc.shape[0] == 0:
        raise EngineError(f"token_class must be a non-empty 1-D array, got shape {tc.shape}")
    if not np.issubdtype(tc.dtype, np.integer):
        raise EngineError(f"token_class must be integers, got dtype {tc.dtype}")
    if num_classes < 1:
        raise EngineError(f"num_classes must be >= 1, got {num_classes}")
    tc64 = tc.astype(np.int64)
    if int(tc64.max()) >= num_classes:
        raise EngineError(f"token_class holds class {int(tc64.max())} >= num_classes={num_classes}")
    return tc64
