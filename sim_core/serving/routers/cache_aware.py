"""cache_aware: SGLang's gateway router (sgl-model-gateway/src/policies/cache_aware.rs).
Load is the requests in flight the router counts per replica. When the fleet is
imbalanced (max - min > balance_abs and max > balance_rel x min) the least loaded replica
wins. Otherwise the replica whose approximate tree (the prompts this router sent it)
matches most of the prompt wins if that match exceeds cache_threshold of it, else the
least loaded one (the newest source; older versions took the smallest tree). Its tree
holds characters and is trimmed by size; here it holds blocks, and `ttl` (default: never)
ages entries out instead."""
from ...jit import hook_njit
from .spec import Param, RouterSpec
from .view import least, span

SPEC = RouterSpec(
    "cache_aware", "longest approximate prefix match unless the fleet is imbalanced, then least loaded",
    "sgl-project/sglang: sgl-model-gateway/src/policies/cache_aware.rs",
    {"cache_threshold": Param(0.3, 0.0, 1.0, "share of the prompt matched to follow the match"),
     "balance_abs": Param(64, 0, 1e9, "imbalanced when max - min in flight exceeds this ...", integer=True),
     "balance_rel": Param(1.5, 1.0, 1e9, "... and max exceeds this times min"),
     "ttl": Param(float("inf"), 0.0, float("inf"), "seconds an entry of the approximate tree counts")},
    approximate=True)


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    lo, hi = span(v.infl, n_rep)
    if hi - lo > v.p[1] and hi > v.p[2] * lo:
        return least(v.infl, n_rep)
    best = 0
    for q in range(1, n_rep):
        if v.ap[q] > v.ap[best] or (v.ap[q] == v.ap[best] and v.infl[q] < v.infl[best]):
            best = q
    blocks = (reqs.prompt[r] + bt - 1) // bt
    if v.ap[best] > v.p[0] * blocks:
        return best
    return least(v.infl, n_rep)
