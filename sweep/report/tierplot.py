"""The figure of a tiered sweep: served ratio and estimated TTFT over the pool size.

One column per HBM capacity shown, a served-ratio panel (HBM + lower tiers) and, when the
sweep had a `hardware` part, a mean TTFT panel (service time, no queueing), over the pool
sizes swept (categorical x: a pool of size 0 is the flat cache). Policies keep the
styles of sweep.report.families; markers sit at swept pool sizes only, a missing point
leaves a gap rather than a segment across it, and lines equal at every pool size are
drawn once with a note above the panel naming them.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Mapping, Sequence

from .families import styles
from .plots import save_figure
from .regimes import identical_groups

Series = Mapping[tuple[str, str], Mapping[int, Mapping]]  # (policy, pool) -> capacity index -> row


def has_ttft(series: Series) -> bool:
    return any(r.get("ttft_mean_s", float("nan")) == r.get("ttft_mean_s") for s in series.values() for r in s.values())


def plot_tiers(series: Series, cap_labels: Mapping[int, str], pools: Sequence[str], cap_indices: Sequence[int],
               path: str | Path, title: str) -> Path:
    """`series`: rows of one cost model (served ratio and TTFT do not depend on it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    policies = list(dict.fromkeys(p for p, _ in series))
    st = styles(policies)
    panels = [("served_ratio", "served ratio", 1.0)] + ([("ttft_mean_s", "TTFT mean (ms)", 1e3)]
                                                        if has_ttft(series) else [])
    fig = Figure(figsize=(4.2 * len(cap_indices) + 2.5, 3.8 * len(panels) + 0.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), len(cap_indices), squeeze=False)
    x = list(range(len(pools)))
    for col, i in enumerate(cap_indices):
        for row, (key, label, scale) in enumerate(panels):
            ax = axes[row][col]
            ys = {p: [float(series[(p, pool)][i].get(key, float("nan"))) * scale
                      if i in series.get((p, pool), {}) else float("nan") for pool in pools] for p in policies}
            groups = identical_groups({p: [{"pool": j, key: y} for j, y in enumerate(v)] for p, v in ys.items()},
                                      keys=(key,), at="pool")
            hidden = {p for g in groups for p in g[1:]}
            for p in policies:
                if p not in hidden:
                    s = st[p]
                    ax.plot(x, ys[p], color=s.colour, linestyle=s.linestyle, marker=s.marker, linewidth=s.linewidth)
            if groups:  # a line drawn once says whose it is (the legend is shared by the panels);
                # in the title row, where it covers no data
                ax.set_title(textwrap.fill("drawn once: " + "; ".join(" = ".join(g) for g in groups), 40),
                             loc="right", fontsize=9, color="#444444")
            ax.set_xticks(x, [p.split("=", 1)[-1] for p in pools], rotation=30)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"HBM {cap_labels[i]}", loc="left")
            if row == len(panels) - 1:
                ax.set_xlabel(f"pool ({pools[0].split('=', 1)[0] if pools else ''})")
    return save_figure(fig, policies, st, {}, path, 110, title=title)
