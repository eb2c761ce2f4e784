"""A sweep as the README tells it: configure -> load -> plan -> run -> record.

Each step is a function over one `Study`. Nothing is recorded before `plan` has found
what the tracking store and the journal already hold, and every finished job goes to
the journal before MLflow (sweep.delivery) sees it.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from .config import ConfigError

log = logging.getLogger("sweep")

EXIT_FAILED = 1
REPO = Path(__file__).resolve().parent.parent


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
    cap_notes: list = field(default_factory=list)
    curves: list = field(default_factory=list)  # tracking.Curve
    references: dict = field(default_factory=dict)  # cost model -> LRU tracking.Curve (*_vs_lru_* metrics)
    jobs: list = field(default_factory=list)
    tracker: Any = None
    delivery: Any = None
    status: str = "FAILED"
    n_failed: int = 0
    replay_scale: Any = None  # capacity blocks -> relative replay cost (sampling), set by planning
    mirrors: list = field(default_factory=list)  # (target, source) curves: sweep.derived

    @property
    def experiment(self) -> str:
        from . import traces

        return traces.experiment_name(self.trace, self.cfg.tracking.get("experiment"))


# ---------------------------------------------------------------------- configure
def configure(cfg, overrides: list[str], trace_choice: str, policy_choice: str) -> Study:
    """Everything that can be checked without work; raises ConfigError."""
    from . import traces
    from .journal import Journal
    from .spec import resolve
    from .store import check_reachable, default_uri

    st = Study(cfg=cfg, overrides=overrides, trace_choice=trace_choice)
    st.spec = resolve(cfg, policy_choice)
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
    from sim_core import saturation_capacity

    from . import traces
    from .plan import oversized_warnings, resolve_capacities

    st.trace = traces.load(st.cfg.trace, st.trace_choice)
    st.caps, st.cap_notes = resolve_capacities(st.spec.capacity_sizes, st.spec.model, st.trace.block_tokens)
    t = st.trace
    log.info("trace %s (%s): %d requests, %d block accesses, %d unique %d-token blocks",
             t.name, t.source, t.n_requests, t.n_accesses, t.n_unique, t.block_tokens)
    for note in st.cap_notes:
        log.info("capacity dedup: %s", note)
    _resolve_sampling(st)
    for w in oversized_warnings(st.caps, t.request_lengths):
        log.warning("%s", w)
    sat = saturation_capacity(t)
    n_sat = sum(1 for c in st.caps if c.blocks >= sat)
    if n_sat > 1:
        log.info("%d of %d capacities hold the whole trace (>= %d blocks): no policy evicts there, "
                 "so each curve replays them once", n_sat, len(st.caps), sat)
    check_policies(st)


def check_policies(st: Study) -> None:
    """A policy's own pre-flight check on this trace (the ILP's size limit), before any
    work: a refusal is bad input (exit status 2), not a failed job."""
    from sim_core import get_policy

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
    from dataclasses import replace

    from sim_core import Hits, get_policy
    from sim_core.sample import AUTO_KEEP_ACCESSES, auto_rate

    sp = st.spec
    if sp.sample_auto:
        rate = auto_rate(st.trace.n_accesses)
        if rate is not None and sp.hits is Hits.PREFIX:
            raise ConfigError(f"sim.sample_rate=auto would sample this trace ({st.trace.n_accesses} block accesses) "
                              "but sim.hits=prefix is not defined on a sample: set sim.sample_rate=null to replay "
                              "it exactly")
        log.info("sim.sample_rate=auto: %s", "exact replay (the trace is small)" if rate is None else
                 f"sampled replay at r={rate:g} (about {AUTO_KEEP_ACCESSES / 1e6:g}M of "
                 f"{st.trace.n_accesses / 1e6:.0f}M block accesses; sim.sample_rate=null replays exactly)")
        st.spec = sp = replace(sp, sample_rate=rate)
    if sp.sample_rate is not None and sp.selected_all:
        exact = [p.name for p in sp.policies if not sp.sampled(p.name)]
        if exact:
            log.info("policy=all under sampled replay skips %s (its sampled error misses the target and an "
                     "exact replay of this trace is slow; name it in policy=[...] to run it exactly)",
                     ", ".join(exact))
            st.spec = replace(sp, policies=[p for p in sp.policies if p.name not in exact])
            if not st.spec.policies:
                raise ConfigError("no policy left to run under sampled replay")


# ---------------------------------------------------------------------- plan
def _curves(st: Study, policies=None) -> list:
    from sim_core.digest import source_digest, trace_digest

    from .keys import CurveIdentity
    from .tracking import Curve

    from sim_core import get_policy

    sp, tdig, sdig = st.spec, trace_digest(st.trace), source_digest()
    blocks = tuple(c.blocks for c in st.caps)

    def sample(p) -> tuple:
        if not sp.sampled(p.name):
            return ()  # replayed exactly: the same key as an exact sweep's
        return (sp.sample_rate, sp.sample_seed, get_policy(p.name).sample_by)

    return [Curve(p.name, m, CurveIdentity.make(trace=tdig, policy=p.name, params=p.params, mode=sp.mode,
                                                hits=sp.hits, seed=sp.seed, cost_model=m, model=sp.model,
                                                simulator=sdig, sample=sample(p)), blocks)
            for p in (sp.policies if policies is None else policies) for m in sp.cost_models]


def _reference_curves(st: Study) -> tuple[dict, list]:
    """(cost model -> LRU curve, the curves to look up): LRU of the sweep, or else LRU
    with its default parameters and the sweep's settings, never run but filled from
    results already computed (journal, store)."""
    from sim_core import get_policy

    from .spec import PolicyChoice
    from .tracking import REFERENCE

    mine = [c for c in st.curves if c.policy == REFERENCE]
    if mine:
        return {c.cost_model: c for c in mine}, []
    spec = get_policy(REFERENCE)
    extra = _curves(st, [PolicyChoice(name=REFERENCE, params=dict(spec.defaults))])
    return {c.cost_model: c for c in extra}, extra


def _plan_kw(st: Study) -> dict:
    from sim_core import Mode, saturation_capacity

    sw = st.cfg.sweep
    kw = dict(shards_per_worker=int(sw.get("shards_per_worker") or 3),
              max_capacities_per_job=sw.get("max_capacities_per_job"),
              max_request_blocks=st.trace.max_request_blocks if st.spec.mode == Mode.REQUEST else 0,
              saturation_blocks=saturation_capacity(st.trace))
    if st.spec.sample_rate is not None:
        st.replay_scale = kw["replay_scale"] = _sampled_scale(st)
    return kw


def _sampled_scale(st: Study):
    """Relative cost of a capacity under sampling: the rate it runs at (raised where the
    scaled cache would be below the policy's sampling floor; sim_core.sample.capacity_rates)."""
    from sim_core import get_policy
    from sim_core.sample import capacity_rates

    sp = st.spec
    blocks = [c.blocks for c in st.caps]
    per_rule: dict[tuple, dict[int, float]] = {}  # (unit, floor) -> capacity -> rate
    rule = {}
    for p in sp.policies:
        spec = get_policy(p.name)
        rule[p.name] = (spec.sample_by, spec.sample_floor)
        if rule[p.name] not in per_rule:
            per_rule[rule[p.name]] = capacity_rates(st.trace, blocks, sp.sample_rate, sp.sample_seed,
                                                    spec.sample_by, sp.mode, floor=spec.sample_floor)
    raised = {}
    for p in sp.policies:
        if sp.sampled(p.name):
            for c, r in per_rule[rule[p.name]].items():
                if r > sp.sample_rate:
                    raised.setdefault((c, r), []).append(p.name)
    if raised:
        from .plan import counted

        every = len([p for p in sp.policies if sp.sampled(p.name)])
        log.info("sampling at r=%g: %s would hold too few sampled blocks and run at a higher rate (%s)",
                 sp.sample_rate, counted(len({c for c, _ in raised}), "capacity", "capacities"),
                 "; ".join(f"{c} blocks: r={r:g}" + ("" if len(ps) == every else f" for {', '.join(ps)}")
                           for (c, r), ps in sorted(raised.items())[:6]) + (" ..." if len(raised) > 6 else ""))
    exact = [p.name for p in sp.policies if not sp.sampled(p.name)]
    if exact:
        log.info("sampling at r=%g: %s stay exact (their sampled error misses the target; see README "
                 "\"Sampled replay\")", sp.sample_rate, ", ".join(exact))
    return lambda policy, blocks: 1.0 if policy in exact else per_rule[rule[policy]].get(blocks, 1.0)


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
    from . import derived

    st.mirrors = derived.mirrors(st)
    for target, src in st.mirrors:
        derived.fill(target, src, range(len(st.caps)))


def todo(st: Study) -> dict:
    """(policy, cost-model group) -> capacity indices still to simulate."""
    out: dict = {}
    pols = {p.name: p for p in st.spec.policies}
    read_off = {id(t) for t, _ in st.mirrors}  # filled from their sources' replays
    for c in st.curves:
        if id(c) in read_off:
            continue
        group = (c.cost_model,) if pols[c.policy].cost_aware else tuple(st.spec.cost_models)
        out.setdefault((c.policy, group), set()).update(i for i in range(len(st.caps)) if i not in c.rows)
    return {k: v for k, v in out.items() if v}


def make_jobs(st: Study, workers: int) -> None:
    from .plan import make_plan

    st.jobs = make_plan(st.spec.policies, st.spec.cost_models, st.caps, st.trace.n_accesses, workers,
                        todo=todo(st), **_plan_kw(st))


def known_line(st: Study) -> str | None:
    n_points = len(st.curves) * len(st.caps)
    n_known = sum(len(c.rows) for c in st.curves)
    if not n_known:
        return None
    if n_known == n_points:
        return (f"resume: all {n_points} results ({len(st.curves)} curves x {len(st.caps)} capacities) are "
                f"already computed; nothing to simulate (sweep.resume=false recomputes)")
    return (f"resume: {n_known} of {n_points} results already computed (same trace, policy, parameters, "
            f"engine, cost model and simulator); simulating the other {n_points - n_known}")


def dry_run(st: Study) -> int:
    from .plan import format_plan

    c = st.cfg.cluster
    workers = int(c.get("actors") or c.get("num_cpus") or os.cpu_count() or 1)
    resolve_known(st)  # journal only: a dry run does not touch the tracking store
    make_jobs(st, workers)
    print(format_plan(st.jobs, st.caps) if st.jobs else "nothing to run: every result is already known")
    print(f"dry run: {len(st.jobs)} jobs for {workers} worker(s); nothing was run or logged")
    return 0


# ---------------------------------------------------------------------- record (start)
def open_tracking(st: Study) -> None:
    from .tracking import Tracker

    if st.uri is None:
        log.warning("offline: results go to the journal %s only; re-run the same command with a "
                    "tracking store to record them in MLflow (nothing is recomputed)", st.journal.path)
        return
    st.tracker = Tracker(st.uri, st.experiment, st.cfg.tracking.get("artifact_location"))
    stale = st.tracker.mark_stale()
    if stale:
        log.warning("found %d run(s) left RUNNING by a sweep whose driver is gone: marked KILLED "
                    "(their finished results are reused)", len(stale))


def start_runs(st: Study) -> None:
    """The parent run (new, or the same sweep's earlier one) and a run per curve."""
    from .delivery import Delivery
    from .keys import sweep_key

    if st.tracker is None:
        return
    key = sweep_key([c.key for c in st.curves])
    live = st.tracker.live_sweep(key)
    if live is not None:
        raise ConfigError(f"the same sweep is running now (run {live.info.run_id}, pid "
                          f"{live.data.tags.get('kvsweep.driver_pid')} on {live.data.tags.get('kvsweep.driver_host')}); "
                          f"wait for it, or stop it first")
    params, tags, metrics, texts = _parent_record(st)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    pid, resumed = st.tracker.start_parent(run_name=f"sweep-{stamp}", sweep_key=key, params=params, tags=tags,
                                           metrics=metrics, texts=texts, capacities=st.caps)
    log.info("MLflow: experiment %r, %s run %s (%s)", st.experiment, "resumed sweep" if resumed else "sweep",
             pid, st.uri)
    from sim_core import get_policy

    pols = {p.name: p for p in st.spec.policies}
    for c in st.curves:
        p, ps = pols[c.policy], get_policy(c.policy)
        st.tracker.open_curve(c, {"trace": st.trace.name, "mode": str(st.spec.mode), "hits": str(st.spec.hits),
                                  "model": st.spec.model.name, "block_tokens": st.trace.block_tokens,
                                  "cost_aware": p.cost_aware, "offline": p.offline,
                                  **{f"params.{k}": v for k, v in p.params.items()}},
                              {"trace_source": st.trace.source, "family": ps.family,
                               "cost_aware": str(p.cost_aware).lower(), "offline": str(p.offline).lower(),
                               "sampled": f"r={c.identity.sample[0]:g}" if c.identity.sample else "false"})
    st.delivery = Delivery(st.tracker, st.journal, st.uri)
    for c in st.curves:  # known results the run lacks (journal, another capacity list)
        missing = {i: r for i, r in c.rows.items() if i not in c.stored}
        if missing or (c.status != "REUSED" and len(c.rows) == len(st.caps)):
            st.delivery.points(c, missing)


def _parent_record(st: Study) -> tuple[dict, dict, dict, dict]:
    from . import traces

    summary, summary_text = traces.summarize(st.trace)
    sha, dirty = _git_commit(REPO)
    tags = {"trace_source": st.trace.source, "trace": st.trace.name, "mlflow.source.name": "python -m sweep",
            "sampled": "false" if st.spec.sample_rate is None else f"r={st.spec.sample_rate:g}",
            "overrides": " ".join(st.overrides) or "(defaults)",
            **{f"version.{k}": v for k, v in _versions().items()}}
    if sha:
        tags.update({"git_commit": sha, "mlflow.source.git.commit": sha, "git_dirty": str(dirty).lower()})
    if st.cap_notes:
        tags["capacity_dedup"] = "; ".join(st.cap_notes)[:5000]
    resolved = OmegaConf.to_container(st.cfg, resolve=True)
    params = traces.flatten(resolved)
    params.update({"capacities_blocks": [c.blocks for c in st.caps],
                   "capacities_gib": [round(c.gib, 6) for c in st.caps],
                   "n_capacities": len(st.caps), "policies": [p.name for p in st.spec.policies],
                   "cost_models": st.spec.cost_models})
    params.update({f"trace_summary.{k}": v for k, v in summary.items() if not isinstance(v, (int, float))})
    metrics = {f"trace.{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
    from sim_core import saturation_capacity

    metrics["saturation_blocks"] = saturation_capacity(st.trace)  # the report zooms below it
    texts = {"config.yaml": OmegaConf.to_yaml(resolved)}
    if summary_text:
        texts["trace_summary.txt"] = summary_text
    return params, tags, metrics, texts


# ---------------------------------------------------------------------- run
def run_jobs(st: Study, cluster) -> None:
    """Replay every planned job; each result goes to the journal, then to delivery."""
    from . import derived, traces
    from .plan import counted
    from .journal import JobTime, Point
    from .progress import Progress

    sp = st.spec
    sim_kwargs = {"mode": sp.mode, "hits": sp.hits, "model": sp.model, "seed": sp.seed}
    if sp.sample_rate is not None:
        sim_kwargs.update(sample_rate=sp.sample_rate, sample_seed=sp.sample_seed, sample_force=sp.sample_force)
    pool = cluster.pool_for(traces.to_payload(_shipped(st)), sim_kwargs, len(st.jobs))
    log.info("%s x %s x %s -> %s on %d actor(s)", counted(len(sp.policies), "policy", "policies"),
             counted(len(sp.cost_models), "cost model"), counted(len(st.caps), "capacity", "capacities"),
             counted(len(st.jobs), "job"), len(pool.actors) or min(pool.n_actors, len(st.jobs)))
    by_curve = {(c.policy, c.cost_model): c for c in st.curves}
    progress = Progress(st.jobs)
    try:
        for out in pool.results(st.jobs, fail_fast=bool(st.cfg.sweep.get("fail_fast", False)),
                                on_idle=progress.refresh):
            job = out.job
            if out.results is None:
                st.n_failed += 1
                progress.done(job, 0.0, failed=True)
                if st.delivery:
                    for m in job.cost_models:
                        st.delivery.finish(by_curve[(job.policy, m)], "FAILED", error=out.error)
                continue
            points = []
            jt = JobTime(out.start, out.secs, out.cpu)
            for m in job.cost_models:
                c = by_curve[(job.policy, m)]
                for idx, res in zip(job.cap_indices, out.results):
                    c.rows[idx] = res
                    c.times[idx] = jt
                    points.append(Point(c.point_keys[idx], c.run_id, idx, m, res, jt))
            took = {}
            for target, src in st.mirrors:
                if src.policy == job.policy and src.cost_model in job.cost_models:
                    took[id(target)] = (target, derived.fill(target, src, job.cap_indices))
                    points += [Point(target.point_keys[i], target.run_id, i, target.cost_model, target.rows[i], jt)
                               for i in took[id(target)][1]]
            st.journal.add_points(st.uri, st.experiment, points)  # safe before MLflow hears of it
            if st.delivery:
                for m in job.cost_models:
                    c = by_curve[(job.policy, m)]
                    st.delivery.points(c, {i: c.rows[i] for i in job.cap_indices})
                for target, idx in took.values():
                    st.delivery.points(target, {i: target.rows[i] for i in idx})
            progress.done(job, out.secs, cpu=out.cpu)
    finally:
        progress.close()


def _shipped(st: Study):
    """What the actors need: the trace, or only its samples when every capacity to
    simulate is sampled (sim_core.sample.SampleSet)."""
    from sim_core.sample import SampleSet

    if st.spec.sample_rate is None or st.replay_scale is None:
        return st.trace
    if all(st.replay_scale(j.policy, st.caps[i].blocks) < 1.0 for j in st.jobs for i in j.cap_indices):
        return SampleSet.of(st.trace)
    return st.trace


# ---------------------------------------------------------------------- record (end)
def finish(st: Study, status: str, wait_s: float) -> str:
    """End every run with `status` (incomplete curves: KILLED/FAILED), waiting up to
    `wait_s` for MLflow to take what is queued. Returns the final status."""
    if st.delivery is None:
        return status
    for c in st.curves:
        if len(c.rows) < len(st.caps):
            st.delivery.finish(c, "KILLED" if status in ("KILLED", "FINISHED") else status)
    if st.delivery.backlog:
        log.info("waiting for MLflow to take %d queued update(s) (up to %.0fs)", st.delivery.backlog, wait_s)
    left = st.delivery.drain(wait_s)
    st.delivery.stop()
    if left:
        log.error("MLflow did not take %d result batch(es) in %.0fs: they are safe in %s; "
                  "`python -m sweep.sync` sends them (or re-run the same command)", left, wait_s, st.journal.path)
        status = "FAILED" if status == "FINISHED" else status
    from sim_core import saturation_capacity

    from .tracking import SweepFacts

    st.tracker.close_parent(status, st.curves, SweepFacts(
        trace_source=st.trace.source, saturation_blocks=saturation_capacity(st.trace),
        sample_rate=st.spec.sample_rate, cost_models=st.spec.cost_models, references=st.references))
    return status


def summary_text(st: Study) -> str:
    from sim_core import saturation_capacity

    from .report import summary_table
    from .tracking import curves_by_model

    return summary_table(curves_by_model(st.caps, st.curves), st.caps,
                         int(st.cfg.sweep.get("summary_points") or 4),
                         [p.name for p in st.spec.policies], st.spec.cost_models, st.spec.sample_rate,
                         saturation_capacity(st.trace))


# ---------------------------------------------------------------------- helpers
def _git_commit(repo: Path) -> tuple[str | None, bool]:
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip() != ""
        return sha or None, dirty
    except (OSError, subprocess.SubprocessError):
        return None, False


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for pkg in ("kvcache-sweep", "numpy", "numba", "ray", "mlflow", "hydra-core", "omegaconf"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out
