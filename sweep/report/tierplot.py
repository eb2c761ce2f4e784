"""The figure of a tiered sweep: served ratio and estimated TTFT over the pool size.

One column per HBM capacity shown in the summary, two panels each: the served ratio
(HBM + lower tiers) and the mean TTFT (service time, no queueing), over the pool sizes
swept (categorical x: a pool of size 0 is the flat cache). Policies keep the colours
and line styles of sweep.report.families; markers sit at swept pool sizes only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .families import styles


def plot_tiers(curves: Sequence, capacities: Sequence, pools: Sequence[str], cap_indices: Sequence[int],
               path: str | Path, title: str) -> Path:
    """`curves`: sweep Curves of one cost model (served ratio and TTFT do not depend on it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    by = {(c.policy, c.pool): c for c in curves}
    policies = list(dict.fromkeys(c.policy for c in curves))
    st = styles(policies)
    fig = Figure(figsize=(4.2 * len(cap_indices) + 2.5, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(cap_indices), squeeze=False)
    x = list(range(len(pools)))
    for col, i in enumerate(cap_indices):
        for row, (key, label, scale) in enumerate((("served_ratio", "served ratio", 1.0),
                                                   ("ttft_mean_s", "TTFT mean (ms)", 1e3))):
            ax = axes[row][col]
            for p in policies:
                ys = [getattr(by[(p, pool)].rows[i], key) * scale
                      if (p, pool) in by and i in by[(p, pool)].rows else float("nan") for pool in pools]
                s = st[p]
                ax.plot(x, ys, color=s.colour, linestyle=s.linestyle, marker=s.marker, linewidth=s.linewidth, label=p)
            ax.set_xticks(x, [p.split("=", 1)[-1] for p in pools], rotation=30)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"HBM {capacities[i].label}")
            else:
                ax.set_xlabel(f"pool ({pools[0].split('=', 1)[0] if pools else ''})")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper")
    fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
