"""What the user sees while jobs run: a tqdm bar when stderr is a terminal, one log line
per finished job otherwise. A cache replay's bar counts block accesses replayed; a
serving sweep's (fleet=...) counts serve() replays, one job each by default (sweep.plan),
so the bar moves with every replay rather than with every curve."""
from __future__ import annotations

import logging
import sys
import time
from typing import Sequence

from .plan import Job, counted, job_label

log = logging.getLogger("sweep")


class Progress:
    def __init__(self, jobs: Sequence[Job], serving: bool = False, note: str = ""):
        from tqdm import tqdm

        self.serving = serving
        self.n_jobs = len(jobs)
        self.n_done = 0
        self.acc_done = 0
        self.replays = 0  # serve() calls done (fleet=...)
        self.replays_total = sum(len(j.capacities) for j in jobs)
        self.cpu = 0.0
        self.timed: list = []  # (job, wall s) of every job that finished: sweep.size.record_rate
        self.acc_total = sum(j.accesses for j in jobs)
        self.t0 = time.perf_counter()
        self.compiling = bool(note)
        self.tty = sys.stderr.isatty()
        self.bar = tqdm(total=self.replays_total if serving else self.acc_total, unit="replay" if serving else "acc",
                        unit_scale=not serving, desc=note or ("serve" if serving else "replay"), smoothing=0.05,
                        dynamic_ncols=True, disable=not self.tty, postfix={"jobs": f"0/{self.n_jobs}"})

    def done(self, job: Job, secs: float, cpu: float = 0.0, failed: bool = False) -> None:
        self.n_done += 1
        self.cpu += cpu
        self.acc_done += job.accesses
        if not failed:
            self.replays += len(job.capacities)
            self.timed.append((job, secs))
        if self.n_done == 1 and self.compiling:  # compiled by now
            self.compiling = False
            self.bar.set_description("serve" if self.serving else "replay", refresh=False)
        self.bar.set_postfix(jobs=f"{self.n_done}/{self.n_jobs}", refresh=False)
        self.bar.update(len(job.capacities) if self.serving else job.accesses)
        if not self.tty and not failed:
            el = max(time.perf_counter() - self.t0, 1e-9)
            if self.serving:
                eta = (self.replays_total - self.replays) * el / max(self.replays, 1)
                speed = f"{self.replays / el:.3g} replays/s"
            else:
                speed = f"{self.acc_done / el:.3g} accesses/s"
                eta = (self.acc_total - self.acc_done) * el / max(self.acc_done, 1)
            log.info("job %d/%d done: %s [%s] %s in %.1fs (%.1fs CPU) | %s, ETA %.0fs",
                     self.n_done, self.n_jobs, job_label(job), ",".join(job.cost_models),
                     counted(len(job.capacities), "capacity", "capacities"), secs, cpu, speed, eta)

    def refresh(self) -> None:
        self.bar.refresh()

    def work(self) -> dict:
        """What the jobs did, so a change in speed can be told from a change in work; the
        planned counts beside the done ones, so an interrupted sweep says how far it got."""
        return {"jobs": self.n_done, "jobs_planned": self.n_jobs, "accesses_replayed": self.acc_done,
                "replays": self.replays, "replays_planned": self.replays_total, "actor_cpu_s": round(self.cpu, 3),
                "jobs_wall_s": round(time.perf_counter() - self.t0, 3)}

    def close(self) -> None:
        self.bar.close()
        el = time.perf_counter() - self.t0
        speed = (f"{self.replays / max(el, 1e-9):.3g} serve() replays/s" if self.serving
                 else f"{self.acc_done / max(el, 1e-9):.3g} block accesses/s")
        log.info("%d/%d jobs in %.0fs wall, %.0fs CPU in the actors (%s)", self.n_done, self.n_jobs, el, self.cpu, speed)
