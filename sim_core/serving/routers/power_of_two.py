"""power_of_two: two distinct replicas drawn at random, the one with fewer requests in
flight (SGLang's gateway, sgl-model-gateway/src/policies/power_of_two.rs; it compares
token loads when its 5 s poll has them, else request counts, which the router keeps)."""
from ...jit import hook_njit
from .spec import RouterSpec
from .view import rand_below

SPEC = RouterSpec("power_of_two", "two random replicas, the one with fewer requests in flight",
                  "sgl-project/sglang: sgl-model-gateway/src/policies/power_of_two.rs")


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    a = rand_below(v, n_rep)
    b = rand_below(v, n_rep - 1)
    if b >= a:  # distinct: draw from the other R - 1
        b += 1
    return b if v.infl[b] < v.infl[a] else a
