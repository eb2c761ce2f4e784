"""A plan as people read it: the printed answer (deployment first), report.md and
report.json, the front figure, and the candidates as MLflow child runs of the plan's run."""
from __future__ import annotations

import math
import time
from pathlib import Path

from sweep.report.slo import reuse_text
from sweep.serving import serve_row

from ..record import plain
from .space import AXES


def _secs(x: float) -> str:
    if x != x:
        return "n/a"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.3f} s"


def _value(key: str, v: float) -> str:
    return f"{v:.4f}" if key == "goodput" else _secs(v)


def _money(x: float, cur: str) -> str:
    return f"{x:,.2f} {cur}/h"


def deployment_lines(p, d: dict, lead: str) -> list[str]:
    """The answer for one deployment: what it is, its cost, its SLO values and margin, its
    reuse and gap to the fleet ceiling."""
    cur = p.prices.currency
    price = float(p.prices.gpu[d["gpu"]])
    vals = ", ".join(f"{k.replace('_', ' ')} {_value(k, d[k])}" for k in p.slo.values(d["result"]))
    tpot = "" if "tpot_mean" in p.slo.values(d["result"]) else f", TPOT mean {_secs(d['tpot_mean_s'])}"
    gap = d["ceiling_gap_points"]
    return [f"{lead}{d['label']}: {_money(d['cost_per_hour'], cur)} ({d['gpus']} GPU{'s' * (d['gpus'] > 1)} at "
            f"{price:.2f})",
            f"    {vals}{tpot}; margin {d['margin']:.1%} to the SLO",
            f"    {reuse_text(d)}" + (f", {gap:.2f} points below the fleet ceiling "
                                                 f"{d['ceiling_reuse_ratio']:.4f}" if gap == gap else "")] + (
        [f"    KV cache from GPU memory: {d['capacity_blocks']:,} blocks per replica"]
        if p.setting.capacity_blocks is None else [])


def text(p, trace_name: str = "") -> str:
    """The printed answer: the deployment first, then the runners-up, the heavier load, the
    front, and how much was replayed."""
    cur = p.prices.currency
    lines = [f"Plan{' for ' + trace_name if trace_name else ''} at {p.load:g}x load, SLO {p.slo.text()}",
             f"space: {p.space.describe()}"]
    if p.best is not None:
        lines += deployment_lines(p, p.best, "cheapest: ")
    else:
        c = p.closest
        lines.append(f"no candidate meets the SLO: nothing is recommended.")
        if c is not None:
            miss = "; ".join(f"{k.replace('_', ' ')} {_value(k, c[k])} misses by {m:.1%}" for k, m in c["misses"].items())
            lines.append(f"closest: {c['label']} ({_money(c['cost_per_hour'], cur)}): {miss}")
    for g, d in p.runners_up.items():  # each other group: a GPU type, aggregated or disaggregated
        if p.best is not None and g == p.best["group"]:
            continue
        name = g if p.space.prefill_replicas == (0,) or g.endswith(" disaggregated") else f"{g} aggregated"
        lines += deployment_lines(p, d, f"runner-up on {name}: ") if d else [f"runner-up on {name}: none meets the SLO"]
    if p.heavier is not None:
        h = p.heavier
        lines.append(f"at {h['load']:g}x load" + (f" ({h['factor']:g} x the plan's)" if p.load != 1 else "") + ": " + (
            f"{h['best']['label']}: {_money(h['best']['cost_per_hour'], cur)}, {p.slo.primary.key.replace('_', ' ')} "
            f"{_value(p.slo.primary.key, h['best'][p.slo.primary.key])}" if h["best"] else "no candidate meets the SLO"))
    k = p.slo.primary.key
    lines.append(f"front (cost against {k.replace('_', ' ')}): " + "; ".join(
        f"{_money(d['cost_per_hour'], cur)} {_value(k, d[k])}" for d in p.front))
    lines.append(replay_line(p))
    lines += [f"note: {n}" for n in p.notes + (p.heavier["notes"] if p.heavier else [])]
    lines.append(f"prices: {p.prices.describe(p.space.gpu)}")
    return "\n".join(lines)


def replay_line(p) -> str:
    n1 = len(p.candidates)
    s = (f"replayed {n1} of the space's {p.space_size} candidates at {p.load:g}x load ({n1 / p.space_size:.0%}); "
         f"{p.pruned_by_bound} below the prefill bound")
    if p.heavier is not None:
        s += f"; {p.heavier['evaluated']} more at {p.heavier['load']:g}x load"
    if p.replays != p.evaluated:
        s += f" ({p.replays} replayed now, the others journaled or shared)"
    return s


def to_dict(p, trace_name: str = "") -> dict:
    """report.json: the answer and every replayed candidate (results as flat rows)."""
    def lean(d):
        return None if d is None else {k: v for k, v in d.items() if k != "result"}

    return plain({
        "trace": trace_name, "load": p.load, "slo": p.slo.to_dict(), "prices": p.prices.to_dict(),
        "space": {a: list(getattr(p.space, a)) for a in AXES},
        "space_size": p.space_size, "evaluated": p.evaluated, "replays": p.replays, "pruned_by_bound": p.pruned_by_bound,
        "best": lean(p.best), "closest": lean(p.closest), "runners_up": {g: lean(d) for g, d in p.runners_up.items()},
        "front": [lean(d) for d in p.front], "notes": p.notes,
        "heavier": None if p.heavier is None else {"load": p.heavier["load"], "best": lean(p.heavier["best"]),
                                                  "evaluated": p.heavier["evaluated"], "notes": p.heavier["notes"]},
        "lanes": [{"shape": list(ln.shape), "start_replicas": ln.cands[min(ln.bound_start, len(ln.cands) - 1)].replicas,
                   "status": ln.status, "scanned": ln.scanned,
                   "answer": None if ln.answer is None else ln.cands[ln.answer].replicas} for ln in p.lanes],
        "candidates": [{**lean(d), **serve_row(d["result"])} for d in p.candidates]})


