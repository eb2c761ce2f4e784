"""Pool sizing of a tiered sweep: per policy and HBM capacity, the served ratio over the
pool sizes (and the write/admission modes swept), the knee, the mode that wins there,
the mean TTFT there and the gap to the hierarchy's bound (sim_core's `tier_bound`).

The knee is the smallest pool within KNEE_POINTS of the saturated served ratio: the best
mode's at the largest pool swept. When that is the largest pool itself, the served ratio
still rises by more than KNEE_POINTS there: the curve is not saturated in the range swept,
and every reader says so (`Sizing.saturated`, `knee_text`) instead of calling the largest
pool a knee. The mode that wins at the knee is the one serving the most there; tables give
the knee on that mode's row. The console table (`tier_table`), the report's section
(sweep.report.sections) and `advise` read the same `Sizing`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from sim_core.catalog.capacity import human_gib

from ..plan import Capacity
from .families import pool_key, pool_parts
from .tables import pick_points

KNEE_POINTS = 0.01  # the knee: the smallest pool within 1 point of the saturated served ratio
BOUND = "tier_bound"  # sim_core's bound of the hierarchy (Belady over HBM + every tier)
TIE = 1e-4  # modes this close at the knee tie


def knee(pools: Sequence[tuple[str, float]]) -> int:
    """Index of the smallest pool whose served ratio is within KNEE_POINTS of the largest
    pool's. `pools` are (label, served ratio), smallest pool first."""
    top = pools[-1][1]
    return next(i for i, (_, s) in enumerate(pools) if s >= top - KNEE_POINTS - 1e-12)


def value(row, key: str) -> float:
    """A metric of a result row: a sim_core Result or a curves.csv mapping."""
    v = row.get(key, math.nan) if isinstance(row, Mapping) else getattr(row, key, math.nan)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Sizing:
    """One policy at one HBM capacity, over the pool axis."""

    sizes: tuple[str, ...]  # pool sizes, smallest first ("dram=1TiB")
    modes: tuple[str, ...]  # the modes swept (("",): one)
    served: Mapping[tuple[str, str], float]  # (size, mode) -> served ratio
    ttft: Mapping[tuple[str, str], float]  # (size, mode) -> mean TTFT in seconds (NaN: no hardware)
    knee: str  # a size
    mode: str  # the mode serving the most at the knee
    tied: tuple[str, ...]  # the modes within TIE of it there (itself included)
    bound: float  # the bound's served ratio at the knee's size (NaN: not run)

    def at(self, size: str, mode: str | None = None) -> float:
        return self.served.get((size, self.mode if mode is None else mode), math.nan)

    @property
    def saturated(self) -> bool:
        """False when the knee is the largest pool swept: the served ratio still rises by more
        than KNEE_POINTS from the pool below it (or only one pool size was swept)."""
        return len(self.sizes) > 1 and self.knee != self.sizes[-1]

    @property
    def gap_points(self) -> float:
        """The bound minus this policy's served ratio at the knee, in points."""
        return (self.bound - self.at(self.knee)) * 100


def pool_sizing(rows: Mapping[str, object], bound: Mapping[str, object] | None = None) -> Sizing | None:
    """`rows`: pool label -> this policy's result row at one HBM capacity; `bound`: pool
    sizes -> the bound's row there. None when a pool size lacks a result in every mode."""
    served, ttft, sizes, modes = {}, {}, [], []
    for label in sorted(rows, key=pool_key):
        size, mode = pool_parts(label)
        sizes += [size] * (size not in sizes)
        modes += [mode] * (mode not in modes)
        served[(size, mode)] = value(rows[label], "served_ratio")
        ttft[(size, mode)] = value(rows[label], "ttft_mean_s")
    if len(modes) > 1 and "" in modes:  # a pool of size 0 runs once: the flat cache, in every mode
        modes.remove("")
        for size in sizes:
            if (size, "") in served:
                for m in modes:
                    served.setdefault((size, m), served[(size, "")])
                    ttft.setdefault((size, m), ttft[(size, "")])
    best = [max((served[(s, m)] for m in modes if (s, m) in served), default=math.nan) for s in sizes]
    if not sizes or any(b != b for b in best):
        return None
    k = sizes[knee(list(zip(sizes, best)))]
    at_knee = {m: served[(k, m)] for m in modes if (k, m) in served}
    win = max(at_knee, key=lambda m: (at_knee[m], -modes.index(m)))
    tied = tuple(m for m in modes if m in at_knee and at_knee[m] >= at_knee[win] - TIE)
    b = value(bound[k], "served_ratio") if bound and k in bound else math.nan
    return Sizing(tuple(sizes), tuple(modes), served, ttft, k, win, tied, b)


NOT_SATURATED = "not saturated in the range swept"


def knee_text(s: Sizing, short: bool = False) -> str:
    """The knee as tables print it: its size, or that there is none in the range swept."""
    if s.saturated:
        return s.knee
    return f">{s.knee}" if short else f"{NOT_SATURATED} (>{s.knee})"


