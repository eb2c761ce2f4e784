"""Policies over trace time (sim.window): who wins each window, and how far from Belady.

A curve's results carry per-window counts (sim_core.Result.windows). Per cost model and
capacity, each window of trace time ranks the online policies by compute savings: a
policy's share of windows won (ties count for every tied policy), its lead over the best
other online policy in the windows it wins, and its gap to Belady in points (mean and
worst over the windows), the question a mean over the whole trace
hides: does one policy win steadily, or does the winner change with the traffic?
"""
from __future__ import annotations

from typing import Sequence

ORACLE = "belady"
TIE = 1e-12


def window_rows(curves: Sequence, capacities: Sequence) -> list[dict]:
    """One row per (curve, capacity, window): the windows' hit ratio, token hit ratio and
    compute savings under the curve's cost model. `curves` are sweep Curves."""
    out = []
    for c in curves:
        for i, res in sorted(c.rows.items()):
            w = res.windows
            if not w:
                continue
            for k, acc in enumerate(w["accesses"]):
                out.append({"policy": c.label, "cost_model": c.cost_model, "capacity_index": i,
                            "capacity_label": capacities[i].label, "window": k, "start_s": w["start_s"][k],
                            "accesses": acc, "hit_ratio": w["hit_ratio"][k],
                            "token_hit_ratio": w["token_hit_ratio"][k],
                            "compute_savings": w["compute_savings"][c.cost_model][k]})
    return out


def ranking(rows: Sequence[dict], offline: Sequence[str] = (ORACLE,)) -> list[dict]:
    """Per (cost model, capacity, online policy): windows won / windows compared, the mean
    lead in points over the best other online policy in the windows won (0 in a tie; NaN
    if it never wins or runs alone), and the gap to Belady in points (mean, worst), which
    needs a Belady curve in the rows."""
    cells: dict = {}
    for r in rows:
        if r["accesses"] and r["compute_savings"] == r["compute_savings"]:
            cells.setdefault((r["cost_model"], r["capacity_index"], r["capacity_label"]), {}) \
                .setdefault(r["window"], {})[r["policy"]] = r["compute_savings"]
    out = []
    for (m, i, label), per_window in sorted(cells.items()):
        online = sorted({p for v in per_window.values() for p in v if p not in offline})
        stats = {p: {"won": 0, "n": 0, "gaps": [], "leads": []} for p in online}
        for v in per_window.values():
            vals = {p: v[p] for p in online if p in v}
            if not vals:
                continue
            best = max(vals.values())
            for p, x in vals.items():
                stats[p]["n"] += 1
                stats[p]["won"] += x >= best - TIE
                others = [y for q, y in vals.items() if q != p]
                if x >= best - TIE and others:
                    stats[p]["leads"].append((x - max(others)) * 100)
                if ORACLE in v:
                    stats[p]["gaps"].append((v[ORACLE] - x) * 100)
        for p, s in stats.items():
            g, lead = s["gaps"], s["leads"]
            out.append({"cost_model": m, "capacity_index": i, "capacity_label": label, "policy": p,
                        "windows": s["n"], "won_share": s["won"] / s["n"] if s["n"] else float("nan"),
                        "lead_mean_points": sum(lead) / len(lead) if lead else float("nan"),
                        "gap_mean_points": sum(g) / len(g) if g else float("nan"),
                        "gap_worst_points": max(g) if g else float("nan")})
    return out


def ranking_text(rank: Sequence[dict], cost_model: str) -> str:
    """The ranking under one cost model, most windows won first at each capacity."""
    rs = [r for r in rank if r["cost_model"] == cost_model]
    if not rs:
        return ""
    pw = max(len("policy"), *(len(r["policy"]) for r in rs))
    head = f"{'capacity':>10}  {'policy':<{pw}}  {'windows won':>11}  {'gap to Belady (mean / worst, points)':>36}"
    lines = [f"per window of trace time, cost model {cost_model}: share of windows each online policy wins, "
             f"and its gap to Belady", head, "-" * len(head)]
    for r in sorted(rs, key=lambda r: (r["capacity_index"], -r["won_share"], r["policy"])):
        gap = (f"{r['gap_mean_points']:.2f} / {r['gap_worst_points']:.2f}" if r["gap_mean_points"] == r["gap_mean_points"]
               else "- (no Belady curve)")
        lines.append(f"{r['capacity_label']:>10}  {r['policy']:<{pw}}  {r['won_share']:>10.0%}  {gap:>36}")
    return "\n".join(lines)
