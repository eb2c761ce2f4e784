"""Python entry point: replay a trace through a policy at one or more capacities."""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from .cost import cost_per_depth
from .engine import (BAD_VICTIM, EVICTIONS, FAILED, MAX_SIZE, N_COUNTERS, OVERSIZED, OVERSIZED_BLOCKS,
                     new_engine_state, replay_range)
from .onepass import percentile_from_hist
from .policies import PolicyContext, get_policy
from .result import Hits, Mode, Order, Result, make_result, sampled
from .trace import Trace

MODES = tuple(m.value for m in Mode)
HITS = tuple(h.value for h in Hits)

# a one-pass curve (sim_core.onepass) costs about this many single-capacity replays
ONE_PASS_COST = 2.0


def _enum(kind, name: str, value):
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(k.value for k in kind)}") from None
def depth_totals(trace: Trace) -> np.ndarray:
    """int64[max_depth]: number of accesses at each depth (policy independent)."""
    cached = getattr(trace, "_depth_totals", None)
    if cached is None and trace.depth is not None:  # a sample: its accesses' full-request depths
        cached = np.bincount(trace.depth).astype(np.int64)
        trace._depth_totals = cached
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


def as_capacity(c) -> int:
    """A capacity in blocks: a positive integer (or an integral float such as 512.0).
    Booleans, strings and fractional values are refused rather than cut."""
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Real):
        raise ValueError(f"capacity must be a whole number of blocks, got {c!r} ({type(c).__name__})")
    if isinstance(c, numbers.Integral):
        v = int(c)
    elif float(c).is_integer():
        v = int(c)
    else:
        raise ValueError(f"capacity must be a whole number of blocks, got {c!r}")
    if v < 1:
        raise ValueError(f"capacity must be at least one block, got {v}")
    return v


@dataclass(frozen=True)
class ReplayUnit:
    """Capacities answered by one piece of replay work. kind: "one_pass" (a stack
    policy's whole curve from one pass), "saturated" (every capacity that holds the
    whole trace: no policy evicts there, one replay serves them all) or "single"."""

    kind: str
    capacities: tuple[int, ...]

    @property
    def cost(self) -> float:  # in single-capacity replays of the trace
        return ONE_PASS_COST if self.kind == "one_pass" else 1.0


def replay_units(capacities: Sequence[int], *, saturation: int, max_request_blocks: int,
                 mode: str | Mode = Mode.REQUEST, one_pass: bool = False) -> list[ReplayUnit]:
    """How `simulate` batches capacities (the sweep's planner costs jobs with it).

    A one-pass curve covers every capacity from the largest request up in request mode
    (smaller ones evict the request's own blocks: replayed one by one); capacities at or
    above `saturation` (see `saturation_capacity`) share one replay."""
    caps = sorted(dict.fromkeys(int(c) for c in capacities))
    units = []
    if one_pass:
        lo = max_request_blocks if Mode(mode) is Mode.REQUEST else 1
        big = tuple(c for c in caps if c >= lo)
        if big:
            units.append(ReplayUnit("one_pass", big))
        caps = [c for c in caps if c < lo]
    sat = tuple(c for c in caps if c >= saturation)
    units += [ReplayUnit("single", (c,)) for c in caps if c < saturation]
    if sat:
        units.append(ReplayUnit("saturated", sat))
    return units


