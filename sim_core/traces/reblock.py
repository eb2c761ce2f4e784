"""Re-blocking: a trace of B-token blocks as a trace of (m * B)-token blocks, exactly, or
of (B / k)-token blocks, approximately (:func:`_split`).

Block size is a property of the deployment, not of the trace: the same traffic cached
by an engine with 64- or 512-token pages has other blocks. A coarse block is a chunk of
m consecutive fine blocks of a request, and its id is a function of the request's whole
fine prefix up to the chunk's end, so two requests share coarse block k exactly when
they share all fine blocks up to (k+1) * m (the coarse hashes are chained, as the fine
ones are). Concretely: the fine prefixes form a trie (node of prefix + [b] = a node
per distinct (node of prefix, b)), and a coarse block's id is the trie node where its
chunk ends. A request's partial last chunk (fewer than m fine blocks) stays a block of
the trace; it ends at a trie node of another depth than any full chunk, so it never
shares an id with one. ``input_tokens`` and everything per request is unchanged.

For prefix-chained fine ids (every format's hashes) the trie node of a prefix is its
last fine block, so this equals taking the fine id at each chunk's end; the trie makes
the result right for fine ids that are not chained too.
"""
from __future__ import annotations

import logging

import numpy as np
from numba import types
from numba.typed import Dict

from ..jit import njit
from .trace import Trace
from .file import remap_dense_ids

log = logging.getLogger("sim_core")


@njit
def _coarse_blocks(offsets, blocks, n_fine, m):
    """(coarse req_offsets, coarse ids as trie nodes 1..): see the module docstring."""
    n_req = offsets.shape[0] - 1
    out_offsets = np.zeros(n_req + 1, np.int64)
    for r in range(n_req):
        out_offsets[r + 1] = out_offsets[r] + (offsets[r + 1] - offsets[r] + m - 1) // m
    out = np.empty(out_offsets[n_req], np.int64)
    child = Dict.empty(key_type=types.int64, value_type=types.int64)
    n_nodes = 0  # node 0 is the empty prefix
    for r in range(n_req):
        node = 0
        w = out_offsets[r]
        s = offsets[r]
        e = offsets[r + 1]
        for j in range(s, e):
            key = node * n_fine + blocks[j]  # < 2^62: nodes <= accesses, ids < 2^31
            nxt = child.get(key, -1)
            if nxt < 0:
                n_nodes += 1
                nxt = n_nodes
                child[key] = nxt
            node = nxt
            if (j - s) % m == m - 1 or j == e - 1:
                out[w] = node
                w += 1
    return out_offsets, out


def chain_counts(offsets: np.ndarray, blocks: np.ndarray) -> dict:
    """How far ids are from prefix-chained: ids that follow more than one predecessor
    (the request start counts as one), ids seen at more than one depth. Ids are chained
    exactly when the first count is 0: an id with one predecessor has one whole prefix
    (by induction on its depth)."""
    n = len(blocks)
    ids = blocks.astype(np.int64)
    width = np.int64(int(ids.max()) + 2 if n else 1)  # keys below 2^62: ids < 2^31, depths < 2^31
    starts = np.zeros(n, bool)
    starts[offsets[:-1][offsets[:-1] < offsets[1:]]] = True
    prev = np.where(starts, -1, np.roll(ids, 1))
    depth = np.arange(n, dtype=np.int64) - np.repeat(offsets[:-1], np.diff(offsets))

    def ambiguous(other: np.ndarray) -> int:
        pairs = np.unique(other * width + ids + 1) if n else np.zeros(0, np.int64)
        return int((np.bincount(pairs % width) > 1).sum())

    return {"ids_after_several_prefixes": ambiguous(prev + 1), "ids_at_several_depths": ambiguous(depth)}


