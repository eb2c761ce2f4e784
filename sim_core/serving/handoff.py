"""The handoff of a disaggregated fleet: a request's prompt KV from a prefill replica to a
decode replica, as NVIDIA Dynamo 1.6.1's replay moves it (vLLM scheduler, source first).

Replicas 0 .. P-1 are the prefill pool, P .. P+D-1 the decode pool; both run the same
engine code (the loop, sched.py, pool.py) on one virtual clock. The prefill pool serves
each request with its output capped at one hidden token (`reqs`); the decode pool serves
the same requests with their whole output (`dreqs`, the same arrays' layout). Read from
ai-dynamo/aisimulate (aisimulate-core 0.13.0 is what ai-dynamo-runtime 1.6.1 embeds; the
indexed source is newer, each point was checked on 1.6.1's output, docs/disagg.md):
replay/handoff.rs (HandoffCoordinatorCore: SubmitPrefill, SourceHeld, ReserveDestination,
DestinationReserved, StartTransfer, TransferCompleted, ActivateDestination, ReleaseSource,
in that order), replay/disagg.rs (execute_action, drain_current_timestamp) and
engine/scheduler/vllm/core.rs (retry_pending_destinations, ReservedVllmDecode::activate).

1. The pass that completes a prompt on prefill replica p ends: the request's blocks stay
   allocated and pinned (held), and a reservation is queued (`hold`).
2. Reservation: the decode router picks decode replica d, where the request joins d's
   queue of pending destinations. Only the head of that queue is tried, once per trigger:
   the command itself when d is between passes, the end of each pass of d, and each
   activation on d; a head that did not fit is not tried again until d's capacity changes
   (a request finished or was preempted there). It fits when d has max_num_seqs free
   slots and blocks for the prompt after the prefix d already holds (pinned, not moved).
3. The transfer starts (transfer.py); with none configured it is instant.
4. Activation waits for d's pass boundary: the moved blocks enter d's index, and the
   request joins d's waiting queue in reservation order, its prompt computed and its
   hidden token counted as generated (not kept), so its first pass there is a decode
   with nothing to compute that emits the first visible token (TTFT = prefill queue +
   prefill + handoff + one decode step).
5. The source is released at p's next pass boundary: its blocks return to p's cache as
   cached, evictable blocks.
Actions run in one FIFO per moment, after the passes that end then and the transfers
that complete then, before idle replicas start their next pass (the loop's order).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from ..structures.pairheap import heap_pop
from .decode_routers import pick_decode
from .pool import allocate, available, pin, register, release
from .routers.view import RS_ROUTED
from .state import C_PREEMPT, C_QPEAK, C_REQS, F_NOW
from .transfer import flow, start

# Handoff.s: int64 scalars
S_P, S_D, S_DKIND, S_FH, S_FN, S_ORDER, S_MISSING, S_MAXSEQ, S_DSM = range(9)
N_S = 9
# Handoff.ph: where each request's handoff stands (the action it waits for)
PH_NONE, PH_HELD, PH_PENDING, PH_RESERVED, PH_MOVING, PH_ARRIVED, PH_ACTIVE, PH_DONE = range(8)
ADMIT_NO, ADMIT_BUG = -1, -2  # sched.py's admission codes


class Handoff(NamedTuple):
    s: np.ndarray  # int64[N_S]: prefill replicas (0: aggregated), decode replicas, decode router, FIFO, ...
    f: np.ndarray  # float64[transfer.N_F]: the link
    dcfg: np.ndarray  # int64[N_CFG]: the decode replicas' scheduler configuration (serve's cfg layout)
    dsm_p: np.ndarray  # the decode replicas' step-time model (stepmodel.StepModel.arrays, kind in s[S_DSM])
    dpx: np.ndarray
    dpy: np.ndarray
    ddb: np.ndarray
    ddc: np.ndarray
    ddm: np.ndarray
    ph: np.ndarray  # int8[N]: PH_*
    t_held: np.ndarray  # float64[N]: source held (prefill complete)
    t_res: np.ndarray  # float64[N]: destination reserved
    t_act: np.ndarray  # float64[N]: destination activated
    t_rel: np.ndarray  # float64[N]: source released
    order: np.ndarray  # int64[N]: reservation order on the decode replica (its waiting order)
    nx: np.ndarray  # int64[N]: next in a replica's pending or deferred list
    tried: np.ndarray  # int64[N]: the decode replica's capacity generation when its reservation did not fit
    held: np.ndarray  # int64[N]: prompt blocks the decode replica already held (not moved)
    tok: np.ndarray  # int64[N]: tokens moved
    x_rem: np.ndarray  # float64[N]: bytes left to move (shared links)
    x_nx: np.ndarray  # int64[N]: next transfer on the same link
    pd_h: np.ndarray  # int64[Q]: each decode replica's pending destinations, head and tail
    pd_t: np.ndarray
    df_h: np.ndarray  # int64[Q]: actions deferred to each replica's pass boundary, head and tail
    df_t: np.ndarray
    cgen: np.ndarray  # int64[Q]: requests finished on each decode replica (its capacity generation)
    load: np.ndarray  # int64[Q]: active blocks on each decode replica (the decode router's view)
    xpriv: np.ndarray  # int64[Q]: private blocks of held sources and reserved destinations (check)
    x_head: np.ndarray  # int64[Q]: each prefill replica's transfers in flight (shared links)
    x_n: np.ndarray
    x_upd: np.ndarray  # float64[Q]
    x_next: np.ndarray
    fq: np.ndarray  # int64[N + 1]: the action FIFO (a ring of requests; the phase names the action)
    hk: np.ndarray  # float64[N]: transfers completing, by time (structures.pairheap)
    hv: np.ndarray  # int64[N]
    hn: np.ndarray  # int64[1]


def new_handoff(n_req: int, n_rep: int, prefill: int, decode: int, dkind: int, missing: bool, max_seqs: int,
                link: np.ndarray, dcfg: np.ndarray, dsm: tuple) -> Handoff:
    """The handoff state before the first arrival; prefill = 0 is the aggregated fleet's."""
    N, Q = max(n_req, 1), n_rep
    s = np.array([prefill, decode, dkind, 0, 0, 0, int(missing), max_seqs, int(dsm[0])], np.int64)
    nan = np.full(N, np.nan)
    return Handoff(s, link.astype(np.float64), dcfg.astype(np.int64), *dsm[1:], np.zeros(N, np.int8), nan.copy(),
                   nan.copy(), nan.copy(), nan.copy(), np.zeros(N, np.int64), np.full(N, -1, np.int64),
                   np.full(N, -1, np.int64), np.zeros(N, np.int64), np.zeros(N, np.int64), np.zeros(N),
                   np.full(N, -1, np.int64), np.full(Q, -1, np.int64), np.full(Q, -1, np.int64),
                   np.full(Q, -1, np.int64), np.full(Q, -1, np.int64), np.zeros(Q, np.int64),
                   np.zeros(Q, np.int64), np.zeros(Q, np.int64), np.full(Q, -1, np.int64), np.zeros(Q, np.int64),
                   np.zeros(Q), np.full(Q, np.inf), np.zeros(N + 1, np.int64), np.zeros(N), np.zeros(N, np.int64),
                   np.zeros(1, np.int64))


