"""The figure of one cost model: curves against capacity, and their difference to LRU.

One PNG per cost model (the parent run's `plots/curves_<cost model>.png`, embedded in
`report.html`). What it shows and why:
- only the capacities below saturation (sim_core.saturation_capacity) and the first one
  at or above it: from there on every policy holds the whole trace and every curve is
  flat and equal (on the default trace that is the upper 60% of the log range);
- the value panel(s) on top, the difference to LRU in points beneath (differences of a
  point or two are invisible on a 0-1 axis); that panel is scaled to the online
  policies: an oracle 20 points above LRU would flatten them, so an oracle that leaves
  the scale is clipped, marked at the edge and its largest difference written out (a
  tiered sweep's difference is to LRU above the same pool, families.reference_of);
- under `uniform` compute savings equal the hit ratio: one pair of panels; otherwise
  compute savings, then hit ratio, stacked (the figure stays narrow enough to read where
  MLflow's artifact viewer scales it down);
- a family has one line style, its members differ in colour and marker; oracles are
  achromatic and dashed (sweep.report.families); the legend sits outside the axes,
  grouped by family;
- markers at the swept capacities only, and the line broken across a stretch of the
  range that was not swept (a segment from 96 GiB to 1 TiB would invent the curve
  between);
- curves equal on every capacity (regimes.identical_groups) are drawn once and named
  together in the legend ("lfu = sieve"); equal in one panel's metric only, they are
  drawn once in that panel and named above it;
- x ticks at the paper's headline sizes (24, 48, 96 GiB, 1 TiB), the HBM and memory
  pool regimes shaded; the y axes fit the data.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display needed).
"""
from __future__ import annotations

from pathlib import Path
import math
import statistics
import textwrap
from typing import Mapping, Sequence

from sim_core.catalog.capacity import human_gib

from .regimes import CURVE_KEYS, HEADLINES, REGIMES, diff_points, identical_groups
from .families import POOL_SEP, ordered, policy_info, pool_key, reference_of, styles

LABELS = {"hit_ratio": "block hit ratio", "compute_savings": "compute-savings ratio"}
_REGIME_SHADE = {"hbm": "#4c72b0", "pool": "#55a868"}
#: A step between swept capacities this many times the median step (in log capacity) is
#: a stretch that was not swept: the line is broken there.
GAP_FACTOR = 2.5


def drawn_once(curves: Mapping[str, Sequence[Mapping]], reference: str = "lru",
               keys: Sequence[str] = CURVE_KEYS) -> dict[str, list[str]]:
    """Curves identical on every capacity (in every one of `keys`): the one drawn (the
    reference if it is one of them, else the first in legend order) -> the others."""
    order = {p.name: i for i, p in enumerate(ordered(curves))}
    out = {}
    for group in identical_groups(curves, keys=keys):
        g = sorted(group, key=lambda p: (p != reference, order[p]))
        out[g[0]] = g[1:]
    return out


def reference_label(curves: Mapping[str, Sequence[Mapping]], name: str = "lru") -> str:
    """`name`, or in a tiered sweep (curves "lru @ dram=0", ...) its curve at the smallest
    pool (the flat cache when a pool of 0 was swept): the others' difference is then the
    pool's gain as well as the policy's."""
    if name in curves:
        return name
    tiered = [p for p in curves if p.split(POOL_SEP, 1)[0] == name and POOL_SEP in p]
    return min(tiered, key=lambda p: pool_key(p.split(POOL_SEP, 1)[1]), default=name)


def gap_breaks(gibs: Sequence[float]) -> set[int]:
    """Indices i (ascending capacities) where the step from i-1 to i is GAP_FACTOR times
    the median step in log capacity or more: nothing was swept in between. Needs three
    capacities (two steps) to know what a step is."""
    steps = [math.log(b / a) for a, b in zip(gibs, gibs[1:]) if a > 0 and b > 0]
    if len(steps) < 2:
        return set()
    typical = statistics.median(steps)
    return {i + 1 for i, st in enumerate(steps) if typical > 0 and st >= GAP_FACTOR * typical}


