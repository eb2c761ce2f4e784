"""Ray for the sweep: start (or join) a cluster, one `SimulatorShard` actor per CPU, one
shared trace.

The trace's numpy arrays go into the object store once (ray.put); every actor maps
them zero-copy (read-only) and replays jobs against them with sim_core.simulate (or, in a
serving sweep, fleet=..., sim_core.serve).
Numba's on-disk JIT cache (sim_core/jit.py) lets every actor reuse compiled engines.
Scheduling lives in sweep.pool; this module owns Ray's lifecycle.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from pathlib import Path

from sim_core import serve, simulate

from . import signals
from .plan import Job
from .pool import ShardPool
from .traces import from_payload, payload_bytes

log = logging.getLogger("sweep")

_REPO_ROOT = Path(__file__).resolve().parent.parent


class SimulatorShard:
    """Ray actor: holds the shared trace, replays jobs on it."""

    def __init__(self, payload: dict, sim_kwargs: dict):
        logging.getLogger("numba").setLevel(logging.WARNING)
        self.trace = from_payload(payload)
        self.sim_kwargs = dict(sim_kwargs)
        self.serve_kwargs = self.sim_kwargs.pop("serve", None)  # fleet=...: serve()'s settings
        self.deployments = self.serve_kwargs.pop("deployments") if self.serve_kwargs else {}  # route label ->

    def info(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname()}

    def run(self, job: Job) -> tuple[int, list, float, float, float]:
        """(job id, one sim_core.Result per capacity, wall seconds, CPU seconds, start as
        epoch seconds). A serving job (job.load, fleet=...) gives one sim_core.ServeResult
        per capacity, from one serve() call each, on the job's route (replicas, router)."""
        started = time.time()
        t0, c0 = time.perf_counter(), time.process_time()
        if job.load:
            dep = self.deployments[job.route]
            if job.tiers:  # tier=... with fleet=...: this pool under every replica (a shared tier: the fleet's)
                dep = dep.with_tiers([dict(t) for t in job.tiers])
            recs = [serve(self.trace, job.policy, b, arrival_speedup=job.load, params=dict(job.params),
                          deployment=dep, **self.serve_kwargs) for b in job.capacities]
            return job.id, recs, time.perf_counter() - t0, time.process_time() - c0, started
        recs = simulate(self.trace, job.policy, list(job.capacities), cost_models=list(job.cost_models),
                        params=dict(job.params), tiers=[dict(t) for t in job.tiers] or None, **self.sim_kwargs)
        return job.id, recs, time.perf_counter() - t0, time.process_time() - c0, started


def _quiet_ray_env() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Workers of a local instance inherit this environment: make sure they import the
    # same sim_core/sweep as the driver, also from a checkout that is not installed.
    pp = os.environ.get("PYTHONPATH", "")
    if str(_REPO_ROOT) not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), pp) if p)


@contextlib.contextmanager
def _keep_our_sigterm_handler():
    """ray.init() installs SIGTERM handlers that sys.exit() from inside its start-up (and
    one run swallowed it: the sweep went on). While Ray starts, its installer is a no-op,
    so a SIGTERM raises our Interrupted and the sweep stops the same way at every phase.
    (A private Ray function: if it is gone, signals.install() after init still wins.)"""
    import ray._private.utils as ray_utils

    original = getattr(ray_utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original


class RayCluster:
    """Context manager: starts a private Ray instance (or joins `cluster.address`) and
    always shuts it down, also when a signal interrupts start-up."""

    def __init__(self, cluster_cfg):
        self.cfg = cluster_cfg
        self.n_actors = 0
        self.pool: ShardPool | None = None

    def __enter__(self) -> "RayCluster":
        _quiet_ray_env()
        import ray

        c = self.cfg
        address = c.get("address")
        common = dict(logging_level=logging.ERROR, log_to_driver=bool(c.get("log_to_driver", False)))
        try:
            with _keep_our_sigterm_handler():
                self._init(ray, address, c, common)
        except BaseException:
            self.shutdown()
            raise
        signals.install()  # in case ray.init() replaced our handlers after all
        try:
            signals.check()  # a signal whose exception Ray's start-up swallowed
        except signals.Interrupted:
            self.shutdown()
            raise
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.n_actors = int(c.get("actors") or max(1, cpus))
        return self

    @staticmethod
    def _init(ray, address, c, common) -> None:
        if address:
            log.info("joining Ray cluster at %s", address)
            ray.init(address=str(address), **common)
            return
        num_cpus = int(c.get("num_cpus") or os.cpu_count() or 1)
        kw = dict(num_cpus=num_cpus, include_dashboard=False, **common)
        if c.get("object_store_memory"):
            kw["object_store_memory"] = int(c.object_store_memory)
        log.info("starting a local Ray instance with %d CPU(s)", num_cpus)
        ray.init(**kw)

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        import ray

        if self.pool is not None:
            self.pool.kill()
        if ray.is_initialized():
            ray.shutdown()

    def pool_for(self, payload: dict, sim_kwargs: dict, n_jobs: int) -> ShardPool:
        """A pool of simulator actors sharing one object-store copy of the trace."""
        import ray

        t_put = time.perf_counter()
        trace_ref = ray.put(payload)
        n = min(self.n_actors, n_jobs)
        log.info("%s in the object store (%.1f MB, %.1fs); %d simulator actor(s)",
                 "samples" if payload.get("kind") == "samples" else "trace", payload_bytes(payload) / 1e6,
                 time.perf_counter() - t_put, n)
        Shard = ray.remote(num_cpus=1, max_restarts=0)(SimulatorShard)
        self.pool = ShardPool(lambda: Shard.remote(trace_ref, sim_kwargs), n)
        return self.pool