@hook_njit
def _push(ho, r):
    """Queue the action request r's phase calls for."""
    M = ho.fq.shape[0]
    ho.fq[(ho.s[S_FH] + ho.s[S_FN]) % M] = r
    ho.s[S_FN] += 1


@hook_njit
def _link(head, tail, nx, q, r):
    """Append r to replica q's list (pending destinations or deferred actions)."""
    nx[r] = -1
    if tail[q] < 0:
        head[q] = r
    else:
        nx[tail[q]] = r
    tail[q] = r


@hook_njit
def wake(ho, q):
    """Replica q is between passes: the actions deferred to its boundary join the FIFO."""
    r = ho.df_h[q]
    while r >= 0:
        nx = ho.nx[r]
        _push(ho, r)
        r = nx
    ho.df_h[q] = -1
    ho.df_t[q] = -1


@hook_njit
def hold(ho, reqs, r, q, t):
    """Request r's prompt completed on prefill replica q: its KV stays, pinned, for the
    handoff, and its reservation is queued."""
    ho.ph[r] = PH_HELD
    ho.t_held[r] = t
    ho.xpriv[q] += reqs.priv[r]
    _push(ho, r)


@hook_njit
def decode_done(ho, reqs, r, q, bt):
    """Request r finished on decode replica q: its blocks leave the router's load."""
    ho.load[q] -= (reqs.prompt[r] + bt - 1) // bt
    ho.cgen[q] += 1


