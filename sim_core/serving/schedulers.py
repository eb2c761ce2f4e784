"""The engine schedulers the serving loop runs, behind one small interface.

A scheduler fills replica q's next step (queues.sr/sn/ns) from its waiting queue and
running list over the shared block pool (pool.py), says how long the step lasts under the
step-time model, and may act when the step ends. The loop calls these four functions with
SGLang's state `ss`, or None for vLLM's (a None argument prunes the other scheduler at
compile time: sim_core.serving.loop.run_serve):

    schedule(...)       -> requests in the step (0: nothing to run), -1 on a policy bug
    step_time(...)      -> (seconds, new prompt tokens, decodes)
    step_ending(...)    before the loop applies the step's tokens (sim_core.serving.loop)
    step_ended(...)     after, with the number of requests it finished

vllm    vLLM v1's scheduler (sched.py): mixed steps under one token budget
sglang  SGLang's (sched_sglang.py): prefill-only or decode-only passes, retraction
"""
from __future__ import annotations

import numpy as np

from ..jit import hook_njit
from . import sched, sched_sglang
from .sched_sglang import SchedState, new_sched_state

SCHEDULERS = ("vllm", "sglang")
# serve's int64 config array: vLLM's limits (0-7), then the scheduler and SGLang's budgets,
# then whether the replicas are a disaggregated fleet's decode pool
(CFG_MAX_TOKENS, CFG_MAX_SEQS, CFG_CHUNKED, CFG_THRESHOLD, CFG_WATERMARK, CFG_BT, CFG_WHOLE, CFG_CHECK,
 CFG_SCHED, CFG_CHUNK, CFG_MAX_PREFILL, CFG_CLIP, CFG_LPM, CFG_COMPAT, CFG_DECODE) = range(15)
N_CFG = 15

__all__ = ["N_CFG", "SCHEDULERS", "SchedState", "engine_cfg", "new_sched_state", "schedule", "step_ended",
           "step_ending", "step_time"]


def engine_cfg(eng, capacity: int, block_tokens: int, check: bool, decode: bool = False) -> np.ndarray:
    """An engine's (serving.engines.ServeEngine) configuration as the loop reads it: int64[N_CFG]."""
    return np.array([eng.max_num_batched_tokens, eng.max_num_seqs, int(eng.chunked_prefill),
                     eng.long_prefill_token_threshold, int(eng.watermark * capacity), block_tokens,
                     int(eng.admit_whole), int(check), SCHEDULERS.index(eng.scheduler), eng.chunked_prefill_size,
                     eng.max_prefill_tokens, eng.clip_max_new_tokens, int(eng.lpm), int(eng.dynamo_compat),
                     int(decode)], np.int64)


@hook_njit
def schedule(ss, st, cache, lo, reqs, queues, q, now, cfg):
    if ss is not None:
        return sched_sglang.schedule(st, cache, lo, reqs, queues, ss, q, now, cfg[CFG_MAX_SEQS], cfg[CFG_BT],
                                     cfg[CFG_CHUNK], cfg[CFG_MAX_PREFILL], cfg[CFG_CLIP], cfg[CFG_LPM] != 0,
                                     cfg[CFG_COMPAT] != 0)
    return sched.schedule(st, cache, lo, reqs, queues, q, now, cfg[CFG_MAX_TOKENS], cfg[CFG_MAX_SEQS],
                          cfg[CFG_CHUNKED] != 0, cfg[CFG_WHOLE] != 0, cfg[CFG_THRESHOLD], cfg[CFG_WATERMARK],
                          cfg[CFG_BT], cfg[CFG_DECODE] != 0)


@hook_njit
def step_time(ss, reqs, queues, lo, q, cfg, sm_kind, sm_p, px, py, db, dc, dm):
    if ss is not None:
        return sched_sglang.step_time(reqs, queues, ss, q, sm_kind, sm_p, px, py, db, dc, dm)
    # the lower tier's overlap flag, not the tier: step_time compiles once for every tier type
    return sched.step_time(reqs, queues, lo.overlap, q, sm_kind, sm_p, px, py, db, dc, dm)


@hook_njit
def step_ending(ss, cache, lo, reqs, queues, q, t, cfg):
    if ss is not None:
        sched_sglang.step_ending(cache, lo, reqs, queues, q, t, cfg[CFG_BT])


@hook_njit
def step_ended(ss, queues, q, finished, cfg):
    if ss is not None:
        sched_sglang.step_ended(ss, queues, q, finished, cfg[CFG_COMPAT] != 0)
