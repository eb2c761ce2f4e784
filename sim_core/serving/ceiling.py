"""The fleet ceiling: the most prompt blocks any router and eviction policy can reuse.

The replicas' caches together never hold more than R x C distinct blocks, so no fleet
reuses more than Belady does over one pooled cache of R x C blocks, on the access
sequence of every request's full prompt blocks in arrival order, as long as each
engine touches its requests' blocks in that order (open loop, no per-step chunk cap).
With lower tiers C counts them too (a shared pool once: serve passes that capacity).
docs/fleet.md has the proof, its assumptions and two runs that leave them and exceed it.

`fleet_ceiling(ext, full, capacity_blocks)` -> (Belady hits, infinite-cache hits), in
blocks. Belady here is MIN with bypass: a missed block may stay out of the cache; when
the cache is full a block enters only if its next use is nearer than the farthest next
use held, which then leaves; a block never used again is never kept. For unit-size
blocks this maximises hits. One pass with a max-heap of next-use positions (structures.pairheap),
O(A log A) for A accesses.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..jit import njit
from ..structures.pairheap import heap_pop, heap_push



@njit
def _sequence(offsets, blocks, full, order):
    """The access sequence: each request's first full[r] blocks, requests in `order`."""
    total = 0
    for i in range(order.shape[0]):
        total += full[order[i]]
    seq = np.empty(total, np.int32)
    p = 0
    for i in range(order.shape[0]):
        r = order[i]
        s = offsets[r]
        for k in range(full[r]):
            seq[p] = blocks[s + k]
            p += 1
    return seq


@njit
def _ceiling(seq, n_ids, capacity):
    """(Belady-with-bypass hits at `capacity`, infinite-cache hits) over `seq`."""
    A = seq.shape[0]
    never = np.iinfo(np.int64).max
    nxt = np.empty(A, np.int64)
    last = np.full(n_ids, never, np.int64)
    for i in range(A - 1, -1, -1):
        b = seq[i]
        nxt[i] = last[b]
        last[b] = i
    distinct = 0
    for b in range(n_ids):
        if last[b] != never:
            distinct += 1
    # key[b]: the next-use position of block b while cached, -1 when not. The heap holds
    # next-use positions (distinct for distinct accesses, so a position names its block:
    # seq[position]). An entry goes stale when its position is reached (a hit) and is
    # then below every live entry, so the top is always live while anything is cached.
    key = np.full(n_ids, -1, np.int64)
    # a max-heap of next-use positions: the pair heap over negated positions
    neg = np.empty(A + 1, np.int64)
    heap = np.empty(A + 1, np.int64)
    hn = np.zeros(1, np.int64)
    held = 0
    hits = 0
    for i in range(A):
        b = seq[i]
        nu = nxt[i]
        if key[b] == i:  # cached since its previous access
            hits += 1
            if nu == never:
                key[b] = -1
                held -= 1
            else:
                key[b] = nu
                heap_push(neg, heap, hn, -nu, nu)
            continue
        if nu == never or capacity <= 0:
            continue  # bypass
        if held < capacity:
            key[b] = nu
            heap_push(neg, heap, hn, -nu, nu)
            held += 1
            continue
        while key[seq[heap[0]]] != heap[0]:  # (defensive: stale entries never reach the top)
            heap_pop(neg, heap, hn)
        far = heap[0]
        if far > nu:  # the farthest next use held is later than b's: b takes its place
            key[seq[far]] = -1
            heap_pop(neg, heap, hn)
            key[b] = nu
            heap_push(neg, heap, hn, -nu, nu)
    return hits, A - distinct


def fleet_ceiling(ext, full, capacity_blocks: int, *, order=None) -> tuple[int, int]:
    """(Belady hit blocks at `capacity_blocks`, infinite-cache hit blocks) over the
    trace's cacheable prompt blocks.

    `ext` is the trace as the engine sees it (sim_core.serving.engine_blocks: CSR
    `req_offsets`, dense int32 `blocks`); `full[r]` is the number of request r's leading
    blocks that are full prompt blocks (serve: min(request length, prompt // block_tokens)),
    the only ones any request can hit. The access sequence is those blocks of every
    request, requests in `order` (default: by arrival time, ties in trace order, as serve
    routes them). For a fleet of R replicas of C blocks pass capacity_blocks = R * C.
    Hits are blocks: multiply by block_tokens for tokens."""
    offs = np.asarray(ext.req_offsets, np.int64)
    blocks = np.asarray(ext.blocks)
    n = len(offs) - 1
    full = np.asarray(full)
    if full.shape != (n,) or (n and not np.issubdtype(full.dtype, np.integer)):
        raise ValueError(f"full must be an integer array of one count per request ({n}), got "
                         f"{full.dtype} of shape {full.shape}")
    full = full.astype(np.int64)
    lengths = np.diff(offs)
    bad = np.flatnonzero((full < 0) | (full > lengths))
    if len(bad):
        r = int(bad[0])
        raise ValueError(f"full[{r}] = {int(full[r])} is not between 0 and request {r}'s {int(lengths[r])} blocks")
    if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, numbers.Integral) or capacity_blocks < 0:
        raise ValueError(f"capacity_blocks must be an integer >= 0, got {capacity_blocks!r}")
    if order is None:
        order = np.argsort(np.asarray(ext.arrival_s), kind="stable")
    order = np.asarray(order, np.int64)
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError(f"order must be a permutation of the {n} requests")
    if n == 0 or not len(blocks):
        return 0, 0
    seq = _sequence(offs, blocks.astype(np.int32, copy=False), full, order)
    if not len(seq):
        return 0, 0
    if int(seq.min()) < 0:
        raise ValueError("block ids must be dense ids >= 0 (sim_core.serving.engine_blocks)")
    hits, inf = _ceiling(seq, int(seq.max()) + 1, np.int64(min(int(capacity_blocks), len(seq))))
    return int(hits), int(inf)
