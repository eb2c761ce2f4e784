"""The sampling pool of RandomCompute and the policies built on it (partial_node,
random_compute_session, s3fifo_compute's main cache).

The pool holds resident blocks and draws `samples` of them uniformly at random (with
replacement) per eviction, picking the lowest

    Score(i) = ComputeIntensity(i) / TimeSinceLastAccess(i)

(see policies/random_compute.py for the definitions, the clocks and the tie rule).

Layout: resident blocks sit in a dense array `res` with positions `pos` (swap-remove), so
a uniform sample is one random index; each slot also carries its block's latest access
time and compute intensity (`sj`, `sc`, `stt`, moved with it), so scoring a sample reads
two small slot-indexed arrays instead of block-indexed ones. In request mode the blocks
of the current request are pinned; a pinned block met while sampling is "parked" at the
end of the dense array (outside the sampling range) until the next request, so the
sampler never draws it twice per request and stays O(samples) per eviction even when
one request fills most of the cache. Every function is O(1) but pick, O(samples).

A policy keeps a Pool as one field of its state (numba NamedTuples cannot inherit) and
passes it to these functions; random_compute's state is a Pool itself, and touch,
pool_insert and pool_evict are its hooks (so their first argument is named `st`, as the
engine's hook overloads require).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from .pins import keeps_cursor
from .rng import _STAR, _step, new_rng

CLOCKS = ("access", "seconds")

# pinfo layout
P_N, P_M, P_PARK_R = 0, 1, 2
# cfg layout
C_SAMPLES, C_CLOCK = 0, 1


class Pool(NamedTuple):
    res: np.ndarray      # int32[cap+1] dense array of resident blocks
    pos: np.ndarray      # int64[U] index in res, -1 = not resident
    sj: np.ndarray       # int64[cap+1] lastj of the block in each slot of res
    sc: np.ndarray       # float64[cap+1] ci of the block in each slot
    stt: np.ndarray      # float64[cap+1] lastt of the block in each slot (clock="seconds")
    pinfo: np.ndarray    # int64[3]: n resident, m = sampling range res[:m], request of parked
    lastj: np.ndarray    # int64[U] access index of the latest access
    lastt: np.ndarray    # float64[U] arrival_s of the latest access (clock="seconds")
    ci: np.ndarray       # float64[U] compute intensity at the latest access
    cost: np.ndarray     # float64[max_depth]
    rng: np.ndarray      # uint64[1]
    cfg: np.ndarray      # int64[2]: samples, clock (0 access, 1 seconds)
    arrival: np.ndarray  # float64[R] (clock="seconds")
    offsets: np.ndarray  # int64[R+1] (clock="seconds")


def new_pool(ctx) -> Pool:
    """An empty pool for the replay described by ctx (samples and clock from ctx.params)."""
    t = ctx.trace
    U = t.n_unique
    samples = int(ctx.params.get("samples", 64))
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    clock = ctx.params.get("clock", "access")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    cost = np.ascontiguousarray(ctx.cost_per_depth, dtype=np.float64)
    if len(cost) and not (np.all(np.isfinite(cost)) and cost.min() > 0):
        raise ValueError("compute-aware policies need finite, positive costs per depth")
    seconds = clock == "seconds"
    slots = max(1, min(U, int(ctx.capacity))) + 1
    return Pool(
        res=np.empty(slots, np.int32),
        pos=np.full(U, -1, np.int64),
        sj=np.zeros(slots, np.int64),
        sc=np.zeros(slots, np.float64),
        stt=np.zeros(slots if seconds else 1, np.float64),
        pinfo=np.array([0, 0, -3], np.int64),
        lastj=np.zeros(U, np.int64),
        lastt=np.zeros(U if seconds else 1, np.float64),
        ci=np.zeros(U, np.float64),
        cost=cost,
        rng=new_rng(ctx.seed),
        cfg=np.array([samples, 1 if seconds else 0], np.int64),
        arrival=t.arrival_s if seconds else np.zeros(1, np.float64),
        offsets=t.req_offsets if seconds else np.zeros(2, np.int64),
    )


@hook_njit
def touch(st, b, j, r, d):
    """Record an access of b (block-indexed, and in b's slot if it is in the pool)."""
    c = st.cost[d]
    st.lastj[b] = j
    st.ci[b] = c
    i = st.pos[b]
    if i >= 0:
        st.sj[i] = j
        st.sc[i] = c
    if st.cfg[C_CLOCK] == 1:
        t = st.arrival[r]
        st.lastt[b] = t
        if i >= 0:
            st.stt[i] = t


@hook_njit
def pool_sync(p, r):
    """A new request (or block-mode access) un-parks the previous request's blocks; so
    does every call under the serving replay's shared pin, whose pins change between calls."""
    if p.pinfo[P_PARK_R] != r or not keeps_cursor(r):
        p.pinfo[P_M] = p.pinfo[P_N]
        p.pinfo[P_PARK_R] = r


@hook_njit
def _put(p, i, b):
    """Place block b in slot i (its per-slot keys travel with it)."""
    p.res[i] = b
    p.pos[b] = i
    p.sj[i] = p.lastj[b]
    p.sc[i] = p.ci[b]
    if p.cfg[C_CLOCK] == 1:
        p.stt[i] = p.lastt[b]


@hook_njit
def pool_add(p, b):
    n = p.pinfo[P_N]
    _put(p, n, b)
    if p.pinfo[P_M] == n:  # nothing parked: the new block is sampleable
        p.pinfo[P_M] = n + 1
    # else it joins the parked tail: only the current request inserts while blocks
    # are parked, and its blocks are pinned anyway
    p.pinfo[P_N] = n + 1


@hook_njit
def pool_add_sampleable(p, b):
    """pool_add for a block that joins while the current request's blocks are parked
    and is not one of them (S3-FIFO-Compute promotes reused small-queue blocks during
    evictions): it goes before the parked tail, so the sampler can draw it."""
    n = p.pinfo[P_N]
    m = p.pinfo[P_M]
    if m < n:
        _put(p, n, p.res[m])  # the first parked block moves to the end
    _put(p, m, b)
    p.pinfo[P_M] = m + 1
    p.pinfo[P_N] = n + 1


@hook_njit
def pool_remove(p, b):
    res = p.res
    pos = p.pos
    i = pos[b]
    n = p.pinfo[P_N]
    m = p.pinfo[P_M]
    if i < m:
        _put(p, i, res[m - 1])
        if m < n:
            _put(p, m - 1, res[n - 1])
        p.pinfo[P_M] = m - 1
    else:
        _put(p, i, res[n - 1])
    p.pinfo[P_N] = n - 1
    pos[b] = -1


@hook_njit
def _park(p, i):
    """Move the sampleable block at index i to the parked tail."""
    m = p.pinfo[P_M] - 1
    b = p.res[i]
    _put(p, i, p.res[m])
    _put(p, m, b)
    p.pinfo[P_M] = m


@hook_njit
def _now_t(p, j, r):
    if p.cfg[C_CLOCK] == 0:
        return 0.0
    if r < 0:  # block mode: the request holding access j
        off = p.offsets
        lo = 0
        hi = off.shape[0] - 1
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if off[mid] <= j:
                lo = mid
            else:
                hi = mid
        r = lo
    return p.arrival[r]


@hook_njit
def slot_score(p, i, j, now_t):
    """Score of the block in slot i (reads only the slot arrays: cache friendly)."""
    if p.cfg[C_CLOCK] == 0:
        age = float(j - p.sj[i])
    else:
        age = now_t - p.stt[i]
    if age <= 0.0:
        return np.inf
    return p.sc[i] / age


@hook_njit
def pool_pick(p, j, r, pin):
    """Lowest-score block among `samples` uniform draws of resident non-pinned blocks
    (exact scan when at most `samples` are sampleable); -1 if none. Not removed."""
    pool_sync(p, r)
    now_t = _now_t(p, j, r)
    k = p.cfg[C_SAMPLES]
    check_pin = r >= 0  # block mode (r = -2) pins nothing
    best = -1
    bs = np.inf
    bj = 0
    exact = p.pinfo[P_M] <= k  # few sampleable blocks: scan them all instead
    i = 0  # scan position (exact)
    cnt = 0  # draws scored (sampled)
    x = p.rng[0]
    while True:
        if exact:
            if i >= p.pinfo[P_M]:
                break
            c = i
        else:
            if cnt >= k or p.pinfo[P_M] <= 0:
                break
            x = _step(x)  # below(), with the state in a register until the loop ends
            c = np.int64((((x * _STAR) >> np.uint64(33)) * np.uint64(p.pinfo[P_M])) >> np.uint64(31))
        if check_pin and pin[p.res[c]] == r:
            _park(p, c)  # slot c now holds another block: score it next (exact)
            continue
        s = slot_score(p, c, j, now_t)
        if best < 0 or s < bs or (s == bs and p.sj[c] < bj):
            best = p.res[c]
            bs = s
            bj = p.sj[c]
        i += 1
        cnt += 1
    p.rng[0] = x
    return best


@hook_njit
def pool_insert(st, b, j, r, d):
    """A missing block b was inserted: it joins the pool (the usual on_insert)."""
    pool_sync(st, r)
    pool_add(st, b)
    touch(st, b, j, r, d)


@hook_njit
def pool_evict(st, j, r, pin):
    """Pick a victim and remove it from the pool; -1 if nothing is evictable."""
    v = pool_pick(st, j, r, pin)
    if v >= 0:
        pool_remove(st, v)
    return v
