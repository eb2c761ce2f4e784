"""A sweep as docs/concepts.md tells it: configure -> load -> plan -> run -> record.

Each step is a function over one `Study` (the record step's are in sweep/record.py).
Nothing is recorded before `plan` has found what the tracking store and the journal
already hold, and every finished job goes to the journal before MLflow (sweep.delivery)
sees it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sim_core import Hits, Mode, get_policy, saturation_capacity
from sim_core.digest import source_digest, trace_digest
from sim_core.traces.sample import SampleSet, auto_rate

from . import derived, fleet, size, traces, weeks
from .config import ConfigError
from .curves import Curve
from .journal import JobTime, Journal, Point
from .keys import CurveIdentity
from .plan import (counted, format_plan, sampled_scale, hbm_warning, make_plan, oversized_warnings, pool_count,
                   resolve_capacities, resolve_pools, without_sessions)
from .progress import Progress
from .report.families import pool_parts
from .spec import PolicyChoice, apply_counting, resolve
from .store import check_reachable, default_uri
from .tracking import REFERENCE

log = logging.getLogger("sweep")


@dataclass
class Study:
    cfg: Any
    overrides: list[str]
    trace_choice: str
    spec: Any = None  # sweep.spec.SweepSpec
    uri: str | None = None  # None: offline (journal only)
    journal: Any = None  # sweep.journal.Journal
    trace: Any = None
    caps: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # said at the start, in the Description and the report
    views: dict = field(default_factory=dict)  # cost model -> its MLflow view's address (sweep.views)
    cap_notes: list = field(default_factory=list)
    curves: list = field(default_factory=list)  # curves.Curve
    references: dict = field(default_factory=dict)  # (cost model, pool) -> LRU curves.Curve (*_vs_lru_* metrics)
    jobs: list = field(default_factory=list)
    tracker: Any = None
    delivery: Any = None
    status: str = "FAILED"
    n_failed: int = 0
    replay_scale: Any = None  # capacity blocks -> relative replay cost (sampling), set by planning
    mirrors: list = field(default_factory=list)  # (target, source) curves: sweep.derived
    pools: list = field(default_factory=lambda: [("", ())])  # (label, tier dicts): sweep.plan.resolve_pools
    variants: list = field(default_factory=list)  # spec.PolicyChoice per (policy, pool)
    work: dict = field(default_factory=dict)  # progress.Progress.work() of the jobs run
    fleet: Any = None  # sweep.fleet.Fleet: serve() under load instead of cache replays (fleet=...)

    @property
    def experiment(self) -> str:
        return traces.experiment_name(self.trace, self.cfg.tracking.get("experiment"))


# ---------------------------------------------------------------------- configure
def configure(cfg, overrides: list[str], trace_choice: str, policy_choice: str) -> Study:
    """Everything that can be checked without work; raises ConfigError."""
    st = Study(cfg=cfg, overrides=overrides, trace_choice=trace_choice)
    note = apply_counting(cfg, overrides)
    if note:
        log.info("%s", note)
    st.spec = resolve(cfg, policy_choice)
    st.fleet, st.spec = fleet.setup(cfg, st.spec, overrides)  # fleet=...: serving under load
    traces.check_trace_config(cfg.trace, trace_choice)
    tc = cfg.tracking
    if OmegaConf.is_missing(tc, "uri"):
        raise ConfigError("tracking=server needs tracking.uri=http://host:5000")
    if OmegaConf.is_missing(cfg.cluster, "address"):
        raise ConfigError("cluster=ray needs cluster.address=<head>:6379 (the head node's GCS address; auto on a cluster node)")
    offline = bool(tc.get("offline", False))
    st.uri = None if offline else (str(tc.uri) if tc.get("uri") else default_uri())
    st.journal = Journal(Path(str(tc.get("journal") or "kvsweep-journal.jsonl")).expanduser().resolve())
    for note in st.spec.notes:
        log.info("%s", note)
    if st.uri is not None and not cfg.sweep.get("dry_run"):
        check_reachable(st.uri)  # a dead server fails here, within seconds, before any work
    return st


# ---------------------------------------------------------------------- load
def load(st: Study) -> None:
    st.trace = traces.load(st.cfg.trace, st.trace_choice)  # trace.weeks > 1: the first week
    st.spec = without_sessions(st.spec, st.trace)  # session-level policies on a trace without sessions
    st.caps, st.cap_notes = (fleet.capacities(st.fleet, st.spec.capacity_sizes, st.spec.model, st.trace.block_tokens)
                             if st.fleet else resolve_capacities(st.spec.capacity_sizes, st.spec.model,
                                                                 st.trace.block_tokens))
    st.pools, pool_notes = resolve_pools(st.spec.tiers, st.spec.model, st.trace.block_tokens)
    for note in st.cap_notes + pool_notes:
        log.info("capacity: %s", note)
    _resolve_sampling(st)
    _join_weeks(st)
    st.variants = fleet.variants(st.spec.policies, st.fleet, st.pools) if st.fleet else variants(st.spec, st.pools)
    over = hbm_warning(st.caps, st.spec.hardware)
    if over:
        st.warnings.append(over)
        log.warning("%s", over)
    if st.spec.tiers:
        log.info("tier=%s with the rules of %s (sim_core.tiers.rules): %s x %s (%s)", st.spec.tier_name,
                 st.spec.tier_rules, pool_count(st.pools),
                 counted(len(st.caps), "HBM capacity", "HBM capacities"), ", ".join(lab for lab, _ in st.pools))
    t = st.trace
    log.info("trace %s (%s%s): %d requests, %d block accesses, %d unique %d-token blocks",
             t.name, t.source, f", {traces.weeks(st.cfg.trace)} weeks" if traces.weeks(st.cfg.trace) > 1 else "",
             t.n_requests, t.n_accesses, t.n_unique, t.block_tokens)
    if st.fleet is not None:  # every request must fit a replica's KV cache; nothing saturates a queue
        return fleet.check_capacities(t, st.caps, st.fleet)
    for w in oversized_warnings(st.caps, t.request_lengths, st.spec.mode):
        log.warning("%s", w)
    sat = saturation_capacity(t)
    n_sat = sum(1 for c in st.caps if c.blocks >= sat)
    if n_sat > 1:
        log.info("%d of %d capacities hold the whole trace (>= %d blocks): no policy evicts there, "
                 "so each curve replays them once", n_sat, len(st.caps), sat)
    check_policies(st)


def variants(sp, pools) -> list:
    """Every policy once per pool size (a flat sweep: the policies themselves). A stack
    policy's one-pass curve models no tiers, admission, windows or TTFT, so it replays
    each capacity then; a policy solved over the whole trace runs a flat cache only."""
    flat = not sp.tiers and not sp.counting_key(preset=False)  # a preset's name replays nothing
    if not flat:
        solved = [p.name for p in sp.policies if get_policy(p.name).solve is not None]
        if solved:
            raise ConfigError(f"{', '.join(solved)} solve a flat cache over the whole trace: drop them from the "
                              "policy list to sweep tiers, admission, partial_blocks=skip, warmup, windows or TTFT")
    if flat:
        return list(sp.policies)
    out, sizes = [], set()
    for label, tiers in pools:
        size = pool_parts(label)[0]
        for p in sp.policies:
            if not get_policy(p.name).bound_of:
                out.append(replace(p, pool=label, tiers=tiers, one_pass=False))
            elif size not in sizes:  # a bound depends on the pool's sizes only, not on its modes
                out.append(replace(p, pool=size, tiers=tiers, one_pass=False))
        sizes.add(size)
    return out


def check_policies(st: Study) -> None:
    """A policy's own pre-flight check on this trace (the ILP's size limit), before any
    work: a refusal is bad input (exit status 2), not a failed job."""
    for p in st.spec.policies:
        spec = get_policy(p.name)
        if spec.check is None:
            continue
        try:
            spec.check(st.trace, [c.blocks for c in st.caps], mode=str(st.spec.mode), hits=str(st.spec.hits),
                       params=p.params)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _resolve_sampling(st: Study) -> None:
    """sim.sample_rate=auto picks the rate from the trace's size; under sampling,
    policy=all skips the policies that cannot be sampled (they would replay the whole
    trace exactly; named explicitly, they do)."""
    sp = st.spec
    if sp.sample_auto:
        k = traces.weeks(st.cfg.trace)
        n = st.trace.n_accesses * k  # the other weeks are about the size of the first
        rate = auto_rate(n, k)
        if rate is not None and sp.hits is Hits.PREFIX:
            raise ConfigError(f"sim.sample_rate=auto would sample this trace ({n} block accesses) "
                              "but sim.hits=prefix is not defined on a sample: set sim.sample_rate=null to replay "
                              "it exactly")
        log.info("sim.sample_rate=auto: %s", "exact replay (the trace is small)" if rate is None else
                 f"sampled replay at r={rate:g} (about {n * rate / 1e6:.1f}M of "
                 f"{'about ' if k > 1 else ''}{n / 1e6:.0f}M block accesses; sim.sample_rate=null replays exactly)")
        st.spec = sp = replace(sp, sample_rate=rate)
    if sp.sample_rate is not None and sp.selected_all:
        exact = sp.exact_policies()
        if exact:
            log.info("policy=all under sampled replay skips %s (its sampled error misses the target and an "
                     "exact replay of this trace is slow; name it in policy=[...] to run it exactly)",
                     ", ".join(exact))
            st.spec = replace(sp, policies=[p for p in sp.policies if p.name not in exact])
            if not st.spec.policies:
                raise ConfigError("no policy left to run under sampled replay")


def _join_weeks(st: Study) -> None:
    """trace.weeks=k > 1: the k weeks back to back in place of the first (sweep/weeks.py).
    Sampled, only their samples are kept, built one week at a time; so every policy
    must be sampled and every capacity's scaled cache reachable below rate 1."""

    k, sp = traces.weeks(st.cfg.trace), st.spec
    if k == 1:
        return
    make = traces.week_maker(st.cfg.trace)
    held = [st.trace]  # week 0, handed over so that it is dropped once sampled
    st.trace = None

    def week(w: int):
        return held.pop() if w == 0 else make(w)

    if sp.sample_rate is None:
        log.info("trace.weeks=%d, exact replay: the weeks are built as one trace (%d times one week's memory)", k, k)
        st.trace = weeks.exact(week, k)
        return
    exact = sp.exact_policies()
    if exact:
        raise ConfigError(f"trace.weeks={k} under sampled replay keeps only the weeks' samples, but "
                          f"{', '.join(exact)} replay exactly: leave them out of policy=[...], set trace.weeks=1, "
                          f"or sim.sample_rate=null to replay every week exactly")
    rules = [(get_policy(p.name).sample_by, get_policy(p.name).sample_floor) for p in sp.policies]

    def summarize(t):  # what the run records of the trace: its first week
        flat, text = traces.summarize(t)
        return flat, f"week 1 of {k} (trace.weeks={k}: the others are independent draws of the profile)\n{text}"

    try:
        st.trace = weeks.sampled(week, k, [c.blocks for c in st.caps], sp.sample_rate, sp.sample_seed, sp.mode,
                                 rules, summarize=summarize, workers=weeks.week_workers(k, held[0]))
    except ValueError as e:
        raise ConfigError(f"trace.weeks={k} at sim.sample_rate={sp.sample_rate:g}: {e}; raise the capacities or "
                          f"set trace.weeks=1") from None


