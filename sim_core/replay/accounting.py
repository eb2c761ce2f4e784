"""What a replay counts, beyond its cache contents: the warm-up, partial last blocks,
token counts, windows of trace time, and the per-request sums the TTFT estimate and
windowed metrics are made of.

Engines report reuse in tokens: reused prompt tokens over prompt tokens. A request of n
blocks and t input tokens has n-1 full blocks and a last block of t - (n-1) T tokens
(T = block_tokens); `partial_blocks="skip"` never caches that last block when it is
partial (vLLM, SGLang with pages, LMCache and Dynamo hash and keep full blocks only):
the replay then runs on a view of the trace without those blocks (`skip_partial_view`),
and they count as recomputed accesses. Every cost model is affine in depth (sim_core.catalog.cost),
so a request's cost, saved cost and FLOPs follow from its number of blocks and the sum of
their depths.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import re

import numpy as np

from ..jit import njit
from ..traces.trace import Trace

PARTIAL_BLOCKS = ("cache", "skip")
_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(v, what: str) -> float:
    """Seconds from a number of seconds or a string such as '90s', '30m', '1h', '2d'."""
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        x = float(v)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h|d)?\s*", str(v))
        if not m:
            raise ValueError(f"{what} must be a duration such as 3600, '90s', '30m', '1h' or '2d', got {v!r}")
        x = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not x > 0 or math.isinf(x):
        raise ValueError(f"{what} must be a positive duration, got {v!r}")
    return x


def check_warmup(warmup, what: str = "warmup") -> None:
    """A warm-up is None, a fraction of the requests in [0, 1), or a duration ('30m')."""
    if isinstance(warmup, numbers.Real) and not isinstance(warmup, bool):
        if not 0 <= float(warmup) < 1:
            raise ValueError(f"{what} as a fraction of the requests must be in [0, 1), got {warmup!r}; "
                             f"give a duration as a string ('30m', '2h')")
    elif warmup is not None:
        duration_s(warmup, what)


def warmup_cut(arrival_s: np.ndarray, warmup) -> tuple[int, float]:
    """(first counted request, its arrival time) of a warm-up given as a fraction of the
    requests in [0, 1) or a duration of trace time from the first arrival (`arrival_s`:
    the full trace's arrival times)."""
    R = len(arrival_s)
    if warmup is None or (isinstance(warmup, numbers.Real) and not isinstance(warmup, bool) and warmup == 0):
        return 0, -math.inf
    check_warmup(warmup)
    if isinstance(warmup, numbers.Real) and not isinstance(warmup, bool):
        k = int(math.floor(float(warmup) * R))
    else:
        t_end = float(arrival_s[0]) + duration_s(warmup, "warmup") if R else 0.0
        k = int(np.searchsorted(arrival_s, t_end, side="left"))
        if k >= R:
            raise ValueError(f"warmup {warmup!r} covers the whole trace ({R} requests over "
                             f"{float(arrival_s[-1] - arrival_s[0]):.0f} s)")
    return k, (float(arrival_s[k]) if k < R else math.inf)


def count_from(trace: Trace, cut: tuple[int, float], exact: bool) -> int:
    """The first counted request of `trace`: the cut's own index on the trace it was
    taken on; on a sample, the first sampled request arriving at or after the cut."""
    if exact or cut[0] == 0:
        return cut[0]
    return int(np.searchsorted(trace.arrival_s, cut[1], side="left"))


@njit
def _drop_tails(offsets, blocks, depth, tail_depth):
    R = offsets.shape[0] - 1
    sampled = depth.shape[0] > 0
    keep = 0
    for r in range(R):
        for j in range(offsets[r], offsets[r + 1]):
            d = depth[j] if sampled else j - offsets[r]
            if d != tail_depth[r]:
                keep += 1
    out_off = np.zeros(R + 1, np.int64)
    out_b = np.empty(keep, np.int32)
    out_d = np.empty(keep if sampled else 0, np.int32)
    k = 0
    for r in range(R):
        for j in range(offsets[r], offsets[r + 1]):
            d = depth[j] if sampled else j - offsets[r]
            if d != tail_depth[r]:
                out_b[k] = blocks[j]
                if sampled:
                    out_d[k] = d
                k += 1
        out_off[r + 1] = k
    return out_off, out_b, out_d


def skip_partial_view(trace: Trace) -> Trace:
    """The trace without each request's partial last block (partial_blocks="skip"): the
    same requests, in the same order, with the same depths; cached on the trace."""
    if trace.tail_first:
        raise ValueError("skip_partial_view takes a trace in forward order")
    got = trace.__dict__.get("_skip_partial_view")
    if got is None or got[0] is not trace.blocks:
        tail_depth, _ = trace.partial_tails()
        off, blocks, depth = _drop_tails(trace.req_offsets, trace.blocks, trace.engine_depth(), tail_depth)
        n_unique = int(blocks.max()) + 1 if len(blocks) else 0  # ids above the last kept one are gone
        view = dataclasses.replace(trace, req_offsets=off, blocks=blocks,
                                   depth=depth if trace.depth is not None else None,
                                   meta=dict(trace.meta, partial_blocks="skip"),
                                   full_blocks=trace.request_lengths if trace.full_blocks is None
                                   else trace.full_blocks,
                                   source_ids=None if trace.source_ids is None else trace.source_ids[:n_unique])
        got = (trace.blocks, view)
        trace.__dict__["_skip_partial_view"] = got
    return got[1]


def affine(cost: np.ndarray, what: str) -> tuple[float, float]:
    """(a, b) with cost[d] = a + b d for every depth d (every built-in cost model)."""
    a = float(cost[0]) if len(cost) else 0.0
    b = float(cost[1] - cost[0]) if len(cost) > 1 else 0.0
    if not np.allclose(cost, a + b * np.arange(len(cost)), rtol=1e-9, atol=0.0):
        raise ValueError(f"{what}: the cost model is not affine in depth; windows and TTFT need one that is")
    return a, b


def windows_table(arrival_s: np.ndarray, first: int, t0: float, width_s: float, *, blocks: np.ndarray,
                  dsum_all: np.ndarray, prompt: np.ndarray, hbm: np.ndarray, served: np.ndarray,
                  dsum_served: np.ndarray, reused: np.ndarray, costs: dict) -> dict:
    """Per window of `width_s` seconds from t0, over requests first..R-1: accesses,
    HBM hits, served, prompt and reused tokens (sums), their ratios, and the compute
    savings of each cost model (costs: name -> (a, b))."""
    idx = np.floor((arrival_s[first:] - t0) / width_s).astype(np.int64)
    if len(idx) and idx.min() < 0:
        idx -= idx.min()
    n = int(idx.max()) + 1 if len(idx) else 0

    def tot(x):
        return np.bincount(idx, weights=x[first:].astype(np.float64), minlength=n)

    acc, h, sv, pt, ru = tot(blocks), tot(hbm), tot(served), tot(prompt), tot(reused)
    da, ds = tot(dsum_all), tot(dsum_served)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"start_s": [t0 + i * width_s for i in range(n)], "accesses": acc.astype(np.int64).tolist(),
               "hits": h.astype(np.int64).tolist(), "served": sv.astype(np.int64).tolist(),
               "prompt_tokens": pt.astype(np.int64).tolist(), "reused_tokens": ru.astype(np.int64).tolist(),
               "hit_ratio": (h / acc).tolist(), "served_ratio": (sv / acc).tolist(),
               "token_hit_ratio": (ru / pt).tolist(),
               "compute_savings": {m: ((a * sv + b * ds) / (a * acc + b * da)).tolist() for m, (a, b) in costs.items()}}
    return out
