"""One engine's scheduler and KV block pool, with vLLM v1's semantics
(vllm/v1/core/sched/scheduler.py, vllm/v1/core/kv_cache_manager.py; docs/serving.md).

Blocks. A request's KV occupies ceil(tokens / block_tokens) blocks, allocated as its
tokens are scheduled. Its leading full prompt blocks are trace blocks: once computed
they enter the replica's index (`resident`) where any request can find them; the rest
(the partial last prompt block, decode blocks, and a block another request entered
first) are private and freed when the request leaves. Every block a running request
holds is pinned (`refc` > 0); only resident blocks with no pin can be evicted, and the
eviction policy chooses among them: it sees each access of a block once, when the
request that made it releases it (finish or preemption), tail block first, so under LRU
the eviction order is vLLM's free-queue order. Empty blocks are used before anything is
evicted.

A step (vLLM v1's `schedule`): running requests first, in admission order, each given
min(its remaining tokens, the budget) with blocks allocated for them; when blocks run
short the most recently admitted running request is preempted (its blocks released, its
progress dropped, back to the front of the waiting queue) until the request fits or is
itself the victim. Then, if nothing was preempted, waiting requests are admitted from the
head of the queue while the budget and max_num_seqs allow: each looks up its longest
prefix of resident full blocks (at most tokens - 1, so a full hit recomputes its last
block), pins it, and gets blocks for its first chunk; the first that does not fit stops
admission (head of line).
"""
from __future__ import annotations

from ..tiers.hierarchy import (WRITE_ON_COMPUTE, WRITE_ON_EVICT, last_depth, last_j, pack_last, tier_has, tier_hit,
                         tier_on, write_down1, write_down2, write_down3)
from ..jit import hook_njit
from ..policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert
from ..structures.pins import SHARED_PIN
from .state import C_BAD, C_BADV, C_CAP, C_EVICT, C_LOADED, C_PINNED, C_PREEMPT, C_RES, C_USED, F_NOW

ADMIT_NO = -1  # the head of the queue does not fit: stop admitting
ADMIT_BUG = -2  # the policy returned an invalid victim


@hook_njit
def _pin(cache, q, b):
    if cache.refc[q, b] == 0:
        cache.pin[q, b] = SHARED_PIN
        cache.c[q, C_PINNED] += 1
    cache.refc[q, b] += 1


@hook_njit
def _unpin(cache, q, b):
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
    if tier_on(lo.t1):
        at = lo.last[v]
        write_down1(lo.t1, lo.t2, lo.t3, v, last_j(at), last_depth(at), lo.seen, lo.last, WRITE_ON_EVICT)
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
def _allocate(st, cache, lo, reqs, q, r, need):
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
def _write_computed(lo, b, j, d):
    """Tiers that write on compute take block b, just computed in HBM."""
    if lo.t1.cfg[0] > 0 and lo.t1.cfg[1] == WRITE_ON_COMPUTE:
        write_down1(lo.t1, lo.t2, lo.t3, b, j, d, lo.seen, lo.last, WRITE_ON_COMPUTE)
    if tier_on(lo.t2) and lo.t2.cfg[1] == WRITE_ON_COMPUTE:
        write_down2(lo.t2, lo.t3, b, j, d, lo.seen, lo.last, WRITE_ON_COMPUTE)
    if tier_on(lo.t3) and lo.t3.cfg[1] == WRITE_ON_COMPUTE:
        write_down3(lo.t3, b, j, d, lo.seen, lo.last, WRITE_ON_COMPUTE)


@hook_njit
def register(cache, lo, reqs, q, r, old, new, bt, computed):
    """Tokens old..new of r are scheduled (or, not `computed`, loaded from a lower tier):
    the blocks they fill enter the index (as in vLLM and Dynamo, at scheduling: a request
    admitted later in the same step finds them), unless another request entered the same
    block first (r's copy stays private). A computed block goes to the tiers that write
    on compute."""
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
                _pin(cache, q, b)
                reqs.own[j] = 1
                reqs.priv[r] -= 1
                if tier_on(lo.t1):
                    lo.last[b] = pack_last(j, k)
                    if computed:
                        _write_computed(lo, b, j, k)


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
            _unpin(cache, q, b)
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
def _grow(st, cache, lo, reqs, q, r, n, bt):
    """Blocks for r's next n tokens (entered in the index once full): 1 done, 0 too few
    blocks, -1 a policy bug."""
    c0 = reqs.comp[r]
    need = (c0 + n + bt - 1) // bt - reqs.nalloc[r]
    if need > 0:
        if need > available(cache, q):
            return 0
        if not _allocate(st, cache, lo, reqs, q, r, need):
            return -1
    register(cache, lo, reqs, q, r, c0, c0 + n, bt, True)
    return 1


@hook_njit
def _preempt(st, cache, reqs, queues, q, r):
    release(st, cache, reqs, q, r)
    reqs.lost[r] += reqs.comp[r]
    reqs.comp[r] = 0
    reqs.npre[r] += 1
    cache.c[q, C_PREEMPT] += 1
    M = queues.wq.shape[1]
    h = (queues.wh[q] - 1 + M) % M
    queues.wq[q, h] = r
    queues.wh[q] = h
    queues.wn[q] += 1


@hook_njit
def _level(lo, b):
    """The first lower tier (1-3) that holds block b, 0 if none."""
    if tier_has(lo.t1, b):
        return 1
    if tier_has(lo.t2, b):
        return 2
    if tier_has(lo.t3, b):
        return 3
    return 0


