"""Indexed binary max-heap over block ids (flat arrays).

The heap's slots, the positions and the keys may each be a region of a larger array
(a packed policy state): the `*_at` functions take every array with the offset of its
region, H[hb + i] is slot i, P[pb + b] block b's slot, K[kb + b] its key. Ties are
broken by the smaller block id so runs are deterministic. The caller keeps the size.

`new_heap`, `push`, `update`, `remove` and `pop_max_unpinned` are the same heap over
separate arrays: heap[0..size-1] holds block ids, pos[b] is b's slot (-1 if absent),
key[b] its float64 key, size[0] the size.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit


def new_heap(n_unique: int, capacity: int):
    cap = max(1, min(n_unique, capacity + 1))
    return (np.empty(cap, np.int32), np.full(n_unique, -1, np.int64),
            np.zeros(n_unique, np.float64), np.zeros(1, np.int64))


# ------------------------------------------------------------ heap in array regions
@njit
def above(K, kb, a, b):
    """Block a sits above block b: a larger key, or an equal key and a smaller id."""
    ka = K[kb + a]
    kc = K[kb + b]
    return ka > kc or (ka == kc and a < b)


@njit
def _put(H, hb, P, pb, i, b):
    H[hb + i] = b
    P[pb + b] = i


@njit
def sift_up_at(H, hb, P, pb, K, kb, i):
    b = H[hb + i]
    while i > 0:
        p = (i - 1) >> 1
        q = H[hb + p]
        if not above(K, kb, b, q):
            break
        _put(H, hb, P, pb, i, q)
        i = p
    _put(H, hb, P, pb, i, b)


@njit
def sift_down_at(H, hb, P, pb, K, kb, n, i):
    b = H[hb + i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and above(K, kb, H[hb + c + 1], H[hb + c]):
            c += 1
        q = H[hb + c]
        if not above(K, kb, q, b):
            break
        _put(H, hb, P, pb, i, q)
        i = c
    _put(H, hb, P, pb, i, b)


@njit
def push_at(H, hb, P, pb, K, kb, n, b):
    """Add b (its key already in K) to a heap of n entries; the caller counts n + 1."""
    H[hb + n] = b
    sift_up_at(H, hb, P, pb, K, kb, n)


@njit
def rekey_at(H, hb, P, pb, K, kb, n, b, k):
    """Give b, in a heap of n entries, the key k."""
    old = K[kb + b]
    K[kb + b] = k
    i = P[pb + b]
    if k > old:
        sift_up_at(H, hb, P, pb, K, kb, i)
    else:
        sift_down_at(H, hb, P, pb, K, kb, n, i)


@njit
def remove_at(H, hb, P, pb, K, kb, n, b):
    """Take b out of a heap of n entries (n - 1 remain; b's position is left as is)."""
    i = P[pb + b]
    n -= 1
    if i == n:
        return
    last = H[hb + n]
    _put(H, hb, P, pb, i, last)
    sift_up_at(H, hb, P, pb, K, kb, i)
    sift_down_at(H, hb, P, pb, K, kb, n, P[pb + last])


# ----------------------------------------------------------- heap in its own arrays
@njit
def push(heap, pos, key, size, b, k):
    n = size[0]
    if n >= heap.shape[0]:
        raise RuntimeError("heap overflow")
    key[b] = k
    size[0] = n + 1
    push_at(heap, 0, pos, 0, key, 0, n, b)


@njit
def update(heap, pos, key, size, b, k):
    rekey_at(heap, 0, pos, 0, key, 0, size[0], b, k)


@njit
def remove(heap, pos, key, size, b):
    n = size[0]
    size[0] = n - 1
    remove_at(heap, 0, pos, 0, key, 0, n, b)
    pos[b] = -1


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