def simulate(
    trace: Trace,
    policy: str,
    capacities: int | Iterable[int],
    *,
    params: Mapping | None = None,
    mode: str | Mode = Mode.REQUEST,
    hits: str | Hits = Hits.BLOCK,
    order: str | Order | None = None,
    cost_models: Sequence[str] = ("uniform",),
    model=None,
    seed: int = 0,
    one_pass: bool = True,
    sample_rate: float | None = None,
    sample_seed: int = 0,
    sample_by: str | None = None,
    sample_force: bool = False,
    sample_floor: int | None = None,
) -> list[Result]:
    """Replay `trace` under `policy` at each capacity (in blocks); one `Result` per
    capacity, in the order given.

    `order` is the recency order of a request's blocks after it is served (request mode):
    "tail_first" (the default there) walks each request deepest block first, so a
    recency policy gives up a request's tail before its head, as vLLM (which frees a
    request's blocks in reverse) and SGLang (which evicts radix-tree leaves) do;
    "forward" walks it head first. Offline oracles see the future in prompt order either
    way. Block mode handles accesses one by one in trace order (libCacheSim): only
    "forward" (its default) applies there. `resolve_order` gives the default.

    `params` are the policy's parameters (its defaults fill the rest). A cost-unaware
    policy is replayed once and every cost model is read off the same pass; a cost-aware
    policy is replayed once per cost model, optimising that model. How capacities are
    batched into replays is `replay_units`: a stack policy (LRU) gets its curve from one
    pass when `one_pass` (exact; see sim_core.onepass), and capacities at or above
    `saturation_capacity(trace)` never evict, so they share one replay.

    `sample_rate` r < 1 runs a miniature simulation (sim_core.sample): the hash-sampled
    trace (by block, or by session: `sample_by`, default the policy's own) through caches
    scaled by r. A capacity whose scaled cache would fall below the sampling floor is
    sampled at a higher rate (`sim_core.sample.capacity_rates`); each Result says at
    which (`sample_rate`, 1 = exact). The floor is the policy's (`PolicySpec.sample_floor`,
    else the unit's); `sample_floor` overrides it. Prefix hits are undefined on a sample
    and refused.
    """
    mode = _enum(Mode, "mode", mode)
    hits = _enum(Hits, "hits", hits)
    order = resolve_order(mode, order)
    spec = get_policy(policy)
    params = dict(params or {})
    unknown = set(params) - set(spec.defaults)
    if unknown:
        raise ValueError(f"policy {spec.name!r} has no parameter(s) {sorted(unknown)}; "
                         f"valid: {sorted(spec.defaults) or 'none'}")
    params = {**spec.defaults, **params}
    if isinstance(capacities, (str, bytes)) or np.ndim(capacities) == 0:
        capacities = [capacities]
    caps = [as_capacity(c) for c in capacities]
    if not caps:
        raise ValueError("no capacities given")
    if trace.n_accesses == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    cost_models = list(cost_models)
    if not cost_models:
        raise ValueError("no cost models given")
    rate = check_rate(sample_rate)
    if spec.solve is not None:  # an oracle computed by a solver (sim_core.ilp): exact, never sampled
        if rate < 1.0 and sample_force:
            raise ValueError(f"policy {spec.name!r} is solved exactly over the whole trace; it cannot be sampled")
        return spec.solve(trace, caps, cost_models=cost_models, mode=mode, hits=hits, model=model, params=params)
    run = dict(spec=spec, mode=mode, hits=hits, order=order, cost_models=cost_models, model=model, params=params,
               seed=seed, one_pass=one_pass)
    if not spec.sample_ok and not sample_force:
        rate = 1.0
    if rate == 1.0:
        out = _exact(trace, caps, **run)
        return [out[c] for c in caps]
    if hits is Hits.PREFIX:
        raise ValueError("hits=prefix is not defined on a sample (a request's first miss is among the "
                         "blocks a sample drops); run it exactly (sample_rate=None)")
    from .sample import capacity_rates, sample_of, scaled_capacity

    by = sample_by or spec.sample_by
    rates = capacity_rates(trace, caps, rate, sample_seed, by, mode,
                           floor=spec.sample_floor if sample_floor is None else sample_floor)
    out: dict[int, Result] = {}
    for r in sorted(set(rates.values())):
        group = [c for c in caps if rates[c] == r]
        if r == 1.0:
            out.update(_exact(trace, group, **run))
            continue
        scaled = {c: scaled_capacity(c, r, by) for c in group}
        got = _exact(sample_of(trace, r, sample_seed, by), sorted(set(scaled.values())), **run)
        for c in group:
            out[c] = sampled(got[scaled[c]], r, c, trace.n_accesses)
    return [out[c] for c in caps]


def resolve_order(mode: str | Mode, order: str | Order | None) -> Order:
    """The replay order: `order`, or the mode's default (request: tail_first, block:
    forward). Block mode accepts only forward."""
    mode = _enum(Mode, "mode", mode)
    if order is None:
        return Order.TAIL_FIRST if mode is Mode.REQUEST else Order.FORWARD
    order = _enum(Order, "order", order)
    if mode is Mode.BLOCK and order is not Order.FORWARD:
        raise ValueError("order=tail_first needs mode=request: block mode handles every access on its own, "
                         "in trace order")
    return order


def check_rate(rate) -> float:
    if rate is None:
        return 1.0
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 < float(rate) <= 1:
        raise ValueError(f"sample_rate must be a number in (0, 1], got {rate!r}")
    return float(rate)


