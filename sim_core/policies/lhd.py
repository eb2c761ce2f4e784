"""LHD (Beckmann, Chen, Cidon: "LHD: Improving Cache Hit Rate by Maximizing Hit
Density", NSDI'18): evict the sampled block with the least expected hits per unit of
space-time, learned from age histograms.

Model (as in the authors' simulator, which libCacheSim wraps):

- time is the number of accesses; a block's *age* is the time since its last access,
  coarsened as ``age >> shift`` and capped at MAX_AGE - 1 = 19999.
- classes: a block's class is ``log``-bucket (16 buckets) of the sum of its last two
  hit ages (``hitAgeClass``: 15 for 0, else the number of doublings that bring the sum to
  MAX_AGE); a new block has sum MAX_AGE (class 0).
- every hit adds 1 to ``hits[class, age]``, every eviction to ``evictions[class, age]``.
- every ``reconfig_interval`` accesses (2^20): histograms decay by 0.9, and the hit
  density of each (class, age) is recomputed as
  ``sum_{a' >= a} hits / sum_{a' >= a} (hits + evictions) * (a' - a + 1)`` -- expected
  hits over expected remaining lifetime given the block reached age a. At the 6th and
  26th reconfiguration the age coarsening ``shift`` is re-tuned from the mean number of
  resident blocks (histograms are stretched or compressed to the new scale).
- before the first reconfiguration densities are the authors' GDSF-like prior
  ``(k + 1) / (age + 1)`` with k = 16 + class (the class index of the single "app" 1 in
  their 16 x 16 class table).
- eviction: sample ``associativity`` resident blocks uniformly (only 8 during the first
  50 reconfigurations -- the authors' warm-up shortcut, kept), plus the up to
  ``admissions`` (8) most recently admitted blocks whose density at admission was below
  the running EWMA of victim densities; evict the one with the lowest density. A block
  at the capped age has density -inf.
- explorers: a block whose update draws 1 in 32 becomes an *explorer* (density + 1, so
  it is practically never evicted) while the explorer budget (1% of capacity) lasts and
  fewer than 50 reconfigurations happened.
- randomness: libCacheSim's ``next_rand`` (the MMIX LCG of the authors' simulator),
  seeded with ``ctx.seed``; the draws happen in the same places and order.
- request mode: pinned sampled blocks are skipped (the draw is still consumed); if every
  candidate is pinned the unpinned block of least density is found by a full scan.

Parameters: ``associativity`` (32), ``admissions`` (8), ``reconfig_interval`` (2^20
accesses, as the authors and libCacheSim; traces shorter than that run on the prior).
Object sizes are all 1 block, so densities are per block. Arithmetic on the histograms
and densities is float32 like the C++ (``rank_t = float``).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.rng import lcg_next, new_lcg
from .api import PolicySpec, register_hooks

MAX_AGE = 20000
N_CLASSES = 16
APP_OFFSET = 16  # authors' class table: app 1 -> classes 16..31
EXPLORE_INVERSE_PROBABILITY = 32
WARMUP_CANDIDATES = 8
WARMUP_RECONFIGS = 50
# meta layout
TIME, NEXT_RECONF, NRECONF, SHIFT, RA_HEAD, NRES, BUDGET, INTERVAL, ASSOC = range(9)
# fmeta layout (float32)
EWMA_VICTIM, EWMA_NOBJ, EWMA_MASS = range(3)

_LOWEST = np.float32(np.finfo(np.float32).min)
_DECAY = np.float32(0.9)
_ONE_MINUS_DECAY = np.float32(np.float32(1.0) - np.float32(0.9))


# tag columns: one cache line per resident block, rows in sampling order (the C++ `tags`)
BLK, TS, LHA, LLHA, EXPL = range(5)


class LHDState(NamedTuple):
    tags: np.ndarray  # int64[cap+1, 8]: block, last access time, last two hit ages, explorer
    pos: np.ndarray  # int64[U] row of a resident block, -1 otherwise
    hits: np.ndarray  # float32[N_CLASSES, MAX_AGE]
    evs: np.ndarray
    dens: np.ndarray
    recent: np.ndarray  # int32[admissions] recently admitted candidates
    meta: np.ndarray  # int64[9]
    fmeta: np.ndarray  # float32[3]
    rng: np.ndarray  # uint64[1]


def make_state(ctx) -> LHDState:
    p = ctx.params
    U = ctx.trace.n_unique
    cap = int(ctx.capacity)
    assoc, adm, interval = int(p["associativity"]), int(p["admissions"]), int(p["reconfig_interval"])
    if assoc < 1 or adm < 0 or interval < 1:
        raise ValueError("lhd: associativity and reconfig_interval must be >= 1, admissions >= 0")
    c = np.arange(N_CLASSES, dtype=np.float64)[:, None] + APP_OFFSET
    a = np.arange(MAX_AGE, dtype=np.float64)[None, :]
    dens = ((c + 1.0) / (a + 1.0)).astype(np.float32)
    meta = np.zeros(9, np.int64)
    meta[NEXT_RECONF] = interval
    meta[SHIFT] = 10
    meta[BUDGET] = int(cap * 0.01)
    meta[INTERVAL] = interval
    meta[ASSOC] = assoc
    return LHDState(
        np.zeros((cap + 1, 8), np.int64), np.full(U, -1, np.int64),
        np.zeros((N_CLASSES, MAX_AGE), np.float32), np.zeros((N_CLASSES, MAX_AGE), np.float32),
        dens, np.full(adm, -1, np.int32),
        meta, np.zeros(3, np.float32), new_lcg(ctx.seed),
    )


@njit
def _age(st, i):
    a = (st.meta[TIME] - st.tags[i, TS]) >> st.meta[SHIFT]
    return MAX_AGE - 1 if a >= MAX_AGE else a


@njit
def hit_age_class(age):
    if age == 0:
        return N_CLASSES - 1
    lg = 0
    while age < MAX_AGE and lg < N_CLASSES - 1:
        age <<= 1
        lg += 1
    return lg


@njit
def _class(st, i):
    return hit_age_class(st.tags[i, LHA] + st.tags[i, LLHA])


@njit
def _density(st, i):
    """Hit density of the block in row i."""
    age = _age(st, i)
    if age == MAX_AGE - 1:
        return _LOWEST
    d = st.dens[_class(st, i), age]
    if st.tags[i, EXPL]:
        d += np.float32(1.0)
    return d


# ------------------------------------------------------------------ reconfiguration
@njit
def _adapt_age_coarsening(st):
    f = st.fmeta
    f[EWMA_NOBJ] = f[EWMA_NOBJ] * _DECAY
    f[EWMA_MASS] = f[EWMA_MASS] * _DECAY
    f[EWMA_NOBJ] = f[EWMA_NOBJ] + np.float32(st.meta[NRES])
    f[EWMA_MASS] = f[EWMA_MASS] + np.float32(1.0)
    n_objects = f[EWMA_NOBJ] / f[EWMA_MASS]
    optimal = np.float32(n_objects / (np.float32(0.01) * np.float32(MAX_AGE)))
    nr = st.meta[NRECONF]
    if nr != 5 and nr != 25:
        return
    lg = 1
    while (1 << lg) < optimal:
        lg += 1
    delta = lg - st.meta[SHIFT]
    st.meta[SHIFT] = lg
    f[EWMA_NOBJ] = f[EWMA_NOBJ] * np.float32(8.0)
    f[EWMA_MASS] = f[EWMA_MASS] * np.float32(8.0)
    for c in range(N_CLASSES):
        h = st.hits[c]
        e = st.evs[c]
        if delta < 0:  # stretch
            s = -delta
            for a in range(MAX_AGE >> s, MAX_AGE - 1):
                h[MAX_AGE - 1] += h[a]
                e[MAX_AGE - 1] += e[a]
            div = np.float32(1 << s)
            for a in range(MAX_AGE - 2, -1, -1):
                h[a] = h[a >> s] / div
                e[a] = e[a >> s] / div
        elif delta > 0:  # compress
            for a in range(MAX_AGE >> delta):
                h[a] = h[a << delta]
                e[a] = e[a << delta]
                for i in range(1, 1 << delta):
                    h[a] += h[(a << delta) + i]
                    e[a] += e[(a << delta) + i]
            for a in range(MAX_AGE >> delta, MAX_AGE - 1):
                h[a] = 0
                e[a] = 0


@njit
def reconfigure(st):
    for c in range(N_CLASSES):
        for a in range(MAX_AGE):
            st.hits[c, a] = st.hits[c, a] * _DECAY
            st.evs[c, a] = st.evs[c, a] * _DECAY
    _adapt_age_coarsening(st)
    for c in range(N_CLASSES):
        h = st.hits[c]
        e = st.evs[c]
        total_events = h[MAX_AGE - 1] + e[MAX_AGE - 1]
        total_hits = h[MAX_AGE - 1]
        lifetime = total_events
        for a in range(MAX_AGE - 2, -1, -1):
            total_hits += h[a]
            total_events += h[a] + e[a]
            lifetime += total_events
            st.dens[c, a] = total_hits / lifetime if total_events > 1e-5 else np.float32(0.0)


# ------------------------------------------------------------------ hooks
@njit
def _update(st, b, insert):
    m = st.meta
    tg = st.tags
    if insert:
        i = m[NRES]
        tg[i, BLK] = b
        st.pos[b] = i
        m[NRES] = i + 1
        tg[i, LLHA] = MAX_AGE
        tg[i, LHA] = 0
    else:
        i = st.pos[b]
        age = _age(st, i)
        st.hits[_class(st, i), age] += np.float32(1.0)
        if tg[i, EXPL]:
            m[BUDGET] += 1
        tg[i, LLHA] = tg[i, LHA]
        tg[i, LHA] = age
    tg[i, TS] = m[TIME]
    explore = lcg_next(st.rng) % np.uint64(EXPLORE_INVERSE_PROBABILITY) == np.uint64(0)
    can_explore = m[BUDGET] > 0 and m[NRECONF] < WARMUP_RECONFIGS
    if explore and can_explore:
        tg[i, EXPL] = 1
        m[BUDGET] -= 1
    else:
        tg[i, EXPL] = 0
    adm = st.recent.shape[0]
    if insert and not explore and adm > 0 and _density(st, i) < st.fmeta[EWMA_VICTIM]:
        st.recent[m[RA_HEAD] % adm] = b
        m[RA_HEAD] += 1
    m[TIME] += 1
    m[NEXT_RECONF] -= 1
    if m[NEXT_RECONF] == 0:
        reconfigure(st)
        m[NEXT_RECONF] = m[INTERVAL]
        m[NRECONF] += 1


@njit
def on_hit(st, b, j, r, d):
    _update(st, b, False)


@njit
def on_insert(st, b, j, r, d):
    _update(st, b, True)


@njit
def evict(st, j, r, pin):
    m = st.meta
    n = m[NRES]
    if n == 0:
        return -1
    cands = m[ASSOC] if m[NRECONF] > WARMUP_RECONFIGS else WARMUP_CANDIDATES
    tg = st.tags
    vi = -1  # victim row
    vrank = np.float32(np.inf)
    for _ in range(cands):
        i = np.int64(lcg_next(st.rng) % np.uint64(n))
        if pin[tg[i, BLK]] == r:
            continue
        rk = _density(st, i)
        if rk < vrank:
            vi = i
            vrank = rk
    for k in range(st.recent.shape[0]):
        b = st.recent[k]
        if b < 0 or st.pos[b] < 0 or pin[b] == r:
            continue
        i = st.pos[b]
        rk = _density(st, i)
        if rk < vrank:
            vi = i
            vrank = rk
    if vi < 0:  # request mode: every candidate was pinned
        for i in range(n):
            if pin[tg[i, BLK]] != r:
                rk = _density(st, i)
                if vi < 0 or rk < vrank:
                    vi = i
                    vrank = rk
        if vi < 0:
            return -1
    st.fmeta[EWMA_VICTIM] = _DECAY * st.fmeta[EWMA_VICTIM] + _ONE_MINUS_DECAY * vrank
    # record the eviction, then move the last row into the victim's
    st.evs[_class(st, vi), _age(st, vi)] += np.float32(1.0)
    if tg[vi, EXPL]:
        m[BUDGET] += 1
    victim = tg[vi, BLK]
    last = n - 1
    if vi != last:
        for c in range(5):
            tg[vi, c] = tg[last, c]
        st.pos[tg[vi, BLK]] = vi
    st.pos[victim] = -1
    m[NRES] = last
    return victim


register_hooks(LHDState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "lhd", make_state,
    "LHD - evicts the sampled block of least hit density, learned from per-class"
    " hit/eviction age histograms.",
    defaults={"associativity": 32, "admissions": 8, "reconfig_interval": 1 << 20},
    family="analytic",
    sample_ok=False,  # its sampled error misses the target: table in docs/sampling.md
    weight=13.0, libcachesim="LHD")