@hook_njit
def retry(ho, sts, cache, views, dreqs, queues, q, t, bt):
    """Try the head of decode replica q's pending destinations (one per trigger): 1
    reserved, 0 not, -1 a policy bug. The reservation pins the prompt's prefix q holds
    and allocates the rest."""
    r = ho.pd_h[q]
    gen = ho.cgen[q] + cache.c[q, C_PREEMPT]
    if r < 0 or ho.tried[r] == gen:
        return 0
    if queues.nrun[q] >= ho.s[S_MAXSEQ]:
        ho.tried[r] = gen
        return 0
    s = dreqs.offs[r]
    h = 0
    while h < dreqs.full[r] and cache.resident[q, dreqs.blocks[s + h]]:
        h += 1
    fresh = (dreqs.prompt[r] + bt - 1) // bt - h
    touch = 0  # held blocks that leave the evictable set when pinned
    for k in range(h):
        if cache.refc[q, dreqs.blocks[s + k]] == 0:
            touch += 1
    if fresh + touch > available(cache, q):
        ho.tried[r] = gen
        return 0
    cache.f[q, F_NOW] = t
    for k in range(h):
        pin(cache, q, dreqs.blocks[s + k])
        dreqs.own[s + k] = 1
    dreqs.nalloc[r] = h
    if not allocate(sts[q], cache, views[q % len(views)], dreqs, q, r, fresh):
        return -1
    ho.pd_h[q] = ho.nx[r]
    if ho.pd_h[q] < 0:
        ho.pd_t[q] = -1
    ho.held[r] = h
    ho.tok[r] = fresh * bt if ho.s[S_MISSING] != 0 else dreqs.prompt[r]
    ho.ph[r] = PH_RESERVED
    ho.t_res[r] = t
    ho.xpriv[q] += dreqs.priv[r]
    _push(ho, r)
    return 1


@hook_njit
def _activate(ho, cache, lo, dreqs, queues, q, r, t, bt):
    """The moved blocks enter q's index; r waits for its first decode, in reservation order."""
    ho.xpriv[q] -= dreqs.priv[r]
    cache.f[q, F_NOW] = t
    register(cache, lo, dreqs, q, r, 0, dreqs.prompt[r], bt, True)
    dreqs.comp[r] = dreqs.prompt[r]  # caught up: its first pass here computes nothing and emits token 1
    dreqs.ntok[r] = dreqs.prompt[r]
    dreqs.gen[r] = 1  # the prefill's hidden token (dreqs.out counts it)
    _enqueue(queues, ho.order, q, r)
    cache.c[q, C_REQS] += 1
    if queues.wn[q] > cache.c[q, C_QPEAK]:
        cache.c[q, C_QPEAK] = queues.wn[q]
    ho.ph[r] = PH_ACTIVE
    ho.t_act[r] = t


@hook_njit
def arrivals(ho, t):
    """Transfers complete by t: their activations join the FIFO."""
    flow(ho, t)
    while ho.hn[0] > 0 and ho.hk[0] <= t:
        r = heap_pop(ho.hk, ho.hv, ho.hn)
        ho.ph[r] = PH_ARRIVED
        _push(ho, r)


