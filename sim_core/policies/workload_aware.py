"""Workload-aware eviction of "KVCache Cache in the Wild" (Wang et al., ATC'25,
arXiv 2506.02634), adapted to the information our traces carry.

Algorithm (paper, as we read it)
  Requests are classified into workloads (categories): the paper uses (request type,
  turn), e.g. single-turn API calls, the first turn of a chat, later turns. Within one
  category the time until a KV block is reused is predictable and close to an
  exponential distribution whose rate differs between categories. Every cached block
  gets the priority

      Priority(b) = ( ReuseProb_w(t, life), -Offset(b) )           (lexicographic)

  w = category of b, t = time since b's last access, Offset = b's position in the
  prompt; the block with the lowest priority is evicted: least likely to be reused in
  the near future first, and among equally likely ones the tail of a prompt before its
  head (a prefix is only reusable while its head survives). With the fitted exponential
  F_w(x) = 1 - exp(-lambda_w x) of the reuse time,

      ReuseProb_w(t, life) = p_w * (F_w(t + life) - F_w(t))
                           = p_w * exp(-lambda_w t) * (1 - exp(-lambda_w life))

  the probability that b's next reuse falls in the coming window of length `life`.
  p_w, the category's reuse ratio (the fraction of its accesses that are re-referenced
  at all), is our addition (reuse_ratio=True): a category's reuse probability also
  depends on how many of its blocks come back at all, which a fitted reuse-time
  distribution alone does not say; reuse_ratio=False is the plain interval form. Because ReuseProb_w decreases with t and all blocks
  of a category share lambda_w, the minimum of a category is its least recently used
  block, so (paper's optimisation) eviction only compares the LRU end of each category:
  O(#categories) per eviction, exact (no sampling, no randomness: ctx.seed is unused).

Source note: the stored copy of the paper (arxiv.org/html/2506.02634v3) could only be
searched down to its abstract ("reuse probability ... predictable exponential
distributions within specific request categories"; "workload-aware cache eviction").
The priority tuple (ReuseProb_w(t, life), -Offset), the interval form of ReuseProb and
the per-category LRU optimisation are taken from public re-implementations that quote
the paper's eviction section (third-party, not the authors' code); the authors' vLLM PR
#22236 ("Workload-Aware KVCache Eviction Policy", unmerged) confirms the per-workload
(request type) reuse-time motivation but its stored description is truncated before
the algorithm. Where these leave a detail open, the choice is ours and is a parameter.
libCacheSim has no such policy: nothing to cross-check.

Categories (our traces only have `session` (-1 unknown) and arrival order)
  categories="session_turn" (default), turn_buckets=T:
      0            session unknown (session == -1)
      1            single-turn session (the session has exactly one request)
      2 .. 1+T     multi-turn session, turn k (0-based) -> 2 + min(k, T-1);
                   T=2: first turn vs later turns
    Whether a session is single-turn is read from the whole trace: it stands in for the
    paper's request type (API call vs chat), which a provider knows at arrival.
  categories="turn": only what is known online: 0 unknown, 1 + min(k, T-1).
  categories="none": one category (p and lambda shared): age then offset.
  A block's category is the category of the request that accessed it last.

Offset: the block's depth d at its latest access.

Time (`clock`)
  "wall" (default)  trace.arrival_s of the request (seconds; the paper's unit). Every
                    block of a request gets the same time, so the offset decides among
                    them (deepest evicted first).
  "request"         request index: the same with one tick per request.
  "access"          access index j: no ties, offset never decides; with
                    categories="none" the policy is exactly LRU (tested).

Online fitting
  On every re-reference of a block (from the second request touching it on) the
  interval since its previous access is recorded in a log2-bucketed histogram of the
  category of that previous access (plus a pooled histogram); with count_miss_reuses
  (default) re-references of blocks already evicted count too (per-block last-access
  metadata is kept after eviction, like a ghost list), otherwise only hits do (which
  would bias the fit towards short intervals the cache happened to catch). Every
  `refit_every` requests each category's rate is refitted:
      fit="median" (default)  lambda = ln 2 / median interval: the exponential that
                              matches the bulk of the distribution; robust to the heavy
                              tail of long idle gaps (the paper fits the CDF curve).
      fit="mean"              lambda = 1 / mean interval (maximum likelihood).
  p_w = (reuses + 1) / (accesses + 2) with reuses attributed to the category of the
  previous access. A category with fewer than `min_samples` intervals uses the pooled
  rate; before the first fit every category uses rate 1/time unit. After each refit the
  histograms and counts are multiplied by `decay` (1.0 = cumulative, the default).

Parameters (defaults)
  categories "session_turn" | "turn" | "none"
  turn_buckets 2        turn buckets of multi-turn sessions
  clock "wall"          "wall" | "request" | "access"
  refit_every 100       requests between refits
  fit "median"          "median" | "mean"
  min_samples 16        intervals a category needs before its own rate is used
  decay 1.0             multiplier applied to the statistics after each refit
  life_mult 1.0         life = life_mult / lambda_w (a multiple of the category's mean
                        reuse time) ...
  life 0.0              ... unless life > 0: a fixed window in clock units
  reuse_ratio True      multiply by p_w (False: ReuseProb = F_w(t+life) - F_w(t))
  conditional False     True: condition on "not reused since the last access":
                        p e^-lt (1-e^-lL) / (1 - p + p e^-lt)
  count_miss_reuses True

Scores are compared in log space (no underflow ties). Ties: lower ReuseProb, then
larger offset, then older last access, then lower category. Blocks of one request that
share a time are kept in offset order inside their category list (the request's group
sits at the head of the list, deepest block nearest the tail); ties across different
requests with equal arrival times are broken by list order only.

Data structures: one recency list per category over the resident blocks, newest at
the head, a request's blocks kept together (structures/catlists.py). Hooks O(1); evict
O(W) (+ O(log R) to find the current request in block mode); in request mode a walk
passes each of the request's pinned blocks once per category. All of it lives in two
flat arrays (int32 I, float64 F) whose segment offsets sit in F's header: numba adjusts
the reference count of every array of a state around each hook call that it cannot
fully inline, ~45 ns per array on our machine (a 23-array version of this policy ran
5x slower than this one).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.catlists import cat_push, cat_tail_unpinned, cat_unlink
from ..structures.packed import header_layout
from ..structures.reuse_fit import FITS, H_BINS, hist_rate, hist_record, refit_due, request_times
from ..traces.sessions import turn_index
from .api import PolicySpec, register_hooks

CATEGORIES = ("session_turn", "turn", "none")
CLOCKS = ("wall", "request", "access")

# The state's two flat arrays (see the module docstring). F header:
HU, HW, HR = 0, 1, 2
# segment bases in I
B_PREV, B_NXT, B_BCAT, B_BLAST, B_BOFF, B_RCAT, B_CSIZE, B_GL, B_GR, B_EXH, B_META = range(3, 14)
# segment bases in F
B_BTIME, B_RTIME, B_OFFS, B_LAM, B_LOGP, B_PW, B_LLIFE, B_NACC, B_NREU, B_HSUM, B_HCNT, B_HIST, \
    B_CFG = range(14, 27)
F_HEADER = 27
# cfg entries (F[B_CFG + k])
C_REFIT, C_FIT, C_MINS, C_DECAY, C_LMULT, C_LIFE, C_RATIO, C_COND, C_MISS, C_CLOCK, C_GROUPED = range(11)
N_CFG = 11
# meta entries (I[B_META + k])
M_LAST_R, M_SINCE = 0, 1


@njit
def find_request(st, ob, R, j):
    """Request owning access j, from offsets stored as floats at st.F[ob:ob+R+1]."""
    F = st.F
    lo = 0
    hi = R  # offsets[lo] <= j < offsets[hi]
    x = float(j)
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if F[ob + mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo


# ----------------------------------------------------------------------- categories
def request_categories(trace, kind: str, turn_buckets: int) -> tuple[np.ndarray, int]:
    """int32[R] category of each request and the number of categories."""
    R = trace.n_requests
    if kind == "none":
        return np.zeros(R, np.int32), 1
    turn = turn_index(trace)
    known = turn >= 0
    count = np.zeros(R, np.int64)  # requests of the request's session
    _, which, size = np.unique(np.asarray(trace.session)[known], return_inverse=True, return_counts=True)
    count[known] = size[which]
    tb = np.minimum(np.maximum(turn, 0), turn_buckets - 1)
    cat = np.zeros(R, np.int64)
    if kind == "turn":
        cat[known] = 1 + tb[known]
        return cat.astype(np.int32), 1 + turn_buckets
    single = known & (count == 1)
    multi = known & (count > 1)
    cat[single] = 1
    cat[multi] = 2 + tb[multi]
    return cat.astype(np.int32), 2 + turn_buckets


# ---------------------------------------------------------------------------- state
class WorkloadAwareState(NamedTuple):
    I: np.ndarray  # int32: prev, nxt [U+W] (sentinel of category c = U+c), bcat, blast,
                   # boff [U], rcat [R], csize, gl, gr, exh [W], meta [2]
    F: np.ndarray  # float64: header, btime [U], rtime [R], offsets [R+1], lam, logp, pw,
                   # loglife, nacc, nreu [W], hsum, hcnt [W+1], hist [(W+1)*H_BINS], cfg


def _choice(params, key, valid):
    v = params[key]
    if v not in valid:
        raise ValueError(f"{key} must be one of {valid}, got {v!r}")
    return v


def make_state(ctx) -> WorkloadAwareState:
    p = ctx.params
    t = ctx.trace
    U, R = t.n_unique, t.n_requests
    kind = _choice(p, "categories", CATEGORIES)
    clock = _choice(p, "clock", CLOCKS)
    fit = _choice(p, "fit", FITS)
    tb = int(p["turn_buckets"])
    if tb < 1:
        raise ValueError(f"turn_buckets must be >= 1, got {tb}")
    refit = int(p["refit_every"])
    if refit < 1:
        raise ValueError(f"refit_every must be >= 1, got {refit}")
    decay = float(p["decay"])
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
    if float(p["life_mult"]) <= 0 or float(p["life"]) < 0:
        raise ValueError("life_mult must be > 0 and life >= 0")
    if U + 64 >= 2**31:
        raise ValueError("workload_aware keeps block ids in int32")
    rcat, W = request_categories(t, kind, tb)
    ib = header_layout([(B_PREV, U + W), (B_NXT, U + W), (B_BCAT, U), (B_BLAST, U), (B_BOFF, U),
                 (B_RCAT, R), (B_CSIZE, W), (B_GL, W), (B_GR, W), (B_EXH, W), (B_META, 2)], 0)
    fb = header_layout([(B_BTIME, U), (B_RTIME, R), (B_OFFS, R + 1), (B_LAM, W), (B_LOGP, W), (B_PW, W),
                 (B_LLIFE, W), (B_NACC, W), (B_NREU, W), (B_HSUM, W + 1), (B_HCNT, W + 1),
                 (B_HIST, (W + 1) * H_BINS), (B_CFG, N_CFG)], F_HEADER)
    I = np.zeros(ib[-1], np.int32)
    F = np.zeros(fb[-1], np.float64)
    F[HU], F[HW], F[HR] = U, W, R
    F[B_PREV:B_META + 1] = ib[:-1]
    F[B_BTIME:B_CFG + 1] = fb[:-1]
    pv, nx = ib[0], ib[1]
    I[pv:pv + U] = -1
    I[nx:nx + U] = -1
    I[pv + U:pv + U + W] = np.arange(U, U + W)  # empty lists: sentinels point to themselves
    I[nx + U:nx + U + W] = np.arange(U, U + W)
    I[ib[2]:ib[4]] = -1                         # bcat, blast: never seen
    I[ib[5]:ib[5] + R] = rcat
    I[ib[7]:ib[10]] = -1                        # gl, gr, exh
    I[ib[10]] = -1                              # last request seen
    F[fb[1]:fb[1] + R] = request_times(t, clock)
    F[fb[2]:fb[2] + R + 1] = t.req_offsets
    cfg = fb[12]
    F[cfg + C_REFIT] = refit
    F[cfg + C_FIT] = FITS.index(fit)
    F[cfg + C_MINS] = max(1, int(p["min_samples"]))
    F[cfg + C_DECAY] = decay
    F[cfg + C_LMULT] = float(p["life_mult"])
    F[cfg + C_LIFE] = float(p["life"])
    F[cfg + C_RATIO], F[cfg + C_COND] = float(p["reuse_ratio"]), float(p["conditional"])
    F[cfg + C_MISS], F[cfg + C_CLOCK] = float(p["count_miss_reuses"]), CLOCKS.index(clock)
    # offset order in a request's group: a forward walk appends, a tail-first one pushes at the head
    F[cfg + C_GROUPED] = 1.0 if clock != "access" and not t.tail_first else 0.0
    st = WorkloadAwareState(I, F)
    refit_all(st)
    return st


def fitted(st) -> dict:
    """Current per-category fit (for inspection and tests): rate, reuse ratio, count."""
    F = st.F
    W = int(F[HW])
    seg = lambda b, n: F[int(F[b]):int(F[b]) + n].copy()  # noqa: E731
    return {"lam": seg(B_LAM, W), "p": seg(B_PW, W), "intervals": seg(B_HCNT, W + 1)}


@njit
def _lists(st):
    """The category lists' layout in I (structures/catlists.py)."""
    F = st.F
    return (int(F[B_PREV]), int(F[B_NXT]), int(F[HU]), int(F[B_BLAST]), int(F[B_BCAT]), int(F[B_CSIZE]),
            int(F[B_GL]), int(F[B_GR]), int(F[B_EXH]))


