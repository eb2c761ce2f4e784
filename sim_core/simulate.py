"""Python entry point: replay a trace through a policy at one or more capacities."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .cost import cost_per_depth
from .engine import (BAD_VICTIM, EVICTIONS, FAILED, MAX_SIZE, OVERSIZED, OVERSIZED_BLOCKS,
                     new_engine_state, replay_range)
from .onepass import percentile_from_hist
from .policies import PolicyContext, get_policy
from .trace import Trace

MODES = ("request", "block")
HITS = ("block", "prefix")


def _check_choice(name: str, value: str, valid: Sequence[str]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def depth_totals(trace: Trace) -> np.ndarray:
    """int64[max_depth]: number of accesses at each depth (policy independent)."""
    cached = getattr(trace, "_depth_totals", None)
    if cached is None:
        # depth d occurs once in every request longer than d: a reverse cumulative count
        # of request lengths (O(requests), no per-access array at full scale)
        n_len = np.bincount(trace.request_lengths, minlength=max(trace.max_request_blocks, 1) + 1)
        cached = np.cumsum(n_len[::-1])[::-1][1:].astype(np.int64)
        trace._depth_totals = cached
    return cached


def saturation_capacity(trace: Trace) -> int:
    """The capacity from which no policy ever evicts: the cache then holds every block
    the trace has seen (and every request fits), so the replay is the same for every
    larger capacity and every policy - capacities at or above it are replayed once."""
    return max(trace.n_unique, trace.max_request_blocks, 1)


def simulate(
    trace: Trace,
    policy: str,
    capacities: int | Iterable[int],
    *,
    mode: str = "request",
    hits: str = "block",
    cost_models: Sequence[str] = ("uniform",),
    model=None,
    seed: int = 0,
    one_pass: bool = True,
    **policy_params,
) -> list[dict]:
    """Replay `trace` under `policy` at each capacity (in blocks).

    Returns one record per capacity with `capacity_blocks`, `hit_ratio`,
    `compute_savings` (cost model -> ratio), hole statistics and counters.
    A cost-unaware policy is replayed once and every cost model is read off the same
    pass; a cost-aware policy is replayed once per cost model, optimising that model.
    A stack policy (LRU) gets all capacities from one pass when `one_pass` (exact; see
    sim_core.onepass); capacities below the largest request are replayed one by one.
    Capacities at or above `saturation_capacity(trace)` never evict, so they share one
    replay.
    """
    _check_choice("mode", mode, MODES)
    _check_choice("hits", hits, HITS)
    spec = get_policy(policy)
    unknown = set(policy_params) - set(spec.defaults)
    if unknown:
        raise ValueError(f"policy {spec.name!r} has no parameter(s) {sorted(unknown)}; "
                         f"valid: {sorted(spec.defaults) or 'none'}")
    params = {**spec.defaults, **policy_params}
    caps = [int(capacities)] if np.isscalar(capacities) else [int(c) for c in capacities]
    if not caps:
        raise ValueError("no capacities given")
    for c in caps:
        if c < 1:
            raise ValueError(f"capacity must be at least one block, got {c}")
    if trace.n_accesses == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    cost_models = list(cost_models)
    if not cost_models:
        raise ValueError("no cost models given")

    totals = depth_totals(trace)
    max_depth = len(totals)
    costs = {m: cost_per_depth(m, max_depth, trace.block_tokens, model) for m in cost_models}
    passes = cost_models if spec.cost_aware else [cost_models[0]]

    sat = saturation_capacity(trace)
    results = {}
    if spec.curve is not None and one_pass:
        lo = trace.max_request_blocks if mode == "request" else 1
        # saturated capacities are one bucket of the stack pass (each costs O(1) per access)
        big = sorted({min(c, sat) for c in caps if c >= lo})
        if big:
            results.update(_one_pass(spec, trace, big, mode, hits, max_depth))

    saturated = None  # per-model results at `sat`, shared by every capacity >= sat
    out = []
    for cap in caps:
        # one stack pass covers this capacity (stack policies are cost-unaware)
        key = min(cap, sat)
        per_model = {passes[0]: results[key]} if key in results else {}
        if not per_model and cap >= sat:
            if saturated is None:
                saturated = {pm: _replay(spec, trace, sat, mode, hits, costs[pm], params, seed, max_depth)
                             for pm in passes}
            per_model = saturated
        for pm in passes if not per_model else ():
            per_model[pm] = _replay(spec, trace, cap, mode, hits, costs[pm], params, seed, max_depth)
        base = per_model[passes[0]]
        rec = _record(trace, cap, base, totals)
        rec["compute_savings"] = {
            m: float((per_model[m if spec.cost_aware else passes[0]][0] * costs[m]).sum()
                     / (totals * costs[m]).sum())
            for m in cost_models
        }
        rec.update(policy=spec.name, mode=mode, hit_semantics=hits, params=params)
        out.append(rec)
    return out


def _replay(spec, trace: Trace, cap: int, mode: str, hits: str, cost, params: dict, seed: int,
            max_depth: int):
    """(hit_by_depth, holes per request, counters) of one replay at capacity `cap`."""
    ctx = PolicyContext(trace=trace, capacity=cap, mode=mode, cost_per_depth=cost, params=params, seed=seed)
    st = spec.make_state(ctx)
    es = new_engine_state(trace.n_unique, trace.n_requests, max_depth, cap)
    for r0, r1 in _segments(spec, trace.n_requests):
        replay_range(trace.req_offsets, trace.blocks, np.int64(cap), mode == "request",
                     hits == "prefix", st, es, r0, r1)
        if es.counters[FAILED]:
            raise RuntimeError(
                f"policy {spec.name} returned an invalid victim {es.counters[BAD_VICTIM]} at "
                f"capacity {cap} (not resident, or a block of the current request)")
        if spec.train is not None and r1 < trace.n_requests:
            spec.train(st, ctx, r1)
    return es.hit_by_depth, es.holes, es.counters


def _one_pass(spec, trace: Trace, caps: list[int], mode: str, hits: str, max_depth: int) -> dict:
    """{capacity: (hit_by_depth, holes_hist, counters)} from one stack pass."""
    arr = np.asarray(caps, dtype=np.int64)
    hist, holes_hist, resident = spec.curve(trace.req_offsets, trace.blocks, trace.n_unique, arr,
                                  mode == "request", hits == "prefix", max_depth)
    cum = np.cumsum(hist, axis=0)
    cum_resident = np.cumsum(resident)
    out = {}
    for i, cap in enumerate(caps):
        hbd = cum[i]
        final = min(cap, trace.n_unique)
        counters = np.zeros(7, np.int64)
        counters[EVICTIONS] = (trace.n_accesses - int(cum_resident[i])) - final  # inserted - kept
        counters[MAX_SIZE] = final
        out[cap] = (hbd, HolesHistogram(holes_hist[i]), counters)
    return out


class HolesHistogram:
    """Holes-per-request distribution kept as a histogram (one-pass curves)."""

    def __init__(self, hist: np.ndarray):
        self.hist = hist


def _holes_stats(holes, lengths) -> dict:
    if isinstance(holes, HolesHistogram):
        h = holes.hist
        n = int(h.sum())
        vals = np.arange(len(h))
        total = int((h * vals).sum())
        nz = np.nonzero(h)[0]
        return {
            "holes_total": total,
            "holes_per_request_mean": total / n if n else 0.0,
            "holes_per_request_p50": percentile_from_hist(h, 50),
            "holes_per_request_p99": percentile_from_hist(h, 99),
            "holes_per_request_max": int(nz[-1]) if len(nz) else 0,
        }
    nonempty = holes[lengths > 0]
    if not len(nonempty):
        return {"holes_total": 0, "holes_per_request_mean": 0.0, "holes_per_request_p50": 0.0,
                "holes_per_request_p99": 0.0, "holes_per_request_max": 0}
    return {
        "holes_total": int(nonempty.sum()),
        "holes_per_request_mean": float(nonempty.mean()),
        "holes_per_request_p50": float(np.percentile(nonempty, 50)),
        "holes_per_request_p99": float(np.percentile(nonempty, 99)),
        "holes_per_request_max": int(nonempty.max()),
    }


def _segments(spec, n_requests: int):
    """Request ranges between training points of a learned policy (one range otherwise)."""
    step = int(spec.train_every or 0)
    if step <= 0:
        return [(0, n_requests)]
    return [(r, min(r + step, n_requests)) for r in range(0, n_requests, step)]


def _record(trace: Trace, cap: int, result, totals) -> dict:
    hbd, holes, counters = result
    n_hits = int(hbd.sum())
    n = trace.n_accesses
    misses = n - n_hits
    hs = _holes_stats(holes, trace.request_lengths)
    n_holes = hs["holes_total"]
    return {
        "capacity_blocks": cap,
        "accesses": n,
        "hits": n_hits,
        "hit_ratio": n_hits / n,
        "recomputed_blocks": misses,
        **hs,
        "hole_length_mean": misses / n_holes if n_holes else 0.0,
        "evictions": int(counters[EVICTIONS]),
        "oversized_requests": int(counters[OVERSIZED]),
        "oversized_blocks": int(counters[OVERSIZED_BLOCKS]),
        "max_resident_blocks": int(counters[MAX_SIZE]),
    }
