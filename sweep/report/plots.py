"""The figure of one cost model: curves against capacity, and their difference to LRU.

One PNG per cost model (the parent run's `plots/curves_<cost model>.png`, embedded in
`report.html`). What it shows and why:
- only the capacities below saturation (sim_core.saturation_capacity) and the first one
  at or above it: from there on every policy holds the whole trace and every curve is
  flat and equal (on the default trace that is the upper 60% of the log range);
- the value panel(s) on top, the difference to LRU in points beneath (differences of a
  point or two are invisible on a 0-1 axis);
- under `uniform` compute savings equal the hit ratio: one pair of panels; otherwise
  compute savings, then hit ratio, stacked (the figure stays narrow enough to read where
  MLflow's artifact viewer scales it down);
- families share a colour, members differ by line style and marker, oracles are black
  and dashed (sweep.report.families); the legend sits outside the axes, grouped by family;
- x ticks at the paper's headline sizes (24, 48, 96 GiB, 1 TiB), the HBM and memory
  pool regimes shaded; the y axes fit the data.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display needed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from sim_core.capacity import human_gib

from .regimes import HEADLINES, REGIMES, diff_points
from .families import ordered, styles

LABELS = {"hit_ratio": "block hit ratio", "compute_savings": "compute-savings ratio"}
_REGIME_SHADE = {"hbm": "#4c72b0", "pool": "#55a868"}


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
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    names = [p for p in curves if curves[p]]
    style = styles(names)
    keys = panel_keys(cost_model)
    zoom = {p: zoomed(curves[p], saturation_blocks) for p in names}
    ref = zoom.get(reference)
    all_gib = sorted({float(r["capacity_gib"]) for rs in zoom.values() for r in rs})
    sat_row = None
    if saturation_blocks and names:
        sat_rows = [r for r in zoom[names[0]] if float(r["capacity_blocks"]) >= saturation_blocks]
        sat_row = sat_rows[0] if sat_rows else None

    # Narrow and tall: MLflow's artifact viewer scales an image to its pane (about 600 px
    # beside the run's file tree), so panels are stacked rather than side by side.
    with matplotlib.rc_context({"font.size": 15, "axes.titlesize": 16, "axes.labelsize": 15,
                                "xtick.labelsize": 14, "ytick.labelsize": 14, "legend.fontsize": 14}):
        fig = Figure(figsize=(11.0, max(10.5, 8.5 * len(keys) + 0.5)), layout="constrained")
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(2 * len(keys), 1, height_ratios=[3, 2] * len(keys))
        for row, key in enumerate(keys):
            top = fig.add_subplot(grid[2 * row, 0])
            bottom = fig.add_subplot(grid[2 * row + 1, 0], sharex=top)
            for p in names:
                rs = zoom[p]
                s = style[p]
                xs = [float(r["capacity_gib"]) for r in rs]
                every = max(1, len(xs) // 8)  # markers tell members apart; on every point they clutter
                z = 3 if p == reference else 2  # the baseline stays visible under a curve equal to it
                top.plot(xs, [float(r[key]) for r in rs], color=s.colour, linestyle=s.linestyle, marker=s.marker,
                         markevery=every, markersize=7, linewidth=s.linewidth, zorder=z)
                if ref is not None and p != reference:
                    d = diff_points(rs, ref, key)
                    bottom.plot([x for x, _ in d], [y for _, y in d], color=s.colour, linestyle=s.linestyle,
                                marker=s.marker, markevery=every, markersize=7, linewidth=s.linewidth)
            if ref is not None:
                bottom.axhline(0.0, color=style[reference].colour, linewidth=2.4, zorder=3)
                bottom.set_ylabel(f"minus {reference.upper()} (points)")
            else:
                bottom.text(0.5, 0.5, f"{reference.upper()} is not in this sweep:\nno difference panel",
                            transform=bottom.transAxes, ha="center", va="center")
                bottom.set_yticks([])
            top.set_ylabel(LABELS[key] + (" (= hit ratio)" if cost_model == "uniform" else ""))
            sub = LABELS[key] if cost_model != "uniform" else f"{LABELS[key]} = block hit ratio"
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

        from matplotlib.patches import Patch

        handles, labels = [], []
        if shown:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append("REGIMES (shaded)")
            for reg in shown:
                handles.append(Patch(color=_REGIME_SHADE[reg.name], alpha=0.2))
                labels.append(f"{reg.title} {size_label(reg.lo_gib)}-{size_label(reg.hi_gib)}")
        group = None
        for info in ordered(names):
            if info.family != group:
                group = info.family
                handles.append(Line2D([], [], linestyle="none"))
                labels.append(("oracle (offline)" if info.offline else info.family.replace("_", " ")).upper())
            s = style[info.name]
            handles.append(Line2D([], [], color=s.colour, linestyle=s.linestyle, marker=s.marker, markersize=7,
                                  linewidth=s.linewidth))
            labels.append(info.name)
        legend = fig.legend(handles, labels, loc="outside right upper", frameon=False, handlelength=3.2)
        for text, handle in zip(legend.get_texts(), handles):
            if isinstance(handle, Line2D) and handle.get_linestyle() == "None":  # a heading
                text.set_fontweight("bold")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    return path


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