# -------------------------------------------------------------------------- fitting
@njit
def refit_all(st):
    F = st.F
    W = int(F[HW])
    cfg = int(F[B_CFG])
    fit = int(F[cfg + C_FIT])
    mins = F[cfg + C_MINS]
    hb = int(F[B_HIST])
    sb = int(F[B_HSUM])
    cb = int(F[B_HCNT])
    pooled = 1.0
    if F[cb + W] >= mins:
        pooled = hist_rate(F, hb + W * H_BINS, sb + W, cb + W, fit)
    lam_b = int(F[B_LAM])
    nacc = int(F[B_NACC])
    nreu = int(F[B_NREU])
    for c in range(W):
        lam = pooled
        if F[cb + c] >= mins:
            lam = hist_rate(F, hb + c * H_BINS, sb + c, cb + c, fit)
        F[lam_b + c] = lam
        life = F[cfg + C_LIFE] if F[cfg + C_LIFE] > 0.0 else F[cfg + C_LMULT] / lam
        F[int(F[B_LLIFE]) + c] = math.log(-math.expm1(-lam * life))
        if F[cfg + C_RATIO] > 0.0:
            p = (F[nreu + c] + 1.0) / (F[nacc + c] + 2.0)
            if p > 1.0 - 1e-9:
                p = 1.0 - 1e-9
            F[int(F[B_PW]) + c] = p
            F[int(F[B_LOGP]) + c] = math.log(p)
        else:
            F[int(F[B_PW]) + c] = 1.0 - 1e-9
            F[int(F[B_LOGP]) + c] = 0.0
    d = F[cfg + C_DECAY]
    if d < 1.0:
        for i in range(sb, sb + W + 1):
            F[i] *= d
        for i in range(cb, cb + W + 1):
            F[i] *= d
        for i in range(hb, hb + (W + 1) * H_BINS):
            F[i] *= d
        for c in range(W):
            F[nacc + c] *= d
            F[nreu + c] *= d


