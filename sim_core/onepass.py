"""All capacities of an LRU curve from one replay.

LRU has the inclusion property, also under the request-level residency constraint
(the engine walks each request in order after its evictions, so the recency stack
after a request does not depend on the capacity): the cache of capacity C is the top C
of one shared recency stack. We keep that stack as a linked list cut into K buckets
by the sorted capacities (Mattson's stack algorithm with bucket markers): a block in
bucket i is resident, hence a hit, for capacities i..K-1. Moving a block to the top
shifts one block across each boundary above its old bucket, so an access costs O(1)
for hits in the smallest capacity and O(K) at worst.

Valid when no request is larger than the smallest capacity (such a request is served
without touching the cache at small capacities only, which breaks the shared stack);
`simulate` replays those capacities one by one.
"""
from __future__ import annotations

import numpy as np

from .jit import njit


@njit
def _move_to_top(b, bkt, prev, nxt, tail_of, count, sizes, K):
    S = prev.shape[0] - 1  # sentinel
    i = bkt[b]
    if i < K:
        # unlink b from bucket i
        if tail_of[i] == b:
            p = prev[b]
            tail_of[i] = p if (p != S and bkt[p] == i) else -1
        count[i] -= 1
        p = prev[b]
        q = nxt[b]
        nxt[p] = q
        prev[q] = p
    # push at head, into bucket 0
    h = nxt[S]
    nxt[b] = h
    prev[b] = S
    prev[h] = b
    nxt[S] = b
    bkt[b] = 0
    count[0] += 1
    if count[0] == 1:
        tail_of[0] = b
    # push overflow down the buckets
    k = 0
    while k < K and count[k] > sizes[k]:
        x = tail_of[k]
        tail_of[k] = prev[x]  # count[k] >= 2 here, so prev[x] is in bucket k
        count[k] -= 1
        if k + 1 < K:
            bkt[x] = k + 1
            count[k + 1] += 1
            if count[k + 1] == 1:
                tail_of[k + 1] = x
        else:
            bkt[x] = K
            p = prev[x]
            q = nxt[x]
            nxt[p] = q
            prev[q] = p
        k += 1


@njit
def lru_curve(offsets, blocks, depth, n_unique, caps, request_mode, prefix_hits, max_depth):
    """Returns hits_by_bucket_depth[K, D] (an access in bucket i hits for capacities
    >= caps[i]), holes_hist[K, H] (requests with h holes at capacity index c) and
    resident[K] (accesses found resident, by bucket: differs from hits under prefix
    semantics, and gives the number of insertions)."""
    K = caps.shape[0]
    R = offsets.shape[0] - 1
    sizes = np.empty(K, np.int64)
    prev_cap = 0
    for i in range(K):
        sizes[i] = caps[i] - prev_cap
        prev_cap = caps[i]
    S = n_unique
    prev = np.full(n_unique + 1, -1, np.int32)
    nxt = np.full(n_unique + 1, -1, np.int32)
    prev[S] = S
    nxt[S] = S
    bkt = np.full(n_unique, K, np.int32)  # K = not resident at any capacity
    pin = np.full(n_unique, -1, np.int64)
    tail_of = np.full(K, -1, np.int32)
    count = np.zeros(K, np.int64)
    hist = np.zeros((K + 1, max_depth), np.int64)
    resident = np.zeros(K + 1, np.int64)
    max_len = 0
    for r in range(R):
        if offsets[r + 1] - offsets[r] > max_len:
            max_len = offsets[r + 1] - offsets[r]
    holes_hist = np.zeros((K, max_len + 2), np.int64)
    q = np.empty(max_len + 1, np.int32)
    diff = np.zeros(K + 1, np.int64)
    for r in range(R):
        s = offsets[r]
        e = offsets[r + 1]
        if e == s:
            continue
        # bucket of each access as the request arrives (block mode: as it is reached)
        for j in range(s, e):
            b = blocks[j]
            if request_mode:
                if pin[b] == r:
                    q[j - s] = 0  # repeated inside r: computed once, then resident
                else:
                    pin[b] = r
                    q[j - s] = bkt[b]
            else:
                q[j - s] = bkt[b]
                _move_to_top(b, bkt, prev, nxt, tail_of, count, sizes, K)
        if request_mode:
            for j in range(s, e):
                _move_to_top(blocks[j], bkt, prev, nxt, tail_of, count, sizes, K)
        # accounting
        for c in range(K + 1):
            diff[c] = 0
        run = 0
        for j in range(s, e):
            x = q[j - s]
            resident[x] += 1
            if prefix_hits:
                if x > run:
                    run = x
                x = run
            hist[x, depth[j] if depth.shape[0] > 0 else j - s] += 1
            if not prefix_hits:
                lo = 0 if j == s else q[j - s - 1]
                if lo < x:
                    diff[lo] += 1
                    diff[x] -= 1
        if prefix_hits:
            # one hole at every capacity below the request's largest bucket
            for c in range(K):
                holes_hist[c, 1 if c < run else 0] += 1
        else:
            h = 0
            for c in range(K):
                h += diff[c]
                holes_hist[c, h] += 1
    return hist[:K], holes_hist, resident[:K]


def percentile_from_hist(hist: np.ndarray, q: float) -> float:
    """np.percentile(values, q) (linear method) of values given as a histogram."""
    n = int(hist.sum())
    if n == 0:
        return 0.0
    cum = np.cumsum(hist)
    pos = (n - 1) * q / 100.0
    lo = int(np.floor(pos))
    hi = min(lo + 1, n - 1)
    v_lo = float(np.searchsorted(cum, lo, side="right"))
    v_hi = float(np.searchsorted(cum, hi, side="right"))
    return v_lo + (v_hi - v_lo) * (pos - lo)
