"""random: a uniform choice from a seeded generator (Vidur's and SGLang's random policy)."""
from ...jit import hook_njit
from .spec import RouterSpec
from .view import rand_below

SPEC = RouterSpec("random", "a seeded uniform choice", "sgl-project/sglang: sgl-model-gateway/src/policies/random.rs")


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    return rand_below(v, n_rep)
