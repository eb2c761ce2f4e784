"""What a router sees, and the bookkeeping every router shares.

A router decides from its own counters, kept as requests are routed, reach their first
token and finish (always fresh, as a router's own counters are), and from a view of
each replica's cache:

exact        the blocks the replica's index holds (cache.resident): what KV events tell
             Dynamo's router and llm-d's precise scorer; blocks enter the index when they
             are scheduled, as in vLLM. With an event lag d > 0 the router sees the index
             as it was at t - d, from the time each block last entered and left it (a
             block evicted and entered again within d counts as absent)
approximate  the blocks this router has sent to the replica (`seen`, with the time it
             last did), as SGLang's cache-aware tree and llm-d's estimating scorer build
             from their own routing history; an entry older than a TTL no longer counts

Engine load a router reads (waiting, running, KV usage) comes from the replicas' state
at the moment of routing: no scrape interval (docs/fleet.md lists what that leaves out).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...jit import hook_njit

# View.rs: int64 scratch of the router
RS_ROUTED, RS_LCG, RS_REGRET = range(3)
RING_POINTS = 160  # virtual nodes per replica on a consistent-hash ring (SGLang's consistent_hash)


class View(NamedTuple):
    p: np.ndarray  # float64[8]: the router's parameters, in its spec's order
    rs: np.ndarray  # int64[3]: arrivals routed, LCG state, regret tokens
    infl: np.ndarray  # int64[Q]: requests routed and not finished
    pf: np.ndarray  # int64[Q]: uncached prompt tokens of routed requests before their first token
    blk: np.ndarray  # int64[Q]: distinct KV blocks of the routed, unfinished requests' prompts
    bref: np.ndarray  # int32[Q, U] (or [Q, 1]): routed, unfinished requests holding block b
    seen: np.ndarray  # float64[Q, U] (or [Q, 1]): last time block b was routed to q, NaN: never
    ring_h: np.ndarray  # uint64[V]: consistent-hash ring points, sorted
    ring_q: np.ndarray  # int32[V]: their replicas
    r_pf: np.ndarray  # int64[N]: what each request added to pf
    ro: np.ndarray  # int64[N]: the requests in the order they were routed (the fleet ceiling's order)
    ov: np.ndarray  # int64[Q]: scratch: the request's prefix blocks on each replica (exact view, lagged)
    tr: np.ndarray  # int64[Q]: scratch: the same now (what regret counts)
    ap: np.ndarray  # int64[Q]: scratch: the same on the approximate view
    ttl: np.ndarray  # float64[1]: seconds an approximate entry counts
    lag: np.ndarray  # float64[1]: seconds KV events take to reach the router (exact view)
    sc: np.ndarray  # float64[Q]: scratch: a score per replica
    # with lower tiers (sim_core.serving.tiers.sight), past the prefix the router reads (ov, or ap
    # on the approximate view): the run of blocks each replica's first and second private tier
    # continue it with, and the run the shared pool holds from it on
    hx: np.ndarray  # int64[Q]
    dx: np.ndarray  # int64[Q]
    px: np.ndarray  # int64[Q]


def _mix(x):
    """splitmix64's finaliser: a well-spread 64-bit hash of an integer."""
    x = (x + np.uint64(0x9E3779B97F4A7C15))
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


mix = hook_njit(_mix)


def new_view(params: np.ndarray, seed: int, n_rep: int, n_unique: int, n_req: int, tracks_blocks: bool,
             approximate: bool, ttl: float, lag: float) -> View:
    """A router's view before the first arrival. The block arrays are full size only for
    the routers that read them."""
    rs = np.array([0, (int(seed) * 0x9E3779B9 + 0x2545F491) % 2**62, 0], np.int64)
    with np.errstate(over="ignore"):  # the hash wraps modulo 2^64 by design
        pts = np.array([_mix(np.uint64(q * 1_000_003 + v)) for q in range(n_rep) for v in range(RING_POINTS)],
                       np.uint64)
    owner = np.repeat(np.arange(n_rep, dtype=np.int32), RING_POINTS)
    o = np.argsort(pts, kind="stable")
    U = n_unique if tracks_blocks else 1
    S = n_unique if approximate else 1
    return View(params.astype(np.float64), rs, np.zeros(n_rep, np.int64), np.zeros(n_rep, np.int64),
                np.zeros(n_rep, np.int64), np.zeros((n_rep, U), np.int32), np.full((n_rep, S), np.nan),
                pts[o], owner[o], np.zeros(n_req, np.int64), np.full(n_req, -1, np.int64), np.zeros(n_rep, np.int64), np.zeros(n_rep, np.int64),
                np.zeros(n_rep, np.int64), np.array([ttl]), np.array([lag]), np.zeros(n_rep),
                np.zeros(n_rep, np.int64), np.zeros(n_rep, np.int64), np.zeros(n_rep, np.int64))


