"""`plan(trace, slo, space, capacity_blocks, ...)`: the cheapest deployment that meets an SLO
on a trace at its load, the runner-up on each other GPU type, the front of cost against
the SLO's latency, and (with `check_load`) what the SLO costs at a heavier load.

One search per GPU type (search.py; independent, so they replay side by side on a runner)
finds each type's cheapest; the answer is the cheapest of those. A heavier load is one
search over every shape, each started where the lighter load's search left it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim_core.catalog.capacity import to_blocks
from sim_core.serving import served_lengths
from sim_core.serving.engines import as_engine

from . import bound, checks
from .evaluate import InProcess, Setting, drive
from .search import Lane, front, search
from .slo import as_slo
from .space import as_prices, as_space


@dataclass
class Plan:
    """A plan's answer. `best` and each of `candidates` are mappings of the candidate's axes
    with gpus, cost_per_hour, meets, margin and its ServeResult as `result`."""

    best: dict | None
    evaluated: int  # candidates replayed for this plan (each load's, journaled ones included)
    candidates: list  # every candidate replayed at the load, in the order asked for
    space_size: int
    load: float
    slo: object  # slo.Slo
    prices: object  # space.Prices
    space: object  # space.Space
    runners_up: dict = field(default_factory=dict)  # group (space.Candidate.group) -> its cheapest meeting one, or None
    closest: dict | None = None  # nothing meets: the candidate missing it by the least, with its misses
    front: list = field(default_factory=list)  # candidates on the cost / primary-latency front
    heavier: dict | None = None  # {"load", "best", "evaluated", "notes"} at check_load x the load
    pruned_by_bound: int = 0  # candidates below the prefill bound (never replayed)
    lanes: list = field(default_factory=list)  # search.Lane per shape at the load
    notes: list = field(default_factory=list)
    replays: int = 0  # serve() calls this call made (0 when everything was journaled)
    setting: object = None  # evaluate.Setting


def load_of(trace, arrival_speedup=None, request_rate=None) -> float:
    """The arrival speed-up: given, or the one that makes the trace's mean request rate
    `request_rate` (requests per second)."""
    if request_rate is not None:
        if arrival_speedup not in (None, 1, 1.0):
            raise ValueError("give the load once: arrival_speedup or request_rate")
        span = float(trace.arrival_s.max() - trace.arrival_s.min())
        if isinstance(request_rate, bool) or not isinstance(request_rate, (int, float)) or not request_rate > 0:
            raise ValueError(f"request_rate must be a positive number of requests per second, got {request_rate!r}")
        if span <= 0:
            raise ValueError(f"request_rate: trace {trace.name!r} arrives all at once; give arrival_speedup")
        return float(request_rate) / (trace.n_requests / span)
    s = 1.0 if arrival_speedup is None else arrival_speedup
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s < math.inf:
        raise ValueError(f"arrival_speedup must be a positive number, got {s!r}")
    return float(s)


@dataclass(frozen=True)
class Problem:
    """A plan's checked inputs: what `plan` searches, and what every candidate shares."""

    slo: object  # slo.Slo
    space: object  # space.Space
    prices: object  # space.Prices
    load: float
    setting: Setting
    check_load: float | None = None
    tolerance: float = 0.0

    def candidates(self) -> list:
        return [c for s in self.space.shapes() for c in self.space.lane(s)]

    def loads(self) -> list:
        return [self.load] + ([self.load * self.check_load] if self.check_load else [])