# ---------------------------------------------------------------------- plan
def _curves(st: Study, policies=None) -> list:

    sp, tdig, sdig = st.spec, trace_digest(st.trace), source_digest()
    blocks = tuple(c.blocks for c in st.caps)

    def sample(p) -> tuple:
        if not sp.sampled(p.name):
            return ()  # replayed exactly: the same key as an exact sweep's
        return (sp.sample_rate, sp.sample_seed, get_policy(p.name).sample_by)

    def setup(p) -> tuple:
        tiers = tuple(tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v)
                                   for k, v in t.items())) for t in p.tiers)
        return sp.counting_key() + ((("tiers", tiers),) if tiers else ())

    if st.fleet is not None:
        return fleet.curves(st.fleet, st.variants, blocks, trace=tdig, simulator=sdig, seed=sp.seed, model=sp.model)
    return [Curve(p.name, m, CurveIdentity.make(trace=tdig, policy=p.name, params=p.params, mode=sp.mode,
                                                hits=sp.hits, seed=sp.seed, cost_model=m, model=sp.model,
                                                simulator=sdig, sample=sample(p), order=sp.order,
                                                setup=setup(p)), blocks, pool=p.pool)
            for p in (st.variants if policies is None else policies) for m in sp.cost_models]


def _reference_curves(st: Study) -> tuple[dict, list]:
    """(cost model -> LRU curve, the curves to look up): LRU of the sweep, or else LRU
    with its default parameters and the sweep's settings, never run but filled from
    results already computed (journal, store)."""
    mine = [c for c in st.curves if c.policy == REFERENCE]
    if st.fleet is not None:  # compute savings against LRU's: not a serving measure
        return {}, []
    if mine:
        return {(c.cost_model, c.pool): c for c in mine}, []
    spec = get_policy(REFERENCE)
    lru = PolicyChoice(name=REFERENCE, params=dict(spec.defaults))
    extra = _curves(st, variants(replace(st.spec, policies=[lru]), st.pools))
    return {(c.cost_model, c.pool): c for c in extra}, extra


