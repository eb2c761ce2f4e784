"""LFU: evict the least frequently used block; ties go to the block that reached its
count earliest (FIFO within a frequency, as libCacheSim's LFU). A block's count is
forgotten when it is evicted. O(1) per access with one list per frequency."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from .api import PolicySpec, register_hooks


class LFUState(NamedTuple):
    freq: np.ndarray  # int32[U]
    prev: np.ndarray  # int32[U] within the frequency list
    nxt: np.ndarray
    bhead: np.ndarray  # int32[F]: oldest block of each frequency, -1 if empty
    btail: np.ndarray
    # int64[4]: lower bound of the smallest non-empty frequency, then the eviction
    # cursor (request, frequency, last pinned block skipped or -1)
    meta: np.ndarray


def make_state(ctx) -> LFUState:
    U = ctx.trace.n_unique
    fmax = int(np.bincount(ctx.trace.blocks).max()) + 2 if U else 2
    return LFUState(
        np.zeros(U, np.int32), np.full(U, -1, np.int32), np.full(U, -1, np.int32),
        np.full(fmax, -1, np.int32), np.full(fmax, -1, np.int32), np.array([1, -1, 0, -1], np.int64),
    )


@njit
def _append(st, f, b):
    t = st.btail[f]
    st.prev[b] = t
    st.nxt[b] = -1
    if t == -1:
        st.bhead[f] = b
    else:
        st.nxt[t] = b
    st.btail[f] = b


@njit
def _remove(st, f, b):
    p = st.prev[b]
    q = st.nxt[b]
    if p == -1:
        st.bhead[f] = q
    else:
        st.nxt[p] = q
    if q == -1:
        st.btail[f] = p
    else:
        st.prev[q] = p


@njit
def on_hit(st, b, j, r, d):
    f = st.freq[b]
    _remove(st, f, b)
    st.freq[b] = f + 1
    _append(st, f + 1, b)


@njit
def on_insert(st, b, j, r, d):
    st.freq[b] = 1
    _append(st, 1, b)
    st.meta[0] = 1


@njit
def evict(st, j, r, pin):
    # The current request's blocks are skipped in place; they stay put while it evicts,
    # so the walk resumes after the last one skipped (O(1) amortised per request).
    F = st.bhead.shape[0]
    m = st.meta
    if r >= 0 and m[1] == r:
        f = m[2]
        v = st.nxt[m[3]] if m[3] >= 0 else st.bhead[f]
    else:
        f = m[0]
        while f < F and st.bhead[f] == -1:
            f += 1
        m[0] = f
        v = st.bhead[f] if f < F else -1
    while f < F:
        while v != -1:
            if r < 0 or pin[v] != r:
                _remove(st, f, v)
                st.freq[v] = 0
                return v
            m[1] = r
            m[2] = f
            m[3] = v
            v = st.nxt[v]
        f += 1
        if f < F:
            v = st.bhead[f]
            if r >= 0:
                m[1] = r
                m[2] = f
                m[3] = -1
    return -1


register_hooks(LFUState, on_hit, on_insert, evict)

SPEC = PolicySpec("lfu", make_state, "Least frequently used block is evicted (FIFO among equal counts).",
                  family="frequency")
