"""Offline knowledge for the oracles: each access's next use of the same block."""
from __future__ import annotations

import numpy as np

from ..jit import njit

NEVER = np.iinfo(np.int64).max


@njit
def _next_use(offsets, blocks, n_unique, max_len, mirrored):
    """Next access index of the same block, ignoring requests longer than max_len.
    `mirrored`: each request's blocks are stored reversed (a tail-first view); indexes
    are then those of the trace's own order, where a request is read head first."""
    n = blocks.shape[0]
    out = np.empty(n, dtype=np.int64)
    last = np.full(n_unique, np.iinfo(np.int64).max, dtype=np.int64)
    for r in range(offsets.shape[0] - 2, -1, -1):
        s = offsets[r]
        e = offsets[r + 1]
        skip = e - s > max_len
        for i in range(e - s):  # backwards in prompt order: a mirrored request from its start
            j = s + i if mirrored else e - 1 - i
            b = blocks[j]
            out[j] = last[b]
            if not skip:
                last[b] = s + e - 1 - j if mirrored else j
    return out


def next_use(trace, capacity: int | None = None) -> np.ndarray:
    """int64[N]: index of the next access of the same block, NEVER if none.

    With `capacity` (request mode), requests larger than the cache are skipped as
    future uses: the engine serves them without touching the cache, so keeping a
    block for them is worthless. Results are cached on the trace.

    On a tail-first view (`Trace.tail_first`) the indexes are still those of requests
    read head first: an oracle's future is the prompt order, whatever order the replay
    touches a request's blocks in, so among blocks next used by the same request the
    deepest is used last (and Belady evicts it first), as in the forward order.
    """
    max_len = trace.max_request_blocks
    eff = max_len if capacity is None or capacity >= max_len else int(capacity)
    cache = trace.__dict__.setdefault("_next_use", {})
    if eff not in cache:
        cache.clear()  # keep one array alive: it is N x 8 bytes
        cache[eff] = _next_use(trace.req_offsets, trace.blocks, trace.n_unique, eff, trace.tail_first)
    return cache[eff]
