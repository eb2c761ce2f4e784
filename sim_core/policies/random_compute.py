"""RandomCompute: sampled compute-aware eviction (paper sec. 5.2).

On every eviction `samples` resident, non-pinned blocks are drawn uniformly at random
(with replacement) and the one with the lowest

    Score(i) = ComputeIntensity(i) / TimeSinceLastAccess(i)

is evicted: cheap (shallow) and long-idle blocks go first. Definitions (the paper leaves
them open, these are our choices):

  ComputeIntensity(i)    cost_per_depth[d] of the cost model the pass optimises, d being
                         i's depth at its latest access (hashes are prefix-chained, so in
                         practice d is a property of the block).
  TimeSinceLastAccess(i) now - (time of i's latest access), with `clock`:
                           "access"  (default) virtual time in block accesses: `now` is the
                                     access index the engine passes to evict (the current
                                     access in block mode, the request's first access in
                                     request mode); never 0 for an evictable block;
                           "seconds" trace.arrival_s of the requests; a block last used at
                                     the current arrival time has an infinite score (kept).
  ties                   lower score first, then the older latest access (smaller access
                         index), which is unique: runs are fully deterministic.

Parameters:
  samples  (default 64)  blocks sampled per eviction. When at most `samples` blocks are
           evictable the choice is exact (a scan), so samples >= capacity is the exact
           minimum score, i.e. exactly LRU under the uniform cost model (tested against
           libCacheSim's LRU); samples=1 is uniform random eviction (tested against
           libCacheSim's Random). 64 keeps the sampled minimum within the lowest ~1.5% of
           scores on average (Redis-style approximated eviction uses 5-16; the paper does
           not give its sample size) at a cost of 64 random loads per eviction.
  clock    "access" | "seconds", see above.

Randomness: a private xorshift64* generator seeded from ctx.seed (same seed, same run;
independent of numba's global generator and of other policies replayed in the same
thread).

Data structures: resident blocks sit in a dense array `res` with positions `pos`
(swap-remove), so a uniform sample is one random index; each slot also carries its
block's latest access time and compute intensity (`sj`, `sc`, `stt`, moved with it), so
scoring a sample reads two small slot-indexed arrays instead of block-indexed ones. In request mode the blocks of
the current request are pinned; a pinned block met while sampling is "parked" at the
end of the dense array (outside the sampling range) until the next request, so the
sampler never draws it twice per request and stays O(samples) per eviction even when
one request fills most of the cache. Every hook is O(1); evict is O(samples).

The helpers below (pool_*, touch) are shared by partial_node.py, session.py and
s3fifo_compute.py: they operate on any state NamedTuple that has the fields of
RandomComputeState.
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from ..jit import njit  # noqa: F401  (configures numba's cache directory)
from .api import PolicySpec, register_hooks

# Hooks and their helpers never allocate, so they are compiled without NRT: with it, every
# non-inlined call pays reference-count updates (atomic increments and decrements) on each
# array of the state -- measured 40x slower for a 14-array state in block mode. Same
# options as sim_core.jit.njit otherwise (disk cache keyed by the sources, nogil).
hook_njit = numba.njit(cache=True, nogil=True, _nrt=False)

CLOCKS = ("access", "seconds")

# pinfo layout
P_N, P_M, P_PARK_R = 0, 1, 2
# cfg layout
C_SAMPLES, C_CLOCK = 0, 1

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def new_rng(seed: int, stream: int = 0) -> np.ndarray:
    """uint64[1] xorshift64* state from a seed (never zero)."""
    s = _splitmix64((int(seed) * 0x100000001B3 + stream) & _MASK64) or 0x2545F4914F6CDD1D
    return np.array([s], dtype=np.uint64)


@hook_njit
def rand_below(rng, n):
    """Uniform integer in [0, n) for 0 < n < 2**31 (xorshift64*, top 31 bits scaled)."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    z = x * np.uint64(2685821657736338717)
    return np.int64(((z >> np.uint64(33)) * np.uint64(n)) >> np.uint64(31))


