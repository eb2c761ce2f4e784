"""What the learned policies (lrb, threelcache) share, inside their packed states
(structures/packed.py: the functions take the header slots of the segments they use).

Conventions they share with it:
* Lookups. A policy looks up each access itself, in order, as the engine's hooks reach
  it (next_access). In request mode a request's evictions happen as it arrives (time =
  its first access), before its blocks are looked up; pinned blocks are never evicted
  (the LRU fallback walks past them: lru_unpinned); blocks of oversized requests, which
  are never served, are not looked up (skip_len).
* Model. LightGBM (structures/gbdt.py) with libCacheSim's settings (gbdt, feature and
  bagging fraction 0.8, bagging every 5 iterations), flattened to at most
  `num_iterations` trees of `2 * num_leaves - 1` nodes and evaluated in njit code
  (model_views); fitted single-threaded and deterministic with the replay's seed
  (fit_rows).
* Training, a deviation from libCacheSim (which trains inside the access that completes
  a batch): at the next replay pause (every 16 requests, the spec's `train_every`) once
  the batch is complete; rows that mature before that pause join the batch (the buffer
  holds 2 x batch_size rows; further rows are dropped).
* Random numbers: our own seeded xorshift generator (structures/rng.py), so runs are
  reproducible per seed but do not draw libCacheSim's numbers.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from ..result import Mode
from .gbdt import Forest, export, fit, lightgbm_params


def forest_view(st, o_mi: int, l_mi: int, o_mf: int, l_mf: int, o_fm: int) -> Forest:
    """The model inside a packed learned-policy state (views; Python side). The o_*/l_*
    arguments are the header slots holding the segments' offsets and lengths."""
    h = st.I64
    return Forest(st.I32[h[o_mi]:h[o_mi] + h[l_mi]], st.F64[h[o_mf]:h[o_mf] + h[l_mf]],
                  h[h[o_fm]:h[o_fm] + 4])


def rows_view(st, nrows: int, o_x: int, o_y: int, n_feat: int):
    """The matured training rows and labels waiting for the next training (views)."""
    h = st.I64
    n = int(h[nrows])
    X = st.F64[h[o_x]:h[o_x] + n * n_feat].reshape(n, n_feat)
    return X, st.F64[h[o_y]:h[o_y] + n]


@njit
def next_access(h, offs, cur, rcur, skiplen, upto):
    """The next access before `upto` that a learned policy has not looked up yet, or -1.

    h[cur] is that access, h[rcur] its request; requests longer than h[skiplen] blocks
    are never served (the engine counts them as oversized), so their accesses are
    skipped. The caller looks the access up and sets h[cur] past it."""
    while h[cur] < upto:
        j = h[cur]
        while offs[h[rcur] + 1] <= j:
            h[rcur] += 1
        r = h[rcur]
        if offs[r + 1] - offs[r] > h[skiplen]:  # oversized request: never served
            h[cur] = offs[r + 1]
            continue
        return j
    return -1


def skip_len(ctx) -> int:
    """Requests longer than this many blocks are never served (see next_access): in block
    mode none (every access stands alone), in request mode those larger than the cache."""
    return ctx.trace.max_request_blocks + 1 if ctx.mode == Mode.BLOCK else int(ctx.capacity)


@njit
def trained(h, o_fm):
    """Has a model been fitted yet (its tree count, in the forest meta, is positive)?"""
    return h[h[o_fm] + 2] > 0


@njit
def model_views(st, o_mi, l_mi, o_mf, l_mf, o_fm):
    """The model inside a packed state, as predict_one takes it (njit side of forest_view)."""
    h = st.I64
    return (st.I32[h[o_mi]:h[o_mi] + h[l_mi]], st.F64[h[o_mf]:h[o_mf] + h[l_mf]],
            h[h[o_fm]:h[o_fm] + 4])


def fit_rows(st, ctx, nrows: int, o_x: int, o_y: int, n_feat: int, forest: Forest) -> None:
    """Fit LightGBM (the policy's num_iterations, num_leaves and learning_rate, seeded by
    ctx.seed) on the matured rows and write it into `forest`; the rows are then discarded."""
    p = ctx.params
    params = lightgbm_params(p["num_iterations"], p["num_leaves"], p["learning_rate"], ctx.seed)
    X, y = rows_view(st, nrows, o_x, o_y, n_feat)
    export(fit(X, y, params), forest)
    st.I64[nrows] = 0


# ----------------------------------------------- dense sets and distance rings (in I32)
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


@njit
def ring_record(I, o, n, k, d):
    """Record distance d in a ring of the last n distances at I[o:o+n] holding k so far
    (k is kept in [n, 2n) once the ring is full); returns the new k."""
    I[o + k % n] = d
    k += 1
    return k - n if k >= 2 * n else k


@njit
def ring_newest(I, o, n, k, i):
    """The i-th newest distance of such a ring (i < min(k, n))."""
    return I[o + (k - 1 - i) % n]


@njit
def lru_unpinned(prev, o, sent, pin, r):
    """The oldest block of an LRU list (dlist links at prev[o:], sentinel `sent`) that
    request r has not pinned, or -1; not removed."""
    v = np.int64(prev[o + sent])
    while v != sent and pin[v] == r:
        v = np.int64(prev[o + v])
    return -1 if v == sent else v