@njit
def log_reuse_prob(st, c, age):
    F = st.F
    lam = F[int(F[B_LAM]) + c]
    s = F[int(F[B_LOGP]) + c] - lam * age + F[int(F[B_LLIFE]) + c]
    if F[int(F[B_CFG]) + C_COND] > 0.0:
        s -= math.log(1.0 - F[int(F[B_PW]) + c] * (-math.expm1(-lam * age)))
    return s


# ---------------------------------------------------------------------------- hooks
@njit
def _now(st, j, r):
    """The clock at access j of request r (r < 0: block mode's eviction, looked up)."""
    F = st.F
    if F[int(F[B_CFG]) + C_CLOCK] == 2.0:
        return float(j)
    if r < 0:
        r = find_request(st, int(F[B_OFFS]), int(F[HR]), j)
    return F[int(F[B_RTIME]) + r]


@njit
def _touch(st, b, j, r, d, hit):
    """Access j of request r reaches b (not in any list): statistics, then b joins r's
    group in r's category."""
    I = st.I
    F = st.F
    W = int(F[HW])
    cfg = int(F[B_CFG])
    bcat = int(F[B_BCAT])
    btime = int(F[B_BTIME])
    blast = int(F[B_BLAST])
    c = I[int(F[B_RCAT]) + r]
    now = _now(st, j, r)
    if refit_due(I, int(F[B_META]) + M_LAST_R, r, F[cfg + C_REFIT]):
        refit_all(st)
    if I[blast + b] != r:
        pc = I[bcat + b]
        if pc >= 0 and (hit or F[cfg + C_MISS] > 0.0):
            dt = now - F[btime + b]
            hb = int(F[B_HIST])
            sb = int(F[B_HSUM])
            cb = int(F[B_HCNT])
            hist_record(F, hb + pc * H_BINS, sb + pc, cb + pc, dt)
            hist_record(F, hb + W * H_BINS, sb + W, cb + W, dt)
            F[int(F[B_NREU]) + pc] += 1.0
        F[int(F[B_NACC]) + c] += 1.0
    cat_push(I, _lists(st), c, b, r, F[cfg + C_GROUPED] > 0.0)
    I[bcat + b] = c
    I[int(F[B_BOFF]) + b] = d
    F[btime + b] = now
    I[blast + b] = r


