"""Scheduling jobs over simulator actors, apart from the caller's loop (the way Ray's
ActorPool is): the pool owns the queue, in-flight bookkeeping, retries and the
replacement of actors that die. The caller iterates `results()`."""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from . import signals
from .plan import Job, counted

log = logging.getLogger("sweep")


class SweepFailed(RuntimeError):
    """A job raised in a worker (with fail-fast), or every worker died."""


@dataclass
class Outcome:
    job: Job
    results: list | None  # sim_core.Result per capacity; None when the job failed
    secs: float = 0.0
    cpu: float = 0.0
    error: str | None = None
    start: float = 0.0  # epoch seconds when the job began on its actor


class ShardPool:
    """`make_actor()` returns a new actor handle whose `run.remote(job)` gives
    (job id, results, wall s, CPU s, start epoch s). Each live actor has up to `inflight` jobs queued.
    An actor that dies (crash, node lost, OOM kill) is replaced, at most once per
    original actor, and its jobs are retried once elsewhere."""

    def __init__(self, make_actor: Callable[[], object], n_actors: int, inflight: int = 2):
        self.make_actor = make_actor
        self.n_actors = max(1, int(n_actors))
        self.inflight = max(1, int(inflight))
        self.actors: list = []

    def results(self, jobs: Sequence[Job], fail_fast: bool = False,
                on_idle: Callable[[], None] | None = None) -> Iterator[Outcome]:
        import ray

        self.actors = [self.make_actor() for _ in range(min(self.n_actors, len(jobs)))]
        queue = deque(jobs)
        pending: dict = {}
        dead: set = set()
        retried: set = set()
        respawns = len(self.actors)
        # A replacement gets jobs only once it runs: after a node is lost there may be no
        # free CPU for it, and jobs handed to an actor that never starts would wait forever.
        warming: dict = {}  # readiness probe (actor.info) -> replacement actor
        died = (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError,
                ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError)

        def top_up() -> None:
            for a in self.actors:
                if a in dead or any(a is w for w in warming.values()):
                    continue
                n = sum(1 for x, _ in pending.values() if x is a)
                while n < self.inflight and queue:
                    job = queue.popleft()
                    pending[a.run.remote(job)] = (a, job)
                    n += 1

        top_up()
        while pending or (queue and warming):
            signals.check()
            ready, _ = ray.wait(list(pending) + list(warming), num_returns=1, timeout=1.0)
            if not ready:
                if on_idle:
                    on_idle()
                continue
            if ready[0] in warming:  # a replacement is up (or failed to start)
                new = warming.pop(ready[0])
                try:
                    ray.get(ready[0])
                except ray.exceptions.RayError as e:
                    dead.add(new)
                    if len(dead) == len(self.actors):
                        raise SweepFailed(f"every simulator actor died (last replacement: {_short(e)}); "
                                          f"{len(queue)} job(s) never ran") from e
                top_up()
                continue
            actor, job = pending.pop(ready[0])
            try:
                _, recs, secs, cpu, start = ray.get(ready[0])
            except ray.exceptions.RayError as e:
                msg = (f"job {job.id} ({job.policy}, {','.join(job.cost_models)}, "
                       f"{counted(len(job.capacities), 'capacity', 'capacities')}) failed: {_short(e)}")
                if isinstance(e, died):  # the worker is gone, maybe not the job's fault
                    if actor not in dead:
                        dead.add(actor)
                        if respawns > 0:
                            respawns -= 1
                            new = self.make_actor()
                            self.actors.append(new)
                            warming[new.info.remote()] = new
                    if job.id not in retried and len(dead) < len(self.actors):
                        retried.add(job.id)
                        log.warning("%s; retrying it once on another actor", msg)
                        queue.appendleft(job)
                        top_up()
                        continue
                if fail_fast:
                    raise SweepFailed(msg) from e
                log.error("%s", msg)
                yield Outcome(job, None, error=msg)
                if len(dead) == len(self.actors):
                    raise SweepFailed(f"every simulator actor died (last: {msg}); "
                                      f"{len(queue)} job(s) never ran") from e
                top_up()
                continue
            top_up()
            yield Outcome(job, recs, secs, cpu, start=start)

    def kill(self) -> None:
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []


def _short(e: Exception) -> str:
    cause = getattr(e, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