def pool_arrays(ctx):
    """The fields every sampled policy shares (see RandomComputeState)."""
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
    return dict(
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


class RandomComputeState(NamedTuple):
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


def make_state(ctx) -> RandomComputeState:
    return RandomComputeState(**pool_arrays(ctx))


# ------------------------------------------------------------------ shared helpers
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
def pool_sync(st, r):
    """A new request (or block-mode access) un-parks the previous request's blocks."""
    if st.pinfo[P_PARK_R] != r:
        st.pinfo[P_M] = st.pinfo[P_N]
        st.pinfo[P_PARK_R] = r


@hook_njit
def _put(st, i, b):
    """Place block b in slot i (its per-slot keys travel with it)."""
    st.res[i] = b
    st.pos[b] = i
    st.sj[i] = st.lastj[b]
    st.sc[i] = st.ci[b]
    if st.cfg[C_CLOCK] == 1:
        st.stt[i] = st.lastt[b]


@hook_njit
def pool_add(st, b):
    n = st.pinfo[P_N]
    _put(st, n, b)
    if st.pinfo[P_M] == n:  # nothing parked: the new block is sampleable
        st.pinfo[P_M] = n + 1
    # else it joins the parked tail: only the current request inserts while blocks
    # are parked, and its blocks are pinned anyway
    st.pinfo[P_N] = n + 1


@hook_njit
def pool_add_sampleable(st, b):
    """pool_add for a block that joins while the current request's blocks are parked
    and is not one of them (S3-FIFO-Compute promotes reused small-queue blocks during
    evictions): it goes before the parked tail, so the sampler can draw it."""
    n = st.pinfo[P_N]
    m = st.pinfo[P_M]
    if m < n:
        _put(st, n, st.res[m])  # the first parked block moves to the end
    _put(st, m, b)
    st.pinfo[P_M] = m + 1
    st.pinfo[P_N] = n + 1


@hook_njit
def pool_remove(st, b):
    res = st.res
    pos = st.pos
    p = pos[b]
    n = st.pinfo[P_N]
    m = st.pinfo[P_M]
    if p < m:
        _put(st, p, res[m - 1])
        if m < n:
            _put(st, m - 1, res[n - 1])
        st.pinfo[P_M] = m - 1
    else:
        _put(st, p, res[n - 1])
    st.pinfo[P_N] = n - 1
    pos[b] = -1


@hook_njit
def _park(st, i):
    """Move the sampleable block at index i to the parked tail."""
    m = st.pinfo[P_M] - 1
    b = st.res[i]
    _put(st, i, st.res[m])
    _put(st, m, b)
    st.pinfo[P_M] = m


@hook_njit
def _now_t(st, j, r):
    if st.cfg[C_CLOCK] == 0:
        return 0.0
    if r < 0:  # block mode: the request holding access j
        off = st.offsets
        lo = 0
        hi = off.shape[0] - 1
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if off[mid] <= j:
                lo = mid
            else:
                hi = mid
        r = lo
    return st.arrival[r]


@hook_njit
def slot_score(st, i, j, now_t):
    """Score of the block in slot i (reads only the slot arrays: cache friendly)."""
    if st.cfg[C_CLOCK] == 0:
        age = float(j - st.sj[i])
    else:
        age = now_t - st.stt[i]
    if age <= 0.0:
        return np.inf
    return st.sc[i] / age


@hook_njit
def pool_pick(st, j, r, pin):
    """Lowest-score block among `samples` uniform draws of resident non-pinned blocks
    (exact scan when at most `samples` are sampleable); -1 if none. Not removed."""
    pool_sync(st, r)
    now_t = _now_t(st, j, r)
    k = st.cfg[C_SAMPLES]
    check_pin = r >= 0  # block mode (r = -2) pins nothing
    best = -1
    bs = np.inf
    bj = 0
    if st.pinfo[P_M] <= k:
        i = 0
        while i < st.pinfo[P_M]:
            if check_pin and pin[st.res[i]] == r:
                _park(st, i)
                continue
            s = slot_score(st, i, j, now_t)
            if best < 0 or s < bs or (s == bs and st.sj[i] < bj):
                best = st.res[i]
                bs = s
                bj = st.sj[i]
            i += 1
        return best
    cnt = 0
    while cnt < k and st.pinfo[P_M] > 0:
        i = rand_below(st.rng, st.pinfo[P_M])
        if check_pin and pin[st.res[i]] == r:
            _park(st, i)
            continue
        s = slot_score(st, i, j, now_t)
        if best < 0 or s < bs or (s == bs and st.sj[i] < bj):
            best = st.res[i]
            bs = s
            bj = st.sj[i]
        cnt += 1
    return best


# ------------------------------------------------------------------ hooks
@hook_njit
def on_hit(st, b, j, r, d):
    touch(st, b, j, r, d)


@hook_njit
def on_insert(st, b, j, r, d):
    pool_sync(st, r)
    pool_add(st, b)
    touch(st, b, j, r, d)


@hook_njit
def evict(st, j, r, pin):
    v = pool_pick(st, j, r, pin)
    if v >= 0:
        pool_remove(st, v)
    return v


register_hooks(RandomComputeState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "random_compute", make_state,
    "Sample `samples` resident blocks, evict the lowest ComputeIntensity / TimeSinceLastAccess.",
    defaults={"samples": 64, "clock": "access"}, cost_aware=True, family="compute_aware")