@hook_njit
def _enqueue(queues, order, q, r):
    """Put r in q's waiting queue before the first request reserved after it (Dynamo
    restores an activated destination at its reservation order)."""
    M = queues.wq.shape[1]
    h = queues.wh[q]
    n = queues.wn[q]
    i = n
    for j in range(n):
        if order[queues.wq[q, (h + j) % M]] > order[r]:
            i = j
            break
    for j in range(n, i, -1):
        queues.wq[q, (h + j) % M] = queues.wq[q, (h + j - 1) % M]
    queues.wq[q, (h + i) % M] = r
    queues.wn[q] = n + 1


@hook_njit
def drive(ho, sts, cache, views, reqs, dreqs, queues, vd, t, bt):
    """Run the FIFO's actions (each may queue more) until it is empty or only deferred
    ones are left: 0, or -1 on a policy bug."""
    M = ho.fq.shape[0]
    P = ho.s[S_P]
    while ho.s[S_FN] > 0:
        r = ho.fq[ho.s[S_FH]]
        ho.s[S_FH] = (ho.s[S_FH] + 1) % M
        ho.s[S_FN] -= 1
        ph = ho.ph[r]
        if ph == PH_HELD:  # ReserveDestination: placed on a decode replica, queued for its blocks
            q = pick_decode(ho.s[S_DKIND], vd, ho.load, cache, dreqs, r, P, ho.s[S_D], bt)
            vd.rs[RS_ROUTED] += 1
            vd.infl[q] += 1
            ho.load[q] += (dreqs.prompt[r] + bt - 1) // bt
            dreqs.rep[r] = q
            ho.order[r] = ho.s[S_ORDER]
            ho.s[S_ORDER] += 1
            ho.ph[r] = PH_PENDING
            _link(ho.pd_h, ho.pd_t, ho.nx, q, r)
            if not queues.busy[q] and retry(ho, sts, cache, views, dreqs, queues, q, t, bt) < 0:
                return -1
        elif ph == PH_RESERVED:  # StartTransfer
            if start(ho, r, reqs.rep[r], ho.tok[r], t):
                ho.ph[r] = PH_MOVING
            else:
                ho.ph[r] = PH_ARRIVED
                _push(ho, r)
        elif ph == PH_ARRIVED:  # ActivateDestination, at the decode replica's pass boundary
            q = dreqs.rep[r]
            if queues.busy[q]:
                _link(ho.df_h, ho.df_t, ho.nx, q, r)
                continue
            _activate(ho, cache, views[q % len(views)], dreqs, queues, q, r, t, bt)
            _push(ho, r)  # its source's release, before what the activation lets d reserve next
            if retry(ho, sts, cache, views, dreqs, queues, q, t, bt) < 0:
                return -1
        elif ph == PH_ACTIVE:  # ReleaseSource, at the prefill replica's pass boundary
            p = reqs.rep[r]
            if queues.busy[p]:
                _link(ho.df_h, ho.df_t, ho.nx, p, r)
                continue
            ho.xpriv[p] -= reqs.priv[r]
            release(sts[p], cache, reqs, p, r)
            ho.ph[r] = PH_DONE
            ho.t_rel[r] = t
    return 0


@hook_njit
def admit_prebuilt(st, cache, lo, reqs, q, r, budget, bt, reserve, now):
    """Admit r, whose prompt's KV came by transfer, on decode replica q: nothing to look
    up; its first decode's block, if it needs one. Its tokens, or ADMIT_NO / ADMIT_BUG."""
    n = reqs.ntok[r] - reqs.comp[r]
    if n > budget:
        return ADMIT_NO
    need = (reqs.comp[r] + n + bt - 1) // bt - reqs.nalloc[r]
    if need + reserve > available(cache, q):
        return ADMIT_NO
    if need > 0 and not allocate(st, cache, lo, reqs, q, r, need):
        return ADMIT_BUG
    register(cache, lo, reqs, q, r, reqs.comp[r], reqs.comp[r] + n, bt, True)
    if reqs.t_admit[r] != reqs.t_admit[r]:
        reqs.t_admit[r] = now
    return n
