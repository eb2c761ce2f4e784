"""The replay loop. One function, specialised per policy state type by numba.

Semantics (paper sec. 3.1 and 5.2):

request mode (residency constraint): for request r with n blocks
  1. if n > capacity the request cannot be resident at once: it is counted as
     oversized, all its blocks are recomputed (misses) and the cache is untouched;
  2. its resident blocks are reused first (policy on_hit, in request order);
  3. the policy evicts victims, never a block of r, until r's missing blocks fit;
  4. the missing blocks are computed and inserted in request order.
block mode: every access is handled on its own exactly as libCacheSim does
  (hit -> on_hit; miss -> evict one if full, insert).

Hit semantics only change the accounting, never the cache state:
  block  - every resident block is reused; runs of misses are holes;
  prefix - reuse stops at the request's first missing block; resident blocks after
           it are recomputed (and refreshed in the cache), so a request has at most
           one hole.
"""
from __future__ import annotations

import numpy as np

from .jit import njit
from .policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert


@njit
def replay(offsets, blocks, capacity, request_mode, prefix_hits, st, n_unique, max_depth):
    R = offsets.shape[0] - 1
    resident = np.zeros(n_unique, dtype=np.bool_)
    pin = np.full(n_unique, -1, dtype=np.int64)
    hit_by_depth = np.zeros(max_depth, dtype=np.int64)
    holes = np.zeros(R, dtype=np.int32)
    size = 0
    max_size = 0
    evictions = 0
    oversized = 0
    oversized_blocks = 0
    failed = False
    bad_victim = -1
    extra = np.empty(max(capacity, 1), dtype=np.int32)  # victims that go with a victim
    for r in range(R):
        s = offsets[r]
        e = offsets[r + 1]
        n = e - s
        if n == 0:
            continue
        if request_mode:
            if n > capacity:
                oversized += 1
                oversized_blocks += n
                holes[r] = 1
                continue
            missing = 0
            for j in range(s, e):
                b = blocks[j]
                if pin[b] != r:
                    pin[b] = r
                    if resident[b]:
                        p_on_hit(st, b, j, r, j - s)
                    else:
                        missing += 1
            while size + missing > capacity:
                v = p_evict(st, s, r, pin)
                if v < 0 or not resident[v] or pin[v] == r:
                    failed = True
                    bad_victim = v
                    break
                resident[v] = False
                size -= 1
                evictions += 1
                k = p_evict_more(st, s, r, pin, extra)
                for i in range(k):
                    v = extra[i]
                    if not resident[v] or pin[v] == r:
                        failed = True
                        bad_victim = v
                        break
                    resident[v] = False
                    size -= 1
                    evictions += 1
                if failed:
                    break
            if failed:
                break
            # account in request order; insert missing blocks
            broken = False
            in_hole = False
            nh = 0
            for j in range(s, e):
                b = blocks[j]
                d = j - s
                if resident[b]:
                    hit = not (prefix_hits and broken)
                else:
                    resident[b] = True
                    size += 1
                    p_on_insert(st, b, j, r, d)
                    hit = False
                    # a block repeated later in r is now resident: it was computed once
                if hit:
                    hit_by_depth[d] += 1
                    in_hole = False
                else:
                    broken = True
                    if not in_hole:
                        nh += 1
                        in_hole = True
            holes[r] = nh
            if size > max_size:
                max_size = size
        else:
            broken = False
            in_hole = False
            nh = 0
            for j in range(s, e):
                b = blocks[j]
                d = j - s
                if resident[b]:
                    p_on_hit(st, b, j, r, d)
                    hit = not (prefix_hits and broken)
                else:
                    if size >= capacity:
                        v = p_evict(st, j, -2, pin)
                        if v < 0 or not resident[v]:
                            failed = True
                            bad_victim = v
                            break
                        resident[v] = False
                        size -= 1
                        evictions += 1
                        k = p_evict_more(st, j, -2, pin, extra)
                        for i in range(k):
                            v = extra[i]
                            if not resident[v]:
                                failed = True
                                bad_victim = v
                                break
                            resident[v] = False
                            size -= 1
                            evictions += 1
                        if failed:
                            break
                    resident[b] = True
                    size += 1
                    p_on_insert(st, b, j, r, d)
                    hit = False
                if hit:
                    hit_by_depth[d] += 1
                    in_hole = False
                else:
                    broken = True
                    if not in_hole:
                        nh += 1
                        in_hole = True
            if failed:
                break
            holes[r] = nh
            if size > max_size:
                max_size = size
    counters = np.array([evictions, oversized, oversized_blocks, max_size, failed, bad_victim], dtype=np.int64)
    return hit_by_depth, holes, counters
