"""MLflow records of a sweep, written as results stream in.

experiment   one per trace (its name; synthetic traces get a "-synthetic" suffix)
parent run   one per sweep: resolved config (flattened params + config.yaml), trace summary
             (params/metrics), tags trace_source / git commit / package versions; at the end
             curves.csv (every curve) and one PNG per cost model (analysis.plots)
child run    one per (policy, cost model): metrics hit_ratio, compute_savings, hole and
             counter metrics with step = capacity index; params with the capacity list in
             blocks and GiB; curve.csv. FINISHED as soon as its last capacity arrives.

An interrupted sweep leaves finished child runs FINISHED, partial ones KILLED (with what
they had), and the parent KILLED; a failed one marks them FAILED.
"""
from __future__ import annotations

import csv
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from .plan import Capacity, Job

log = logging.getLogger("sweep")

# per-capacity values copied from sim_core.simulate records into metrics and CSV columns
CURVE_METRICS = (
    "hit_ratio", "compute_savings", "holes_total", "holes_per_request_mean", "holes_per_request_p50",
    "holes_per_request_p99", "holes_per_request_max", "hole_length_mean", "recomputed_blocks",
    "evictions", "oversized_requests", "oversized_blocks", "max_resident_blocks",
)
CSV_COLUMNS = ("capacity_index", "capacity_label", "capacity_gib", "capacity_blocks", "accesses",
               "hits") + CURVE_METRICS
MAX_PARAM = 6000  # MLflow's limit on a param value


def default_uri(cwd: str | os.PathLike | None = None) -> str:
    """sqlite:///<abs cwd>/mlflow.db (the user's directory, never Hydra's)."""
    return "sqlite:///" + str(Path(cwd or os.getcwd()).resolve() / "mlflow.db")


def sqlite_path(uri: str) -> Path | None:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    return None


def ui_command(uri: str) -> str:
    if sqlite_path(uri) is not None:
        return f"mlflow ui --backend-store-uri {uri}"
    return f"open {uri} in a browser"


