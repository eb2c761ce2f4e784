"""What the user sees while jobs run: a tqdm bar over block accesses replayed (rate and
ETA) when stderr is a terminal, one log line per finished job otherwise."""
from __future__ import annotations

import logging
import sys
import time
from typing import Sequence

from .plan import Job, counted, job_label

log = logging.getLogger("sweep")


class Progress:
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
            log.info("job %d/%d done: %s [%s] %s in %.1fs (%.1fs CPU) | %.3g accesses/s, ETA %.0fs",
                     self.n_done, self.n_jobs, job_label(job), ",".join(job.cost_models),
                     counted(len(job.capacities), "capacity", "capacities"), secs, cpu, rate, eta)

    def refresh(self) -> None:
        self.bar.refresh()

    def work(self) -> dict:
        """What the jobs did, so a change in speed can be told from a change in work."""
        return {"jobs": self.n_done, "accesses_replayed": self.acc_done, "actor_cpu_s": round(self.cpu, 3),
                "jobs_wall_s": round(time.perf_counter() - self.t0, 3)}

    def close(self) -> None:
        self.bar.close()
        el = time.perf_counter() - self.t0
        log.info("%d/%d jobs in %.0fs wall, %.0fs CPU in the actors (%.3g block accesses/s)",
                 self.n_done, self.n_jobs, el, self.cpu, self.acc_done / max(el, 1e-9))
