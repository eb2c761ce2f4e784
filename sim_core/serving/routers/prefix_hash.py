"""prefix_hash: consistent hashing of the prompt's first prefix_tokens with bounded load
(SGLang's gateway, sgl-model-gateway/src/policies/prefix_hash.rs: 256 tokens, load factor
1.25). Blocks are what this tool sees of a prompt, so the key is the ids of the blocks
covering the first prefix_tokens (at least one block); a prompt with no full block is
keyed by its first, private block, one shorter than a block by itself."""
import numpy as np

from ...jit import hook_njit
from .spec import Param, RouterSpec
from .view import bounded, mix, ring_pick

SPEC = RouterSpec("prefix_hash", "consistent hashing of the first prompt blocks with bounded load",
                  "sgl-project/sglang: sgl-model-gateway/src/policies/prefix_hash.rs",
                  {"prefix_tokens": Param(256, 1, 1e9, "tokens of the prompt's start that make the key", integer=True),
                   "load_factor": Param(1.25, 1.0, 1e9, "fall back when in flight > load_factor x (total + 1) / R")})


@hook_njit
def pick(v, queues, cache, reqs, r, t, n_rep, bt):
    s = reqs.offs[r]
    n = min(max((int(v.p[0]) + bt - 1) // bt, 1), max(reqs.full[r], 1), reqs.offs[r + 1] - s)
    h = np.uint64(0)
    for k in range(n):
        h = mix(h ^ np.uint64(reqs.blocks[s + k]))
    if n == 0:  # a prompt shorter than a block has none: its tokens are its own
        h = mix(np.uint64((1 << 41) + r))
    return bounded(v, ring_pick(v, np.int64(h >> np.uint64(1))), n_rep, v.p[1])
