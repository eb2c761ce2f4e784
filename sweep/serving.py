"""Serving results (sim_core.ServeResult, fleet=...) as the flat rows that the journal,
MLflow metrics, curve.csv/curves.csv and the report hold, and back."""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from sim_core import ServeResult
from sim_core.serving.result import serve_metric_fields

#: the pseudo cost model of a serving curve (one result per point; compute savings do not apply)
SERVE = "serve"
#: the router the others are measured against (fleet.router=[...]: the report, the table, advise)
BASELINE = "round_robin"
#: per-replica records flatten as replica<q>.<key>
REPLICA = "replica"
_REPLICA_INTS = {"requests", "prompt_tokens", "prefilled_tokens", "decode_tokens", "preemptions", "evictions",
                 "queue_peak", "steps"}


def load_label(load: float) -> str:
    return f"{load:g}x load"


def is_serve(res) -> bool:
    return isinstance(res, ServeResult)


_FIELDS = {f.name: f for f in dataclasses.fields(ServeResult)}
#: fields holding a mapping per lower tier (tier_hits, ...): flattened as <field>.<tier>
_PER_TIER = {k for k, f in _FIELDS.items() if f.metadata.get("per_tier")}
#: fields describing the run's setup (step_model, kv_budget): not a point's values, not in its row
_SETUP = {k for k, f in _FIELDS.items() if f.metadata.get("setup")}


def serve_row(res: ServeResult) -> dict:
    """A flat row: every field but per_replica, whose records flatten as replica<q>.<key>;
    a per-tier field as <field>.<tier> (as sim_core.Result.row does)."""
    out = {}
    for k, v in res.to_dict().items():
        if k in _PER_TIER:
            out.update({f"{k}.{t}": x for t, x in v.items()})
        elif k != "per_replica" and k not in _SETUP:
            out[k] = v
    for q, rec in enumerate(res.per_replica):
        out.update({f"{REPLICA}{q}.{k}": v for k, v in rec.items()})
    return out


def required_fields() -> tuple[str, ...]:
    """Fields every stored serving point has (goodput is NaN without an SLO, so not logged)."""
    return ("capacity_blocks", "replicas", "arrival_speedup") + tuple(
        k for k in serve_metric_fields() if not k.startswith("goodput_") and k not in _PER_TIER)


def from_row(row: Mapping, router: str | None = None) -> ServeResult:
    """The inverse of `serve_row` (a point read back from MLflow metrics, as floats);
    `router`, a text field that metrics cannot hold, from the curve run's tag (None: the
    field's default, as for a run from before routers were swept)."""
    d, reps = {k: {} for k in _PER_TIER}, {}
    if router:
        d["router"] = router
    for k, v in row.items():
        head, _, sub = str(k).partition(".")
        if sub and head in _PER_TIER:
            d[head][sub] = int(v) if v == v and float(v).is_integer() else v
        elif sub and head.startswith(REPLICA) and head[len(REPLICA):].isdigit():
            reps.setdefault(int(head[len(REPLICA):]), {})[sub] = int(v) if sub in _REPLICA_INTS and v == v else v
        elif k in _FIELDS and k != "per_replica" and isinstance(v, (int, float)):
            d[k] = int(v) if _FIELDS[k].type == "int" and v == v else v
    d["per_replica"] = [reps[q] for q in sorted(reps)]
    return ServeResult(**d)


def complete(row: Mapping) -> bool:
    """Whether a row read back from MLflow has every required field and every replica's
    record (a batch cut short has not)."""
    if any(row.get(k, math.nan) != row.get(k, math.nan) for k in required_fields()):
        return False
    return all(f"{REPLICA}{q}.requests" in row for q in range(int(row["replicas"])))
