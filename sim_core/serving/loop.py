"""The serving loop: virtual time and events only.

Events are step ends, arrivals and (disaggregated fleets) KV transfers completing. At
each event time, in this order (Dynamo's replay loop): every step that ends then is
applied (tokens computed, blocks entered in the index, first and last tokens stamped,
finished requests release their blocks); every transfer that completes then and every
request that arrives then is queued (routed, for an arrival); the handoff's actions run
(sim_core.serving.handoff); every idle replica with work starts its next step (its
engine's scheduler, sim_core.serving.schedulers), whose length is the step-time model's
(sim_core.serving.stepmodel).
"""
from __future__ import annotations

import numba
import numpy as np

from ..jit import hook_njit
from ..tiers.hierarchy import tier_on
from .handoff import S_DSM, S_P, arrivals, decode_done, drive, hold, retry, wake
from .routers import on_finish, on_first_token, route
from .pool import release
from .schedulers import schedule, step_ended, step_ending, step_time
from .sessions import pop, push
from .tiers import step_done
from .transfer import next_time as next_transfer
from .state import (C_DEC_TOKENS, C_ERR, C_EXTRAP, C_PEAK_PINNED, C_PF_TOKENS, C_PINNED, C_QPEAK, C_REQS, C_STEPS,
                    C_COMPUTED, C_RES, C_USED, ERR_POLICY, ERR_STALL, ERR_STATE, F_BUSY, F_NOW, F_QAREA)


#: replica counts up to this share one compiled loop (see replica_states)
STATES_MIN = 16


def replica_states(states: tuple, minimum: int = STATES_MIN) -> tuple:
    """The replicas' policy states as run_serve takes them. A tuple's length is part of the
    compiled loop's type, so every replica count would compile the loop again (about 20 s
    each); padded with the first state (never read: the loop indexes replicas below Q only)
    to STATES_MIN, or the next power of two above it, one compile serves every count up to
    STATES_MIN and one more each doubling. (Compiling a 16-long tuple costs about what a
    1-long one does; 64 costs twice that.) The replicas' tier views are padded from
    `minimum`=1 (sim_core.serving._below)."""
    n = max(minimum, 1 << (len(states) - 1).bit_length())
    return tuple(states) + (states[0],) * (n - len(states))


@hook_njit
def _end_step(st, cache, lo, reqs, queues, tu, v, q, t, bt, ho):
    """Apply replica q's step at time t; the number of requests it finished. A finished
    turn of a closed-loop session releases the next (sim_core.serving.sessions). On a
    disaggregated fleet's prefill replica (q < P) a request finishes at its hidden token
    and its KV is held for the handoff (sim_core.serving.handoff). The lower tiers take what
    the step computed (sim_core.serving.tiers)."""
    done = 0
    P = 0 if ho is None else ho.s[S_P]
    for i in range(queues.ns[q]):
        r = queues.sr[q, i]
        n = queues.sn[q, i]
        reqs.comp[r] += n
        cache.c[q, C_COMPUTED] += n
        if tier_on(lo.t1):
            step_done(lo, reqs, q, r, t, bt)
        if reqs.comp[r] == reqs.ntok[r]:  # caught up: the step samples a token
            reqs.gen[r] += 1
            if reqs.t_first[r] != reqs.t_first[r]:  # its first token (NaN: none yet)
                reqs.t_first[r] = t
                on_first_token(v, r, q)
            reqs.t_last[r] = t
            if reqs.gen[r] >= reqs.out[r]:
                done += 1
                if ho is not None and q < P:
                    hold(ho, reqs, r, q, t)
                    on_finish(v, reqs, r, q, bt)
                    continue
                release(st, cache, reqs, q, r)
                on_finish(v, reqs, r, q, bt)
                if ho is not None and P > 0:
                    decode_done(ho, reqs, r, q, bt)
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
def _consistent(cache, reqs, queues, q, outside):
    """The pool's counters against its arrays (cfg[7] = 1: after every step; tests);
    `outside`: private blocks of requests in neither queue (held handoffs)."""
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
    priv = outside
    for i in range(queues.nrun[q]):
        priv += reqs.priv[queues.run[q, i]]
    M = queues.wq.shape[1]
    for i in range(queues.wn[q]):  # a waiting request holds blocks only mid-prefill (SGLang's chunked request)
        priv += reqs.priv[queues.wq[q, (queues.wh[q] + i) % M]]
    return res == cache.c[q, C_RES] and pinned == cache.c[q, C_PINNED] and res + priv == cache.c[q, C_USED]


