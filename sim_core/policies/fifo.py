"""FIFO: evict the block inserted longest ago; hits do not reorder."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from .api import PolicySpec, register_hooks
from .dlist import new_list, push_head, unlink


class FIFOState(NamedTuple):
    prev: np.ndarray
    nxt: np.ndarray
    cursor: np.ndarray  # int64[2]: (request, last pinned block skipped by its evictions)


def make_state(ctx) -> FIFOState:
    return FIFOState(*new_list(ctx.trace.n_unique), np.full(2, -1, np.int64))


@njit
def on_hit(st, b, j, r, d):
    pass


@njit
def on_insert(st, b, j, r, d):
    push_head(st.prev, st.nxt, b)


@njit
def evict(st, j, r, pin):
    # Walk from the oldest block, skipping the current request's blocks in place
    # (their queue position must not change). Those blocks stay put while the request
    # evicts, so the walk resumes after the last one it skipped (O(1) amortised).
    s = st.prev.shape[0] - 1
    c = st.cursor
    v = st.prev[c[1]] if r >= 0 and c[0] == r else st.prev[s]
    while v != s:
        if r < 0 or pin[v] != r:
            unlink(st.prev, st.nxt, v)
            return v
        c[0] = r
        c[1] = v
        v = st.prev[v]
    return -1


register_hooks(FIFOState, on_hit, on_insert, evict)

SPEC = PolicySpec("fifo", make_state, "First in, first out: oldest inserted block is evicted.",
                  family="fifo")
