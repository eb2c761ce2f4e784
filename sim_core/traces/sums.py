"""Per-request sums of a trace: blocks, the sum of their depths and prompt tokens (every
cost model is affine in depth, so a request's cost follows from the first two), and what a
SampleSet keeps of them for the full trace it was sampled from."""
from __future__ import annotations

import numpy as np

from ..jit import njit
from .trace import Trace


def full_requests(trace) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(arrival_s, blocks, prompt tokens) per request of the full trace: of a Trace, or
    what a SampleSet kept of the trace it was made from (None if it kept nothing)."""
    if isinstance(trace, Trace):
        n, _, tokens = request_sums(trace)
        return trace.arrival_s, n, tokens
    return getattr(trace, "requests", None)


@njit
def _request_sums(offsets, depth, tail_depth, tail_tokens, block_tokens):
    R = offsets.shape[0] - 1
    dsum = np.zeros(R, np.int64)
    tokens = np.zeros(R, np.int64)
    sampled = depth.shape[0] > 0
    for r in range(R):
        ds = 0
        tk = 0
        for j in range(offsets[r], offsets[r + 1]):
            d = depth[j] if sampled else j - offsets[r]
            ds += d
            tk += tail_tokens[r] if d == tail_depth[r] else block_tokens
        dsum[r] = ds
        tokens[r] = tk
    return dsum, tokens


def request_sums(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(blocks, sum of block depths, prompt tokens) per request, int64[R]; cached. Prompt
    tokens: the blocks' tokens (the partial last block's own), or the request's
    input_tokens where they run past its blocks."""
    got = trace.__dict__.get("_request_sums")
    if got is None or got[0] is not trace.req_offsets:
        tail_depth, tail_tokens = trace.partial_tails()
        dsum, tokens = _request_sums(trace.req_offsets, trace.engine_depth(), tail_depth, tail_tokens,
                                     int(trace.block_tokens))
        if trace.depth is None and trace.full_blocks is None:
            # a file whose input length runs past its hashed blocks: those tokens are prompt
            # tokens no cache holds (prompt_tokens = the file's input lengths)
            tokens = np.maximum(tokens, trace.input_tokens)
        got = (trace.req_offsets, trace.request_lengths.astype(np.int64), dsum, tokens)
        trace.__dict__["_request_sums"] = got
    return got[1], got[2], got[3]
