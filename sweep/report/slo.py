"""A serving sweep's SLO (fleet.slo_ttft, fleet.slo_tpot) read off its rows: which capacity
meets it, and up to which load. The console table (sweep.report.tables), the report
(sweep.report.serving), the child runs' summary metrics and `advise` all read it here.

A row is a serving result as sweep.serving.serve_row flattens it (with the capacity's
`capacity_gib` and `capacity_blocks`), which carries its SLO (`slo_ttft_s`, `slo_tpot_s`;
NaN: none). A capacity meets the SLO when its p99 TTFT is within the TTFT bound and its
mean TPOT within the TPOT bound (each when given).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from sim_core.catalog.capacity import human_gib

Row = Mapping[str, float]


def _num(row: Row, key: str) -> float:
    try:
        return float(row.get(key, math.nan))
    except (TypeError, ValueError):
        return math.nan


def seconds(x: float) -> str:
    """2s, 500ms, 12.3s, 1,650s: a latency as an SLO is written."""
    if x != x:
        return "-"
    return f"{x * 1e3:.3g}ms" if x < 1 else f"{x:.3g}s" if x < 1000 else f"{x:,.0f}s"


@dataclass(frozen=True)
class Slo:
    ttft_s: float = math.nan  # bound on p99 TTFT (NaN: none)
    tpot_s: float = math.nan  # bound on mean TPOT (NaN: none)

    @classmethod
    def of(cls, rows: Sequence[Row]) -> "Slo":
        """The SLO the rows were served under (the first row that has one)."""
        for r in rows:
            s = cls(_num(r, "slo_ttft_s"), _num(r, "slo_tpot_s"))
            if s.given:
                return s
        return cls()

    @property
    def given(self) -> bool:
        return self.ttft_s == self.ttft_s or self.tpot_s == self.tpot_s

    def text(self) -> str:
        """'p99 TTFT <= 2s and mean TPOT <= 100ms'."""
        parts = ([f"p99 TTFT <= {seconds(self.ttft_s)}"] if self.ttft_s == self.ttft_s else []) + \
                ([f"mean TPOT <= {seconds(self.tpot_s)}"] if self.tpot_s == self.tpot_s else [])
        return " and ".join(parts) or "no SLO"

    def meets(self, row: Row) -> bool:
        """Within every bound given (a TPOT that is NaN, no request with two output
        tokens, is within any bound)."""
        if self.ttft_s == self.ttft_s and not _num(row, "ttft_p99_s") <= self.ttft_s:
            return False
        tpot = _num(row, "tpot_mean_s")
        return not (self.tpot_s == self.tpot_s and tpot == tpot and tpot > self.tpot_s)


def size(row: Row) -> str:
    """'188GiB': a capacity as the tables print it."""
    return human_gib(_num(row, "capacity_gib"), digits=3)


def cap_text(row: Row) -> str:
    """'188GiB (4,000 blocks)'."""
    return f"{size(row)} ({int(_num(row, 'capacity_blocks')):,} blocks)"


def met_from(rows: Sequence[Row], slo: Slo) -> Row | None:
    """The smallest capacity from which every larger one swept meets the SLO (None: the
    largest misses it)."""
    out = None
    for r in sorted(rows, key=lambda r: _num(r, "capacity_blocks"), reverse=True):
        if not slo.meets(r):
            break
        out = r
    return out


def capacity_sentence(policy: str, rows: Sequence[Row], slo: Slo, said: bool = False) -> str:
    """'lru: meets the SLO (p99 TTFT <= 2s) from 188GiB (4,000 blocks) up', or never;
    `said`: the SLO was named just before (the sentence leaves it out)."""
    what = "it" if said else f"the SLO ({slo.text()})"
    r = met_from(rows, slo)
    if r is not None:
        p99 = _num(r, "ttft_p99_s")
        under = f", {100.0 * (1.0 - p99 / slo.ttft_s):.0f}% under the bound" if slo.ttft_s == slo.ttft_s else ""
        return f"{policy}: meets {what} from {cap_text(r)} up" + (
            " (the smallest capacity swept)" if r is min(rows, key=lambda x: _num(x, "capacity_blocks")) else "") + \
            f"; p99 TTFT {seconds(p99)} there{under}"
    some = [x for x in rows if slo.meets(x)]
    if some:
        return (f"{policy}: meets {what} only at {', '.join(cap_text(x) for x in some)}, not at the larger "
                f"capacities swept")
    best = min(rows, key=lambda x: _num(x, "ttft_p99_s"), default=None)
    tail = f" (lowest p99 TTFT {seconds(_num(best, 'ttft_p99_s'))}, at {cap_text(best)})" if best else ""
    return f"{policy}: never meets {what} in the range swept{tail}"


def load_limit(by_load: Mapping[float, Row], slo: Slo) -> tuple[float | None, float | None]:
    """(the highest load up to which every load swept meets the SLO, the lowest load that
    misses it): None for the first when the lowest load misses, None for the second when
    every load meets it. `by_load`: one capacity's row per load."""
    ok = None
    for load in sorted(by_load):
        if not slo.meets(by_load[load]):
            return ok, load
        ok = load
    return ok, None


