"""The replay loop. One function, specialised per policy state type by numba.

Semantics (paper sec. 3.1 and 5.2):

request mode (residency constraint): for request r with n blocks
  1. if n > capacity the request cannot be resident at once: it is counted as
     oversized, all its blocks are recomputed (misses) and the cache is untouched;
  2. hits are decided against the cache as the request arrives; a block missing from
     HBM is looked up in the lower tiers, top down (sim_core.tiers.hierarchy);
  3. the policy evicts victims, never a block of r, until r's missing blocks fit; a
     victim is written down to the tier below when that tier writes `on_evict`;
  4. the request is then prefilled: each resident block is reused (on_hit), each
     missing block is loaded from the tier that holds it or computed, and inserted
     (on_insert) unless HBM's admission refuses it, walking the request in the order
     its blocks are stored; a block that repeats inside r is computed once;
  5. the lower tiers take r's writes, all or nothing per tier, and refresh r's blocks
     (touch=request); r's blocks stay pinned in them meanwhile (sim_core.tiers.request).
  The order of that walk is the recency order of r's blocks afterwards. sim_core
  replays the tail-first view of a trace by default (Trace.tail_first_view: each
  request stored deepest block first, as vLLM frees a request's blocks and SGLang
  evicts radix leaves), or the trace as stored (forward); see simulate's `order`.
  Because step 4 walks the whole request whatever was hit, recency order after r
  does not depend on the capacity (this is what makes one-pass LRU curves exact).
block mode: every access is handled on its own exactly as libCacheSim does
  (hit -> on_hit; miss -> look up the tiers, evict one if full, insert).

Hit semantics only change the accounting, never the cache state:
  block  - every resident block is reused; runs of misses are holes;
  prefix - reuse stops at the request's first block that no tier holds; resident
           blocks after it are recomputed (and refreshed in the cache), so a request has
           at most one hole. With tiers, lower-tier blocks after it are not loaded.

A block counts as served when HBM or a lower tier supplies it; `hit_by_depth` counts
served blocks (what compute savings are made of), counters[HITS] the HBM hits alone.
Requests before `acc.count_from` (the warm-up) change the cache but are not counted.

The loop runs over a range of requests with its state in flat arrays (EngineState,
Accounting, the tiers), so a learned policy can pause the replay, retrain in Python,
and continue.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

import numba

from ..tiers.hierarchy import (A_KIND, ADMIT_AFTER_HITS, NO_GATE, NO_TIER, T_WRITE, WRITE_ON_COMPUTE, WRITE_ON_EVICT,
                        admit, counts_seen, gate_on, last_depth, last_j, pack_last, take, tier_begin, tier_has,
                        tier_on, write_down1, write_down2, write_down3)
from ..tiers.request import REFUSED, store1, store2, store3, tier_pin, touch_block, touch_request
from ..tiers.spec import new_gate
from ..policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert

# counters layout
SIZE, MAX_SIZE, EVICTIONS, OVERSIZED, OVERSIZED_BLOCKS, FAILED, BAD_VICTIM, HBM_HITS, TOKENS = range(9)
N_COUNTERS = 9


class EngineState(NamedTuple):
    resident: np.ndarray  # bool[U]
    pin: np.ndarray  # int32[U]: last request that touched the block (pins it during r)
    hit_by_depth: np.ndarray  # int64[max_depth]: served block accesses by depth (counted requests)
    holes: np.ndarray  # int32[R] holes per request
    counters: np.ndarray  # int64[N_COUNTERS], see layout above
    extra: np.ndarray  # int32 scratch for evict_more


class Accounting(NamedTuple):
    """Per-request inputs and outputs of a replay, and the hierarchy's per-block state."""

    count_from: int  # first counted request (requests before it only warm the cache)
    tail_depth: np.ndarray  # int32[R]: depth of the request's partial last block, -1 if none
    tail_tokens: np.ndarray  # int32[R]: tokens of that block
    block_tokens: int
    req_hbm: np.ndarray  # int32[R]: HBM hits per request
    req_served: np.ndarray  # int32[R]: served blocks (HBM and lower tiers) per request
    req_dsum: np.ndarray  # int64[R]: sum of the served blocks' depths (affine costs per request)
    req_tok: np.ndarray  # int64[R]: reused prompt tokens per request
    req_tier: np.ndarray  # int32[3, R]: blocks loaded from each lower tier
    level: np.ndarray  # int8[max request length]: scratch, where each block of r is found
    seen: np.ndarray  # int32[U] (or [1]): earlier requests of each block (admission)
    gate: object  # hierarchy.Gate (HBM's admission rule) or NO_GATE (admit all)
    last: np.ndarray  # int64[U] (or [1]): each block's last access and depth, packed (hierarchy.pack_last):
    # the hooks of a lower tier need both; one array is one random write per access, not two


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
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _evict_one(st, resident, pin, c, extra, j, r, counting, acc, t1, t2, t3):
    """Evict one victim and whatever must go with it, writing each down to the tier
    below when it takes evictions; False on a policy bug. (Takes arrays, not the
    EngineState tuple: passing the tuple costs ~10x.)"""
    x = p_evict(st, j, r, pin)
    k = 0
    i = -1  # -1: the victim itself; then extra[0..k) (asked for once the victim is out)
    while True:
        if not _drop(resident, pin, c, x, r):
            return False
        if counting:
            c[EVICTIONS] += 1
        if tier_on(t1):
            at = acc.last[x]
            write_down1(t1, t2, t3, x, last_j(at), last_depth(at), acc.seen, acc.last, WRITE_ON_EVICT)
        if i < 0:
            k = p_evict_more(st, j, r, pin, extra)
        i += 1
        if i >= k:
            return True
        x = extra[i]


