"""least_loaded: the smallest waiting_weight x waiting + running, lowest index on ties.

vLLM's data-parallel balancer (vllm/v1/engine/core_client.py, DPLBAsyncMPClient) scores
each engine 4 x waiting + running from the counts its coordinator publishes every 100 ms
and bumps the chosen engine's waiting count at once; here the counts are the engines' own
at the moment of routing."""
from ...jit import hook_njit
from .spec import Param, RouterSpec

SPEC = RouterSpec("least_loaded", "fewest waiting (weighted) plus running requests",
                  "vllm-project/vllm: vllm/v1/engine/core_client.py (DPLBAsyncMPClient)",
                  {"waiting_weight": Param(4.0, 0.0, 1e6, "weight of a waiting request against a running one")})


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    w = v.p[0]
    best = 0
    load = w * queues.wn[0] + queues.nrun[0]
    for k in range(1, n_rep):
        lk = w * queues.wn[k] + queues.nrun[k]
        if lk < load:
            best = k
            load = lk
    return best
