"""round_robin: request i, in arrival order, to replica i mod R (Dynamo's replay default,
`--router-mode round_robin`)."""
from ...jit import hook_njit
from .spec import RouterSpec
from .view import RS_ROUTED

SPEC = RouterSpec("round_robin", "request i to replica i mod R", "ai-dynamo/dynamo: python -m dynamo.replay "
                  "--router-mode round_robin")


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    return v.rs[RS_ROUTED] % n_rep
