"""Routing: a serving sweep over several routers or replica counts (fleet.router=[...],
fleet.replicas=[...]) read off its rows, for the console table, the report and `advise`.

A regime is one (replicas, load). With an SLO the verdict per regime rests only on
configurations that meet it (sweep.report.answer.router_verdicts): the router that meets
it with the least KV cache per replica, with the policy that gets there, its p99 TTFT and
margin, its reuse and its gap to the fleet ceiling at that point. Without an SLO there is
nothing to meet, and routers are scored over the (policy, capacity) points all of them
have: the geometric mean of their p99 TTFT (TTFT spans orders of magnitude over the
capacities, so an arithmetic mean would be the smallest capacity's) and the mean reuse
ratio; the best router has the lowest TTFT score (ties: the higher reuse, then
round_robin, then the sweep's order); its margin over round_robin is the ratio of the
TTFT scores (in per cent) and the difference of the reuse means (in points). Per router,
the load balance over replicas is the mean busy_imbalance (busiest replica's busy time
over the mean: 1 is balanced), jain_busy (Jain's index of busy time: 1 balanced, 1/R all
on one) and prefill_imbalance, and the gap to the fleet ceiling the mean of
ceiling_reuse_ratio - first_reuse_ratio (Belady over one pooled cache of replicas x capacity
blocks), in points.

The figure (plot_routing) draws every configuration in its colour of the report
(sweep.report.lines), each point labelled with its capacity, the SLO and each point's
fleet ceiling.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..serving import BASELINE
from .answer import margin, router_sentence, router_verdicts
from .lines import CEILING_COLOUR, SLO_COLOUR, img_html, line_styles, plain_log_axis, save
from .slo import Row, Slo, _num, by_load, cap_text, ceiling_gap, first_reuse, route_of, routes, seconds


@dataclass(frozen=True)
class Score:
    """One router's numbers in a regime, over the points every router of it has."""

    ttft_p99_s: float  # geometric mean of p99 TTFT
    reuse: float  # mean reuse_ratio
    ceiling_gap: float  # mean ceiling_reuse_ratio - reuse_ratio, points
    busy_imbalance: float
    jain_busy: float
    prefill_imbalance: float
    points: int


@dataclass(frozen=True)
class Regime:
    replicas: int
    load: float
    best: str
    scores: dict  # router -> Score, in the sweep's router order

    @property
    def base(self) -> Score | None:
        return self.scores.get(BASELINE)

    def ttft_margin(self) -> float:
        """The best router's TTFT score against round_robin's, in per cent (NaN without it)."""
        b = self.base
        return math.nan if b is None else 100.0 * (self.scores[self.best].ttft_p99_s / b.ttft_p99_s - 1.0)

    def reuse_margin(self) -> float:
        """The best router's mean reuse minus round_robin's, in points (NaN without it)."""
        b = self.base
        return math.nan if b is None else 100.0 * (self.scores[self.best].reuse - b.reuse)


def routed(curves: Mapping[str, Sequence[Row]]) -> bool:
    """More than one (router, replicas) in the rows: the routing section applies."""
    return len(routes(curves)) > 1


def points(curves: Mapping[str, Sequence[Row]]) -> dict[tuple, dict[tuple, Row]]:
    """(replicas, load) -> router -> {(policy, capacity_index): row}, from curve label
    ("lru @ 2x load, kv_router x8") -> rows."""
    out: dict = {}
    for label, rows in curves.items():
        policy = label.split(" @ ", 1)[0]
        for r in rows:
            router, reps = route_of(r)
            out.setdefault((reps, float(r["load"])), {}).setdefault(router, {})[(policy, int(r["capacity_index"]))] = r
    return out


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else math.nan


def _geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x == x]
    if not xs or any(x <= 0 for x in xs):
        return math.nan
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def balance(row: Row) -> tuple[float, float, float]:
    """(busy_imbalance, jain_busy, prefill_imbalance) of a row: its own fields, or, for a
    row without them, from its replicas' busy seconds and prefilled tokens."""
    got = tuple(_num(row, k) for k in ("busy_imbalance", "jain_busy", "prefill_imbalance"))
    if all(x == x for x in got):
        return got
    n = int(_num(row, "replicas"))
    busy = [_num(row, f"replica{q}.busy_s") for q in range(n)]
    pf = [_num(row, f"replica{q}.prefilled_tokens") for q in range(n)]
    if any(x != x for x in busy + pf) or not sum(busy) > 0:
        return got
    return (max(busy) / (sum(busy) / n), sum(busy) ** 2 / (n * sum(b * b for b in busy)),
            max(pf) / (sum(pf) / n) if sum(pf) > 0 else math.nan)


