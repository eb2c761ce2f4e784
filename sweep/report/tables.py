"""The table printed at the end of a sweep: policies ranked per cost model (pool sizing:
sweep.report.sizing); for a serving sweep (fleet=...), latency and reuse per load."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from sim_core.catalog.capacity import human_gib
from sim_core.policies import REGISTRY, get_policy

from ..plan import Capacity
from . import fleet_pools
from .families import POOL_SEP, pool_key, reference_of
from .regimes import IDENTICAL_TOL as SAME, REGIMES, Regime, identical_groups
from .answer import cheapest, sentence as answer_sentence
from .routing import console_lines
from .slo import Slo, by_load, capacity_sentence, limit_text, load_limit, route_of, routes


def pick_points(n: int, k: int) -> list[int]:
    """k capacity indices spread evenly over n (first and last included)."""
    if k <= 0:
        return []
    if n <= k:
        return list(range(n))
    if k == 1:
        return [n - 1]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _regime_means(by_idx: Mapping[int, float], capacities: Sequence[Capacity], regimes) -> dict[str, float]:
    out = {}
    for reg in regimes:
        vals = [v for i, v in by_idx.items()
                if reg.lo_gib - 1e-9 <= capacities[i].gib <= reg.hi_gib + 1e-9]
        out[reg.name] = sum(vals) / len(vals) if vals else float("nan")
    return out


def identical_note(a: str, b: str, cost_model: str) -> str:
    """Why two policies' curves are the same, where the policies' specs say."""
    for x, y in ((a, b), (b, a)):
        spec = get_policy(x) if x in REGISTRY else None
        if spec is None:
            continue
        if y in spec.identical_to:
            return spec.identical_to[y]
        if cost_model == "uniform" and spec.uniform_same_as is not None and \
                spec.uniform_same_as(dict(spec.defaults))[0] == y:
            return f"under the uniform cost model {x} decides as {y}"
    return ""


def summary_table(curves: Mapping[str, Mapping[str, Sequence[dict]]], capacities: Sequence[Capacity],
                  points: int = 4, policy_order: Sequence[str] = (), cost_order: Sequence[str] = (),
                  sample_rate: float | None = None, saturation_blocks: int | None = None) -> str:
    """Compute savings per policy at a few capacities and its mean over each regime the
    sweep has capacities in (HBM 24-120 GiB, memory pool 0.25-12 TiB; without either, over
    every capacity), one section per cost model, ranked by the first regime's mean as the
    report ranks; oracles are marked, every policy gets its margin over LRU in points per
    regime, and curves identical to another policy's are named under the section.
    Capacities that hold the whole trace (>= `saturation_blocks`) give every policy the
    same value: they share one column. Under sampled replay, a value replayed exactly is
    marked with *."""
    if not curves:
        return "no results"
    n_unsat = sum(1 for c in capacities if saturation_blocks is None or c.blocks < saturation_blocks)
    saturated = n_unsat < len(capacities)
    idx = pick_points(n_unsat, points - 1 if saturated and n_unsat else points) + ([n_unsat] if saturated else [])
    regimes = [r for r in REGIMES if any(r.lo_gib - 1e-9 <= c.gib <= r.hi_gib + 1e-9 for c in capacities)]
    # a column in neither regime is in no mean: marked ~ so it is not read as one of them
    outside = {i for i in idx if regimes and not any(r.lo_gib - 1e-9 <= capacities[i].gib <= r.hi_gib + 1e-9
                                                     for r in REGIMES)}
    heads = [human_gib(capacities[i].gib) + ("+" if saturated and i == n_unsat else "") + ("~" if i in outside else "")
             for i in idx]
    regimes = regimes or [Regime("all", "all swept capacities", 0.0, math.inf)]
    short = {"hbm": "HBM", "pool": "pool", "all": "all"}
    base = {p: p.split(POOL_SEP, 1)[0] for per in curves.values() for p in per}
    mark = {p: " [oracle]" if b in REGISTRY and get_policy(b).offline else "" for p, b in base.items()}
    tiered = any(POOL_SEP in p for p in base)
    pw = max([len("policy")] + [len(p) + len(mark[p]) for per in curves.values() for p in per])
    col = max([7] + [len(h) for h in heads])  # "0.1234" and a space: lines stay within 100 characters
    title = (f"compute-savings ratio, ranked by the mean over {regimes[0].title}"
             + (f" ({regimes[0].lo_gib:g}-{regimes[0].hi_gib:g} GiB)" if regimes[0].name != "all" else "")
             + "; vs LRU = mean minus LRU's" + (" above the same pool" if tiered else "") + ", in points")
    if sample_rate is not None:
        title += f"; sampled replay at r={sample_rate:g} (miniature simulation), * = replayed exactly"
    if saturated:
        title += (f"; {heads[-1]} = every capacity from {human_gib(capacities[n_unsat].gib)} up ({len(capacities) - n_unsat} of "
                  f"{len(capacities)}) holds the whole trace")
    if outside:
        title += ("; ~ = in neither regime (" + ", ".join(f"{r.title} {r.lo_gib:g}-{r.hi_gib:g} GiB" for r in REGIMES)
                  + "): shown, in no mean")
    means_h = [f"{short[r.name]} mean" for r in regimes]
    vs_h = [f"{short[r.name]} vs LRU" for r in regimes]
    mw = [max(7, len(h)) for h in means_h]
    vw = [max(7, len(h)) for h in vs_h]
    header = (f"{'policy':<{pw}}  " + "  ".join(f"{h:>{col}}" for h in heads) + "  "
              + "  ".join(f"{h:>{w}}" for h, w in zip(means_h + vs_h, mw + vw)))
    lines = [title]
    order = {p: i for i, p in enumerate(policy_order)}
    corder = {m: i for i, m in enumerate(cost_order)}
    for m in sorted(curves, key=lambda m: (corder.get(m, len(corder)), m)):
        same = " (= served ratio: HBM + lower tiers)" if tiered else " (= block hit ratio)"
        lines += ["", f"cost model {m}" + (same if m == "uniform" else ""), header,
                  "-" * len(header)]
        by = {p: {r["capacity_index"]: r["compute_savings"] for r in rs} for p, rs in curves[m].items()}
        means = {p: _regime_means(v, capacities, regimes) for p, v in by.items()}
        refs = {p: means[r] if r in by and len(by[r]) == len(capacities) else None
                for p in by for r in [reference_of(p)]}
        rows = []
        for p, rs in curves[m].items():
            ref = refs[p]
            exact = {r["capacity_index"] for r in rs if sample_rate is not None and r.get("sample_rate", 1.0) == 1.0}
            cells = [(f"{by[p][i]:>{col - 1}.4f}*" if i in exact else f"{by[p][i]:>{col}.4f}")
                     if i in by[p] else f"{'-':>{col}}" for i in idx]
            complete = len(by[p]) == len(capacities)
            vs = [(means[p][r.name] - ref[r.name]) * 100 if ref and complete else float("nan") for r in regimes]
            tail = [f"{means[p][r.name]:>{w}.4f}" if means[p][r.name] == means[p][r.name] else f"{'-':>{w}}"
                    for r, w in zip(regimes, mw)] + \
                [f"{v:>+{w}.2f}" if v == v else f"{'-':>{w}}" for v, w in zip(vs, vw)]
            partial = "" if complete else f"  ({len(by[p])}/{len(capacities)} capacities)"
            key = means[p][regimes[0].name]
            pk = pool_key(p.split(POOL_SEP, 1)[1]) if POOL_SEP in p else ()  # with tiers: a block per pool
            rows.append((not complete, pk, -(key if key == key else -math.inf), order.get(p, len(order)), p,
                         f"{p + mark[p]:<{pw}}  " + "  ".join(cells) + "  " + "  ".join(tail) + partial))
        lines += [r[-1] for r in sorted(rows)]
        online = [p for p in by if not mark[p] and len(by[p]) == len(capacities)]
        groups: dict[str, list[str]] = {}  # with tiers, policies compete above the same pool only
        for p in online:
            groups.setdefault(p.split(POOL_SEP, 1)[1] if POOL_SEP in p else "", []).append(p)
        for r in regimes:
            for pool in sorted(groups, key=lambda x: pool_key(x) if x else ()):
                top = max(means[p][r.name] for p in groups[pool])
                best = [p for p in groups[pool] if means[p][r.name] >= top - SAME]
                ref = refs[best[0]]
                if not ref:
                    continue
                short = [p.split(POOL_SEP, 1)[0] for p in best]
                names = ", ".join(short[:3]) + (f" and {len(short) - 3} more" if len(short) > 3 else "")
                lines.append(f"best online over {r.title}" + (f" above {pool}" if pool else "") + f": {names}"
                             f"{' (tie)' if len(best) > 1 else ''}, {(top - ref[r.name]) * 100:+.2f} points over LRU"
                             + (" there" if pool else ""))
        whole = {p: rs for p, rs in curves[m].items() if len(by[p]) == len(capacities)}
        for g in identical_groups(whole, SAME, ("compute_savings",), "capacity_index"):
            why = "; ".join(w for w in (identical_note(g[0], q, m) for q in g[1:]) if w)
            lines.append(f"identical curves (to {SAME:g} at every capacity): {' = '.join(g)}"
                         + (f" ({why})" if why else ""))
    return "\n".join(lines)


def _cell(row, key: str, spec: str, width: int) -> str:
    v = float(row.get(key, math.nan)) if row is not None else math.nan
    return f"{format(v, spec):>{width}}" if v == v else f"{'-':>{width}}"


def serving_table(curves: Mapping[str, Sequence[dict]], capacities: Sequence[Capacity], points: int = 4,
                  policy_order: Sequence[str] = (), title: str = "", partial: str = "") -> str:
    """A serving sweep (fleet=...): per load, one row per policy with its p99 TTFT, reuse
    ratio and preemptions at a few capacities (the KV cache of each replica); under each,
    where each policy meets the SLO; with several loads, up to which load each policy
    meets it at each capacity shown. With several routes (fleet.router=[...],
    fleet.replicas=[...]) a row is a (router, replicas, policy), in columns of their own,
    and the best router per replicas and load follows (sweep.report.routing). `curves`:
    curve label ("lru @ 2x load, kv_router x8") -> rows. Last, the answer: per load, the
    cheapest configuration meeting the SLO (sweep.report.answer). `partial`: the share of
    results a sweep cut short has ("6 of 48 results (12%)"), which its verdicts say."""
    series = by_load(curves)
    if not series:
        return "no results"
    idx = pick_points(len(capacities), points)
    heads = [human_gib(capacities[i].gib, digits=3) for i in idx]
    slo = Slo.of([r for rs in curves.values() for r in rs])
    order = {p: i for i, p in enumerate(policy_order)}
    rts = routes(curves)
    routed = len(rts) > 1
    first = {n: rs[0] for per in series.values() for n, rs in per.items() if rs}

    def where(name: str) -> tuple:  # (route, policy) in the sweep's order
        policy = name.split(" @ ", 1)[0]
        return rts.index(route_of(first[name])) if routed else 0, order.get(policy, len(order)), policy

    names = sorted(first, key=where)
    pw = max([len("policy")] + [len(n.split(" @ ", 1)[0]) for n in names])
    rw = max([len("router")] + [len(r) for r, _ in rts])

    def lead(name: str | None) -> str:  # the row's first columns: policy, or router, replicas and policy
        if name is None:
            return f"{'router':<{rw}}  {'replicas':>8}  {'policy':<{pw}}" if routed else f"{'policy':<{pw}}"
        if not routed:
            return f"{name:<{pw}}"
        router, reps = route_of(first[name])
        return f"{router:<{rw}}  {reps:>8}  {name.split(' @ ', 1)[0]:<{pw}}"

    lw = len(lead(None))
    col = max([7] + [len(h) for h in heads])
    group = len(idx) * (col + 2)
    lines = [title or "serving under load",
             "KV cache per replica (the capacity axis): " + ", ".join(f"{h} = {capacities[i].blocks:,} blocks"
                                                                      for h, i in zip(heads, idx)),
             "TTFT p99: 99th percentile of the time to first token, in seconds; reuse: prompt tokens found in the "
             "KV cache / prompt tokens; preempted: requests preempted (blocks released, progress recomputed)"
             + (f"; SLO: {slo.text()}" if slo.given else "; no SLO (fleet.slo_ttft=2s sets one)")]
    sub = f"{'':<{lw}}" + "".join("  " + "".join(f"{h:>{col + 2}}" for h in heads) for _ in range(3))
    head = lead(None) + "".join(f"  {t:<{group}}" for t in ("TTFT p99 (s)", "reuse", "preempted"))
    for load, per in series.items():
        lines += ["", f"load {load:g}x: " + ("the trace's arrival times" if load == 1 else
                                           f"arrival times divided by {load:g} ({load:g} times the request rate)"),
                  head.rstrip(), sub, "-" * len(sub)]
        for p in names:
            at = {int(r["capacity_index"]): r for r in per.get(p, [])}
            cells = ["".join(_cell(at.get(i), key, spec, col + 2) for i in idx)
                     for key, spec in (("ttft_p99_s", ".4g"), ("reuse_ratio", ".4f"), ("preemptions", ".0f"))]
            lines.append(lead(p) + "".join("  " + c for c in cells))
        if slo.given:
            lines += [f"SLO {slo.text()}:"] + ["  " + capacity_sentence(p, per[p], slo, said=True)
                                               for p in names if p in per]
    met = any(slo.meets(r) for rs in curves.values() for r in rs)
    if slo.given and not met and partial:
        lines += ["", f"No policy meets the SLO at any capacity and load that ran (partial: {partial}); the rest "
                      "of the sweep may."]
    elif slo.given and not met:
        lines += ["", "No policy meets the SLO at any capacity and load swept: the engine's queue, not the cache, "
                      "may be the limit (see the TTFT at the largest capacity); fleet.replicas=N adds engines, "
                      "fleet.arrival_speedup below 1 lowers the load."]
    if met and len(series) > 1:
        lines += ["", f"highest load at which a policy meets the SLO ({slo.text()}) at each KV cache per replica "
                      f"(loads swept: {', '.join(f'{x:g}x' for x in series)}; none: not even at the lowest, "
                      f"(all): at every load swept)",
                  lead(None) + "".join(f"  {h:>{col + 6}}" for h in heads)]
        for p in names:
            cells = []
            for i in idx:
                by = {x: r for x, per in series.items() for r in per.get(p, []) if int(r["capacity_index"]) == i}
                cells.append(f"  {limit_text(*load_limit(by, slo)) if by else '-':>{col + 6}}")
            lines.append(lead(p) + "".join(cells))
    if routed:
        lines += console_lines(curves)
    lines += fleet_pools.lines(fleet_pools.sizing(curves))  # tier=... with fleet=...
    if slo.given:
        lines += ["", f"the answer: the cheapest {'fleet' if routed else 'configuration'} meeting the SLO ({slo.text()})"
                      f" per load: fewest replicas, then least KV cache per replica"
                      + (f" (partial: {partial}, of what ran)" if partial else "")]
        lines += ["  " + answer_sentence(load, cheapest(per, slo), slo, routed) for load, per in series.items()]
    return "\n".join(lines)
