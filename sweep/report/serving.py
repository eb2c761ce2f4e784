"""The report of a serving sweep (fleet=...): TTFT p50/p99 and goodput over the KV cache per
replica, one column per load, and the SLO sentences (sweep.report.slo); with several
routers or replica counts swept, the routing section (sweep.report.routing).

The page replaces the cost-model sections of a cache-replay report (compute savings do
not apply to serving): report.html and plots/serving.png, from the same rows whether the
sweep writes it at its end or `python -m analysis report` reads them back.
"""
from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from ..serving import SERVE
from .families import styles
from .plots import save_figure, size_label
from .routing import plot_routing, routed, routing_html
from .slo import Slo, by_load, capacity_sentence, load_sentence, routes, seconds
from .sweeps import SweepTable


def is_serving(table: SweepTable) -> bool:
    return SERVE in table.curves


def _y(rows, key: str) -> list[float]:
    return [float(r.get(key, math.nan)) for r in rows]


def plot_serving(series: dict, slo: Slo, path: str | Path, title: str) -> Path:
    """`series`: load -> policy -> rows. Top row: TTFT p99 (the policy's line) and p50
    (dotted) in seconds, log scale, with the SLO's TTFT bound; bottom row: goodput (requests
    per second within the SLO) or, without an SLO, throughput."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    names = list(dict.fromkeys(p for per in series.values() for p in per))
    st = styles(names)
    good = "goodput_rps" if slo.given else "throughput_rps"
    fig = Figure(figsize=(4.2 * len(series) + 2.8, 7.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(series), squeeze=False, sharex=True)
    for col, (load, per) in enumerate(series.items()):
        top, bottom = axes[0][col], axes[1][col]
        for p, rows in per.items():
            s, x = st[p], _y(rows, "capacity_gib")
            top.plot(x, _y(rows, "ttft_p99_s"), color=s.colour, linestyle=s.linestyle, marker=s.marker,
                     linewidth=s.linewidth)
            top.plot(x, _y(rows, "ttft_p50_s"), color=s.colour, linestyle=":", linewidth=1.0, alpha=0.8)
            bottom.plot(x, _y(rows, good), color=s.colour, linestyle=s.linestyle, marker=s.marker,
                        linewidth=s.linewidth)
        if slo.ttft_s == slo.ttft_s:
            top.axhline(slo.ttft_s, color="#c44e52", linewidth=1.0, linestyle="--")
        top.set_yscale("log")
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
            top.set_ylabel("TTFT (s): p99 line, p50 dotted")
            bottom.set_ylabel("goodput (req/s within the SLO)" if slo.given else "throughput (req/s)")
    handles = [Line2D([], [], color="#444444", linewidth=1.8), Line2D([], [], color="#444444", linestyle=":")]
    labels = ["TTFT p99", "TTFT p50"]
    if slo.ttft_s == slo.ttft_s:
        handles.append(Line2D([], [], color="#c44e52", linestyle="--"))
        labels.append(f"SLO: TTFT p99 <= {seconds(slo.ttft_s)}")
    return save_figure(fig, names, st, {}, path, 110, title=title, handles=handles, labels=labels)


def serving_html(table: SweepTable, png: Path | None, css: str, routing_png: Path | None = None) -> str:
    e = html.escape
    curves = table.curves.get(SERVE, {})
    series = by_load(curves)
    slo = Slo.of([r for rs in curves.values() for r in rs])
    names = list(dict.fromkeys(p for per in series.values() for p in per))
    rows = max(curves.values(), key=len, default=[])
    span = f"{size_label(rows[0]['capacity_gib'])} to {size_label(rows[-1]['capacity_gib'])}" if rows else "none"
    n_pol = len({n.split(' @ ', 1)[0] for n in names})
    meta = ([f"Setup: {e(table.setup)}."] if table.setup else []) + \
        [f"<strong>Warning:</strong> {e(w)}" for w in table.warnings] + \
        [f"Sweep run <code>{e(table.run_name)}</code> (<code>{e(table.run_id)}</code>), trace source "
            f"{e(table.trace_source)}; serving under load, {e(table.fleet or 'fleet')}; "
            f"{n_pol} polic{'y' if n_pol == 1 else 'ies'}, "
            f"{table.n_capacities} capacit{'y' if table.n_capacities == 1 else 'ies'} of KV cache per replica from {e(span)}, loads "
            f"{e(', '.join(f'{x:g}x' for x in series))} (arrival times divided by the load)"
            + (f", routes {e(', '.join(f'{r} x{n}' for r, n in routes(curves)))} (router x replicas)."
               if routed(curves) else "."),
            f"Regenerate: <code>python -m analysis report {e(table.run_id)}</code>."]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(table.experiment)}: serving report"
             f"</title><style>{css}</style></head><body>",
             f"<h1>Serving report: {e(table.experiment)}</h1>", "".join(f'<p class="meta">{m}</p>' for m in meta),
             '<section id="serving"><h2>Serving under load</h2>',
             "<p>Each point is one <code>sim_core.serve</code> replay of the whole trace: TTFT is the time from a "
             "request's arrival to its first token (p99: 99th percentile over requests), goodput the requests per "
             "second that meet the SLO" + (f" ({e(slo.text())})" if slo.given else " (no SLO was set: "
                                            "<code>fleet.slo_ttft=2s</code> sets one; throughput is drawn instead)")
             + ".</p>"]
    if png is not None:
        parts.append(f'<img alt="TTFT and goodput over the KV cache per replica" '
                     f'src="data:image/png;base64,{base64.b64encode(Path(png).read_bytes()).decode("ascii")}">')
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
        parts.append(routing_html(curves, routing_png))
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
        png = plot_serving(by_load(curves), Slo.of([r for rs in curves.values() for r in rs]),
                           out / "plots" / "serving.png", f"{table.experiment}: serving under load")
        if routed(curves):
            rpng = plot_routing(curves, out / "plots" / "routing.png", f"{table.experiment}: reuse and p99 TTFT "
                                                                       f"per router")
    path = out / "report.html"
    path.write_text(serving_html(table, png, css, rpng), encoding="utf-8")
    return path
