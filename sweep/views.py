"""MLflow views of a sweep that open ready to read: one per cost model.

What MLflow 3.17's UI lets a logger decide (read from its JS bundle, mlflow/server/js):
- the experiment kind is the browser's: `?workflowType=machine_learning` in the URL, or
  the GenAI / Model training switch, remembered per browser. The experiment tag
  `mlflow.experimentKind` is not read (its feature flag is on), so every link we print
  carries the parameter;
- a *shared view*: an experiment tag `mlflow.sharedViewState.<key>` holding the runs page
  state as JSON, opened by `?viewStateShareKey=<key>`. It sets the runs shown (a search
  filter), their order, the table's columns, how many runs the charts draw, and the
  charts themselves (metric, x axis, log scale, layout). Without it the Chart view draws
  the first 10 runs on a linear step axis and the table shows no metric;
- a line chart's x axis takes a log scale only when it is the step: a curve's step is the
  capacity in MiB (sweep.metrics.capacity_steps), so the chart is over capacity, log;
- a run's colour: the tag `mlflow.runColor` (the report's colours, sweep.report.families).

So a sweep writes one shared view per cost model: its curves of that cost model only
(the runs' ids: reused curves live under an earlier sweep run), ranked as the report
ranks, with the ranking columns and full-width charts of compute savings and of the hit
(or, with tiers, served) ratio over capacity. The sweep's Description and the console
link to them.
"""
from __future__ import annotations

import json
import math
from typing import Sequence

from .report.families import POOL_SEP, policy_info, styles
from .report.lines import line_styles
from .report.regimes import HEADLINES, REGIMES

EXPERIMENT_NOTE = (
    "kvsweep: one run per sweep (named by trace, flat / tier / fleet, counting preset, windows), a child run per "
    "curve. Open a sweep run: its Description links to its views (every policy's curve per cost model over "
    "capacity, log axis; the runs ranked) and its Artifacts hold report.html. MLflow opens in GenAI mode (traces) "
    "unless the address has `?workflowType=machine_learning` or you pick *Model training* at the top left; "
    "the links the sweep prints have it.")

VIEW_TAG = "mlflow.sharedViewState."
COLOUR_TAG = "mlflow.runColor"
SECTION = "kvsweep"


def view_key(parent_id: str, cost_model: str) -> str:
    """`cost_model`: the view's name ("uniform"; a serving sweep's "serve, 4x load")."""
    return f"kvsweep-{parent_id[:12]}-{cost_model.replace(', ', '-').replace(' ', '-')}"


def view_url(experiment_url: str, key: str) -> str:
    """`experiment_url`: sweep.store.experiment_url (…/#/experiments/<id>?workflowType=…)."""
    base, _, query = experiment_url.partition("?")
    return f"{base}/runs?{query}&compareRunsMode=CHART&viewStateShareKey={key}"


def rank_key(capacities_gib: Sequence[float]) -> str:
    """The summary metric the report ranks by: the mean over the first regime swept."""
    for reg in REGIMES:
        if any(reg.lo_gib - 1e-6 <= g <= reg.hi_gib + 1e-6 for g in capacities_gib):
            return f"compute_savings_mean_{reg.name}"
    return "compute_savings_mean"


def _line(uuid: str, metric: str, title: str) -> dict:
    return {"uuid": uuid, "type": "LINE", "runsCountToCompare": 1000, "metricSectionId": SECTION, "deleted": False,
            "isGenerated": False, "displayName": title, "metricKey": metric,
            "lineSmoothness": 0, "xAxisScaleType": "log", "scaleType": "linear", "range": {},
            "xAxisKey": "step", "selectedXAxisMetricKey": "", "yAxisKey": "metric", "yAxisExpressions": [],
            "ignoreOutliers": False, "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False,
            "displayPoints": True}


def _x_range(capacities_gib: Sequence[float]) -> dict:
    """The step axis (capacity in MiB, log) over at least two decades, centred on the
    capacities: plotly then ticks 2, 5 and the powers of ten ("2 5 100k 2 5 1M") instead of
    every digit of one decade ("5 6 7 8 9 100k 2")."""
    steps = [g * 1024 for g in capacities_gib if g > 0]
    if not steps:
        return {}
    lo, hi = math.log10(min(steps)) - 0.15, math.log10(max(steps)) + 0.15
    mid, half = (lo + hi) / 2, max((hi - lo) / 2, 1.0)
    return {"xMin": mid - half, "xMax": mid + half}


def _serving_state(capacities_gib: Sequence[float]) -> tuple[str, list[str], list[dict]]:
    """A serving sweep's view of one load: TTFT p99 on a log axis (the curves near an SLO of
    seconds stay apart from those of thousands of seconds), reuse and goodput, over the KV
    cache per replica; runs ranked by where each meets the SLO."""
    x = "x: KV cache per replica (Step = MiB), log scale"
    rng = _x_range(capacities_gib)
    return ("metrics.`slo_met_from_gib`", ["tags.`policy`", "tags.`route`", "tags.`load`", "metrics.`slo_met_from_gib`"],
            [{**_line("ttft", "curve/ttft_p99_s", f"TTFT p99 in s, log scale; {x}"), "scaleType": "log", "range": rng},
             {**_line("reuse", "curve/reuse_ratio", f"reuse ratio; {x}"), "range": rng},
             {**_line("goodput", "curve/goodput_rps", f"goodput in requests/s (each within the SLO); {x}"),
              "range": rng}])