@numba.njit(cache=True, nogil=True, inline="always")
def _fill(t1, t2, t3, b, j, d, lvl, acc):
    """Block mode: tiers that write on compute take block b, which HBM just received from
    level `lvl` (0: computed), unless they hold it or served it themselves (request mode:
    sim_core.tiers.request)."""
    if tier_on(t1) and t1.cfg[T_WRITE] == WRITE_ON_COMPUTE and lvl != 1:
        write_down1(t1, t2, t3, b, j, d, acc.seen, acc.last, WRITE_ON_COMPUTE)
    if tier_on(t2) and t2.cfg[T_WRITE] == WRITE_ON_COMPUTE and lvl != 2:
        write_down2(t2, t3, b, j, d, acc.seen, acc.last, WRITE_ON_COMPUTE)
    if tier_on(t3) and t3.cfg[T_WRITE] == WRITE_ON_COMPUTE and lvl != 3:
        write_down3(t3, b, j, d, acc.seen, acc.last, WRITE_ON_COMPUTE)


@numba.njit(cache=True, nogil=True, inline="always")
def _level(t1, t2, t3, b):
    """The first lower tier (1-3) that holds block b, 0 if none."""
    if tier_has(t1, b):
        return 1
    if tier_has(t2, b):
        return 2
    if tier_has(t3, b):
        return 3
    return 0


