"""The oracle of the mask-expansion tests: a straightforward per-token loop.

Token ``i`` is allowed exactly when its class ``token_class[i]`` is a class id (not
negative) whose bit is set in the class-bitmask row; the token bitmask has XGrammar's
layout (int32 words, bit ``j`` of word ``w`` is token ``32 * w + j``, pad bits zero).
``tests/test_expand.py`` checks this oracle against a second computation written
differently (Python integers, no numpy views).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def expand_reference(
    token_class: npt.NDArray[np.integer[Any]], class_bitmask: npt.NDArray[np.int32], logit_width: int
) -> npt.NDArray[np.int32]:
    """Slow, obviously correct expansion, one token at a time.

    Parameters
    ----------
    token_class : numpy.ndarray
        Class id of every logit index (at least ``logit_width`` entries); ids ``< 0`` mean
        "never allowed".
    class_bitmask : numpy.ndarray
        int32 array ``(batch, ceil(num_classes / 32))``.
    logit_width : int
        Number of logits.

    Returns
    -------
    numpy.ndarray
        int32 array ``(batch, ceil(logit_width / 32))``.

    Notes
    -----
    O(batch * logit_width) Python operations.
    """
    batch = class_bitmask.shape[0]
    words = np.zeros((batch, (logit_width + 31) // 32), dtype=np.uint32)
    cm = class_bitmask.view(np.uint32)
    for b in range(batch):
        for i in range(logit_width):
            c = int(token_class[i])
            if c >= 0 and (int(cm[b, c >> 5]) >> (c & 31)) & 1:
                words[b, i >> 5] |= np.uint32(1 << (i & 31))
    return words.view(np.int32)
