"""S3-FIFO (Yang et al., SOSP'23): small FIFO + main FIFO with reinsertion + ghost FIFO.

Algorithm (c = capacity in blocks):
  small S  FIFO of floor(small_ratio * c) blocks that filters one-hit wonders;
  main  M  FIFO of the remaining c - |S| blocks, CLOCK-like with a 2-bit counter;
  ghost G  FIFO of the ids of floor(ghost_ratio * c) blocks demoted from S (no data).
  hit       -> freq += 1 (the block does not move);
  miss      -> a block found in G leaves G and goes straight to M (quick promotion of a
               block demoted too early); any other block goes to S;
  eviction  -> from M when M is over its share or S is empty, otherwise from S:
    from S: the oldest block moves to M (freq reset to 0) if it was hit at least
            `move_to_main_threshold` times while in S and the scan goes on; the first
            one hit fewer times is evicted and its id enters G (quick demotion);
    from M: the oldest block with freq > 0 is reinserted at the head with
            freq = min(freq, 3) - 1; the first block with freq 0 is evicted.

Parameters: small_ratio (0.10), ghost_ratio (0.90: the ghost is sized like main) and
move_to_main_threshold (2), all at libCacheSim's defaults (libcachesim.S3FIFO takes
them as small_size_ratio, ghost_size_ratio, move_to_main_threshold).

Choices that follow libCacheSim (S3FIFO.c) where the paper is silent or differs:
  * a block moved from S to M starts in M with freq 0, and the threshold compares the
    number of hits taken in S (libCacheSim's default 2 means "hit twice in S");
  * moving S blocks to M never evicts from M inside the same scan; M's excess is paid
    by later evictions (the `|M| > its share` test);
  * before the first eviction, a new block goes to M once S is full (the cache fills
    S first, then M) - libCacheSim's `has_evicted` warm-up rule;
  * a ghost hit is resolved (the id leaves G) when the block is looked up, before the
    eviction it triggers; in block mode `evict` looks the incoming block blocks[j] up
    itself, so block mode equals libcachesim.S3FIFO exactly for capacities of at least
    20 blocks.
Deviation: libCacheSim refuses to admit blocks when the small queue has fewer than 2
slots (capacity < 20 at the default ratio: it evicts but does not insert, or caches
nothing). Our engine must insert every missed block, so we give S at least one slot.

Request mode: the engine evicts for request r before r's blocks are looked up, so
r's ghost hits are resolved when its missing blocks are inserted. Pinned blocks (r's
own) are passed over in S without being demoted and are rotated in M, so an unpinned
victim is always found.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.fifoq import S3FIFO_DEFAULTS, evict_queues, queue_sizes
from ..structures.mlist import new_links, push_head, tail, unlink
from .api import PolicySpec, register_hooks

S, M, G = 0, 1, 2  # list ids: sentinel U + id; size lk[META, N_S + id]
L, WHERE, FREQ, META = 0, 2, 3, 4  # rows of lk: L, L + 1 links of S, M and G; ...; scalars
NONE, IN_S, IN_M, IN_G, HIT_G = 0, 1, 2, 3, 4  # lk[WHERE]; HIT_G: left G, bound for M
S_CAP, M_CAP, G_CAP, THR, HAS_EVICTED, N_S = range(6)  # lk[META]; N_S, N_S+1, N_S+2 sizes
N_SENT, N_META = 3, 8
FREQ_MAX = 1 << 30


class S3FIFOState(NamedTuple):
    lk: np.ndarray  # int32[5, U+3+N_META]: links, where, freq, scalars
    blocks: np.ndarray  # the trace's blocks (block mode: the incoming block of evict)
    cur: np.ndarray  # int64[2]: eviction cursor in S (request, last pinned block skipped)


def make_state(ctx) -> S3FIFOState:
    p = ctx.params
    small_ratio = float(p["small_ratio"])
    ghost_ratio = float(p["ghost_ratio"])
    thr = int(p["move_to_main_threshold"])
    if not 0.0 < small_ratio < 1.0:
        raise ValueError(f"s3fifo: small_ratio must be in (0, 1), got {small_ratio}")
    if ghost_ratio < 0.0:
        raise ValueError(f"s3fifo: ghost_ratio must be >= 0, got {ghost_ratio}")
    if thr < 1:
        raise ValueError(f"s3fifo: move_to_main_threshold must be >= 1, got {thr}")
    lk = new_links(ctx.trace.n_unique, N_SENT, 5, n_meta=N_META)
    lk[META, S_CAP], lk[META, M_CAP], lk[META, G_CAP] = queue_sizes(ctx.capacity, small_ratio, ghost_ratio)
    lk[META, THR] = thr
    return S3FIFOState(lk, ctx.trace.blocks, np.full(2, -1, np.int64))


@njit
def _to_ghost(lk, v):
    U = lk.shape[1] - N_SENT - N_META
    g_cap = lk[META, G_CAP]
    if g_cap <= 0:
        lk[WHERE, v] = NONE
        return
    while lk[META, N_S + G] >= g_cap:
        g = tail(lk, L, U + G)
        unlink(lk, L, g)
        lk[META, N_S + G] -= 1
        lk[WHERE, g] = NONE
    push_head(lk, L, U + G, v)
    lk[META, N_S + G] += 1
    lk[WHERE, v] = IN_G


@njit
def on_hit(st, b, j, r, d):
    if st.lk[FREQ, b] < FREQ_MAX:
        st.lk[FREQ, b] += 1


@njit
def on_insert(st, b, j, r, d):
    lk = st.lk
    U = lk.shape[1] - N_SENT - N_META
    w = lk[WHERE, b]
    if w == IN_G:  # ghost hit with no eviction due (or request mode)
        unlink(lk, L, b)
        lk[META, N_S + G] -= 1
        w = HIT_G
    if w == HIT_G or (lk[META, HAS_EVICTED] == 0 and lk[META, N_S + S] >= lk[META, S_CAP]):
        push_head(lk, L, U + M, b)
        lk[META, N_S + M] += 1
        lk[WHERE, b] = IN_M
    else:
        push_head(lk, L, U + S, b)
        lk[META, N_S + S] += 1
        lk[WHERE, b] = IN_S
    lk[FREQ, b] = 0


@njit
def evict(st, j, r, pin):
    lk = st.lk
    if r < 0:  # block mode: resolve the incoming block's ghost hit before evicting
        x = st.blocks[j]
        if lk[WHERE, x] == IN_G:
            unlink(lk, L, x)
            lk[META, N_S + G] -= 1
            lk[WHERE, x] = HIT_G
    lk[META, HAS_EVICTED] = 1
    U = lk.shape[1] - N_SENT - N_META
    v, small = evict_queues(lk, L, U + S, U + M, FREQ, WHERE, META, N_S + S, N_S + M, IN_M,
                            lk[META, M_CAP], lk[META, THR], pin, r, st.cur)
    if small and v >= 0:  # quick demotion: remember the id in G
        _to_ghost(lk, v)
    return v


@njit
def remove(st, b):
    lk = st.lk
    w = lk[WHERE, b]
    q = S if w == IN_S else M
    unlink(lk, L, b)
    lk[META, N_S + q] -= 1
    lk[WHERE, b] = NONE  # handed up: no ghost is kept


register_hooks(S3FIFOState, on_hit, on_insert, evict, remove=remove)

SPEC = PolicySpec(
    "s3fifo", make_state,
    "S3-FIFO (SOSP'23) - small FIFO demotes one-hit blocks to a ghost; reused "
    "blocks live in a main FIFO with reinsertion.",
    defaults=dict(S3FIFO_DEFAULTS),
    family="quick_demotion", removable=True,
    weight=1.5, libcachesim="S3FIFO")
