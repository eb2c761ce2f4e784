"""LeCaR (Vietri et al., "Driving Cache Replacement with ML-based LeCaR", HotStorage'18):
two experts, LRU and LFU, and a weight per expert learned by regret minimisation.

- cache: every resident block is on an LRU list and in an LFU structure (frequency
  buckets, FIFO among equal counts as libCacheSim's LFU; a block enters with count 1).
- eviction: if both experts pick the same block it is evicted and remembered nowhere;
  otherwise the LRU expert's choice is evicted with probability ``w_lru`` (drawn as
  libCacheSim does: ``(rand % 100) / 100 < w_lru``, from the MMIX LCG that libCacheSim's
  ``next_rand`` uses, seeded with ``ctx.seed``), else the LFU expert's, and the victim goes
  into that expert's history (ghost FIFO of ``history * capacity`` entries each; the
  oldest ghost falls out when one is full).
- learning: a miss on a ghost of expert E means E's eviction was a mistake; with t the
  number of accesses since that eviction, E's weight is multiplied by
  ``exp(-learning_rate * discount**t)`` and both weights are renormalised, where
  ``discount = discount_base ** (1 / capacity)`` (paper: learning rate 0.45, discount
  0.005^(1/N)). The paper writes the update as the other expert's weight times
  ``exp(+learning_rate * r)``; after normalisation the two are the same. We use
  libCacheSim's exact arithmetic (it adds 1e-10 to each weight to keep them positive).
- a missed block's ghost is consumed *before* the victim for its insertion is drawn, as
  in libCacheSim (find, then evict, then insert): in block mode ``evict`` looks at the
  access it serves (``blocks[j]``); in request mode the first ``evict`` of a request
  consumes the ghosts of all its blocks.

Parameters: ``learning_rate`` (0.45), ``discount_base`` (0.005), ``lru_weight`` (initial
w_lru, 0.5), ``history`` (entries of each history as a fraction of capacity, 0.5 as in
libCacheSim and the authors' code), ``restore_freq`` (false; the authors' reference code
re-inserts a ghost-hit block with its old count + 1, libCacheSim and the paper's
pseudo-code with count 1), ``weight_clip`` (0; the authors' code clips the weights to
[0.01, 0.99], libCacheSim does not), ``update_weight`` (true; false = fixed mixture).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.dlist import new_list, push_front, tail_unpinned, unlink
from ..structures.fbuckets import append, bump, lowest_unpinned, new_buckets, new_cursor, remove
from ..structures.rng import lcg_next, new_lcg
from .api import PolicySpec, register_hooks

RES, GLRU, GLFU = 0, 1, 2  # lists: resident LRU order, LRU history, LFU history
# meta layout
_, NG1, NG2, HMAX, LAST_R, NH1, NH2, UPDATE, RESTORE = range(9)  # slot 0 unused
# fparams layout
LR, DR, CLIP = range(3)


class LeCaRState(NamedTuple):
    prev: np.ndarray  # int32[U+3] LRU list and two ghost lists
    nxt: np.ndarray
    ghost: np.ndarray  # int8[U]: 0, GLRU or GLFU
    etime: np.ndarray  # int64[U] access index of the eviction
    freq: np.ndarray  # int32[U]
    fprev: np.ndarray  # int32[U] within the frequency bucket
    fnxt: np.ndarray
    bhead: np.ndarray  # int32[F]
    btail: np.ndarray
    w: np.ndarray  # float64[2]: w_lru, w_lfu
    fp: np.ndarray  # float64[3]: learning rate, discount, clip
    meta: np.ndarray  # int64[9]
    rng: np.ndarray  # uint64[1]
    blocks: np.ndarray  # the trace (read only): the block an eviction is for
    offsets: np.ndarray
    cur: np.ndarray  # int64[2]: LRU eviction cursor (request, last pinned block skipped)
    fcur: np.ndarray  # fbuckets.new_cursor(): lowest count and the LFU eviction cursor


def make_state(ctx) -> LeCaRState:
    p = ctx.params
    t = ctx.trace
    U = t.n_unique
    cap = int(ctx.capacity)
    max_count = int(np.bincount(t.blocks).max()) + 1 if U else 1
    prev, nxt = new_list(U, 3)
    w0 = float(p["lru_weight"])
    if not 0.0 <= w0 <= 1.0:
        raise ValueError(f"lecar: lru_weight must be in [0, 1], got {w0}")
    meta = np.zeros(9, np.int64)
    meta[HMAX] = int(cap * float(p["history"]))
    meta[LAST_R] = -1
    meta[UPDATE] = int(bool(p["update_weight"]))
    meta[RESTORE] = int(bool(p["restore_freq"]))
    fp = np.array([float(p["learning_rate"]), float(p["discount_base"]) ** (1.0 / cap),
                   float(p["weight_clip"])])
    return LeCaRState(
        prev, nxt, np.zeros(U, np.int8), np.zeros(U, np.int64), np.zeros(U, np.int32),
        *new_buckets(U, max_count),
        np.array([w0, 1.0 - w0]), fp, meta, new_lcg(ctx.seed),
        t.blocks, t.req_offsets, np.full(2, -1, np.int64), new_cursor(),
    )


# ------------------------------------------------------------------ lists
@njit
def _push_head(st, k, b):
    push_front(st.prev, st.nxt, st.ghost.shape[0] + k, b)


@njit
def _unlink(st, b):
    unlink(st.prev, st.nxt, b)


# ------------------------------------------------------------------ learning
@njit
def _update_weight(st, t, e):
    """Expert e (0 = LRU, 1 = LFU) evicted a block that was requested t accesses later."""
    if not st.meta[UPDATE]:
        return
    r = st.fp[DR] ** t
    o = 1 - e
    wu = st.w[e] * np.exp(-st.fp[LR] * r) + 1e-10
    s = wu + st.w[o] + 2e-10
    st.w[e] = wu / s
    st.w[o] = (st.w[o] + 1e-10) / s
    clip = st.fp[CLIP]
    if clip > 0.0:
        if st.w[0] >= 1.0 - clip:
            st.w[0] = 1.0 - clip
            st.w[1] = clip
        elif st.w[1] >= 1.0 - clip:
            st.w[1] = 1.0 - clip
            st.w[0] = clip


@njit
def _ghost_hit(st, b, j):
    g = st.ghost[b]
    if g == 0:
        return
    _unlink(st, b)
    st.ghost[b] = 0
    if g == GLRU:
        st.meta[NG1] -= 1
        st.meta[NH1] += 1
        _update_weight(st, j - st.etime[b], 0)
    else:
        st.meta[NG2] -= 1
        st.meta[NH2] += 1
        _update_weight(st, j - st.etime[b], 1)
    if not st.meta[RESTORE]:
        st.freq[b] = 0


# ------------------------------------------------------------------ hooks
@njit
def on_hit(st, b, j, r, d):
    _unlink(st, b)
    _push_head(st, RES, b)
    bump(st.fprev, st.fnxt, st.bhead, st.btail, st.freq, b)


@njit
def on_insert(st, b, j, r, d):
    _ghost_hit(st, b, j)
    _push_head(st, RES, b)
    f = st.freq[b] + 1  # 1, or the restored count + 1
    st.freq[b] = f
    append(st.fprev, st.fnxt, st.bhead, st.btail, f, b)
    if f < st.fcur[0]:
        st.fcur[0] = f


# The LRU walk skips the current request's blocks, which stay put while it evicts (only
# victims move), so a walk for request r resumes after the last pinned block it skipped
# (fbuckets.lowest_unpinned does the same for the LFU expert).
@njit
def _lru_choice(st, pin, r):
    return tail_unpinned(st.prev, st.ghost.shape[0] + RES, pin, r, st.cur)


@njit
def evict(st, j, r, pin):
    # learn from the ghosts of the access(es) this eviction makes room for
    if r < 0:
        _ghost_hit(st, st.blocks[j], j)
    elif st.meta[LAST_R] != r:
        st.meta[LAST_R] = r
        for jj in range(st.offsets[r], st.offsets[r + 1]):
            _ghost_hit(st, st.blocks[jj], j)
    lru = _lru_choice(st, pin, r)
    lfu = lowest_unpinned(st.fnxt, st.bhead, st.fcur, pin, r)
    if lru < 0:
        return -1
    if lru == lfu:
        v = lru
        expert = 0
    elif float(lcg_next(st.rng) % np.uint64(100)) / 100.0 < st.w[0]:
        v = lru
        expert = GLRU
    else:
        v = lfu
        expert = GLFU
    _unlink(st, v)
    remove(st.fprev, st.fnxt, st.bhead, st.btail, st.freq[v], v)
    st.etime[v] = j
    if expert == 0:
        st.freq[v] = 0
        return v
    _push_head(st, expert, v)
    st.ghost[v] = expert
    slot = NG1 if expert == GLRU else NG2
    st.meta[slot] += 1
    s = st.ghost.shape[0] + expert
    while st.meta[slot] > st.meta[HMAX]:
        g = st.prev[s]
        _unlink(st, g)
        st.ghost[g] = 0
        st.freq[g] = 0
        st.meta[slot] -= 1
    return v


register_hooks(LeCaRState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "lecar", make_state,
    "LeCaR - LRU and LFU experts, eviction drawn by weights learned from regret "
    "on their ghost histories.",
    defaults={"learning_rate": 0.45, "discount_base": 0.005, "lru_weight": 0.5, "history": 0.5,
              "restore_freq": False, "weight_clip": 0.0, "update_weight": True},
    family="learned",
    no_serving="its eviction replays the current request's ghost hits, and the serving replay evicts for no "
               "single request",
    # at the default floor its 24 GiB values sit 0.13-0.15 point above the doubled rate's
    # (128 against 256 sampled blocks, 4 weeks; docs/performance.md): docs/sampling.md ("The floor")
    sample_floor=128, weight=3.5, libcachesim="LeCaR")
