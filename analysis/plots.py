"""Curves of hit ratio and compute savings against cache capacity.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display needed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

# Oracles are drawn dashed so online policies stand out against them.
_DASHED = ("belady", "belady_compute", "beladycompute", "ilp")


def plot_curves(curves: Mapping[str, Sequence[Mapping]], path: str | Path, *, title: str = "",
                x: str = "capacity_gib") -> Path:
    """One PNG with two panels, hit ratio and compute savings, against capacity.

    curves: policy -> rows (dicts with `x`, `hit_ratio`, `compute_savings`), one row
    per capacity. The x axis is logarithmic (GiB by default).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharex=True)
    from matplotlib import colormaps

    names = sorted(curves)
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    color = {p: cmap(i % cmap.N) for i, p in enumerate(names)}
    for ax, key, label in ((axes[0], "hit_ratio", "block hit ratio"),
                           (axes[1], "compute_savings", "compute-savings ratio")):
        for policy in names:
            rows = sorted(curves[policy], key=lambda r: r[x])
            if not rows:
                continue
            xs = [float(r[x]) for r in rows]
            ys = [float(r[key]) for r in rows]
            style = "--" if policy.lower() in _DASHED else "-"
            ax.plot(xs, ys, style, color=color[policy], marker="o" if len(xs) <= 12 else None,
                    markersize=3, linewidth=1.4, label=policy)
        ax.set_xscale("log")
        ax.set_xlabel("cache capacity (GiB)" if x == "capacity_gib" else x)
        ax.set_ylabel(label)
        ax.set_ylim(0.0, 1.0)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(loc="best", fontsize=8, ncols=2 if len(curves) > 8 else 1)
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
