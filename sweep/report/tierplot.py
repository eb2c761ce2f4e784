"""The figure of a tiered sweep: served ratio and estimated TTFT over the pool size.

One column per HBM capacity shown, a served-ratio panel (HBM + lower tiers) and, when the
sweep had a `hardware` part, a mean TTFT panel (service time, no queueing), over the pool
sizes swept (categorical x: a pool of size 0 is the flat cache), a line per policy (and
write/admission mode, when several were swept). Policies keep the styles of
sweep.report.families; markers sit at swept pool sizes only, a missing point
leaves a gap rather than a segment across it, and lines equal at every pool size are
drawn once with a note above the panel naming them.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from dataclasses import replace
from typing import Mapping, Sequence

from .families import pool_parts, styles
from .plots import save_figure
from .regimes import identical_groups
from .sizing import by_capacity, value

Series = Mapping[tuple[str, str], Mapping[int, Mapping]]  # (policy, pool) -> capacity index -> row


def has_ttft(series: Series) -> bool:
    return any(value(r, "ttft_mean_s") == value(r, "ttft_mean_s") for s in series.values() for r in s.values())


WIDE = 2  # HBM capacities side by side
MODE_LINES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)), (0, (3, 1, 1, 1)))


def plot_tiers(series: Series, cap_labels: Mapping[int, str], sizes: Sequence[str], modes: Sequence[str],
               cap_indices: Sequence[int], path: str | Path, title: str) -> Path:
    """`series`: rows of one cost model (served ratio and TTFT do not depend on it), by
    (policy, pool label). With several write/admission modes, a policy keeps its colour
    and marker and each mode has its line style."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    policies = list(dict.fromkeys(p for p, _ in series))
    own = {p: [m for m in modes if any(q == p and pool_parts(pool)[1] == m for q, pool in series)] or [""]
           for p in policies}  # the bound has one line whatever the modes
    swept = len(modes) > 1
    st = {p: replace(s, linestyle="-") if swept and own[p] != [""] else s for p, s in styles(policies).items()}
    lines = {(p, m): f"{p} [{m}]" if m and swept else p for p in policies for m in own[p]}
    panels = [("served_ratio", "served ratio", 1.0)] + ([("ttft_mean_s", "TTFT mean (ms)", 1e3)]
                                                        if has_ttft(series) else [])
    # two HBM capacities a row: MLflow's artifact pane is 570-1,000 px wide (less with its
    # assistant open), and a figure 1,200 px wide keeps 15-point ticks (23 px) above 10 px
    # there (four side by side made them 7 px)
    ncols = min(WIDE, len(cap_indices))
    nblocks = -(-len(cap_indices) // ncols)
    with matplotlib.rc_context({"font.size": 13, "axes.titlesize": 14, "legend.fontsize": 12,
                                "xtick.labelsize": 15, "ytick.labelsize": 15}):
        fig = Figure(figsize=(4.2 * ncols + 2.5, (3.6 * len(panels)) * nblocks + 0.7), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(panels) * nblocks, ncols, squeeze=False)
        for j in range(len(cap_indices), nblocks * ncols):  # an odd count leaves cells empty
            for row in range(len(panels)):
                axes[(j // ncols) * len(panels) + row][j % ncols].set_visible(False)
        return _draw(fig, axes, series, cap_labels, sizes, modes, cap_indices, panels, policies, own, st, lines,
                     swept, ncols, path, title)


def _draw(fig, axes, series, cap_labels, sizes, modes, cap_indices, panels, policies, own, st, lines, swept, ncols,
          path, title) -> Path:
    from matplotlib.lines import Line2D

    x = list(range(len(sizes)))
    for j, i in enumerate(cap_indices):
        col = j % ncols
        sized = {p: by_capacity(series, p, i) for p in policies}
        for row, (key, label, scale) in enumerate(panels):
            ax = axes[(j // ncols) * len(panels) + row][col]
            ys = {}
            for (p, m), name in lines.items():
                sz = sized[p]
                got = (sz.served if key == "served_ratio" else sz.ttft) if sz is not None else {}
                ys[name] = [got.get((z, m), float("nan")) * scale for z in sizes]
            groups = identical_groups({n: [{"pool": j, key: y} for j, y in enumerate(v)] for n, v in ys.items()},
                                      keys=(key,), at="pool")
            hidden = {n for g in groups for n in g[1:]}
            for (p, m), name in lines.items():
                if name not in hidden:
                    s = st[p]
                    ax.plot(x, ys[name], color=s.colour, marker=s.marker, linewidth=s.linewidth,
                            linestyle=MODE_LINES[modes.index(m) % len(MODE_LINES)] if m and swept else s.linestyle)
            if groups:  # a line drawn once says whose it is (the legend is shared by the panels);
                # in the title row, where it covers no data
                ax.set_title(textwrap.fill("drawn once: " + "; ".join(" = ".join(g) for g in groups), 40),
                             loc="right", fontsize=11, color="#444444")
            ax.set_xticks(x, [z.split("=", 1)[-1] for z in sizes], rotation=30)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"HBM {cap_labels[i]}", loc="left")
            if row == len(panels) - 1:
                ax.set_xlabel(f"pool ({sizes[0].split('=', 1)[0] if sizes else ''})")
    handles, labels = [], []
    if swept:  # the modes' line styles head the legend
        handles = [Line2D([], [], linestyle="none")] + [
            Line2D([], [], color="#444444", linestyle=MODE_LINES[j % len(MODE_LINES)]) for j in range(len(modes))]
        labels = ["MODE"] + list(modes)
    return save_figure(fig, policies, st, {}, path, 110, title=title, handles=handles, labels=labels)