# Compiled without numba's reference counting (NRT): every array outlives the call, and
# with NRT each eviction through an inlined hook paid atomic incref/decref pairs on the
# state's arrays. Hooks must not allocate.
@numba.njit(cache=True, nogil=True, _nrt=False)
def replay_tiered(offsets, blocks, depth, capacity, request_mode, prefix_hits, st, es, r_begin, r_end, acc,
                  t1, t2, t3):
    """Replay requests r_begin..r_end-1 through HBM (policy state `st`) and up to three
    lower tiers (hierarchy.Tier, or NO_TIER). `depth` is empty (an access's depth is its
    position in the request) or, for a sample, each access's depth in the full request."""
    sampled = depth.shape[0] > 0
    tiers = tier_on(t1)
    resident = es.resident
    pin = es.pin
    hit_by_depth = es.hit_by_depth
    holes = es.holes
    c = es.counters
    extra = es.extra
    level = acc.level
    seen = acc.seen
    bt = acc.block_tokens
    gate = acc.gate
    gated = gate_on(gate)
    scratch = tiers or gated  # level[] holds, per block of r, where it is and whether HBM admits it
    # only after_hits=N reads the request counts: without it, no random write per access
    count_seen = (gated and gate.adm[A_KIND] == ADMIT_AFTER_HITS) or counts_seen(t1) or counts_seen(t2) \
        or counts_seen(t3)
    for r in range(r_begin, r_end):
        s = offsets[r]
        e = offsets[r + 1]
        n = e - s
        if n == 0:
            continue
        counting = r >= acc.count_from
        if tiers:
            tier_begin(t1, r, counting, request_mode)
            tier_begin(t2, r, counting, request_mode)
            tier_begin(t3, r, counting, request_mode)
        tail_d = acc.tail_depth[r]
        first_miss = np.int64(1) << 62  # shallowest depth no level holds: where prefix reuse stops
        hbm_front = np.int64(1) << 62  # shallowest depth HBM lacks: where its prefix hit ends
        if request_mode:
            if n > capacity:
                if counting:
                    c[OVERSIZED] += 1
                    c[OVERSIZED_BLOCKS] += n
                holes[r] = 1
                continue
            missing = 0
            below = False  # a block of r is in a lower tier
            for j in range(s, e):
                b = blocks[j]
                lv = -1  # in HBM, or repeated inside r
                if pin[b] != r:
                    pin[b] = r
                    if not resident[b]:
                        dh = depth[j] if sampled else j - s
                        if dh < hbm_front:
                            hbm_front = dh
                        lv = _level(t1, t2, t3, b) if tiers else 0
                        if lv > 0:
                            below = True
                        if not gated or admit(gate.adm, gate.door, seen, b):
                            missing += 1
                        else:
                            lv += REFUSED
                        if lv % REFUSED == 0:
                            dm = depth[j] if sampled else j - s
                            if dm < first_miss:
                                first_miss = dm
                if scratch:
                    level[j - s] = lv
            if below:  # load what is served: under prefix reuse, only above the first miss
                for j in range(s, e):
                    lv = level[j - s]
                    if lv > 0 and lv % REFUSED > 0:
                        d = depth[j] if sampled else j - s
                        if prefix_hits and d > first_miss:
                            level[j - s] = lv - lv % REFUSED
                        else:
                            take(t1, t2, t3, blocks[j], j, d, lv % REFUSED, seen, acc.last)
            if tiers:  # the full-pool rule: r's blocks stay in the tiers while r is replayed
                tier_pin(t1, blocks, s, e, r, depth, sampled, hbm_front)
                tier_pin(t2, blocks, s, e, r, depth, sampled, hbm_front)
                tier_pin(t3, blocks, s, e, r, depth, sampled, hbm_front)
            while c[SIZE] + missing > capacity:
                if not _evict_one(st, resident, pin, c, extra, s, r, counting, acc, t1, t2, t3):
                    return
        broken = False
        in_hole = False
        nh = 0
        n_hbm = 0
        n_served = 0
        dsum = 0
        deficit = 0
        n1 = 0
        n2 = 0
        n3 = 0
        for j in range(s, e):
            b = blocks[j]
            d = depth[j] if sampled else j - s
            lv = 0
            if tiers and not request_mode:
                touch_block(t1, b, j, d)
                touch_block(t2, b, j, d)
                touch_block(t3, b, j, d)
            if resident[b]:
                p_on_hit(st, b, j, r, d)
                # request mode decides by depth, so a tail-first walk (deepest block
                # first) counts prefix hits as the forward one does
                served = not (prefix_hits and (d > first_miss if request_mode else broken))
                hbm = served
            else:
                if request_mode:
                    x = level[j - s] if scratch else 0
                    ok = not scratch or 0 <= x < REFUSED  # -1 here: a repeat whose first copy was refused
                    lv = x % REFUSED if x > 0 else 0
                else:
                    ok = not gated or admit(gate.adm, gate.door, seen, b)
                    if tiers and not (prefix_hits and broken):
                        lv = _level(t1, t2, t3, b)
                        if lv > 0:
                            take(t1, t2, t3, b, j, d, lv, seen, acc.last)
                    if ok and c[SIZE] >= capacity:
                        if not _evict_one(st, resident, pin, c, extra, j, -2, counting, acc, t1, t2, t3):
                            return
                if ok:
                    resident[b] = True
                    c[SIZE] += 1
                    p_on_insert(st, b, j, r, d)
                if tiers and not request_mode:
                    _fill(t1, t2, t3, b, j, d, lv, acc)
                served = lv > 0
                hbm = False
            if tiers:
                acc.last[b] = pack_last(j, d)
            if count_seen and not (tiers and request_mode) and seen[b] < 2147483647:
                seen[b] += 1
            if served:
                if counting:
                    hit_by_depth[d] += 1
                n_served += 1
                dsum += d
                if d == tail_d:  # a partial last block reuses only its own tokens
                    deficit += bt - acc.tail_tokens[r]
                if tiers:
                    if hbm:
                        n_hbm += 1
                    elif lv == 1:
                        n1 += 1
                    elif lv == 2:
                        n2 += 1
                    else:
                        n3 += 1
                in_hole = False
            else:
                broken = True
                if not in_hole:
                    nh += 1
                    in_hole = True
        if tiers and request_mode:  # r's writes, its touches, then its requests are counted
            store1(t1, t2, t3, blocks, s, e, level, seen, acc.last, depth, sampled)
            store2(t2, t3, blocks, s, e, level, seen, acc.last, depth, sampled)
            store3(t3, blocks, s, e, level, seen, acc.last, depth, sampled)
            touch_request(t1, blocks, s, e, depth, sampled)
            touch_request(t2, blocks, s, e, depth, sampled)
            touch_request(t3, blocks, s, e, depth, sampled)
            if count_seen:
                for j in range(s, e):
                    if seen[blocks[j]] < 2147483647:
                        seen[blocks[j]] += 1
        holes[r] = nh
        if not tiers:
            n_hbm = n_served
        n_tok = n_served * bt - deficit
        acc.req_hbm[r] = n_hbm
        acc.req_served[r] = n_served
        acc.req_dsum[r] = dsum
        acc.req_tok[r] = n_tok
        if tiers:
            acc.req_tier[0, r] = n1
            acc.req_tier[1, r] = n2
            acc.req_tier[2, r] = n3
        if counting:
            c[HBM_HITS] += n_hbm
            c[TOKENS] += n_tok
            if c[SIZE] > c[MAX_SIZE]:
                c[MAX_SIZE] = c[SIZE]


