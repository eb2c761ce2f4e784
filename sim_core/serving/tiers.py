"""Lower tiers under each replica's HBM in the serving replay, and a pool the replicas share.

Every replica has its own chain of lower tiers (host memory, an SSD) run by the same
compiled rules `simulate` runs (sim_core.tiers: writes, admission, touches, promotion, the
full-pool rule), over requests as the engine lives through them:

  admission  the request's prefix found in HBM is reused; the blocks right after it that a
             lower tier holds are loaded (vLLM's connector extends the GPU hit). A tier
             with touch=request refreshes every prompt block of the request it holds
             (vLLM's connector touches them on each lookup); the loads are taken deepest
             first; the request's blocks are pinned in the tiers (the full-pool rule) while
             HBM makes room, whose victims go to a tier that takes them (on_evict);
  step end   the full prompt blocks the step computed, from the request's store cursor on,
             are offered to the tiers that write on compute, all or nothing per tier, and
             touched; a refused store leaves the cursor where it was and is offered again
             after the next step (vLLM's prepare_store returns nothing, and the connector
             retries). Once the prompt is computed its blocks count one request more (the
             after_hits admission).

A tier marked shared is one store for the fleet: the same compiled Tier sits in every
replica's chain, so its capacity is counted once and a block one replica writes can be
loaded by another. It stamps each block with its writer and the time of the write
(Tier.owner); another replica can load it once the write has crossed the link.

Time: a replica's link to each tier is a FIFO lane. Loads of a request from tier i start at
max(now + latency_i, the lane's tail, the pool's write of each block) and take bytes /
bandwidth_i (an infinite bandwidth copies instantaneously). The step that runs the request's
first chunk waits for the last of them, overlapped with its compute layer by layer with
`overlap` (LMCache's layer-wise loading), added to it without. Stores (writes on compute, HBM's
victims written down) take the other direction of the link, a FIFO lane of their own that loads
do not wait for (the lanes are directional, as Dynamo's); a write to a private tier is not read
back before it lands (the block is still in HBM), one to the shared pool is readable by another
replica `latency + one block / bandwidth` after its stores start on the lane.

Protection (the full-pool rule) lasts one operation (an admission, a step's stores): each
opens with a fresh id that the request's blocks are pinned under in its tiers, so a block
pinned by an earlier operation of the same request is counted again.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from ..tiers.hierarchy import (NO_TIER, T_COUNTING, T_PINNED, T_REQ, T_SKIPPED, T_STAMP, T_WRITE, T_WRITES,
                               WRITE_ON_EVICT,
                               last_depth, last_j, pack_last, take, tier_begin, tier_has, tier_on, write_down1)
from ..tiers.request import store1, store2, store3, tier_pin, touch_request
from ..tiers.spec import build_tier
from .state import C_LOADED

NOWHERE = np.int64(1) << 62  # an HBM front past every block: tier_pin counts no lookups
STAMP_BITS = 16  # Tier.owner: (microseconds << STAMP_BITS) | replica
# Below.rc columns, per replica: skipped writes per tier, pool blocks another replica wrote
RC_SKIP, RC_FOREIGN = 0, 3
N_RC = 4
# Below.first rows, per request at its first admission: blocks from HBM, from tier 1..3, and
# of the shared pool's, those another replica wrote
FIRST_HBM, FIRST_FOREIGN = 0, 4
# Below.flag bits per request: its request counted in seen, a refused store counted
F_SEEN, F_REFUSED = 1, 2


class Below(NamedTuple):
    """One replica's lower tiers (NO_TIER where absent) and its links. serve hands the loop
    a tuple of these, one per replica: a shared tier is the same Tier in every replica's, and
    the arrays not per replica are the same arrays in all. (One replica's view, not all the
    replicas' tiers in one record: every compiled function that took the fleet's tiers paid
    for their whole type, and a 16-replica tuple of them would not compile in 25 minutes.)"""

    t1: object
    t2: object
    t3: object
    seen: np.ndarray  # int32[U] (or [1]): requests that computed a block here (after_hits)
    last: np.ndarray  # int64[U] (or [1]): each block's last access and depth (hierarchy.pack_last)
    bw: np.ndarray  # float64[3]: each tier's bandwidth, bytes/s (inf: instantaneous)
    lat: np.ndarray  # float64[3]: each tier's latency to the first byte, s
    block_bytes: float  # KV bytes of one block
    overlap: bool  # loads overlap the step's compute (max) rather than add to it
    pool: int  # the shared tier's slot (1-3), 0 without one
    lane: np.ndarray  # float64[3]: when this replica's link to each tier is free for loads
    wlane: np.ndarray  # float64[3]: when its link to each tier is free for stores (the other direction)
    level: np.ndarray  # int8[A] (or [1]): per prompt position at its admission: -1 HBM, 0 computed, i tier i
    depth: np.ndarray  # int32[A] (or [1]): each access's position in its request
    cur: np.ndarray  # int64[N] (or [1]): a request's first full prompt block not yet offered to the tiers
    flag: np.ndarray  # int8[N] (or [1]): F_SEEN, F_REFUSED
    first: np.ndarray  # int64[5, N] (or [5, 1]): FIRST_* blocks at the first admission
    rc: np.ndarray  # int64[N_RC]: this replica's counts (RC_*)
    wait: np.ndarray  # float64[3]: per tier, seconds this replica's requests waited for their loads
    scr: np.ndarray  # int8[max request blocks]: a stretch's levels, for the store
    op: np.ndarray  # int64[1]: the last operation's id (what its blocks are pinned under)


def no_tiers() -> tuple:
    """The flat replay's: no tier anywhere (the tier code compiles away); one view serves
    every replica (the loop reads views[q % len(views)])."""
    z = np.zeros(1, np.int64)
    return (Below(NO_TIER, NO_TIER, NO_TIER, np.zeros(1, np.int32), z.copy(), np.ones(3), np.zeros(3), 1.0, True, 0,
                  np.zeros(3), np.zeros(3), np.zeros(1, np.int8), np.zeros(1, np.int32), z.copy(), np.zeros(1, np.int8),
                  np.zeros((5, 1), np.int64), np.zeros(N_RC, np.int64), np.zeros(3), np.zeros(1, np.int8), z.copy()),)


def build_below(specs, ext, cost, seed: int, n_rep: int, bw, lat, block_bytes: float, overlap: bool) -> tuple:
    """Each replica's view of its tiers over the engine's view of the trace `ext`: a private
    tier per replica, a shared one built once and placed in every replica's view."""
    if not specs:
        return no_tiers()
    slots = []
    for s in specs:
        if s.shared:
            slots.append((build_tier(s, ext, cost, seed, stamped=True),) * n_rep)
        else:
            slots.append(tuple(build_tier(s, ext, cost, seed + q) for q in range(n_rep)))
    slots += [(NO_TIER,) * n_rep] * (3 - len(slots))
    U, A, N = ext.n_unique, ext.n_accesses, ext.n_requests
    after_hits = any(s.admit.strip().lower().startswith("after_hits") for s in specs)
    depth = (np.arange(A, dtype=np.int64) - np.repeat(ext.req_offsets[:-1], np.diff(ext.req_offsets))).astype(np.int32)
    pool = next((i + 1 for i, s in enumerate(specs) if s.shared), 0)
    seen = np.zeros((n_rep, U if after_hits else 1), np.int32)
    lane, wlane, wait = np.zeros((n_rep, 3)), np.zeros((n_rep, 3)), np.zeros((n_rep, 3))
    rc = np.zeros((n_rep, N_RC), np.int64)
    shared = (np.zeros(U, np.int64), np.asarray(bw, np.float64), np.asarray(lat, np.float64), float(block_bytes),
              bool(overlap), pool)
    per_request = (np.zeros(max(A, 1), np.int8), depth, np.zeros(N, np.int64), np.zeros(N, np.int8),
                   np.zeros((5, N), np.int64))
    # operation ids start past every request index, so no pin left by simulate-style ids matches one
    scr, op = np.zeros(max(int(ext.max_request_blocks), 1), np.int8), np.array([N], np.int64)
    return tuple(Below(slots[0][q], slots[1][q], slots[2][q], seen[q], *shared, lane[q], wlane[q], *per_request, rc[q],
                       wait[q], scr, op) for q in range(n_rep))


