"""LIRS: Low Inter-reference Recency Set (Jiang & Zhang, SIGMETRICS'02).

Blocks are LIR (resident; low inter-reference recency) or HIR (high IRR; resident or
not). L_hirs = max(1, floor(hir_ratio * c)) slots hold resident HIR blocks, the other
L_lirs = c - L_hirs hold LIR blocks.
  stack S  recency order of LIR blocks and of HIR blocks (resident or not) more recent
           than the least recent LIR block; pruning keeps an LIR block at the bottom;
  queue Q  the resident HIR blocks in access order: the front is the next victim;
  NH       the non-resident HIR entries of S, oldest first; S is bounded to
           stack_ratio * c entries by forgetting the oldest non-resident ones.
Accessing block x:
  1. x LIR (hit): move x to the top of S, prune.
  2. x resident HIR (hit): move x to the top of S and
     (a) if x was in S - its new IRR is smaller than the recency of the bottom LIR
         block - x becomes LIR and leaves Q; the bottom LIR block becomes HIR at the end
         of Q; prune (the HIR -> LIR switch);
     (b) otherwise x stays HIR and moves to the end of Q.
  3. x not resident (miss): the front of Q is evicted (it stays in S as a non-resident
     HIR entry if it is there); x is put on the top of S and
     (a) if x was in S as a non-resident HIR entry, x becomes LIR and the bottom LIR
         block moves to the end of Q as HIR; prune;
     (b) otherwise x becomes HIR at the end of Q - or LIR while the LIR set is not full
         (warm-up).

Parameters: hir_ratio (0.01, the paper's and libCacheSim's 1%), stack_ratio (2.0:
libCacheSim's bound |S| <= 2c; the paper leaves the bound on non-resident entries
open), libcachesim_compat (False).

libCacheSim (LIRS.c) deviates from the paper in case 2(b): it demotes the bottom LIR
block to Q even though x stays HIR, so with Q full the front of Q is evicted *on a
hit*, the LIR set runs one block short and the next missed block is admitted as LIR.
Default: the published algorithm. `libcachesim_compat=True` reproduces libCacheSim:
our engine can only evict when a block is inserted, so the block libCacheSim evicts on
the hit becomes a *zombie* - out of every LIRS structure at once, still counted
resident by the engine, and returned by the next `evict` call, which is exactly when
libCacheSim's cache, one block short, would not need an eviction. If the zombie is
accessed before that, libCacheSim misses and re-admits it without evicting; we count
a hit and apply the same re-admission, so the LIRS state stays identical and the hit
counts differ by exactly `lk[META, REHITS]`. With L_hirs = 1 (capacity < 200 at 1%)
libCacheSim even evicts the block being hit and keeps it as an uncounted resident HIR
entry (the cache briefly holds c + 1 blocks); we do not reproduce that.
Cross-checks (tests): on the Mooncake and session traces case 2(b) never arises with a
full LIR set, so both variants equal libcachesim.LIRS exactly there; on Zipf traces
where it does, compat equals it exactly (minus REHITS) for L_hirs >= 2 and within 0.5
points of hit ratio for L_hirs = 1.

Request mode: pinned blocks are skipped at the front of Q; if Q holds only pinned
blocks the least recent unpinned LIR block is evicted (the LIR set then refills from
the next misses as in warm-up). A pinned compat zombie is re-admitted instead of
evicted.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.pins import keeps_cursor
from ..structures.mlist import leave, move_to_head, new_cursors, new_links, push_head, tail, tail_unpinned, unlink
from .api import PolicySpec, register_hooks

NONE, LIR, HIR_R, HIR_N = 0, 1, 2, 3  # lk[STATUS]; HIR_N = non-resident HIR entry of S
SL, QL, STATUS, IN_S, META = 0, 2, 4, 5, 6  # rows of lk: links of S (sentinel U), of Q and NH; ...
Q, NH = 0, 1  # sentinels U + Q, U + NH in the QL family (Q head = end, tail = front)
LIR_LIMIT, HIR_LIMIT, N_LIR, N_HIR, S_LEN, S_MAX, COMPAT, ZOMBIE, REHITS = range(9)  # lk[META]
N_SENT, N_META = 2, 9


class LIRSState(NamedTuple):
    lk: np.ndarray  # int32[7, U+2+N_META]: links of S (head = top), of Q and NH; status; in S; scalars
    cur: np.ndarray  # eviction cursors in Q (mlist.tail_unpinned) and in S (evict)


def limits(capacity: int, hir_ratio: float) -> tuple[int, int]:
    """(L_lirs, L_hirs) as libCacheSim computes them."""
    hir = max(1, int(hir_ratio * capacity))
    return capacity - hir, hir


def make_state(ctx) -> LIRSState:
    p = ctx.params
    hir_ratio = float(p["hir_ratio"])
    stack_ratio = float(p["stack_ratio"])
    if not 0.0 <= hir_ratio < 1.0:
        raise ValueError(f"lirs: hir_ratio must be in [0, 1), got {hir_ratio}")
    if stack_ratio < 1.0:
        raise ValueError(f"lirs: stack_ratio must be >= 1 (S holds every LIR block), got {stack_ratio}")
    lk = new_links(ctx.trace.n_unique, N_SENT, 7, families=(SL, QL), n_meta=N_META)
    lk[META, LIR_LIMIT], lk[META, HIR_LIMIT] = limits(ctx.capacity, hir_ratio)
    lk[META, S_MAX] = min(int(stack_ratio * ctx.capacity), 2**31 - 1)
    lk[META, COMPAT] = int(bool(p["libcachesim_compat"]))
    lk[META, ZOMBIE] = -1
    return LIRSState(lk, new_cursors(2))


# ------------------------------------------------------------------ stack S
@njit
def _s_top(lk, b):
    U = lk.shape[1] - N_SENT - N_META
    if lk[IN_S, b]:
        move_to_head(lk, SL, U, b)
    else:
        push_head(lk, SL, U, b)
        lk[IN_S, b] = 1
        lk[META, S_LEN] += 1


@njit
def _s_remove(lk, b):
    leave(lk, SL, b, IN_S, META, S_LEN)


@njit
def _nh_remove(lk, b):
    unlink(lk, QL, b)
    lk[STATUS, b] = NONE


@njit
def _prune(lk):
    """Drop HIR entries from the bottom of S until an LIR block (or a single entry) is left."""
    U = lk.shape[1] - N_SENT - N_META
    while lk[META, S_LEN] > 1:
        v = tail(lk, SL, U)
        s = lk[STATUS, v]
        if s == LIR:
            return
        _s_remove(lk, v)
        if s == HIR_N:
            _nh_remove(lk, v)


@njit
def _demote_bottom_lir(lk):
    """The bottom LIR block of S becomes a resident HIR block at the end of Q."""
    U = lk.shape[1] - N_SENT - N_META
    v = tail(lk, SL, U)
    if v < 0 or lk[STATUS, v] != LIR:
        return False
    _s_remove(lk, v)
    lk[META, N_LIR] -= 1
    push_head(lk, QL, U + Q, v)
    lk[STATUS, v] = HIR_R
    lk[META, N_HIR] += 1
    _prune(lk)
    return True


@njit
def _evict_hir(lk, v):
    """Evict resident HIR block v (in Q): it stays in S as a non-resident entry if there."""
    U = lk.shape[1] - N_SENT - N_META
    unlink(lk, QL, v)
    lk[META, N_HIR] -= 1
    if lk[IN_S, v]:
        lk[STATUS, v] = HIR_N
        push_head(lk, QL, U + NH, v)
    else:
        lk[STATUS, v] = NONE


@njit
def _limit_stack(lk):
    U = lk.shape[1] - N_SENT - N_META
    while lk[META, S_LEN] > lk[META, S_MAX]:
        v = tail(lk, QL, U + NH)
        if v < 0:
            return
        _s_remove(lk, v)
        _nh_remove(lk, v)


@njit
def _admit(lk, b):
    """Case 3 after the eviction: load b, which is not resident."""
    U = lk.shape[1] - N_SENT - N_META
    if lk[STATUS, b] == HIR_N:  # 3(a): its IRR beats the bottom LIR block's recency
        _nh_remove(lk, b)
        _s_top(lk, b)
        while lk[META, N_LIR] + 1 > lk[META, LIR_LIMIT]:
            if not _demote_bottom_lir(lk):
                break
        lk[STATUS, b] = LIR
        lk[META, N_LIR] += 1
    elif lk[META, N_LIR] + 1 <= lk[META, LIR_LIMIT]:  # warm-up: LIR set not full
        _s_top(lk, b)
        lk[STATUS, b] = LIR
        lk[META, N_LIR] += 1
    else:  # 3(b)
        _s_top(lk, b)
        push_head(lk, QL, U + Q, b)
        lk[STATUS, b] = HIR_R
        lk[META, N_HIR] += 1


@njit
def on_hit(st, b, j, r, d):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    if b == lk[META, ZOMBIE]:  # compat: libCacheSim evicted b on a hit, so this is its miss
        lk[META, ZOMBIE] = -1
        lk[META, REHITS] += 1
        _admit(lk, b)
    elif lk[STATUS, b] == LIR:  # 1
        _s_top(lk, b)
        _prune(lk)
    elif lk[IN_S, b]:  # 2(a): HIR -> LIR
        _s_top(lk, b)
        unlink(lk, QL, b)
        lk[META, N_HIR] -= 1
        while lk[META, N_LIR] + 1 > lk[META, LIR_LIMIT]:
            if not _demote_bottom_lir(lk):
                break
        lk[STATUS, b] = LIR
        lk[META, N_LIR] += 1
    else:  # 2(b): stays HIR
        move_to_head(lk, QL, U + Q, b)
        if lk[META, COMPAT] and lk[META, N_LIR] + 1 > lk[META, LIR_LIMIT] and lk[META, ZOMBIE] < 0:
            if lk[META, N_HIR] + 1 > lk[META, HIR_LIMIT]:
                z = tail(lk, QL, U + Q)
                if z != b:
                    _evict_hir(lk, z)
                    lk[META, ZOMBIE] = z
            _demote_bottom_lir(lk)
        _s_top(lk, b)
    _limit_stack(lk)


@njit
def on_insert(st, b, j, r, d):
    _admit(st.lk, b)
    _limit_stack(st.lk)


@njit
def evict(st, j, r, pin):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    z = lk[META, ZOMBIE]
    if z >= 0:
        lk[META, ZOMBIE] = -1
        if pin[z] != r:
            return z
        _admit(lk, z)  # request mode: the pinned zombie is re-admitted
    v = tail_unpinned(lk, QL, U + Q, pin, r, st.cur, 0)
    if v >= 0:
        _evict_hir(lk, v)
        return v
    # Q holds only pinned blocks: evict the least recent unpinned LIR block. Pruning
    # after an eviction only removes entries below the lowest LIR block, so every entry
    # above a pinned LIR block stays: the walk for r resumes after the last such entry.
    c = st.cur
    anchored = keeps_cursor(r) and c[2] == r
    v = lk[SL, c[3]] if anchored else lk[SL, U]
    while v != U:
        if lk[STATUS, v] == LIR:
            if r < 0 or pin[v] != r:
                _s_remove(lk, v)
                lk[STATUS, v] = NONE
                lk[META, N_LIR] -= 1
                _prune(lk)
                return v
            anchored = r >= 0
        if anchored:
            c[2] = r
            c[3] = v
        v = lk[SL, v]
    return -1


register_hooks(LIRSState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "lirs", make_state,
    "LIRS (SIGMETRICS'02) - LIR blocks by inter-reference recency; a 1% HIR "
    "queue takes the misses.",
    defaults={"hir_ratio": 0.01, "stack_ratio": 2.0, "libcachesim_compat": False},
    family="quick_demotion",
    weight=2.0, libcachesim="LIRS")