def new_accounting(trace, *, count_from: int = 0, tiers: bool = False, hbm_admit=None,
                   capacity: int = 1) -> Accounting:
    """The per-request arrays of one replay of `trace` (a Trace or its replay view) at
    HBM `capacity` (which sizes a doorkeeper's window)."""
    R, U = trace.n_requests, trace.n_unique
    tail_depth, tail_tokens = trace.partial_tails()
    per_block = U if tiers else 1
    gate = new_gate(hbm_admit, U, capacity)
    gated = gate is not NO_GATE
    return Accounting(
        int(count_from), tail_depth, tail_tokens, int(trace.block_tokens),
        np.zeros(R, np.int32), np.zeros(R, np.int32), np.zeros(R, np.int64), np.zeros(R, np.int64),
        np.zeros((3, R if tiers else 1), np.int32),
        np.zeros(max(trace.max_request_blocks, 1), np.int8),
        np.zeros(U if (tiers or gated) else 1, np.int32), gate,
        np.zeros(per_block, np.int64))


def replay_range(offsets, blocks, depth, capacity, request_mode, prefix_hits, st, es, r_begin, r_end, acc=None):
    """A single-tier replay of requests r_begin..r_end-1 (tests drive policies with it).
    Without `acc`, every block is full-sized and nothing is warm-up."""
    if acc is None:
        acc = _plain_accounting(len(offsets) - 1, len(es.resident), int(np.diff(offsets).max(initial=1)))
    replay_tiered(offsets, blocks, depth, capacity, request_mode, prefix_hits, st, es, r_begin, r_end, acc,
                  NO_TIER, NO_TIER, NO_TIER)


def _plain_accounting(R: int, U: int, max_len: int) -> Accounting:
    return Accounting(0, np.full(R, -1, np.int32), np.zeros(R, np.int32), 1,
                      np.zeros(R, np.int32), np.zeros(R, np.int32), np.zeros(R, np.int64), np.zeros(R, np.int64),
                      np.zeros((3, 1), np.int32),
                      np.zeros(max(max_len, 1), np.int8), np.zeros(1, np.int32), NO_GATE,
                      np.zeros(1, np.int64))
