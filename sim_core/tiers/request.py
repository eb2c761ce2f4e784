"""What a request does to the lower tiers in request mode, after its loads (compiled,
inlined into sim_core/replay/engine.py's replay loop; the rules: sim_core/tiers/hierarchy.py).

  1. `tier_pin`: the request's blocks a tier holds are pinned there (the full-pool
     rule: never evicted while the request is replayed), and a tier admitting
     `lookups=N` counts one lookup for each block past the HBM prefix hit (vLLM's
     connector looks up every block after the GPU hit: scheduler.py,
     get_num_new_matched_tokens, through FilterReusedOffloadingManager.lookup);
  2. `store1/2/3`: a tier that writes on_compute takes, all or nothing, the admitted
     blocks of the request it lacks: the computed ones, those loaded from another tier,
     and HBM hits unless this tier served some of the request (vLLM stores from block 0
     when nothing was loaded, from past the loaded prefix otherwise). If fewer blocks
     can be freed than the batch needs, nothing is written and the batch is counted as
     skipped (vLLM's prepare_store returns None and the request is retried later, which
     the replay does not model);
  3. `touch_request`: a tier with touch=request refreshes every block of the request it
     holds, deepest first, so the head ends most recent (vLLM's LRU touch walks the
     hashes in reverse; its connector touches after each lookup and store).

The serving replay (sim_core.serving.tiers) runs the same functions over a stretch of a
request's blocks at a time, stored head first: `rev` walks the stretch's writes deepest
first, as simulate's tail-first view does.
"""
from __future__ import annotations

from .hierarchy import (A_KIND, ADMIT_LOOKUPS, T_CAP, T_COUNTING, T_PINNED, T_SKIPPED, T_TOUCH, T_WRITE,
                        TOUCH_REQUEST, WRITE_ON_COMPUTE, admit, put_down1, put_down2, put_down3, room, tier_on)
from ..jit import njit
from ..policies.api import p_on_hit

REFUSED = 8  # level[] + REFUSED: HBM's admission refused the block (sim_core.replay.engine)
COUNT_MAX = 1 << 40


@njit
def _depth(depth, sampled, j, s):
    return depth[j] if sampled else j - s


@njit
def tier_pin(t, blocks, s, e, r, depth, sampled, hbm_front):
    """Pin r's blocks held by tier t; count the lookups of a `lookups=N` tier."""
    if not tier_on(t):
        return
    lookups = t.adm[A_KIND] == ADMIT_LOOKUPS
    for j in range(s, e):
        b = blocks[j]
        if t.resident[b] and t.pin[b] != r:
            t.pin[b] = r
            t.c[T_PINNED] += 1
        if lookups and _depth(depth, sampled, j, s) >= hbm_front and t.door[b] < COUNT_MAX:
            t.door[b] += 1


@njit
def _batch(t, k, blocks, s, e, level, seen):
    """Mark in t.want the blocks of r that tier k (on_compute) takes; their number."""
    served_here = False
    for j in range(s, e):
        x = level[j - s]
        if x > 0 and x % REFUSED == k:
            served_here = True
    n = 0
    for j in range(s, e):
        b = blocks[j]
        x = level[j - s]
        lv = x % REFUSED if x > 0 else x  # -1: HBM hit (or a repeat), 0: computed, 1-3: loaded from there
        w = 0
        if not t.resident[b] and lv != k and not (lv == -1 and served_here) and admit(t.adm, t.door, seen, b):
            w = 1
            n += 1
        t.want[j - s] = w
    return n


@njit
def _fits(t, n):
    if n == 0:
        return False
    if room(t, n):
        return True
    if t.c[T_COUNTING]:
        t.c[T_SKIPPED] += n
    return False


@njit
def _writes(t):
    return tier_on(t) and t.cfg[T_WRITE] == WRITE_ON_COMPUTE and t.cfg[T_CAP] > 0


@njit
def store1(t1, t2, t3, blocks, s, e, level, seen, last, depth, sampled, rev=False):
    if _writes(t1) and _fits(t1, _batch(t1, 1, blocks, s, e, level, seen)):
        for i in range(e - s):
            j = e - 1 - i if rev else s + i
            if t1.want[j - s] and not t1.resident[blocks[j]]:
                put_down1(t1, t2, t3, blocks[j], j, _depth(depth, sampled, j, s), seen, last, True)


@njit
def store2(t2, t3, blocks, s, e, level, seen, last, depth, sampled, rev=False):
    if _writes(t2) and _fits(t2, _batch(t2, 2, blocks, s, e, level, seen)):
        for i in range(e - s):
            j = e - 1 - i if rev else s + i
            if t2.want[j - s] and not t2.resident[blocks[j]]:
                put_down2(t2, t3, blocks[j], j, _depth(depth, sampled, j, s), seen, last, True)


@njit
def store3(t3, blocks, s, e, level, seen, last, depth, sampled, rev=False):
    if _writes(t3) and _fits(t3, _batch(t3, 3, blocks, s, e, level, seen)):
        for i in range(e - s):
            j = e - 1 - i if rev else s + i
            if t3.want[j - s] and not t3.resident[blocks[j]]:
                put_down3(t3, blocks[j], j, _depth(depth, sampled, j, s), seen, last, True)


@njit
def touch_request(t, blocks, s, e, depth, sampled):
    """Refresh r's blocks held by tier t, deepest first (touch=request)."""
    if not (tier_on(t) and t.cfg[T_TOUCH] == TOUCH_REQUEST):
        return
    n = e - s
    backwards = not sampled or (n > 1 and depth[s] < depth[e - 1])  # walked head first
    for i in range(n):
        j = e - 1 - i if backwards else s + i
        b = blocks[j]
        if t.resident[b]:
            p_on_hit(t.st, b, j, -2, _depth(depth, sampled, j, s))


@njit
def touch_block(t, b, j, d):
    """Block mode: an access refreshes the copy of a touch=request tier first."""
    if tier_on(t) and t.cfg[T_TOUCH] == TOUCH_REQUEST and t.resident[b]:
        p_on_hit(t.st, b, j, -2, d)
