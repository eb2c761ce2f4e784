"""The CLI's evaluator: candidate replays as jobs on the sweep's Ray actors, each result
journaled before anything else hears of it, and the journal read back so that a re-run
of the same plan replays nothing already journaled.

The actors are the sweep's own (sweep.runner.SimulatorShard: one shared copy of the
trace, one serve() per job), given every deployment of the space by label. Jobs are fed
as the searches ask for them, so the actors are created once per plan (sweep.pool's
ShardPool creates its actors for each batch of jobs, and a search asks one by one); a job
that fails stops the plan, and its re-run resumes from the journal.
"""
from __future__ import annotations

import logging
import time
from collections import deque

from sim_core.digest import source_digest, trace_digest
from sweep import signals
from sweep.journal import JobTime, Journal, Point
from sweep.keys import CurveIdentity
from sweep.plan import Job
from sweep.runner import RayCluster, SimulatorShard
from sweep.serving import SERVE
from sweep.traces import to_payload

log = logging.getLogger("analysis")


class Keys:
    """The journal's point key of each replay (its identity with the trace's content and
    the simulator's source, as the sweep keys its points)."""

    def __init__(self, trace, setting):
        self.trace, self.setting = trace_digest(trace), setting
        self.simulator = source_digest()

    def __call__(self, c, load: float) -> str:
        s = self.setting
        ident = CurveIdentity.make(trace=self.trace, policy=c.policy, params={}, mode=SERVE, hits="prefix",
                                   seed=s.seed, cost_model=SERVE, model=s.replayed(c).model,
                                   simulator=self.simulator, setup=(("plan", s.key(c, load)),))
        return ident.point_key(s.capacity(c))


def journaled(journal: Journal, keys: Keys, setting, cands, loads) -> dict:
    """replay key -> ServeResult for every candidate and load the journal already holds."""
    have = journal.results()
    out = {}
    for load in loads:
        for c in cands:
            pk = keys(c, load)
            if pk in have:
                out[setting.key(c, load)] = have[pk]
    return out


class RayEvaluator:
    """submit / collect (planner.evaluate.drive) over the sweep's actors, inside an entered
    sweep.runner.RayCluster."""

    def __init__(self, cluster, trace, setting, cands, journal: Journal, keys: Keys, *, uri, experiment: str):
        import ray

        self.ray, self.setting, self.journal, self.keys = ray, setting, journal, keys
        self.uri, self.experiment = uri, experiment
        # every deployment of the space by label: an actor replays whichever a job names
        by_ident = {setting.key(c, 0.0)[0]: c for c in cands}
        self.labels = {k: f"d{i}" for i, k in enumerate(by_ident)}
        deps = {self.labels[k]: setting.replayed(c) for k, c in by_ident.items()}
        kwargs = {"serve": {"deployments": deps, "slo": dict(setting.per_request) if setting.per_request else None,
                            "seed": setting.seed}}
        ref = ray.put(to_payload(trace))
        Shard = ray.remote(num_cpus=1, max_restarts=0)(SimulatorShard)
        self.actors = [Shard.remote(ref, kwargs) for _ in range(max(1, cluster.n_actors))]
        self.free = deque(self.actors)
        self.queue: deque = deque()
        self.pending: dict = {}
        self.replays, self.next_id = 0, 0
        log.info("%d simulator actor(s) for the plan's replays", len(self.actors))

    def submit(self, key, c, load: float) -> None:
        self.queue.append((key, c, load))
        self._start()

    def _start(self) -> None:
        while self.free and self.queue:
            key, c, load = self.queue.popleft()
            job = Job(id=self.next_id, policy=c.policy, params=(), cost_models=(SERVE,), cap_indices=(0,),
                      capacities=(self.setting.capacity(c),), est_cost=0.0, shard=0, n_shards=1, accesses=0,
                      load=float(load), route=self.labels[key[0]])
            self.next_id += 1
            actor = self.free.popleft()
            self.pending[actor.run.remote(job)] = (actor, key, c, load)

    def collect(self) -> list:
        ray = self.ray
        while True:
            signals.check()
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=1.0)
            if ready:
                break
        actor, key, c, load = self.pending.pop(ready[0])
        try:
            _, (res,), secs, cpu, start = ray.get(ready[0])
        except ray.exceptions.RayError as e:
            raise RuntimeError(f"the replay of {c.label()} at {load:g}x load failed: {e}; re-running the same "
                               f"command resumes from the journal ({self.journal.path})") from e
        self.free.append(actor)
        self.replays += 1
        self.journal.add_points(self.uri, self.experiment,
                                [Point(self.keys(c, load), None, 0, SERVE, res, JobTime(start, secs, cpu))])
        log.info("replayed %s at %gx load in %.1fs: TTFT p99 %.3fs", c.label(), load, secs, res.ttft_p99_s)
        self._start()
        return [(key, res)]


class LazyRay:
    """A RayEvaluator started on the first replay the searches ask for: a plan whose
    replays are all journaled never starts Ray. A context manager: Ray is shut down on exit."""

    def __init__(self, cluster_cfg, *args, **kw):
        self.cfg, self.args, self.kw = cluster_cfg, args, kw
        self.cluster = self.ev = None

    @property
    def replays(self) -> int:
        return self.ev.replays if self.ev else 0

    def submit(self, key, c, load: float) -> None:
        if self.ev is None:
            self.cluster = RayCluster(self.cfg).__enter__()
            self.ev = RayEvaluator(self.cluster, *self.args, **self.kw)
        self.ev.submit(key, c, load)

    def collect(self) -> list:
        return self.ev.collect()

    def __enter__(self) -> "LazyRay":
        return self

    def __exit__(self, *exc) -> None:
        if self.cluster is not None:
            self.cluster.__exit__(*exc)


class LocalEvaluator:
    """This process replays (plan.runner=local), journaling each result as the Ray one does."""

    def __init__(self, trace, setting, journal: Journal, keys: Keys, *, uri, experiment: str):
        self.trace, self.setting, self.journal, self.keys = trace, setting, journal, keys
        self.uri, self.experiment = uri, experiment
        self.queue: deque = deque()
        self.replays = 0

    def submit(self, key, c, load: float) -> None:
        self.queue.append((key, c, load))

    def collect(self) -> list:
        signals.check()
        key, c, load = self.queue.popleft()
        started = time.time()
        t0, c0 = time.perf_counter(), time.process_time()
        res = self.setting.serve(self.trace, c, load)
        secs = time.perf_counter() - t0
        self.replays += 1
        self.journal.add_points(self.uri, self.experiment, [Point(self.keys(c, load), None, 0, SERVE, res,
                                                                  JobTime(started, secs, time.process_time() - c0))])
        log.info("replayed %s at %gx load in %.1fs: TTFT p99 %.3fs", c.label(), load, secs, res.ttft_p99_s)
        return [(key, res)]
