"""The serving loop: virtual time and events only.

Events are step ends and arrivals. At each event time, in this order (Dynamo's replay
loop): every step that ends then is applied (tokens computed, blocks entered in the
index, first and last tokens stamped, finished requests release their blocks); every
request that arrives then is routed and queued; every idle replica with work starts its
next step (sim_core.serving.sched), whose length is the step-time model's
(sim_core.serving.stepmodel).
"""
from __future__ import annotations

import numba
import numpy as np

from ..jit import hook_njit
from .routers import on_finish, on_first_token, route
from .sched import release, schedule
from .sessions import pop, push
from .measured.step import measured_seconds
from .state import (C_DEC_TOKENS, C_ERR, C_EXTRAP, C_PEAK_PINNED, C_PF_TOKENS, C_PINNED, C_QPEAK, C_REQS, C_STEPS,
                    C_COMPUTED, C_RES, C_USED, ERR_POLICY, ERR_STALL, ERR_STATE, F_BUSY, F_NOW, F_QAREA)
from .stepmodel import K_MEASURED, step_seconds


@hook_njit
def _end_step(st, cache, reqs, queues, tu, v, q, t, bt):
    """Apply replica q's step at time t; the number of requests it finished. A finished
    turn of a closed-loop session releases the next (sim_core.serving.sessions)."""
    done = 0
    for i in range(queues.ns[q]):
        r = queues.sr[q, i]
        n = queues.sn[q, i]
        reqs.comp[r] += n
        cache.c[q, C_COMPUTED] += n
        if reqs.comp[r] == reqs.ntok[r]:  # caught up: the step samples a token
            reqs.gen[r] += 1
            if reqs.gen[r] == 1:
                reqs.t_first[r] = t
                on_first_token(v, r, q)
            reqs.t_last[r] = t
            if reqs.gen[r] >= reqs.out[r]:
                release(st, cache, reqs, q, r)
                on_finish(v, reqs, r, q, bt)
                done += 1
                k = tu.nxt[r]
                if k >= 0:
                    reqs.arrive[k] = t + tu.gap[k]
                    push(tu, reqs.arrive[k], k)
            else:
                reqs.ntok[r] += 1
    queues.ns[q] = 0
    if done:  # drop finished requests from the running list, keeping its order
        k = 0
        for i in range(queues.nrun[q]):
            r = queues.run[q, i]
            if reqs.gen[r] < reqs.out[r]:
                queues.run[q, k] = r
                k += 1
        queues.nrun[q] = k
    return done


@hook_njit
def _step_time(reqs, queues, lo, q, sm_kind, sm_p, px, py, db, dc, dm):
    n_pf = 0
    pf_tokens = 0
    pf_flops = 0.0
    pf_ctx = 0.0
    n_dec = 0
    dec_ctx = 0.0
    load = 0.0
    a = sm_p[0] if sm_kind == 1 else 0.0
    b = sm_p[1] if sm_kind == 1 else 0.0
    for i in range(queues.ns[q]):
        r = queues.sr[q, i]
        n = queues.sn[q, i]
        c0 = reqs.comp[r]
        P = reqs.prompt[r]
        load += reqs.load_s[r]  # lower-tier loads this request waits for
        reqs.load_s[r] = 0.0
        if c0 < P:  # prompt tokens (recomputed generated tokens are not)
            pf_tokens += min(c0 + n, P) - c0
        if reqs.gen[r] > 0 and c0 + n == reqs.ntok[r]:
            # Dynamo's decode batch: requests that have generated and end the step caught up
            # (a request whose prompt completes here is not in it); their length so far
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
        dt = step_seconds(sm_kind, sm_p, px, py, db, dc, dm, n_pf, pf_tokens, pf_flops, pf_ctx, n_dec, dec_ctx)
    if load > 0.0:  # the step waits for its loads: overlapped with its compute (layer by layer) or after it
        dt = max(dt, load) if lo.overlap else dt + load
    return dt, pf_tokens, n_dec, out


@hook_njit
def _consistent(cache, reqs, queues, q):
    """The pool's counters against its arrays (cfg[7] = 1: after every step; tests)."""
    res = 0
    pinned = 0
    for b in range(cache.resident.shape[1]):
        if cache.resident[q, b]:
            res += 1
            if cache.refc[q, b] > 0:
                pinned += 1
            elif not cache.inpol[q, b]:
                return False
        elif cache.refc[q, b] != 0 or cache.inpol[q, b]:
            return False
    priv = 0
    for i in range(queues.nrun[q]):
        priv += reqs.priv[queues.run[q, i]]
    return res == cache.c[q, C_RES] and pinned == cache.c[q, C_PINNED] and res + priv == cache.c[q, C_USED]