@njit
def on_insert(st, b, j, r, d):
    _touch(st, b, j, r, d, False)


@njit
def on_hit(st, b, j, r, d):
    I = st.I
    F = st.F
    if I[int(F[B_BLAST]) + b] == r:
        return  # a block repeated inside the request keeps its first position
    cat_unlink(I, _lists(st), I[int(F[B_BCAT]) + b], b)
    _touch(st, b, j, r, d, True)


@njit
def evict(st, j, r, pin):
    """The lowest (ReuseProb, -offset) among the categories' oldest unpinned blocks."""
    now = _now(st, j, r)
    I = st.I
    F = st.F
    L = _lists(st)
    boff = int(F[B_BOFF])
    btime = int(F[B_BTIME])
    best = -1
    bc = -1
    bs = 0.0
    for c in range(int(F[HW])):
        v = cat_tail_unpinned(I, L, c, pin, r)
        if v < 0:
            continue
        sc = log_reuse_prob(st, c, now - F[btime + v])
        if best < 0:
            better = True
        elif sc != bs:
            better = sc < bs
        elif I[boff + v] != I[boff + best]:
            better = I[boff + v] > I[boff + best]
        else:
            better = F[btime + v] < F[btime + best]
        if better:
            best = v
            bc = c
            bs = sc
    if best >= 0:
        cat_unlink(I, L, bc, best)
    return best


register_hooks(WorkloadAwareState, on_hit, on_insert, evict)

DEFAULTS = {
    "categories": "session_turn",
    "turn_buckets": 2,
    "clock": "wall",
    "refit_every": 100,
    "fit": "median",
    "min_samples": 16,
    "decay": 1.0,
    "life_mult": 1.0,
    "life": 0.0,
    "reuse_ratio": True,
    "conditional": False,
    "count_miss_reuses": True,
}

SPEC = PolicySpec(
    "workload_aware", make_state,
    "Workload-aware (ATC'25 KVCache in the Wild) - per-category exponential "
    "reuse probability fitted online, evict the lowest (ReuseProb, -offset).",
    defaults=DEFAULTS, family="prefix_specific",
    weight=15.0,
    no_serving="its clock is the current request's arrival, and the serving replay evicts for no single request")
