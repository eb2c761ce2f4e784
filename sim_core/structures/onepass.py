"""All capacities of an LRU curve from one replay.

LRU has the inclusion property, also under the request-level residency constraint
(the engine walks each request in order after its evictions, so the recency stack
after a request does not depend on the capacity): the cache of capacity C is the top C
of one shared recency stack, and an access hits at every capacity at least its stack
distance (its block's depth in the stack; a block never seen is at infinite depth).
Each block keeps the timestamp of its last access and a bit mask over time marks the
live ones, so the stack distance of an access is one plus the number of live timestamps
after its block's: a popcount inside its chunk of 512 timestamps plus a prefix sum of a
Fenwick tree over the closed chunks' counts (a few thousand entries: it stays in
cache). An access costs O(log n) whatever the number of capacities (the bucket, the
smallest capacity that holds it, is a binary search in the sorted capacities); a block
seen fewer than caps[0] accesses ago is in bucket 0 without a count. Timestamps are
renumbered 0..live-1 when they run out (every ~n_unique accesses, linear).

Valid when no request is larger than the smallest capacity (such a request is served
without touching the cache at small capacities only, which breaks the shared stack);
`simulate` replays those capacities one by one.
"""
from __future__ import annotations

import numpy as np

from ..jit import hook_njit, inline_njit, njit

# Timestamps are counted in chunks of 512 (8 words of a bit mask); the Fenwick tree holds
# the counts of the closed chunks (a few thousand: it stays in the L1/L2 cache).
CH = 9  # log2 of the chunk length
# stack state st[]: next timestamp, blocks in closed chunks, blocks in the open chunk;
# the last chunk whose newer-block count was computed and that count (-1: none since
# the last change); a closed chunk with decrements not yet in the tree and how many
# (a request's blocks were mostly last accessed together: one tree update for a run)
NOW, CLOSED, OPEN, QC, QV, PC, PN = range(7)
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


@inline_njit
def _fenwick_add(fw, i, v):
    n = fw.shape[0]
    while i < n:
        fw[i] += v
        i += i & -i


@inline_njit
def _fenwick_prefix(fw, i):
    s = 0
    while i > 0:
        s += fw[i]
        i &= i - 1
    return s


@inline_njit
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@inline_njit
def _newer(st, fw, mask, t):
    """Number of blocks accessed after timestamp t (each block counted at its last access)."""
    w = t >> 6
    n = _popcount(mask[w] & ((_ONES - np.uint64(1)) << np.uint64(t & 63)))
    c = t >> CH
    for x in range(w + 1, (c + 1) << (CH - 6)):
        n += _popcount(mask[x])
    if c < (st[NOW] >> CH):
        if st[QC] != c:
            if st[PN] > 0:
                _fenwick_add(fw, st[PC] + 1, -st[PN])
                st[PN] = 0
            st[QC] = c
            st[QV] = st[CLOSED] - _fenwick_prefix(fw, c + 1) + st[OPEN]
        n += st[QV]
    return n


@inline_njit
def _to_top(st, ts, fw, mask, rank, b):
    """b is accessed: its timestamp becomes the newest."""
    if st[NOW] == mask.shape[0] << 6:
        _renumber(st, ts, fw, mask, rank)
    st[QC] = -1
    now = st[NOW]
    t = ts[b]
    if t >= 0:
        mask[t >> 6] &= ~(np.uint64(1) << np.uint64(t & 63))
        c = t >> CH
        if c < (now >> CH):
            if st[PC] != c:
                if st[PN] > 0:
                    _fenwick_add(fw, st[PC] + 1, -st[PN])
                st[PC] = c
                st[PN] = 0
            st[PN] += 1
            st[CLOSED] -= 1
        else:
            st[OPEN] -= 1
    ts[b] = now
    mask[now >> 6] |= np.uint64(1) << np.uint64(now & 63)
    st[OPEN] += 1
    now += 1
    st[NOW] = now
    if now & ((1 << CH) - 1) == 0:  # the open chunk is full: it joins the tree
        _fenwick_add(fw, (now >> CH), st[OPEN])
        st[CLOSED] += st[OPEN]
        st[OPEN] = 0


