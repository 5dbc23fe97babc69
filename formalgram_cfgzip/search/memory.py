"""Reading this process's resident memory, for the memory budget of the displacement search."""

from __future__ import annotations

import resource

__all__ = ["current_rss"]


def current_rss() -> int:
    """Resident memory of this process in bytes (Linux ``/proc``; peak RSS elsewhere).

    Returns
    -------
    int

    Notes
    -----
    One small file read.

    Examples
    --------
    >>> current_rss() > 1 << 20
    True
    """
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