def view_state(run_ids: Sequence[str], cost_model: str, capacities_gib: Sequence[float], tiered: bool,
               serving: bool = False) -> dict:
    """The runs page state of one cost model's view (MLflow's serialised form)."""
    ids = ", ".join(f"'{r}'" for r in run_ids)
    if serving:  # `cost_model` names the view: "serve, 4x load"
        order, cols, charts = _serving_state(capacities_gib)
        return _state(ids, order, True, cols, charts, f"serving under load, {cost_model.split(', ', 1)[-1]}")
    regimes = [r for r in REGIMES if any(r.lo_gib - 1e-6 <= g <= r.hi_gib + 1e-6 for g in capacities_gib)]
    means = [f"compute_savings_mean_{r.name}" for r in regimes] or ["compute_savings_mean"]
    heads = [lab for lab, gib in HEADLINES if any(abs(g - gib) < 0.01 * gib for g in capacities_gib)]
    cols = (["tags.`policy`"] + (["tags.`pool`"] if tiered else []) + [f"metrics.`{m}`" for m in means]
            + [f"metrics.`compute_savings_vs_lru_at_{h}`" for h in heads])
    ratio = "served_ratio" if tiered else "hit_ratio"
    x = "x: capacity (Step = MiB), log scale"
    charts = [_line("savings", "curve/compute_savings", f"compute savings, cost model {cost_model}; {x}"),
              _line("ratio", f"curve/{ratio}", ("served ratio (HBM + lower tiers)" if tiered else "block hit ratio")
                    + f"; {x}")]
    if tiered:
        charts.append(_line("ttft", "curve/ttft_mean_s", f"mean TTFT in s (service time, no queueing); {x}"))
    return _state(ids, f"metrics.`{means[0]}`", False, cols, charts, f"cost model {cost_model}")


def _state(ids: str, order: str, ascending: bool, cols: list[str], charts: list[dict], title: str) -> dict:
    return {"searchFilter": f"attributes.run_id IN ({ids})", "orderByKey": order,
            "orderByAsc": ascending, "startTime": "ALL", "lifecycleFilter": "Active",
            "runsHiddenMode": "SHOW_ALL", "selectedColumns": cols, "compareRunCharts": charts,
            # MLflow applies widths to the columns of columnOrder only
            "columnOrder": cols, "columnWidths": {c: 230 for c in cols if c.startswith("metrics.")},
            "compareRunSections": [{"uuid": SECTION, "name": f"kvsweep: {title}", "display": True,
                                    "isReordered": False, "columns": 1, "cardHeight": 460}],
            "isAccordionReordered": True, "hideEmptyCharts": True, "useGroupedValuesInCharts": False,
            "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""}}


#: With tiers a chart holds every (policy, pool): one colour each, oracles in greys.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
           "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5")
GREYS = ("#000000", "#555555", "#888888", "#aaaaaa")


def serving_name(c) -> str:
    """A serving curve's line in the report (sweep.report.slo.by_load): its policy, and its
    route when several are swept; `c` a sweep.curves.Curve."""
    return f"{c.policy} @ {c.route}" if c.route else c.policy


def curve_colours(curves) -> dict[str, str]:
    """curve label -> its colour, for sweep.curves.Curve objects: a serving curve's is its
    line's in the report (sweep.report.lines, one per configuration, the same at every
    load); the others' as `colours` gives them."""
    if not any(c.load for c in curves):
        return colours([c.label for c in curves])
    routed = len({c.route for c in curves}) > 1
    names = [serving_name(c) if routed else c.policy for c in curves]
    style = line_styles(names)
    return {c.label: style[n].colour for c, n in zip(curves, names)}


def colours(labels: Sequence[str]) -> dict[str, str]:
    """curve label -> its colour: the report's colour of its policy in a flat sweep; with
    tiers, one per (policy, pool) in the order of the labels."""
    if not any(POOL_SEP in lab for lab in labels):
        style = styles(sorted(set(labels)))
        return {lab: style[lab].colour for lab in labels}
    out, online, oracle = {}, 0, 0
    for lab in sorted(set(labels), key=lambda x: (policy_info(x).offline, x)):
        if policy_info(lab).offline:
            out[lab], oracle = GREYS[oracle % len(GREYS)], oracle + 1
        else:
            out[lab], online = PALETTE[online % len(PALETTE)], online + 1
    return out


def write_views(client, experiment_id: str, parent_id: str, runs: dict[str, list[str]],
                capacities_gib: Sequence[float], tiered: bool, serving: bool = False) -> dict[str, str]:
    """One shared view per cost model (`runs`: cost model -> its curves' run ids);
    returns cost model -> view key."""
    out = {}
    for m, ids in runs.items():
        if not ids:
            continue
        key = view_key(parent_id, m)
        client.set_experiment_tag(experiment_id, VIEW_TAG + key,
                                  json.dumps(view_state(ids, m, capacities_gib, tiered, serving), separators=(",", ":")))
        out[m] = key
    return out


def publish(client, experiment_id: str, parent_id: str, curves, capacities_gib: Sequence[float],
            experiment_url: str) -> dict[str, str]:
    """The views of a sweep's curves (sweep.curves.Curve) and the colour of each curve run
    of an earlier sweep it reused. Returns cost model -> the view's address."""
    runs: dict[str, list[str]] = {}
    for c in curves:  # a serving sweep: one view per load, so each (policy, route) has one line and colour
        if c.run_id:
            runs.setdefault(f"{c.cost_model}, {c.load:g}x load" if c.load else c.cost_model, []).append(c.run_id)
    colour = curve_colours(curves)
    for c in curves:
        if c.run_id and c.status == "REUSED":  # a run of an earlier sweep: this sweep's colours
            client.set_tag(c.run_id, COLOUR_TAG, colour[c.label])
    keys = write_views(client, experiment_id, parent_id, runs, capacities_gib, any(c.pool for c in curves),
                       serving=any(c.load for c in curves))
    return {m: view_url(experiment_url, k) for m, k in keys.items()}
