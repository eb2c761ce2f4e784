"""Offline knowledge for the oracles: each access's next use of the same block."""
from __future__ import annotations

import numpy as np

from .jit import njit

NEVER = np.iinfo(np.int64).max


@njit
def _next_use(offsets, blocks, n_unique, max_len):
    """Next access index of the same block, ignoring requests longer than max_len."""
    n = blocks.shape[0]
    out = np.empty(n, dtype=np.int64)
    last = np.full(n_unique, np.iinfo(np.int64).max, dtype=np.int64)
    for r in range(offsets.shape[0] - 2, -1, -1):
        s = offsets[r]
        e = offsets[r + 1]
        skip = e - s > max_len
        for j in range(e - 1, s - 1, -1):
            b = blocks[j]
            out[j] = last[b]
            if not skip:
                last[b] = j
    return out


def next_use(trace, capacity: int | None = None) -> np.ndarray:
    """int64[N]: index of the next access of the same block, NEVER if none.

    With `capacity` (request mode), requests larger than the cache are skipped as
    future uses: the engine serves them without touching the cache, so keeping a
    block for them is worthless. Results are cached on the trace.
    """
    max_len = trace.max_request_blocks
    eff = max_len if capacity is None or capacity >= max_len else int(capacity)
    cache = trace.__dict__.setdefault("_next_use", {})
    if eff not in cache:
        cache.clear()  # keep one array alive: it is N x 8 bytes
        cache[eff] = _next_use(trace.req_offsets, trace.blocks, trace.n_unique, eff)
    return cache[eff]
