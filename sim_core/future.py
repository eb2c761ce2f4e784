"""Offline knowledge for the oracles: each access's next use of the same block."""
from __future__ import annotations

import numpy as np

from .jit import njit

NEVER = np.iinfo(np.int64).max


@njit
def _next_use(blocks, n_unique):
    n = blocks.shape[0]
    out = np.empty(n, dtype=np.int64)
    last = np.full(n_unique, np.iinfo(np.int64).max, dtype=np.int64)
    for j in range(n - 1, -1, -1):
        b = blocks[j]
        out[j] = last[b]
        last[b] = j
    return out


def next_use(trace) -> np.ndarray:
    """int64[N]: index of the next access of the same block, NEVER if none. Cached on the trace."""
    cached = getattr(trace, "_next_use", None)
    if cached is None:
        cached = _next_use(trace.blocks, trace.n_unique)
        trace._next_use = cached
    return cached
