"""LRB: Learning Relaxed Belady (Song et al., NSDI'20), after libCacheSim's LRB.

Algorithm (libCacheSim `cache/eviction/LRB/lrb.cpp`; its default byte-miss objective is
the object-miss objective for unit-size blocks). The booster is LightGBM, as in
libCacheSim (see structures/gbdt.py; scikit-learn is not used):

* Metadata. Every *tracked* block (resident, or evicted less than `memory_window`
  accesses after its last use) keeps its last access time, up to 31 past inter-access
  distances (ring, newest first) and 10 exponentially decayed counters (EDCs) with
  windows 2^10..2^19 accesses: on each reuse with distance d, edc_k <- edc_k *
  2^-(d >> (10 + k)) + 1 (the first reuse sets 2^-(...) + 1); the decay table is cut at
  memory_window / 1024 entries, as in libCacheSim. An evicted block is forgotten
  `memory_window` accesses after its last access; a resident block older than that is
  forgotten when it is evicted.
* Features (44, libCacheSim's layout): [0] age = now - last access; [1..31] past
  distances, newest first (absent = 0, i.e. LightGBM's missing CSR entry); [32] size
  (always 1); [33] number of past distances whose running sum is below the memory
  window; [34..43] EDCs decayed to now: edc_k * 2^-(age >> (10 + k)) (2^-(...) alone
  for a block never reused).
* Sampling / labels. After the first eviction, every access attaches one sample (its
  time) to a uniformly random tracked block. A sample matures into a training row
  (features as of the sample time) when its block is accessed again, label
  log1p(reuse time - sample time); when the block is forgotten, label
  log1p(2 * memory_window); when a too-old resident block is evicted, label
  log1p(age + memory_window).
* Training schedule. When `batch_size` rows (default 131072) have matured, a LightGBM
  regressor is fitted on them (gbdt, 32 iterations, 32 leaves, learning rate 0.1,
  feature/bagging fraction 0.8, bagging every 5 iterations; libCacheSim's settings) and
  replaces the previous model; the rows are then discarded.
* Eviction. Before the first model, or when the LRU tail is older than the memory
  window, the LRU tail is evicted. Otherwise 64 distinct resident blocks are sampled
  uniformly (duplicates allowed after 200 draws, as in libCacheSim), scored with the
  model (predicted log reuse distance) and the highest score is evicted.

The model, the training at replay pauses (a deviation), the random numbers and request
mode follow the conventions of sim_core/structures/learned.py. Further deviations from
libCacheSim (all deliberate, none matters for unit-size blocks):
* Pending samples live in a pool of min(accesses, 2^22) entries; when it is full new
  samples are dropped (libCacheSim grows vectors without bound).
* Ties between equal scores go to the first sampled candidate (libCacheSim's
  std::sort leaves ties unspecified).
* With libCacheSim's defaults (memory window 2^26, batch 131072) no model is trained on
  traces with fewer than ~131072 re-referenced samples, so LRB is then exactly LRU, in
  libCacheSim as here (the Mooncake trace and the test session traces are such traces).
  The LRB paper tunes the memory window per trace; pass `memory_window` and
  `batch_size` to train on small traces. On a trace where libCacheSim's LRB does train
  (400K single-block Zipf accesses, tests) the two agree within a point.
* Request mode: pinned blocks are never sampled candidates.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.dlist import move_to_head, new_list, push_head, unlink
from ..structures.gbdt import Forest, new_forest, predict_one
from ..structures.learned import (dense_add, dense_remove, fit_rows, forest_view, lru_unpinned, model_views,
                                 next_access, ring_newest, ring_record, skip_len, trained)
from ..structures.packed import layout
from ..structures.rng import below_mod, seed_word
from .api import PolicySpec, register_hooks

N_PD = 31  # past distances kept per block (max_n_past_distances)
N_TS = 32  # feature index of size (max_n_past_timestamps)
N_EDC = 10
N_FEAT = N_TS + 2 + N_EDC  # 44
BASE_EDC = 10

# I64 head: scalars, then configuration (offsets of the packed tables)
(CUR, RCUR, SAMPLING, NROWS, INSIZE, TRSIZE, FREETOP, NTRAIN, STAMP, NSLOT, NFORCED, RNG,
 W, BATCH, K, SKIPLEN, MAXIDX, ROWCAP, U, ONE,
 O_LAST, O_MARK, O_PTIME, O_FM,  # in I64
 O_STATUS, O_XSLOT, O_PDI, O_INPOS, O_TRARR, O_TRPOS, O_SHEAD, O_PREV, O_NXT, O_INARR, O_CAND,
 O_PNEXT, O_PFREE, O_DIST, O_MI, L_MI,  # in I32
 O_X, O_Y, O_HASH, O_EDC, O_MF, L_MF,  # in F64
 HEAD) = range(47)


class LRBState(NamedTuple):
    """Packed tables (offsets in I64's head): numba's compile time grows quickly with
    the number of arrays in a state tuple, so all per-block and pool arrays share three
    buffers by dtype."""

    I64: np.ndarray  # scalars/config | last access[U] | dedup stamp[U] | sample time[P] | forest meta
    I32: np.ndarray  # status, distance slot, past-distance index, resident pos, tracked
    #                  array/pos, first pending sample [U each] | LRU prev/next [U+1] |
    #                  resident array [cap] | candidates [K] | pending next/free [P] |
    #                  distances [S*31] | forest ints
    F64: np.ndarray  # rows [(R+1)*44] (last row scratch) | labels [R] | 2^-i table |
    #                  EDCs [S*10] (float32-rounded) | forest floats
    offsets: np.ndarray  # trace request offsets (shared, read-only)
    blocks: np.ndarray  # trace blocks (shared, read-only)


def make_state(ctx) -> LRBState:
    t = ctx.trace
    p = ctx.params
    u = t.n_unique
    n = t.n_accesses
    w = int(p["memory_window"])
    batch = int(p["batch_size"])
    k = int(p["sample_rate"])
    if w < 2048:
        raise ValueError("lrb memory_window must be >= 2048 accesses")
    if batch < 2 or k < 1:
        raise ValueError("lrb batch_size must be >= 2 and sample_rate >= 1")
    maxidx = w // (1 << BASE_EDC) - 1
    counts = np.bincount(t.blocks, minlength=u)
    n_slots = max(1, int((counts >= 2).sum()))  # only reused blocks ever get distances
    pool = max(1, min(n, 1 << 22))
    cap = max(1, min(int(ctx.capacity), u))
    rowcap = 2 * batch
    forest = new_forest(int(p["num_iterations"]), int(p["num_leaves"]))
    o64, n64 = layout([HEAD, u, u, pool, 4])
    o32, n32 = layout([u, u, u, u, u, u, u, u + 1, u + 1, cap, k, pool, pool, n_slots * N_PD,
                        len(forest.mi)])
    of, nf = layout([(rowcap + 1) * N_FEAT, rowcap, maxidx + 1, n_slots * N_EDC, len(forest.mf)])
    I64 = np.zeros(n64, np.int64)
    I32 = np.zeros(n32, np.int32)
    F64 = np.zeros(nf, np.float64)
    I64[RNG] = seed_word(ctx.seed, 0x632BE59BD9B4E019, 31)
    I64[FREETOP] = pool
    I64[W:ONE + 1] = [w, batch, k, skip_len(ctx), maxidx, rowcap, u, 1]
    I64[O_LAST:O_FM + 1] = o64[1:]
    I64[O_STATUS:L_MI + 1] = o32 + [len(forest.mi)]
    I64[O_X:L_MF + 1] = of + [len(forest.mf)]
    I64[o64[2]:o64[2] + u] = -1  # dedup stamps
    I64[o64[4]:o64[4] + 4] = forest.fm
    I32[o32[1]:o32[1] + u] = -1  # no distance slot
    I32[o32[6]:o32[6] + u] = -1  # no pending sample
    prev, nxt = new_list(u)
    I32[o32[7]:o32[7] + u + 1] = prev
    I32[o32[8]:o32[8] + u + 1] = nxt
    I32[o32[11]:o32[11] + pool] = -1
    I32[o32[12]:o32[12] + pool] = np.arange(pool, dtype=np.int32)
    I32[o32[14]:] = forest.mi
    F64[of[2]:of[2] + maxidx + 1] = 0.5 ** np.arange(maxidx + 1, dtype=np.float64)
    return LRBState(I64, I32, F64, t.req_offsets, t.blocks)


def forest_of(st: LRBState) -> Forest:
    """Views of the model inside the packed state (Python side)."""
    return forest_view(st, O_MI, L_MI, O_MF, L_MF, O_FM)


# ------------------------------------------------------------------ primitives
@njit
def _features(st, b, t, xo):
    """Feature row of block b as of time t into F64[xo:xo+44] (libCacheSim's layout)."""
    h = st.I64
    I32 = st.I32
    F = st.F64
    w = h[W]
    age = t - h[h[O_LAST] + b]
    F[xo] = age
    for i in range(1, N_TS):
        F[xo + i] = 0.0
    n_within = 0
    p = I32[h[O_PDI] + b]
    slot = I32[h[O_XSLOT] + b]
    if p > 0:
        acc = 0
        m = p if p < N_PD else N_PD
        for i in range(m):
            d = ring_newest(I32, h[O_DIST] + slot * N_PD, N_PD, p, i)
            acc += d
            F[xo + i + 1] = d
            if acc < w:
                n_within += 1
    F[xo + N_TS] = 1.0
    F[xo + N_TS + 1] = n_within
    oe = h[O_EDC] + slot * N_EDC
    for i in range(N_EDC):
        x = _decay(h, F, age, i)
        F[xo + N_TS + 2 + i] = F[oe + i] * x if p > 0 else x


@njit
def _decay(h, F, d, i):
    """EDC i's decay over d accesses: 2^-(d >> (10 + i)), the table cut at MAXIDX."""
    di = d >> (BASE_EDC + i)
    return F[h[O_HASH] + (di if di < h[MAXIDX] else h[MAXIDX])]


@njit
def _mature(st, b, lab_fixed, now):
    """Turn b's pending samples into training rows, labelled log1p(now - sample time)
    when b is reused now (lab_fixed < 0), else log1p(lab_fixed): 2W when b is forgotten,
    age + W when b is evicted too old."""
    h = st.I64
    I32 = st.I32
    osh = h[O_SHEAD] + b
    i = I32[osh]
    if i < 0:
        return
    while i >= 0:
        t = h[h[O_PTIME] + i]
        if h[NROWS] < h[ROWCAP]:
            _features(st, b, t, h[O_X] + h[NROWS] * N_FEAT)
            lab = now - t if lab_fixed < 0 else lab_fixed
            st.F64[h[O_Y] + h[NROWS]] = np.float32(np.log1p(np.float64(lab)))
            h[NROWS] += 1
        nx = I32[h[O_PNEXT] + i]
        I32[h[O_PFREE] + h[FREETOP]] = i
        h[FREETOP] += 1
        i = nx
    I32[osh] = -1


@njit
def _untrack(st, b):
    h = st.I64
    I32 = st.I32
    I32[h[O_STATUS] + b] = 0
    I32[h[O_PDI] + b] = 0
    dense_remove(h, I32, TRSIZE, O_TRARR, O_TRPOS, b)


@njit
def _update(st, b, now):
    """Record a reuse of tracked block b at time now."""
    h = st.I64
    I32 = st.I32
    F = st.F64
    d = now - h[h[O_LAST] + b]
    p = I32[h[O_PDI] + b]
    slot = I32[h[O_XSLOT] + b]
    if slot < 0:
        slot = h[NSLOT]
        h[NSLOT] += 1
        I32[h[O_XSLOT] + b] = slot
    oe = h[O_EDC] + slot * N_EDC
    for i in range(N_EDC):
        x = _decay(h, F, d, i)
        F[oe + i] = np.float32((F[oe + i] * x if p > 0 else x) + 1.0)  # libCacheSim keeps EDCs as float
    I32[h[O_PDI] + b] = ring_record(I32, h[O_DIST] + slot * N_PD, N_PD, p, d)
    h[h[O_LAST] + b] = now


@njit
def _lookup(st, j):
    h = st.I64
    I32 = st.I32
    w = h[W]
    ost = h[O_STATUS]
    # forget: an evicted block last used exactly W accesses ago
    if j >= w:
        j0 = j - w
        b0 = np.int64(st.blocks[j0])
        if I32[ost + b0] == 2 and h[h[O_LAST] + b0] == j0:
            _mature(st, b0, 2 * w, j)
            _untrack(st, b0)
    b = np.int64(st.blocks[j])
    s = I32[ost + b]
    if s != 0:
        _mature(st, b, -h[ONE], j)
        _update(st, b, j)
        if s == 1:
            u1 = h[U] + 1
            move_to_head(I32[h[O_PREV]:h[O_PREV] + u1], I32[h[O_NXT]:h[O_NXT] + u1], b)
    if h[SAMPLING] != 0 and h[TRSIZE] > 0 and h[FREETOP] > 0:
        v = I32[h[O_TRARR] + below_mod(h, RNG, h[TRSIZE])]
        h[FREETOP] -= 1
        i = I32[h[O_PFREE] + h[FREETOP]]
        h[h[O_PTIME] + i] = j
        I32[h[O_PNEXT] + i] = I32[h[O_SHEAD] + v]
        I32[h[O_SHEAD] + v] = i


@njit
def _catch_up(st, upto):
    """Process the lookups of all accesses before `upto`, in order."""
    h = st.I64
    j = next_access(h, st.offsets, CUR, RCUR, SKIPLEN, upto)
    while j >= 0:
        _lookup(st, j)
        h[CUR] = j + 1
        j = next_access(h, st.offsets, CUR, RCUR, SKIPLEN, upto)


# ------------------------------------------------------------------ hooks
@njit
def on_hit(st, b, j, r, d):
    _catch_up(st, j + 1)


@njit
def on_insert(st, b, j, r, d):
    _catch_up(st, j + 1)
    h = st.I64
    I32 = st.I32
    if I32[h[O_STATUS] + b] == 0:
        h[h[O_LAST] + b] = j
        I32[h[O_PDI] + b] = 0
        dense_add(h, I32, TRSIZE, O_TRARR, O_TRPOS, b)
    I32[h[O_STATUS] + b] = 1
    dense_add(h, I32, INSIZE, O_INARR, O_INPOS, b)
    u1 = h[U] + 1
    push_head(I32[h[O_PREV]:h[O_PREV] + u1], I32[h[O_NXT]:h[O_NXT] + u1], b)


@njit
def _ranked_victim(st, r, pin, now):
    h = st.I64
    I32 = st.I32
    k = h[K]
    n_in = h[INSIZE]
    oc = h[O_CAND]
    oin = h[O_INARR]
    omark = h[O_MARK]
    h[STAMP] += 1
    stamp = h[STAMP]
    rows = 0
    trials = 0
    while rows < k:
        trials += 1
        if trials > 200 + 8 * k:
            break
        b = I32[oin + below_mod(h, RNG, n_in)]
        if pin[b] == r:
            continue
        if h[omark + b] == stamp and trials < 200:
            continue
        h[omark + b] = stamp
        I32[oc + rows] = b
        rows += 1
    best = -1
    best_s = -np.inf
    xo = h[O_X] + h[ROWCAP] * N_FEAT  # scratch row
    x = st.F64[xo:xo + N_FEAT]
    mi, mf, fm = model_views(st, O_MI, L_MI, O_MF, L_MF, O_FM)
    for i in range(rows):
        b = np.int64(I32[oc + i])
        _features(st, b, now, xo)
        s = predict_one(mi, mf, fm, x)
        if best < 0 or s > best_s:
            best = b
            best_s = s
    return best


@njit
def evict(st, j, r, pin):
    # block mode (r == -2): the missing access was looked up before the eviction, as in
    # libCacheSim; request mode: evictions precede the request's lookups
    _catch_up(st, j + 1 if r == -2 else j)
    h = st.I64
    I32 = st.I32
    w = h[W]
    u1 = h[U] + 1
    prev = I32[h[O_PREV]:h[O_PREV] + u1]
    nxt = I32[h[O_NXT]:h[O_NXT] + u1]
    v = lru_unpinned(I32, h[O_PREV], h[U], pin, r)  # LRU tail, skipping the request's pinned blocks
    if v < 0:
        return -1
    olast = h[O_LAST]
    if trained(h, O_FM) and j - h[olast + v] < w:
        c = np.int64(_ranked_victim(st, r, pin, j))
        if c >= 0:
            v = c
    h[SAMPLING] = 1
    unlink(prev, nxt, v)
    dense_remove(h, I32, INSIZE, O_INARR, O_INPOS, v)
    if j - h[olast + v] >= w:
        _mature(st, v, j - h[olast + v] + w, j)
        _untrack(st, v)
        h[NFORCED] += 1
    else:
        I32[h[O_STATUS] + v] = 2
    return v


register_hooks(LRBState, on_hit, on_insert, evict)


def train(st: LRBState, ctx, next_request: int) -> None:
    """Fit a new model once batch_size rows have matured (called between segments)."""
    if int(st.I64[NROWS]) < int(st.I64[BATCH]):
        return
    fit_rows(st, ctx, NROWS, O_X, O_Y, N_FEAT, forest_of(st))
    st.I64[NTRAIN] += 1


SPEC = PolicySpec(
    "lrb", make_state,
    "Learning Relaxed Belady (NSDI'20) - LightGBM on deltas/EDCs predicts reuse "
    "distance; evicts the farthest of 64 sampled blocks (LRU until trained).",
    defaults={"memory_window": 67108864, "batch_size": 131072, "sample_rate": 64,
              "num_iterations": 32, "num_leaves": 32, "learning_rate": 0.1},
    family="learned", train_every=16, train=train,
    # slow: the paper leaves LRB out of its 65-capacity sweep for speed
    weight=60.0, slow=True, libcachesim="LRB")
