"""kv_router: NVIDIA Dynamo's KV-aware router. Each replica's cost, in blocks:

    prefill_load_scale x max(0, (active prefill tokens + prompt tokens) / block_tokens
                                - overlap_weight x blocks of the prompt it holds
                                - host_weight x blocks its first lower tier continues them with
                                - disk_weight x blocks its second lower tier continues those with
                                - pool_weight x blocks the shared pool holds past its HBM prefix)
    + distinct blocks of its active requests, this one included + active_request_weight x active requests

Active prefill tokens are the uncached prompt tokens of the requests routed to it that have
not produced their first token; the overlap comes from its KV events (the exact view).
Lowest cost wins, ties broken at random; temperature > 0 samples instead, with
probability proportional to exp(-(cost - min) / ((max - min) x temperature)).
Defaults are Dynamo's (1, 1, 0, 0): lib/kv-router/src/scheduling/{selector/default.rs,
config.rs}. active_blocks weighs the active-blocks term (1); a disaggregated fleet's prefill
pool sets it to 0, as Dynamo turns router_track_active_blocks off there
(lib/mocker/src/replay/offline/extensions/kv_router/composition_disagg.rs). The tier
credits are Dynamo's too (KvRouterConfig in 1.6.1: host_cache_hit_weight 0.75,
disk_cache_hit_weight 0.25, shared_cache_multiplier unset; selector/default.rs adds
host and disk blocks that extend the device overlap and shared-cache blocks beyond it,
lib/kv-router/src/protocols.rs SharedCacheHits::hits_beyond). Ours: the pool's blocks count
as a run from the HBM prefix (Dynamo counts every hit beyond it), and the tiers are read as
they are, without event lag."""
import math

from ...jit import hook_njit
from .spec import Param, RouterSpec
from .view import rand_below

SPEC = RouterSpec(
    "kv_router", "Dynamo's cost: prefill blocks after the replica's cached prefix, plus its active blocks",
    "ai-dynamo/dynamo: lib/kv-router/src/scheduling/selector/default.rs",
    {"overlap_weight": Param(1.0, 0.0, 1e6, "credit per cached prefix block (overlap_score_credit)"),
     "prefill_load_scale": Param(1.0, 0.0, 1e6, "weight of the prefill term"),
     "active_request_weight": Param(0.0, 0.0, 1e6, "blocks charged per active request"),
     "temperature": Param(0.0, 0.0, 1e6, "0: lowest cost; > 0: softmax sampling over normalised costs"),
     "event_lag": Param(0.0, 0.0, 1e6, "seconds a KV event takes to reach the router"),
     "active_blocks": Param(1.0, 0.0, 1e6, "weight of the active-blocks term (0: router_track_active_blocks off, "
                                           "as Dynamo's prefill-pool router of a disaggregated fleet)"),
     "host_weight": Param(0.75, 0.0, 1e6, "credit per block a replica's first lower tier holds past its HBM prefix "
                          "(host_cache_hit_weight)"),
     "disk_weight": Param(0.25, 0.0, 1e6, "credit per block its second lower tier holds past those "
                          "(disk_cache_hit_weight)"),
     "pool_weight": Param(0.0, 0.0, 1e6, "credit per block the shared pool holds past its HBM prefix "
                          "(shared_cache_multiplier; 0 ignores the pool)")},
    tracks_blocks=True)


@hook_njit
def _cost(v, reqs, r, q, bt):
    s = reqs.offs[r]
    new = (reqs.prompt[r] + bt - 1) // bt - reqs.full[r]
    for k in range(reqs.full[r]):
        if v.bref[q, reqs.blocks[s + k]] == 0:
            new += 1
    prefill = max(0.0, (v.pf[q] + reqs.prompt[r]) / bt - v.p[0] * v.ov[q] - v.p[6] * v.hx[q] - v.p[7] * v.dx[q]
                  - v.p[8] * v.px[q])
    return v.p[1] * prefill + v.p[5] * (v.blk[q] + new) + v.p[2] * v.infl[q]


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    cost = v.sc
    lo = math.inf
    hi = -math.inf
    for q in range(n_rep):
        cost[q] = _cost(v, reqs, r, q, bt)
        lo = min(lo, cost[q])
        hi = max(hi, cost[q])
    if v.p[3] > 0.0:
        if hi == lo:
            return rand_below(v, n_rep)
        tot = 0.0
        for q in range(n_rep):
            cost[q] = math.exp(-(cost[q] - lo) / ((hi - lo) * v.p[3]))
            tot += cost[q]
        u = rand_below(v, 1 << 30) / float(1 << 30) * tot
        acc = 0.0
        for q in range(n_rep):
            acc += cost[q]
            if u < acc:
                return q
        return n_rep - 1
    best = 0
    ties = 0
    for q in range(n_rep):
        if cost[q] == lo:
            ties += 1
            if rand_below(v, ties) == 0:  # reservoir: each tied replica equally likely
                best = q
    return best
