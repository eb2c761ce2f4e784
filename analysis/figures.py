"""Figures of a workload characterization (paper sec. 4, Figs. 3-6, 9, 10).

matplotlib's object API on the Agg canvas, as sweep/report/plots.py: no display needed.
Distributions with many zeros (one-hit blocks have lifetime 0) are drawn on a log axis
over their positive values; the share at zero is given in the legend.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np


def _figure(panels: int, width: float = 5.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * panels, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels)
    return fig, (list(axes) if panels > 1 else [axes])


def _save(fig, path: Path, title: str) -> Path:
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


#: most points a CDF line is drawn with
CDF_POINTS = 4096


def _cdf(ax, values: np.ndarray, label: str) -> None:
    v = np.sort(np.asarray(values))  # one copy, in the values' own dtype (float32 reuse intervals)
    n = len(v)
    if not n:
        return
    first = int(np.searchsorted(v, v.dtype.type(0), side="right"))  # values at or below 0 (a Python 0
    # would cast v to float64 first: 5 GB at full scale)
    m = n - first
    if m:
        # CDF over all values (zeros included), drawn from the smallest positive value; a
        # step per value costs matplotlib gigabytes at full scale (one per block reuse):
        # rank-spaced points are exact where drawn and, 1/4096 of the CDF apart,
        # indistinguishable at the figure's resolution
        keep = np.arange(m) if m <= CDF_POINTS else np.unique(np.linspace(0, m - 1, CDF_POINTS).astype(np.int64))
        ax.step(v[first + keep].astype(np.float64), (first + keep + 1) / n, where="post",
                label=f"{label} (n={n:,}; {first / n:.1%} at 0)")


def cdf_figure(series: Mapping[str, np.ndarray], path: Path, *, xlabel: str, title: str = "") -> Path:
    """CDFs on a log x axis, one line per series."""
    fig, (ax,) = _figure(1, 6.5)
    for label, values in series.items():
        _cdf(ax, values, label)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path, title)


def frequency_figure(profile: Sequence[Mapping], further: Sequence[Mapping], path: Path, title: str = "") -> Path:
    """Paper Fig. 5: reuse interval and lifetime against frequency (median, P25-P75), and
    the probability of a further reuse after the k-th access."""
    fig, axes = _figure(3)
    labels = [r["accesses"] for r in profile]
    x = np.arange(len(labels))
    for ax, key, ylabel in ((axes[0], "interval_s", "reuse interval (s)"), (axes[1], "lifetime_s", "lifetime (s)")):
        med = np.array([r[key]["median"] for r in profile], dtype=np.float64)
        lo = np.array([r[key]["p25"] for r in profile], dtype=np.float64)
        hi = np.array([r[key]["p75"] for r in profile], dtype=np.float64)
        ok = np.isfinite(med) & (med > 0)
        ax.plot(x[ok], med[ok], marker="o", label="median")
        ax.fill_between(x[ok], np.maximum(lo[ok], med[ok] * 1e-3), hi[ok], alpha=0.25, label="P25-P75")
        ax.set_yscale("log")
        ax.set_xticks(x, labels, rotation=45, fontsize=7)
        ax.set_xlabel("accesses per block")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ks = [r["k"] for r in further]
    axes[2].plot(ks, [r["p_further_reuse"] for r in further], marker="o")
    axes[2].set_xlabel("accesses so far (k)")
    axes[2].set_ylabel("P(accessed again)")
    axes[2].set_ylim(0, 1)
    axes[2].grid(True, alpha=0.3)
    return _save(fig, path, title)


def footprint_figure(footprints: np.ndarray, lorenz_x: np.ndarray, lorenz_y: np.ndarray, gib_per_block: float,
                     path: Path, title: str = "") -> Path:
    """Paper Fig. 10: footprint CCDF by sessions and by KV bytes, and the Lorenz curve."""
    fig, axes = _figure(2)
    f = np.sort(np.asarray(footprints, dtype=np.float64))
    gib = f * gib_per_block
    n = len(f)
    by_sessions = 1.0 - np.arange(1, n + 1) / n  # share of sessions larger than each footprint
    by_bytes = 1.0 - np.cumsum(f) / f.sum()  # share of bytes in larger sessions
    axes[0].step(gib, by_sessions, where="post", label="sessions")
    axes[0].step(gib, by_bytes, where="post", label="KV bytes")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("session KV footprint (GiB)")
    axes[0].set_ylabel("share above (CCDF)")
    axes[0].grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].plot(lorenz_x, lorenz_y)
    axes[1].plot([0, 1], [0, 1], "--", color="grey", linewidth=0.8)
    axes[1].set_xlabel("share of sessions, largest first")
    axes[1].set_ylabel("share of KV bytes")
    axes[1].grid(True, alpha=0.3)
    return _save(fig, path, title)


def concurrency_figure(times: np.ndarray, active: np.ndarray, path: Path, title: str = "") -> Path:
    fig, (ax,) = _figure(1, 8)
    if len(times):
        t0 = float(times[0])
        ax.step((np.asarray(times) - t0) / 3600.0, active, where="post")
    ax.set_xlabel("hours since the first session start")
    ax.set_ylabel("active multi-turn sessions")
    ax.grid(True, alpha=0.3)
    return _save(fig, path, title)
