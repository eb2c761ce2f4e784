"""FIFO: evict the block inserted longest ago; hits do not reorder."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.dlist import new_list, push_head, remove_hook, tail_unpinned, unlink
from .api import PolicySpec, register_hooks


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
    # The oldest block not of the current request; the request's blocks keep their
    # queue position (they are skipped in place, not moved).
    v = tail_unpinned(st.prev, st.prev.shape[0] - 1, pin, r, st.cursor)
    if v >= 0:
        unlink(st.prev, st.nxt, v)
    return v


register_hooks(FIFOState, on_hit, on_insert, evict, remove=remove_hook)

SPEC = PolicySpec(
    "fifo", make_state,
    "First in, first out; hits do not change the eviction order.",
    family="fifo", removable=True,
    weight=1.0, libcachesim="FIFO")