@numba.njit(cache=True, nogil=True, _nrt=False)
def run_serve(sts, cache, lo, reqs, queues, tu, order, cfg, router, v, sm_kind, sm_p, px, py, db, dc, dm):
    """Replay every request through the replicas: those in `order` at their arrival, the
    later turns of closed-loop sessions when released (`tu`); the makespan.
    cfg: int64[max_num_batched_tokens, max_num_seqs, chunked, long_prefill_threshold,
    watermark blocks, block_tokens, admit_whole, check]."""
    max_tokens = cfg[0]
    max_seqs = cfg[1]
    chunked = cfg[2] != 0
    threshold = cfg[3]
    watermark = cfg[4]
    bt = cfg[5]
    whole = cfg[6] != 0
    check = cfg[7] != 0
    Q = queues.busy.shape[0]
    N = reqs.arrive.shape[0]
    NA = order.shape[0]
    inf = np.inf
    ai = 0
    done = 0
    t = 0.0
    while done < N:
        tn = inf
        for q in range(Q):
            if queues.busy[q] and queues.until[q] < tn:
                tn = queues.until[q]
        if ai < NA and reqs.arrive[order[ai]] < tn:
            tn = reqs.arrive[order[ai]]
        if tu.hn[0] > 0 and tu.hk[0] < tn:
            tn = tu.hk[0]
        if tn == inf:
            cache.c[0, C_ERR] = ERR_STALL
            return t
        for q in range(Q):
            cache.f[q, F_QAREA] += queues.wn[q] * (tn - t)
        t = tn
        for q in range(Q):
            if queues.busy[q] and queues.until[q] <= t:
                st = sts[q]
                done += _end_step(st, cache, reqs, queues, tu, v, q, t, bt)
                queues.busy[q] = False
                if check and not _consistent(cache, reqs, queues, q):
                    cache.c[0, C_ERR] = ERR_STATE
                    return t
        while (ai < NA and reqs.arrive[order[ai]] <= t) or (tu.hn[0] > 0 and tu.hk[0] <= t):
            if ai < NA and reqs.arrive[order[ai]] <= t:
                r = order[ai]
                ai += 1
            else:
                r = pop(tu)
            q = route(router, v, queues, cache, reqs, r, t, Q, bt)
            reqs.rep[r] = q
            M = queues.wq.shape[1]
            queues.wq[q, (queues.wh[q] + queues.wn[q]) % M] = r
            queues.wn[q] += 1
            cache.c[q, C_REQS] += 1
            if queues.wn[q] > cache.c[q, C_QPEAK]:
                cache.c[q, C_QPEAK] = queues.wn[q]
        for q in range(Q):
            if queues.busy[q] or (queues.nrun[q] == 0 and queues.wn[q] == 0):
                continue
            st = sts[q]
            cache.f[q, F_NOW] = t
            k = schedule(st, cache, lo, reqs, queues, q, t, max_tokens, max_seqs, chunked, whole, threshold,
                         watermark, bt)
            if k < 0:
                cache.c[0, C_ERR] = ERR_POLICY
                return t
            if check and not _consistent(cache, reqs, queues, q):
                cache.c[0, C_ERR] = ERR_STATE
                return t
            if k == 0:
                if queues.nrun[q] == 0:  # nothing runs and the head never fits
                    cache.c[0, C_ERR] = ERR_STALL
                    return t
                continue
            dt, pf, nd, out = _step_time(reqs, queues, lo, q, sm_kind, sm_p, px, py, db, dc, dm)
            if out:  # the step left the measured data: count it and which part did
                cache.c[q, C_EXTRAP] += 1
                for bit in range(3):
                    cache.c[q, C_EXTRAP + 1 + bit] += (out >> bit) & 1
            queues.until[q] = t + dt
            queues.busy[q] = True
            cache.c[q, C_STEPS] += 1
            cache.c[q, C_PF_TOKENS] += pf
            cache.c[q, C_DEC_TOKENS] += nd
            cache.f[q, F_BUSY] += dt
            if cache.c[q, C_PINNED] > cache.c[q, C_PEAK_PINNED]:
                cache.c[q, C_PEAK_PINNED] = cache.c[q, C_PINNED]
    return t
