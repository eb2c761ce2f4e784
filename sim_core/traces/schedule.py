"""Session concurrency as the only varied factor (paper appendix B).

The paper's concurrency study extracts a trace's multi-turn sessions, truncates them
where concurrency begins to collapse in a replay at concurrency 1024, and replays the
same requests at each target concurrency. :func:`steady_concurrency` builds such a
replay: sessions enter in the order they started in the trace, each keeps the exact
times between its own requests, and a new session starts as soon as one of the
`concurrency` running sessions ends (the AgentX schedule of paper sec. 4.6). Only the
interleaving of sessions changes with the concurrency, and a request-mode replay
depends on nothing else.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..jit import njit
from .trace import Trace
from .file import densify_in_place


def _sessions(trace: Trace) -> list[np.ndarray]:
    """Request indexes of each multi-turn session (>= 2 requests), in arrival order,
    sessions ordered by their first arrival."""
    s = np.asarray(trace.session, dtype=np.int64)
    idx = np.flatnonzero(s >= 0)
    idx = idx[np.argsort(s[idx], kind="stable")]  # by session, each in trace (= arrival) order
    cut = np.flatnonzero(np.diff(s[idx])) + 1
    groups = [g for g in np.split(idx, cut) if len(g) >= 2]
    groups.sort(key=lambda g: (trace.arrival_s[g[0]], g[0]))
    return groups


def _start_times(durations: np.ndarray, concurrency: int) -> np.ndarray:
    """List scheduling: each session starts when the earliest of `concurrency` slots
    frees, the sessions taken in order."""
    slots = [0.0] * concurrency
    start = np.empty(len(durations))
    for k, d in enumerate(durations):
        start[k] = heapq.heappop(slots)
        heapq.heappush(slots, start[k] + d)
    return start


@njit
def _gather(offsets, blocks, depth, req):
    """Blocks (and depths, if any) of requests `req`, in that order: (offsets, blocks,
    depths)."""
    lens = offsets[req + 1] - offsets[req]
    out_off = np.zeros(req.shape[0] + 1, np.int64)
    out_off[1:] = np.cumsum(lens)
    out = np.empty(out_off[-1], blocks.dtype)
    out_depth = np.empty(out_off[-1] if depth.shape[0] else 0, np.int32)
    for k in range(req.shape[0]):
        s = offsets[req[k]]
        for i in range(lens[k]):
            out[out_off[k] + i] = blocks[s + i]
            if depth.shape[0]:
                out_depth[out_off[k] + i] = depth[s + i]
    return out_off, out, out_depth


def steady_concurrency(trace: Trace, concurrency: int, *, truncate_at: int | None = 1024) -> Trace:
    """The trace's multi-turn sessions replayed with `concurrency` sessions always in
    flight (single-turn requests are left out).

    `truncate_at`: keep only each session's requests that arrive up to the moment
    concurrency begins to collapse (the last session's start, included) in the replay at
    that concurrency, so that every concurrency replays the same requests (paper
    appendix B); None keeps every request (the tail of the replay then runs below
    `concurrency`).
    """
    if concurrency < 1 or (truncate_at is not None and truncate_at < 1):
        raise ValueError("concurrency and truncate_at must be at least 1")
    if trace.tail_first:
        raise ValueError("steady_concurrency takes a trace in forward order, not a tail-first view")
    groups = _sessions(trace)
    if not groups:
        raise ValueError(f"trace {trace.name!r} has no multi-turn sessions (session ids >= 0 with 2+ requests)")
    t = np.asarray(trace.arrival_s, dtype=np.float64)
    first = t[[g[0] for g in groups]]
    dur = t[[g[-1] for g in groups]] - first
    req = np.concatenate(groups)
    sess = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    rel = t[req] - first[sess]  # time since the session's first request
    if truncate_at is not None:
        start = _start_times(dur, truncate_at)
        keep = start[sess] + rel <= start[-1]
        req, sess, rel = req[keep], sess[keep], rel[keep]
        dur = np.zeros(len(groups))
        np.maximum.at(dur, sess, rel)  # a truncated session frees its slot at its last kept request
    arrival = _start_times(dur, concurrency)[sess] + rel
    order = np.argsort(arrival, kind="stable")  # ties: the order sessions entered, then their own order
    req, arrival = req[order], arrival[order]
    depth = trace.depths() if trace.depth is not None else np.zeros(0, np.int32)
    offsets, blocks, depth = _gather(trace.req_offsets, trace.blocks, depth, req)
    densify_in_place(blocks, trace.n_unique)  # ids of the requests left out would leave holes
    return Trace(offsets, blocks, arrival, np.asarray(trace.session)[req], trace.input_tokens[req],
                 trace.output_tokens[req], block_tokens=trace.block_tokens, name=trace.name, source=trace.source,
                 meta=dict(trace.meta, concurrency=concurrency, truncate_at=truncate_at),
                 depth=depth if trace.depth is not None else None,
                 tool_wait_s=None if trace.tool_wait_s is None else trace.tool_wait_s[req])
