"""The report of a serving sweep (fleet=...): TTFT p50/p99 and goodput over the KV cache per
replica, one column per load, and the SLO sentences (sweep.report.slo); with several
routers or replica counts swept, the routing section (sweep.report.routing).

The page replaces the cost-model sections of a cache-replay report (compute savings do
not apply to serving): report.html and plots/serving.png, from the same rows whether the
sweep writes it at its end or `python -m analysis report` reads them back.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

from ..serving import SERVE
from . import fleet_pools
from .lines import SLO_COLOUR, img_html, line_styles, plain_log_axis, save
from .plots import size_label
from .answer import answer_html, cheapest, p99_table
from .routing import plot_routing, routed, routing_html
from .slo import Slo, by_load, capacity_sentence, load_sentence, routes
from .sweeps import SweepTable


#: the p99 table's cells: within the SLO, or not
_CSS = ("td.meets{background:#e6f4ea}td.misses{color:#8a8a8a}li.answer{font-size:1.1em;margin:.3em 0}"
        "table.p99 td:nth-child(3){text-align:right}")


def is_serving(table: SweepTable) -> bool:
    return SERVE in table.curves


def _y(rows, key: str) -> list[float]:
    return [float(r.get(key, math.nan)) for r in rows]


def plot_serving(series: dict, slo: Slo, path: str | Path, title: str, style: dict | None = None) -> Path:
    """`series`: load -> name -> rows. Top row: TTFT p99 (solid, filled markers) and p50
    (dashed, open markers) in seconds on a log scale with plain ticks, and the SLO's TTFT
    bound; bottom row: goodput (requests per second whose own TTFT, and TPOT, is within the
    bounds) or, without an SLO, throughput. One colour per line (sweep.report.lines), the
    same in the routing figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    names = list(dict.fromkeys(p for per in series.values() for p in per))
    st = style or line_styles(names)
    good = "goodput_rps" if slo.given else "throughput_rps"
    fig = Figure(figsize=(4.2 * len(series) + 3.6, 7.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(series), squeeze=False, sharex=True)
    for col, (load, per) in enumerate(series.items()):
        top, bottom = axes[0][col], axes[1][col]
        for p, rows in per.items():
            s, x = st[p], _y(rows, "capacity_gib")
            top.plot(x, _y(rows, "ttft_p99_s"), color=s.colour, marker=s.marker, linewidth=1.8, markersize=6)
            top.plot(x, _y(rows, "ttft_p50_s"), color=s.colour, marker=s.marker, linestyle=(0, (4, 2)),
                     linewidth=1.3, markersize=5, markerfacecolor="white")
            bottom.plot(x, _y(rows, good), color=s.colour, marker=s.marker, linewidth=1.8, markersize=6)
        if slo.ttft_s == slo.ttft_s:
            top.axhline(slo.ttft_s, color=SLO_COLOUR, linewidth=1.4, linestyle="--")
        top.set_yscale("log")
        plain_log_axis(top.yaxis)
        bottom.set_ylim(bottom=0)
        top.set_title(f"{load:g}x load", loc="left")
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.grid(alpha=0.3, which="both")
        gibs = sorted({g for rows in per.values() for g in _y(rows, "capacity_gib") if g == g})
        bottom.set_xticks(gibs, [size_label(g) for g in gibs], rotation=30)
        bottom.xaxis.set_minor_formatter("")
        bottom.set_xlabel("KV cache per replica")
        if col == 0:
            top.set_ylabel("TTFT (s): p99 solid, p50 dashed")
            bottom.set_ylabel("goodput (req/s within the SLO)" if slo.given else "throughput (req/s)")
    handles = [Line2D([], [], color="#222222", linewidth=1.8, marker="o"),
               Line2D([], [], color="#222222", linestyle=(0, (4, 2)), marker="o", markerfacecolor="white")]
    handles += [Line2D([], [], color=st[n].colour, marker=st[n].marker, linewidth=1.8) for n in names]
    return save(fig, handles, ["TTFT p99", "TTFT p50"] + names, slo.ttft_s, title, path)


def serving_html(table: SweepTable, png: Path | None, css: str, routing_png: Path | None = None) -> str:
    e = html.escape
    curves = table.curves.get(SERVE, {})
    series = by_load(curves)
    slo = Slo.of([r for rs in curves.values() for r in rs])
    names = list(dict.fromkeys(p for per in series.values() for p in per))
    rows = max(curves.values(), key=len, default=[])
    span = f"{size_label(rows[0]['capacity_gib'])} to {size_label(rows[-1]['capacity_gib'])}" if rows else "none"
    n_pol = len({n.split(' @ ', 1)[0] for n in names})
    meta = ([f'<strong class="partial">{e(table.banner())}</strong>'] if table.partial else []) + \
        ([f"Setup: {e(table.setup)}."] if table.setup else []) + \
        [f"<strong>Warning:</strong> {e(w)}" for w in table.warnings] + \
        [f"Sweep run <code>{e(table.run_name)}</code> (<code>{e(table.run_id)}</code>), trace source "
            f"{e(table.trace_source)}; serving under load, {e(table.fleet or 'fleet')}; "
            f"{n_pol} polic{'y' if n_pol == 1 else 'ies'}, "
            f"{table.n_capacities} capacit{'y' if table.n_capacities == 1 else 'ies'} of KV cache per replica from {e(span)}, loads "
            f"{e(', '.join(f'{x:g}x' for x in series))} (arrival times divided by the load)"
            + (f", routes {e(', '.join(f'{r} x{n}' for r, n in routes(curves)))} (router x replicas)."
               if routed(curves) else "."),
            f"Regenerate: <code>python -m analysis report {e(table.run_id)}</code>."]
    good = ("goodput the requests per second whose own TTFT (and TPOT) is within the bound" + (
        f" ({e(slo.text().replace('p99 TTFT', 'TTFT').replace('mean TPOT', 'TPOT'))})" if slo.given else ""))
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(table.experiment)}: serving report"
             f"</title><style>{css}{_CSS}</style></head><body>",
             f"<h1>Serving report: {e(table.experiment)}</h1>", "".join(f'<p class="meta">{m}</p>' for m in meta),
             answer_html(series, slo, routed(curves)),
             '<section id="serving"><h2>Serving under load</h2>',
             "<p>Each point is one <code>sim_core.serve</code> replay of the whole trace: TTFT is the time from a "
             "request's arrival to its first token (p99: 99th percentile over requests; the SLO bounds it), "
             + good + ("" if slo.given else " (no SLO was set: <code>fleet.slo_ttft=2s</code> sets one; throughput "
                                            "is drawn instead)") + ". One colour per configuration, the same in "
             "every figure of this report.</p>"]
    if png is not None:
        parts.append(img_html(png, "TTFT and goodput over the KV cache per replica", names))
    parts.append("<h3>p99 TTFT per KV cache per replica</h3><p>Shaded green: within the SLO's TTFT bound"
                 + (" (the TPOT bound, if any, is in the sentences below)" if slo.tpot_s == slo.tpot_s else "")
                 + "; in bold: the answer above.</p>" if slo.given else "<h3>p99 TTFT per KV cache per replica</h3>")
    parts.append(p99_table(series, slo, {x: cheapest(per, slo) for x, per in series.items()} if slo.given else {}))
    if slo.given:
        parts.append("<h3>Where each policy meets the SLO</h3>")
        for load, per in series.items():
            parts.append(f"<p><b>{load:g}x load</b></p><ul>" + "".join(
                f'<li class="slo" data-policy="{e(p)}" data-load="{load:g}">{e(capacity_sentence(p, per[p], slo))}'
                "</li>" for p in names if p in per) + "</ul>")
        if len(series) > 1:
            parts.append("<h3>Up to which load</h3><ul>" + "".join(
                f'<li class="load" data-policy="{e(p)}">{e(load_sentence(p, _by_capacity(series, p), slo))}</li>'
                for p in names) + "</ul>")
    parts.append("</section>")
    if routed(curves):
        parts.append(routing_html(curves, routing_png, slo))
    parts.append(fleet_pools.html_section(fleet_pools.sizing(curves)))  # tier=... with fleet=...
    parts.append("</body></html>")
    return "\n".join(parts)


def _by_capacity(series: dict, policy: str) -> dict:
    """load -> capacity index -> row of one policy."""
    return {load: {int(r["capacity_index"]): r for r in per.get(policy, [])} for load, per in series.items()}


def write_serving(table: SweepTable, out: Path, css: str) -> Path:
    """report.html and plots/serving.png (and plots/routing.png with several routes) of a
    serving sweep in `out`; returns the html path."""
    curves = table.curves.get(SERVE, {})
    png = rpng = None
    if any(curves.values()):
        series, slo = by_load(curves), Slo.of([r for rs in curves.values() for r in rs])
        style = line_styles(p for per in series.values() for p in per)  # one colour per line in both figures
        png = plot_serving(series, slo, out / "plots" / "serving.png", f"{table.experiment}: serving under load",
                           style)
        if routed(curves):
            rpng = plot_routing(series, slo, out / "plots" / "routing.png",
                                f"{table.experiment}: reuse and p99 TTFT per configuration", style)
    path = out / "report.html"
    path.write_text(serving_html(table, png, css, rpng), encoding="utf-8")
    return path
