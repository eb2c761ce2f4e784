"""One engine's KV block pool and prefix index, shared by every scheduler (sched.py for
vLLM, sched_sglang.py for SGLang).

A request's KV occupies ceil(tokens / block_tokens) blocks, allocated as its tokens are
scheduled. Its leading full prompt blocks are trace blocks: once computed they enter the
replica's index (`resident`) where any request can find them; the rest (the partial last
prompt block, decode blocks, and a block another request entered first) are private and
freed when the request leaves. Every block a running request holds is pinned (`refc` >
0); only resident blocks with no pin can be evicted, and the eviction policy chooses among
them: it sees each access of a block once, when the request that made it releases it
(finish or preemption), tail block first, so under LRU the eviction order is vLLM's
free-queue order. Empty blocks are used before anything is evicted.

A scheduler decides when blocks are allocated (`reserve`) and when computed blocks enter
the index (`register`): vLLM enters them when they are scheduled, SGLang when the forward
that computed them ends.
"""
from __future__ import annotations

from ..jit import hook_njit
from ..policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert
from ..structures.pins import SHARED_PIN
from .state import C_BAD, C_BADV, C_CAP, C_EVICT, C_PINNED, C_PREEMPT, C_RES, C_USED, F_NOW
from .tiers import evicted


@hook_njit
def pin(cache, q, b):
    if cache.refc[q, b] == 0:
        cache.pin[q, b] = SHARED_PIN
        cache.c[q, C_PINNED] += 1
    cache.refc[q, b] += 1


@hook_njit
def unpin(cache, q, b):
    cache.refc[q, b] -= 1
    if cache.refc[q, b] == 0:
        cache.pin[q, b] = -1
        cache.c[q, C_PINNED] -= 1


@hook_njit
def available(cache, q):
    """Blocks an allocation can get: empty ones plus unpinned resident ones."""
    c = cache.c
    return c[q, C_CAP] - c[q, C_USED] + c[q, C_RES] - c[q, C_PINNED]


@hook_njit
def _drop(cache, lo, q, v):
    """Evict victim v (written down to a tier that takes HBM's evictions); False
    (recorded) when it is not an unpinned resident block."""
    if v < 0 or not cache.resident[q, v] or cache.refc[q, v] != 0:
        cache.c[q, C_BAD] = 1
        cache.c[q, C_BADV] = v
        return False
    cache.resident[q, v] = False
    cache.inpol[q, v] = False
    if cache.t_out.shape[1] > 1:
        cache.t_out[q, v] = cache.f[q, F_NOW]
    cache.c[q, C_RES] -= 1
    cache.c[q, C_USED] -= 1
    cache.c[q, C_EVICT] += 1
    evicted(lo, q, v, cache.f[q, F_NOW])  # to q's first tier, if it takes HBM's victims (sim_core.serving.tiers)
    return True


@hook_njit
def _make_room(st, cache, lo, q, need, j):
    """Evict until `need` blocks are empty (the caller checked `available`)."""
    pin = cache.pin[q]
    c = cache.c
    while c[q, C_CAP] - c[q, C_USED] < need:
        v = p_evict(st, j, SHARED_PIN, pin)
        if not _drop(cache, lo, q, v):
            return False
        k = p_evict_more(st, j, SHARED_PIN, pin, cache.extra)
        for i in range(k):
            if not _drop(cache, lo, q, cache.extra[i]):
                return False
    return True


@hook_njit
def allocate(st, cache, lo, reqs, q, r, need):
    """Give r `need` more blocks (private until they are computed and entered)."""
    if not _make_room(st, cache, lo, q, need, reqs.offs[r]):
        return False
    cache.c[q, C_USED] += need
    reqs.priv[r] += need
    s = reqs.offs[r]
    k0 = reqs.nalloc[r]
    k1 = min(k0 + need, reqs.full[r])
    for k in range(k0, k1):
        reqs.own[s + k] = 2
    reqs.nalloc[r] = k0 + need
    return True


@hook_njit
def register(cache, lo, reqs, q, r, old, new, bt, computed):
    """Tokens old..new of r are computed (or, not `computed`, loaded from a lower tier):
    the blocks they fill enter the index, unless another request entered the same block
    first (r's copy stays private). (The lower tiers take computed blocks when the step
    ends: sim_core.serving.tiers.step_done.)"""
    s = reqs.offs[r]
    k1 = min(reqs.full[r], new // bt)
    for k in range(old // bt, k1):
        j = s + k
        if reqs.own[j] == 2:
            b = reqs.blocks[j]
            if not cache.resident[q, b]:
                cache.resident[q, b] = True
                if cache.t_in.shape[1] > 1:
                    cache.t_in[q, b] = cache.f[q, F_NOW]
                cache.c[q, C_RES] += 1
                pin(cache, q, b)
                reqs.own[j] = 1
                reqs.priv[r] -= 1


@hook_njit
def release(st, cache, reqs, q, r):
    """r gives up its blocks: private ones become empty, cached ones lose r's pin and the
    policy sees r's access of each, deepest first (vLLM frees a request's blocks in
    reverse, so its tail is evicted first)."""
    s = reqs.offs[r]
    for k in range(min(reqs.nalloc[r], reqs.full[r]) - 1, -1, -1):
        j = s + k
        if reqs.own[j] == 1:
            b = reqs.blocks[j]
            unpin(cache, q, b)
            if cache.inpol[q, b]:
                p_on_hit(st, b, j, r, k)
            else:
                p_on_insert(st, b, j, r, k)
                cache.inpol[q, b] = True
        reqs.own[j] = 0
    cache.c[q, C_USED] -= reqs.priv[r]
    reqs.priv[r] = 0
    reqs.nalloc[r] = 0



@hook_njit
def preempt(st, cache, reqs, q, r):
    """r loses its blocks and every token computed so far (vLLM's preemption, SGLang's
    retraction): it is counted once more as preempted and will recompute from its start."""
    release(st, cache, reqs, q, r)
    reqs.lost[r] += reqs.comp[r]
    reqs.comp[r] = 0
    reqs.npre[r] += 1
    cache.c[q, C_PREEMPT] += 1

@hook_njit
def reserve(st, cache, lo, reqs, q, r, tokens, bt):
    """Blocks for r's first `tokens` tokens: 1 done, 0 too few blocks, -1 a policy bug."""
    need = (tokens + bt - 1) // bt - reqs.nalloc[r]
    if need > 0:
        if need > available(cache, q):
            return 0
        if not allocate(st, cache, lo, reqs, q, r, need):
            return -1
    return 1


@hook_njit
def grow(st, cache, lo, reqs, q, r, n, bt):
    """Blocks for r's next n tokens, entered in the index once full (at scheduling, as
    vLLM does): 1 done, 0 too few blocks, -1 a policy bug."""
    c0 = reqs.comp[r]
    g = reserve(st, cache, lo, reqs, q, r, c0 + n, bt)
    if g == 1:
        register(cache, lo, reqs, q, r, c0, c0 + n, bt, True)
    return g


@hook_njit
def prefix(cache, reqs, q, r, limit):
    """How many of r's leading full blocks (at most `limit`) the index holds."""
    s = reqs.offs[r]
    n = min(reqs.full[r], limit)
    h = 0
    while h < n and cache.resident[q, reqs.blocks[s + h]]:
        h += 1
    return h
