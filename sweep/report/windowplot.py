"""The figure of a windowed sweep (sim.window): hit ratio per window of trace time.

One panel per capacity shown (stacked: MLflow's artifact viewer is narrow), a line per
policy over the windows' start times, markers at the windows. The hit ratio does not
depend on the cost model, so one cost model's rows are drawn. Lines equal in every
window are drawn once, and a note above the panel names them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from .families import styles
from .plots import save_figure
from .regimes import identical_groups


def plot_windows(rows: Sequence[Mapping], cap_indices: Sequence[int], cap_labels: Mapping[int, str],
                 path: str | Path, title: str) -> Path:
    """`rows`: windows.csv rows of one cost model (sweep.report.windows.window_rows)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    span = max((float(r["start_s"]) for r in rows), default=0.0)
    unit, div = ("h", 3600.0) if span >= 3 * 3600 else ("min", 60.0)
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    st = styles(policies)
    fig = Figure(figsize=(11.0, 3.6 * len(cap_indices) + 1.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(cap_indices), 1, squeeze=False, sharex=True)
    for ax, i in zip((a[0] for a in axes), cap_indices):
        per = {p: sorted((r for r in rows if r["policy"] == p and r["capacity_index"] == i and r["accesses"]),
                         key=lambda r: r["window"]) for p in policies}
        groups = identical_groups(per, keys=("hit_ratio",), at="window")
        hidden = {p for g in groups for p in g[1:]}
        if groups:  # the legend is shared by the panels: the note is on the panel where they are equal
            ax.set_title("identical, drawn once: " + "; ".join(" = ".join(g) for g in groups), loc="right",
                         fontsize=10, color="#444444")
        for p in policies:
            if p in hidden or not per[p]:
                continue
            s = st[p]
            ax.plot([float(r["start_s"]) / div for r in per[p]], [float(r["hit_ratio"]) for r in per[p]],
                    color=s.colour, linestyle=s.linestyle, marker=s.marker, markersize=4, linewidth=s.linewidth)
        ax.set_title(f"HBM {cap_labels.get(i, i)}", loc="left")
        ax.set_ylabel("block hit ratio")
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel(f"window start ({unit} of trace time)")
    return save_figure(fig, policies, st, {}, path, 100, title=title)