def _exact(trace: Trace, caps: Sequence[int], *, spec, mode: Mode, hits: Hits, order: Order, cost_models, model,
           params, seed: int, one_pass: bool) -> dict[int, Result]:
    """capacity -> Result of replaying `trace` itself."""
    totals = depth_totals(trace)
    walk = trace.tail_first_view() if order is Order.TAIL_FIRST else trace
    max_depth = len(totals)
    costs = {m: cost_per_depth(m, max_depth, trace.block_tokens, model) for m in cost_models}
    passes = cost_models if spec.cost_aware else [cost_models[0]]
    sat = saturation_capacity(trace)

    # capacity -> {pass cost model: (hit_by_depth, holes, counters)}
    raw: dict[int, dict] = {}
    for unit in replay_units(caps, saturation=sat, max_request_blocks=trace.max_request_blocks,
                             mode=mode, one_pass=spec.curve is not None and one_pass):
        if unit.kind == "one_pass":
            # saturated capacities are one bucket of the stack pass (each costs O(1) per access)
            buckets = sorted({min(c, sat) for c in unit.capacities})
            curve = _one_pass(spec, walk, buckets, mode, hits, max_depth)
            for c in unit.capacities:
                raw[c] = {passes[0]: curve[min(c, sat)]}
        else:
            at = sat if unit.kind == "saturated" else unit.capacities[0]
            per_model = {pm: _replay(spec, walk, at, mode, hits, costs[pm], params, seed, max_depth)
                         for pm in passes}
            for c in unit.capacities:
                raw[c] = per_model
    return {cap: _result(trace, cap, raw[cap], costs, totals, spec.cost_aware, passes[0]) for cap in set(caps)}


def _result(trace: Trace, cap: int, per_model: dict, costs: dict, totals, cost_aware: bool, first: str) -> Result:
    hbd, holes, counters = per_model[first]
    savings = {m: float((per_model[m if cost_aware else first][0] * cost).sum() / (totals * cost).sum())
               for m, cost in costs.items()}
    return make_result(cap, trace.n_accesses, hbd, _holes_stats(holes, trace.request_lengths),
                       {"evictions": counters[EVICTIONS], "oversized_requests": counters[OVERSIZED],
                        "oversized_blocks": counters[OVERSIZED_BLOCKS], "max_resident_blocks": counters[MAX_SIZE]},
                       savings)


def _replay(spec, trace: Trace, cap: int, mode: Mode, hits: Hits, cost, params: dict, seed: int,
            max_depth: int):
    """(hit_by_depth, holes per request, counters) of one replay at capacity `cap`."""
    ctx = PolicyContext(trace=trace, capacity=cap, mode=mode, cost_per_depth=cost, params=params, seed=seed)
    st = spec.make_state(ctx)
    es = new_engine_state(trace.n_unique, trace.n_requests, max_depth, cap)
    for r0, r1 in _segments(spec, trace.n_requests):
        replay_range(trace.req_offsets, trace.blocks, trace.engine_depth(), np.int64(cap), mode is Mode.REQUEST,
                     hits is Hits.PREFIX, st, es, r0, r1)
        if es.counters[FAILED]:
            raise RuntimeError(
                f"policy {spec.name} returned an invalid victim {es.counters[BAD_VICTIM]} at "
                f"capacity {cap} (not resident, or a block of the current request)")
        if spec.train is not None and r1 < trace.n_requests:
            spec.train(st, ctx, r1)
    return es.hit_by_depth, es.holes, es.counters


def _one_pass(spec, trace: Trace, caps: list[int], mode: Mode, hits: Hits, max_depth: int) -> dict:
    """{capacity: (hit_by_depth, holes_hist, counters)} from one stack pass."""
    arr = np.asarray(caps, dtype=np.int64)
    n_unique = trace.n_unique
    hist, holes_hist, resident = spec.curve(trace.req_offsets, trace.blocks, trace.engine_depth(), n_unique, arr,
                                  mode is Mode.REQUEST, hits is Hits.PREFIX, trace.tail_first, max_depth)
    cum = np.cumsum(hist, axis=0)
    cum_resident = np.cumsum(resident)
    out = {}
    for i, cap in enumerate(caps):
        hbd = cum[i]
        final = min(cap, n_unique)
        counters = np.zeros(N_COUNTERS, np.int64)
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