def score(rows: Sequence[Row]) -> Score:
    bal = [balance(r) for r in rows]
    return Score(ttft_p99_s=_geomean([_num(r, "ttft_p99_s") for r in rows]),
                 reuse=_mean([_num(r, "reuse_ratio") for r in rows]),
                 ceiling_gap=_mean([ceiling_gap(r) for r in rows]),
                 busy_imbalance=_mean([b[0] for b in bal]), jain_busy=_mean([b[1] for b in bal]),
                 prefill_imbalance=_mean([b[2] for b in bal]), points=len(rows))


def regimes(curves: Mapping[str, Sequence[Row]]) -> list[Regime]:
    """One Regime per (replicas, load), fewest replicas and lowest load first."""
    order = list(dict.fromkeys(r for r, _ in routes(curves)))
    out = []
    for (reps, load), per in sorted(points(curves).items()):
        shared = set.intersection(*(set(d) for d in per.values()))
        scores = {r: score([per[r][k] for k in sorted(shared)]) for r in order if r in per}
        best = min(scores, key=lambda r: (_key(scores[r].ttft_p99_s), -_key(scores[r].reuse, -math.inf),
                                          r != BASELINE, order.index(r)))
        out.append(Regime(reps, load, best, scores))
    return out


def _key(x: float, nan: float = math.inf) -> float:
    return x if x == x else nan


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:+.1f}%"


def _pts(x: float) -> str:
    return "-" if x != x else f"{x:+.2f}"


def _num_text(x: float, spec: str = ".4f") -> str:
    return "-" if x != x else format(x, spec)


def sentence(g: Regime) -> str:
    """'2 replicas at 4x load: least_loaded, p99 TTFT 1.2s (geometric mean over 6 points),
    -38.0% against round_robin, reuse 0.1234 (+1.05 points); 3.10 points below the fleet
    ceiling'."""
    head = f"{g.replicas} replica{'s' if g.replicas > 1 else ''} at {g.load:g}x load"
    if g.replicas == 1:
        return f"{head}: every router sends every request to the one replica (p99 TTFT " \
               f"{seconds(g.scores[g.best].ttft_p99_s)}, reuse {_num_text(g.scores[g.best].reuse)})"
    s = g.scores[g.best]
    out = (f"{head}: {g.best}, p99 TTFT {seconds(s.ttft_p99_s)} (geometric mean over {s.points} points), "
           f"reuse {_num_text(s.reuse)}")
    if g.base is None:
        out += f"; {BASELINE} was not swept, so no margin over it"
    elif g.best == BASELINE:
        rest = [r for r in g.scores if r != BASELINE]
        if rest:
            nxt = min(rest, key=lambda r: _key(g.scores[r].ttft_p99_s))
            out += (f"; {BASELINE} is the best router here (next: {nxt}, p99 TTFT "
                    f"{_pct(100.0 * (g.scores[nxt].ttft_p99_s / s.ttft_p99_s - 1.0))})")
    else:
        out += (f"; against {BASELINE}: p99 TTFT {_pct(g.ttft_margin())}, reuse {_pts(g.reuse_margin())} points")
    if s.ceiling_gap == s.ceiling_gap:
        out += f"; {s.ceiling_gap:.2f} points below the fleet ceiling"
    return out


def console_lines(curves: Mapping[str, Sequence[Row]]) -> list[str]:
    """The console's routing summary: per replica count and load, the router meeting the
    SLO with the least KV cache (without an SLO, the geometric-mean score), and the balance."""
    slo = Slo.of([r for rs in curves.values() for r in rs])
    if slo.given:
        order = list(dict.fromkeys(r for r, _ in routes(curves)))
        vs = router_verdicts(points(curves), slo, order)
        lines = ["", f"router per replicas and load: the one meeting the SLO ({slo.text()}) with the least KV cache "
                     f"per replica (then the lowest p99 TTFT there); its numbers are those at that point"]
        lines += ["  " + router_sentence(n, x, ats, slo) for (n, x), ats in vs.items()]
    else:
        lines = ["", f"best router per replicas and load (no SLO: the lowest geometric-mean p99 TTFT over the policies "
                     f"and capacities; margins against {BASELINE})"] + ["  " + sentence(g) for g in regimes(curves)]
    many = [g for g in regimes(curves) if g.replicas > 1]
    if many:
        lines += ["", "balance over replicas (means over policies and capacities): router, replicas, load: busy "
                      "max/mean, Jain's index of busy time"]
        lines += [f"  {r} x{g.replicas} at {g.load:g}x: {_num_text(s.busy_imbalance, '.3f')}, "
                  f"{_num_text(s.jain_busy, '.3f')}" for g in many for r, s in g.scores.items()]
    return lines


