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
from ..structures.learned import HEAD as LEARNED_HEAD
from ..structures.learned import INSIZE, NROWS, O_INARR, O_LAST, O_PDI, O_STATUS
from ..structures.learned import (add_row, admit, catch_up, catch_up_evict, dense_add, dense_remove,
                                 distance_features, fit_rows, lru_touch, lru_unpinned, on_hit,
                                 predict, record_reuse, register_learned, retire, trained)
from ..structures.learned import new_state as new_learned_state
from ..structures.rng import below_mod, seed_word
from .api import PolicySpec, register_hooks

N_PD = 31  # past distances kept per block (max_n_past_distances)
N_TS = 32  # feature index of size (max_n_past_timestamps)
N_EDC = 10
N_FEAT = N_TS + 2 + N_EDC  # 44
BASE_EDC = 10

# I64 head after the learned policies' slots (structures/learned.py): scalars, then
# configuration (offsets of the packed tables)
(SAMPLING, TRSIZE, FREETOP, NTRAIN, STAMP, NSLOT, NFORCED, RNG,
 W, BATCH, K, MAXIDX, ONE,
 O_MARK, O_PTIME,  # in I64
 O_XSLOT, O_TRARR, O_TRPOS, O_SHEAD, O_CAND, O_PNEXT, O_PFREE, O_DIST,  # in I32
 O_HASH, O_EDC,  # in F64
 HEAD) = range(LEARNED_HEAD, LEARNED_HEAD + 26)


class LRBState(NamedTuple):
    """Packed tables (offsets in I64's head): numba's compile time grows quickly with
    the number of arrays in a state tuple, so all per-block and pool arrays share three
    buffers by dtype."""

    I64: np.ndarray  # scalars/config | dedup stamp[U] | sample time[P] | last access[U] | forest meta
    I32: np.ndarray  # distance slot, tracked array/pos, first pending sample [U each] |
    #                  candidates [K] | pending next/free [P] | distances [S*31] | status,
    #                  distance count [U] | resident array [cap] / pos [U] | LRU prev/next
    #                  [U+1] | forest ints
    F64: np.ndarray  # 2^-i table | EDCs [S*10] (float32-rounded) | rows [(R+1)*44] (last
    #                  row scratch) | labels [R] | forest floats
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
    st, o64, o32, of = new_learned_state(LRBState, ctx, N_FEAT, HEAD, [u, pool],
                                         [u, u, u, u, k, pool, pool, n_slots * N_PD],
                                         [maxidx + 1, n_slots * N_EDC])
    I64, I32, F64 = st.I64, st.I32, st.F64
    I64[RNG] = seed_word(ctx.seed, 0x632BE59BD9B4E019, 31)
    I64[FREETOP] = pool
    I64[W:ONE + 1] = [w, batch, k, maxidx, 1]
    I64[O_MARK:O_PTIME + 1] = o64
    I64[O_XSLOT:O_DIST + 1] = o32
    I64[O_HASH:O_EDC + 1] = of
    I64[I64[O_MARK]:I64[O_MARK] + u] = -1  # dedup stamps
    I32[I64[O_XSLOT]:I64[O_XSLOT] + u] = -1  # no distance slot
    I32[I64[O_SHEAD]:I64[O_SHEAD] + u] = -1  # no pending sample
    I32[I64[O_PNEXT]:I64[O_PNEXT] + pool] = -1
    I32[I64[O_PFREE]:I64[O_PFREE] + pool] = np.arange(pool, dtype=np.int32)
    F64[I64[O_HASH]:I64[O_HASH] + maxidx + 1] = 0.5 ** np.arange(maxidx + 1, dtype=np.float64)
    return st


# ------------------------------------------------------------------ primitives
@njit
def _features(st, b, t, xo):
    """Feature row of block b as of time t into F64[xo:xo+44] (libCacheSim's layout)."""
    h = st.I64
    I32 = st.I32
    F = st.F64
    slot = I32[h[O_XSLOT] + b]  # its past distances' ring
    F[xo + N_TS + 1] = distance_features(st, b, t, xo, h[O_DIST] + slot * N_PD, N_PD, h[W])
    p = I32[h[O_PDI] + b]
    age = t - h[h[O_LAST] + b]
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
        add_row(st, b, t, now - t if lab_fixed < 0 else lab_fixed)
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
    record_reuse(st, b, h[O_DIST] + slot * N_PD, N_PD, now)


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
            lru_touch(st, b)
    if h[SAMPLING] != 0 and h[TRSIZE] > 0 and h[FREETOP] > 0:
        v = I32[h[O_TRARR] + below_mod(h, RNG, h[TRSIZE])]
        h[FREETOP] -= 1
        i = I32[h[O_PFREE] + h[FREETOP]]
        h[h[O_PTIME] + i] = j
        I32[h[O_PNEXT] + i] = I32[h[O_SHEAD] + v]
        I32[h[O_SHEAD] + v] = i


register_learned(LRBState, _lookup, _features)


# ------------------------------------------------------------------ hooks (on_hit: learned.on_hit)
@njit
def on_insert(st, b, j, r, d):
    catch_up(st, j + 1)
    if admit(st, b, j) == 0:
        dense_add(st.I64, st.I32, TRSIZE, O_TRARR, O_TRPOS, b)


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
    for i in range(rows):
        b = np.int64(I32[oc + i])
        s = predict(st, b, now)
        if best < 0 or s > best_s:
            best = b
            best_s = s
    return best


@njit
def evict(st, j, r, pin):
    catch_up_evict(st, j, r)
    h = st.I64
    w = h[W]
    v = lru_unpinned(st, pin, r)  # LRU tail, skipping the request's pinned blocks
    if v < 0:
        return -1
    olast = h[O_LAST]
    if trained(h) and j - h[olast + v] < w:
        c = np.int64(_ranked_victim(st, r, pin, j))
        if c >= 0:
            v = c
    h[SAMPLING] = 1
    retire(st, v)
    if j - h[olast + v] >= w:
        _mature(st, v, j - h[olast + v] + w, j)
        _untrack(st, v)
        h[NFORCED] += 1
    return v


register_hooks(LRBState, on_hit, on_insert, evict)


def train(st: LRBState, ctx, next_request: int) -> None:
    """Fit a new model once batch_size rows have matured (called between segments)."""
    if int(st.I64[NROWS]) < int(st.I64[BATCH]):
        return
    fit_rows(st, ctx)
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
