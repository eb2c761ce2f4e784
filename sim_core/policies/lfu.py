"""LFU: evict the least frequently used block; ties go to the block that reached its
count earliest (FIFO within a frequency, as libCacheSim's LFU). A block's count is
forgotten when it is evicted. O(1) per access with one list per frequency."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.fbuckets import append, bump, lowest_unpinned, new_buckets, new_cursor, remove
from .api import PolicySpec, register_hooks


class LFUState(NamedTuple):
    freq: np.ndarray  # int32[U]
    prev: np.ndarray  # int32[U] within the frequency list
    nxt: np.ndarray
    bhead: np.ndarray  # int32[F]: oldest block of each frequency, -1 if empty
    btail: np.ndarray
    cur: np.ndarray  # fbuckets.new_cursor()


def make_state(ctx) -> LFUState:
    U = ctx.trace.n_unique
    fmax = int(np.bincount(ctx.trace.blocks).max()) + 1 if U else 1
    return LFUState(np.zeros(U, np.int32), *new_buckets(U, fmax), new_cursor())


@njit
def on_hit(st, b, j, r, d):
    bump(st.prev, st.nxt, st.bhead, st.btail, st.freq, b)


@njit
def on_insert(st, b, j, r, d):
    st.freq[b] = 1
    append(st.prev, st.nxt, st.bhead, st.btail, 1, b)
    st.cur[0] = 1


@njit
def evict(st, j, r, pin):
    v = lowest_unpinned(st.nxt, st.bhead, st.cur, pin, r)
    if v >= 0:
        remove(st.prev, st.nxt, st.bhead, st.btail, st.freq[v], v)
        st.freq[v] = 0
    return v


register_hooks(LFUState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "lfu", make_state,
    "Least frequently used block is evicted (FIFO among equal counts; counts "
    "forgotten on eviction).",
    family="frequency",
    weight=2.5, libcachesim="LFU")