def quiet_mlflow() -> None:
    """Before importing mlflow: its own handler would print INFO (database migrations)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    for name in ("mlflow", "alembic", "sqlalchemy", "urllib3", "git"):
        logging.getLogger(name).setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")


def _chunks(items: list, n: int) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _param_value(v) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= MAX_PARAM else s[: MAX_PARAM - 20] + "...(truncated)"


def _finite(x) -> bool:
    try:
        return x == x and abs(float(x)) != float("inf")
    except (TypeError, ValueError):
        return False


@dataclass
class _Child:
    policy: str
    cost_model: str
    run_id: str
    expected: int
    rows: dict = field(default_factory=dict)  # capacity index -> row
    done: bool = False
    failed: bool = False


class Tracker:
    def __init__(self, uri: str, experiment: str, artifact_location: str | None = None):
        quiet_mlflow()
        from mlflow.tracking import MlflowClient

        self.uri = uri
        db = sqlite_path(uri)
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
            if artifact_location is None:
                artifact_location = (db.parent / "mlruns").as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifact_location)
        else:
            self.experiment_id = exp.experiment_id
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(self.experiment_id)
        self.experiment = experiment
        self.parent_id: str | None = None
        self.children: dict[tuple[str, str], _Child] = {}
        self.capacities: list[Capacity] = []
        self.child_params: dict[str, dict] = {}
        self.child_tags: dict = {}
        self.trace_name = experiment

    # ------------------------------------------------------------------ parent
    def start_parent(self, *, run_name: str, params: dict, tags: dict, metrics: dict,
                     texts: dict[str, str], capacities: Sequence[Capacity],
                     child_params: dict[str, dict], child_tags: dict, trace_name: str) -> str:
        """Create the sweep's parent run; `child_params[policy]` go on each child run."""
        from mlflow.entities import Metric, Param, RunTag

        self.capacities = list(capacities)
        self.child_params = child_params
        self.child_tags = dict(child_tags)
        self.trace_name = trace_name
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={k: str(v) for k, v in tags.items()})
        self.parent_id = run.info.run_id
        ps = [Param(k[:250], _param_value(v)) for k, v in params.items()]
        for chunk in _chunks(ps, 100):
            self.client.log_batch(self.parent_id, params=chunk)
        now = int(time.time() * 1000)
        ms = [Metric(k[:250], float(v), now, 0) for k, v in metrics.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v)]
        for chunk in _chunks(ms, 1000):
            self.client.log_batch(self.parent_id, metrics=chunk)
        for name, text in texts.items():
            self.client.log_text(self.parent_id, text, name)
        return self.parent_id

    # ------------------------------------------------------------------ children
    def _child(self, policy: str, cost_model: str) -> _Child:
        key = (policy, cost_model)
        ch = self.children.get(key)
        if ch is not None:
            return ch
        from mlflow.entities import Param

        tags = {"mlflow.parentRunId": self.parent_id, "policy": policy, "cost_model": cost_model,
                **{k: str(v) for k, v in self.child_tags.items()}}
        run = self.client.create_run(self.experiment_id, run_name=f"{policy} | {cost_model}", tags=tags)
        caps = self.capacities
        params = {
            "policy": policy,
            "cost_model": cost_model,
            "n_capacities": len(caps),
            "capacities_blocks": [c.blocks for c in caps],
            "capacities_gib": [round(c.gib, 6) for c in caps],
            **self.child_params.get(policy, {}),
        }
        ps = [Param(k[:250], _param_value(v)) for k, v in params.items()]
        for chunk in _chunks(ps, 100):
            self.client.log_batch(run.info.run_id, params=chunk)
        ch = _Child(policy, cost_model, run.info.run_id, expected=len(caps))
        self.children[key] = ch
        return ch

    def record(self, job: Job, records: Sequence[dict]) -> list[tuple[str, str]]:
        """Log one finished job. Returns the (policy, cost model) curves it completed."""
        from mlflow.entities import Metric

        completed = []
        now = int(time.time() * 1000)
        for m in job.cost_models:
            ch = self._child(job.policy, m)
            metrics = []
            for idx, rec in zip(job.cap_indices, records):
                cap = self.capacities[idx]
                if int(rec["capacity_blocks"]) != cap.blocks:
                    raise RuntimeError(f"result for {cap.blocks} blocks came back as {rec['capacity_blocks']}")
                row = self._row(cap, rec, m)
                ch.rows[idx] = row
                metrics.append(Metric("capacity_gib", cap.gib, now, idx))
                metrics.append(Metric("capacity_blocks", float(cap.blocks), now, idx))
                for k in CURVE_METRICS:
                    metrics.append(Metric(k, float(row[k]), now, idx))
            for chunk in _chunks(metrics, 1000):
                self.client.log_batch(ch.run_id, metrics=chunk)
            if len(ch.rows) == ch.expected and not ch.done and not ch.failed:
                self._finish_child(ch, "FINISHED")
                completed.append((job.policy, m))
        return completed

    def fail(self, job: Job, message: str) -> None:
        """A job raised: its curves end FAILED (with the capacities they already had)."""
        for m in job.cost_models:
            ch = self._child(job.policy, m)
            ch.failed = True
            if not ch.done:
                self.client.set_tag(ch.run_id, "error", message[:5000])
                self._finish_child(ch, "FAILED")

    @staticmethod
    def _row(cap: Capacity, rec: dict, cost_model: str) -> dict:
        row = {"capacity_index": cap.index, "capacity_label": cap.label, "capacity_gib": cap.gib,
               "capacity_blocks": cap.blocks, "accesses": rec["accesses"], "hits": rec["hits"]}
        for k in CURVE_METRICS:
            row[k] = rec["compute_savings"][cost_model] if k == "compute_savings" else rec[k]
        return row

    def _finish_child(self, ch: _Child, status: str) -> None:
        from mlflow.entities import Metric

        rows = [ch.rows[i] for i in sorted(ch.rows)]
        if rows:
            now = int(time.time() * 1000)
            summary = [Metric("hit_ratio_mean", sum(r["hit_ratio"] for r in rows) / len(rows), now, 0),
                       Metric("compute_savings_mean", sum(r["compute_savings"] for r in rows) / len(rows), now, 0)]
            self.client.log_batch(ch.run_id, metrics=summary)
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "curve.csv"
                write_csv(path, rows, CSV_COLUMNS)
                self.client.log_artifact(ch.run_id, str(path))
        self.client.set_terminated(ch.run_id, status)
        ch.done = True

    # ------------------------------------------------------------------ end
    def curves(self) -> dict[str, dict[str, list[dict]]]:
        """cost model -> policy -> rows (ascending capacity), for plots and tables."""
        out: dict[str, dict[str, list[dict]]] = {}
        for (p, m), ch in self.children.items():
            if ch.rows:
                out.setdefault(m, {})[p] = [ch.rows[i] for i in sorted(ch.rows)]
        return out

    def close(self, status: str = "FINISHED") -> None:
        """End open child runs with `status` (KILLED/FAILED) and the parent with `status`,
        after attaching every curve and the plots to the parent. Never raises."""
        for ch in self.children.values():
            if not ch.done:
                try:
                    self._finish_child(ch, "KILLED" if status == "FINISHED" else status)
                except Exception as e:  # noqa: BLE001
                    log.warning("could not close child run %s: %s", ch.run_id, e)
        if self.parent_id is None:
            return
        try:
            self._parent_artifacts()
        except Exception as e:  # noqa: BLE001 - plots must not lose the status update
            log.warning("could not attach curves/plots to the parent run: %s", e)
        try:
            self.client.set_terminated(self.parent_id, status)
        except Exception as e:  # noqa: BLE001
            log.warning("could not mark the parent run %s: %s", status, e)

    def _parent_artifacts(self) -> None:
        curves = self.curves()
        if not curves:
            return
        from analysis.plots import plot_curves

        with tempfile.TemporaryDirectory() as d:
            rows = []
            for m, per_policy in curves.items():
                for p, rs in per_policy.items():
                    rows += [{"policy": p, "cost_model": m, **r} for r in rs]
            path = Path(d) / "curves.csv"
            write_csv(path, rows, ("policy", "cost_model") + CSV_COLUMNS)
            self.client.log_artifact(self.parent_id, str(path))
            for m, per_policy in sorted(curves.items()):
                png = Path(d) / f"curves_{m}.png"
                plot_curves(per_policy, png, title=f"{self.trace_name} - cost model {m}")
                self.client.log_artifact(self.parent_id, str(png), "plots")


def write_csv(path: Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