@numba.njit(cache=True, nogil=True, _nrt=False)
def run_serve(sts, cache, views, reqs, queues, tu, order, cfg, ss, router, v, sm_kind, sm_p, px, py, db, dc, dm,
              dreqs, vd, ho):
    """Replay every request through the replicas: those in `order` at their arrival, the
    later turns of closed-loop sessions when released (`tu`); the makespan.
    cfg: int64[N_CFG] (sim_core.serving.schedulers: the scheduler, its limits, block_tokens,
    check); ss: SGLang's scheduler state, None under vLLM's. A disaggregated fleet (ho.s[S_P]
    = P > 0): replicas from P on are the decode pool, with their requests' state `dreqs`,
    their router's view `vd`, and their configuration and step-time model in `ho`
    (sim_core.serving.handoff); an aggregated one passes reqs and v again, and ho=None.
    A None argument is pruned at compile time (every `is None` test on it is a constant):
    a vLLM or aggregated replay does not compile SGLang's scheduler or the handoff, which
    were half of each policy's compile."""
    bt = cfg[5]
    check = cfg[7] != 0
    Q = queues.busy.shape[0]
    N = reqs.arrive.shape[0]
    NA = order.shape[0]
    P = 0 if ho is None else ho.s[S_P]
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
        if ho is not None:
            tn = min(tn, next_transfer(ho))
        if tn == inf:
            cache.c[0, C_ERR] = ERR_STALL
            return t
        for q in range(Q):
            cache.f[q, F_QAREA] += queues.wn[q] * (tn - t)
        t = tn
        for q in range(Q):
            if queues.busy[q] and queues.until[q] <= t:
                st = sts[q]
                lo = views[q % len(views)]
                dec = P > 0 and q >= P
                rq = dreqs if dec else reqs
                if ho is not None:
                    wake(ho, q)
                step_ending(ss, cache, lo, rq, queues, q, t, cfg)
                k = _end_step(st, cache, lo, rq, queues, tu, vd if dec else v, q, t, bt, ho)
                step_ended(ss, queues, q, k, cfg)
                if q >= P:  # a prefill replica's finished requests are handed off, not done
                    done += k
                queues.busy[q] = False
                if ho is not None and dec and retry(ho, sts, cache, views, dreqs, queues, q, t, bt) < 0:
                    cache.c[0, C_ERR] = ERR_POLICY
                    return t
                if check and not _consistent(cache, rq, queues, q, 0 if ho is None else ho.xpriv[q]):
                    cache.c[0, C_ERR] = ERR_STATE
                    return t
        if ho is not None:
            arrivals(ho, t)
        while (ai < NA and reqs.arrive[order[ai]] <= t) or (tu.hn[0] > 0 and tu.hk[0] <= t):
            if ai < NA and reqs.arrive[order[ai]] <= t:
                r = order[ai]
                ai += 1
            else:
                r = pop(tu)
            q = route(router, v, queues, cache, views, reqs, r, t, P if P > 0 else Q, bt)  # the prefill pool's
            reqs.rep[r] = q
            M = queues.wq.shape[1]
            queues.wq[q, (queues.wh[q] + queues.wn[q]) % M] = r
            queues.wn[q] += 1
            cache.c[q, C_REQS] += 1
            if queues.wn[q] > cache.c[q, C_QPEAK]:
                cache.c[q, C_QPEAK] = queues.wn[q]
        if ho is not None and drive(ho, sts, cache, views, reqs, dreqs, queues, vd, t, bt) < 0:
            cache.c[0, C_ERR] = ERR_POLICY
            return t
        for q in range(Q):
            if queues.busy[q] or (queues.nrun[q] == 0 and queues.wn[q] == 0):
                continue
            st = sts[q]
            lo = views[q % len(views)]
            dec = P > 0 and q >= P
            rq = dreqs if dec else reqs
            cq = cfg if ho is None or not dec else ho.dcfg
            cache.f[q, F_NOW] = t
            k = schedule(ss, st, cache, lo, rq, queues, q, t, cq)
            if k < 0:
                cache.c[0, C_ERR] = ERR_POLICY
                return t
            if check and not _consistent(cache, rq, queues, q, 0 if ho is None else ho.xpriv[q]):
                cache.c[0, C_ERR] = ERR_STATE
                return t
            if k == 0:
                # nothing runs and the head never fits (a handoff's pinned blocks will be released)
                if queues.nrun[q] == 0 and (P == 0 or cache.c[q, C_PINNED] == 0):
                    cache.c[0, C_ERR] = ERR_STALL
                    return t
                continue
            if ho is None or not dec:
                dt, pf, nd, out = step_time(ss, reqs, queues, lo, q, cfg, sm_kind, sm_p, px, py, db, dc, dm)
            else:
                dt, pf, nd, out = step_time(ss, rq, queues, lo, q, cq, ho.s[S_DSM], ho.dsm_p, ho.dpx, ho.dpy, ho.ddb,
                                            ho.ddc, ho.ddm)
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