# ------------------------------------------------------------------ an operation's context
@hook_njit
def _open1(t, r, op, stamp, rc, i):
    if tier_on(t):
        if r >= 0:
            tier_begin(t, r, 1, True)  # its clock (frequency admission)
            t.c[T_REQ] = op
        else:  # on nobody's behalf: nothing protected (a frequency filter keeps its last tick)
            t.c[T_COUNTING] = 1
            t.c[T_REQ] = -2
        t.c[T_PINNED] = 0
        t.c[T_STAMP] = stamp
        rc[RC_SKIP + i] -= t.c[T_SKIPPED]  # the tier's refusals during the operation are q's


@hook_njit
def _close1(t, rc, i):
    if tier_on(t):
        t.c[T_REQ] = -2
        t.c[T_PINNED] = 0
        rc[RC_SKIP + i] += t.c[T_SKIPPED]


@hook_njit
def _open(lo, q, r, now):
    """Replica q operates on request r's behalf at time `now` (r < 0: on nobody's): its
    writes are stamped with q and the time they start on the shared pool's link (now, or
    when the link's stores before them are done), r's blocks are protected under a fresh id."""
    at = now if lo.pool == 0 else max(now, lo.wlane[lo.pool - 1])
    stamp = (np.int64(at * 1e6) << STAMP_BITS) | q
    lo.op[0] += 1
    op = lo.op[0]
    _open1(lo.t1, r, op, stamp, lo.rc, 0)
    _open1(lo.t2, r, op, stamp, lo.rc, 1)
    _open1(lo.t3, r, op, stamp, lo.rc, 2)


