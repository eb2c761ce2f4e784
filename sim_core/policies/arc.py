"""ARC: Adaptive Replacement Cache (Megiddo & Modha, FAST'03).

Algorithm (c = capacity in blocks):
  T1  resident blocks seen once recently (LRU order),   B1  ghosts evicted from T1;
  T2  resident blocks seen at least twice (LRU order),  B2  ghosts evicted from T2;
  p   adaptive target size of T1, a float in [0, c], initially 0.
  hit in T1 or T2      -> move to the MRU end of T2;
  miss, x in B1 (ghost hit) -> p = min(p + max(|B2|/|B1|, 1), c);  REPLACE;  x -> T2;
  miss, x in B2 (ghost hit) -> p = max(p - max(|B1|/|B2|, 1), 0);  REPLACE;  x -> T2;
  miss elsewhere (case IV): if |T1|+|B1| = c: drop the LRU of B1 and REPLACE, or if B1 is
      empty evict the LRU of T1 without a ghost; else if |T1|+|T2|+|B1|+|B2| = 2c drop
      the LRU of B2, then REPLACE;  x -> T1.
  REPLACE: if T1 is non-empty and (|T1| > p or (|T1| = p and x came from B2)), or T2 is
      empty, the LRU of T1 becomes the MRU of B1; otherwise the LRU of T2 becomes the
      MRU of B2.
So a ghost hit in B1 (recency was evicted too early) grows T1's target, a ghost hit in
B2 (frequency was evicted too early) shrinks it. No parameters.

Equality with libCacheSim (ARC.c): same float p and delta, same ">= c" / ">= 2c"
tests, ghost lists are trimmed only when an eviction is due (the cache is full), and a
ghost hit is resolved - p adapted and the ghost removed - *before* the eviction it
triggers. Our engine calls `evict` before `on_insert`, so in block mode `evict` looks
the incoming block blocks[j] up itself. Block mode equals libcachesim.ARC exactly.

Request mode (our extension; libCacheSim has none): the engine evicts for request r
before r's blocks are looked up, so those evictions are case IV (no ghost hit is known
yet); each missing block of r is then looked up when it is inserted: a ghost hit still
adapts p and sends the block to T2. Blocks of r are pinned: REPLACE takes the least
recent unpinned block of the chosen list, or of the other one if the chosen list
holds only pinned blocks.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.mlist import move_to_head, new_cursors, new_links, push_head, tail, tail_unpinned, unlink
from .api import PolicySpec, register_hooks

T1, T2, B1, B2 = 0, 1, 2, 3  # list ids: sentinel U + id; size lk[META, id]
L, WHERE, META = 0, 2, 3  # rows of lk: L, L + 1 links of all four lists; list of each block; scalars
NONE, IN_T1, IN_T2, IN_B1, IN_B2, HIT_B1, HIT_B2 = 0, 1, 2, 3, 4, 5, 6  # lk[WHERE]; HIT_*: ghost hit, -> T2
CAP = 4  # lk[META, CAP]
N_SENT, N_META = 4, 5


class ARCState(NamedTuple):
    lk: np.ndarray  # int32[4, U+4+N_META]: links, where, |T1| |T2| |B1| |B2| capacity
    p: np.ndarray  # float64[1]: target size of T1
    blocks: np.ndarray  # the trace's blocks (block mode: the incoming block of evict)
    cur: np.ndarray  # eviction cursors of T1 and T2 (mlist.tail_unpinned)


def make_state(ctx) -> ARCState:
    lk = new_links(ctx.trace.n_unique, N_SENT, 4, n_meta=N_META)
    lk[META, CAP] = ctx.capacity
    return ARCState(lk, np.zeros(1, np.float64), ctx.trace.blocks, new_cursors(2))


@njit
def _ghost_hit(st, x):
    """x is in B1 or B2: adapt p and take x out of the ghost list (-> T2 on insertion)."""
    lk = st.lk
    cap = np.float64(lk[META, CAP])
    b1 = np.float64(lk[META, B1])
    b2 = np.float64(lk[META, B2])
    if lk[WHERE, x] == IN_B1:
        st.p[0] = min(st.p[0] + max(b2 / b1, 1.0), cap)
        lk[META, B1] -= 1
        lk[WHERE, x] = HIT_B1
    else:
        st.p[0] = max(st.p[0] - max(b1 / b2, 1.0), 0.0)
        lk[META, B2] -= 1
        lk[WHERE, x] = HIT_B2
    unlink(lk, L, x)


@njit
def _replace(st, in_b2, pin, r):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    t1 = lk[META, T1]
    p = st.p[0]
    if (t1 > 0 and (t1 > p or (t1 == p and in_b2))) or lk[META, T2] == 0:
        first, second = T1, T2
    else:
        first, second = T2, T1
    v = tail_unpinned(lk, L, U + first, pin, r, st.cur, first)
    if v < 0:
        v = tail_unpinned(lk, L, U + second, pin, r, st.cur, second)
        if v < 0:
            return -1
    unlink(lk, L, v)
    if lk[WHERE, v] == IN_T1:
        lk[META, T1] -= 1
        push_head(lk, L, U + B1, v)
        lk[META, B1] += 1
        lk[WHERE, v] = IN_B1
    else:
        lk[META, T2] -= 1
        push_head(lk, L, U + B2, v)
        lk[META, B2] += 1
        lk[WHERE, v] = IN_B2
    return v


@njit
def _drop_ghost_lru(lk, lst):
    U = lk.shape[1] - N_SENT - N_META
    g = tail(lk, L, U + lst)
    unlink(lk, L, g)
    lk[META, lst] -= 1
    lk[WHERE, g] = NONE


@njit
def _case_iv(st, pin, r):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    cap = lk[META, CAP]
    t1 = lk[META, T1]
    b1 = lk[META, B1]
    if t1 + b1 + 1 > cap:
        if b1 > 0:
            _drop_ghost_lru(lk, B1)
            return _replace(st, False, pin, r)
        v = tail_unpinned(lk, L, U + T1, pin, r, st.cur, T1)
        if v < 0:
            return _replace(st, False, pin, r)
        unlink(lk, L, v)  # |T1| = c: evicted without a ghost
        lk[META, T1] -= 1
        lk[WHERE, v] = NONE
        return v
    if t1 + b1 + lk[META, T2] + lk[META, B2] >= 2 * cap and lk[META, B2] > 0:
        _drop_ghost_lru(lk, B2)
    return _replace(st, False, pin, r)


@njit
def on_hit(st, b, j, r, d):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    if lk[WHERE, b] == IN_T1:
        unlink(lk, L, b)
        lk[META, T1] -= 1
        push_head(lk, L, U + T2, b)
        lk[META, T2] += 1
        lk[WHERE, b] = IN_T2
    else:
        move_to_head(lk, L, U + T2, b)


@njit
def on_insert(st, b, j, r, d):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    w = lk[WHERE, b]
    if w == IN_B1 or w == IN_B2:  # ghost hit with no eviction due (or request mode)
        _ghost_hit(st, b)
        w = lk[WHERE, b]
    if w == HIT_B1 or w == HIT_B2:
        push_head(lk, L, U + T2, b)
        lk[META, T2] += 1
        lk[WHERE, b] = IN_T2
    else:
        push_head(lk, L, U + T1, b)
        lk[META, T1] += 1
        lk[WHERE, b] = IN_T1


@njit
def evict(st, j, r, pin):
    lk = st.lk
    if r < 0:  # block mode: access j is the one that needs the room; look it up first
        x = st.blocks[j]
        w = lk[WHERE, x]
        if w == IN_B1 or w == IN_B2:
            _ghost_hit(st, x)
            return _replace(st, w == IN_B2, pin, r)
    return _case_iv(st, pin, r)


@njit
def remove(st, b):
    lk = st.lk
    lst = T1 if lk[WHERE, b] == IN_T1 else T2
    unlink(lk, L, b)
    lk[META, lst] -= 1
    lk[WHERE, b] = NONE  # handed up: no ghost is kept


register_hooks(ARCState, on_hit, on_insert, evict, remove=remove)

SPEC = PolicySpec(
    "arc", make_state,
    "ARC (Megiddo & Modha) - recency list T1 and frequency list T2 with ghosts "
    "B1/B2 steering T1's target size.",
    family="quick_demotion", removable=True,
    weight=2.0, libcachesim="ARC")