@hook_njit
def _renumber(st, ts, fw, mask, rank):
    """Give the live blocks timestamps 0..live-1 in recency order (a block's new
    timestamp is the number of live ones before its old one) and rebuild the counts."""
    n = 0
    for w in range(mask.shape[0]):
        rank[w] = n
        n += _popcount(mask[w])
    for b in range(ts.shape[0]):
        t = ts[b]
        if t >= 0:
            ts[b] = rank[t >> 6] + _popcount(mask[t >> 6] & ((np.uint64(1) << np.uint64(t & 63)) - np.uint64(1)))
    mask[:] = 0
    fw[:] = 0
    for t in range(n):
        mask[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    full = n >> CH
    for i in range(1, fw.shape[0]):
        if i <= full:
            fw[i] += 1 << CH
        k = i + (i & -i)
        if k < fw.shape[0]:
            fw[k] += fw[i]
    st[NOW] = n
    st[CLOSED] = full << CH
    st[OPEN] = n - (full << CH)
    st[PN] = 0  # the rebuilt tree is exact


@inline_njit
def _bucket(st, ts, fw, mask, b, caps):
    """Index of the smallest capacity that holds b (its stack distance), K if none."""
    K = caps.shape[0]
    t = ts[b]
    if t < 0:
        return K
    if st[NOW] - t <= caps[0]:  # fewer accesses since than the smallest capacity
        return 0
    dist = _newer(st, fw, mask, t) + 1
    if dist <= caps[0]:
        return 0
    if dist > caps[K - 1]:
        return K
    lo = 0
    hi = K - 1  # caps[lo] < dist <= caps[hi]
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if caps[mid] < dist:
            lo = mid
        else:
            hi = mid
    return hi


# Compiled without reference counting (like the engine): the loop calls the stack
# helpers per access, and with NRT each inlined call paid increments and decrements on
# the arrays it is given.
@hook_njit
def _pass(offsets, blocks, depth, caps, request_mode, prefix_hits, tail_first, ts, rank, mask, fw, st, pin, hist,
          resident, holes_hist, q, diff, first, tail_depth, tail_tokens, block_tokens, deficit):
    K = caps.shape[0]
    for r in range(offsets.shape[0] - 1):
        s = offsets[r]
        e = offsets[r + 1]
        if e == s:
            continue
        # bucket of each access as the request arrives (block mode: as it is reached);
        # request mode moves the request's blocks to the top after all of them are read
        if request_mode:
            for j in range(s, e):
                b = blocks[j]
                if pin[b] == r:
                    q[j - s] = 0  # repeated inside r: computed once, then resident
                else:
                    pin[b] = r
                    q[j - s] = _bucket(st, ts, fw, mask, b, caps)
            for j in range(s, e):
                _to_top(st, ts, fw, mask, rank, blocks[j])
        else:
            for j in range(s, e):
                b = blocks[j]
                q[j - s] = _bucket(st, ts, fw, mask, b, caps)
                _to_top(st, ts, fw, mask, rank, b)
        if r < first:  # the warm-up: the stack moves, nothing is counted
            continue
        # accounting
        tail_d = tail_depth[r]
        for c in range(K + 1):
            diff[c] = 0
        # in depth order (a tail-first view stores requests deepest first): prefix reuse
        # stops at the shallowest miss; runs of misses count the same either way
        run = 0
        n = e - s
        for k in range(n):
            i = n - 1 - k if tail_first else k
            x = q[i]
            resident[x] += 1
            if prefix_hits:
                if x > run:
                    run = x
                x = run
            d = depth[s + i] if depth.shape[0] > 0 else i
            hist[x, d] += 1
            if d == tail_d:  # a partial last block, where it is a hit, reuses only its own tokens
                deficit[x] += block_tokens - tail_tokens[r]
            if not prefix_hits:
                lo = 0 if k == 0 else q[i + 1 if tail_first else i - 1]
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


@njit
def lru_curve(offsets, blocks, depth, n_unique, caps, request_mode, prefix_hits, tail_first, max_depth, first,
              tail_depth, tail_tokens, block_tokens):
    """Returns hits_by_bucket_depth[K, D] (an access in bucket i hits for capacities
    >= caps[i]), holes_hist[K, H] (requests with h holes at capacity index c),
    resident[K] (accesses found resident, by bucket: differs from hits under prefix
    semantics, and gives the number of insertions) and deficit[K] (block_tokens minus
    the tokens of each partial last block hit, by bucket: reused tokens are hits x
    block_tokens - deficit). Requests before `first` warm the stack uncounted."""
    K = caps.shape[0]
    R = offsets.shape[0] - 1
    ts = np.full(n_unique, -1, np.int32)  # a block's timestamp, -1 = never accessed
    M = ((2 * n_unique >> CH) + 2) << CH  # timestamps 0..M-1 between renumberings
    mask = np.zeros(M >> 6, np.uint64)  # live timestamps
    rank = np.zeros(M >> 6, np.int64)  # scratch of _renumber
    fw = np.zeros((M >> CH) + 1, np.int32)  # Fenwick tree of the closed chunks' counts, 1-based
    st = np.zeros(7, np.int64)
    st[QC] = -1
    pin = np.full(n_unique if request_mode else 0, -1, np.int32)
    hist = np.zeros((K + 1, max_depth), np.int64)
    resident = np.zeros(K + 1, np.int64)
    max_len = 0
    for r in range(R):
        if offsets[r + 1] - offsets[r] > max_len:
            max_len = offsets[r + 1] - offsets[r]
    holes_hist = np.zeros((K, max_len + 2), np.int64)
    q = np.empty(max_len + 1, np.int32)
    diff = np.zeros(K + 1, np.int64)
    deficit = np.zeros(K + 1, np.int64)
    _pass(offsets, blocks, depth, caps, request_mode, prefix_hits, tail_first, ts, rank, mask, fw, st, pin, hist,
          resident, holes_hist, q, diff, first, tail_depth, tail_tokens, block_tokens, deficit)
    return hist[:K], holes_hist, resident[:K], deficit[:K]


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
