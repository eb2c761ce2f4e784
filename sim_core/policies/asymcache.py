"""AsymCache-style eviction: reuse likelihood x position-aware recomputation cost.

AsymCache ("Multi-Segment Attention: Enabling Efficient KV-Cache Management for Faster
Large Language Model Serving", Shi et al., arXiv 2606.02964) evicts KV blocks with "a
cache eviction policy that jointly optimizes hit rate and position-aware recomputation
cost"; its multi-segment attention lets a request reuse non-contiguous cached blocks,
i.e. our block-hit semantics. Only the abstract and third-party summaries of the paper
could be found (search corpora "pages", "docs", "code", "issues"): the scoring formula,
the reuse estimator and the cost model below are OUR reading of that one sentence, not
the paper's published algorithm. libCacheSim has no AsymCache: nothing to cross-check.

Score (lowest evicted first), for a resident block b of size 1 block:

    Score(b) = P_reuse(b) * Cost(b) / Size(b)
    P_reuse(b) = exp(-age(b) / tau)          recency-based reuse likelihood
    Cost(b)   = ctx.cost_per_depth[d_b]      recompute cost at b's depth (latest access)
    Size(b)   = 1                            every block has the same size

i.e. the expected recomputation saved per unit of cache by keeping b, when the time to
b's next reuse is modelled as exponential with mean tau. Since every block decays at
the same rate, log Score(b) = log Cost(b) + t_last(b)/tau - now/tau and the order of two
blocks never changes while tau is fixed: the key log Cost + t_last/tau is static, so an
indexed heap gives the exact minimum (O(log C) per hook and eviction; no sampling, no
randomness: ctx.seed is unused). A deep block survives about tau * ln(Cost_deep /
Cost_shallow) longer than an equally recent shallow one. Under the uniform cost model
the policy is recency only: with clock="access" it is exactly LRU (tested), which is
what cost_aware=True replays for that model.

tau is fitted online like workload_aware (structures/reuse_fit.py, shared with it):
every re-reference records the interval since the block's previous access (re-references
of evicted blocks too when count_miss_reuses), and every `refit_every` requests
tau = 1/lambda with lambda = ln 2 / median (fit="median") or 1 / mean (fit="mean"); the
heap is re-keyed (O(C) heapify) only when tau moved by more than `retau_tol` (relative).
Before `min_samples` intervals tau = 1 time unit. tau > 0 as a parameter fixes it.

Time (`clock`): "wall" (default, trace.arrival_s: all blocks of a request share a time,
so the cost decides among them), "request" (request index), "access" (access index j).
Ties between equal keys go to the smaller block id (heap order).

Parameters (defaults): tau 0.0 (fit online), clock "wall", fit "median",
refit_every 100, min_samples 16, retau_tol 0.05, count_miss_reuses True.

Data structures: an indexed binary max-heap on -(log Cost + t_last/tau) (ties: smaller
block id first; structures/heap.py's `*_at` functions over regions of the two flat
arrays of the state: see workload_aware for why a policy state should be two arrays).

Request mode: a pinned block (of the request being served) that reaches the top of the
heap is re-keyed to +inf "keep" so it is not met again during this request's evictions;
the engine touches it right after and gives it its real key.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.heap import push_at, rekey_at, remove_at, sift_down_at
from ..structures.packed import header_layout
from ..structures.reuse_fit import FITS, H_BINS, hist_rate, hist_record, refit_due, request_times
from .api import PolicySpec, register_hooks

CLOCKS = ("wall", "request", "access")

# F header
HU, HR, HCAP = 0, 1, 2
# segment bases in I
B_HEAP, B_POS, B_BDEP, B_BLAST, B_META = range(3, 8)
# segment bases in F
B_KEY, B_BTIME, B_RTIME, B_LOGC, B_HIST, B_STAT, B_CFG = range(8, 15)
F_HEADER = 15
# stat entries (F[B_STAT + k]): interval sum, interval count, current tau
S_SUM, S_CNT, S_TAU = 0, 1, 2
# cfg entries (F[B_CFG + k])
C_TAU_FIXED, C_FIT, C_REFIT, C_MINS, C_TOL, C_MISS, C_CLOCK = range(7)
N_CFG = 7
# meta entries (I[B_META + k])
M_LAST_R, M_SINCE, M_SIZE = 0, 1, 2

NEG_INF = -np.inf


class AsymCacheState(NamedTuple):
    I: np.ndarray  # int32: heap [cap+1], pos [U], bdep [U], blast [U], meta [3]
    F: np.ndarray  # float64: header, key [U], btime [U], rtime [R], logc [max_depth],
                   # hist [H_BINS], stat [3], cfg


def make_state(ctx) -> AsymCacheState:
    p = ctx.params
    t = ctx.trace
    U, R = t.n_unique, t.n_requests
    clock = p["clock"]
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    fit = p["fit"]
    if fit not in FITS:
        raise ValueError(f"fit must be one of {FITS}, got {fit!r}")
    tau = float(p["tau"])
    if tau < 0 or int(p["refit_every"]) < 1 or float(p["retau_tol"]) < 0:
        raise ValueError("tau >= 0, refit_every >= 1 and retau_tol >= 0 are required")
    cost = np.asarray(ctx.cost_per_depth, dtype=np.float64)
    if len(cost) and not (np.all(np.isfinite(cost)) and cost.min() > 0):
        raise ValueError("asymcache needs finite, positive costs per depth")
    if U + 64 >= 2**31:
        raise ValueError("asymcache keeps block ids in int32")
    cap = max(1, min(U, int(ctx.capacity) + 1))
    D = max(1, len(cost))
    ib = header_layout([(B_HEAP, cap), (B_POS, U), (B_BDEP, U), (B_BLAST, U), (B_META, 3)], 0)
    fb = header_layout([(B_KEY, U), (B_BTIME, U), (B_RTIME, R), (B_LOGC, D), (B_HIST, H_BINS),
                 (B_STAT, 3), (B_CFG, N_CFG)], F_HEADER)
    I = np.zeros(ib[-1], np.int32)
    F = np.zeros(fb[-1], np.float64)
    F[HU], F[HR], F[HCAP] = U, R, cap
    F[B_HEAP:B_META + 1] = ib[:-1]
    F[B_KEY:B_CFG + 1] = fb[:-1]
    I[ib[1]:ib[1] + U] = -1  # pos: not in the heap
    I[ib[3]:ib[3] + U] = -1  # blast: never seen
    I[ib[4] + M_LAST_R] = -1
    F[fb[2]:fb[2] + R] = request_times(t, "wall" if clock == "wall" else "request")
    if len(cost):
        F[fb[3]:fb[3] + len(cost)] = np.log(cost)
    F[fb[5] + S_TAU] = tau if tau > 0 else 1.0
    F[fb[6]:fb[6] + N_CFG] = [tau, FITS.index(fit), int(p["refit_every"]),
                              max(1, int(p["min_samples"])), float(p["retau_tol"]),
                              1.0 if p["count_miss_reuses"] else 0.0, CLOCKS.index(clock)]
    return AsymCacheState(I, F)


def current_tau(st) -> float:
    return float(st.F[int(st.F[B_STAT]) + S_TAU])


# ------------------------------------------------------------------ indexed max-heap
@njit
def _heap(F):
    """Where the heap lives: offsets of its slots (in I), positions (in I) and keys (in F),
    and the index of its size in I."""
    return int(F[B_HEAP]), int(F[B_POS]), int(F[B_KEY]), int(F[B_META]) + M_SIZE


@njit
def _set_key(st, b, k, new):
    I = st.I
    F = st.F
    hb, pb, kb, sz = _heap(F)
    n = I[sz]
    if new:
        F[kb + b] = k
        I[sz] = n + 1
        push_at(I, hb, I, pb, F, kb, n, b)
    else:
        rekey_at(I, hb, I, pb, F, kb, n, b, k)


# -------------------------------------------------------------------------- fitting
@njit
def _refit(st):
    I = st.I
    F = st.F
    cfg = int(F[B_CFG])
    sb = int(F[B_STAT])
    if F[cfg + C_TAU_FIXED] > 0.0 or F[sb + S_CNT] < F[cfg + C_MINS]:
        return
    tau = 1.0 / hist_rate(F, int(F[B_HIST]), sb + S_SUM, sb + S_CNT, int(F[cfg + C_FIT]))
    old = F[sb + S_TAU]
    if abs(tau - old) <= F[cfg + C_TOL] * old:
        return
    F[sb + S_TAU] = tau
    hb, pb, kb, sz = _heap(F)
    lb = int(F[B_LOGC])
    db = int(F[B_BDEP])
    tb = int(F[B_BTIME])
    n = I[sz]
    for i in range(n):
        b = I[hb + i]
        if F[kb + b] != NEG_INF:  # a parked pinned block keeps its "keep" key
            F[kb + b] = -(F[lb + I[db + b]] + F[tb + b] / tau)
    for i in range(n // 2 - 1, -1, -1):
        sift_down_at(I, hb, I, pb, F, kb, n, i)


# ---------------------------------------------------------------------------- hooks
@njit
def _touch(st, b, j, r, d, hit):
    I = st.I
    F = st.F
    cfg = int(F[B_CFG])
    meta = int(F[B_META])
    now = float(j) if F[cfg + C_CLOCK] == 2.0 else F[int(F[B_RTIME]) + r]
    if refit_due(I, meta + M_LAST_R, r, F[cfg + C_REFIT]):
        _refit(st)
    blast = int(F[B_BLAST])
    tb = int(F[B_BTIME])
    last = I[blast + b]
    if last >= 0 and last != r and (hit or F[cfg + C_MISS] > 0.0):
        sb = int(F[B_STAT])
        hist_record(F, int(F[B_HIST]), sb + S_SUM, sb + S_CNT, now - F[tb + b])
    if hit and last == r:
        return  # repeated inside the request: keeps its first depth and time
    db = int(F[B_BDEP])
    I[db + b] = d
    F[tb + b] = now
    I[blast + b] = r
    k = -(F[int(F[B_LOGC]) + d] + now / F[int(F[B_STAT]) + S_TAU])
    _set_key(st, b, k, not hit)


@njit
def on_hit(st, b, j, r, d):
    _touch(st, b, j, r, d, True)


@njit
def on_insert(st, b, j, r, d):
    _touch(st, b, j, r, d, False)


@njit
def evict(st, j, r, pin):
    I = st.I
    F = st.F
    hb, pb, kb, sz = _heap(F)
    while I[sz] > 0:
        top = I[hb]
        if pin[top] != r:
            n = I[sz]
            I[sz] = n - 1
            remove_at(I, hb, I, pb, F, kb, n, top)
            I[pb + top] = -1
            return top
        if F[kb + top] == NEG_INF:
            return -1  # every resident block is pinned
        _set_key(st, top, NEG_INF, False)
    return -1


register_hooks(AsymCacheState, on_hit, on_insert, evict)

DEFAULTS = {
    "tau": 0.0,
    "clock": "wall",
    "fit": "median",
    "refit_every": 100,
    "min_samples": 16,
    "retau_tol": 0.05,
    "count_miss_reuses": True,
}

SPEC = PolicySpec(
    "asymcache", make_state,
    "AsymCache-style (our reading of arXiv 2606.02964) - evict the lowest "
    "exp(-age/tau) x recompute cost at depth, tau fitted online.",
    defaults=DEFAULTS, cost_aware=True, family="prefix_specific",
    weight=10.0,
    no_serving="it reads a second touch by one request as a repeat inside that request, which a preempted "
               "request's second release is not")
