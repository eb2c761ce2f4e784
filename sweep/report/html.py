"""The report of a sweep: one self-contained report.html, and a PNG per cost model.

For each cost model: a short "what this says" paragraph generated from the numbers (the
best online policy per regime, its margin over LRU, the headroom to the oracle); the
figure of sweep.report.plots (embedded as base64 PNG: no network, shown inline by MLflow's
artifact viewer); a ranking per regime (mean compute savings over the regime's swept
capacities: the child runs' `compute_savings_mean_<regime>` metric); holes per request
of the compute-aware policies. Partial curves are drawn but left out of rankings. Then,
when the sweep has them, pool sizing and windows (sweep.report.sections).

The sweep logs these files to its parent run when it ends; `python -m analysis report TARGET`
(analysis/report.py) writes them again from the tracking store.
"""
from __future__ import annotations

import base64
import html
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .regimes import HEADLINES, REGIMES, Regime, at_size, in_regime, mean, summary
from .families import POOL_SEP, ordered, policy_info, pool_key, pool_parts, reference_of
from .plots import drawn_once, plot_cost_model, size_label
from .agents import agents_html, gap_rows
from .sections import cap_labels, tiers, tiers_html, window_caps, windows_html
from .serving import is_serving, write_serving
from .sweeps import SweepTable
from .tierplot import plot_tiers
from .windowplot import plot_windows

log = logging.getLogger("analysis")

REFERENCE = "lru"
#: What a sweep with no capacity in either regime is ranked over (its compute_savings_mean).
SWEPT = Regime("all", "all swept capacities", 0.0, math.inf)
#: Means closer than this (0.01 points) are reported as a tie.
TIE = 1e-4


@dataclass(frozen=True)
class Ranked:
    policy: str
    family: str
    offline: bool
    savings: float  # mean compute savings over the regime's capacities
    hit_ratio: float
    vs_lru: float | None  # points; None without LRU


def _suffix(regime: Regime) -> str:
    return "" if regime is SWEPT else f"_{regime.name}"


def regimes(table: SweepTable, cost_model: str) -> list[Regime]:
    """The regimes the sweep has capacities in; with none, the whole swept range."""
    rows = max(table.curves.get(cost_model, {}).values(), key=len, default=[])
    return [r for r in REGIMES if in_regime(rows, r)] or [SWEPT]


def ranking(table: SweepTable, cost_model: str, regime: Regime) -> list[Ranked]:
    """Complete curves by mean compute savings over the regime's capacities (the child
    runs' compute_savings_mean_<regime>), best first, ties by name."""
    out = []
    curves = table.complete(cost_model)
    key = "compute_savings_mean" + _suffix(regime)
    means = {p: summary(rs) for p, rs in curves.items()}
    for p, s in means.items():
        if key not in s:
            continue
        info = policy_info(p)
        lru = means.get(reference_of(p), {}).get(key)
        # with tiers, the served ratio (HBM + lower tiers): the HBM hit ratio would mean one thing for a
        # policy and another for the bound, which has no HBM of its own
        ratio = (mean([float(r.get("served_ratio", math.nan)) for r in _in(curves[p], regime)])
                 if POOL_SEP in p else s["hit_ratio_mean" + _suffix(regime)])
        out.append(Ranked(p, info.family, info.offline, s[key], ratio,
                          None if lru is None else 100.0 * (s[key] - lru)))
    return sorted(out, key=lambda r: (-r.savings, r.policy))


def _in(rows, regime: Regime) -> list:
    return list(rows) if regime is SWEPT else in_regime(rows, regime)


def _span(regime: Regime) -> str:
    return "" if regime is SWEPT else f"{size_label(regime.lo_gib)}-{size_label(regime.hi_gib)}, "