@hook_njit
def _load(cache, lo, reqs, q, r, h, l):
    """Load r's blocks h..h+l-1 from the lower tiers (stopping at one a tier has dropped
    meanwhile); the number loaded. Their transfer time delays r's next step."""
    s = reqs.offs[r]
    k = h
    while k < h + l:
        b = reqs.blocks[s + k]
        lv = _level(lo, b)
        if lv == 0:
            break
        if lv == 1:
            tier_hit(lo.t1, b, s + k, k)
        elif lv == 2:
            tier_hit(lo.t2, b, s + k, k)
        else:
            tier_hit(lo.t3, b, s + k, k)
        cache.c[q, C_LOADED + lv - 1] += 1
        reqs.load_s[r] += lo.block_bytes / lo.bw[lv - 1]
        k += 1
    return k - h


@hook_njit
def _admit(st, cache, lo, reqs, q, r, budget, chunked, whole, bt, reserve, now):
    """Admit waiting request r with at most `budget` tokens: its first chunk's tokens, or
    ADMIT_NO / ADMIT_BUG. `whole`: admit only if the blocks of all its known tokens fit
    (Dynamo's mocker), not only its first chunk's (vLLM). Its prefix found in HBM is
    reused, the blocks after it that a lower tier holds are loaded (vLLM's connector
    extends the GPU hit), the rest computed."""
    s = reqs.offs[r]
    F = reqs.full[r]
    h = 0
    while h < F and cache.resident[q, reqs.blocks[s + h]]:
        h += 1
    cap = (reqs.ntok[r] - 1) // bt  # at least one token is computed: a full hit recomputes its last block
    if h > cap:
        h = cap
    l = 0
    if tier_on(lo.t1):
        if reqs.hit_first[r] < 0:
            for k in range(F):
                b = reqs.blocks[s + k]
                if lo.seen[b] < 2147483647:
                    lo.seen[b] += 1
        while h + l < min(F, cap) and not cache.resident[q, reqs.blocks[s + h + l]] \
                and _level(lo, reqs.blocks[s + h + l]) > 0:
            l += 1
    hit = (h + l) * bt
    n = reqs.ntok[r] - hit
    if n > budget:
        if not chunked:
            return ADMIT_NO
        n = budget
    need = (hit + n + bt - 1) // bt - h
    fit = (reqs.ntok[r] + bt - 1) // bt - h if whole else need
    touch = 0  # hit blocks that leave the evictable set when pinned
    for k in range(h):
        if cache.refc[q, reqs.blocks[s + k]] == 0:
            touch += 1
    if fit + touch + reserve > available(cache, q):
        return ADMIT_NO
    for k in range(h):
        b = reqs.blocks[s + k]
        _pin(cache, q, b)
        reqs.own[s + k] = 1
        if tier_on(lo.t1):
            lo.last[b] = pack_last(s + k, k)
    reqs.nalloc[r] = h
    if not _allocate(st, cache, lo, reqs, q, r, need):
        return ADMIT_BUG
    if l > 0:  # allocating may have pushed some of them out of the tiers: load what is left
        l = _load(cache, lo, reqs, q, r, h, l)
        register(cache, lo, reqs, q, r, h * bt, (h + l) * bt, bt, False)
        hit = (h + l) * bt
    reqs.comp[r] = hit
    register(cache, lo, reqs, q, r, hit, hit + n, bt, True)
    if reqs.hit_first[r] < 0:
        reqs.hit_first[r] = hit
        reqs.t_admit[r] = now
    if hit > reqs.hit_max[r]:
        reqs.hit_max[r] = hit
    reqs.hit_sum[r] += hit
    return n


@hook_njit
def schedule(st, cache, lo, reqs, queues, q, now, max_tokens, max_seqs, chunked, whole, threshold, watermark, bt):
    """Fill replica q's next step (queues.sr/sn/ns); -1 on a policy bug."""
    budget = max_tokens
    ns = 0
    preempted = False
    i = 0
    while i < queues.nrun[q] and budget > 0:
        r = queues.run[q, i]
        n = reqs.ntok[r] - reqs.comp[r]
        if threshold > 0 and n > threshold:
            n = threshold
        if n > budget:
            n = budget
        scheduled = True
        while True:
            g = _grow(st, cache, lo, reqs, q, r, n, bt)
            if g < 0:
                return -1
            if g == 1:
                break
            v = queues.run[q, queues.nrun[q] - 1]  # the most recently admitted
            queues.nrun[q] -= 1
            _preempt(st, cache, reqs, queues, q, v)
            preempted = True
            if v == r:
                scheduled = False
                break
        if not scheduled:
            break
        queues.sr[q, ns] = r
        queues.sn[q, ns] = n
        ns += 1
        budget -= n
        i += 1
    if not preempted:
        M = queues.wq.shape[1]
        while queues.wn[q] > 0 and budget > 0 and queues.nrun[q] < max_seqs:
            r = queues.wq[q, queues.wh[q]]
            # the watermark holds back admissions only beside other work (vLLM)
            reserve = watermark if (ns > 0 or queues.nrun[q] > 0) else 0
            n = _admit(st, cache, lo, reqs, q, r, budget, chunked, whole, bt, reserve, now)
            if n == ADMIT_BUG:
                return -1
            if n == ADMIT_NO:
                break
            queues.wh[q] = (queues.wh[q] + 1) % M
            queues.wn[q] -= 1
            queues.run[q, queues.nrun[q]] = r
            queues.nrun[q] += 1
            queues.sr[q, ns] = r
            queues.sn[q, ns] = n
            ns += 1
            budget -= n
    queues.ns[q] = ns
    return ns
