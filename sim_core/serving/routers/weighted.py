"""weighted: llm-d's inference scheduler: the replica with the highest weighted sum of
scores, ties at random (llm-d-inference-scheduler, pkg/epp/.../scorer/*; weights of its
precise-prefix profile, deploy/config: prefix 2, KV 1, queue 1):
  prefix  blocks of the prompt the replica holds / the prompt's blocks (exact: KV events,
          the precise scorer; approximate: this router's history, the estimating one); with
          lower tiers, the blocks its own tiers continue that prefix with count tier_weight
          each (llm-d-kv-cache-manager's index keeps a device tier per pod entry and its
          longest-prefix scorer counts every tier alike: 1), and those a pool shared by every
          replica holds past it pool_weight each (ours: llm-d indexes pods, not a shared pool)
  queue   (most waiting - its waiting) / (most - fewest), 1 when all are equal
  kv      1 - its share of KV blocks in use"""
from ...jit import hook_njit
from ..state import C_CAP, C_USED
from .spec import Param, RouterSpec
from .view import rand_below, span

SPEC = RouterSpec(
    "weighted", "llm-d's scorer sum: prefix match, queue and KV-utilisation scores with weights",
    "llm-d/llm-d-inference-scheduler: pkg/epp/framework/plugins/scheduling/scorer/",
    {"prefix_weight": Param(2.0, 0.0, 1e6, "weight of the prefix score"),
     "kv_weight": Param(1.0, 0.0, 1e6, "weight of the KV-utilisation score"),
     "queue_weight": Param(1.0, 0.0, 1e6, "weight of the queue score"),
     "prefix_view": Param("exact", doc="exact (KV events) or approximate (routing history)",
                          choices=("exact", "approximate")),
     "ttl": Param(float("inf"), 0.0, float("inf"), "seconds an approximate entry counts"),
     "event_lag": Param(0.0, 0.0, 1e6, "seconds a KV event takes to reach the router (exact view)"),
     "tier_weight": Param(1.0, 0.0, 1e6, "a block a replica's own lower tiers hold past its prefix, against one in "
                          "HBM"),
     "pool_weight": Param(0.0, 0.0, 1e6, "a block the shared pool holds past its prefix (0 ignores the pool)")},
    approximate=True)


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    qlo, qhi = span(queues.wn, n_rep)
    blocks = max((reqs.prompt[r] + bt - 1) // bt, 1)
    best = 0
    top = -1.0
    ties = 0
    for q in range(n_rep):
        held = v.ov[q] if v.p[3] == 0.0 else v.ap[q]
        queue = 1.0 if qhi == qlo else (qhi - queues.wn[q]) / (qhi - qlo)
        kv = 1.0 - cache.c[q, C_USED] / max(cache.c[q, C_CAP], 1)
        s = v.p[0] * (held + v.p[6] * (v.hx[q] + v.dx[q]) + v.p[7] * v.px[q]) / blocks + v.p[1] * kv + v.p[2] * queue
        if s > top:
            top = s
            best = q
            ties = 1
        elif s == top:
            ties += 1
            if rand_below(v, ties) == 0:
                best = q
    return best
