"""What the learned policies (lrb, threelcache) share: their packed state's common part
(structures/packed.py), its lookups, per-block records, training rows, model and features.

Conventions they share with it:
* State. A NamedTuple (I64, I32, F64, offsets, blocks) built by new_state: I64 opens with
  the header slots below (a policy numbers its own from HEAD), and the arrays end with
  the segments kept here: the per-block records, the resident blocks (a dense array and
  an LRU list), the training rows and labels, and the model.
* Blocks. A block's status is 0 (untracked), 1 (resident) or 2 (evicted, still tracked
  until the policy forgets it: status 0 again); a tracked block keeps its last access
  and its past distances (the count here, the ring in the policy's own segment).
* Lookups. A policy looks up each access itself, in order, as the engine's hooks reach
  it (catch_up calls the policy's lookup). In request mode a request's evictions happen
  as it arrives (time = its first access), before its blocks are looked up; pinned
  blocks are never evicted (the LRU fallback walks past them: lru_unpinned); blocks of
  oversized requests, which are never served, are not looked up (skip_len).
* Model. LightGBM (structures/gbdt.py) with libCacheSim's settings (gbdt, feature and
  bagging fraction 0.8, bagging every 5 iterations), flattened to at most
  `num_iterations` trees of `2 * num_leaves - 1` nodes and evaluated in njit code
  (predict); fitted single-threaded and deterministic with the replay's seed (fit_rows).
* Training, a deviation from libCacheSim (which trains inside the access that completes
  a batch): at the next replay pause (every 16 requests, the spec's `train_every`) once
  the batch is complete; rows that mature before that pause join the batch (the buffer
  holds 2 x batch_size rows; further rows are dropped: add_row).
* Random numbers: our own seeded xorshift generator (structures/rng.py), so runs are
  reproducible per seed but do not draw libCacheSim's numbers.

A policy binds its njit `lookup` and `features` to its state type (register_learned);
catch_up, add_row and predict call them through the stubs below, resolved by the type of
the state at compile time as the engine's hooks are (policies/api.py). Passing them as
arguments instead would make numba refuse to cache the callers, and a closure over them
is cached under a key that changes with every process (never found again).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba.extending import overload

from ..jit import inline_njit, njit
from ..result import Mode
from .dlist import move_to_head, new_list, push_head, unlink
from .gbdt import Forest, export, fit, lightgbm_params, new_forest, predict_one
from .packed import layout
from .ring import ring_newest, ring_record

# I64 header slots of every learned state
(CUR,  # the next access to look up (next_access)
 RCUR,  # its request
 SKIPLEN,  # requests longer than this are never served (skip_len)
 NROWS, ROWCAP, NFEAT,  # training rows held, room for them, features per row
 U, INSIZE,  # blocks in the trace (the LRU list's sentinel), resident blocks
 # offsets of the segments: per block last access (I64), status and number of past
 # distances (I32); the resident blocks' dense array, their positions in it and their
 # LRU links (I32); training rows and labels (F64); the forest (I32, F64, I64; lengths)
 O_LAST, O_STATUS, O_PDI, O_INARR, O_INPOS, O_PREV, O_NXT, O_X, O_Y,
 O_MI, L_MI, O_MF, L_MF, O_FM,
 HEAD,  # the policy's own slots start here
 ) = range(23)


def new_state(cls, ctx, n_feat: int, head: int, i64, i32, f64):
    """A learned policy's state cls(I64, I32, F64, offsets, blocks), zeros but for the
    shared header, the empty LRU list and the empty model: I64 holds the `head` header
    slots, the policy's segments of sizes i64, the last accesses and the forest meta;
    I32 the policy's segments i32, the statuses, past-distance counts, resident array and
    positions, LRU links and the forest's ints; F64 the policy's segments f64, the
    training rows (2 x batch_size rows of n_feat features, then a scratch row), their
    labels and the forest's floats. Returns the state and the offsets of the policy's
    segments in I64, I32 and F64."""
    p = ctx.params
    t = ctx.trace
    u = t.n_unique
    cap = max(1, min(int(ctx.capacity), u))
    rowcap = 2 * int(p["batch_size"])
    forest = new_forest(int(p["num_iterations"]), int(p["num_leaves"]))
    prev, nxt = new_list(u)
    o64, n64 = layout([head, *i64, u, len(forest.fm)])
    o32, n32 = layout([*i32, u, u, cap, u, u + 1, u + 1, len(forest.mi)])
    of, nf = layout([*f64, (rowcap + 1) * n_feat, rowcap, len(forest.mf)])
    I64 = np.zeros(n64, np.int64)
    I32 = np.zeros(n32, np.int32)
    F64 = np.zeros(nf, np.float64)
    h = I64
    h[SKIPLEN], h[ROWCAP], h[NFEAT], h[U] = skip_len(ctx), rowcap, n_feat, u
    h[O_LAST], h[O_FM] = o64[-2:]
    h[O_STATUS], h[O_PDI], h[O_INARR], h[O_INPOS], h[O_PREV], h[O_NXT], h[O_MI] = o32[-7:]
    h[O_X], h[O_Y], h[O_MF] = of[-3:]
    h[L_MI], h[L_MF] = len(forest.mi), len(forest.mf)
    I64[h[O_FM]:] = forest.fm
    I32[h[O_PREV]:h[O_NXT]] = prev
    I32[h[O_NXT]:h[O_MI]] = nxt
    I32[h[O_MI]:] = forest.mi
    F64[h[O_MF]:] = forest.mf
    return cls(I64, I32, F64, t.req_offsets, t.blocks), o64[1:-2], o32[:-7], of[:-3]


def skip_len(ctx) -> int:
    """Requests longer than this many blocks are never served (see next_access): in block
    mode none (every access stands alone), in request mode those larger than the cache."""
    return ctx.trace.max_request_blocks + 1 if ctx.mode == Mode.BLOCK else int(ctx.capacity)


def forest_view(st) -> Forest:
    """The model inside a learned state (views; Python side)."""
    h = st.I64
    return Forest(st.I32[h[O_MI]:h[O_MI] + h[L_MI]], st.F64[h[O_MF]:h[O_MF] + h[L_MF]],
                  h[h[O_FM]:h[O_FM] + 4])


def rows_view(st):
    """The matured training rows and labels waiting for the next training (views)."""
    h = st.I64
    n, n_feat = int(h[NROWS]), int(h[NFEAT])
    X = st.F64[h[O_X]:h[O_X] + n * n_feat].reshape(n, n_feat)
    return X, st.F64[h[O_Y]:h[O_Y] + n]


def fit_rows(st, ctx) -> None:
    """Fit LightGBM (the policy's num_iterations, num_leaves and learning_rate, seeded by
    ctx.seed) on the matured rows and write it into the state's model; the rows are then
    discarded."""
    p = ctx.params
    params = lightgbm_params(p["num_iterations"], p["num_leaves"], p["learning_rate"], ctx.seed)
    X, y = rows_view(st)
    export(fit(X, y, params), forest_view(st))
    st.I64[NROWS] = 0


# ------------------------------------------------ the policy's parts, by state type
_PARTS: dict[type, tuple[Any, Any]] = {}


def register_learned(state_cls: type, lookup_fn, features_fn) -> None:
    """Bind a learned policy's njit functions to its state type:
    lookup_fn(st, j)           look access j up (its block's bookkeeping, samples, rows);
    features_fn(st, b, t, xo)  block b's feature row as of access t into F64[xo:xo+NFEAT]."""
    _PARTS[state_cls] = (lookup_fn, features_fn)


def _part(st, i: int):
    cls = getattr(st, "instance_class", None)
    if cls not in _PARTS:
        raise TypeError(f"no learned policy registered for state type {st}")
    return _PARTS[cls][i].py_func


def lookup(st, j):  # pragma: no cover - replaced at compile time by the policy's
    raise NotImplementedError


def features(st, b, t, xo):  # pragma: no cover
    raise NotImplementedError


@overload(lookup)
def _ov_lookup(st, j):
    return _part(st, 0)


@overload(features)
def _ov_features(st, b, t, xo):
    return _part(st, 1)


# ------------------------------------------------------------------ lookups
@njit
def next_access(h, offs, upto):
    """The next access before `upto` that has not been looked up yet, or -1.

    h[CUR] is that access, h[RCUR] its request; requests longer than h[SKIPLEN] blocks
    are never served (the engine counts them as oversized), so their accesses are
    skipped. The caller looks the access up and sets h[CUR] past it."""
    while h[CUR] < upto:
        j = h[CUR]
        while offs[h[RCUR] + 1] <= j:
            h[RCUR] += 1
        r = h[RCUR]
        if offs[r + 1] - offs[r] > h[SKIPLEN]:  # oversized request: never served
            h[CUR] = offs[r + 1]
            continue
        return j
    return -1


@njit
def catch_up(st, upto):
    """Look up, in order, every access before `upto` not looked up yet."""
    h = st.I64
    j = next_access(h, st.offsets, upto)
    while j >= 0:
        lookup(st, j)
        h[CUR] = j + 1
        j = next_access(h, st.offsets, upto)


@inline_njit
def catch_up_evict(st, j, r):
    """Catch up before an eviction for access j of request r: in block mode (r == -2)
    the missing access is looked up before the eviction, as in libCacheSim; in request
    mode the request's evictions precede its lookups."""
    catch_up(st, j + 1 if r == -2 else j)


@njit
def on_hit(st, b, j, r, d):
    """A learned policy's on_hit hook: a hit is all lookup work (bookkeeping, samples)."""
    catch_up(st, j + 1)


# ------------------------------------------------------------------ rows and model
@inline_njit
def add_row(st, b, t, y):
    """A training row: block b's features as of access t, label log1p(y) rounded to
    float32 (as libCacheSim keeps it); dropped when the row buffer is full."""
    h = st.I64
    n = h[NROWS]
    if n < h[ROWCAP]:
        features(st, b, t, h[O_X] + n * h[NFEAT])
        st.F64[h[O_Y] + n] = np.float32(np.log1p(np.float64(y)))
        h[NROWS] = n + 1


@inline_njit
def trained(h):
    """Has a model been fitted yet (its tree count, in the forest meta, is positive)?"""
    return h[h[O_FM] + 2] > 0


@inline_njit
def predict(st, b, now):
    """The model's output for block b's features as of access `now` (built in the
    scratch row after the row buffer)."""
    h = st.I64
    xo = h[O_X] + h[ROWCAP] * h[NFEAT]
    features(st, b, now, xo)
    mi = st.I32[h[O_MI]:h[O_MI] + h[L_MI]]
    mf = st.F64[h[O_MF]:h[O_MF] + h[L_MF]]
    return predict_one(mi, mf, h[h[O_FM]:h[O_FM] + 4], st.F64[xo:xo + h[NFEAT]])


@inline_njit
def distance_features(st, b, t, xo, o, n, w):
    """The features libCacheSim's learned policies open with, for block b as of access t
    into F64[xo:xo+n+2]: its age, its n newest past distances (ring at I32[o:o+n];
    absent: 0) and its size (1). Returns how many of them have a running sum below w."""
    h = st.I64
    F = st.F64
    k = st.I32[h[O_PDI] + b]
    F[xo] = t - h[h[O_LAST] + b]
    for i in range(1, n + 1):
        F[xo + i] = 0.0
    acc = 0
    n_within = 0
    for i in range(min(k, n)):
        d = ring_newest(st.I32, o, n, k, i)
        acc += d
        F[xo + 1 + i] = d
        if acc < w:
            n_within += 1
    F[xo + n + 1] = 1.0
    return n_within


# ------------------------------------------------------------ blocks
@inline_njit
def admit(st, b, j):
    """Missing block b, inserted at access j, becomes resident (a block not tracked yet
    starts its record: last access j, no past distance); returns its status before."""
    h = st.I64
    I32 = st.I32
    k = h[O_STATUS] + b
    s = I32[k]
    if s == 0:
        h[h[O_LAST] + b] = j
        I32[h[O_PDI] + b] = 0
    I32[k] = 1
    dense_add(h, I32, INSIZE, O_INARR, O_INPOS, b)
    lru_push(st, b)
    return s


@inline_njit
def retire(st, v):
    """Resident block v leaves the cache and stays tracked (status 2)."""
    h = st.I64
    st.I32[h[O_STATUS] + v] = 2
    dense_remove(h, st.I32, INSIZE, O_INARR, O_INPOS, v)
    lru_remove(st, v)


@inline_njit
def record_reuse(st, b, o, n, now):
    """Tracked block b is accessed again at `now`: the distance since its last access
    joins its ring (n distances at I32[o:o+n]); its last access becomes now."""
    h = st.I64
    kp = h[O_PDI] + b
    kl = h[O_LAST] + b
    st.I32[kp] = ring_record(st.I32, o, n, st.I32[kp], now - h[kl])
    h[kl] = now


# ------------------------------------------------------------ dense sets (in I32)
@njit
def dense_add(h, I, size, o_arr, o_pos, b):
    """Append b to the dense array I[h[o_arr]:] of h[size] ids (its index at I[h[o_pos] + b])."""
    n = h[size]
    I[h[o_arr] + n] = b
    I[h[o_pos] + b] = n
    h[size] = n + 1


@njit
def dense_remove(h, I, size, o_arr, o_pos, b):
    """Remove b from the dense array: the last id takes its index; b's index becomes -1."""
    p = I[h[o_pos] + b]
    last = I[h[o_arr] + h[size] - 1]
    I[h[o_arr] + p] = last
    I[h[o_pos] + last] = p
    I[h[o_pos] + b] = -1
    h[size] -= 1


# ------------------------------------------------ the LRU list of resident blocks
@inline_njit
def _lru(st):
    h = st.I64
    u1 = h[U] + 1
    return st.I32[h[O_PREV]:h[O_PREV] + u1], st.I32[h[O_NXT]:h[O_NXT] + u1]


@inline_njit
def lru_push(st, b):
    """Block b enters the list at the recent end."""
    prev, nxt = _lru(st)
    push_head(prev, nxt, b)


@inline_njit
def lru_touch(st, b):
    """Block b moves to the recent end."""
    prev, nxt = _lru(st)
    move_to_head(prev, nxt, b)


@inline_njit
def lru_remove(st, b):
    prev, nxt = _lru(st)
    unlink(prev, nxt, b)


@inline_njit
def lru_oldest(st):
    """The least recently used block (the sentinel h[U] when the list is empty)."""
    h = st.I64
    return np.int64(st.I32[h[O_PREV] + h[U]])


@inline_njit
def lru_newer(st, b):
    """The block after b towards the recent end, the oldest after the newest (the
    circular `next` of libCacheSim's 3L-Cache)."""
    h = st.I64
    p = st.I32[h[O_PREV] + b]
    if p == h[U]:
        p = st.I32[h[O_PREV] + h[U]]
    return np.int64(p)


@inline_njit
def lru_unpinned(st, pin, r):
    """The least recently used block that request r has not pinned, or -1; not removed."""
    h = st.I64
    I32 = st.I32
    o = h[O_PREV]
    sent = h[U]
    v = np.int64(I32[o + sent])
    while v != sent and pin[v] == r:
        v = np.int64(I32[o + v])
    return -1 if v == sent else v