def markdown(p, trace_name: str, figures: dict) -> str:
    k = p.slo.primary.key
    lines = [f"# Deployment plan: {trace_name}", "", "```", text(p, trace_name), "```", ""]
    if "front" in figures:
        lines += [f"![cost against {k}]({figures['front']})", ""]
    lines += [f"## Replayed candidates at {p.load:g}x load", "",
              f"| candidate | GPUs | cost/h | {k} | TPOT mean | reuse | meets |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for d in sorted(p.candidates, key=lambda d: (d["cost_per_hour"], d[k])):
        lines.append(f"| {d['label']} | {d['gpus']} | {d['cost_per_hour']:.2f} | {_value(k, d[k])} | "
                     f"{_secs(d['tpot_mean_s'])} | {d['reuse_ratio']:.4f} | {'yes' if d['meets'] else 'no'} |")
    return "\n".join(lines) + "\n"


def draw_front(p, out: Path) -> dict:
    """figures/front.png: every replayed candidate's cost against the SLO's primary latency,
    the front, the SLO as a line, the answer circled."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not p.candidates:
        return {}
    k = p.slo.primary.key
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for group in dict.fromkeys(d["group"] for d in p.candidates):
        mine = [d for d in p.candidates if d["group"] == group]
        ax.scatter([d["cost_per_hour"] for d in mine], [d[k] for d in mine], s=22, alpha=0.7, label=group)
    ax.plot([d["cost_per_hour"] for d in p.front], [d[k] for d in p.front], "k-", lw=1, drawstyle="steps-post",
            label="front")
    ax.axhline(p.slo.primary.seconds, color="red", ls="--", lw=1, label=f"SLO {k} {p.slo.primary.text}")
    if p.best is not None:
        ax.scatter([p.best["cost_per_hour"]], [p.best[k]], s=160, facecolors="none", edgecolors="red",
                   label=f"answer: {p.best['label']}")
    vals = [d[k] for d in p.candidates if d[k] > 0 and math.isfinite(d[k])]
    if vals and max(vals) / min(vals) > 20:
        ax.set_yscale("log")
    ax.set_xlabel(f"cost ({p.prices.currency} per hour)")
    ax.set_ylabel(f"{k} (s)")
    ax.set_title(f"{p.load:g}x load: cost against {k}")
    ax.legend(fontsize=7)
    path = Path(out) / "figures" / "front.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return {"front": "figures/front.png"}


def metrics(p) -> dict:
    """The plan run's metrics."""
    out = {"evaluated": p.evaluated, "space_size": p.space_size, "replays": p.replays,
           "pruned_by_bound": p.pruned_by_bound, "feasible": float(p.best is not None)}
    if p.best is not None:
        out.update({"best.cost_per_hour": p.best["cost_per_hour"], "best.gpus": p.best["gpus"],
                    "best.replicas": p.best["replicas"], "best.margin": p.best["margin"],
                    "best.ttft_p99_s": p.best["ttft_p99_s"], "best.reuse_ratio": p.best["reuse_ratio"]})
    if p.heavier is not None and p.heavier["best"] is not None:
        out["heavier.cost_per_hour"] = p.heavier["best"]["cost_per_hour"]
    return {k: float(v) for k, v in out.items() if v == v}


def log_candidates(uri: str, parent: str, p) -> None:
    """The front on the plan run (metric `front.<latency>` and the SLO `slo.<latency>`, step =
    cost in cents per hour: MLflow charts it), and one FINISHED child run per replayed
    candidate (each load's): its axes as params, its cost and every ServeResult number as
    metrics."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_run(parent).info.experiment_id
    # the front as the plan run's own chart: the primary latency and the SLO by cost (step = cents per hour)
    k, now = p.slo.primary.key, int(time.time() * 1000)
    client.log_batch(parent, metrics=[Metric(f"front.{k}", float(d[k]), now, int(round(d["cost_per_hour"] * 100)))
                                      for d in p.front] +
                     [Metric(f"slo.{k}", p.slo.primary.seconds, now, int(round(d["cost_per_hour"] * 100)))
                      for d in p.front])
    heavier = [] if p.heavier is None else [(p.heavier["load"], d) for d in p.heavier["candidates"]]
    for load, d in [(p.load, d) for d in p.candidates] + heavier:
        run = client.create_run(experiment_id, run_name=f"{d['label']} @ {load:g}x", tags={
            "mlflow.parentRunId": parent, "kvsweep.kind": "plan_candidate", "load": f"{load:g}",
            "meets_slo": str(d["meets"]).lower(), "router": d["router"], "gpu": d["gpu"]})
        rid = run.info.run_id
        now = int(time.time() * 1000)
        params = {**{a: d[a] for a in AXES}, "load": load,
                  "capacity_blocks": d["result"].capacity_blocks}
        nums = {"cost_per_hour": d["cost_per_hour"], "gpus": d["gpus"], "margin": d["margin"],
                **{k: v for k, v in serve_row(d["result"]).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != math.inf}}
        client.log_batch(rid, params=[Param(k, str(v)) for k, v in params.items()],
                         metrics=[Metric(k[:250], float(v), now, 0) for k, v in nums.items()][:1000])
        client.set_terminated(rid, "FINISHED")