def _short(gib: float) -> str:
    """'47G', '188G', '1.5T': a point's capacity in the routing figure."""
    return f"{gib / 1024:.2g}T" if gib >= 1024 else f"{gib:.3g}G"


def plot_routing(series: Mapping[float, Mapping[str, Sequence[Row]]], slo: Slo, path: str | Path, title: str,
                 style: Mapping | None = None) -> Path:
    """Reuse (x) against p99 TTFT (y, log, plain ticks) per configuration: one panel per
    load, one line per (policy, router, replicas) through its capacities, each point
    labelled with its KV cache per replica; the SLO's bound dashed; the fleet ceiling of
    each point as a bar in its colour at its height (the gap between them is the reuse left)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    names = list(dict.fromkeys(n for per in series.values() for n in per))
    st = style or line_styles(names)
    fig = Figure(figsize=(5.2 * len(series) + 3.6, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(series), squeeze=False)[0]
    for ax, (load, per) in zip(axes, series.items()):
        for n, rows in per.items():
            c = st[n].colour
            # first-admission reuse: what the ceiling bounds (re-admissions after preemption aside)
            xs, ys = [first_reuse(q) for q in rows], [_num(q, "ttft_p99_s") for q in rows]
            ax.plot(xs, ys, color=c, marker=st[n].marker, linewidth=1.5, markersize=6)
            for q, x, y in zip(rows, xs, ys):
                cx = _num(q, "ceiling_reuse_ratio")
                if cx == cx and y == y:  # the ceiling at this point, at its height: the gap is the reuse left
                    ax.plot([cx], [y], color=c, marker="|", markersize=12, markeredgewidth=1.8)
                if x == x and y == y:
                    ax.annotate(_short(_num(q, "capacity_gib")), (x, y), textcoords="offset points", xytext=(4, 4),
                                fontsize=8, color=c)
        if slo.ttft_s == slo.ttft_s:
            ax.axhline(slo.ttft_s, color=SLO_COLOUR, linewidth=1.4, linestyle="--")
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"{load:g}x load", loc="left")
        ax.set_xlabel("reuse at first admission (prompt tokens found in the cache)")
    axes[0].set_ylabel("p99 TTFT (s)")
    handles = [Line2D([], [], color=st[n].colour, marker=st[n].marker, linewidth=1.5) for n in names]
    labels = list(names)
    handles.append(Line2D([], [], color=CEILING_COLOUR, marker="|", markersize=12, linestyle="none",
                          markeredgewidth=1.8))
    labels.append("fleet ceiling of that point\n(same colour, same height)")
    handles.append(Line2D([], [], linestyle="none"))
    labels.append("labels: KV cache per replica")
    return save(fig, handles, labels, slo.ttft_s, title, path)


def routing_html(curves: Mapping[str, Sequence[Row]], png: Path | None, slo: Slo | None = None) -> str:
    """The report's routing section (report.html, after the serving section)."""
    e = html.escape
    slo = slo or Slo.of([r for rs in curves.values() for r in rs])
    parts = ['<section id="routing"><h2>Routing</h2>']
    if slo.given:
        parts.append(f"<p>Per replica count and load, the router that meets the SLO ({e(slo.text())}) with the least "
                     "KV cache per replica (ties: the lower p99 TTFT there), with the policy that gets there; every "
                     "number is the one at that point. The fleet ceiling is Belady over one pooled cache of replicas "
                     "x capacity blocks: the gap to it is the reuse the router, the policy and the engine leave.</p>")
    else:
        parts.append(f"<p>No SLO was set, so routers are scored over the policies and capacities they all have: p99 "
                     f"TTFT as a geometric mean (lower is better), reuse as a mean; margins are against {BASELINE}. "
                     "<code>fleet.slo_ttft=2s</code> makes the verdict the router meeting it with the least "
                     "cache.</p>")
    if png is not None:
        parts.append(img_html(png, "reuse against p99 TTFT per configuration",
                              (n for per in by_load(curves).values() for n in per)))
    parts.append(_verdicts_html(curves, slo) if slo.given else _scores_html(curves))
    parts.append("</section>")
    return "\n".join(parts)


