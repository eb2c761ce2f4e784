"""vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py, vllm/v1/core/kv_cache_manager.py;
docs/serving.md) over the block pool (pool.py): what one step schedules and how long
Dynamo's timing counts it.

A step (vLLM v1's `schedule`): running requests first, in admission order, each given
min(its remaining tokens, the budget) with blocks allocated for them; when blocks run
short the most recently admitted running request is preempted (its blocks released, its
progress dropped, back to the front of the waiting queue) until the request fits or is
itself the victim. Then, if nothing was preempted, waiting requests are admitted from the
head of the queue while the budget and max_num_seqs allow: each looks up its longest
prefix of resident full blocks (at most tokens - 1, so a full hit recomputes its last
block), pins it, and gets blocks for its first chunk; the first that does not fit stops
admission (head of line). Blocks enter the index when they are scheduled, so a request
admitted later in the same step finds them (as in vLLM and Dynamo).
"""
from __future__ import annotations

from ..tiers.hierarchy import tier_on
from ..jit import hook_njit
from .handoff import admit_prebuilt
from .pool import allocate, available, grow, pin, preempt, register
from .tiers import admitted, admitting, found
from .measured.step import measured_seconds
from .stepmodel import K_DYNAMO, K_MEASURED, step_seconds

ADMIT_NO = -1  # the head of the queue does not fit: stop admitting
ADMIT_BUG = -2  # the policy returned an invalid victim


@hook_njit
def _preempt(st, cache, reqs, queues, q, r):
    """vLLM's preemption: r starts over, first in the waiting queue."""
    preempt(st, cache, reqs, q, r)
    M = queues.wq.shape[1]
    h = (queues.wh[q] - 1 + M) % M
    queues.wq[q, h] = r
    queues.wh[q] = h
    queues.wn[q] += 1


@hook_njit
def _admit(st, cache, lo, reqs, q, r, budget, chunked, whole, bt, reserve, now):
    """Admit waiting request r with at most `budget` tokens: its first chunk's tokens, or
    ADMIT_NO / ADMIT_BUG. `whole`: admit only if the blocks of all its known tokens fit
    (Dynamo's mocker), not only its first chunk's (vLLM). Its prefix found in HBM is
    reused, the blocks after it that a lower tier holds are loaded (vLLM's connector
    extends the GPU hit), the rest computed. A request that already holds blocks came
    with its prompt's KV (a disaggregated decode replica: handoff.admit_prebuilt)."""
    if reqs.nalloc[r] > 0:
        return admit_prebuilt(st, cache, lo, reqs, q, r, budget, bt, reserve, now)
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
        l = found(lo, cache, reqs, q, r, h, min(F, cap))
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
        pin(cache, q, reqs.blocks[s + k])
        reqs.own[s + k] = 1
    reqs.nalloc[r] = h
    if tier_on(lo.t1):  # loads, touches and the full-pool rule while HBM makes room (sim_core.serving.tiers)
        admitting(lo, cache, reqs, q, r, h, l, now)
    if not allocate(st, cache, lo, reqs, q, r, need):
        return ADMIT_BUG
    if tier_on(lo.t1):
        register(cache, lo, reqs, q, r, h * bt, (h + l) * bt, bt, False)
        admitted(lo)
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
def _prebuilt_behind(st, cache, lo, reqs, queues, q, budget, bt, reserve, now):
    """The first waiting request after the head whose prompt's KV came by transfer, admitted:
    (its place in the queue, its tokens), or (0, ADMIT_NO) when there is none or it does not
    fit (those after it wait: activated requests keep their order), (0, ADMIT_BUG)."""
    M = queues.wq.shape[1]
    for i in range(1, queues.wn[q]):
        r = queues.wq[q, (queues.wh[q] + i) % M]
        if reqs.nalloc[r] > 0:
            n = admit_prebuilt(st, cache, lo, reqs, q, r, budget, bt, reserve, now)
            return (i, n) if n >= 0 else (0, n)
    return 0, ADMIT_NO