def _plan_kw(st: Study) -> dict:
    sw = st.cfg.sweep
    kw = dict(shards_per_worker=int(sw.get("shards_per_worker") or 3),
              max_capacities_per_job=sw.get("max_capacities_per_job"),
              max_request_blocks=st.trace.max_request_blocks if st.spec.mode == Mode.REQUEST else 0,
              saturation_blocks=saturation_capacity(st.trace))
    if st.fleet is not None:  # serve(): one call per capacity, none shared; one a job, so progress moves per replay
        kw.update(max_request_blocks=0, saturation_blocks=None, max_capacities_per_job=kw["max_capacities_per_job"] or 1)
    if st.spec.sample_rate is not None:
        st.replay_scale = kw["replay_scale"] = sampled_scale(st.trace, [c.blocks for c in st.caps], st.spec)
    return kw


def resolve_known(st: Study) -> None:
    """Curves, and which of their results the journal and the store already hold. With
    sweep.resume=false nothing is reused, and the store's runs of the same curves are
    superseded (deleted when the new ones are opened): never two curves of one key."""
    st.curves = _curves(st)
    st.references, extra = _reference_curves(st)
    resume = bool(st.cfg.sweep.get("resume", True))
    journaled = st.journal.results()
    times = st.journal.job_times()
    known = dict(journaled) if resume else {}
    stored = {}
    if st.tracker is not None:
        stored = st.tracker.stored_points(st.curves + extra)
        if resume:
            known.update(stored)
        else:
            for c in st.curves:
                c.supersede = c.run_id
                c.run_id, c.status, c.stored = None, "NEW", set()
    for c in st.curves:
        for i, k in enumerate(c.point_keys):
            if k in known:
                c.rows[i] = known[k]
                if k in times:
                    c.times[i] = times[k]
    for c in extra:  # a comparison only: any result of the same key will do
        for i, k in enumerate(c.point_keys):
            if k in journaled or k in stored:
                c.rows[i] = journaled.get(k) or stored[k]
    st.mirrors = derived.mirrors(st)
    for target, src in st.mirrors:
        derived.fill(target, src, range(len(st.caps)))