def limit_text(ok: float | None, miss: float | None) -> str:
    """'2x' (misses from 4x), 'none' (misses at the lowest load), '4x (all)'."""
    if ok is None:
        return "none"
    return f"{ok:g}x" + (" (all)" if miss is None else "")


def load_sentence(policy: str, series: Mapping[float, Mapping[int, Row]], slo: Slo) -> str:
    """Where a policy's p99 TTFT crosses the SLO along the load axis, at each capacity
    swept: 'lru: meets the SLO up to 2x load (misses at 4x) at 188GiB; ...'. `series`:
    load -> capacity index -> row."""
    idx = sorted({i for rows in series.values() for i in rows})
    said: dict[str, list[str]] = {}  # what happens -> at which capacities, in capacity order
    for i in idx:
        by_load = {load: rows[i] for load, rows in series.items() if i in rows}
        ok, miss = load_limit(by_load, slo)
        if ok is None:
            what = f"misses it already at {miss:g}x load"
        elif miss is None:
            what = f"meets it at every load swept (up to {ok:g}x)"
        else:
            what = f"meets it up to {ok:g}x load and misses it at {miss:g}x"
        said.setdefault(what, []).append(size(next(iter(by_load.values()))))
    if not said:
        return f"{policy}: no results"
    every = len(said) == 1 and len(idx) > 1
    return f"{policy}: " + "; ".join(
        f"{what} " + ("at every capacity swept" if every else "at " + _and(caps)) for what, caps in said.items())


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def serve_summary(rows: Sequence[Row]) -> dict[str, float]:
    """A serving curve's summary metrics (its child run's): where it meets the SLO."""
    slo = Slo.of(rows)
    r = met_from(rows, slo) if slo.given else None
    if r is None:
        return {}
    return {"slo_met_from_gib": _num(r, "capacity_gib"), "slo_met_from_blocks": _num(r, "capacity_blocks")}


def first_reuse(row: Row) -> float:
    """The reuse the fleet ceiling bounds: at each request's first admission (docs/fleet.md);
    reuse_ratio also counts what re-admissions after preemption find, so it can exceed the
    ceiling. A row from before first_reuse_ratio was kept: reuse_ratio."""
    first = _num(row, "first_reuse_ratio")
    return first if first == first else _num(row, "reuse_ratio")


def ceiling_gap(row: Row) -> float:
    """Points of first-admission reuse below the fleet ceiling at this point (NaN: not measured)."""
    return 100.0 * (_num(row, "ceiling_reuse_ratio") - first_reuse(row))


def reuse_text(row: Row) -> str:
    """'reuse 0.1626 (0.0480 at first admission)': the second only where preemptions make them differ."""
    reuse, first = _num(row, "reuse_ratio"), first_reuse(row)
    return f"reuse {reuse:.4f}" + (f" ({first:.4f} at first admission)" if abs(first - reuse) >= 5e-5 else "")


def route_of(row: Row) -> tuple[str, int]:
    """(router, replicas) of a serving row (router "" in a file from before it was a field).
    A disaggregated row's router names its shape ("kv_router 2:6") and its replicas count
    both roles, so it stands beside the aggregated fleet of as many engines (docs/disagg.md)."""
    router, reps = str(row.get("router") or ""), int(_num(row, "replicas"))
    pre = _num(row, "prefill_replicas")
    if pre > 0:  # NaN (a row from before roles existed) is aggregated
        return f"{router} {int(pre)}:{reps}", int(pre) + reps
    return router, reps


def routes(curves: Mapping[str, Sequence[Row]]) -> list[tuple[str, int]]:
    """Every (router, replicas) of a serving sweep's rows: routers in the order first seen
    (the sweep's), replicas ascending."""
    seen = list(dict.fromkeys(route_of(r) for rows in curves.values() for r in rows))
    first = {k: i for i, k in enumerate(dict.fromkeys(k for k, _ in seen))}
    return sorted(seen, key=lambda kr: (first[kr[0]], kr[1]))


def by_load(curves: Mapping[str, Sequence[Row]]) -> dict[float, dict[str, list[Row]]]:
    """load -> name -> rows (ascending capacity), from a serving sweep's curves (curve
    label "lru @ 2x load, kv_router x8" -> rows carrying their `load`, `router` and
    `replicas`). The name is the policy; with several routes swept, the policy and its
    route: "lru @ kv_router x8" (in route order, then as the curves come); above lower
    tiers (tier=...), followed by its pool: "lru above dram=1TiB,pool=8TiB"."""
    out: dict[float, dict[str, list[Row]]] = {}
    order = routes(curves)
    routed = len(order) > 1
    for label, rows in sorted(curves.items(), key=lambda kv: min((order.index(route_of(r)) for r in kv[1]),
                                                                 default=0)):
        pool = label.split(" above ", 1)[1] if " above " in label else ""
        for r in rows:
            policy = label.split(" @ ", 1)[0] + (f" above {pool}" if pool else "")
            name = f"{policy} @ {route_of(r)[0]} x{route_of(r)[1]}" if routed else policy
            out.setdefault(float(r["load"]), {}).setdefault(name, []).append(r)
    for per in out.values():
        for rows in per.values():
            rows.sort(key=lambda r: _num(r, "capacity_blocks"))
    return dict(sorted(out.items()))