@hook_njit
def _close(lo):
    _close1(lo.t1, lo.rc, 0)
    _close1(lo.t2, lo.rc, 1)
    _close1(lo.t3, lo.rc, 2)


@hook_njit
def _pin(lo, reqs, r, front):
    """r's full prompt blocks held by q's tiers are protected for the operation; a
    lookups=N tier counts a lookup of each block from `front` on."""
    s = reqs.offs[r]
    e = s + reqs.full[r]
    op = lo.op[0]
    tier_pin(lo.t1, reqs.blocks, s, e, op, lo.depth, True, front)
    tier_pin(lo.t2, reqs.blocks, s, e, op, lo.depth, True, front)
    tier_pin(lo.t3, reqs.blocks, s, e, op, lo.depth, True, front)


@hook_njit
def _touch(lo, reqs, r):
    """touch=request tiers refresh r's full prompt blocks, deepest first."""
    s = reqs.offs[r]
    e = s + reqs.full[r]
    touch_request(lo.t1, reqs.blocks, s, e, lo.depth, True)
    touch_request(lo.t2, reqs.blocks, s, e, lo.depth, True)
    touch_request(lo.t3, reqs.blocks, s, e, lo.depth, True)


@hook_njit
def _writes(t):
    return t.c[T_WRITES] if tier_on(t) else 0


@hook_njit
def _store(lo, i, n, now):
    """n blocks stored to tier i (1-3) over the link's store direction: it is busy until
    they are through (a FIFO lane; nothing waits for it but a shared pool's readers)."""
    if n > 0:
        lo.wlane[i - 1] = max(now, lo.wlane[i - 1]) + n * lo.block_bytes / lo.bw[i - 1]


@hook_njit
def _stored(lo, w1, w2, w3, now):
    """The link's share of the blocks each tier took since its write counts were w1-w3."""
    _store(lo, 1, _writes(lo.t1) - w1, now)
    _store(lo, 2, _writes(lo.t2) - w2, now)
    _store(lo, 3, _writes(lo.t3) - w3, now)


# ------------------------------------------------------------------ HBM's victims
@hook_njit
def evicted(lo, q, v, now):
    """Replica q's HBM evicted block v: a first tier that takes evictions takes it (and its
    victims go on down); within an admission, the admitted request's blocks stay protected."""
    t1 = lo.t1
    if tier_on(t1) and t1.cfg[T_WRITE] == WRITE_ON_EVICT:
        own = t1.c[T_REQ] != -2  # inside an operation opened for a request
        if not own:
            _open(lo, q, -2, now)
        at = lo.last[v]
        w1, w2, w3 = _writes(t1), _writes(lo.t2), _writes(lo.t3)
        write_down1(t1, lo.t2, lo.t3, v, last_j(at), last_depth(at), lo.seen, lo.last, WRITE_ON_EVICT)
        _stored(lo, w1, w2, w3, now)
        if not own:
            _close(lo)


