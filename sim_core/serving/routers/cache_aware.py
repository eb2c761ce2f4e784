"""cache_aware: SGLang's gateway router (sgl-model-gateway/src/policies/cache_aware.rs).
Load is the requests in flight the router counts per replica. When the fleet is
imbalanced (max - min > balance_abs and max > balance_rel x min) the least loaded replica
wins. Otherwise the replica whose approximate tree (the prompts this router sent it)
matches most of the prompt wins if that match exceeds cache_threshold of it, else the
least loaded one (the newest source; older versions took the smallest tree). Its tree
holds characters and is trimmed by size; here it holds blocks, and `ttl` (default: never)
ages entries out instead. With a pool the replicas share, a replica's match also counts
pool_weight per block the pool holds past its tree's match (ours: SGLang's gateway sees no
cache state; a pool answers lookups for every replica alike)."""
from ...jit import hook_njit
from .spec import Param, RouterSpec
from .view import least, span

SPEC = RouterSpec(
    "cache_aware", "longest approximate prefix match unless the fleet is imbalanced, then least loaded",
    "sgl-project/sglang: sgl-model-gateway/src/policies/cache_aware.rs",
    {"cache_threshold": Param(0.3, 0.0, 1.0, "share of the prompt matched to follow the match"),
     "balance_abs": Param(64, 0, 1e9, "imbalanced when max - min in flight exceeds this ...", integer=True),
     "balance_rel": Param(1.5, 1.0, 1e9, "... and max exceeds this times min"),
     "ttl": Param(float("inf"), 0.0, float("inf"), "seconds an entry of the approximate tree counts"),
     "pool_weight": Param(0.0, 0.0, 1.0, "a block the shared pool holds past the tree's match, against a matched "
                          "one (0 ignores the pool)")},
    approximate=True)


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    lo, hi = span(v.infl, n_rep)
    if hi - lo > v.p[1] and hi > v.p[2] * lo:
        return least(v.infl, n_rep)
    best = 0
    w = v.p[4]
    for q in range(1, n_rep):
        a = v.ap[q] + w * v.px[q]
        b = v.ap[best] + w * v.px[best]
        if a > b or (a == b and v.infl[q] < v.infl[best]):
            best = q
    blocks = (reqs.prompt[r] + bt - 1) // bt
    if v.ap[best] + w * v.px[best] > v.p[0] * blocks:
        return best
    return least(v.infl, n_rep)
