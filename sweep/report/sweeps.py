"""A finished sweep read back from the tracking store: what the report is made of.

The source is the parent run: its `curves.csv` artifact (every curve of the sweep,
reused ones included; written at the end of every sweep, KILLED and FAILED ones too),
with `windows.csv` and `window_ranking.csv` when the sweep had `sim.window`, its params
(`policies`, `cost_models`, `n_capacities`), its `saturation_blocks` metric and its tags
(`trace_source`, `sampled`). Nothing is re-simulated.
"""
from __future__ import annotations

import csv
import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .families import POOL_SEP

_TEXT_COLUMNS = ("policy", "cost_model", "capacity_label", "pool", "router")
#: Integer columns of the CSVs (a float would print as "3.0" where the sweep printed "3").
_INT_COLUMNS = ("capacity_index", "window", "accesses", "windows")
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
    windows: list[dict] = field(default_factory=list)  # windows.csv rows (sweep.report.windows.window_rows)
    window_ranking: list[dict] = field(default_factory=list)  # window_ranking.csv rows (windows.ranking)
    fleet: str = ""  # a serving sweep (fleet=...): its engine, from the sweep run's kvsweep.fleet tag
    tier_rules: str = ""  # a tiered sweep: its tier config and whose rules it ran (kvsweep.tier_rules tag)
    setup: str = ""  # engine preset, hierarchy, hardware (kvsweep.setup tag)
    warnings: list = field(default_factory=list)  # what the sweep warned of (kvsweep.warnings tag)
    partial: str = ""  # a sweep cut short: "6 of 48 results (12%), stopped by SIGINT" (kvsweep.partial tag)

    def banner(self) -> str:
        """The report's first line for a sweep cut short ('' for a whole one)."""
        return (f"Partial: {self.partial}. Every table, figure and verdict in this report reads only these results; "
                f"re-run the sweep's command to complete it (what ran is reused)." if self.partial else "")

    def complete(self, cost_model: str) -> dict[str, list[dict]]:
        """The curves of a cost model that have every capacity (partial ones are left
        out of means and rankings, as they are out of the child runs' metrics)."""
        return {p: rs for p, rs in self.curves.get(cost_model, {}).items() if len(rs) == self.n_capacities}


def read_rows_csv(path: str | Path) -> list[dict]:
    """Rows of a CSV the sweep wrote: text columns as text, counts as int, the rest float
    (an empty cell is NaN)."""
    out = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = {}
            for k, v in raw.items():
                if k in _TEXT_COLUMNS:
                    row[k] = v or ""
                elif v in ("", None):
                    row[k] = math.nan
                elif k in _INT_COLUMNS:
                    row[k] = int(float(v))
                else:
                    row[k] = float(v)
            out.append(row)
    return out


def read_curves_csv(path: str | Path) -> dict[str, dict[str, list[dict]]]:
    """cost model -> curve label -> rows (numbers as floats, capacity_index as int). A
    tiered curve ("lru @ dram=1TiB") keeps its `pool`, from the column or, in a file from
    before it, from the label; a flat curve's rows have no `pool`, a serving curve's
    ("lru @ 2x load") have their `load`."""
    out: dict[str, dict[str, list[dict]]] = {}
    for row in read_rows_csv(path):
        served = row.get("load", math.nan) == row.get("load", math.nan)  # "lru @ 2x load": a load, not a pool
        pool = row.pop("pool", "") or (row["policy"].split(POOL_SEP, 1)[1]
                                       if POOL_SEP in row["policy"] and not served else "")
        if pool:
            row["pool"] = pool
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
        optional = {}
        for name in ("windows.csv", "window_ranking.csv"):  # sim.window sweeps only
            try:
                optional[name] = read_rows_csv(client.download_artifacts(run_id, name, d))
            except Exception:  # noqa: BLE001 - absent: the report has no windows section
                optional[name] = []
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
                      sample_rate=rate, windows=optional["windows.csv"],
                      window_ranking=optional["window_ranking.csv"], fleet=tags.get("kvsweep.fleet", ""),
                      tier_rules=tags.get("kvsweep.tier_rules", ""), setup=tags.get("kvsweep.setup", ""),
                      warnings=[w for w in tags.get("kvsweep.warnings", "").split("\n") if w],
                      partial="" if tags.get("kvsweep.partial", "false") == "false" else tags["kvsweep.partial"])


def _json_list(value: str | None) -> list[str]:
    try:
        v = json.loads(value) if value else []
    except ValueError:
        return []
    return [str(x) for x in v] if isinstance(v, list) else []
