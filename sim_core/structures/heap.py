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
    """Move the block at slot i up while it sits above its parent."""
    b = H[hb + i]
    while i > 0 and above(K, kb, b, H[hb + ((i - 1) >> 1)]):
        p = (i - 1) >> 1
        _put(H, hb, P, pb, i, H[hb + p])
        i = p
    _put(H, hb, P, pb, i, b)


@njit
def sift_down_at(H, hb, P, pb, K, kb, n, i):
    """Move the block at slot i down below its children (the top one first); also the
    step of a bottom-up heapify over arbitrary keys."""
    b = H[hb + i]
    c = 2 * i + 1
    while c < n:
        if c + 1 < n and above(K, kb, H[hb + c + 1], H[hb + c]):
            c += 1
        if not above(K, kb, H[hb + c], b):
            break
        _put(H, hb, P, pb, i, H[hb + c])
        i = c
        c = 2 * i + 1
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


# ------------------------------------------ scored max-heap with lazy deletion (regions)
# A max-heap of (score, block) entries kept for each block's latest score only: a block
# is scored when pushed; rescoring or dropping it leaves its old entries in place, and
# they are skipped when they surface (or compacted away when the heap is full). Equal
# scores keep no particular order (that of this binary heap). Everything sits in a
# packed state: `s` is the tuple of header slots of h (the state's int64 array)
#   (score offset, block offset, size, capacity)  of the heap's regions in F and I,
#   (has offset, latest offset, scored count)     per block: I[h[has] + b] != 0 while b
#                                                  has a score, F[h[latest] + b] that score.
@njit
def scored_sift_down(h, F, I, s, i):
    ov = h[s[0]]
    ok = h[s[1]]
    n = h[s[2]]
    while True:
        lft = 2 * i + 1
        if lft >= n:
            break
        c = lft
        if lft + 1 < n and F[ov + lft + 1] > F[ov + lft]:
            c = lft + 1
        if F[ov + c] > F[ov + i]:
            tv = F[ov + i]
            F[ov + i] = F[ov + c]
            F[ov + c] = tv
            tk = I[ok + i]
            I[ok + i] = I[ok + c]
            I[ok + c] = tk
            i = c
        else:
            break


@njit
def scored_compact(h, F, I, s):
    """Keep one entry per scored block (the one with its latest score), re-heapified."""
    ov = h[s[0]]
    ok = h[s[1]]
    n = 0
    for i in range(h[s[2]]):
        b = I[ok + i]
        hp = h[s[4]] + b
        if I[hp] == 1 and F[h[s[5]] + b] == F[ov + i]:
            I[hp] = 2  # mark kept
            F[ov + n] = F[ov + i]
            I[ok + n] = b
            n += 1
    for i in range(n):
        I[h[s[4]] + I[ok + i]] = 1
    h[s[2]] = n
    for i in range(n // 2 - 1, -1, -1):
        scored_sift_down(h, F, I, s, i)


@njit
def scored_push(h, F, I, s, val, b):
    """Give block b the score val (compacting first when the heap is full)."""
    if h[s[2]] >= h[s[3]]:
        scored_compact(h, F, I, s)
    ov = h[s[0]]
    ok = h[s[1]]
    i = h[s[2]]
    h[s[2]] += 1
    while i > 0:
        p = (i - 1) >> 1
        if F[ov + p] < val:
            F[ov + i] = F[ov + p]
            I[ok + i] = I[ok + p]
            i = p
        else:
            break
    F[ov + i] = val
    I[ok + i] = b
    hp = h[s[4]] + b
    if I[hp] == 0:
        I[hp] = 1
        h[s[6]] += 1
    F[h[s[5]] + b] = val


@njit
def scored_pop(h, F, I, s):
    """Remove and return the block with the highest latest score, or -1 when no entry is
    left. The block keeps its score (scored_drop forgets it)."""
    ov = h[s[0]]
    ok = h[s[1]]
    while h[s[2]] > 0:
        val = F[ov]
        key = np.int64(I[ok])
        n = h[s[2]] - 1
        h[s[2]] = n
        if n > 0:
            F[ov] = F[ov + n]
            I[ok] = I[ok + n]
            scored_sift_down(h, F, I, s, 0)
        if I[h[s[4]] + key] != 0 and F[h[s[5]] + key] == val:
            return key
    return -1


@njit
def scored_drop(h, I, s, b):
    """Block b loses its score (its entries become stale)."""
    k = h[s[4]] + b
    if I[k] != 0:
        I[k] = 0
        h[s[6]] -= 1


@njit
def scored_clear(h, I, s):
    """Every block loses its score; the heap is emptied."""
    for i in range(h[s[2]]):
        I[h[s[4]] + I[h[s[1]] + i]] = 0
    h[s[2]] = 0
    h[s[6]] = 0
