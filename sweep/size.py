"""How big a sweep is, said before its first job: its replays with every axis multiplied
out, and how long they should take at the replay rates measured on this machine. On a
terminal, a sweep estimated above ASK_ABOVE_S asks before it starts (sweep.yes=true, CI
or no terminal: it goes on and says so).

The time of a replay comes from a model of its cost, scaled by what this machine
measured: each sweep appends to its journal the time its jobs took against what the
model predicted (`record_rate`), and the next estimate uses the median of the last
RATE_HISTORY such ratios (the shared 2-core machine this project runs on varies by a
third from hour to hour, docs/performance.md). Without any, the model's own rates:

- serve(): SERVE_S_PER_REQUEST + SERVE_S_PER_REPLICA x replicas seconds per request,
  fitted to docs/fleet.md's table (12,031 requests at 1x load, warm JIT: 0.47 s for one
  replica, 0.75 s for 2, 0.93 s for 4, 1.32 s for 8);
- simulate(): the plan's cost units (policy weight x block accesses x replays, sweep.plan)
  per second of one actor: CACHE_COST_PER_S for an exact replay (the bundled Mooncake
  trace, every policy at 65 capacities: 3.5e9 units in 361 CPU-s on the loaded machine),
  SAMPLED_COST_PER_S for a sampled one, whose replays carry a fixed cost beyond their
  sampled accesses (the default study: 2.5e10 units in 286 CPU-s, docs/performance.md);
- a policy solved over the whole trace (the ILP): SOLVE_S a capacity and cost model (about
  a second on the bundled Mooncake trace, up to 20 s at its size limit: docs/analysis.md).
"""
from __future__ import annotations

import logging
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numba

import sim_core.jit  # noqa: F401 - sets numba's cache directory for this source
from sim_core import get_policy

from .plan import counted

log = logging.getLogger("sweep")

ASK_ABOVE_S = 600.0
SERVE_S_PER_REQUEST = 3.1e-5
SERVE_S_PER_REPLICA = 1.0e-5
CACHE_COST_PER_S = 1.0e7
SAMPLED_COST_PER_S = 8.0e7
SOLVE_S = 5.0
#: Ray's start and MLflow's runs before the first job, the report after the last (2 cores).
FIXED_S = 25.0
#: The first replays after a change to sim_core compile their engines (sim_core/jit.py):
#: a cold first serving sweep's first jobs took 204 s (74 CPU-s) on the shared 2-core
#: machine, most of it compiling.
JIT_COLD_S = 180.0
RATE_HISTORY = 5


@dataclass(frozen=True)
class Size:
    """What a sweep will run: `results` points (curves x capacities) of which `todo` are
    left after resume, `replays` replays in `jobs` jobs, taking about `seconds`."""

    axes: str  # "2 policies x 2 loads x 4 routes (2 routers x 2 replica counts) x 3 capacities"
    serving: bool
    results: int
    todo: int
    replays: int  # serve() calls; a cache replay's block accesses (one pass may give a whole curve)
    jobs: int
    actors: int
    seconds: float
    basis: str  # where the rate came from
    cold: bool  # the JIT cache holds nothing for this source: the first replays compile

    def line(self) -> str:
        """'size: <axes> = 48 serve() replays in 16 jobs; about 1 min 10 s on 2 actors (...)'."""
        what = f"{self.results:,} serve() replays" if self.serving else f"{self.results:,} results"
        left = "" if self.todo == self.results else f", {self.todo:,} of them still to run"
        if not self.jobs:
            return f"size: {self.axes} = {what}; nothing to run (every result is known)"
        jobs = f"{self.jobs:,} job" + "s" * (self.jobs != 1)
        runs = f" in {jobs}" if self.serving else f", replaying {self.replays:.3g} block accesses in {jobs}"
        cold = f", plus about {duration(JIT_COLD_S)} compiling the engines (JIT cache cold)" if self.cold else ""
        return (f"size: {self.axes} = {what}{left}{runs}; about {duration(self.seconds)} on "
                f"{counted(self.actors, 'actor')}{cold} ({self.basis})")


