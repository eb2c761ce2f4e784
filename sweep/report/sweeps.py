"""A finished sweep read back from the tracking store: what the report is made of.

The source is the parent run: its `curves.csv` artifact (every curve of the sweep,
reused ones included; written at the end of every sweep, KILLED and FAILED ones too),
its params (`policies`, `cost_models`, `n_capacities`), its `saturation_blocks` metric
and its tags (`trace_source`, `sampled`). Nothing is re-simulated.
"""
from __future__ import annotations

import csv
import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

_TEXT_COLUMNS = ("policy", "cost_model", "capacity_label")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


class NotFound(LookupError):
    """The target names no experiment or sweep run in the store."""


@dataclass
class SweepTable:
    experiment: str
    run_id: str
    run_name: str
    trace_source: str  # real | synthetic
    n_capacities: int
    curves: dict[str, dict[str, list[dict]]]  # cost model -> policy -> rows, ascending capacity
    cost_models: list[str] = field(default_factory=list)  # display order
    saturation_blocks: int | None = None  # capacities from here on hold the whole trace
    sample_rate: float | None = None  # None: exact replay

    def complete(self, cost_model: str) -> dict[str, list[dict]]:
        """The curves of a cost model that have every capacity (partial ones are left
        out of means and rankings, as they are out of the child runs' metrics)."""
        return {p: rs for p, rs in self.curves.get(cost_model, {}).items() if len(rs) == self.n_capacities}


def read_curves_csv(path: str | Path) -> dict[str, dict[str, list[dict]]]:
    """cost model -> policy -> rows (numbers as floats, capacity_index as int)."""
    out: dict[str, dict[str, list[dict]]] = {}
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = {}
            for k, v in raw.items():
                if k in _TEXT_COLUMNS:
                    row[k] = v
                elif k == "capacity_index":
                    row[k] = int(v)
                else:
                    row[k] = float(v) if v not in ("", None) else math.nan
            out.setdefault(row["cost_model"], {}).setdefault(row["policy"], []).append(row)
    for per in out.values():
        for rows in per.values():
            rows.sort(key=lambda r: r["capacity_blocks"])
    return out


def resolve_parent(client, target: str) -> str:
    """The sweep (parent) run of `target`: a sweep run id; a curve (child) run id, whose
    sweep is its parent; or an experiment name or id, whose newest sweep run it is."""
    from mlflow.entities import ViewType
    from mlflow.exceptions import MlflowException

    if _RUN_ID.match(target):
        try:
            run = client.get_run(target)
        except MlflowException:
            run = None
        if run is not None:
            tags = run.data.tags
            if tags.get("kvsweep.kind") == "curve" and tags.get("mlflow.parentRunId"):
                return tags["mlflow.parentRunId"]
            return run.info.run_id
    exp = client.get_experiment_by_name(target)
    if exp is None and target.isdigit():
        try:
            exp = client.get_experiment(target)
        except MlflowException:
            exp = None
    if exp is None:
        names = sorted(e.name for e in client.search_experiments(view_type=ViewType.ALL))
        raise NotFound(f"{target!r} is neither a run id nor an experiment in this store; "
                       f"experiments: {', '.join(names) or 'none'}")
    runs = client.search_runs([exp.experiment_id], "tags.`kvsweep.kind` = 'sweep'", ViewType.ACTIVE_ONLY,
                              max_results=1, order_by=["attributes.start_time DESC"])
    if not runs:
        raise NotFound(f"experiment {exp.name!r} has no sweep run")
    return runs[0].info.run_id


def load_sweep(client, run_id: str) -> SweepTable:
    """The sweep of parent run `run_id`, from its curves.csv and its record."""
    run = client.get_run(run_id)
    exp = client.get_experiment(run.info.experiment_id)
    with tempfile.TemporaryDirectory() as d:
        try:
            path = client.download_artifacts(run_id, "curves.csv", d)
        except Exception as e:  # noqa: BLE001 - any store error: say what is missing
            raise NotFound(f"sweep run {run_id} has no curves.csv (its driver stopped before the end; re-run "
                           f"the same sweep command to complete it): {e}") from None
        curves = read_curves_csv(path)
    params, metrics, tags = run.data.params, run.data.metrics, run.data.tags
    order = _json_list(params.get("cost_models"))
    cost_models = [m for m in order if m in curves] + sorted(m for m in curves if m not in order)
    n_caps = int(params["n_capacities"]) if "n_capacities" in params else max(
        (len(rs) for per in curves.values() for rs in per.values()), default=0)
    sat = metrics.get("saturation_blocks")
    if sat is None and "trace.unique_blocks" in metrics and "trace.max_request_blocks" in metrics:
        # runs from before the metric: sim_core.saturation_capacity from the trace summary
        sat = max(metrics["trace.unique_blocks"], metrics["trace.max_request_blocks"], 1)
    sampled = tags.get("sampled", "false")
    rate = float(sampled[2:]) if sampled.startswith("r=") else None
    return SweepTable(experiment=exp.name, run_id=run_id, run_name=run.info.run_name or run_id,
                      trace_source=tags.get("trace_source", "unknown"), n_capacities=n_caps, curves=curves,
                      cost_models=cost_models, saturation_blocks=int(sat) if sat is not None else None,
                      sample_rate=rate)


def _json_list(value: str | None) -> list[str]:
    try:
        v = json.loads(value) if value else []
    except ValueError:
        return []
    return [str(x) for x in v] if isinstance(v, list) else []
