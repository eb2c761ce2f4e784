"""SGLang's scheduler over the block pool (pool.py): what one pass runs (docs/serving.md).

Read from sgl-project/sglang: `managers/schedule_policy.py` at 00550cd11b35 (SchedulePolicy,
PrefillAdder; and at ad0119fdde51, a v0.5 release, for the older max_prefill_tokens rule),
`managers/schedule_batch.py` at 000eaffacf04 (check_decode_mem, retract_decode),
`managers/scheduler.py` at 0003215cf146 (get_next_batch_to_run, get_new_batch_prefill,
update_running_batch, the reset when idle); and NVIDIA Dynamo's model of it
(ai-dynamo/aisimulate `crates/core/src/engine/scheduler/sglang/`; Dynamo 1.6.1 ships it as
aisimulate-core 0.13.0), checked on its replay.

A pass is a prefill batch if one can be formed, else a decode step over every running
request ("Run prefill first if possible"); running requests do not decode in a prefill
pass, and a request whose prompt completes in it gets its first token from it.

Prefill batch (PrefillAdder). The chunked request left by the last pass goes first, with
min(what is left of it, the chunk budget, the total budget) tokens. Then waiting requests
in queue order (`fcfs`; `lpm`: longest cached prefix first while at most 128 wait) while
running + batch < max_num_seqs. Each matches its cached prefix (at most its tokens - 1); a
request whose block-rounded new tokens exceed the chunk budget left is cut to whole blocks
and becomes the chunked request. It is refused, ending the batch, when its uncached tokens
plus min(output left, clip_max_new_tokens) reach the total budget: free + evictable tokens
- sum over running requests of min(output left, clip) x new_token_ratio - what the batch
took; or when its chunk exceeds what is left of max_prefill_tokens. An admission costs its
block-rounded new tokens, plus min(max_new_tokens, clip) when it completes the prompt.
Refused for tokens, or at max_num_seqs, the batch is "full": prefill is not tried again
until a running request finishes or is retracted.

Decode step (update_running_batch). When the blocks the next tokens need exceed free +
evictable blocks, running requests are retracted (fewest output tokens first; ties: the
longest prompt, then the latest admitted) until the rest fit or one is left: each releases
its blocks, loses its progress and goes to the back of the queue, to be prefilled again
over its prompt and outputs. new_token_ratio is then re-estimated as min(1, (outputs so far
+ 20 x running) / their max_new_tokens); otherwise each decode step lowers it by
(init - floor) / 600 down to floor = 0.14 init, init = min(1, 0.7 x conservativeness); it
returns to init whenever the engine is idle.

Blocks a forward computes enter the index when it ends (SGLang inserts them into its radix
tree after the forward), so the requests of one prefill batch never hit each other.

`compat` (engine.dynamo_compat) does what Dynamo 1.6.1's model does where it departs from
SGLang: a request is weighed against the total budget by its chunk alone (its output room
only when the chunk completes it) and charged what is left of its output; the chunked
request is cut like any other and waits until that chunk fits; no "full" batch; the
retraction victim is the earliest admitted of those with the fewest outputs; the ratio's
re-estimate divides by max_new_tokens + 1, is not reset when idle, nor init capped at 1.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from .pool import allocate, available, pin, preempt, prefix, register, reserve
from .state import F_NOW
from .measured.step import measured_seconds
from .stepmodel import K_MEASURED, step_seconds

# SchedState.c columns (int64 per replica) and .f columns (float64 per replica)
S_PASS, S_FULL = range(2)
S_RATIO = 0
PASS_NONE, PASS_PREFILL, PASS_DECODE = range(3)
# SchedState.p: init, floor and per-decode-step decay of new_token_ratio
P_INIT, P_MIN, P_DECAY = range(3)

# sglang/srt/global_config.py and schedule_policy.py defaults
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
LPM_QUEUE_LIMIT = 128  # SchedulePolicy._determine_active_policy: a longer queue is served FCFS
IN_BATCH_CHECK_TOKENS = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
IN_BATCH_DEPRIORITIZE_TOKENS = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD
_LAST = 1 << 62  # the sort key of a deprioritized request


class SchedState(NamedTuple):
    """What a scheduler keeps per replica beyond the shared arrays (SGLang's; tiny for vLLM)."""

    c: np.ndarray  # int64[Q, 2]: the pass in flight (PASS_*), the batch is full
    f: np.ndarray  # float64[Q, 1]: new_token_ratio
    p: np.ndarray  # float64[3]: new_token_ratio's init, floor, decay
    mark: np.ndarray  # int64[U] (lpm; else [1]): the sort that last saw a waiting prefix (in-batch check)
    key: np.ndarray  # int64[N] (lpm; else [1]): each waiting request's sort key
    buf: np.ndarray  # int32[LPM_QUEUE_LIMIT]: the queue being sorted
    epoch: np.ndarray  # int64[1]: sorts so far


def new_sched_state(n_rep: int, n_unique: int, n_req: int, conservativeness: float = 1.0,
                    lpm: bool = False, compat: bool = False) -> SchedState:
    init = INIT_NEW_TOKEN_RATIO * float(conservativeness)
    if not compat:
        init = min(init, 1.0)
    floor = init * MIN_NEW_TOKEN_RATIO_FACTOR
    return SchedState(np.zeros((n_rep, 2), np.int64), np.full((n_rep, 1), init),
                      np.array([init, floor, (init - floor) / NEW_TOKEN_RATIO_DECAY_STEPS]),
                      np.zeros(n_unique if lpm else 1, np.int64), np.zeros(n_req if lpm else 1, np.int64),
                      np.zeros(LPM_QUEUE_LIMIT, np.int32), np.zeros(1, np.int64))


@hook_njit
def _room(reqs, r, clip):
    """min(max_new_tokens - outputs so far, clip): the output room SGLang keeps for r."""
    return min(max(reqs.out[r] - reqs.gen[r], 0), clip)


@hook_njit
def _output_charge(reqs, r, clip, compat):
    """What an admission that completes r's prompt charges for its output: its whole
    min(max_new_tokens, clip) (SGLang's _update_prefill_budget), or what is left of it (Dynamo)."""
    return _room(reqs, r, clip) if compat else min(reqs.out[r], clip)


@hook_njit
def _paged(n, bt):
    return (n + bt - 1) // bt * bt


@hook_njit
def _lpm(cache, reqs, queues, ss, q, skip, bt):
    """Longest prefix match: sort the waiting queue (after its first `skip`) by cached
    prefix, longest first, stably; a request with (almost) nothing cached whose first 32
    tokens an earlier one of them shares goes last (in-batch prefix caching). Not over 128
    waiting requests. Blocks are prefix-chained, so the k-th block names the first k."""
    M = queues.wq.shape[1]
    W = queues.wn[q] - skip
    if W < 2 or W > LPM_QUEUE_LIMIT:
        return
    k = (IN_BATCH_DEPRIORITIZE_TOKENS + bt - 1) // bt
    ss.epoch[0] += 1
    e = ss.epoch[0]
    h0 = queues.wh[q] + skip
    for i in range(W):
        r = queues.wq[q, (h0 + i) % M]
        m = prefix(cache, reqs, q, r, reqs.ntok[r] // bt)
        key = -m
        if m * bt <= IN_BATCH_CHECK_TOKENS and min(reqs.full[r], reqs.ntok[r] // bt) >= k:
            b = reqs.blocks[reqs.offs[r] + k - 1]
            if ss.mark[b] == e:
                key = _LAST
            else:
                ss.mark[b] = e
        ss.key[r] = key
        ss.buf[i] = r
    for i in range(1, W):  # insertion sort: stable, and the queue is short
        r = ss.buf[i]
        j = i - 1
        while j >= 0 and ss.key[ss.buf[j]] > ss.key[r]:
            ss.buf[j + 1] = ss.buf[j]
            j -= 1
        ss.buf[j + 1] = r
    for i in range(W):
        queues.wq[q, (h0 + i) % M] = ss.buf[i]


@hook_njit
def _take(queues, q, ns, r, n):
    """r leaves the head of the waiting queue into the batch with n tokens."""
    queues.wh[q] = (queues.wh[q] + 1) % queues.wq.shape[1]
    queues.wn[q] -= 1
    queues.sr[q, ns] = r
    queues.sn[q, ns] = n


@hook_njit
def _run(queues, q, r):
    queues.run[q, queues.nrun[q]] = r
    queues.nrun[q] += 1


@hook_njit
def _prefill(st, cache, lo, reqs, queues, ss, q, now, max_seqs, bt, chunk, max_prefill, clip, compat):
    """Form a prefill batch in queues.sr/sn; its size (0: none), -1 on a policy bug.
    `compat`: Dynamo's admission (the module docstring)."""
    ratio = ss.f[q, S_RATIO]
    offset = 0.0  # PrefillAdder.rem_total_token_offset: running requests' output room, then the batch's
    for i in range(queues.nrun[q]):
        offset += _room(reqs, queues.run[q, i], clip) * ratio
    room = available(cache, q) * bt  # free + evictable tokens, less what the batch's matches lock
    rem_input = max_prefill
    rem_chunk = chunk
    ns = 0
    chunked = -1
    head = queues.wq[q, queues.wh[q]]
    if reqs.nalloc[head] > 0:  # the chunked request: it holds blocks while it waits
        left = reqs.ntok[head] - reqs.comp[head]
        if compat:  # Dynamo: cut as any request, and wait until that chunk fits the total budget
            n = left if _paged(left, bt) <= rem_chunk else rem_chunk // bt * bt
            if _paged(n, bt) + (_room(reqs, head, clip) if n == left else 0) >= room - offset:
                return 0
        else:  # add_chunked_req: as much as the chunk and total budgets leave
            n = min(left, rem_chunk, int(room - offset))
            if n <= 0:
                return 0
        g = reserve(st, cache, lo, reqs, q, head, reqs.comp[head] + n, bt)
        if g <= 0:
            return g
        paged = _paged(n, bt)
        offset += paged + (_output_charge(reqs, head, clip, compat) if n == left else 0)
        rem_input -= paged
        rem_chunk -= paged
        _take(queues, q, ns, head, n)
        ns += 1
        if n < left:
            chunked = head
        else:
            _run(queues, q, head)
    while chunked < 0 and queues.wn[q] > 0 and rem_input > 0 and rem_chunk > 0:
        if queues.nrun[q] >= max_seqs:
            ss.c[q, S_FULL] = 1
            break
        r = queues.wq[q, queues.wh[q]]
        s = reqs.offs[r]
        h = prefix(cache, reqs, q, r, (reqs.ntok[r] - 1) // bt)  # the last token is always computed
        extend = reqs.ntok[r] - h * bt
        n = extend
        if _paged(extend, bt) > rem_chunk:  # cut to whole blocks: it becomes the chunked request
            n = rem_chunk // bt * bt
        # SGLang weighs the whole request against the total budget even when it is cut; Dynamo its chunk
        total = extend + _room(reqs, r, clip)
        if compat:
            total = _paged(n, bt) + (_room(reqs, r, clip) if n == extend else 0)
        if total >= room - offset:
            ss.c[q, S_FULL] = 1
            break
        if _paged(n, bt) > rem_input:
            break
        touch = 0  # matched blocks that leave the evictable set once locked
        for k in range(h):
            if cache.refc[q, reqs.blocks[s + k]] == 0:
                touch += 1
        if total >= room - touch * bt - offset:
            ss.c[q, S_FULL] = 1
            break
        if n <= 0:
            break
        need = (h * bt + n + bt - 1) // bt - h
        if need + touch > available(cache, q):  # within the budget above this cannot happen
            break
        for k in range(h):
            pin(cache, q, reqs.blocks[s + k])
            reqs.own[s + k] = 1
        reqs.nalloc[r] = h
        if not allocate(st, cache, lo, reqs, q, r, need):
            return -1
        hit = h * bt
        reqs.comp[r] = hit
        if reqs.hit_first[r] < 0:
            reqs.hit_first[r] = hit
            reqs.t_admit[r] = now
        if hit > reqs.hit_max[r]:
            reqs.hit_max[r] = hit
        reqs.hit_sum[r] += hit
        room -= touch * bt
        paged = _paged(n, bt)
        offset += paged + (_output_charge(reqs, r, clip, compat) if n == extend else 0)
        rem_input -= paged
        rem_chunk -= paged
        _take(queues, q, ns, r, n)
        ns += 1
        if n < extend:
            chunked = r
        else:
            _run(queues, q, r)
        if room - offset <= 0:
            ss.c[q, S_FULL] = 1
            break
    if chunked >= 0:  # back to the head of the queue, to continue next pass
        M = queues.wq.shape[1]
        queues.wh[q] = (queues.wh[q] - 1 + M) % M
        queues.wq[q, queues.wh[q]] = chunked
        queues.wn[q] += 1
    return ns


@hook_njit
def _need(reqs, queues, q, bt):
    """Blocks the running requests' next tokens need (check_decode_mem)."""
    need = 0
    for i in range(queues.nrun[q]):
        r = queues.run[q, i]
        need += (reqs.comp[r] + bt) // bt - reqs.nalloc[r]
    return need


@hook_njit
def _victim(reqs, queues, q, compat):
    """retract_decode's order: fewest output tokens, then the longest prompt, then the latest
    admitted (Dynamo: fewest output tokens, then the earliest admitted)."""
    best = 0
    for i in range(1, queues.nrun[q]):
        r = queues.run[q, i]
        b = queues.run[q, best]
        if compat:
            if reqs.gen[r] < reqs.gen[b]:
                best = i
        elif reqs.gen[r] < reqs.gen[b] or (reqs.gen[r] == reqs.gen[b] and reqs.prompt[r] >= reqs.prompt[b]):
            best = i
    return best


@hook_njit
def _retract(st, cache, reqs, queues, q, i):
    """Running request i gives up its blocks and progress and goes to the back of the queue."""
    r = queues.run[q, i]
    for k in range(i, queues.nrun[q] - 1):
        queues.run[q, k] = queues.run[q, k + 1]
    queues.nrun[q] -= 1
    preempt(st, cache, reqs, q, r)
    M = queues.wq.shape[1]
    queues.wq[q, (queues.wh[q] + queues.wn[q]) % M] = r
    queues.wn[q] += 1


@hook_njit
def _decode(st, cache, lo, reqs, queues, ss, q, bt, compat):
    """The decode step over every running request, after retracting what does not fit;
    its size, -1 on a policy bug."""
    retracted = 0
    while queues.nrun[q] > 1 and _need(reqs, queues, q, bt) > available(cache, q):
        _retract(st, cache, reqs, queues, q, _victim(reqs, queues, q, compat))
        retracted += 1
    if retracted:
        done = 0
        most = 0
        for i in range(queues.nrun[q]):
            r = queues.run[q, i]
            done += reqs.gen[r]
            most += reqs.out[r]
        ss.f[q, S_RATIO] = min(1.0, (done + RETRACT_DECODE_STEPS * queues.nrun[q]) / (most + (1 if compat else 0)))
        ss.c[q, S_FULL] = 0
    else:
        ss.f[q, S_RATIO] = max(ss.f[q, S_RATIO] - ss.p[P_DECAY], ss.p[P_MIN])
    ns = 0
    for i in range(queues.nrun[q]):
        r = queues.run[q, i]
        g = reserve(st, cache, lo, reqs, q, r, reqs.comp[r] + 1, bt)
        if g < 0:
            return -1
        if g == 0:  # a lone request whose next block does not fit: cannot happen below capacity
            break
        queues.sr[q, ns] = r
        queues.sn[q, ns] = 1
        ns += 1
    return ns


@hook_njit
def schedule(st, cache, lo, reqs, queues, ss, q, now, max_seqs, bt, chunk, max_prefill, clip, lpm, compat):
    """Fill replica q's next pass (queues.sr/sn/ns): a prefill batch if one forms, else a
    decode step; -1 on a policy bug. `compat`: Dynamo's model of it (the module docstring)."""
    ns = 0
    if queues.wn[q] > 0:
        continuing = reqs.nalloc[queues.wq[q, queues.wh[q]]] > 0
        if queues.nrun[q] >= max_seqs:
            ss.c[q, S_FULL] = 1
        elif continuing or ss.c[q, S_FULL] == 0 or compat:
            if lpm:
                _lpm(cache, reqs, queues, ss, q, 1 if continuing else 0, bt)
            ns = _prefill(st, cache, lo, reqs, queues, ss, q, now, max_seqs, bt, chunk, max_prefill, clip, compat)
            if ns < 0:
                return -1
    if ns > 0:
        ss.c[q, S_PASS] = PASS_PREFILL
    elif queues.nrun[q] > 0:
        ns = _decode(st, cache, lo, reqs, queues, ss, q, bt, compat)
        if ns < 0:
            return -1
        ss.c[q, S_PASS] = PASS_DECODE
    queues.ns[q] = ns
    return ns


@hook_njit
def step_ending(cache, lo, reqs, queues, q, t, bt):
    """The forward ends at t: the blocks it filled enter the index (radix tree insertion
    after the forward: cache_unfinished_req, and for decode blocks at the latest on finish)."""
    cache.f[q, F_NOW] = t
    for i in range(queues.ns[q]):
        r = queues.sr[q, i]
        register(cache, lo, reqs, q, r, reqs.comp[r], reqs.comp[r] + queues.sn[q, i], bt, True)


@hook_njit
def step_ended(ss, queues, q, finished, compat):
    """After the pass: a shrunken batch may admit again; an idle engine resets new_token_ratio
    (Dynamo's does not)."""
    ss.c[q, S_PASS] = PASS_NONE
    if finished > 0:
        ss.c[q, S_FULL] = 0
    if queues.nrun[q] == 0 and queues.wn[q] == 0 and not compat:
        ss.c[q, S_FULL] = 0
        ss.f[q, S_RATIO] = ss.p[P_INIT]


@hook_njit
def step_time(reqs, queues, ss, q, sm_kind, sm_p, px, py, db, dc, dm):
    """Seconds of the pass, its new prompt tokens, its decodes and the measured data's flags
    (as sched.step_time). A prefill pass costs the
    new tokens of its chunks (prompt and recomputed outputs alike: Dynamo's T), a decode
    step its requests' lengths so far; never both."""
    n_pf = 0
    pf_tokens = 0
    prompt_tokens = 0
    pf_flops = 0.0
    pf_ctx = 0.0
    n_dec = 0
    dec_ctx = 0.0
    a = sm_p[0] if sm_kind == 1 else 0.0
    b = sm_p[1] if sm_kind == 1 else 0.0
    prefill = ss.c[q, S_PASS] == PASS_PREFILL
    for i in range(queues.ns[q]):
        r = queues.sr[q, i]
        n = queues.sn[q, i]
        c0 = reqs.comp[r]
        if prefill:
            n_pf += 1
            pf_tokens += n
            if c0 < reqs.prompt[r]:
                prompt_tokens += min(c0 + n, reqs.prompt[r]) - c0
            pf_flops += n * a + b * (n * float(c0) + n * (n - 1) / 2.0)
            pf_ctx += c0 + n
        else:
            n_dec += 1
            dec_ctx += c0 + n
    out = 0
    if sm_kind == K_MEASURED:
        dt, out = measured_seconds(sm_p, reqs, queues, q)
    else:
        dt = step_seconds(sm_kind, sm_p, px, py, db, dc, dm, n_pf, pf_tokens, pf_flops, pf_ctx, n_dec, dec_ctx)
    return dt, prompt_tokens, n_dec, out