def todo(st: Study) -> dict:
    """(policy, cost-model group, pool, load, route) -> capacity indices still to simulate."""
    out: dict = {}
    pols = {p.name: p for p in st.spec.policies}
    read_off = {id(t) for t, _ in st.mirrors}  # filled from their sources' replays
    for c in st.curves:
        if id(c) in read_off:
            continue
        group = (c.cost_model,) if pols[c.policy].cost_aware else tuple(st.spec.cost_models)
        out.setdefault((c.policy, group, c.pool, c.load, c.route), set()).update(
            i for i in range(len(st.caps)) if i not in c.rows)
    return {k: v for k, v in out.items() if v}


def make_jobs(st: Study, workers: int) -> None:
    st.jobs = make_plan(st.variants or st.spec.policies, st.spec.cost_models, st.caps, st.trace.n_accesses, workers,
                        todo=todo(st), **_plan_kw(st))


def known_line(st: Study) -> str | None:
    n_points = len(st.curves) * len(st.caps)
    n_known = sum(len(c.rows) for c in st.curves)
    if not n_known:
        return None
    if n_known == n_points:
        return (f"resume: all {n_points} results ({counted(len(st.curves), 'curve')} x "
                f"{counted(len(st.caps), 'capacity', 'capacities')}) are already computed; nothing to simulate "
                f"(sweep.resume=false recomputes)")
    return (f"resume: {n_known} of {n_points} results already computed (same trace, policy, parameters, "
            f"setup, cost model and simulator); simulating the other {n_points - n_known}")