def problem(trace, slo, space=None, capacity_blocks=None, engine="dynamo", policy: str = "lru", *,
            arrival_speedup: float | None = None, request_rate: float | None = None, prices=None, model=None,
            step_model: str | None = None, backend: str | None = None, seed: int = 0,
            check_load: float | None = None, tolerance: float = 0.0) -> Problem:
    """plan()'s arguments checked (ValueError naming the field)."""
    slo = as_slo(slo)
    sp = as_space(space, policy=policy)
    pr = as_prices(prices, sp.gpu)
    load = load_of(trace, arrival_speedup, request_rate)
    eng = checks.engine_of(engine, step_model, backend)
    mdl = checks.model_of(model, eng)
    bt = int(trace.block_tokens)
    if capacity_blocks is None:
        raise ValueError("capacity_blocks is required: each replica's KV cache, in blocks or with a unit ('24GiB'), "
                         "or 'auto' for what each candidate's GPU memory leaves")
    cap = None  # auto: per candidate (Setting.capacity)
    if capacity_blocks != "auto":
        try:
            cap = to_blocks(capacity_blocks, mdl, bt)
        except ValueError as e:
            raise ValueError(f"capacity_blocks: {e}") from None
    prompt, out, _ = served_lengths(trace, as_engine(eng))
    need = -(-(prompt + out - 1) // bt)
    setting = Setting(engine=eng, capacity_blocks=cap, model=model, seed=int(seed), per_request=slo.per_request(),
                      block_tokens=bt)
    for s in sp.shapes():  # a bad shape fails here, naming its field, not halfway through a search
        c = sp.lane(s)[0]
        checks.shape(setting, c, bt)
        have = setting.capacity(c)
        if int(need.max()) > have:
            r = int(np.argmax(need))
            where = (f"capacity_blocks={cap}" if cap is not None else
                     f"capacity_blocks=auto gives {have} blocks per replica on {c.label()}, which")
            raise ValueError(f"{where} cannot hold request {r} ({int(need[r])} blocks of {bt} tokens with its "
                             f"output) in one replica: give at least {int(need[r])}"
                             + ("" if cap is not None else " (a larger GPU, a higher TP or engine."
                                "gpu_memory_utilization), or leave this GPU and TP out of the space"))
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    if check_load is not None and (isinstance(check_load, bool) or not isinstance(check_load, (int, float))
                                   or not 1 < check_load < math.inf):
        raise ValueError(f"check_load must be a multiple of the load above 1, such as 2, got {check_load!r}")
    return Problem(slo=slo, space=sp, prices=pr, load=load, setting=setting,
                   check_load=None if check_load is None else float(check_load), tolerance=float(tolerance))


def plan(trace, slo, space=None, capacity_blocks=None, engine="dynamo", policy: str = "lru", **kw) -> Plan:
    """The cheapest deployment of `space` that meets `slo` on `trace` at its load.

    `slo`: {"ttft_p99": "2s", "tpot_mean": "50ms", "goodput": 0.99, ...} (slo.py). `space`:
    {axis: list} over gpu, tp, prefill_replicas, replicas, router, policy (space.py; an
    axis left out is one value: h100_sxm, 1, 0 (aggregated), 1, round_robin, `policy`;
    with prefill_replicas P > 0, `replicas` counts the decode replicas). `capacity_blocks`:
    each replica's KV cache, in blocks or with a unit ("24GiB"), or "auto": what each
    candidate's GPU memory leaves at its TP (a model and a GPU the memory data knows; every
    GPU type and TP of the space gets its own). `engine`: a serving engine
    preset or {"preset": ..., overrides}. Keywords: the load, `arrival_speedup` (default 1)
    or a `request_rate` in requests per second; `prices` over conf/prices/default.yaml;
    `model` (a catalog name, or a Hugging Face id for measured steps); `step_model`
    ("measured": aiconfigurator-core's data for the model, each GPU, `backend` and TP);
    `seed`; `check_load`, also what the SLO costs at that multiple of the load;
    `tolerance`, the relative rise of an SLO value with more replicas still counted as
    monotone. Replays run in this process (the CLI runs them on the sweep's runner)."""
    return solve(trace, problem(trace, slo, space, capacity_blocks, engine, policy, **kw))


def solve(trace, pb: Problem, evaluator=None, known: dict | None = None) -> Plan:
    """Search `pb`; `evaluator` (default: this process) replays, `known` (replay key ->
    ServeResult, evaluate.Setting.key) holds results already had (the CLI's journal)."""
    slo, sp, pr, load, setting = pb.slo, pb.space, pb.prices, pb.load, pb.setting
    order = {c: i for i, c in enumerate(pb.candidates())}.__getitem__
    ev = evaluator or InProcess(trace, setting)
    known = {} if known is None else known
    lanes = _lanes(trace, sp, pr, setting, slo, load)
    groups = list(dict.fromkeys(ln.cands[0].group for ln in lanes))
    outs = drive([(load, search([ln for ln in lanes if ln.cands[0].group == g], slo, order=order,
                                tolerance=pb.tolerance)) for g in groups], ev, setting, known)
    seen = {c: r for o in outs for c, r in o.seen.items()}
    rank = lambda cr: (pr.per_hour(cr[0]), float(getattr(cr[1], slo.primary.field)), order(cr[0]))  # noqa: E731
    bests = [o.best for o in outs if o.best is not None]
    best = min(bests, key=rank) if bests else None
    p = Plan(best=None if best is None else row(best[0], best[1], slo, pr), evaluated=len(seen),
             candidates=[row(c, r, slo, pr) for c, r in seen.items()], space_size=sp.size, load=load, slo=slo,
             prices=pr, space=sp, runners_up={g: None if o.best is None else row(*o.best, slo, pr)
                                              for g, o in zip(groups, outs)},
             pruned_by_bound=sum(ln.bound_start for ln in lanes), lanes=lanes,
             notes=[n for o in outs for n in o.notes], setting=setting)
    p.front = [x[2] for x in front([(pr.per_hour(c), float(getattr(r, slo.primary.field)), row(c, r, slo, pr))
                                    for c, r in seen.items()])]
    if best is None and seen:
        c, r = min(seen.items(), key=lambda cr: (max(slo.ratios(cr[1]).values()), pr.per_hour(cr[0])))
        p.closest = {**row(c, r, slo, pr), "misses": slo.misses(r)}
    if pb.check_load is not None:
        p.heavier = _heavier(trace, pb, lanes, order, ev, known)
        p.evaluated += p.heavier["evaluated"]
    p.replays = getattr(ev, "replays", 0)
    return p


def _lanes(trace, sp, pr, setting: Setting, slo, load: float) -> list:
    """One lane per shape, starting at the prefill bound's fewest replicas. A disaggregated
    shape's prefill replicas are fixed: fewer than the bound's leave no candidate in its lane."""
    w = bound.work(trace, as_engine(setting.engine), load)
    rates: dict = {}
    lanes = []
    for s in sp.shapes():
        cands = sp.lane(s)
        d = setting.deployment(cands[0])
        cap = setting.capacity(cands[0])  # the same in the whole lane (its GPU and TP)
        key = repr((d.prefill, d.hardware, d.gpu, d.model, d.disaggregated, cap))  # what the prefill rate depends on
        if key not in rates:
            rates[key] = bound.prefill_rate(d, cap * int(trace.block_tokens))
        need = bound.min_replicas(w, slo, rates[key])
        if d.disaggregated:
            start = 0 if d.prefill_replicas >= need else len(cands)
        else:
            start = int(np.searchsorted([c.replicas for c in cands], need))
        lanes.append(Lane(shape=s, cands=cands, costs=[pr.per_hour(c) for c in cands], start=start, bound_start=start))
    return lanes


def _heavier(trace, pb: Problem, lanes: list, order, ev, known: dict) -> dict:
    """The cheapest deployment at check_load x the load: one search over every shape, each
    lane started at the lighter load's first candidate not known to fail (TTFT assumed not to
    fall as load rises; checked where an answer rests on it) and first tried at its answer
    there scaled by the factor."""
    slo, pr, setting, factor = pb.slo, pb.prices, pb.setting, pb.check_load
    load = pb.load
    heavy = _lanes(trace, pb.space, pr, setting, slo, load * factor)
    for h, ln in zip(heavy, lanes):
        h.start = max(h.bound_start, ln.lo)
        if ln.answer is not None:
            want = math.ceil(ln.cands[ln.answer].replicas * factor)
            h.hint = min(int(np.searchsorted([c.replicas for c in h.cands], want)), len(h.cands) - 1)
    # the lighter load's cheapest shapes first: the incumbent they find prunes the rest
    pairs = sorted(zip(heavy, lanes), key=lambda hl: (hl[1].answer is None, math.inf if hl[1].answer is None
                                                      else hl[1].costs[hl[1].answer]))
    heavy = [h for h, _ in pairs]
    (out,) = drive([(load * factor, search(heavy, slo, order=order, tolerance=pb.tolerance, ranked=True))], ev, setting,
                   known)
    return {"load": load * factor, "factor": factor, "evaluated": len(out.seen), "notes": out.notes,
            "best": None if out.best is None else row(*out.best, slo, pr), "lanes": heavy,
            "candidates": [row(c, r, slo, pr) for c, r in out.seen.items()]}


def row(c, r, slo, pr) -> dict:
    """A candidate as the answer names it: its axes, GPUs, cost, SLO values, margin, reuse
    and gap to the fleet ceiling, and its ServeResult."""
    return {**c.axes(), "group": c.group, "gpus": c.gpus, "cost_per_hour": pr.per_hour(c), "label": c.label(),
            "meets": slo.meets(r), "margin": slo.margin(r), **slo.values(r),
            "ttft_p99_s": r.ttft_p99_s, "tpot_mean_s": r.tpot_mean_s, "reuse_ratio": r.reuse_ratio,
            "capacity_blocks": r.capacity_blocks,
            "ceiling_reuse_ratio": r.ceiling_reuse_ratio,
            "first_reuse_ratio": r.first_reuse_ratio,
            # the ceiling bounds first-admission reuse; reuse_ratio also counts re-admissions after preemption
            "ceiling_gap_points": 100.0 * (r.ceiling_reuse_ratio - r.first_reuse_ratio), "result": r}


__all__ = ["Plan", "Problem", "plan", "problem", "solve"]
