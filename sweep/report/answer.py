"""The answer a serving sweep (fleet=...) is run for, read off its rows: per load, the
cheapest fleet that meets the SLO, and per replica count the router that meets it with
the least KV cache. The report leads with them (sweep.report.serving), the console
table prints them (sweep.report.tables) and `advise` gives the same (analysis.serving).

Every verdict here rests on configurations that meet the SLO (sweep.report.slo: a
curve meets it from the smallest capacity from which every larger one swept does), and
every number is the one at that point: its p99 TTFT, its margin under the bound, its
reuse and its gap to the fleet ceiling there (ceiling_reuse_ratio - first_reuse_ratio, in
points: Belady over one pooled cache of replicas x capacity blocks, which bounds the reuse
found at first admissions).

Cheapest: the fewest replicas (GPUs), then the smallest KV cache per replica, then the
lower p99 TTFT there, then the sweep's order.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from .slo import Row, Slo, _num, cap_text, ceiling_gap, met_from, reuse_text, route_of, seconds


@dataclass(frozen=True)
class Pick:
    """One configuration that meets the SLO, at the point from which it does."""

    name: str  # as sweep.report.slo.by_load names it: "lru" or "lru @ kv_router x8"
    row: Row
    also: tuple = ()  # other names meeting it with as few replicas and as little cache

    @property
    def policy(self) -> str:
        return self.name.split(" @ ", 1)[0]

    @property
    def router(self) -> str:
        return route_of(self.row)[0]

    @property
    def replicas(self) -> int:
        return route_of(self.row)[1]

    @property
    def blocks(self) -> int:
        return int(_num(self.row, "capacity_blocks"))

    @property
    def p99(self) -> float:
        return _num(self.row, "ttft_p99_s")

    @property
    def ceiling_gap(self) -> float:
        """Points below the fleet ceiling at this point (NaN: not measured)."""
        return ceiling_gap(self.row)


def margin(row: Row, slo: Slo) -> float:
    """How far under the TTFT bound the p99 is, in per cent of the bound (NaN without one)."""
    return 100.0 * (1.0 - _num(row, "ttft_p99_s") / slo.ttft_s) if slo.ttft_s == slo.ttft_s else math.nan


def there(row: Row, slo: Slo) -> str:
    """'p99 TTFT 1.82s there (9% under the 2s bound)'."""
    m = margin(row, slo)
    return f"p99 TTFT {seconds(_num(row, 'ttft_p99_s'))} there" + (
        f" ({m:.0f}% under the {seconds(slo.ttft_s)} bound)" if m == m else "")


def _key(name: str, row: Row, order: list) -> tuple:
    return (route_of(row)[1], int(_num(row, "capacity_blocks")), _num(row, "ttft_p99_s"), order.index(name))


def cheapest(per: Mapping[str, Sequence[Row]], slo: Slo) -> Pick | None:
    """The cheapest configuration of one load (`per`: name -> rows) meeting the SLO, or None."""
    order = list(per)
    met = [(n, r) for n, rows in per.items() if (r := met_from(rows, slo)) is not None]
    if not met:
        return None
    name, row = min(met, key=lambda nr: _key(*nr, order))
    same = tuple(n for n, r in met if n != name and _key(n, r, order)[:2] == _key(name, row, order)[:2])
    return Pick(name, row, same)


def sentence(load: float, pick: Pick | None, slo: Slo, routed: bool) -> str:
    """'4x load: 8 replicas behind kv_router with 46.9GiB (1,000 blocks) of KV cache each, evicting
    with lru: p99 TTFT 1.82s there (9% under the 2s bound); reuse 0.2048, 16.86 points below the
    fleet ceiling there.'"""
    if pick is None:
        return (f"{load:g}x load: nothing swept meets the SLO ({slo.text()}): more replicas, a larger KV cache "
                f"or a lower load")
    r = pick.row
    who = (f"{pick.replicas} replica{'s' if pick.replicas > 1 else ''} behind {pick.router} with "
           if routed else f"{pick.replicas} replica{'s' if pick.replicas > 1 else ''} with ")
    gap = pick.ceiling_gap
    out = (f"{load:g}x load: {who}{cap_text(r)} of KV cache each, evicting with {pick.policy}: {there(r, slo)}; "
           f"{reuse_text(r)}" + (f", {gap:.2f} points below the fleet ceiling "
                                                    f"({_num(r, 'ceiling_reuse_ratio'):.4f}) there" if gap == gap else ""))
    if pick.also:
        out += f" (also meeting it with as few replicas and as little cache: {', '.join(pick.also)})"
    return out


@dataclass(frozen=True)
class RouterAt:
    """One router in a regime (replicas, load): where it first meets the SLO, with which
    policy (None: nowhere swept), else its lowest p99 TTFT."""

    router: str
    pick: Pick | None
    lowest: Row | None


def router_verdicts(pts: Mapping[tuple, Mapping[str, Mapping[tuple, Row]]], slo: Slo,
                    order: Sequence[str]) -> dict[tuple, list[RouterAt]]:
    """(replicas, load) -> every router, the one meeting the SLO with the least cache (then
    the lowest p99 there) first. `pts`: sweep.report.routing.points."""
    out = {}
    for (reps, load), per in sorted(pts.items()):
        ats = []
        for router in [r for r in order if r in per]:
            curves: dict = {}
            for (policy, _), row in sorted(per[router].items(), key=lambda kv: _num(kv[1], "capacity_blocks")):
                curves.setdefault(policy, []).append(row)
            pick = cheapest(curves, slo)
            lowest = min((r for rows in curves.values() for r in rows), key=lambda r: _num(r, "ttft_p99_s"),
                         default=None)
            ats.append(RouterAt(router, pick, lowest))
        ats.sort(key=lambda a: (a.pick is None, (a.pick.blocks, a.pick.p99) if a.pick else (0, 0.0)))
        out[(reps, load)] = ats
    return out