def duration(s: float) -> str:
    """'45 s', '3 min 20 s', '25 min', '2 h 5 min'."""
    s = max(0, round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 and s < 600 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def axes(st) -> str:
    """Every axis of the sweep with its length, as they multiply."""
    pols = counted(len(st.spec.policies), "policy", "policies")
    caps = counted(len(st.caps), "capacity", "capacities")
    if st.fleet is not None:
        fl = st.fleet
        routers = list(dict.fromkeys(r.router for r in fl.routes))
        reps = sorted({r.replicas for r in fl.routes})
        how = (f"{counted(len(routers), 'router')} x {counted(len(reps), 'replica count')}"
               if len(fl.routes) > 1 else fl.routes[0].label)
        return f"{pols} x {counted(len(fl.loads), 'load')} x {counted(len(fl.routes), 'route')} ({how}) x {caps}"
    pools = f" x {counted(len(st.pools), 'pool')}" if st.spec.tiers else ""
    return f"{pols}{pools} x {caps} x {counted(len(st.spec.cost_models), 'cost model')}"


def actors(cluster) -> int:
    """The actors a sweep will start on this machine: cluster.actors, else cluster.num_cpus,
    else every CPU (joining a cluster: the same guess, before Ray says)."""
    return int(cluster.get("actors") or cluster.get("num_cpus") or os.cpu_count() or 1)


def kind(st) -> str:
    """What the rates are of: serve() replays, exact or sampled simulate() replays."""
    return "serve" if st.fleet is not None else "cache" if st.spec.sample_rate is None else "sampled"


def predicted(st, job) -> float:
    """The model's seconds for one job on one actor, before this machine's factor."""
    if job.load:
        reps = st.fleet.route(job.route).replicas
        return len(job.capacities) * st.trace.n_requests * (SERVE_S_PER_REQUEST + SERVE_S_PER_REPLICA * reps)
    if get_policy(job.policy).solve is not None:  # not a replay: its time is the solver's, not the accesses'
        return SOLVE_S * len(job.capacities)
    return job.est_cost / (CACHE_COST_PER_S if st.spec.sample_rate is None else SAMPLED_COST_PER_S)


def measure(st, actors: int) -> Size:
    """The size of `st` as planned (st.curves, st.jobs) and its time on `actors` actors:
    the jobs' work shared over the actors, never less than the longest job."""
    serving = st.fleet is not None
    results = len(st.curves) * len(st.caps)
    todo = results - sum(len(c.rows) for c in st.curves)
    replays = sum(len(j.capacities) if serving else j.accesses for j in st.jobs)
    factor, basis = speed_factor(st.journal, kind(st))
    times = [predicted(st, j) * factor for j in st.jobs]
    n = max(1, min(actors, len(st.jobs)))
    seconds = max(sum(times) / n, max(times, default=0.0)) + FIXED_S if times else 0.0
    return Size(axes=axes(st), serving=serving, results=results, todo=todo, replays=replays, jobs=len(st.jobs),
                actors=n, seconds=seconds, basis=basis, cold=bool(st.jobs) and jit_cold())


def speed_factor(journal, what: str) -> tuple[float, str]:
    """(this machine's time over the model's, what it rests on), from the journal's last
    RATE_HISTORY rate entries of this kind of replay; (1, the model) without any."""
    ratios = []
    if journal is not None:
        for e in journal.entries():
            if e.get("kind") == "rate" and e.get("what") == what and e.get("predicted_s", 0) > 0:
                ratios.append(float(e["secs"]) / float(e["predicted_s"]))
    ratios = ratios[-RATE_HISTORY:]
    if not ratios:
        rate = {"serve": "serve(): 3.1e-5 s per request + 1.0e-5 s per request and replica",
                "cache": f"{CACHE_COST_PER_S:.2g} cost units a second",
                "sampled": f"{SAMPLED_COST_PER_S:.2g} cost units a second sampled"}[what]
        return 1.0, f"the rates measured on the project's 2-core machine, {rate}; no sweep timed here yet"
    f = statistics.median(ratios)
    return f, (f"the replay rate of the last {counted(len(ratios), 'sweep')} here, {f:.2g}x the model's "
               f"(sweep/size.py)")


def record_rate(st, jobs_done: list) -> None:
    """Append to the journal what the jobs that ran took against the model: the next
    estimate's speed. `jobs_done`: (job, wall seconds) of the finished jobs."""
    if not jobs_done or st.journal is None:
        return
    secs = sum(s for _, s in jobs_done)
    pred = sum(predicted(st, j) for j, _ in jobs_done)
    if secs > 0 and pred > 0:
        st.journal.add_entry({"kind": "rate", "what": kind(st), "secs": round(secs, 3), "predicted_s": round(pred, 3),
                              "jobs": len(jobs_done)})


def jit_cold() -> bool:
    """Whether numba's cache directory for this sim_core source (sim_core/jit.py) holds no
    compiled engine yet: the first replays then compile."""
    d = Path(numba.config.CACHE_DIR)  # set by sim_core.jit for this source
    return not d.is_dir() or not any(d.rglob("*.nbi"))


def confirm(size: Size, cfg) -> bool:
    """Whether to go on: yes below ASK_ABOVE_S, with sweep.yes=true, in CI or without a
    terminal to ask (said in the log); otherwise the answer typed at the prompt."""
    total = size.seconds + (JIT_COLD_S if size.cold else 0.0)
    if total < ASK_ABOVE_S or cfg.sweep.get("yes"):
        return True
    long = f"this sweep should take about {duration(total)}"
    if os.environ.get("CI") or not (sys.stdin.isatty() and sys.stderr.isatty()):
        log.warning("%s; going on without asking (no terminal; sweep.yes=true says so)", long)
        return True
    print(f"{long}. Run it? [y/N] (sweep.yes=true skips this question) ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")
