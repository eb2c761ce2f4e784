"""S3-FIFO admission in front of a compute-aware main cache (paper sec. 5.4).

The composite the paper recommends when one-hit prompts flood the cache *and* miss costs
vary: quick demotion filters one-hit blocks in a small FIFO, and compute-awareness is
applied to the main cache only ("to prevent the admission queue from prematurely
evicting shallow blocks": a new shallow block is cheap, so a compute-aware small queue
would throw it out before it had a chance to be reused).

  small  FIFO of newly admitted blocks, target size max(1, floor(small_ratio x capacity)).
         A hit in small increments the block's counter (saturating at 3).
  ghost  FIFO of ids recently evicted from small (no data), at most
         floor(ghost_ratio x capacity) entries; the oldest is forgotten when full.
  main   the remaining blocks, evicted by RandomCompute (structures/pool.py: `samples`
         uniform draws, lowest ComputeIntensity / TimeSinceLastAccess). Main keeps no
         counters and does no CLOCK reinsertion: the score replaces S3-FIFO's main FIFO.

  insert: a block found in the ghost goes to main (and leaves the ghost); otherwise to
          small. Before the first eviction, a block arriving while small is at its target
          goes to main (as libCacheSim's S3FIFO.c, so a cold cache fills main first).
  evict:  from main if main holds more than capacity - small target blocks, or small is
          empty; else from small: its oldest block moves to main if its counter is
          >= move_to_main_threshold (and the loop continues), otherwise it is evicted and
          remembered in the ghost. A pinned oldest block (request mode: the current
          request reuses it) moves to main whatever its counter, since it cannot be
          evicted. If main has nothing evictable (all pinned) small is used.

Parameters (S3-FIFO defaults, as in the S3-FIFO paper and libCacheSim):
  small_ratio 0.10, ghost_ratio 0.90, move_to_main_threshold 2 (a block must be hit twice
  while in small to be promoted; in request mode that is two later requests), plus
  RandomCompute's samples and clock for the main cache.

Quick demotion is written here independently of s3fifo.py (plain S3-FIFO).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from ..structures.dlist import new_list, push_head, tail, unlink
from ..structures.fifoq import S3FIFO_DEFAULTS
from ..structures.pool import (P_N, Pool, new_pool, pool_add, pool_add_sampleable, pool_pick, pool_remove,
                               pool_sync, touch)
from .api import PolicySpec, register_hooks

ABSENT, SMALL, MAIN, GHOST = 0, 1, 2, 3
# q layout (int64)
Q_SMALL_N, Q_GHOST_N, Q_SMALL_CAP, Q_GHOST_CAP, Q_MAIN_CAP, Q_THRESH, Q_EVICTED = range(7)


class S3FIFOComputeState(NamedTuple):
    pool: Pool          # the main cache: RandomCompute's sampling pool (structures/pool.py)
    # small FIFO and ghost FIFO (intrusive lists, head = newest)
    sprev: np.ndarray
    snext: np.ndarray
    gprev: np.ndarray
    gnext: np.ndarray
    where: np.ndarray   # int8[U] ABSENT / SMALL / MAIN / GHOST
    freq: np.ndarray    # int8[U] hits while in small
    q: np.ndarray       # int64[7] see Q_*


def make_state(ctx) -> S3FIFOComputeState:
    p = ctx.params
    cap = int(ctx.capacity)
    small_ratio = float(p.get("small_ratio", 0.10))
    ghost_ratio = float(p.get("ghost_ratio", 0.90))
    thresh = int(p.get("move_to_main_threshold", 2))
    if not 0.0 < small_ratio < 1.0:
        raise ValueError(f"small_ratio must be in (0, 1), got {small_ratio}")
    if ghost_ratio < 0:
        raise ValueError(f"ghost_ratio must be >= 0, got {ghost_ratio}")
    if not 1 <= thresh <= 3:
        raise ValueError(f"move_to_main_threshold must be 1..3 (counters saturate at 3), got {thresh}")
    U = ctx.trace.n_unique
    small_cap = max(1, int(cap * small_ratio))
    ghost_cap = int(cap * ghost_ratio)
    sprev, snext = new_list(U)
    gprev, gnext = new_list(U)
    q = np.array([0, 0, small_cap, ghost_cap, max(0, cap - small_cap), thresh, 0], np.int64)
    return S3FIFOComputeState(new_pool(ctx), sprev=sprev, snext=snext, gprev=gprev, gnext=gnext,
                              where=np.zeros(U, np.int8), freq=np.zeros(U, np.int8), q=q)


@hook_njit
def on_hit(st, b, j, r, d):
    touch(st.pool, b, j, r, d)
    if st.where[b] == SMALL and st.freq[b] < 3:
        st.freq[b] += 1


@hook_njit
def _to_main(st, b):
    st.where[b] = MAIN
    st.freq[b] = 0
    pool_add(st.pool, b)


@hook_njit
def on_insert(st, b, j, r, d):
    pool_sync(st.pool, r)
    touch(st.pool, b, j, r, d)
    q = st.q
    if st.where[b] == GHOST:
        unlink(st.gprev, st.gnext, b)
        q[Q_GHOST_N] -= 1
        _to_main(st, b)
    elif q[Q_EVICTED] == 0 and q[Q_SMALL_N] >= q[Q_SMALL_CAP]:
        _to_main(st, b)
    else:
        push_head(st.sprev, st.snext, b)
        st.where[b] = SMALL
        st.freq[b] = 0
        q[Q_SMALL_N] += 1


@hook_njit
def _ghost_add(st, b):
    q = st.q
    if q[Q_GHOST_CAP] <= 0:
        st.where[b] = ABSENT
        return
    if q[Q_GHOST_N] >= q[Q_GHOST_CAP]:
        old = tail(st.gprev)
        unlink(st.gprev, st.gnext, old)
        st.where[old] = ABSENT
        q[Q_GHOST_N] -= 1
    push_head(st.gprev, st.gnext, b)
    st.where[b] = GHOST
    q[Q_GHOST_N] += 1


@hook_njit
def _evict_small(st, r, pin):
    """Demote the oldest small block: a victim id, or -1 if it was promoted to main."""
    t = tail(st.sprev)
    unlink(st.sprev, st.snext, t)
    st.q[Q_SMALL_N] -= 1
    if pin[t] == r:  # the current request's block: parked in main like its others
        _to_main(st, t)
        return -1
    if st.freq[t] >= st.q[Q_THRESH]:  # reused: promoted, and main may evict it for r
        st.where[t] = MAIN
        st.freq[t] = 0
        pool_add_sampleable(st.pool, t)
        return -1
    st.freq[t] = 0
    _ghost_add(st, t)
    return t


@hook_njit
def evict(st, j, r, pin):
    q = st.q
    q[Q_EVICTED] = 1
    pool_sync(st.pool, r)
    while True:
        if q[Q_SMALL_N] == 0 or st.pool.pinfo[P_N] > q[Q_MAIN_CAP]:
            v = pool_pick(st.pool, j, r, pin)
            if v >= 0:
                pool_remove(st.pool, v)
                st.where[v] = ABSENT
                return v
            if q[Q_SMALL_N] == 0:
                return -1
        v = _evict_small(st, r, pin)
        if v >= 0:
            return v


register_hooks(S3FIFOComputeState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "s3fifo_compute", make_state,
    "S3-FIFO small FIFO + ghost (quick demotion) in front of a RandomCompute "
    "main cache (paper 5.4).",
    defaults={**S3FIFO_DEFAULTS, "samples": 64, "clock": "access"},
    cost_aware=True, family="compute_aware",
    weight=6.0)