def _regime_caps(table: SweepTable, cost_model: str, regime: Regime) -> tuple[int, int]:
    """(capacities swept in the regime, how many of them are below saturation)."""
    curves = table.complete(cost_model) or table.curves.get(cost_model, {})
    rows = max(curves.values(), key=len, default=[])
    rs = in_regime(rows, regime)
    sat = table.saturation_blocks
    return len(rs), sum(1 for r in rs if not sat or r["capacity_blocks"] < sat)


def says(table: SweepTable, cost_model: str) -> list[str]:
    """One sentence per regime, from the ranking."""
    out = []
    for reg in regimes(table, cost_model):
        n, n_unsat = _regime_caps(table, cost_model, reg)
        rank = ranking(table, cost_model, reg)
        head = f"{reg.title[0].upper() + reg.title[1:]} ({_span(reg)}{n} capacit{'y' if n == 1 else 'ies'})"
        pools = sorted({_pool(r.policy) for r in rank if not r.offline}, key=pool_key)
        if pools and pools != [""]:  # a tiered sweep: policies compete above the same pool, never across pools
            for pool in pools:
                size = pool_parts(pool)[0]
                here = [r for r in rank if _pool(r.policy) == pool
                        or (r.offline and pool_parts(_pool(r.policy))[0] == size)]
                out.append(_sentence(f"{head}, pool {pool}", here, n, n_unsat, " above the same pool"))
        else:
            out.append(_sentence(head, rank, n, n_unsat))
    return out


def _pool(label: str) -> str:
    return label.split(POOL_SEP, 1)[1] if POOL_SEP in label else ""


def _sentence(head: str, rank: list[Ranked], n: int, n_unsat: int, same: str = "") -> str:
    """What one ranking says: the best online policy, its margin over LRU, the headroom
    to the oracle (with tiers: over LRU and below the bound of the same pool)."""
    if not rank:
        return f"{head}: no complete curve, nothing to rank."
    online = [r for r in rank if not r.offline]
    oracles = [r for r in rank if r.offline]
    if n_unsat == 0:
        return (f"{head}: every capacity here holds the whole trace, so every policy saves the same "
                f"({rank[0].savings:.4f}); the regime does not tell policies apart on this trace.")
    if not online:
        return f"{head}: only oracles were swept; the best is {oracles[0].policy} ({oracles[0].savings:.4f})."
    best = online[0]
    s = f"{head}: the best online policy is {best.policy} (mean compute savings {best.savings:.4f})"
    tied = [r.policy for r in online[1:] if best.savings - r.savings < TIE]
    if tied:
        s += f", tied with {', '.join(tied)} to within {100 * TIE:g} points"
    if best.vs_lru is None:
        s += "; LRU is not in this sweep, so there is no margin to report."
    elif best.policy == reference_of(best.policy):
        nxt = online[1] if len(online) > 1 else None
        s += (", i.e. LRU itself" + (f"; the next, {nxt.policy}, is {nxt.vs_lru:+.2f} points from it." if nxt
                                     else "."))
    elif abs(best.vs_lru) < TIE * 100:
        s += "." if reference_of(best.policy) in tied else f", level with LRU{same} ({best.vs_lru:+.3f} points)."
    else:
        s += f", {best.vs_lru:+.2f} points over LRU{same}."
    if oracles:
        o = oracles[0]
        s += (f" The oracle {o.policy} reaches {o.savings:.4f}: {100 * (o.savings - best.savings):.2f} points "
              f"of headroom above {best.policy}.")
    else:
        s += " No oracle was swept, so the headroom is unknown."
    if n_unsat < n:
        k = n - n_unsat
        s += f" ({k} of the {n} capacities hold{'s' if k == 1 else ''} the whole trace: all policies are equal there.)"
    return s