def broken(xs: Sequence[float], ys: Sequence[float], breaks: set[int], all_gib: Sequence[float]):
    """xs, ys with a NaN point inside each unswept stretch (`breaks` index `all_gib`), so
    matplotlib leaves it blank."""
    cut = [math.sqrt(all_gib[i - 1] * all_gib[i]) for i in sorted(breaks)]
    ox, oy = [], []
    for x, y in zip(xs, ys):
        while cut and cut[0] < x:
            if ox:
                ox.append(cut[0])
                oy.append(math.nan)
            cut.pop(0)
        ox.append(x)
        oy.append(y)
    return ox, oy


def online_limits(diffs: Sequence[float]) -> tuple[float, float] | None:
    """y limits of the difference panel from the online policies' differences (0 kept in
    view, at least half a point tall), or None without any."""
    vals = [d for d in diffs if d == d]
    if not vals:
        return None
    lo, hi = min(0.0, *vals), max(0.0, *vals)
    pad = max(0.08 * (hi - lo), 0.25 - (hi - lo) / 2, 0.05)
    return lo - pad, hi + pad


def zoomed(rows: Sequence[Mapping], saturation_blocks: int | None) -> list[Mapping]:
    """Rows below saturation plus the first at or above it (where the curves meet)."""
    rs = sorted(rows, key=lambda r: float(r["capacity_blocks"]))
    if not saturation_blocks:
        return rs
    below = [r for r in rs if float(r["capacity_blocks"]) < saturation_blocks]
    above = [r for r in rs if float(r["capacity_blocks"]) >= saturation_blocks]
    return below + above[:1]


def size_label(gib: float) -> str:
    """'24 GiB', '1.5 TiB': the sweep's size labels, spaced and to 3 digits for figures."""
    return human_gib(gib, digits=3, sep=" ")


def panel_keys(cost_model: str) -> tuple[str, ...]:
    return ("compute_savings",) if cost_model == "uniform" else ("compute_savings", "hit_ratio")