@hook_njit
def rand_below(v, n):
    """A seeded uniform integer in [0, n): Knuth's MMIX LCG (wraps modulo 2^64), high bits."""
    x = v.rs[RS_LCG] * 6364136223846793005 + 1442695040888963407
    v.rs[RS_LCG] = x
    return ((x >> 33) & 0x7FFFFFFF) % n


@hook_njit
def least(load, n_rep):
    """The replica with the smallest load, the lowest index on ties."""
    best = 0
    for k in range(1, n_rep):
        if load[k] < load[best]:
            best = k
    return best


@hook_njit
def span(load, n_rep):
    """(smallest, largest) load over the replicas."""
    lo = load[0]
    hi = load[0]
    for k in range(1, n_rep):
        lo = min(lo, load[k])
        hi = max(hi, load[k])
    return lo, hi


@hook_njit
def ring_pick(v, key):
    """The replica owning the first ring point at or after hash(key), wrapping."""
    h = mix(np.uint64(key))
    lo = 0
    hi = v.ring_h.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if v.ring_h[mid] < h:
            lo = mid + 1
        else:
            hi = mid
    return v.ring_q[lo % v.ring_h.shape[0]]


@hook_njit
def bounded(v, q, n_rep, load_factor):
    """Bounded-load consistent hashing: keep the ring's choice q unless its in-flight count
    exceeds load_factor x (in flight + 1) / replicas; then the least loaded replica."""
    total = 0
    for k in range(n_rep):
        total += v.infl[k]
    if v.infl[q] <= load_factor * (total + 1) / n_rep:
        return q
    return least(v.infl, n_rep)


@hook_njit
def _held_at(cache, q, b, tau):
    """Replica q's index held b at time tau (from b's last entry and exit)."""
    if cache.resident[q, b]:
        return cache.t_in[q, b] <= tau
    return cache.t_in[q, b] <= tau < cache.t_out[q, b]


@hook_njit
def measure(v, cache, reqs, r, t, n_rep):
    """Fill v.tr (exact), v.ov (exact as the router sees it, after the event lag) and v.ap (approximate, entries newer than t - ttl) with the number
    of the request's leading full prompt blocks each replica holds."""
    s = reqs.offs[r]
    n = reqs.full[r]
    approx = v.seen.shape[1] > 1
    ttl = v.ttl[0]
    lag = v.lag[0]
    tau = t - lag
    for q in range(n_rep):
        k = 0
        while k < n and cache.resident[q, reqs.blocks[s + k]]:
            k += 1
        v.tr[q] = k
        if lag > 0.0:
            k = 0
            while k < n and _held_at(cache, q, reqs.blocks[s + k], tau):
                k += 1
        v.ov[q] = k
        k = 0
        if approx:
            while k < n and v.seen[q, reqs.blocks[s + k]] >= t - ttl:
                k += 1
        v.ap[q] = k


@hook_njit
def on_route(v, reqs, r, q, t, n_rep, bt):
    """The router's counters after sending request r to replica q; the regret: prompt
    tokens r will recompute that the replica holding most of its prefix would have had."""
    v.ro[v.rs[RS_ROUTED]] = r
    v.rs[RS_ROUTED] += 1
    best = 0
    for k in range(n_rep):
        if v.tr[k] > best:
            best = v.tr[k]
    cap = (reqs.ntok[r] - 1) // bt  # a full hit recomputes its last block
    v.rs[RS_REGRET] += (min(best, cap) - min(v.tr[q], cap)) * bt
    v.infl[q] += 1
    add = max(reqs.prompt[r] - v.ov[q] * bt, 0)
    v.r_pf[r] = add
    v.pf[q] += add
    s = reqs.offs[r]
    if v.bref.shape[1] > 1:
        for k in range(reqs.full[r]):
            b = reqs.blocks[s + k]
            if v.bref[q, b] == 0:
                v.blk[q] += 1
            v.bref[q, b] += 1
        v.blk[q] += (reqs.prompt[r] + bt - 1) // bt - reqs.full[r]  # its partial block is its own
    if v.seen.shape[1] > 1:
        for k in range(reqs.full[r]):
            v.seen[q, reqs.blocks[s + k]] = t


@hook_njit
def on_first_token(v, r, q):
    v.pf[q] -= v.r_pf[r]
    v.r_pf[r] = 0


@hook_njit
def on_finish(v, reqs, r, q, bt):
    v.infl[q] -= 1
    if v.bref.shape[1] > 1:
        s = reqs.offs[r]
        for k in range(reqs.full[r]):
            b = reqs.blocks[s + k]
            v.bref[q, b] -= 1
            if v.bref[q, b] == 0:
                v.blk[q] -= 1
        v.blk[q] -= (reqs.prompt[r] + bt - 1) // bt - reqs.full[r]
