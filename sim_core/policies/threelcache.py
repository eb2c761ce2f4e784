"""3L-Cache (Zhou et al., FAST'25), after libCacheSim's ThreeLCache.

Algorithm (libCacheSim `cache/eviction/3LCache/ThreeLCache.cpp`, its default
byte-miss-ratio objective, which for unit-size blocks is the object miss ratio; the
booster is LightGBM, as in libCacheSim, see structures/gbdt.py):

* Metadata. Resident blocks sit in an LRU queue; evicted blocks go to a FIFO history
  (the "out cache") of at most resident * (hsw - 1) + 2 entries (hsw = history window
  multiplier, 2 at start, auto-tuned up to 6), one entry dropped per access once full.
  A block is tracked while resident or in the history; it keeps its last access time,
  access count (capped at 65535) and its last 3 inter-access distances.
* Features (6): [0] age = now - last access; [1..3] past distances, newest first
  (absent = 0); [4] size (always 1); [5] access count.
* Sampling / labels. After the first eviction, every access samples one uniformly
  random entry of (resident queue + history, history tombstones included); a block
  holds at most one pending sample. The sample becomes a training row (features as of
  the sample time) when the block is accessed again, label log1p(reuse time - sample
  time), or when it leaves the history, label log1p(MAX_EVICTION_BOUNDARY + age), where
  the boundary is the largest age seen at such drops before the previous training. Once
  a model exists, only one maturing sample in 4 becomes a row.
* Training schedule. When `batch_size` rows (default 65536) exist and the current
  eviction batch is used up, LightGBM is fitted (16 iterations, 32 leaves, learning
  rate 0.1); the rows are discarded; pending predictions are dropped.
* Eviction. Before the first model: the LRU block. Afterwards, eviction works in
  batches: a rank step collects candidates by *bidirectional sampling* -- quick
  demotion takes blocks admitted since training (newest side, up to 1.5 x sample_rate,
  while they hold more than reserved_space % of the cache), and a sampling pointer walks
  the LRU queue from the old end taking blocks with frequency below `sample_boundary`
  (plus the first sampling_lru % of the queue unconditionally), sample_rate =
  min(1024, 1% of the queue + 2) per step. All candidates are predicted, their reuse
  distance exp(prediction) + (now - training time) goes into a max-heap, and the next
  (candidates / 2) evictions pop the heap (entries of blocks hit since are stale).
  Each full pass of the pointer re-tunes sample_boundary (p99 of evicted blocks'
  log2-frequency), sampling_lru and reserved_space, as libCacheSim does; hsw is
  re-tuned at training time after 10^6 accesses with a full history.

The model, the training at replay pauses (a deviation), the random numbers and request
mode follow the conventions of sim_core/structures/learned.py. Further deviations from
libCacheSim:
* The new-object queue and the prediction heap have fixed capacities (2 x capacity +
  4096 entries): the oldest new-object entry is dropped, and stale heap entries are
  compacted away, when they fill (libCacheSim grows vectors without bound).
* libCacheSim dereferences a missing hash-map entry when quick demotion meets a block
  that already left the history (undefined behaviour); such a block is skipped here.
  An empty heap (possible only in request mode, where pinned blocks are skipped) makes a
  new rank step, then falls back to LRU.
* Ties in the heap follow our binary heap, not std::pop_heap; with our own random
  numbers, hit ratios match libCacheSim statistically, not exactly.
* Request mode: stale heap entries of pinned blocks are dropped.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.heap import scored_clear, scored_drop, scored_pop, scored_push
from ..structures.learned import CUR, INSIZE, NROWS, O_INARR, O_LAST, O_STATUS, U
from ..structures.learned import HEAD as LEARNED_HEAD
from ..structures.learned import (add_row, admit, catch_up, catch_up_evict, distance_features,
                                 fit_rows, lru_newer, lru_oldest, lru_touch, lru_unpinned, on_hit,
                                 predict, record_reuse, register_learned, retire, trained)
from ..structures.learned import new_state as new_learned_state
from ..structures.log2hist import log2_count, log2_quantile
from ..structures.ring import fifo_at, fifo_drop, fifo_push
from ..structures.rng import below_mod, seed_word
from .api import PolicySpec, register_hooks

N_PD = 3  # past distances (max_n_past_distances)
N_FEAT = 6
FREQ_MAX = 65535

# I64 head, after the learned policies' slots (structures/learned.py)
(SAMPLING, OFRONT, OSIZE, QHEAD, QSIZE, NEWSIZE, HSIZE, NPRED,
 EVN, SR, SB, SLRU, RES, SP, SCAN, IQL, ED0, ED1, ED2, ED3, HSW, MAB0, MAB1, ISFULL, NREQ,
 NHIT, NWHIT, SPTS, ORIGIN, READY, NTRAIN, RNG, SEEN,
 BATCH, EVR, RC, QC, HC, CC,
 OBJD,  # 16 slots: evictions per log2(frequency)
 ) = range(LEARNED_HEAD, LEARNED_HEAD + 40)
(O_STIME,  # in I64
 O_HSLOT, O_DIST, O_FREQ, O_HASP, O_OKEY, O_Q, O_HKEY, O_CAND,  # in I32
 O_PRED, O_HVAL,  # in F64
 HEAD) = range(OBJD + 16, OBJD + 28)
PH = (O_HVAL, O_HKEY, HSIZE, HC, O_HASP, O_PRED, NPRED)  # the prediction heap (structures/heap.py)
HIST = (O_OKEY, OFRONT, OSIZE, RC)  # the history, a FIFO ring (tombstone: -1; structures/ring.py)
NEWQ = (O_Q, QHEAD, QSIZE, QC)  # the queue of blocks admitted since the model was trained


class ThreeLState(NamedTuple):
    """Packed tables (offsets in I64's head), few fields to keep numba compiles short."""

    I64: np.ndarray  # scalars/config | pending sample time [U] | last access [U] | forest meta
    I32: np.ndarray  # history ring slot [U], distances [3U], frequency, has-prediction [U]
    #                  | history ring [RC] | new-object queue [QC] | heap keys [HC] |
    #                  candidates [CC] | status, distance count [U] | resident keys [cap]
    #                  / positions [U] | LRU prev/next [U+1] | forest ints
    F64: np.ndarray  # prediction per block [U] | heap values [HC] | rows [(R+1)*6] |
    #                  labels [R] | forest floats
    offsets: np.ndarray  # trace request offsets (shared, read-only)
    blocks: np.ndarray  # trace blocks (shared, read-only)


def make_state(ctx) -> ThreeLState:
    t = ctx.trace
    u = t.n_unique
    batch = int(ctx.params["batch_size"])
    if batch < 2:
        raise ValueError("threelcache batch_size must be >= 2")
    cap = max(1, min(int(ctx.capacity), u))
    rc = 5 * cap + 2 + t.max_request_blocks + 16
    qc = 2 * cap + 4096
    hc = 2 * cap + 4096
    cc = cap + 4096
    st, o64, o32, of = new_learned_state(ThreeLState, ctx, N_FEAT, HEAD, [u],
                                         [u, N_PD * u, u, u, rc, qc, hc, cc], [u, hc])
    I64 = st.I64
    I64[RNG] = seed_word(ctx.seed, 0x7F4A7C159E3779B9, 29)
    I64[SR] = 1024
    I64[SB] = 1
    I64[SLRU] = 1
    I64[RES] = 2
    I64[HSW] = 2
    I64[SP] = -1
    I64[BATCH:CC + 1] = [batch, 2, rc, qc, hc, cc]
    I64[O_STIME] = o64[0]
    I64[O_HSLOT:O_CAND + 1] = o32
    I64[O_PRED:O_HVAL + 1] = of
    return st


# ------------------------------------------------------------------ primitives
@njit
def _keeps(h, t):
    """Does the pending sample taken at t (0: none) become a training row when it matures?
    Every one before the first model, one in 4 afterwards (libCacheSim)."""
    return t != 0 and (below_mod(h, RNG, 4) == 0 or not trained(h))


@njit
def _features(st, b, t, xo):
    """Feature row of block b as of time t into F64[xo:xo+6] (libCacheSim's layout)."""
    h = st.I64
    distance_features(st, b, t, xo, h[O_DIST] + N_PD * b, N_PD, 0)
    st.F64[xo + 5] = st.I32[h[O_FREQ] + b]


@njit
def _add_row(st, b, t, future):
    add_row(st, b, t, future)
    h = st.I64
    if h[NROWS] >= h[BATCH] and h[EVN] <= 0:
        h[READY] = 1


@njit
def _lookup(st, j):
    h = st.I64
    I32 = st.I32
    b = np.int64(st.blocks[j])
    if h[ISFULL] == 1:
        h[NREQ] += 1
    s = I32[h[O_STATUS] + b]
    if s != 0:
        if h[ISFULL] == 1:
            if s == 1:
                h[NHIT] += 1
            h[NWHIT] += 1
        ks = h[O_STIME] + b
        t = h[ks]
        if _keeps(h, t):
            _add_row(st, b, t, j - t)
        h[ks] = 0
        # meta update: distance ring, last access, frequency
        record_reuse(st, b, h[O_DIST] + N_PD * b, N_PD, j)
        kf = h[O_FREQ] + b
        if I32[kf] < FREQ_MAX:
            I32[kf] += 1
        if s == 1:
            if h[SP] == b:
                h[SP] = lru_newer(st, b)
            scored_drop(h, I32, PH, b)
            lru_touch(st, b)
    if h[SAMPLING] != 0:
        n_all = h[INSIZE] + h[OSIZE]
        if n_all > 0:
            pos = below_mod(h, RNG, n_all)
            if pos < h[INSIZE]:
                v = I32[h[O_INARR] + pos]
            else:  # tombstones (-1) swallow the sample
                v = fifo_at(h, I32, HIST, pos - h[INSIZE])
            if v >= 0 and h[h[O_STIME] + v] == 0:
                h[h[O_STIME] + v] = j
    _erase_out(st, j)


@njit
def _pop_history(st, j, label):
    """Drop the oldest history entry; its block is forgotten (with a row if sampled)."""
    h = st.I64
    I32 = st.I32
    b = np.int64(fifo_at(h, I32, HIST, 0))
    if b >= 0:
        t = h[h[O_STIME] + b]
        if label and _keeps(h, t):
            age = j - h[h[O_LAST] + b]
            if h[MAB1] < age:
                h[MAB1] = age
            _add_row(st, b, t, h[MAB0] + age)
        I32[h[O_STATUS] + b] = 0
        h[h[O_STIME] + b] = 0
        scored_drop(h, I32, PH, b)
    fifo_drop(h, HIST, 1)


@njit
def _erase_out(st, j):
    h = st.I64
    if h[OSIZE] >= h[INSIZE] * (h[HSW] - 1) + 2:
        if h[ISFULL] == 0:
            h[ISFULL] = 1
        _pop_history(st, j, True)


register_learned(ThreeLState, _lookup, _features)


# ------------------------------------------------------------------ rank
@njit
def _sample_rate_for(iql, evr):
    return np.int64(iql * 0.01 + evr) if iql > 2 else 1


@njit
def _retune(st):
    """End of a sampling-pointer pass: libCacheSim's parameter auto-tuning."""
    h = st.I64
    h[SB] = log2_quantile(h, OBJD, 16, 0.99) & 0xFFFF  # p99 of evicted blocks' frequency
    if h[ED2] * h[ED1] > h[ED0] * h[ED3]:
        h[SLRU] = (h[SLRU] + 1) & 0xFF
    elif h[SLRU] > 1:
        h[SLRU] -= 1
    if h[ED0] + h[ED2] > h[QSIZE]:
        h[RES] = (h[RES] + 1) & 0xFF
    elif h[RES] > 1:
        h[RES] //= 2
    h[ED0] = 0
    h[ED1] = 0
    h[ED2] = 0
    h[ED3] = 0
    for i in range(16):
        h[OBJD + i] = 0


@njit
def _rank(st, now):
    """Collect candidates (quick demotion + LRU-side scan), predict, push to the heap;
    returns the number of candidates."""
    h = st.I64
    I32 = st.I32
    evr = h[EVR]
    if h[IQL] == 0:
        h[IQL] = h[INSIZE]
    if h[SR] >= h[IQL] * 0.01 + evr:
        h[SR] = _sample_rate_for(h[IQL], evr)
    oc = h[O_CAND]
    ccap = h[CC]
    c = 0
    # quick demotion: blocks admitted since the model was trained, oldest first
    i = 0
    jq = 0
    ost = h[O_STATUS]
    while (h[NEWSIZE] > (h[INSIZE] * h[RES]) // 100 and jq < np.int64(h[SR] * 1.5)
           and i < h[QSIZE]):
        b = fifo_at(h, I32, NEWQ, i)
        h[NEWSIZE] -= 1
        if I32[ost + b] == 1 and c < ccap:
            I32[oc + c] = b
            c += 1
            jq += 1
        i += 1
    fifo_drop(h, NEWQ, i)
    if h[QSIZE] == 0:
        h[NEWSIZE] = 0
    # scan from the sampling pointer towards the recent end
    if h[NEWSIZE] < (h[INSIZE] * h[RES]) // 10:
        if h[SP] < 0 or I32[ost + h[SP]] != 1:
            h[SP] = lru_oldest(st)
        idx_row = 0
        while idx_row < h[SR] and c < h[IQL] and c < ccap:
            sp = h[SP]
            f1 = I32[h[O_FREQ] + sp] - 1
            lru_zone = (h[IQL] * h[SLRU]) // 100
            if h[ED3] == 0 and h[SCAN] > lru_zone:
                h[ED2] = h[ED0]
                h[ED3] = h[ED1]
                h[ED1] = 0
                h[ED0] = 0
            if f1 < h[SB] or h[SCAN] <= lru_zone + evr:
                I32[oc + c] = sp
                c += 1
                idx_row += 1
            h[SCAN] += 1
            if h[SCAN] >= h[IQL]:
                h[IQL] = h[INSIZE]
                h[SR] = 1024
                if h[SR] >= np.int64(h[IQL] * 0.01 + evr):
                    h[SR] = _sample_rate_for(h[IQL], evr)
                idx_row = 0
                h[SP] = lru_oldest(st)
                h[SCAN] = 0
                scored_clear(h, I32, PH)
                _retune(st)
                continue
            h[SP] = lru_newer(st, sp)
        if c > 0:
            h[SPTS] = h[h[O_LAST] + I32[oc + c - 1]]
        h[ED1] += h[SR]
    # predict every candidate and queue its reuse distance
    shift = np.float64(now - h[ORIGIN])
    for k in range(c):
        b = np.int64(I32[oc + k])
        val = np.float64(np.float32(np.exp(predict(st, b, now)) + shift))
        scored_push(h, st.F64, I32, PH, val, b)
    return c


@njit
def _predicted_victim(st, j, r, pin):
    h = st.I64
    I32 = st.I32
    ranked = False
    while True:
        if h[EVN] <= 0 or h[NPRED] == 0:
            h[EVN] = _rank(st, j) // h[EVR]
            ranked = True
        while True:
            key = scored_pop(h, st.F64, I32, PH)
            if key < 0:
                break
            if pin[key] == r:
                scored_drop(h, I32, PH, key)
                continue
            log2_count(h, OBJD, I32[h[O_FREQ] + key])
            if h[h[O_LAST] + key] <= h[SPTS]:
                h[ED0] += 1
            return key
        if ranked:
            return lru_unpinned(st, pin, r)
        h[EVN] = 0


# ------------------------------------------------------------------ hooks (on_hit: learned.on_hit)
@njit
def on_insert(st, b, j, r, d):
    catch_up(st, j + 1)
    h = st.I64
    I32 = st.I32
    s = admit(st, b, j)
    if s == 0:
        I32[h[O_FREQ] + b] = 1
        h[h[O_STIME] + b] = 0
    elif s == 2:  # back from the history: its entry becomes a tombstone
        I32[h[O_OKEY] + I32[h[O_HSLOT] + b]] = -1
    if h[SEEN] == 0:  # libCacheSim's sampling pointer starts at resident slot 0
        h[SEEN] = 1
        h[SP] = b
    if trained(h):
        if h[QSIZE] >= h[QC]:  # full: forget the oldest new object
            fifo_drop(h, NEWQ, 1)
            h[NEWSIZE] -= 1
        fifo_push(h, I32, NEWQ, b)
        h[NEWSIZE] += 1


@njit
def evict(st, j, r, pin):
    catch_up_evict(st, j, r)
    h = st.I64
    I32 = st.I32
    if trained(h):
        v = _predicted_victim(st, j, r, pin)
    else:
        v = lru_unpinned(st, pin, r)
    if v < 0:
        return -1
    h[SAMPLING] = 1
    h[EVN] -= 1
    scored_drop(h, I32, PH, v)
    if h[SP] == v:
        h[SP] = lru_newer(st, v)
    # into the history
    if h[OSIZE] >= h[RC]:
        _pop_history(st, j, False)
    retire(st, v)
    I32[h[O_HSLOT] + v] = fifo_push(h, I32, HIST, v)
    return v


register_hooks(ThreeLState, on_hit, on_insert, evict)


def train(st: ThreeLState, ctx, next_request: int) -> None:
    """Fit a new model when the batch is complete (called between segments)."""
    h = st.I64
    if not h[READY]:
        return
    fit_rows(st, ctx)
    h[READY] = 0
    h[NTRAIN] += 1
    # pending predictions belong to the old model
    st.I32[h[O_HASP]:h[O_HASP] + h[U]] = 0
    h[NPRED] = 0
    h[HSIZE] = 0
    h[MAB0] = h[MAB1]
    h[ORIGIN] = h[CUR] - 1
    # history-window auto-tuning (libCacheSim: after 10^6 accesses with a full history)
    if h[NREQ] > 10**6 and h[ISFULL]:
        n_hit, n_win, n_req, hsw = int(h[NHIT]), int(h[NWHIT]), int(h[NREQ]), int(h[HSW])
        ratio = (n_win - n_hit) / (n_hit * (hsw - 1)) if n_hit else (np.inf if n_win > n_hit else np.nan)
        if ratio > 0.01:
            if hsw - 1 < (n_req - n_hit) // (n_win - n_hit):
                hsw += 1
                h[ISFULL] = 0
            h[HSW] = min(hsw, 6)
        h[NHIT] = 0
        h[NWHIT] = 0
        h[NREQ] = 0


SPEC = PolicySpec(
    "threelcache", make_state,
    "3L-Cache (FAST'25) - LightGBM reuse-distance model over bidirectionally "
    "sampled candidates, batched eviction (LRU until trained).",
    defaults={"batch_size": 65536, "num_iterations": 16, "num_leaves": 32, "learning_rate": 0.1},
    family="learned", train_every=16, train=train,
    # slow: ~150x LRU per access, left out of policy=all as the paper left out LRB
    weight=150.0, slow=True, libcachesim="ThreeLCache")
