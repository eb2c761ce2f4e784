"""Intrusive doubly-linked lists kept as rows of one 2-D int32 array.

A policy keeps its per-block int32 data in one array `lk` of shape (rows, U + K): a
family of lists uses two rows, `p` (prev) and `p + 1` (next); columns 0..U-1 are blocks
and column U + k is the sentinel of list k. A block sits in at most one list of a
family, so ARC's T1/T2/B1/B2 share a single family with four sentinels; a block that
can be in two lists at once (LIRS's S and Q) uses two families. Other rows hold the
policy's own per-block fields.

Why one array: numba reference-counts every array handed to a function it does not
inline, per call, so helpers that take one packed array instead of the state's many
stay cheap (before the engine inlined the hooks, ARC went from 10 state arrays to 3 and
replayed ~4x faster); a block's fields also share nearby memory.

The head side of a list is the newest entry (`lk[p + 1, s]`), the tail side the
oldest (`lk[p, s]`); from an element, next walks towards the tail (older) and prev
towards the head (newer), like dlist.py and libCacheSim's `queue.next`/`queue.prev`.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from .pins import keeps_cursor


def new_links(n_unique: int, n_sentinels: int, n_rows: int, families=(0,), n_meta: int = 0) -> np.ndarray:
    """int32[n_rows, n_unique + n_sentinels + n_meta]; every sentinel of each family
    (given by its prev row) is an empty list, other cells are zero. The last n_meta
    columns pad the array so that a policy can keep its scalars in columns 0..n_meta-1
    of a row of its own, whatever n_unique is (U = shape[1] - n_sentinels - n_meta)."""
    lk = np.zeros((n_rows, n_unique + n_sentinels + n_meta), dtype=np.int32)
    for p in families:
        lk[p, :] = -1
        lk[p + 1, :] = -1
        for s in range(n_unique, n_unique + n_sentinels):
            lk[p, s] = s
            lk[p + 1, s] = s
    return lk


@njit
def push_head(lk, p, s, b):
    h = lk[p + 1, s]
    lk[p + 1, b] = h
    lk[p, b] = s
    lk[p, h] = b
    lk[p + 1, s] = b


@njit
def unlink(lk, p, b):
    a = lk[p, b]
    c = lk[p + 1, b]
    lk[p + 1, a] = c
    lk[p, c] = a
    lk[p, b] = -1
    lk[p + 1, b] = -1


@njit
def leave(lk, p, b, row, meta, n_col):
    """Unlink b from its list of family p, clear its membership row (lk[row, b] = 0) and
    count one fewer in lk[meta, n_col]."""
    unlink(lk, p, b)
    lk[row, b] = 0
    lk[meta, n_col] -= 1


@njit
def tail(lk, p, s):
    """Oldest element of list s, or -1 if it is empty."""
    t = lk[p, s]
    return -1 if t == s else t


@njit
def move_to_head(lk, p, s, b):
    unlink(lk, p, b)
    push_head(lk, p, s, b)


def new_cursors(n_lists: int) -> np.ndarray:
    """int64[2 * n_lists] eviction cursors for tail_unpinned, one (request, block) pair
    per list."""
    return np.full(2 * n_lists, -1, dtype=np.int64)


@njit
def tail_unpinned(lk, p, s, pin, r, cur, k):
    """Oldest element of list s that request r has not pinned, or -1 (block mode,
    r < 0: the oldest). r's pinned blocks stay where they are while r evicts, so the
    walk resumes after the last one it skipped (cursor pair k of `cur`): a request
    that hits many old blocks and then evicts many times walks them once."""
    if keeps_cursor(r) and cur[2 * k] == r:
        v = lk[p, cur[2 * k + 1]]
    else:
        v = lk[p, s]
    while v != s:
        if r < 0 or pin[v] != r:
            return v
        cur[2 * k] = r
        cur[2 * k + 1] = v
        v = lk[p, v]
    return -1