def router_sentence(reps: int, load: float, ats: Sequence[RouterAt], slo: Slo) -> str:
    """'8 replicas at 4x load: kv_router meets the SLO from 46.9GiB (1,000 blocks) per replica, with
    lru, p99 TTFT 1.82s there (9% under the 2s bound), reuse 0.2048, 16.86 points below the fleet
    ceiling there; round_robin from 188GiB (4,000 blocks) with lru, p99 TTFT 1.95s there (...)'."""
    head = f"{reps} replica{'s' if reps > 1 else ''} at {load:g}x load"
    best = ats[0]
    if reps == 1:  # no choice to make: the router's verdict would be an accident of tie-breaking
        head += ": every router sends every request to the one replica"
        return head + (f"; it meets the SLO from {cap_text(best.pick.row)} with {best.pick.policy}, "
                       f"{there(best.pick.row, slo)}" if best.pick else "; it never meets the SLO in the range swept")
    if best.pick is None:
        low = min((a.lowest for a in ats if a.lowest is not None), key=lambda r: _num(r, "ttft_p99_s"), default=None)
        return f"{head}: no router meets the SLO at any capacity swept" + (
            f"; the lowest p99 TTFT is {seconds(_num(low, 'ttft_p99_s'))} ({route_of(low)[0]}, {cap_text(low)})"
            if low is not None else "")
    p = best.pick
    gap = p.ceiling_gap
    out = (f"{head}: {best.router} meets the SLO from {cap_text(p.row)} per replica, with {p.policy}, "
           f"{there(p.row, slo)}, {reuse_text(p.row)}"
           + (f", {gap:.2f} points below the fleet ceiling there" if gap == gap else ""))
    rest = [f"{a.router} from {cap_text(a.pick.row)} with {a.pick.policy}, {there(a.pick.row, slo)}" if a.pick
            else f"{a.router} never meets it" + (f" (lowest p99 TTFT {seconds(_num(a.lowest, 'ttft_p99_s'))})"
                                                 if a.lowest is not None else "") for a in ats[1:]]
    return out + (f"; {'; '.join(rest)}" if rest else "")


def p99_table(series: Mapping[float, Mapping[str, Sequence[Row]]], slo: Slo, picks: Mapping[float, Pick | None]) -> str:
    """The report's table of p99 TTFT per capacity: a row per configuration, a column per
    capacity, one block per load; cells within the SLO marked, the answer's in bold."""
    e = html.escape
    caps = sorted({(int(_num(r, "capacity_blocks")), cap_text(r)) for per in series.values()
                   for rows in per.values() for r in rows})
    out = ['<table class="p99"><tr><th>load</th><th>configuration</th>'
           + "".join(f"<th>{e(t)}</th>" for _, t in caps) + "</tr>"]
    for load, per in series.items():
        pick = picks.get(load)
        for name, rows in per.items():
            at = {int(_num(r, "capacity_blocks")): r for r in rows}
            cells = []
            for b, _ in caps:
                r = at.get(b)
                if r is None:
                    cells.append("<td>-</td>")
                    continue
                ok = slo.meets(r)
                mine = pick is not None and pick.name == name and pick.blocks == b
                txt = e(seconds(_num(r, "ttft_p99_s")))
                cells.append(f'<td class="{"meets" if ok else "misses"}{" answer" if mine else ""}" data-blocks="{b}">'
                             + (f"<b>{txt}</b>" if mine else txt) + "</td>")
            out.append(f'<tr data-load="{load:g}" data-name="{e(name)}"><td>{load:g}x</td><td>{e(name)}</td>'
                       + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def answer_html(series: Mapping[float, Mapping[str, Sequence[Row]]], slo: Slo, routed: bool) -> str:
    """The report's first section: per load, the cheapest configuration meeting the SLO."""
    e = html.escape
    if not slo.given:
        return ('<section id="answer"><h2>The answer</h2><p>No SLO was set, so nothing says which fleet is '
                'enough: <code>fleet.slo_ttft=2s</code> (and <code>fleet.slo_tpot</code>) sets one. The p99 TTFT '
                "per capacity is below.</p></section>")
    picks = {load: cheapest(per, slo) for load, per in series.items()}
    items = []
    for load, p in picks.items():
        data = "" if p is None else (f' data-replicas="{p.replicas}" data-router="{e(p.router)}" '
                                     f'data-policy="{e(p.policy)}" data-blocks="{p.blocks}"')
        items.append(f'<li class="answer" data-load="{load:g}"{data}>{e(sentence(load, p, slo, routed))}</li>')
    return ('<section id="answer"><h2>The answer: the cheapest fleet meeting the SLO</h2>'
            f"<p>For {e(slo.text())}: per load, the fewest replicas, then the least KV cache per replica, from "
            "which every larger capacity swept meets it (ties: the lower p99 TTFT). Its numbers are those at that "
            "point; the margin is how far the p99 is under the bound.</p><ul>" + "".join(items) + "</ul></section>")