def axes(labels) -> tuple[list[str], list[str]]:
    """(the pool sizes, smallest first; the modes swept, [""] when none) of pool labels."""
    labels = sorted(labels, key=pool_key)
    sizes = list(dict.fromkeys(pool_parts(p)[0] for p in labels))
    modes = list(dict.fromkeys(m for p in labels if (m := pool_parts(p)[1]))) or [""]
    return sizes, modes


def by_capacity(series: Mapping[tuple[str, str], Mapping[int, object]], policy: str, i: int) -> Sizing | None:
    """`series`: (policy, pool label) -> capacity index -> row, as the report reads curves."""
    rows = {pool: s[i] for (p, pool), s in series.items() if p == policy and i in s}
    bound = {pool: s[i] for (p, pool), s in series.items() if p == BOUND and i in s}
    return pool_sizing(rows, bound) if rows else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds == seconds else "-"


def tier_table(curves, capacities: Sequence[Capacity], points: int = 4) -> str:
    """The console's pool sizing: per policy and HBM capacity (and mode, when modes were
    swept) the served ratio at each pool size; the knee, the mode that wins there, the mean
    TTFT there and the gap to the bound. `curves` are sweep Curves (served ratio and TTFT do
    not depend on the cost model: the first cost model's are read)."""
    series: dict = {}
    first = {}
    for c in curves:
        if first.setdefault((c.policy, c.pool), c.cost_model) == c.cost_model:
            series[(c.policy, c.pool)] = c.rows
    policies = list(dict.fromkeys(p for p, _ in series))
    grid = [(p, i) for p in policies for i in pick_points(len(capacities), points)]
    sized = {(p, i): s for p, i in grid if (s := by_capacity(series, p, i)) is not None}
    if not sized:
        return ""
    sizes = max((s.sizes for s in sized.values()), key=len)
    swept = any(len(s.modes) > 1 for s in sized.values())
    has_bound = any(s.bound == s.bound for s in sized.values())
    names = {p: p + (" [oracle]" if p == BOUND else "") for p in policies}
    pw = max([len("policy")] + [len(n) for n in names.values()])
    mw = max([len("mode")] + [len(m) for s in sized.values() for m in s.modes]) if swept else 0
    knees = {k: knee_text(s, short=True) for k, s in sized.items()}
    kw = max([len("knee")] + [len(t) for t in knees.values()])
    ties = any(len(s.tied) > 1 for s in sized.values())  # the row is the winner's: only a tie needs a column
    wins = {k: "tie" if len(s.tied) > 1 else "" for k, s in sized.items()}
    ww = len("tie")
    cw = max([8] + [len(z) + 1 for z in sizes])
    lines = ["pool sizing: served ratio (block accesses served by HBM or a lower tier) at each pool size",
             f"knee: the smallest pool within {KNEE_POINTS * 100:g} point of the saturated served ratio"
             + (",\n  on the row of the mode serving the most there (tie: another mode serves as much)"
                if swept else ""),
             "TTFT ms: mean time to first token at the knee (service time, no queueing)"]
    if has_bound:
        lines.append("gap: tier_bound [oracle: Belady over HBM + every tier] minus the policy at the knee, in points")
    lines.append("")
    head = (f"{'policy':<{pw}}  {'HBM':>8}  " + (f"{'mode':<{mw}}  " if swept else "")
            + "  ".join(f"{s:>{cw}}" for s in sizes) + f"  {'knee':>{kw}}" + (f"  {'tie':<{ww}}" if ties else "")
            + f"  {'TTFT ms':>8}" + (f"  {'gap':>6}" if has_bound else ""))
    lines += [head, "-" * len(head)]
    for (p, i), s in sized.items():
        for m in s.modes:
            cells = "  ".join(f"{s.at(z, m):>{cw}.4f}" if s.at(z, m) == s.at(z, m) else f"{'-':>{cw}}" for z in sizes)
            row = f"{names[p]:<{pw}}  {human_gib(capacities[i].gib):>8}  " + (f"{m:<{mw}}  " if swept else "") + cells
            if m == s.mode:  # the knee, its TTFT and gap on the row of the mode that wins there
                gap = f"{s.gap_points:>+6.2f}" if s.gap_points == s.gap_points and p != BOUND else f"{'-':>6}"
                row += (f"  {knees[(p, i)]:>{kw}}" + (f"  {wins[(p, i)]:<{ww}}" if ties else "")
                        + f"  {_ms(s.ttft.get((s.knee, s.mode), math.nan)):>8}" + (f"  {gap}" if has_bound else ""))
            lines.append(row.rstrip())
    if any(not s.saturated for s in sized.values()):
        lines += [f">{sizes[-1]}: {NOT_SATURATED}: the served ratio still rises by more than "
                  f"{KNEE_POINTS * 100:g} point", "  at the largest pool, so no knee is known (TTFT and gap: there)"]
    return "\n".join(lines)