# ------------------------------------------------------------------ admission
@hook_njit
def _holds(lo, b):
    """The first of q's tiers (1-3) that holds block b, 0 if none."""
    if tier_has(lo.t1, b):
        return 1
    if tier_has(lo.t2, b):
        return 2
    if tier_has(lo.t3, b):
        return 3
    return 0


@hook_njit
def found(lo, cache, reqs, q, r, h, limit):
    """How many blocks right after r's HBM prefix h (up to `limit`) q's tiers hold, stopping
    at one in HBM (vLLM's connector extends the GPU hit with a contiguous run)."""
    s = reqs.offs[r]
    k = h
    while k < limit and not cache.resident[q, reqs.blocks[s + k]] and _holds(lo, reqs.blocks[s + k]) > 0:
        k += 1
    return k - h


@hook_njit
def _lane(lo, i, n, ready, now):
    """n blocks loaded from tier i (1-3) over q's link, no earlier than `ready`: when the last arrives."""
    start = max(now + lo.lat[i - 1], lo.lane[i - 1], ready)
    end = start + n * lo.block_bytes / lo.bw[i - 1]  # n x b / inf = 0: instantaneous
    lo.lane[i - 1] = end
    lo.wait[i - 1] += end - now
    return end


@hook_njit
def _stamp(lo, b):
    if lo.pool == 1:
        return lo.t1.owner[b]
    if lo.pool == 2:
        return lo.t2.owner[b]
    return lo.t3.owner[b]


@hook_njit
def admitting(lo, cache, reqs, q, r, h, l, now):
    """Request r is admitted on replica q with h blocks from HBM and the next l from its tiers:
    open the operation (closed by `admitted`), load, touch, protect, mark where each block came
    from, and set how long r's first step waits for its loads."""
    s = reqs.offs[r]
    F = reqs.full[r]
    _open(lo, q, r, now)
    first = reqs.hit_first[r] < 0
    if first:
        lo.first[FIRST_HBM, r] = h
    for k in range(h, h + l):  # all looked up before any is loaded (a promotion may evict one), as simulate
        lo.level[s + k] = _holds(lo, reqs.blocks[s + k])
    n1 = 0
    n2 = 0
    n3 = 0
    ready = 0.0
    for i in range(l):  # deepest first, as simulate's tail-first walk takes them
        k = h + l - 1 - i
        j = s + k
        b = reqs.blocks[j]
        lv = lo.level[j]
        if lv == lo.pool:
            x = _stamp(lo, b)
            if (x & ((1 << STAMP_BITS) - 1)) != q:
                lo.rc[RC_FOREIGN] += 1
                if first:
                    lo.first[FIRST_FOREIGN, r] += 1
            ready = max(ready, (x >> STAMP_BITS) * 1e-6 + lo.lat[lv - 1] + lo.block_bytes / lo.bw[lv - 1])
        take(lo.t1, lo.t2, lo.t3, b, j, k, lv, lo.seen, lo.last)
        cache.c[q, C_LOADED + lv - 1] += 1
        if lv == 1:
            n1 += 1
        elif lv == 2:
            n2 += 1
        else:
            n3 += 1
    if first:
        lo.first[1, r] = n1
        lo.first[2, r] = n2
        lo.first[3, r] = n3
    end = now
    if n1:
        end = max(end, _lane(lo, 1, n1, ready if lo.pool == 1 else 0.0, now))
    if n2:
        end = max(end, _lane(lo, 2, n2, ready if lo.pool == 2 else 0.0, now))
    if n3:
        end = max(end, _lane(lo, 3, n3, ready if lo.pool == 3 else 0.0, now))
    reqs.load_s[r] = end - now
    for k in range(F):
        j = s + k
        lo.last[reqs.blocks[j]] = pack_last(j, k)
        if k < h:
            lo.level[j] = -1
        elif k >= h + l:
            lo.level[j] = 0
    lo.cur[r] = 0  # a readmission (after a preemption) offers its blocks again
    _touch(lo, reqs, r)  # after the loads, as simulate: a promotion's victim is chosen before the touch
    _pin(lo, reqs, r, h)


