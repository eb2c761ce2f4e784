"""RandomCompute: sampled compute-aware eviction (paper sec. 5.2).

On every eviction `samples` resident, non-pinned blocks are drawn uniformly at random
(with replacement) and the one with the lowest

    Score(i) = ComputeIntensity(i) / TimeSinceLastAccess(i)

is evicted: cheap (shallow) and long-idle blocks go first. Definitions (the paper leaves
them open, these are our choices):

  ComputeIntensity(i)    cost_per_depth[d] of the cost model the pass optimises, d being
                         i's depth at its latest access (hashes are prefix-chained, so in
                         practice d is a property of the block).
  TimeSinceLastAccess(i) now - (time of i's latest access), with `clock`:
                           "access"  (default) virtual time in block accesses: `now` is the
                                     access index the engine passes to evict (the current
                                     access in block mode, the request's first access in
                                     request mode); never 0 for an evictable block;
                           "seconds" trace.arrival_s of the requests; a block last used at
                                     the current arrival time has an infinite score (kept).
  ties                   lower score first, then the older latest access (smaller access
                         index), which is unique: runs are fully deterministic.

Parameters:
  samples  (default 64)  blocks sampled per eviction. When at most `samples` blocks are
           evictable the choice is exact (a scan), so samples >= capacity is the exact
           minimum score, i.e. exactly LRU under the uniform cost model (tested against
           libCacheSim's LRU); samples=1 is uniform random eviction (tested against
           libCacheSim's Random). 64 keeps the sampled minimum within the lowest ~1.5% of
           scores on average (Redis-style approximated eviction uses 5-16; the paper does
           not give its sample size) at a cost of 64 random loads per eviction.
  clock    "access" | "seconds", see above.

Randomness: a private xorshift64* generator seeded from ctx.seed (same seed, same run;
independent of numba's global generator and of other policies replayed in the same
thread): structures/rng.py.

Data structures: the sampling pool, structures/pool.py (shared with partial_node,
random_compute_session and s3fifo_compute). Every hook is O(1); evict is O(samples).
"""
from __future__ import annotations

from ..structures.pool import Pool, new_pool, pool_evict, pool_insert, touch
from .api import PolicySpec, register_hooks

# RandomCompute is its sampling pool: the state is the Pool and its functions are the hooks
register_hooks(Pool, touch, pool_insert, pool_evict)

SPEC = PolicySpec(
    "random_compute", new_pool,
    "RandomCompute (paper 5.2) - sample resident blocks, evict the lowest "
    "ComputeIntensity / TimeSinceLastAccess.",
    defaults={"samples": 64, "clock": "access"}, cost_aware=True,
    family="compute_aware",
    weight=13.0)