def dry_run(st: Study) -> int:
    workers = size.actors(st.cfg.cluster)
    resolve_known(st)  # journal only: a dry run does not touch the tracking store
    make_jobs(st, workers)
    print(format_plan(st.jobs, st.caps) if st.jobs else "nothing to run: every result is already known")
    print(size.measure(st, workers).line())
    print(f"dry run: {len(st.jobs)} jobs for {workers} worker(s); nothing was run or logged")
    return 0


# ---------------------------------------------------------------------- run
def run_jobs(st: Study, cluster) -> None:
    """Replay every planned job; each result goes to the journal, then to delivery."""
    sp = st.spec
    sim_kwargs = {"mode": sp.mode, "hits": sp.hits, "order": sp.order, "model": sp.model, "seed": sp.seed,
                  **sp.counting, "hardware": sp.hardware}
    if sp.sample_rate is not None:
        sim_kwargs.update(sample_rate=sp.sample_rate, sample_seed=sp.sample_seed, sample_force=sp.sample_force)
    if st.fleet is not None:  # sweep.runner: serve() per capacity for jobs with a load
        sim_kwargs["serve"] = {**st.fleet.runner_kwargs(sp.model), "seed": sp.seed}
    pool = cluster.pool_for(traces.to_payload(_shipped(st)), sim_kwargs, len(st.jobs))
    log.info("%s x %s x %s -> %s on %d actor(s)", counted(len(sp.policies), "policy", "policies"),
             counted(len(st.fleet.loads), "load") if st.fleet else counted(len(sp.cost_models), "cost model"),
             counted(len(st.caps), "capacity", "capacities"), counted(len(st.jobs), "job"),
             len(pool.actors) or min(pool.n_actors, len(st.jobs)))
    by_curve = {(c.policy, c.cost_model, c.pool, c.load, c.route): c for c in st.curves}
    progress = Progress(st.jobs, serving=st.fleet is not None,
                        note="compiling, then replay" if size.jit_cold() else "")
    try:
        for out in pool.results(st.jobs, fail_fast=bool(st.cfg.sweep.get("fail_fast", False)),
                                on_idle=progress.refresh):
            job = out.job
            if out.results is None:
                st.n_failed += 1
                progress.done(job, 0.0, failed=True)
                if st.delivery:
                    for m in job.cost_models:
                        st.delivery.finish(by_curve[(job.policy, m, job.pool, job.load, job.route)], "FAILED", error=out.error)
                continue
            points = []
            jt = JobTime(out.start, out.secs, out.cpu)
            for m in job.cost_models:
                c = by_curve[(job.policy, m, job.pool, job.load, job.route)]
                for idx, res in zip(job.cap_indices, out.results):
                    c.rows[idx] = res
                    c.times[idx] = jt
                    points.append(Point(c.point_keys[idx], c.run_id, idx, m, res, jt))
            took = {}
            for target, src in st.mirrors:
                if src.policy == job.policy and src.pool == job.pool and src.cost_model in job.cost_models:
                    took[id(target)] = (target, derived.fill(target, src, job.cap_indices))
                    points += [Point(target.point_keys[i], target.run_id, i, target.cost_model, target.rows[i], jt)
                               for i in took[id(target)][1]]
            st.journal.add_points(st.uri, st.experiment, points)  # safe before MLflow hears of it
            if st.delivery:
                for m in job.cost_models:
                    c = by_curve[(job.policy, m, job.pool, job.load, job.route)]
                    st.delivery.points(c, {i: c.rows[i] for i in job.cap_indices})
                for target, idx in took.values():
                    st.delivery.points(target, {i: target.rows[i] for i in idx})
            progress.done(job, out.secs, cpu=out.cpu)
    finally:
        st.work = progress.work()
        progress.close()
        size.record_rate(st, progress.timed)


def _shipped(st: Study):
    """What the actors need: the trace, or only its samples when every capacity to
    simulate is sampled (sim_core.traces.sample.SampleSet)."""
    if st.spec.sample_rate is None or st.replay_scale is None:
        return st.trace
    if all(st.replay_scale(j.policy, st.caps[i].blocks) < 1.0 for j in st.jobs for i in j.cap_indices):
        return SampleSet.of(st.trace)
    return st.trace
