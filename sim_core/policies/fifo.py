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


def make_state(ctx) -> FIFOState:
    return FIFOState(*new_list(ctx.trace.n_unique))


@njit
def on_hit(st, b, j, r, d):
    pass


@njit
def on_insert(st, b, j, r, d):
    push_head(st.prev, st.nxt, b)


@njit
def evict(st, j, r, pin):
    # Walk from the oldest block, skipping the current request's blocks in place
    # (their queue position must not change).
    s = st.prev.shape[0] - 1
    v = st.prev[s]
    while v != s:
        if pin[v] != r:
            unlink(st.prev, st.nxt, v)
            return v
        v = st.prev[v]
    return -1


register_hooks(FIFOState, on_hit, on_insert, evict)

SPEC = PolicySpec("fifo", make_state, "First in, first out: oldest inserted block is evicted.",
                  family="fifo")
