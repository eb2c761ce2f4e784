"""How results become MLflow metrics and params (the runs themselves: sweep.tracking)."""
from __future__ import annotations

import json
from typing import Iterable, Sequence

from sim_core import Result

from .serving import is_serve, serve_row
from .plan import Capacity

MAX_PARAM = 6000  # MLflow's limit on a param value
MAX_TAG = 8000  # MLflow's limit on a tag value
# Per-capacity metrics are curves over step = the capacity in MiB, so that MLflow's chart
# view (x axis: step, log scale) draws them against capacity. Its runs table shows a
# metric's value at the largest step, which for every policy is the largest capacity
# (usually saturated: a tie); the prefix says so, and groups them in the chart view.
CURVE_PREFIX = "curve/"


def capacity_steps(capacities: Sequence[Capacity]) -> list[int]:
    """MLflow steps of the capacities: each one's size in MiB, raised where needed so the
    steps strictly increase (a model with blocks under a MiB could round two to one)."""
    steps, last = [], -1
    for c in capacities:
        last = max(round(c.gib * 1024), last + 1)
        steps.append(last)
    return steps


def window_metrics(res: Result, cost_model: str, label: str, now: int) -> list:
    """sim.window: `window/<capacity>/<metric>` time series of hit ratio, served ratio, token
    hit ratio and compute savings, step = the window's start in seconds of trace time (an
    integer, kept increasing), so MLflow charts them over the trace's time, not an index."""
    from mlflow.entities import Metric

    w = res.windows
    if not w:
        return []
    out, step = [], -1
    for i, acc in enumerate(w["accesses"]):
        vals = {k: w[k][i] for k in ("hit_ratio", "served_ratio", "token_hit_ratio")}
        vals.update(compute_savings=w["compute_savings"][cost_model][i], accesses=acc)
        start = w["start_s"][i]
        step = max(step + 1, round(start)) if start == start else step + 1
        out += [Metric(f"window/{label}/{k}", float(v), now, step) for k, v in vals.items() if v == v]
    return out


def chunks(items: list, n: int) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def param_value(v) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= MAX_PARAM else s[: MAX_PARAM - 20] + "...(truncated)"


def finite(x) -> bool:
    try:
        return x == x and abs(float(x)) != float("inf")
    except (TypeError, ValueError):
        return False


def point_metrics(res: Result, cost_model: str, cap: Capacity, step: int, now: int) -> list:
    """One capacity of a curve: `curve/capacity_gib`, `curve/<field>` for every field of
    the result's row, at `step`, and its window series; or a serving result's fields."""
    from mlflow.entities import Metric

    ms = [Metric(CURVE_PREFIX + "capacity_gib", cap.gib, now, step)]
    serving = is_serve(res)  # fleet=...: every ServeResult field, replica<q>.<key> per replica
    for k, v in (serve_row(res) if serving else res.row(cost_model)).items():
        if isinstance(v, (int, float)) and v == v:  # NaN = unavailable on a sample (or no SLO): not logged
            ms.append(Metric(CURVE_PREFIX + k, float(v), now, step))
    return ms if serving else ms + window_metrics(res, cost_model, cap.label, now)