@hook_njit
def admitted(lo):
    _close(lo)


# ------------------------------------------------------------------ step end: stores
@hook_njit
def _skipped(t):
    return t.c[T_SKIPPED] if tier_on(t) else 0


@hook_njit
def _unskip(t, n):
    if tier_on(t):
        t.c[T_SKIPPED] -= n


@hook_njit
def step_done(lo, reqs, q, r, now, bt):
    """r's step on replica q ended at `now` with reqs.comp[r] tokens computed: offer the full
    prompt blocks computed since its cursor to the tiers that write on compute (deepest
    first), touch r's blocks, and count r's request once its prompt is computed. A refused
    stretch keeps the cursor, is offered again after the next step, and counts as skipped
    once."""
    s = reqs.offs[r]
    F = reqs.full[r]
    e = min(min(reqs.comp[r], reqs.prompt[r]) // bt, F)
    a = lo.cur[r]
    done = reqs.comp[r] >= reqs.prompt[r] and (lo.flag[r] & F_SEEN) == 0
    if e <= a and not done:
        return
    t1 = lo.t1
    t2 = lo.t2
    t3 = lo.t3
    seen = lo.seen
    _open(lo, q, r, now)
    if e > a:
        _pin(lo, reqs, r, NOWHERE)
        for k in range(a, e):
            lo.scr[k - a] = lo.level[s + k]
        k1 = _skipped(t1)
        k2 = _skipped(t2)
        k3 = _skipped(t3)
        w1, w2, w3 = _writes(t1), _writes(t2), _writes(t3)
        store1(t1, t2, t3, reqs.blocks, s + a, s + e, lo.scr, seen, lo.last, lo.depth, True, True)
        store2(t2, t3, reqs.blocks, s + a, s + e, lo.scr, seen, lo.last, lo.depth, True, True)
        store3(t3, reqs.blocks, s + a, s + e, lo.scr, seen, lo.last, lo.depth, True, True)
        _stored(lo, w1, w2, w3, now)
        d1 = _skipped(t1) - k1
        d2 = _skipped(t2) - k2
        d3 = _skipped(t3) - k3
        if d1 + d2 + d3 > 0:
            if lo.flag[r] & F_REFUSED:
                _unskip(t1, d1)
                _unskip(t2, d2)
                _unskip(t3, d3)
            lo.flag[r] |= F_REFUSED
        else:
            lo.cur[r] = e
            lo.flag[r] &= ~F_REFUSED
        _touch(lo, reqs, r)
    if done:
        lo.flag[r] |= F_SEEN
        if seen.shape[0] > 1:
            for k in range(F):
                b = reqs.blocks[s + k]
                if seen[b] < 2147483647:
                    seen[b] += 1
    _close(lo)


# ------------------------------------------------------------------ what a router sees
@hook_njit
def _run(t, blocks, s, k, n):
    """How many of blocks s+k, s+k+1, ... (up to position n) tier t holds in a row."""
    m = k
    if tier_on(t):
        while m < n and t.resident[blocks[s + m]]:
            m += 1
    return m - k


@hook_njit
def sight(views, v, reqs, r, n_rep):
    """Per replica, past the prefix the router reads (v.ov, its exact view of HBM; v.ap on the
    approximate view): the blocks its private tiers continue it with (v.hx: the first, v.dx:
    the second) and those the shared pool holds from that prefix on (v.px), each a run of
    consecutive blocks. The tiers are read as they are (no event lag)."""
    s = reqs.offs[r]
    n = reqs.full[r]
    approx = v.seen.shape[1] > 1
    for q in range(n_rep):  # the shared pool is never the first tier (sim_core.tiers.spec)
        lo = views[q % len(views)]
        k = v.ap[q] if approx else v.ov[q]
        hx = _run(lo.t1, reqs.blocks, s, k, n)
        dx = 0
        px = 0
        if lo.pool != 2:
            dx = _run(lo.t2, reqs.blocks, s, k + hx, n)
        if lo.pool == 2:
            px = _run(lo.t2, reqs.blocks, s, k, n)
        elif lo.pool == 3:
            px = _run(lo.t3, reqs.blocks, s, k, n)
        v.hx[q] = hx
        v.dx[q] = dx
        v.px[q] = px
