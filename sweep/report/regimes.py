"""Numbers that summarise a curve: one policy under one cost model, over capacity.

A curve is a list of rows (dicts, as in `curves.csv` and `sweep.curves.row_dict`) in
ascending capacity, each with at least `capacity_gib`, `capacity_blocks` and the metric
(`hit_ratio`, `compute_savings`). Child runs log `summary()` and `vs_reference()` as
MLflow metrics, and the report (sweep.report.html) ranks and compares with the same
functions, so a number in the report is the number in the runs table.

Sizes are matched to within half a block (a sweep converts sizes to whole blocks: 1 TiB
is 699,051 blocks of 1.5 MiB = 1024.0005 GiB).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

#: The paper's headline capacities (Table 2; conf/capacity/paper4.yaml): label, GiB.
HEADLINES: tuple[tuple[str, float], ...] = (("24GiB", 24.0), ("48GiB", 48.0), ("96GiB", 96.0), ("1TiB", 1024.0))

#: The curve metrics summarised per child run.
CURVE_KEYS = ("hit_ratio", "compute_savings")

#: cap99: the capacity from which a curve stays at or above this share of its value at
#: the largest capacity swept.
SATURATION_SHARE = 0.99


@dataclass(frozen=True)
class Regime:
    name: str  # metric suffix
    title: str
    lo_gib: float
    hi_gib: float


#: The paper's two deployment regimes (sec. 3.1; conf/capacity/hbm.yaml and pool.yaml).
REGIMES = (Regime("hbm", "HBM", 24.0, 120.0), Regime("pool", "memory pool", 256.0, 12288.0))


def _half_block(row: Mapping) -> float:
    return 0.5 * float(row["capacity_gib"]) / max(1.0, float(row["capacity_blocks"]))


def at_size(rows: Sequence[Mapping], gib: float) -> Mapping | None:
    """The row whose capacity is `gib` GiB (to within half a block), or None."""
    for r in rows:
        if abs(float(r["capacity_gib"]) - gib) <= _half_block(r) + 1e-9:
            return r
    return None


def in_regime(rows: Sequence[Mapping], regime: Regime) -> list[Mapping]:
    """The rows whose capacity lies in the regime's range (edges to within half a block)."""
    return [r for r in rows
            if regime.lo_gib - _half_block(r) - 1e-9 <= float(r["capacity_gib"]) <= regime.hi_gib + _half_block(r) + 1e-9]


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def auc_log(rows: Sequence[Mapping], key: str) -> float:
    """Area under the curve against ln(capacity), divided by the width of that range:
    the mean value over log capacity (trapezoids between swept capacities). Unlike the
    plain mean it does not depend on how densely a part of the range was swept. One
    capacity: its value."""
    pts = sorted((math.log(float(r["capacity_gib"])), float(r[key])) for r in rows)
    if not pts:
        return float("nan")
    if len(pts) == 1 or pts[-1][0] == pts[0][0]:
        return pts[0][1]
    area = sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(pts, pts[1:]))
    return area / (pts[-1][0] - pts[0][0])


def cap99(rows: Sequence[Mapping], key: str, share: float = SATURATION_SHARE) -> float:
    """The smallest swept capacity (GiB) from which the curve stays at or above `share`
    of its value at the largest swept capacity."""
    rs = sorted(rows, key=lambda r: float(r["capacity_gib"]))
    if not rs:
        return float("nan")
    target = share * float(rs[-1][key])
    out = float(rs[-1]["capacity_gib"])
    for r in reversed(rs):
        if float(r[key]) < target:
            break
        out = float(r["capacity_gib"])
    return out


def summary(rows: Sequence[Mapping]) -> dict[str, float]:
    """Metric name -> value for a complete curve, for each of hit_ratio and
    compute_savings: `_mean` (over the swept capacities), `_auc` (auc_log), `_cap99_gib`,
    `_at_<size>` for each headline size the sweep has, `_mean_<regime>` for each regime
    with a swept capacity."""
    out: dict[str, float] = {}
    for key in CURVE_KEYS:
        out[f"{key}_mean"] = mean([float(r[key]) for r in rows])
        out[f"{key}_auc"] = auc_log(rows, key)
        out[f"{key}_cap99_gib"] = cap99(rows, key)
        for label, gib in HEADLINES:
            r = at_size(rows, gib)
            if r is not None:
                out[f"{key}_at_{label}"] = float(r[key])
        for reg in REGIMES:
            rs = in_regime(rows, reg)
            if rs:
                out[f"{key}_mean_{reg.name}"] = mean([float(r[key]) for r in rs])
    return out


def vs_reference(rows: Sequence[Mapping], ref: Sequence[Mapping], name: str = "lru") -> dict[str, float]:
    """`<key>_vs_<name>_at_<size>`: the curve minus the reference curve, in points
    (x100), at each headline size both have."""
    out: dict[str, float] = {}
    for key in CURVE_KEYS:
        for label, gib in HEADLINES:
            a, b = at_size(rows, gib), at_size(ref, gib)
            if a is not None and b is not None:
                out[f"{key}_vs_{name}_at_{label}"] = 100.0 * (float(a[key]) - float(b[key]))
    return out


def diff_points(rows: Sequence[Mapping], ref: Sequence[Mapping], key: str) -> list[tuple[float, float]]:
    """(capacity GiB, curve - reference in points) at every capacity both have."""
    by_blocks = {int(r["capacity_blocks"]): float(r[key]) for r in ref}
    return [(float(r["capacity_gib"]), 100.0 * (float(r[key]) - by_blocks[int(r["capacity_blocks"])]))
            for r in rows if int(r["capacity_blocks"]) in by_blocks]


#: Curves closer than this on every point are the same curve (drawn once, listed together).
IDENTICAL_TOL = 1e-4


def identical_groups(curves: Mapping[str, Sequence[Mapping]], tol: float = IDENTICAL_TOL,
                     keys: Sequence[str] = CURVE_KEYS, at: str = "capacity_blocks") -> list[tuple[str, ...]]:
    """Groups (of two or more) of curves equal to within `tol` in every `key` at every
    point, points matched by `at` (a capacity, or `window` for per-window rows). Curves
    with different points are never identical. Each curve is compared with the first of
    a group (the tolerance is not transitive: this keeps groups from drifting). Names
    keep the order of `curves`; groups are ordered by their first name."""
    def points(rows):
        return {r[at]: tuple(float(r[k]) for k in keys) for r in rows}

    groups: list[tuple[str, dict, list[str]]] = []
    for name, rows in curves.items():
        if not rows:
            continue
        pts = points(rows)
        for _, first, members in groups:
            if pts.keys() == first.keys() and all(
                    all(abs(a - b) <= tol or (a != a and b != b) for a, b in zip(pts[x], first[x])) for x in pts):
                members.append(name)
                break
        else:
            groups.append((name, pts, [name]))
    return [tuple(m) for _, _, m in groups if len(m) > 1]
