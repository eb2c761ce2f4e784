"""Python entry point: replay a trace through a policy at one or more capacities."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from .replay.accounting import affine, count_from, skip_partial_view, windows_table
from .catalog.cost import cost_per_depth
from .catalog.counting import preset
from .replay.engine import (BAD_VICTIM, EVICTIONS, FAILED, HBM_HITS, MAX_SIZE, N_COUNTERS, OVERSIZED, OVERSIZED_BLOCKS, TOKENS,
                     new_accounting, new_engine_state, replay_tiered)
from .catalog.hardware import ttft_stats
from .tiers.hierarchy import NO_TIER, T_BAD_VICTIM, T_EVICTIONS, T_FAILED, T_SKIPPED, T_WRITES
from .tiers.spec import build_tier
from .structures.onepass import percentile_from_hist
from .config_checks import renamed
from .replay.options import Options, check_rate, enum_value, options, resolve_order, tier_rate
from .policies import PolicyContext, get_policy, resolve_params
from .result import Hits, Mode, Order, Result, make_result, sampled
from .traces.sample import capacity_rates, sample_of, scaled_capacity
from .tiers.rules import with_rules
from .traces.sums import request_sums
from .traces.trace import Trace
from .catalog.capacity import as_capacity, saturation_capacity
from .replay.units import depth_totals, replay_units


def simulate(
    trace: Trace,
    policy: str,
    capacity_blocks: int | Iterable[int] | None = None,
    *,
    params: Mapping | None = None,
    mode: str | Mode | None = None,
    hits: str | Hits | None = None,
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
    tiers: Sequence[Mapping] | None = None,
    counting: str | None = None,
    hierarchy: str | None = None,
    hbm_admit: str = "all",
    partial_blocks: str | None = None,
    warmup: float | str | None = None,
    window: float | str | None = None,
    hardware=None,
    overlap: bool = True,
    **deprecated,
) -> list[Result]:
    """Replay `trace` under `policy` at each HBM capacity in `capacity_blocks` (one or a
    list); one `Result` per capacity, in the order given.

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
    pass when `one_pass` (exact; see sim_core.structures.onepass), and capacities at or above
    `saturation_capacity(trace)` never evict, so they share one replay.

    `counting` (a counting preset of sim_core.catalog.counting: vllm, sglang, lmcache,
    mooncake, dynamo, paper) sets mode, hits, order, partial_blocks and warmup where they are not given
    (defaults without it: request, block, the mode's order, cache, none), and the rules of
    the lower tiers its hierarchy runs (sim_core.tiers.rules.COUNTING_HIERARCHY).

    Tiers (sim_core.tiers.hierarchy): `tiers` lists lower tiers under HBM, top down, each a
    mapping {"name", "capacity" (blocks), "policy", "write": on_evict | on_compute | on_hit,
    "inclusive", "admit": all | after_hits=N | doorkeeper | lookups=N | frequency=N[/Ts],
    "touch": loads | request, "promote": N, "params", "link": host | ssd, "bandwidth_bps"}.
    The rules a tier leaves out come from `hierarchy` (a name of
    sim_core.tiers.rules.HIERARCHIES: vllm_cpu, hicache_write_back, kvbm, victim, ...), else
    from the counting preset's, else vLLM's CPU offload. `hbm_admit` is HBM's own admission rule.

    Counting (sim_core.replay.accounting): `partial_blocks="skip"` never caches a request's
    partial last block; `warmup` (a fraction of the requests in [0, 1), or a duration
    such as "30m") replays the first requests without counting them; `window` (a
    duration) adds per-window metrics (`Result.windows`).

    `hardware` (a part name of sim_core.catalog.hardware.PARTS, or a mapping with overrides)
    adds the TTFT estimate (service time, no queueing), with loads overlapped under
    compute when `overlap`; `model` gives its FLOPs and KV bytes (default Qwen3-Coder-30B).
    Windows and TTFT need per-request counts, which a one-pass curve does not keep: the
    policy is then replayed capacity by capacity.

    `sample_rate` r < 1 runs a miniature simulation (sim_core.traces.sample): the hash-sampled
    trace (by block, or by session: `sample_by`, default the policy's own) through caches
    scaled by r. A capacity whose scaled cache (or a lower tier's) would fall below the
    sampling floor is sampled at a higher rate (`sim_core.traces.sample.capacity_rates`); each
    Result says at which (`sample_rate`, 1 = exact). The floor is the policy's
    (`PolicySpec.sample_floor`, else the unit's); `sample_floor` overrides it. Prefix hits
    are undefined on a sample and refused.

    Older names, accepted for one release with a DeprecationWarning: `hbm_capacities=` and
    `capacities=` (now `capacity_blocks`), `engine=` (now `counting`; `engine` is the
    serving preset of `serve`).
    """
    capacity_blocks, counting = renamed(deprecated, capacity_blocks=capacity_blocks, counting=counting)
    if counting is not None:
        try:
            got = preset(str(counting)).switches()
        except ValueError as e:
            raise ValueError(f"counting: {e}") from None
        mode, hits, order = (got[k] if v is None else v for k, v in (("mode", mode), ("hits", hits), ("order", order)))
        partial_blocks = got["partial_blocks"] if partial_blocks is None else partial_blocks
        warmup = got["warmup"] if warmup is None else warmup
    mode = enum_value(Mode, "mode", Mode.REQUEST if mode is None else mode)
    hits = enum_value(Hits, "hits", Hits.BLOCK if hits is None else hits)
    order = resolve_order(mode, order)
    partial_blocks = "cache" if partial_blocks is None else partial_blocks
    tiers = with_rules(tiers, hierarchy, counting)
    spec = get_policy(policy)
    params = resolve_params(spec, params)
    if capacity_blocks is None:
        raise ValueError("no capacities given (capacity_blocks)")
    if isinstance(capacity_blocks, (str, bytes)) or np.ndim(capacity_blocks) == 0:
        capacity_blocks = [capacity_blocks]
    caps = [as_capacity(c) for c in capacity_blocks]
    if not caps:
        raise ValueError("no capacities given")
    if trace.n_accesses == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    cost_models = list(cost_models)
    if not cost_models:
        raise ValueError("no cost models given")
    rate = check_rate(sample_rate)
    opts = options(trace, mode, tiers, hbm_admit, partial_blocks, warmup, window, hardware, overlap, model)
    if spec.bound_of:  # the hierarchy's bound: one flat cache of the combined capacity
        below = sum(t.capacity for t in opts.tiers)
        got = simulate(trace, spec.bound_of, [c + below for c in caps], params=params, mode=mode, hits=hits,
                       order=order, cost_models=cost_models, model=model, seed=seed, one_pass=one_pass,
                       sample_rate=sample_rate, sample_seed=sample_seed, sample_by=sample_by,
                       sample_force=sample_force, sample_floor=sample_floor, partial_blocks=partial_blocks,
                       warmup=warmup, window=window)
        return [dataclasses.replace(r, capacity_blocks=c) for c, r in zip(caps, got)]
    if spec.solve is not None:  # an oracle computed by a solver (sim_core.oracles.ilp): exact, never sampled
        if rate < 1.0 and sample_force:
            raise ValueError(f"policy {spec.name!r} is solved exactly over the whole trace; it cannot be sampled")
        if opts.changes_replay():
            raise ValueError(f"policy {spec.name!r} is solved over the whole trace as a flat cache: tiers, "
                             f"admission, partial_blocks=skip, warmup, windows and TTFT do not apply to it")
        return spec.solve(trace, caps, cost_models=cost_models, mode=mode, hits=hits, model=model, params=params)
    run = dict(spec=spec, mode=mode, hits=hits, order=order, cost_models=cost_models, model=model, params=params,
               seed=seed, one_pass=one_pass and opts.one_pass_ok(), opts=opts)
    if not spec.sample_ok and not sample_force:
        rate = 1.0
    if rate == 1.0:
        out = _exact(trace, caps, **run)
        return [out[c] for c in caps]
    if hits is Hits.PREFIX:
        raise ValueError("hits=prefix is not defined on a sample (a request's first miss is among the "
                         "blocks a sample drops); run it exactly (sample_rate=None)")

    by = sample_by or spec.sample_by
    floor = spec.sample_floor if sample_floor is None else sample_floor
    rates = capacity_rates(trace, caps, rate, sample_seed, by, mode, floor=floor)
    rates = {c: tier_rate(r, opts.tiers, by, floor) for c, r in rates.items()}
    out: dict[int, Result] = {}
    for r in sorted(set(rates.values())):
        group = [c for c in caps if rates[c] == r]
        if r == 1.0:
            out.update(_exact(trace, group, **run))
            continue
        scaled = {c: scaled_capacity(c, r, by) for c in group}
        tiers_r = [dataclasses.replace(t, capacity=scaled_capacity(t.capacity, r, by) if t.capacity else 0)
                   for t in opts.tiers]
        got = _exact(sample_of(trace, r, sample_seed, by), sorted(set(scaled.values())),
                     **{**run, "opts": dataclasses.replace(opts, tiers=tiers_r, rate=r)})
        for c in group:
            out[c] = sampled(got[scaled[c]], r, c, opts.accesses, opts.prompt_tokens)
    return [out[c] for c in caps]


def _exact(trace: Trace, caps: Sequence[int], *, spec, mode: Mode, hits: Hits, order: Order, cost_models, model,
           params, seed: int, one_pass: bool, opts: Options) -> dict[int, Result]:
    """capacity -> Result of replaying `trace` itself."""

    exact = opts.rate == 1.0
    first = count_from(trace, opts.cut, exact)
    base = skip_partial_view(trace) if opts.skip_partial else trace
    walk = base.tail_first_view() if order is Order.TAIL_FIRST else base
    totals = depth_totals(trace, first)
    max_depth = len(depth_totals(trace))
    costs = {m: cost_per_depth(m, max_depth, trace.block_tokens, model) for m in cost_models}
    passes = cost_models if spec.cost_aware else [cost_models[0]]
    sat = saturation_capacity(walk)

    # capacity -> {pass cost model: Replay}
    raw: dict[int, dict] = {}
    for unit in replay_units(caps, saturation=sat, max_request_blocks=walk.max_request_blocks,
                             mode=mode, one_pass=spec.curve is not None and one_pass):
        if unit.kind == "one_pass":
            # saturated capacities are one bucket of the stack pass (each costs O(1) per access)
            buckets = sorted({min(c, sat) for c in unit.capacities})
            curve = _one_pass(spec, walk, buckets, mode, hits, max_depth, first)
            for c in unit.capacities:
                raw[c] = {passes[0]: curve[min(c, sat)]}
        else:
            at = sat if unit.kind == "saturated" else unit.capacities[0]
            per_model = {pm: _replay(spec, walk, at, mode, hits, costs[pm], params, seed, max_depth, first, opts)
                         for pm in passes}
            for c in unit.capacities:
                raw[c] = per_model
    return {cap: _result(trace, cap, raw[cap], costs, totals, spec.cost_aware, passes[0], first, opts)
            for cap in set(caps)}


@dataclass
class Replay:
    """What one replay (or one capacity of a stack pass) hands to `_result`."""

    hit_by_depth: np.ndarray  # served blocks by depth, counted requests
    holes: object  # int32[R] per request, or a HolesHistogram
    counters: np.ndarray  # engine.N_COUNTERS layout
    acc: object = None  # engine.Accounting (per-request counts); None for a stack pass
    tiers: tuple = ()  # hierarchy.Tier states, top down


def _result(trace: Trace, cap: int, per_model: dict, costs: dict, totals, cost_aware: bool, first_model: str,
            first: int, opts: Options) -> Result:

    rp = per_model[first_model]
    savings = {m: float((per_model[m if cost_aware else first_model].hit_by_depth * cost).sum() / (totals * cost).sum())
               for m, cost in costs.items()}
    c = rp.counters
    lengths = trace.request_lengths[first:]
    holes = rp.holes if isinstance(rp.holes, HolesHistogram) else rp.holes[first:]
    accesses = int(lengths.sum())

    _, _, tokens = request_sums(trace)
    tier_fields = None
    if opts.tiers:
        block_bytes = opts.model.kv_bytes_per_block(trace.block_tokens)
        loads = rp.acc.req_tier[:, first:].sum(axis=1)
        tier_fields = {
            "tier_hits": {t.name: int(loads[i]) for i, t in enumerate(opts.tiers)},
            "tier_loaded_bytes": {t.name: int(loads[i]) * block_bytes for i, t in enumerate(opts.tiers)},
            "tier_written_bytes": {t.name: int(st.c[T_WRITES]) * block_bytes for t, st in zip(opts.tiers, rp.tiers)},
            "tier_evictions": {t.name: int(st.c[T_EVICTIONS]) for t, st in zip(opts.tiers, rp.tiers)},
            "tier_skipped_writes": {t.name: int(st.c[T_SKIPPED]) for t, st in zip(opts.tiers, rp.tiers)},
        }
    ttft = _ttft(trace, rp, costs, first, opts) if opts.hardware is not None and rp.acc is not None else None
    windows = _windows(trace, per_model, cost_aware, first_model, costs, first, opts) \
        if opts.window_s is not None and rp.acc is not None else None
    return make_result(cap, accesses, rp.hit_by_depth, _holes_stats(holes, lengths),
                       {"evictions": c[EVICTIONS], "oversized_requests": c[OVERSIZED],
                        "oversized_blocks": c[OVERSIZED_BLOCKS], "max_resident_blocks": c[MAX_SIZE]},
                       savings, hbm_hits=int(c[HBM_HITS]), tiers=tier_fields,
                       tokens=(int(tokens[first:].sum()), int(c[TOKENS])), ttft=ttft, warmup_requests=first,
                       windows=windows)


def _model_flops(trace: Trace, opts: Options) -> tuple[float, float]:

    return affine(cost_per_depth(opts.model.name, max(trace.max_request_blocks, 2), trace.block_tokens, opts.model),
                  "TTFT")


def _ttft(trace: Trace, rp: Replay, costs: dict, first: int, opts: Options) -> dict:

    a, b = _model_flops(trace, opts)
    n, dsum, _ = request_sums(trace)
    acc = rp.acc
    keep = slice(first, None)
    total = a * n[keep] + b * dsum[keep]
    saved = a * acc.req_served[keep] + b * acc.req_dsum[keep]
    block_bytes = float(opts.model.kv_bytes_per_block(trace.block_tokens))
    loaded = acc.req_tier[:len(opts.tiers), keep].astype(np.float64) * block_bytes
    bw = np.array([t.bandwidth_bps or opts.hardware.link_bps(t.link) for t in opts.tiers], np.float64)
    lat = np.array([t.latency_s for t in opts.tiers], np.float64)
    return ttft_stats(total, saved, loaded, bw, opts.hardware, opts.overlap, scale=1.0 / opts.rate,
                      percentiles=opts.rate == 1.0, latencies=lat)


def _windows(trace: Trace, per_model: dict, cost_aware: bool, first_model: str, costs: dict, first: int,
             opts: Options) -> dict:
    """Per-window metrics; a cost-aware policy's savings per window come from its replay
    under that cost model."""
    n, dsum, tokens = request_sums(trace)
    acc = per_model[first_model].acc
    out = windows_table(trace.arrival_s, first, opts.t0, opts.window_s, blocks=n, dsum_all=dsum, prompt=tokens,
                        hbm=acc.req_hbm, served=acc.req_served, dsum_served=acc.req_dsum, reused=acc.req_tok,
                        costs={m: affine(c, f"window ({m})") for m, c in costs.items()})
    if cost_aware:
        for m, c in costs.items():
            a = per_model[m].acc
            out["compute_savings"][m] = windows_table(
                trace.arrival_s, first, opts.t0, opts.window_s, blocks=n, dsum_all=dsum, prompt=tokens,
                hbm=a.req_hbm, served=a.req_served, dsum_served=a.req_dsum, reused=a.req_tok,
                costs={m: affine(c, f"window ({m})")})["compute_savings"][m]
    return out


def _replay(spec, trace: Trace, cap: int, mode: Mode, hits: Hits, cost, params: dict, seed: int,
            max_depth: int, first: int = 0, opts: Options | None = None) -> Replay:
    """One replay at capacity `cap` (HBM) through the lower tiers of `opts` (none by default)."""
    tier_specs, hbm_admit = (opts.tiers, opts.hbm_admit) if opts is not None else ((), "all")

    ctx = PolicyContext(trace=trace, capacity=cap, mode=mode, cost_per_depth=cost, params=params, seed=seed)
    st = spec.make_state(ctx)
    es = new_engine_state(trace.n_unique, trace.n_requests, max_depth, cap)
    tiers = tuple(build_tier(t, trace, cost, seed) for t in tier_specs)
    acc = new_accounting(trace, count_from=first, tiers=bool(tiers), hbm_admit=hbm_admit, capacity=cap)
    t1, t2, t3 = (tiers + (NO_TIER,) * 3)[:3]
    for r0, r1 in _segments(spec, trace.n_requests):
        replay_tiered(trace.req_offsets, trace.blocks, trace.engine_depth(), np.int64(cap), mode is Mode.REQUEST,
                      hits is Hits.PREFIX, st, es, r0, r1, acc, t1, t2, t3)
        if es.counters[FAILED]:
            raise RuntimeError(
                f"policy {spec.name} returned an invalid victim {es.counters[BAD_VICTIM]} at "
                f"capacity {cap} (not resident, or a block of the current request)")
        for spec_t, t in zip(tier_specs, tiers):
            if t.c[T_FAILED]:
                raise RuntimeError(f"tier {spec_t.name!r}: policy {spec_t.policy} returned an invalid victim "
                                   f"{t.c[T_BAD_VICTIM]} at capacity {spec_t.capacity}")
        if spec.train is not None and r1 < trace.n_requests:
            spec.train(st, ctx, r1)
    return Replay(es.hit_by_depth, es.holes, es.counters, acc, tiers)


def _one_pass(spec, trace: Trace, caps: list[int], mode: Mode, hits: Hits, max_depth: int, first: int) -> dict:
    """{capacity: Replay} from one stack pass (requests before `first` only warm it)."""

    arr = np.asarray(caps, dtype=np.int64)
    n_unique = trace.n_unique
    tail_depth, tail_tokens = trace.partial_tails()
    hist, holes_hist, resident, deficit = spec.curve(
        trace.req_offsets, trace.blocks, trace.engine_depth(), n_unique, arr, mode is Mode.REQUEST,
        hits is Hits.PREFIX, trace.tail_first, max_depth, first, tail_depth, tail_tokens, int(trace.block_tokens))
    cum = np.cumsum(hist, axis=0)
    cum_resident = np.cumsum(resident)
    cum_deficit = np.cumsum(deficit)
    counted = trace.n_accesses - int(trace.req_offsets[first])
    seen_before = int(np.unique(trace.blocks[:trace.req_offsets[first]]).size) if first else 0
    out = {}
    for i, cap in enumerate(caps):
        hbd = cum[i]
        counters = np.zeros(N_COUNTERS, np.int64)
        # inserted while counting - growth of the cache while counting (LRU stays full once full)
        grown = min(cap, n_unique) - min(cap, seen_before)
        counters[EVICTIONS] = (counted - int(cum_resident[i])) - grown
        counters[MAX_SIZE] = min(cap, n_unique)
        counters[HBM_HITS] = int(hbd.sum())
        counters[TOKENS] = int(hbd.sum()) * int(trace.block_tokens) - int(cum_deficit[i])
        out[cap] = Replay(hbd, HolesHistogram(holes_hist[i]), counters)
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


def tier_bound(trace: Trace, hbm_capacities, tiers, **kw) -> list[Result]:
    """Belady (MIN) over the combined capacity of HBM and its lower tiers, one Result per
    HBM capacity (capacity_blocks: the HBM capacity; every count is the flat cache's, with
    no TTFT): `simulate(trace, "tier_bound", ...)`.

    A bound, not a policy. With every block admitted to HBM, the blocks a hierarchy
    holds (HBM and every tier together) form a demand-fetched cache of at most that many
    blocks, so in block mode no hierarchy of those capacities serves more accesses than
    MIN does (Belady's optimality). In request mode it is the paper's Belady at the
    combined capacity, an offline heuristic under the residency constraint (policy=ilp
    gives the exact optimum of small traces). `kw` are simulate's other arguments."""
    return simulate(trace, "tier_bound", hbm_capacities, tiers=tiers, **kw)
