"""A local, append-only journal of finished results: written before MLflow is told.

One JSON object per line:
  {"kind": "points", "time": ..., "uri": ..., "experiment": ..., "points": [
      {"key": <point key>, "run_id": <child run or null offline>, "step": <capacity index>,
       "cost_model": ..., "result": <sim_core.Result as a dict>, ["kind": "serve": the result is a
       sim_core.ServeResult (fleet=...),]
       "job": {"start": <epoch s>, "secs": <wall s>, "cpu": <CPU s>}}, ...]}
  {"kind": "delivered", "time": ..., "uri": ..., "done": [[run_id, step], ...]}
  {"kind": "rate", "time": ..., "what": "serve"|"cache", "secs": ..., "predicted_s": ..., "jobs": ...}
      (how long a sweep's jobs took against sweep.size's model: the next estimate's speed)

A sweep reads it to reuse finished results (by point key, whatever store they were meant
for), and `python -m sweep.sync` delivers points that never reached their run. Each line
is written with one write() on an O_APPEND descriptor and fsync'd, so concurrent sweeps
and a crash leave at worst a torn last line, which readers skip.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from sim_core import Result, ServeResult

log = logging.getLogger("sweep")


@dataclass(frozen=True)
class JobTime:
    """When the job that computed a result ran, on its actor: it travels with the result
    (journal, curve) so a curve run's duration is its jobs' time, however late it is
    delivered. One job may serve several capacities and cost models."""

    start: float  # epoch seconds
    secs: float  # wall seconds
    cpu: float  # CPU seconds

    def to_dict(self) -> dict:
        return {"start": self.start, "secs": self.secs, "cpu": self.cpu}

    @classmethod
    def from_dict(cls, d: dict | None) -> "JobTime | None":
        return None if not d else cls(float(d["start"]), float(d["secs"]), float(d["cpu"]))


@dataclass(frozen=True)
class Point:
    key: str
    run_id: str | None
    step: int
    cost_model: str
    result: Result  # or a sim_core.ServeResult (fleet=...)
    job: JobTime | None = None


def _result(point: dict):
    """A journaled point's result: a serving result (kind "serve") or a cache replay's."""
    if point.get("kind") == "serve":
        return ServeResult(**point["result"])
    return Result.from_dict(point["result"])


class Journal:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()

    def _append(self, entry: dict) -> None:
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def add_points(self, uri: str | None, experiment: str, points: list[Point]) -> None:
        self._append({"kind": "points", "time": time.time(), "uri": uri, "experiment": experiment,
                      "points": [{"key": p.key, "run_id": p.run_id, "step": p.step,
                                  "cost_model": p.cost_model, "result": p.result.to_dict(),
                                  **({"kind": "serve"} if isinstance(p.result, ServeResult) else {}),
                                  **({"job": p.job.to_dict()} if p.job else {})} for p in points]})

    def add_entry(self, entry: dict) -> None:
        """Any other record (a sweep's replay rate, sweep.size): readers skip kinds they do not know."""
        self._append({**entry, "time": time.time()})

    def mark_delivered(self, uri: str, done: list[tuple[str, int]]) -> None:
        self._append({"kind": "delivered", "time": time.time(), "uri": uri, "done": [list(d) for d in done]})

    def entries(self) -> Iterator[dict]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    yield json.loads(raw)
                except ValueError:
                    log.warning("%s:%d: unreadable journal line skipped (torn write?)", self.path, n)

    def results(self) -> dict[str, Result]:
        """point key -> Result, for every point ever journaled."""
        out = {}
        for e in self.entries():
            if e.get("kind") == "points":
                for p in e["points"]:
                    out[p["key"]] = _result(p)
        return out

    def job_times(self) -> dict[str, JobTime]:
        """point key -> the time of the job that computed it (results journaled before
        times were recorded have none)."""
        out = {}
        for e in self.entries():
            if e.get("kind") == "points":
                for p in e["points"]:
                    jt = JobTime.from_dict(p.get("job"))
                    if jt is not None:
                        out[p["key"]] = jt
        return out

    def undelivered(self) -> dict[str, list[tuple[str, Point]]]:
        """uri -> [(experiment, point)] journaled for a run but never marked delivered."""
        pending: dict[tuple[str, str, int], tuple[str, Point]] = {}
        done: set[tuple[str, str, int]] = set()
        for e in self.entries():
            if e.get("kind") == "points" and e.get("uri"):
                for p in e["points"]:
                    if p.get("run_id"):
                        pt = Point(p["key"], p["run_id"], int(p["step"]), p["cost_model"],
                                   _result(p), JobTime.from_dict(p.get("job")))
                        pending[(e["uri"], pt.run_id, pt.step)] = (e["experiment"], pt)
            elif e.get("kind") == "delivered":
                done.update((e["uri"], r, int(s)) for r, s in e["done"])
        out: dict[str, list[tuple[str, Point]]] = {}
        for (uri, run_id, step), v in pending.items():
            if (uri, run_id, step) not in done:
                out.setdefault(uri, []).append(v)
        return out
