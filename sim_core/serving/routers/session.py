"""session: session affinity by consistent hashing of the session id (160 points per
replica on the ring), falling back to the least loaded replica when the session's replica
has more than load_factor x its share of the requests in flight. SGLang's consistent_hash
policy routes a session or user key on such a ring; the bound is the one its prefix_hash
policy applies (sgl-model-gateway/src/policies/{consistent_hash,prefix_hash}.rs). A request
without a session id is keyed by its first block (by itself, with no block)."""
from ...jit import hook_njit
from .spec import Param, RouterSpec
from .view import bounded, ring_pick

SPEC = RouterSpec("session", "consistent hashing of the session id with bounded load",
                  "sgl-project/sglang: sgl-model-gateway/src/policies/consistent_hash.rs",
                  {"load_factor": Param(1.25, 1.0, 1e9, "fall back when in flight > load_factor x (total + 1) / R")})


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    s = reqs.session[r]
    if s >= 0:
        key = s
    elif reqs.offs[r + 1] > reqs.offs[r]:
        key = (1 << 40) + reqs.blocks[reqs.offs[r]]
    else:  # a prompt shorter than a block has none: its tokens are its own
        key = (1 << 41) + r
    return bounded(v, ring_pick(v, key), n_rep, v.p[0])
