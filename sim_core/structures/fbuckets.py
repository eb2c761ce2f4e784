"""Frequency buckets: one FIFO list of blocks per access count (flat int32 arrays).

bhead[f] / btail[f] are the oldest / newest block with count f (-1 if none); prev/nxt
link the blocks of a bucket. Used by LFU and LeCaR's LFU expert: the victim is the
oldest block of the lowest non-empty count, i.e. ties go to the block that reached its
count first (as libCacheSim's LFU).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from .pins import keeps_cursor


def new_buckets(n_unique: int, max_count: int):
    """(prev, nxt, bhead, btail) for counts 0..max_count."""
    return (np.full(n_unique, -1, np.int32), np.full(n_unique, -1, np.int32),
            np.full(max_count + 1, -1, np.int32), np.full(max_count + 1, -1, np.int32))


def new_cursor() -> np.ndarray:
    """int64[4]: lowest possibly non-empty count, then the eviction cursor (request,
    count, last pinned block skipped or -1) of lowest_unpinned."""
    return np.array([1, -1, 0, -1], np.int64)


@njit
def append(prev, nxt, bhead, btail, f, b):
    t = btail[f]
    prev[b] = t
    nxt[b] = -1
    if t == -1:
        bhead[f] = b
    else:
        nxt[t] = b
    btail[f] = b


@njit
def remove(prev, nxt, bhead, btail, f, b):
    p = prev[b]
    q = nxt[b]
    if p == -1:
        bhead[f] = q
    else:
        nxt[p] = q
    if q == -1:
        btail[f] = p
    else:
        prev[q] = p


@njit
def bump(prev, nxt, bhead, btail, freq, b):
    """Block b's count freq[b] goes up by one: it moves to the newest end of the next
    count's list. Counts stop at the largest bucket (sized by the trace's accesses per
    block, which only the serving replay's re-admissions can exceed)."""
    f = freq[b]
    g = min(f + 1, bhead.shape[0] - 1)
    remove(prev, nxt, bhead, btail, f, b)
    freq[b] = g
    append(prev, nxt, bhead, btail, g, b)


@njit
def lowest_unpinned(nxt, bhead, cur, pin, r):
    """Oldest block of the lowest count that request r has not pinned, or -1 (block
    mode, r < 0: nothing is pinned). Does not remove it. r's pinned blocks stay put
    while r evicts (only victims leave), so the walk for r resumes after the last one
    it skipped; cur[0] must be lowered by the caller when a smaller count appears."""
    F = bhead.shape[0]
    if keeps_cursor(r) and cur[1] == r:
        f = cur[2]
        v = nxt[cur[3]] if cur[3] >= 0 else bhead[f]
    else:
        f = cur[0]
        while f < F and bhead[f] == -1:
            f += 1
        cur[0] = f
        v = bhead[f] if f < F else -1
    while f < F:
        while v != -1:
            if r < 0 or pin[v] != r:
                return v
            cur[1] = r
            cur[2] = f
            cur[3] = v
            v = nxt[v]
        f += 1
        if f < F:
            v = bhead[f]
            if r >= 0:
                cur[1] = r
                cur[2] = f
                cur[3] = -1
    return -1
