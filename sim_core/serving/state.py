"""The serving replay's state: flat arrays, one row per replica where it is per engine.

Cache    each replica's KV block pool: which trace blocks it holds, their pins, counters
Reqs     each request's progress (tokens computed, blocks held, times, reuse)
Queues   each replica's waiting queue (a ring with a front), running list and current step
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Cache.c counters (int64, per replica)
(C_CAP, C_USED, C_RES, C_PINNED, C_EVICT, C_PEAK_PINNED, C_PREEMPT, C_BAD, C_BADV, C_STEPS, C_PF_TOKENS,
 C_DEC_TOKENS, C_REQS, C_QPEAK, C_ERR, C_COMPUTED, C_LOADED) = range(17)
C_LOADED_END = C_LOADED + 3  # blocks loaded from lower tier 1, 2, 3
# steps the measured step model timed outside its data: any, tokens, prefill attention, decode
C_EXTRAP = C_LOADED_END
N_C = C_EXTRAP + 4
# Cache.f (float64, per replica)
F_BUSY, F_QAREA, F_NOW = range(3)  # F_NOW: the time of the step being scheduled
N_F = 3
# C_ERR values: why the replay stopped early
ERR_NONE, ERR_STALL, ERR_POLICY, ERR_STATE = 0, 1, 2, 3


class Cache(NamedTuple):
    resident: np.ndarray  # bool[Q, U]: the replica holds trace block b (hashed, findable)
    refc: np.ndarray  # int32[Q, U]: running requests holding b
    pin: np.ndarray  # int32[Q, U]: SHARED_PIN while refc > 0, else -1 (what `evict` skips)
    inpol: np.ndarray  # bool[Q, U]: b is in the eviction policy's structures
    c: np.ndarray  # int64[Q, N_C]
    f: np.ndarray  # float64[Q, N_F]
    extra: np.ndarray  # int32[max capacity]: evict_more's scratch
    t_in: np.ndarray  # float64[Q, U] (or [Q, 1] untracked): when b last entered q's index
    t_out: np.ndarray  # float64[Q, U] (or [Q, 1]): when b last left it (a router's lagged view reads both)


class Reqs(NamedTuple):
    offs: np.ndarray  # int64[N+1]: the trace's request offsets
    blocks: np.ndarray  # int32[accesses]: dense block ids
    full: np.ndarray  # int64[N]: leading blocks that are full (cacheable) prompt blocks
    prompt: np.ndarray  # int64[N]: prompt tokens
    out: np.ndarray  # int64[N]: output tokens (>= 1)
    arrive: np.ndarray  # float64[N]: arrival (s, scaled by the speed-up)
    comp: np.ndarray  # int64[N]: tokens whose KV is computed (or reused)
    ntok: np.ndarray  # int64[N]: tokens so far (prompt + generated)
    gen: np.ndarray  # int64[N]: tokens generated
    nalloc: np.ndarray  # int64[N]: KV blocks held (positions 0..nalloc-1)
    priv: np.ndarray  # int64[N]: of those, private ones (not in the cache's index)
    own: np.ndarray  # int8[accesses]: per prompt position: 1 holds the cached block, 2 private
    hit_first: np.ndarray  # int64[N]: reused prompt tokens at the first admission (-1: not yet)
    hit_max: np.ndarray  # int64[N]: the most reused at any admission
    hit_sum: np.ndarray  # int64[N]: reused over all admissions
    t_admit: np.ndarray  # float64[N]: first admission
    t_first: np.ndarray  # float64[N]: first token
    t_last: np.ndarray  # float64[N]: last token
    npre: np.ndarray  # int32[N]: preemptions
    lost: np.ndarray  # int64[N]: computed tokens dropped by preemptions
    load_s: np.ndarray  # float64[N]: seconds of lower-tier loads its next step waits for
    rep: np.ndarray  # int32[N]: replica it was routed to
    session: np.ndarray  # int64[N]: session id, -1 without


class Queues(NamedTuple):
    wq: np.ndarray  # int32[Q, N+1]: waiting ring
    wh: np.ndarray  # int64[Q]: ring head
    wn: np.ndarray  # int64[Q]: waiting count
    run: np.ndarray  # int32[Q, S]: running, in admission order
    nrun: np.ndarray  # int64[Q]
    sr: np.ndarray  # int32[Q, S]: the step in flight: its requests
    sn: np.ndarray  # int64[Q, S]: and their tokens
    ns: np.ndarray  # int64[Q]
    busy: np.ndarray  # bool[Q]: a step is in flight
    until: np.ndarray  # float64[Q]: when it ends


def new_state(trace, n_rep: int, capacity: int, max_seqs: int, full, prompt, out, arrive, session,
              track_times: bool = False):
    R, U = trace.n_requests, trace.n_unique
    cache = Cache(np.zeros((n_rep, U), np.bool_), np.zeros((n_rep, U), np.int32),
                  np.full((n_rep, U), -1, np.int32), np.zeros((n_rep, U), np.bool_),
                  np.zeros((n_rep, N_C), np.int64), np.zeros((n_rep, N_F), np.float64),
                  np.zeros(max(int(capacity), 1), np.int32), np.full((n_rep, U if track_times else 1), np.nan),
                  np.full((n_rep, U if track_times else 1), np.nan))
    cache.c[:, C_CAP] = capacity
    reqs = new_reqs(trace, full, prompt, out, arrive, session)
    S = int(max_seqs)
    queues = Queues(np.zeros((n_rep, R + 1), np.int32), np.zeros(n_rep, np.int64), np.zeros(n_rep, np.int64),
                    np.zeros((n_rep, S), np.int32), np.zeros(n_rep, np.int64),
                    np.zeros((n_rep, S), np.int32), np.zeros((n_rep, S), np.int64), np.zeros(n_rep, np.int64),
                    np.zeros(n_rep, np.bool_), np.zeros(n_rep, np.float64))
    return cache, reqs, queues


def new_reqs(trace, full, prompt, out, arrive, session) -> Reqs:
    """Every request's state before its arrival. A disaggregated fleet keeps two, one per
    role, sharing the trace's arrays and `arrive` (sim_core.serving.handoff)."""
    R, A = trace.n_requests, trace.n_accesses
    nan = np.full(R, np.nan)
    return Reqs(trace.req_offsets, trace.blocks, full, prompt, out, arrive,
                np.zeros(R, np.int64), prompt.copy(), np.zeros(R, np.int64), np.zeros(R, np.int64),
                np.zeros(R, np.int64), np.zeros(max(A, 1), np.int8), np.full(R, -1, np.int64),
                np.zeros(R, np.int64), np.zeros(R, np.int64), nan.copy(), nan.copy(), nan.copy(),
                np.zeros(R, np.int32), np.zeros(R, np.int64), np.zeros(R), np.full(R, -1, np.int32),
                np.asarray(session, np.int64))
