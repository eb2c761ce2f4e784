"""Run planned jobs on Ray: one `SimulatorShard` actor per CPU, one shared trace.

The trace's numpy arrays go into the object store once (ray.put); every actor maps
them zero-copy (read-only) and replays jobs against them with sim_core.simulate.
Results stream back with ray.wait as jobs finish. Numba's on-disk JIT cache
(sim_core/jit.py) lets every actor reuse compiled engines.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable, Sequence

from .plan import Job

log = logging.getLogger("sweep")

_REPO_ROOT = Path(__file__).resolve().parent.parent


class SweepFailed(RuntimeError):
    """A job raised in a worker, or a worker died."""


class SimulatorShard:
    """Ray actor: holds the shared trace, replays jobs on it."""

    def __init__(self, payload: dict, sim_kwargs: dict):
        logging.getLogger("numba").setLevel(logging.WARNING)
        from .traces import from_payload

        self.trace = from_payload(payload)
        self.sim_kwargs = dict(sim_kwargs)

    def info(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname()}

    def run(self, job: Job) -> tuple[int, list[dict], float, float]:
        """(job id, one sim_core.simulate record per capacity, wall seconds, CPU seconds)."""
        from sim_core import simulate

        t0, c0 = time.perf_counter(), time.process_time()
        recs = simulate(self.trace, job.policy, list(job.capacities), cost_models=list(job.cost_models),
                        **self.sim_kwargs, **dict(job.params))
        return job.id, recs, time.perf_counter() - t0, time.process_time() - c0


def _quiet_ray_env() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Workers of a local instance inherit this environment: make sure they import the
    # same sim_core/sweep as the driver, also from a checkout that is not installed.
    pp = os.environ.get("PYTHONPATH", "")
    if str(_REPO_ROOT) not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), pp) if p)


class RayRunner:
    """Context manager: starts (or joins) Ray, runs jobs, always shuts Ray down."""

    def __init__(self, cluster_cfg, inflight_per_actor: int = 2):
        self.cfg = cluster_cfg
        self.inflight = max(1, int(inflight_per_actor))
        self.actors: list = []
        self.n_actors = 0
        self.started = False

    # ------------------------------------------------------------- lifecycle
    def __enter__(self) -> "RayRunner":
        _quiet_ray_env()
        import ray

        c = self.cfg
        address = c.get("address")
        common = dict(logging_level=logging.ERROR, log_to_driver=bool(c.get("log_to_driver", False)))
        if address:
            log.info("joining Ray cluster at %s", address)
            ray.init(address=str(address), **common)
        else:
            num_cpus = int(c.get("num_cpus") or os.cpu_count() or 1)
            kw = dict(num_cpus=num_cpus, include_dashboard=False, **common)
            if c.get("object_store_memory"):
                kw["object_store_memory"] = int(c.object_store_memory)
            log.info("starting a local Ray instance with %d CPU(s)", num_cpus)
            ray.init(**kw)
        self.started = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.n_actors = int(c.get("actors") or max(1, cpus))
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        if not self.started:
            return
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []
        ray.shutdown()
        self.started = False

    # ------------------------------------------------------------------ run
    def run(self, payload: dict, jobs: Sequence[Job], sim_kwargs: dict,
            on_result: Callable[[Job, list[dict], float], None],
            on_error: Callable[[Job, str], None] | None = None) -> int:
        """Run every job; returns the number of failed jobs.

        A job that raises is reported to `on_error` and the sweep goes on (or raises
        SweepFailed at once when `on_error` is None). An actor that dies (crash, killed by
        Ray's out-of-memory monitor) is replaced, at most once per original actor, and its
        jobs are retried once; the sweep fails when no actor is left.
        """
        import ray

        if not jobs:
            return 0
        t_put = time.perf_counter()
        trace_ref = ray.put(payload)
        log.info("trace in the object store (%.1f MB, %.1fs); %d simulator actor(s)",
                 sum(getattr(v, "nbytes", 0) for v in payload.values()) / 1e6,
                 time.perf_counter() - t_put, min(self.n_actors, len(jobs)))
        Shard = ray.remote(num_cpus=1, max_restarts=0)(SimulatorShard)
        self.actors = [Shard.remote(trace_ref, sim_kwargs) for _ in range(min(self.n_actors, len(jobs)))]

        queue = deque(jobs)
        pending: dict = {}
        dead: set = set()
        failed = 0
        retried: set = set()
        respawns = len(self.actors)  # replacements for actors that die (OOM kill, crash)
        # Replacements get jobs only once they run: after a node is lost there may be no
        # free CPU for one, and jobs handed to an actor that never starts would wait forever.
        warming: dict = {}  # readiness probe (actor.info) -> replacement actor
        died = (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError,
                ray.exceptions.WorkerCrashedError)

        def submit(actor) -> None:
            job = queue.popleft()
            pending[actor.run.remote(job)] = (actor, job)

        def top_up() -> None:
            """Every live actor gets up to `inflight` queued jobs."""
            for a in self.actors:
                if a in dead or any(a is w for w in warming.values()):
                    continue
                n = sum(1 for x, _ in pending.values() if x is a)
                while n < self.inflight and queue:
                    submit(a)
                    n += 1

        top_up()
        progress = _Progress(jobs)
        try:
            while pending or (queue and warming):
                ready, _ = ray.wait(list(pending) + list(warming), num_returns=1, timeout=1.0)
                if not ready:
                    progress.refresh()
                    continue
                ref = ready[0]
                if ref in warming:  # a replacement actor is up (or failed to start)
                    new = warming.pop(ref)
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayError as e:
                        dead.add(new)
                        if len(dead) == len(self.actors):
                            raise SweepFailed(f"every simulator actor died (last replacement: {_short(e)}); "
                                              f"{len(queue)} job(s) never ran") from e
                    top_up()
                    continue
                actor, job = pending.pop(ref)
                try:
                    _, recs, secs, cpu = ray.get(ref)
                except ray.exceptions.RayError as e:
                    msg = (f"job {job.id} ({job.policy}, {','.join(job.cost_models)}, "
                           f"{len(job.capacities)} capacities) failed: {_short(e)}")
                    if isinstance(e, died):  # the worker process is gone, maybe not the job's fault
                        if actor not in dead:
                            dead.add(actor)
                            if respawns > 0:
                                respawns -= 1
                                new = Shard.remote(trace_ref, sim_kwargs)
                                self.actors.append(new)
                                warming[new.info.remote()] = new
                        if job.id not in retried and len(dead) < len(self.actors):
                            retried.add(job.id)
                            log.warning("%s; retrying it once on another actor", msg)
                            queue.appendleft(job)
                            top_up()
                            continue
                    if on_error is None:
                        raise SweepFailed(msg) from e
                    failed += 1
                    log.error("%s", msg)
                    on_error(job, msg)
                    progress.done(job, 0.0, cpu=0.0, failed=True)
                    if len(dead) == len(self.actors):
                        raise SweepFailed(f"every simulator actor died (last: {msg}); "
                                          f"{len(queue)} job(s) never ran") from e
                    top_up()
                    continue
                top_up()
                on_result(job, recs, secs)
                progress.done(job, secs, cpu=cpu)
        finally:
            progress.close()
        return failed


def _short(e: Exception) -> str:
    cause = getattr(e, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__


class _Progress:
    """tqdm bar over block accesses replayed (rate = accesses/s, ETA) with jobs done;
    without a terminal, one log line per finished job instead."""

    def __init__(self, jobs: Sequence[Job]):
        from tqdm import tqdm

        self.n_jobs = len(jobs)
        self.n_done = 0
        self.acc_done = 0
        self.cpu = 0.0
        self.acc_total = sum(j.accesses for j in jobs)
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.bar = tqdm(total=self.acc_total, unit="acc", unit_scale=True,
                        desc="replay", smoothing=0.05, dynamic_ncols=True, disable=not self.tty,
                        postfix={"jobs": f"0/{self.n_jobs}"})

    def done(self, job: Job, secs: float, cpu: float = 0.0, failed: bool = False) -> None:
        self.n_done += 1
        self.cpu += cpu
        self.acc_done += job.accesses
        self.bar.set_postfix(jobs=f"{self.n_done}/{self.n_jobs}", refresh=False)
        self.bar.update(job.accesses)
        if not self.tty and not failed:
            rate = self.acc_done / max(time.perf_counter() - self.t0, 1e-9)
            eta = (self.acc_total - self.acc_done) / rate if rate else 0.0
            log.info("job %d/%d done: %s [%s] %d capacities in %.1fs (%.1fs CPU) | %.3g accesses/s, ETA %.0fs",
                     self.n_done, self.n_jobs, job.policy, ",".join(job.cost_models),
                     len(job.capacities), secs, cpu, rate, eta)

    def refresh(self) -> None:
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
        el = time.perf_counter() - self.t0
        log.info("%d/%d jobs in %.0fs wall, %.0fs CPU in the actors (%.3g block accesses/s)",
                 self.n_done, self.n_jobs, el, self.cpu, self.acc_done / max(el, 1e-9))
