"""PartialNode RandomCompute: compute-aware eviction in contiguous chunks (paper sec. 5.2).

The victim is chosen exactly as by RandomCompute (random_compute.py: `samples` uniform
draws, lowest ComputeIntensity / TimeSinceLastAccess). Instead of evicting that single
block, a contiguous chunk is dropped from the *beginning* of the victim's radix-tree
node, so the recomputation a later request needs is packed into few long holes instead
of many scattered ones (paper: 8.7x fewer holes per request, negligible savings loss).

Radix tree (precomputed from the trace in make_state):
  parent(b)  the block before b in the first request where b appears (-1 at depth 0).
             Hashes are prefix-chained, so this is a property of the id; for a trace that
             is not prefix-consistent the first appearance decides.
  node       a maximal non-branching chain: b continues its parent's node iff the parent
             has exactly one distinct child in the whole trace. Branch points are
             therefore those of the complete trace (a static tree), a slight look-ahead
             compared with an online radix tree, which only knows the branches seen so
             far and splits a node when a new branch appears; a node is not split where
             a request merely ends (the engine keeps no per-request tree).

Chunk: starting at the first resident block of the victim's node that is not pinned by
the current request (in request mode the current request's blocks form a prefix of any
node it passes through, and cannot be evicted), the chunk is the run of consecutive
resident, non-pinned blocks of that node, at most `chunk_blocks` long; it stops at the
first non-resident or pinned block or at the node's end. It need not contain the sampled
victim: the sampled block only selects the node (the paper drops "contiguous chunks of
blocks from the beginning of a node"). evict returns the chunk's first block and
evict_more the rest, so an eviction frees between 1 and `chunk_blocks` blocks.

Parameters:
  chunk_blocks (default 32)  32 blocks x 16 tokens = 512 tokens, one prefill chunk of a
               typical chunked-prefill token budget (vLLM/SGLang use 512-8192 tokens); the
               paper says the chunk should match the engine's contiguous batching budget
               without giving a number. For 512-token-block traces (Mooncake) set it to 1-4.
               Clamped to the capacity.
  samples, clock  as in RandomCompute.

Cost: finding the node's first resident block walks the node from a per-node hint that
only moves back when an earlier block of the node is re-inserted; walking over resident
blocks pinned by the current request is not cached.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit, njit
from ..structures.pool import Pool, new_pool, pool_insert, pool_pick, pool_remove, touch
from .api import PolicySpec, register_hooks


class PartialNodeState(NamedTuple):
    pool: Pool           # RandomCompute's sampling pool (structures/pool.py)
    # radix tree
    child: np.ndarray    # int32[U] next block of the same node, -1 at the node's end
    nstart: np.ndarray   # int32[U] first block of b's node
    nidx: np.ndarray     # int32[U] index of b in its node
    hint: np.ndarray     # int32[U] per node (indexed by its first block): no block before it is resident
    chunk: np.ndarray    # int64[3]: chunk_blocks, pending next block, pending remaining


@njit
def radix_nodes(offsets, blocks, n_unique, tail_first):
    """child, node start and index in node of every block (see module docstring).
    `tail_first`: requests are stored deepest block first (Trace.tail_first)."""
    parent = np.full(n_unique, -2, np.int64)
    order = np.empty(n_unique, np.int64)
    k = 0
    for r in range(offsets.shape[0] - 1):
        s = offsets[r]
        e = offsets[r + 1]
        for i in range(e - s):
            j = e - 1 - i if tail_first else s + i  # head first
            b = blocks[j]
            if parent[b] == -2:
                if tail_first:
                    parent[b] = blocks[j + 1] if j < e - 1 else -1
                else:
                    parent[b] = blocks[j - 1] if j > s else -1
                order[k] = b
                k += 1
    nchild = np.zeros(n_unique, np.int64)
    child = np.full(n_unique, -1, np.int32)
    for b in range(n_unique):
        p = parent[b]
        if p >= 0:
            nchild[p] += 1
            child[p] = b
    nstart = np.empty(n_unique, np.int32)
    nidx = np.zeros(n_unique, np.int32)
    for i in range(k):  # parents first appear before their children
        b = order[i]
        p = parent[b]
        if p >= 0 and nchild[p] == 1:
            nstart[b] = nstart[p]
            nidx[b] = nidx[p] + 1
        else:
            nstart[b] = b
    for b in range(n_unique):
        if nchild[b] != 1:
            child[b] = -1
    return child, nstart, nidx


def make_state(ctx) -> PartialNodeState:
    t = ctx.trace
    chunk = int(ctx.params.get("chunk_blocks", 32))
    if chunk < 1:
        raise ValueError(f"chunk_blocks must be >= 1, got {chunk}")
    chunk = min(chunk, max(1, int(ctx.capacity)))
    # the tree is the trace's (read-only in the hooks): built once per trace, not per capacity
    cache = t.__dict__.setdefault("_radix_nodes", {})
    if t.tail_first not in cache:
        cache[t.tail_first] = radix_nodes(t.req_offsets, t.blocks, t.n_unique, t.tail_first)
    child, nstart, nidx = cache[t.tail_first]
    return PartialNodeState(new_pool(ctx), child=child, nstart=nstart, nidx=nidx,
                            hint=nstart.copy(), chunk=np.array([chunk, -1, 0], np.int64))


@hook_njit
def on_hit(st, b, j, r, d):
    touch(st.pool, b, j, r, d)


@hook_njit
def on_insert(st, b, j, r, d):
    pool_insert(st.pool, b, j, r, d)
    h = st.nstart[b]
    if st.nidx[b] < st.nidx[st.hint[h]]:
        st.hint[h] = b


@hook_njit
def evict(st, j, r, pin):
    v = pool_pick(st.pool, j, r, pin)
    if v < 0:
        return -1
    pos = st.pool.pos
    h = st.nstart[v]
    c = st.hint[h]
    while c >= 0 and pos[c] < 0:  # skip the evicted head of the node for good
        c = st.child[c]
    if c < 0:  # cannot happen while the hint invariant holds; stay correct anyway
        c = v
    st.hint[h] = c
    while c >= 0 and (pos[c] < 0 or pin[c] == r):
        c = st.child[c]
    if c < 0:
        c = v
    pool_remove(st.pool, c)
    st.chunk[1] = st.child[c]
    st.chunk[2] = st.chunk[0] - 1
    return c


@hook_njit
def evict_more(st, j, r, pin, out):
    k = 0
    b = st.chunk[1]
    rem = st.chunk[2]
    while k < rem and b >= 0 and st.pool.pos[b] >= 0 and pin[b] != r:
        pool_remove(st.pool, b)
        out[k] = b
        k += 1
        b = st.child[b]
    st.chunk[1] = -1
    st.chunk[2] = 0
    return k


register_hooks(PartialNodeState, on_hit, on_insert, evict, evict_more)

SPEC = PolicySpec(
    "partial_node", make_state,
    "PartialNode RandomCompute (paper 5.2) - RandomCompute's victim picks a "
    "radix-tree node; a contiguous chunk is evicted from the node's beginning.",
    defaults={"samples": 64, "clock": "access", "chunk_blocks": 32}, cost_aware=True,
    family="compute_aware",
    weight=2.5,
    sample_floor=512)  # its error at the default floor: docs/sampling.md ("The floor")
