"""A sweep's curves in memory: one `Curve` per child run, and the rows (capacity labels +
one cost model's view of a sim_core.Result) that tables, CSVs and the report are made of."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from sim_core import Result

from .serving import is_serve, load_label, serve_row
from .keys import CurveIdentity
from .plan import Capacity

LABEL_COLUMNS = ("capacity_index", "capacity_label", "capacity_gib")


def csv_columns(rows: Sequence[dict], lead: Sequence[str] = LABEL_COLUMNS) -> tuple[str, ...]:
    """`lead` then every key of the rows in first-seen order (a lower tier's fields,
    `tier_hits.<name>`, exist only in a tiered sweep)."""
    out = dict.fromkeys(lead)
    for r in rows:
        out.update(dict.fromkeys(r))
    return tuple(out)


@dataclass
class Curve:
    """One child run: a (policy, cost model[, pool]) curve over the sweep's HBM capacities."""

    policy: str
    cost_model: str
    identity: CurveIdentity
    capacities_blocks: tuple[int, ...]
    run_id: str | None = None
    status: str = "NEW"  # NEW | REUSED (finished before) | RESUMED | CREATED
    stored: set = field(default_factory=set)  # capacity indices already logged to the run
    rows: dict = field(default_factory=dict)  # capacity index -> Result
    done: bool = False
    supersede: str | None = None  # a run of the same key that this one replaces (resume=false)
    times: dict = field(default_factory=dict)  # capacity index -> journal.JobTime of its job
    start_ms: int | None = None  # the run's start time
    pool: str = ""  # the lower tiers' sizes, e.g. "dram=1TiB" ("" = a flat cache)
    load: float = 0.0  # fleet=...: the arrival_speedup it is served at (0 = a cache replay)
    route: str = ""  # fleet=...: its replicas and router, "kv_router x8" (sweep.fleet.Route.label)

    @property
    def label(self) -> str:
        """The policy, and the pool it runs above HBM in a tiered sweep or the load and
        route it is served at (fleet=..., "lru @ 2x load, kv_router x8"): how tables, CSVs
        and run names tell its curves apart."""
        if self.load:  # a pool under every replica (tier=... with fleet=...): "... above dram=1TiB,pool=8TiB"
            return (f"{self.policy} @ {load_label(self.load)}" + (f", {self.route}" if self.route else "")
                    + (f" above {self.pool}" if self.pool else ""))
        return f"{self.policy} @ {self.pool}" if self.pool else self.policy

    def __post_init__(self):
        self.key = self.identity.curve_key(self.capacities_blocks)
        self.base_key = self.identity.base_key
        self.point_keys = [self.identity.point_key(b) for b in self.capacities_blocks]

    def replay_time(self) -> tuple[float, float, int]:
        """(wall s, CPU s, jobs) of the jobs that computed this curve's known points, each
        job once (a job serves several capacities, and every cost model of a cost-unaware
        policy)."""
        jobs = set(self.times.values())
        return sum(j.secs for j in jobs), sum(j.cpu for j in jobs), len(jobs)


@dataclass
class SweepFacts:
    """What the end of a sweep needs beyond its curves: the report's context and the
    LRU curves the *_vs_lru_* metrics compare with (cost model -> curve; LRU of this
    sweep, or one already computed with the same settings)."""

    trace_source: str = "unknown"
    saturation_blocks: int | None = None
    sample_rate: float | None = None
    cost_models: Sequence[str] = ()
    references: dict = field(default_factory=dict)
    windows: list = field(default_factory=list)  # sweep.report.windows.window_rows (sim.window)
    window_ranking: list = field(default_factory=list)  # sweep.report.windows.ranking of them
    fleet: str = ""  # a serving sweep's engine, "fleet=dynamo: engine dynamo, ..." ("" = a cache replay)
    tier_rules: str = ""  # a tiered sweep's tier config and whose rules it ran ("" = no tiers)
    setup: str = ""  # engine preset, hierarchy, hardware (sweep.record.setup)
    warnings: tuple = ()  # what the sweep warned of at its start (an HBM capacity above the part's)
    partial: str = ""  # sweep.partial.summary: the share of results a sweep cut short has ("" = all)


def result_row(res, cost_model: str) -> dict:
    """A result's flat fields: a sim_core.Result under one cost model, or a serving
    result (fleet=...: sweep.fleet.serve_row)."""
    return serve_row(res) if is_serve(res) else res.row(cost_model)


def row_dict(capacities: Sequence[Capacity], idx: int, res: Result, cost_model: str) -> dict:
    """A CSV/table row: the capacity's labels and the result under one cost model."""
    cap = capacities[idx]
    return {"capacity_index": idx, "capacity_label": cap.label, "capacity_gib": cap.gib,
            **result_row(res, cost_model)}


def curves_by_model(capacities: Sequence[Capacity], curves: Sequence[Curve]) -> dict[str, dict[str, list[dict]]]:
    """cost model -> curve label -> rows (ascending capacity), for plots and tables; a
    tiered sweep's rows carry their `pool` (curves.csv keeps it, the report groups by it),
    a serving sweep's their `load` (the arrival_speedup; router and replicas are result fields)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for c in curves:
        if c.rows:
            out.setdefault(c.cost_model, {})[c.label] = [{**row_dict(capacities, i, c.rows[i], c.cost_model),
                                                           **({"pool": c.pool} if c.pool else {}),
                                                           **({"load": c.load} if c.load else {})}
                                                          for i in sorted(c.rows)]
    return out


def write_csv(path: Path, rows: Sequence[dict], columns: Sequence[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
