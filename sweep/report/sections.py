"""The report's optional sections: pool sizing (a tiered sweep) and policies over trace
time (a sweep with sim.window). Each is empty when the sweep has nothing for it.

Tiers: per HBM capacity shown (tables.pick_points, as in the console table), the served
ratio and mean TTFT at each pool size (and mode), the knee, the mode winning there and the
gap to the bound (sweep.report.sizing), with the figure of sweep.report.tierplot.
Windows: hit ratio per window at one or two capacities below saturation (the figure of
sweep.report.windowplot), and per cost model the ranking of sweep.report.windows (share
of windows won, lead when winning, gap to Belady) at those capacities.
"""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from .families import POOL_SEP, ordered, pool_key
from .plots import size_label
from .sweeps import SweepTable
from .sizing import BOUND, KNEE_POINTS, NOT_SATURATED, axes, by_capacity, knee_text
from .tables import pick_points

#: HBM capacities shown in the tier section (the console table's default summary_points).
TIER_POINTS = 4


def _img(png: Path | None, alt: str) -> str:
    if png is None:
        return ""
    b64 = base64.b64encode(Path(png).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def _fmt(x, spec: str) -> str:
    return "-" if x is None or x != x else format(x, spec)


def cap_labels(table: SweepTable) -> dict[int, str]:
    """capacity index -> its size as the figures print it."""
    return {int(r["capacity_index"]): size_label(float(r["capacity_gib"]))
            for per in table.curves.values() for rs in per.values() for r in rs}


# ---------------------------------------------------------------------- tiers
@dataclass
class Tiers:
    series: dict  # (policy, pool label) -> capacity index -> row (first cost model)
    pools: list[str]  # pool labels, smallest first
    sizes: list[str]  # the pool sizes among them, smallest first
    modes: list[str]  # the write/admission modes swept ([""]: one)
    caps: list[int]  # HBM capacity indices shown
    cap_labels: dict[int, str]
    rules: str = ""  # the tier config and the engine hierarchy whose rules it ran


def tiers(table: SweepTable) -> Tiers | None:
    """The pool axis of the sweep's first cost model (served ratio and TTFT do not depend
    on it); None for a flat sweep or one with a single pool."""
    if not table.cost_models:
        return None
    series: dict = {}
    for label, rs in table.curves.get(table.cost_models[0], {}).items():
        for r in rs:
            if r.get("pool"):
                series.setdefault((label.split(POOL_SEP, 1)[0], r["pool"]), {})[int(r["capacity_index"])] = r
    pools = sorted({pool for _, pool in series}, key=pool_key)
    if len(pools) < 2:
        return None
    sizes, modes = axes(pools)
    idx = sorted({i for s in series.values() for i in s})
    caps = [idx[k] for k in pick_points(len(idx), TIER_POINTS)]
    return Tiers(series, pools, sizes, modes, caps, cap_labels(table), table.tier_rules)


def tiers_html(t: Tiers, png: Path | None) -> str:
    e = html.escape
    policies = [p.name for p in ordered({p for p, _ in t.series})]
    ttft = any(r.get("ttft_mean_s", float("nan")) == r.get("ttft_mean_s") for s in t.series.values()
               for r in s.values())
    swept = len(t.modes) > 1
    bound = any(p == BOUND for p, _ in t.series)
    parts = ['<section id="tiers"><h2>Pool sizing (lower tiers under HBM)</h2>',
             f"<p>{e(t.rules)} (sim_core.tiers.rules; docs/tiers.md, Engine hierarchies).</p>" if t.rules else "",
             f"<p>Served ratio: block accesses served from HBM or a lower tier, over all accesses (the first "
             f"cost model's curves; it does not depend on the cost model). Knee: the smallest pool within "
             f"{KNEE_POINTS * 100:g} point of the saturated served ratio (the best mode's at the largest pool); "
             f"<em>{NOT_SATURATED}</em> where the served ratio still rises by more than that at the largest pool"
             + ("; the knee stands on the row of the write/admission mode serving the most there (wins)"
                if swept else "")
             + ("; TTFT: estimated time to first token, mean, service time without queueing" if ttft else
                "; no <code>hardware</code> part was set, so there is no TTFT estimate")
             + ("; gap: <code>tier_bound</code> [oracle] (Belady over HBM plus every tier: no hierarchy of "
                "these sizes serves more) minus the row's served ratio at the knee, in points" if bound else "")
             + ".</p>",
             _img(png, "served ratio and TTFT over the pool size")]
    size_ths = "".join(f"<th>{e(z)}</th>" for z in t.sizes)
    head = ("<tr><th>policy</th>" + ("<th>mode</th>" if swept else "") + size_ths + "<th>knee</th>"
            + ("<th>wins</th>" if swept else "") + (size_ths if ttft else "") + ("<th>gap</th>" if bound else "")
            + "</tr>")
    sub = ("<tr><th></th>" + ("<th></th>" if swept else "") + f"<th colspan='{len(t.sizes)}'>served ratio</th><th></th>"
           + ("<th></th>" if swept else "") + (f"<th colspan='{len(t.sizes)}'>TTFT mean (ms)</th>" if ttft else "")
           + ("<th>points</th>" if bound else "") + "</tr>")
    for i in t.caps:
        trs = []
        for p in policies:
            sz = by_capacity(t.series, p, i)
            if sz is None or len(sz.sizes) < len(t.sizes):
                continue
            for m in sz.modes:
                win = m == sz.mode  # the knee and the winning mode on that mode's row only
                tie = " (tie)" if len(sz.tied) > 1 else ""
                cells = ((f"<td>{e(m)}</td>" if swept else "") + "".join(f"<td>{_fmt(sz.at(z, m), '.4f')}</td>"
                                                                       for z in t.sizes)
                         + f"<td>{e(knee_text(sz)) if win else ''}</td>"
                         + (f"<td>{e(sz.mode + tie) if win else ''}</td>" if swept else ""))
                if ttft:
                    cells += "".join(f"<td>{_fmt(sz.ttft.get((z, m), float('nan')) * 1e3, '.1f')}</td>"
                                     for z in t.sizes)
                if bound:
                    gap = (sz.bound - sz.at(sz.knee, m)) * 100 if p != BOUND else None  # this row's mode
                    cells += f"<td>{_fmt(gap, '+.2f')}</td>"
                name = p + (" [oracle]" if p == BOUND else "")
                trs.append(f'<tr data-policy="{e(p)}"' + (f' data-mode="{e(m)}"' if swept else "")
                           + f' data-knee="{e(sz.knee)}" data-saturated="{str(sz.saturated).lower()}"'
                           + (' class="oracle"' if p == BOUND else "") + f"><td>{e(name)}</td>{cells}</tr>")
        parts.append(f"<h3>HBM {e(t.cap_labels.get(i, str(i)))}</h3>"
                     f'<table class="tiers" data-capacity-index="{i}">{sub}{head}{"".join(trs)}</table>')
    parts.append("</section>")
    return "\n".join(parts)


# ---------------------------------------------------------------------- windows
def window_caps(table: SweepTable) -> list[int]:
    """One or two capacities with windows, below saturation where the policies differ:
    at a third and two thirds of those (by index)."""
    idx = sorted({int(r["capacity_index"]) for r in table.windows})
    blocks = {int(r["capacity_index"]): r["capacity_blocks"]
              for per in table.curves.values() for rs in per.values() for r in rs}
    sat = table.saturation_blocks
    below = [i for i in idx if not sat or blocks.get(i, 0) < sat] or idx
    if len(below) <= 2:
        return below
    return sorted({below[round((len(below) - 1) / 3)], below[round(2 * (len(below) - 1) / 3)]})


def windows_html(table: SweepTable, caps: list[int], png: Path | None) -> str:
    e = html.escape
    labels = cap_labels(table)
    n = len({r["window"] for r in table.windows})
    parts = ['<section id="windows"><h2>Policies over trace time (windows)</h2>',
             f"<p>The trace cut into {n} windows of trace time (<code>sim.window</code>): the hit ratio of "
             f"each policy per window at {e(' and '.join(labels.get(i, str(i)) for i in caps))}, and per cost "
             "model how often each online policy has the best compute savings in a window (ties count for "
             "every tied policy), by how much it leads the best other online policy in the windows it wins, "
             "and its gap to Belady (mean and worst window), in points. A policy that wins most windows wins "
             "steadily; shares spread over several policies mean the best policy changes with the traffic. "
             "The whole table is the run's <code>window_ranking.csv</code>.</p>",
             _img(png, "hit ratio per window")]
    for m in table.cost_models:
        rs = [r for r in table.window_ranking if r["cost_model"] == m and int(r["capacity_index"]) in caps]
        if not rs:
            continue
        trs = []
        for r in sorted(rs, key=lambda r: (int(r["capacity_index"]), -float(r["won_share"]), r["policy"])):
            trs.append(f'<tr data-policy="{e(r["policy"])}"><td>{e(labels.get(int(r["capacity_index"]), ""))}</td>'
                       f'<td>{e(r["policy"])}</td><td>{int(r["windows"])}</td>'
                       f'<td>{_fmt(float(r["won_share"]) * 100, ".0f")}%</td>'
                       f'<td>{_fmt(r.get("lead_mean_points"), "+.2f")}</td>'
                       f'<td>{_fmt(r.get("gap_mean_points"), ".2f")}</td><td>{_fmt(r.get("gap_worst_points"), ".2f")}</td></tr>')
        parts.append(f"<h3>Windows won, cost model {e(m)}</h3>"
                     f'<table class="windows" data-cost-model="{e(m)}"><tr><th>HBM</th><th>policy</th>'
                     "<th>windows</th><th>won</th><th>lead when winning (points)</th>"
                     "<th>gap to Belady, mean (points)</th><th>worst</th></tr>" + "".join(trs) + "</table>")
    parts.append("</section>")
    return "\n".join(parts)
