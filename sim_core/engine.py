"""The replay loop. One function, specialised per policy state type by numba.

Semantics (paper sec. 3.1 and 5.2):

request mode (residency constraint): for request r with n blocks
  1. if n > capacity the request cannot be resident at once: it is counted as
     oversized, all its blocks are recomputed (misses) and the cache is untouched;
  2. hits are decided against the cache as the request arrives;
  3. the policy evicts victims, never a block of r, until r's missing blocks fit;
  4. the request is then prefilled: each resident block is reused (on_hit), each
     missing block is computed and inserted (on_insert), walking the request in the
     order its blocks are stored; a block that repeats inside r is computed once.
  The order of that walk is the recency order of r's blocks afterwards. sim_core
  replays the tail-first view of a trace by default (Trace.tail_first_view: each
  request stored deepest block first, as vLLM frees a request's blocks and SGLang
  evicts radix leaves), or the trace as stored (forward); see simulate's `order`.
  Because step 4 walks the whole request whatever was hit, recency order after r
  does not depend on the capacity (this is what makes one-pass LRU curves exact).
block mode: every access is handled on its own exactly as libCacheSim does
  (hit -> on_hit; miss -> evict one if full, insert).

Hit semantics only change the accounting, never the cache state:
  block  - every resident block is reused; runs of misses are holes;
  prefix - reuse stops at the request's first missing block; resident blocks after
           it are recomputed (and refreshed in the cache), so a request has at most
           one hole.

The loop runs over a range of requests with its state in flat arrays (EngineState),
so a learned policy can pause the replay, retrain in Python, and continue.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

import numba

from .policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert

# counters layout
SIZE, MAX_SIZE, EVICTIONS, OVERSIZED, OVERSIZED_BLOCKS, FAILED, BAD_VICTIM = range(7)
N_COUNTERS = 7


class EngineState(NamedTuple):
    resident: np.ndarray  # bool[U]
    pin: np.ndarray  # int32[U]: last request that touched the block (pins it during r)
    hit_by_depth: np.ndarray  # int64[max_depth]
    holes: np.ndarray  # int32[R] holes per request
    counters: np.ndarray  # int64[N_COUNTERS], see layout above
    extra: np.ndarray  # int32 scratch for evict_more


def new_engine_state(n_unique: int, n_requests: int, max_depth: int, capacity: int) -> EngineState:
    return EngineState(
        np.zeros(n_unique, np.bool_), np.full(n_unique, -1, np.int32),
        np.zeros(max(max_depth, 1), np.int64), np.zeros(n_requests, np.int32),
        np.zeros(N_COUNTERS, np.int64), np.empty(max(int(capacity), 1), np.int32),
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _drop(resident, pin, c, v, r):
    """Take victim v out of the cache; False (and the failure recorded) when v is not a
    resident block or is pinned by request r: a policy bug."""
    if v < 0 or not resident[v] or pin[v] == r:
        c[FAILED] = 1
        c[BAD_VICTIM] = v
        return False
    resident[v] = False
    c[SIZE] -= 1
    c[EVICTIONS] += 1
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _evict_one(st, resident, pin, c, extra, j, r):
    """Evict one victim and whatever must go with it; False on a policy bug.
    (Takes arrays, not the EngineState tuple: passing the tuple costs ~10x.)"""
    if not _drop(resident, pin, c, p_evict(st, j, r, pin), r):
        return False
    k = p_evict_more(st, j, r, pin, extra)
    for i in range(k):
        if not _drop(resident, pin, c, extra[i], r):
            return False
    return True


# Compiled without numba's reference counting (NRT): every array outlives the call, and
# with NRT each eviction through an inlined hook paid atomic incref/decref pairs on the
# state's arrays (measured 66 -> 201 M accesses/s for LRU). Hooks must not allocate.
@numba.njit(cache=True, nogil=True, _nrt=False)
def replay_range(offsets, blocks, depth, capacity, request_mode, prefix_hits, st, es, r_begin, r_end):
    """Replay requests r_begin..r_end-1. `depth` is empty (an access's depth is its
    position in the request) or, for a sample, each access's depth in the full request."""
    sampled = depth.shape[0] > 0
    resident = es.resident
    pin = es.pin
    hit_by_depth = es.hit_by_depth
    holes = es.holes
    c = es.counters
    extra = es.extra
    for r in range(r_begin, r_end):
        s = offsets[r]
        e = offsets[r + 1]
        n = e - s
        if n == 0:
            continue
        first_miss = np.int64(1) << 62  # shallowest missing depth: where prefix reuse stops
        if request_mode:
            if n > capacity:
                c[OVERSIZED] += 1
                c[OVERSIZED_BLOCKS] += n
                holes[r] = 1
                continue
            missing = 0
            for j in range(s, e):
                b = blocks[j]
                if pin[b] != r:
                    pin[b] = r
                    if not resident[b]:
                        missing += 1
                        dm = depth[j] if sampled else j - s
                        if dm < first_miss:
                            first_miss = dm
            while c[SIZE] + missing > capacity:
                if not _evict_one(st, resident, pin, c, extra, s, r):
                    return
        broken = False
        in_hole = False
        nh = 0
        for j in range(s, e):
            b = blocks[j]
            d = depth[j] if sampled else j - s
            if resident[b]:
                p_on_hit(st, b, j, r, d)
                # request mode decides by depth, so a tail-first walk (deepest block
                # first) counts prefix hits as the forward one does
                hit = not (prefix_hits and (d > first_miss if request_mode else broken))
            else:
                if not request_mode and c[SIZE] >= capacity:
                    if not _evict_one(st, resident, pin, c, extra, j, -2):
                        return
                resident[b] = True
                c[SIZE] += 1
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
        holes[r] = nh
        if c[SIZE] > c[MAX_SIZE]:
            c[MAX_SIZE] = c[SIZE]
