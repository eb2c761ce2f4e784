"""least_loaded: the smallest waiting_weight x waiting + running, lowest index on ties.

vLLM's data-parallel balancer (vllm/v1/engine/core_client.py, DPLBAsyncMPClient) scores
each engine 4 x waiting + running from the counts its coordinator publishes every 100 ms
and bumps the chosen engine's waiting count at once; here the counts are the engines' own
at the moment of routing."""
from ...jit import hook_njit
from .spec import Param, RouterSpec
from .view import least

SPEC = RouterSpec("least_loaded", "fewest waiting (weighted) plus running requests",
                  "vllm-project/vllm: vllm/v1/engine/core_client.py (DPLBAsyncMPClient)",
                  {"waiting_weight": Param(4.0, 0.0, 1e6, "weight of a waiting request against a running one")})


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    for k in range(n_rep):
        v.sc[k] = v.p[0] * queues.wn[k] + queues.nrun[k]
    return least(v.sc, n_rep)