@hook_njit
def schedule(st, cache, lo, reqs, queues, q, now, max_tokens, max_seqs, chunked, whole, threshold, watermark, bt,
             decode):
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
            g = grow(st, cache, lo, reqs, q, r, n, bt)
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
            i = 0
            if decode and n == ADMIT_NO and reqs.nalloc[r] == 0:
                # A disaggregated decode replica: a head that does not fit (preempted there, to be
                # recomputed) lets the activated requests behind it in, in order. They hold their
                # prompt's KV (pinned) and need at most their first decode's block, and they may
                # hold what the head waits for: with nothing running nothing else would free it
                # (a stall). Dynamo's newer mocker admits them first too (docs/disagg.md).
                i, n = _prebuilt_behind(st, cache, lo, reqs, queues, q, budget, bt, reserve, now)
            if n == ADMIT_BUG:
                return -1
            if n == ADMIT_NO:
                break
            r = queues.wq[q, (queues.wh[q] + i) % M]
            for j in range(i, 0, -1):  # take the i-th out, keeping the others' order
                queues.wq[q, (queues.wh[q] + j) % M] = queues.wq[q, (queues.wh[q] + j - 1) % M]
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


@hook_njit
def step_time(reqs, queues, overlap, q, sm_kind, sm_p, px, py, db, dc, dm):
    """Seconds of replica q's step, its new prompt tokens, its decodes, and the flags of the
    measured data it left (measured.step): Dynamo's vLLM decode batch is the requests that
    have generated and end the step caught up."""
    n_pf = 0
    pf_tokens = 0
    pf_flops = 0.0
    pf_ctx = 0.0
    n_dec = 0
    dec_ctx = 0.0
    wait = 0.0
    n_chunk = 0  # prefill chunks, the tokens through them and before them (Dynamo's integer means)
    through = 0
    before = 0
    a = sm_p[0] if sm_kind == 1 else 0.0
    b = sm_p[1] if sm_kind == 1 else 0.0
    for i in range(queues.ns[q]):
        r = queues.sr[q, i]
        n = queues.sn[q, i]
        c0 = reqs.comp[r]
        P = reqs.prompt[r]
        wait = max(wait, reqs.load_s[r])  # its lower-tier loads (their links queue them: sim_core.serving.tiers)
        reqs.load_s[r] = 0.0
        if c0 < P:  # prompt tokens (recomputed generated tokens are not)
            pf_tokens += min(c0 + n, P) - c0
            n_chunk += 1
            through += min(c0 + n, P)
            before += c0
        if reqs.gen[r] > 0 and c0 + n == reqs.ntok[r]:
            # Dynamo's decode batch: requests that have generated and end the step caught up
            # (a request whose prompt completes here is not in it; one whose prompt's KV came
            # by transfer is, with no token to compute: n = 0); their length so far
            n_dec += 1
            dec_ctx += c0 + n
        if reqs.gen[r] == 0 or n > 1:
            n_pf += 1
            pf_flops += n * a + b * (n * float(c0) + n * (n - 1) / 2.0)
            pf_ctx += c0 + n
    out = 0
    if sm_kind == K_MEASURED:  # times each prefill chunk at its own (new, cached) tokens: reads the step itself
        dt, out = measured_seconds(sm_p, reqs, queues, q)
    else:
        T = pf_tokens
        if sm_kind == K_DYNAMO and sm_p[8] != 0.0 and n_chunk > 0:  # stepmodel.DYNAMO_OPTIONS round_means
            T = n_chunk * (through // n_chunk - before // n_chunk)
        dt = step_seconds(sm_kind, sm_p, px, py, db, dc, dm, n_pf, T, pf_flops, pf_ctx, n_dec, dec_ctx)
    if wait > 0.0:  # the step waits for its loads: overlapped with its compute (layer by layer) or after it
        dt = max(dt, wait) if overlap else dt + wait
    return dt, pf_tokens, n_dec, out
