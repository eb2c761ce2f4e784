"""Indexed binary max-heap over block ids with float64 keys (flat arrays).

heap[0..size-1] holds block ids, pos[b] is b's slot (-1 if absent), key[b] its key.
Ties are broken by the smaller block id so runs are deterministic.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit


def new_heap(n_unique: int, capacity: int):
    cap = max(1, min(n_unique, capacity + 1))
    return (np.empty(cap, np.int32), np.full(n_unique, -1, np.int64),
            np.zeros(n_unique, np.float64), np.zeros(1, np.int64))


@njit
def _above(key, a, b):
    ka = key[a]
    kb = key[b]
    return ka > kb or (ka == kb and a < b)


@njit
def _sift_up(heap, pos, key, i):
    b = heap[i]
    while i > 0:
        p = (i - 1) >> 1
        q = heap[p]
        if _above(key, b, q):
            heap[i] = q
            pos[q] = i
            i = p
        else:
            break
    heap[i] = b
    pos[b] = i


@njit
def _sift_down(heap, pos, key, n, i):
    b = heap[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _above(key, heap[c + 1], heap[c]):
            c += 1
        q = heap[c]
        if _above(key, q, b):
            heap[i] = q
            pos[q] = i
            i = c
        else:
            break
    heap[i] = b
    pos[b] = i


@njit
def push(heap, pos, key, size, b, k):
    n = size[0]
    if n >= heap.shape[0]:
        raise RuntimeError("heap overflow")
    key[b] = k
    heap[n] = b
    size[0] = n + 1
    _sift_up(heap, pos, key, n)


@njit
def update(heap, pos, key, size, b, k):
    old = key[b]
    key[b] = k
    i = pos[b]
    if k > old:
        _sift_up(heap, pos, key, i)
    else:
        _sift_down(heap, pos, key, size[0], i)


@njit
def remove(heap, pos, key, size, b):
    i = pos[b]
    n = size[0] - 1
    size[0] = n
    pos[b] = -1
    if i == n:
        return
    last = heap[n]
    heap[i] = last
    pos[last] = i
    _sift_up(heap, pos, key, i)
    _sift_down(heap, pos, key, n, pos[last])


@njit
def pop_max_unpinned(heap, pos, key, size, pin, r, stash):
    """Remove and return the top block whose pin != r (-1 if none).

    Pinned blocks met on the way are popped into `stash` and pushed back after.
    """
    ns = 0
    v = -1
    while size[0] > 0:
        top = heap[0]
        remove(heap, pos, key, size, top)
        if pin[top] != r:
            v = top
            break
        stash[ns] = top
        ns += 1
    for i in range(ns):
        b = stash[i]
        push(heap, pos, key, size, b, key[b])
    return v