def _n(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _ranking_html(table: SweepTable, cost_model: str, reg: Regime) -> str:
    rank = ranking(table, cost_model, reg)
    n, _ = _regime_caps(table, cost_model, reg)
    title = f"Ranking, {reg.title} ({_span(reg)}{_n(n, 'capacity', 'capacities')})"
    if not rank:
        return f"<h3>{html.escape(title)}</h3><p>No complete curve to rank.</p>"
    rows = []
    online_rank = 0
    tiered = any(POOL_SEP in r.policy for r in rank)
    for r in rank:
        if not r.offline:
            online_rank += 1
        rows.append(f'<tr data-policy="{html.escape(r.policy)}" class="{"oracle" if r.offline else "online"}">'
                    f"<td>{'oracle' if r.offline else online_rank}</td><td>{html.escape(r.policy)}"
                    f"{' [oracle]' if r.offline else ''}</td>"
                    f"<td>{html.escape(r.family.replace('_', ' '))}</td><td>{r.savings:.4f}</td>"
                    f"<td>{_fmt(r.vs_lru, '+.2f')}</td><td>{r.hit_ratio:.4f}</td></tr>")
    return (f"<h3>{html.escape(title)}</h3>"
            f'<table class="ranking" data-cost-model="{html.escape(cost_model)}" data-regime="{reg.name}">'
            "<tr><th>rank (online)</th><th>policy</th><th>family</th><th>mean compute savings</th>"
            + ("<th>vs LRU above the same pool (points)</th><th>mean served ratio (HBM + lower tiers)</th>"
               if tiered else "<th>vs LRU (points)</th><th>mean hit ratio</th>") + "</tr>" + "".join(rows) + "</table>")


def _hole_columns(rows: Sequence[dict], saturation: int | None) -> list[dict]:
    """The headline sizes swept; without any, up to four capacities below saturation."""
    cols = [r for r in (at_size(rows, g) for _, g in HEADLINES) if r is not None]
    if cols:
        return cols
    below = [r for r in rows if not saturation or r["capacity_blocks"] < saturation] or list(rows)
    k = min(4, len(below))
    return [below[round(i * (len(below) - 1) / max(1, k - 1))] for i in range(k)] if k else []


def _holes_html(table: SweepTable, cost_model: str) -> str:
    curves = table.curves.get(cost_model, {})
    names = [p for p in curves if policy_info(p).cost_aware]
    head = "<h3>Holes per request (compute-aware policies)</h3>"
    if not names:
        return head + "<p>No compute-aware policy in this sweep.</p>"
    if REFERENCE in curves:
        names.append(REFERENCE)
    longest = max(curves.values(), key=len)
    cols = _hole_columns(longest, table.saturation_blocks)
    blocks = [c["capacity_blocks"] for c in cols]
    trs, sampled_cells = [], 0
    for info in ordered(names):
        by_b = {r["capacity_blocks"]: r for r in curves[info.name]}
        cells = []
        for b in blocks:
            r = by_b.get(b)
            v = None if r is None else r.get("holes_per_request_mean")
            if r is not None and (v is None or math.isnan(v)) and r.get("sample_rate", 1.0) < 1.0:
                sampled_cells += 1
                cells.append("<td>n/a (sampled)</td>")
            else:
                cells.append(f"<td>{_fmt(v, '.3f')}</td>")
        label = info.name + (" (reference)" if info.name == REFERENCE else "")
        trs.append(f'<tr data-policy="{html.escape(info.name)}"><td>{html.escape(label)}</td>{"".join(cells)}</tr>')
    note = ("<p>Holes per request: mean number of runs of recomputed blocks inside a request (paper, "
            "appendix D); more holes mean more fragmented recompute work.")
    if sampled_cells:
        note += (" Cells marked n/a: not available under sampling (a sampled replay keeps only some blocks of "
                 "each request, so its gaps are not the request's holes).")
    note += "</p>"
    ths = "".join(f"<th>{size_label(c['capacity_gib'])}</th>" for c in cols)
    return (head + note + f'<table class="holes" data-cost-model="{html.escape(cost_model)}">'
            f"<tr><th>policy</th>{ths}</tr>" + "".join(trs) + "</table>")


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1em;max-width:1400px;color:#222}
h1{font-size:1.6em}h2{border-bottom:2px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0 1.2em;display:block;max-width:100%;overflow-x:auto}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
td:nth-child(2),td:nth-child(3),th{text-align:left}tr.oracle{color:#555;font-style:italic}
img{max-width:100%;height:auto;border:1px solid #eee}.says{background:#f5f7fa;padding:.7em 1em;border-left:4px solid #4c72b0}
.meta{color:#555}code{background:#f2f2f2;padding:0 .2em}
"""


def _identical_note(table: SweepTable, cost_model: str) -> str:
    once = drawn_once({p: rs for p, rs in table.curves.get(cost_model, {}).items() if rs}, REFERENCE)
    if not once:
        return ""
    same = "; ".join(" = ".join([p] + hs) for p, hs in once.items())
    return (f'<p class="identical" data-cost-model="{html.escape(cost_model)}">Identical curves (to 1e-4 at every '
            f"capacity), drawn once: {html.escape(same)}.</p>")


def render_html(table: SweepTable, pngs: dict[str, Path], tiers_png: Path | None = None,
                windows_png: Path | None = None) -> str:
    """The page; `pngs`: cost model -> its figure (embedded as base64); the tier and
    window figures for their sections (which the page has when the table has data for them)."""
    e = html.escape
    any_rows = max((rs for per in table.curves.values() for rs in per.values()), key=len, default=[])
    span = (f"{size_label(any_rows[0]['capacity_gib'])} to {size_label(any_rows[-1]['capacity_gib'])}"
            if any_rows else "none")
    sat_gib = None
    if table.saturation_blocks and any_rows:
        per_block = any_rows[0]["capacity_gib"] / any_rows[0]["capacity_blocks"]
        sat_gib = table.saturation_blocks * per_block
    policies = sorted({p for per in table.curves.values() for p in per})
    partial = sorted({f"{p} | {m}" for m, per in table.curves.items() for p, rs in per.items()
                      if len(rs) < table.n_capacities})
    meta = ([f'<strong class="partial">{e(table.banner())}</strong>'] if table.partial else []) + \
        ([f"Setup: {e(table.setup)}."] if table.setup else []) + \
        [f"<strong>Warning:</strong> {e(w)}" for w in table.warnings] + [f"Sweep run <code>{e(table.run_name)}</code> (<code>{e(table.run_id)}</code>), trace source "
            f"{e(table.trace_source)}; {_n(len(policies), 'curve')}, {_n(table.n_capacities, 'capacity', 'capacities')} "
            f"from {e(span)}, cost models {e(', '.join(table.cost_models))}.",
            "Replay: " + ("exact." if table.sample_rate is None else
                          f"sampled at r={table.sample_rate:g} (miniature simulation; estimates, holes unavailable).")]
    if sat_gib is not None:
        meta.append(f"From {e(size_label(sat_gib))} ({table.saturation_blocks:,} blocks) on, the cache holds the "
                    f"whole trace: no policy evicts and every curve is flat and equal, so the figures stop there.")
    if partial:
        meta.append("Partial curves (drawn, not ranked): " + e(", ".join(partial)) + ".")
    meta.append(f"Regenerate: <code>python -m analysis report {e(table.run_id)}</code>.")
    tier = tiers(table)
    tiered = any(POOL_SEP in p for per in table.curves.values() for p in per)
    agents = gap_rows(table)
    nav = " | ".join([f'<a href="#cost-{e(m)}">{e(m)}</a>' for m in table.cost_models]
                     + (['<a href="#tiers">pool sizing</a>'] if tier else [])
                     + (['<a href="#windows">windows</a>'] if table.windows else [])
                     + (['<a href="#agents">agent hints</a>'] if agents else []))
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(table.experiment)}: sweep report</title>"
             f"<style>{_CSS}</style></head><body>",
             f"<h1>Sweep report: {e(table.experiment)}</h1>",
             "".join(f'<p class="meta">{m}</p>' for m in meta),
             "<p>Compute savings = saved prefill cost / total prefill cost under the cost model; "
             "<em>points</em> are hundredths (0.0123 = 1.23 points). Oracles (offline, they see the future) are "
             "black or grey and dashed and are not online candidates. Rankings use mean compute savings over the "
             "regime's swept capacities, the child runs' <code>compute_savings_mean_hbm</code> / "
             "<code>_pool</code> metrics (a sweep with no capacity in either regime: over every swept capacity, "
             "<code>compute_savings_mean</code>). <em>vs LRU</em>, everywhere (tables, sentences, figures): "
             "a policy's value minus LRU's at the same capacities"
             + (", LRU above the same pool (so it is the policy's gain, not the pool's); with tiers compute "
                "savings count blocks served from any tier as saved" if tiered else "") + ".</p>",
             f"<p>Cost models: {nav}</p>"]
    same = "served ratio: HBM + lower tiers" if tiered else "block hit ratio"
    for m in table.cost_models:
        parts.append(f'<section id="cost-{e(m)}"><h2>Cost model {e(m)}'
                     + (f" (compute savings = {same})" if m == "uniform" else "") + "</h2>")
        parts.append("<h3>What this says</h3>" + "".join(
            f'<p class="says" data-cost-model="{e(m)}">{e(s)}</p>' for s in says(table, m)))
        if m in pngs:
            b64 = base64.b64encode(Path(pngs[m]).read_bytes()).decode("ascii")
            parts.append(f'<img alt="curves under cost model {e(m)}" src="data:image/png;base64,{b64}">')
        parts.append(_identical_note(table, m))
        for reg in regimes(table, m):
            parts.append(_ranking_html(table, m, reg))
        parts.append(_holes_html(table, m))
        parts.append("</section>")
    if tier:
        parts.append(tiers_html(tier, tiers_png))
    if table.windows:
        parts.append(windows_html(table, window_caps(table), windows_png))
    parts.append(agents_html(agents))
    parts.append("</body></html>")
    return "\n".join(parts)


def figure_title(table: SweepTable, cost_model: str) -> str:
    t = f"{table.experiment}: cost model {cost_model}"
    if table.sample_rate is not None:
        t += f" (sampled replay, r={table.sample_rate:g})"
    return t


def write_report(table: SweepTable, out_dir: str | Path) -> Path:
    """report.html and plots/curves_<cost model>.png in `out_dir` (plots/tiers.png and
    plots/windows.png when the sweep has them; a serving sweep's page and plots/serving.png
    instead: sweep.report.serving); returns the html path."""
    out = Path(out_dir)
    if is_serving(table):
        return write_serving(table, out, _CSS)
    pngs = {}
    for m in table.cost_models:
        curves = table.curves.get(m, {})
        if curves:
            pngs[m] = plot_cost_model(curves, out / "plots" / f"curves_{m}.png", title=figure_title(table, m),
                                      cost_model=m, saturation_blocks=table.saturation_blocks)
    tier, tiers_png, windows_png = tiers(table), None, None
    if tier:
        tiers_png = plot_tiers(tier.series, tier.cap_labels, tier.sizes, tier.modes, tier.caps,
                               out / "plots" / "tiers.png",
                               f"{table.experiment}: pool sizing")
    if table.windows:
        caps = window_caps(table)
        first = table.cost_models[0] if table.cost_models else None
        rows = [r for r in table.windows if r["cost_model"] == first and int(r["capacity_index"]) in caps]
        windows_png = plot_windows(rows, caps, cap_labels(table), out / "plots" / "windows.png",
                                   f"{table.experiment}: hit ratio per window")
    path = out / "report.html"
    path.write_text(render_html(table, pngs, tiers_png, windows_png), encoding="utf-8")
    return path


def log_report(client, run_id: str, out_dir: str | Path) -> None:
    """Attach report.html and plots/ (as written by write_report) to the run."""
    out = Path(out_dir)
    client.log_artifact(run_id, str(out / "report.html"))
    if (out / "plots").is_dir():
        client.log_artifacts(run_id, str(out / "plots"), "plots")