def _verdicts_html(curves: Mapping[str, Sequence[Row]], slo: Slo) -> str:
    e = html.escape
    order = list(dict.fromkeys(r for r, _ in routes(curves)))
    vs = router_verdicts(points(curves), slo, order)
    out = ["<h3>The router per regime</h3><ul>" + "".join(
        f'<li class="route" data-replicas="{n}" data-load="{x:g}" data-best="{e(ats[0].router) if ats[0].pick else ""}">'
        f"{e(router_sentence(n, x, ats, slo))}</li>" for (n, x), ats in vs.items()) + "</ul>"]
    head = ("<tr><th>replicas</th><th>load</th><th>router</th><th>meets the SLO from</th><th>with</th>"
            "<th>p99 TTFT there</th><th>under the bound</th><th>reuse there</th><th>gap to ceiling there (points)</th>"
            "<th>busy max/mean there</th><th>Jain (busy) there</th></tr>")
    body = []
    for (n, x), ats in vs.items():
        for i, a in enumerate(ats):
            p = a.pick
            cls = ' class="best"' if i == 0 and p else ""
            if p is None:
                low = a.lowest
                cells = (f"<td>never (lowest p99 {e(seconds(_num(low, 'ttft_p99_s')))})</td>" if low is not None
                         else "<td>never</td>") + "<td>-</td>" * 7
            else:
                b = balance(p.row)
                cells = (f"<td>{e(cap_text(p.row))}</td><td>{e(p.policy)}</td><td>{e(seconds(p.p99))}</td>"
                         f"<td>{_num_text(margin(p.row, slo), '.0f')}%</td><td>{_num_text(_num(p.row, 'reuse_ratio'))}</td>"
                         f"<td>{_num_text(p.ceiling_gap, '.2f')}</td><td>{_num_text(b[0], '.3f')}</td>"
                         f"<td>{_num_text(b[1], '.3f')}</td>")
            body.append(f'<tr{cls} data-router="{e(a.router)}" data-replicas="{n}" data-load="{x:g}"><td>{n}</td>'
                        f"<td>{x:g}x</td><td>{e(a.router)}{' (best)' if cls else ''}</td>{cells}</tr>")
    out.append("<h3>Every router at the point it first meets the SLO</h3>" + f"<table>{head}{''.join(body)}</table>")
    return "".join(out)


def _scores_html(curves: Mapping[str, Sequence[Row]]) -> str:
    """Without an SLO: the geometric-mean scores per regime (Regime, Score)."""
    e = html.escape
    gs = regimes(curves)
    parts = ["<h3>Best router per regime</h3><ul>" + "".join(
        f'<li class="route" data-replicas="{g.replicas}" data-load="{g.load:g}" data-best="{e(g.best)}">'
        f"{e(sentence(g))}</li>" for g in gs) + "</ul>"]
    head = ("<tr><th>replicas</th><th>load</th><th>router</th><th>p99 TTFT (geo. mean)</th><th>vs "
            f"{BASELINE}</th><th>reuse</th><th>vs {BASELINE} (points)</th><th>gap to ceiling (points)</th>"
            "<th>busy max/mean</th><th>Jain (busy)</th><th>prefill max/mean</th></tr>")
    body = []
    for g in gs:
        for r, s in g.scores.items():
            b = g.base
            vs_t = math.nan if b is None else 100.0 * (s.ttft_p99_s / b.ttft_p99_s - 1.0)
            vs_r = math.nan if b is None else 100.0 * (s.reuse - b.reuse)
            cls = ' class="best"' if r == g.best else ""
            body.append(f'<tr{cls} data-router="{e(r)}" data-replicas="{g.replicas}" data-load="{g.load:g}">'
                        f"<td>{g.replicas}</td><td>{g.load:g}x</td><td>{e(r)}{' (best)' if r == g.best else ''}</td>"
                        f"<td>{e(seconds(s.ttft_p99_s))}</td><td>{_pct(vs_t)}</td><td>{_num_text(s.reuse)}</td>"
                        f"<td>{_pts(vs_r)}</td><td>{_num_text(s.ceiling_gap, '.2f')}</td>"
                        f"<td>{_num_text(s.busy_imbalance, '.3f')}</td><td>{_num_text(s.jain_busy, '.3f')}</td>"
                        f"<td>{_num_text(s.prefill_imbalance, '.3f')}</td></tr>")
    parts.append("<h3>Every router: TTFT, reuse, balance over replicas, gap to the ceiling</h3>"
                 f"<table>{head}{''.join(body)}</table>")
    return "".join(parts)