def chain_by_position(offsets: np.ndarray, blocks: np.ndarray) -> tuple[np.ndarray, int]:
    """(dense ids, their number) with every block named by its whole prefix: the trie
    node of (request prefix up to and including the block), as `_coarse_blocks` makes
    for m = 1. An id after a different prefix becomes a different block; for ids that
    are already prefix-chained this is a renaming (as many ids as before)."""
    n_fine = np.int64(int(blocks.max()) + 1 if len(blocks) else 1)
    _, nodes = _coarse_blocks(offsets, blocks.astype(np.int64), n_fine, np.int64(1))
    dense, ids = remap_dense_ids(nodes)
    return dense, len(ids)


def reblock(trace: Trace, block_tokens: int) -> Trace:
    """`trace` with blocks of `block_tokens` tokens: a multiple of ``trace.block_tokens``
    (exact: see the module docstring), or a divisor of it (:func:`_split`, an
    approximation, with a warning).

    Raises ValueError for a size that is neither, and for a sample or a tail-first view
    (their per-access depths belong to the file's blocks).
    """
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, (int, np.integer)):
        raise ValueError(f"block_tokens must be an integer, got {block_tokens!r}")
    fine = trace.block_tokens
    if block_tokens <= 0 or (block_tokens % fine and fine % block_tokens):
        raise ValueError(f"cannot re-block {trace.name!r} from {fine}-token blocks to {block_tokens}: "
                         f"the new block size must be a positive multiple of {fine} "
                         f"(e.g. {', '.join(str(fine * k) for k in (2, 4, 16, 32))}) or divide it")
    if trace.depth is not None or trace.tail_first:
        raise ValueError("re-block the full trace, before sampling or a tail-first view")
    if block_tokens < fine:
        return _split(trace, int(block_tokens))
    m = int(block_tokens) // fine
    if m == 1:
        return trace
    offsets, nodes = _coarse_blocks(trace.req_offsets, trace.blocks.astype(np.int64),
                                    np.int64(max(trace.n_unique, 1)), np.int64(m))
    blocks, _ = remap_dense_ids(nodes)
    return _with_blocks(trace, offsets, blocks, int(block_tokens))


def _with_blocks(trace: Trace, offsets: np.ndarray, blocks: np.ndarray, block_tokens: int) -> Trace:
    meta = dict(trace.meta, reblocked_from=trace.block_tokens)
    return Trace(offsets, blocks, trace.arrival_s.copy(), trace.session.copy(), trace.input_tokens.copy(),
                 trace.output_tokens.copy(), block_tokens=block_tokens, name=trace.name,
                 source=trace.source, dropped_requests=trace.dropped_requests, meta=meta,
                 tool_wait_s=trace.tool_wait_s)


def _split(trace: Trace, block_tokens: int) -> Trace:
    """Finer blocks, as Dynamo's replay splits a trace block: each block of the file
    becomes k = file size / `block_tokens` chained sub-blocks, sub-block j of block b
    named (b, j) (b names its whole prefix, so (b, j) does too). A request keeps the
    sub-blocks its input_tokens reach (at least one of its last block). What the file
    cannot say stays unseen: two prompts that share only the first part of a block share
    none of its sub-blocks here. Coarsening back to the file's size gives the trace back
    for requests whose last block is full (tests/test_reblock.py)."""
    k = trace.block_tokens // block_tokens
    n = trace.request_lengths
    reach = -(-trace.input_tokens // block_tokens)
    subs = np.where(n > 0, np.clip(reach, k * (n - 1) + 1, k * n), 0)
    offsets = np.zeros(len(subs) + 1, np.int64)
    np.cumsum(subs, out=offsets[1:])
    pos = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], subs)
    parent = trace.blocks[np.repeat(trace.req_offsets[:-1], subs) + pos // k].astype(np.int64)
    blocks, _ = remap_dense_ids(parent * k + pos % k)
    log.warning("%s: %d-token blocks split into %d chained %d-token sub-blocks (trace.block_tokens below the file's "
                "size): prompts that share only part of a %d-token block are not seen to share it",
                trace.name, trace.block_tokens, k, block_tokens, trace.block_tokens)
    return _with_blocks(trace, offsets, blocks, block_tokens)