def plot_cost_model(curves: Mapping[str, Sequence[Mapping]], path: str | Path, *, title: str, cost_model: str,
                    saturation_blocks: int | None = None, reference: str = "lru") -> Path:
    """curves: policy -> rows of one cost model. Writes the PNG and returns its path."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    present = {p: rs for p, rs in curves.items() if rs}
    reference = reference_label(present, reference)
    ref_title = reference.upper().split(POOL_SEP.upper(), 1)[0] + reference[len(reference.split(POOL_SEP, 1)[0]):]
    tiered = any(POOL_SEP in p for p in present)
    once = drawn_once(present, reference)
    hidden = {h for hs in once.values() for h in hs}
    names = [p for p in present if p not in hidden]
    label = {p: _same_label([p] + once.get(p, [])) for p in names}
    style = styles(present)
    keys = panel_keys(cost_model)
    zoom = {p: zoomed(present[p], saturation_blocks) for p in names}
    ref = zoom.get(reference)
    all_gib = sorted({float(r["capacity_gib"]) for rs in zoom.values() for r in rs})
    breaks = gap_breaks(all_gib)
    sat_row = None
    if saturation_blocks and names:
        sat_rows = [r for r in zoom[names[0]] if float(r["capacity_blocks"]) >= saturation_blocks]
        sat_row = sat_rows[0] if sat_rows else None

    # Narrow and tall: MLflow's artifact viewer scales an image to its pane (about 600 px
    # beside the run's file tree), so panels are stacked rather than side by side.
    with matplotlib.rc_context({"font.size": 15, "axes.titlesize": 16, "axes.labelsize": 15,
                                "xtick.labelsize": 16, "ytick.labelsize": 16, "legend.fontsize": 14}):
        fig = Figure(figsize=(11.0, max(10.5, 8.5 * len(keys) + 0.5)), layout="constrained")
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(2 * len(keys), 1, height_ratios=[3, 2] * len(keys))
        shown = []
        for row, key in enumerate(keys):
            top = fig.add_subplot(grid[2 * row, 0])
            bottom = fig.add_subplot(grid[2 * row + 1, 0], sharex=top)
            diffs = {}
            # equal in this panel's metric only (a tiered sweep's HBM hit ratio is the same at
            # every pool size): drawn once here, and named above the panel
            here = {p: hs for p, hs in drawn_once({p: present[p] for p in names}, reference, (key,)).items()}
            skip = {h for hs in here.values() for h in hs}
            if here:
                top.set_title(textwrap.fill("drawn once here: " + "; ".join(" = ".join([p] + hs)
                                                                           for p, hs in here.items()), 60),
                              loc="right", fontsize=11, color="#444444")
            for p in names:
                if p in skip:
                    continue
                rs, s = zoom[p], style[p]
                z = 3 if p == reference else 2  # the baseline stays visible under a curve equal to it
                kw = dict(color=s.colour, linestyle=s.linestyle, marker=s.marker, markersize=5,
                          linewidth=s.linewidth)
                top.plot(*broken([float(r["capacity_gib"]) for r in rs], [float(r[key]) for r in rs], breaks,
                                 all_gib), zorder=z, **kw)
                mine = reference_of(p, reference.split(POOL_SEP, 1)[0])  # LRU above the same pool
                base = zoomed(present[mine], saturation_blocks) if mine in present else ref
                if base is not None and p != reference and p != mine:
                    diffs[p] = diff_points(rs, base, key)
                    bottom.plot(*broken([x for x, _ in diffs[p]], [y for _, y in diffs[p]], breaks, all_gib), **kw)
            if ref is not None:
                bottom.axhline(0.0, color=style[reference].colour, linewidth=2.4, zorder=3)
                bottom.set_ylabel(f"minus {ref_title.split(POOL_SEP, 1)[0]}" + (" at the same pool" if tiered else "")
                                  + " (points)")
                _scale_to_online(bottom, diffs, style)
            else:
                bottom.text(0.5, 0.5, f"{ref_title} is not in this sweep:\nno difference panel",
                            transform=bottom.transAxes, ha="center", va="center")
                bottom.set_yticks([])
            same = "served ratio" if tiered else "hit ratio"  # with tiers, uniform savings = served ratio
            top.set_ylabel(LABELS[key] + (f" (= {same})" if cost_model == "uniform" and key == "compute_savings"
                                          else ""))
            sub = LABELS[key] if cost_model != "uniform" else f"{LABELS[key]} = {'' if tiered else 'block '}{same}"
            if tiered and key == "hit_ratio":
                sub += " (HBM only)"
            # the figure's title sits on the first axes: a suptitle would run under the legend
            top.set_title(f"{title}\n{sub}" if row == 0 else sub, loc="left")
            bottom.set_xlabel("cache capacity (log scale)")
            for ax in (top, bottom):
                ax.set_xscale("log")
                ax.grid(True, which="major", alpha=0.35)
                ax.margins(x=0.02, y=0.06)
                shown = _regimes(ax, all_gib)
                if sat_row is not None:
                    ax.axvline(float(sat_row["capacity_gib"]), color="#444444", linestyle=":", linewidth=1.2)
            if sat_row is not None:
                top.annotate("whole trace fits", (float(sat_row["capacity_gib"]), 0.03),
                             xycoords=("data", "axes fraction"), rotation=90, ha="right", va="bottom",
                             fontsize=13, color="#444444")
            ticks = _ticks(all_gib)
            bottom.xaxis.set_major_locator(FixedLocator(ticks))
            bottom.xaxis.set_minor_locator(NullLocator())
            bottom.xaxis.set_minor_formatter(NullFormatter())
            bottom.set_xticks(ticks, [size_label(t) for t in ticks])
            top.tick_params(labelbottom=False)

        handles, labels = [], []
        if shown:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append("REGIMES (shaded)")
            for reg in shown:
                handles.append(Patch(color=_REGIME_SHADE[reg.name], alpha=0.2))
                labels.append(f"{reg.title} {size_label(reg.lo_gib)}-{size_label(reg.hi_gib)}")
        return save_figure(fig, names, style, label, path, 100, handles=handles, labels=labels)


def _same_label(names: Sequence[str]) -> str:
    """"lfu = sieve"; two names a line, so a long group does not widen the legend."""
    return "\n= ".join(" = ".join(names[i:i + 2]) for i in range(0, len(names), 2))


def save_figure(fig, names: Sequence[str], style, label: Mapping[str, str], path, dpi: int, *, title=None,
                handles=(), labels=()) -> Path:
    """Legend by family (family_legend), an optional title, then the PNG at `path`."""
    family_legend(fig, names, style, label, handles, labels)
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def family_legend(fig, names: Sequence[str], style, label: Mapping[str, str], handles=(), labels=()) -> None:
    """The figure's legend outside the axes: `handles`/`labels` first, then the policies
    under a bold heading per family; a closing note when a label names several curves."""
    from matplotlib.lines import Line2D

    handles, labels = list(handles), list(labels)
    heading = [i for i, h in enumerate(handles) if isinstance(h, Line2D) and h.get_linestyle() == "None"]
    group = None
    for info in ordered(names):
        if info.family != group:
            group = info.family
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(("oracle (offline)" if info.offline and info.family == "oracle" else
                           info.family.replace("_", " ") + (" (offline)" if info.offline else "")).upper())
            heading.append(len(handles) - 1)
        s = style[info.name]
        handles.append(Line2D([], [], color=s.colour, linestyle=s.linestyle, marker=s.marker, markersize=7,
                              linewidth=s.linewidth))
        labels.append(label.get(info.name, info.name))
    if any(" = " in label.get(p, "") for p in names):  # say why a policy has no line of its own
        handles.append(Line2D([], [], linestyle="none"))
        labels.append("a = b: identical curves,\ndrawn once")
    # more lines than the figure is tall (a tiered sweep: a curve per policy and pool) take two columns
    legend = fig.legend(handles, labels, loc="outside right upper", frameon=False, handlelength=3.2,
                        ncols=1 if len(handles) <= 36 else 2)
    texts = legend.get_texts()
    for i in heading:
        texts[i].set_fontweight("bold")


def _scale_to_online(ax, diffs: Mapping[str, Sequence[tuple[float, float]]], style) -> None:
    """Scale the difference panel to the online policies; mark each oracle that leaves
    it at the edge (a triangle where it is farthest) and write its largest difference."""
    offline = {p for p in diffs if policy_info(p).offline}
    lim = online_limits([y for p, d in diffs.items() if p not in offline for _, y in d])
    if lim is None:
        return
    ax.set_ylim(*lim)
    notes = []
    for p in sorted(offline):
        out = [(x, y) for x, y in diffs[p] if not lim[0] <= y <= lim[1]]
        if not out:
            continue
        x, y = max(out, key=lambda xy: abs(xy[1]))
        edge = lim[1] if y > lim[1] else lim[0]
        ax.plot([x], [edge], marker="^" if y > 0 else "v", markersize=12, color=style[p].colour, clip_on=False,
                zorder=5, linestyle="none")
        notes.append(f"{p}: {y:+.1f} pts at {size_label(x)}, off scale")
    if notes:
        # above the panel: inside it, a note would cover curves wherever they happen to be
        ax.set_title("\n".join(notes), loc="right", fontsize=12, color="#222222")


def _ticks(all_gib: Sequence[float]) -> list[float]:
    """The headline sizes inside the plotted range and its ends; a range with fewer than
    two headline sizes gets a few swept capacities as well."""
    if not all_gib:
        return []
    lo, hi = all_gib[0], all_gib[-1]
    heads = [g for _, g in HEADLINES if lo * 0.999 <= g <= hi * 1.001]
    extra = {lo, hi}
    if len(heads) < 2:
        k = min(5, len(all_gib))
        extra |= {all_gib[round(i * (len(all_gib) - 1) / max(1, k - 1))] for i in range(k)}
    out = sorted(set(heads) | extra)
    # drop a tick that would print on top of a headline tick or of its neighbour
    keep: list[float] = []
    for t in out:
        if t in heads or all(abs(t / h - 1) > 0.15 for h in heads):
            if keep and t / keep[-1] < 1.15 and keep[-1] not in heads:
                keep.pop()
            keep.append(t)
    return keep


def _regimes(ax, all_gib: Sequence[float]) -> list:
    """Shade the regimes inside the plotted range; returns them (for the legend)."""
    if not all_gib:
        return []
    lo, hi = all_gib[0], all_gib[-1]
    shown = []
    for reg in REGIMES:
        a, b = max(reg.lo_gib, lo), min(reg.hi_gib, hi)
        if a >= b:
            continue
        ax.axvspan(a, b, color=_REGIME_SHADE[reg.name], alpha=0.08, linewidth=0, zorder=0)
        shown.append(reg)
    return shown
