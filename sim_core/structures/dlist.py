"""Intrusive doubly-linked lists over block ids (flat int32 arrays).

prev/nxt have n_unique + k entries: blocks, then one sentinel per list (a block sits in
at most one list). new_list/push_head/tail serve the single-list case (sentinel n).
head side = most recent / newest, tail side = eviction end.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from .pins import keeps_cursor


def new_list(n_unique: int, n_lists: int = 1) -> tuple[np.ndarray, np.ndarray]:
    prev = np.full(n_unique + n_lists, -1, dtype=np.int32)
    nxt = np.full(n_unique + n_lists, -1, dtype=np.int32)
    for s in range(n_unique, n_unique + n_lists):
        prev[s] = s  # empty list: sentinel points to itself
        nxt[s] = s
    return prev, nxt


@njit
def push_front(prev, nxt, s, b):
    """Insert b at the head of the list with sentinel s."""
    h = nxt[s]
    nxt[b] = h
    prev[b] = s
    prev[h] = b
    nxt[s] = b


@njit
def push_head(prev, nxt, b):
    push_front(prev, nxt, prev.shape[0] - 1, b)


@njit
def unlink(prev, nxt, b):
    p = prev[b]
    q = nxt[b]
    nxt[p] = q
    prev[q] = p
    prev[b] = -1
    nxt[b] = -1


@njit
def remove_hook(st, b):
    """The `remove` hook of a policy whose state holds one list as st.prev, st.nxt (LRU,
    FIFO): an exclusive tier hands block b up."""
    unlink(st.prev, st.nxt, b)


@njit
def tail(prev):
    """Last element, or -1 if the list is empty."""
    s = prev.shape[0] - 1
    t = prev[s]
    return -1 if t == s else t


@njit
def move_to_head(prev, nxt, b):
    unlink(prev, nxt, b)
    push_head(prev, nxt, b)


@njit
def pop_lru(prev, nxt, pin, r):
    """Unlink and return the least recently used element that request r has not pinned,
    or -1. Pinned elements met on the way move to the head: harmless for an LRU, since
    the engine touches every block of the request right after the evictions, and it
    keeps repeated evictions in one request O(1) amortised."""
    while True:
        v = tail(prev)
        if v < 0:
            return -1
        if pin[v] != r:
            unlink(prev, nxt, v)
            return v
        move_to_head(prev, nxt, v)


@njit
def tail_unpinned(prev, s, pin, r, cur):
    """Oldest element of the list with sentinel s that request r has not pinned, or -1
    (block mode, r < 0: the oldest). Not removed. r's pinned blocks stay put while r
    evicts, so the walk resumes after the last one it skipped; cur is an int64[2]
    cursor (request, block). mlist.tail_unpinned is the same walk on packed rows."""
    v = prev[cur[1]] if keeps_cursor(r) and cur[0] == r else prev[s]
    while v != s:
        if r < 0 or pin[v] != r:
            return v
        cur[0] = r
        cur[1] = v
        v = prev[v]
    return -1


# The same lists inside one flat array: prev links at I[pv + i], next links at I[nx + i]
# (a policy state packed into few arrays, see structures/packed.py).
@njit
def seg_push_front(I, pv, nx, s, b):
    """Insert b at the head of the list with sentinel s (or right after element s)."""
    h = I[nx + s]
    I[nx + b] = h
    I[pv + b] = s
    I[pv + h] = b
    I[nx + s] = b


@njit
def seg_unlink(I, pv, nx, b):
    p = I[pv + b]
    q = I[nx + b]
    I[nx + p] = q
    I[pv + q] = p
    I[pv + b] = -1
    I[nx + b] = -1
