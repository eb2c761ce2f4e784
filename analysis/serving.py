"""`advise` under load (`fleet=dynamo fleet.arrival_speedup=2 fleet.slo_ttft=2s`): the smallest
KV cache per replica that meets the SLO at your load, and the policy that gets there.

The online policies of the advice that can serve run sim_core.serve over the whole trace
(never a sample: spatial sampling does not preserve queueing) at every capacity of the
`capacity` group that holds the trace's largest request, at each load of
fleet.arrival_speedup. Where a policy meets the SLO (p99 TTFT within fleet.slo_ttft, mean
TPOT within fleet.slo_tpot when given) is read by sweep.report.slo, as the sweep's serving
table reads it: the smallest capacity from which every larger one swept meets it.

With several routes swept (fleet.replicas=[...], fleet.router=[...]) every (router, replicas)
runs too, and the advice is a fleet: the fewest replicas, then the smallest KV cache per
replica, that meet the SLO at the load, with the router and policy that get there (ties: the
lower p99 TTFT there), its margin over round_robin with the same replicas and policy, and
its gap to the fleet ceiling (ceiling_reuse_ratio: Belady over one pooled cache of replicas
x capacity blocks).
"""
from __future__ import annotations

import logging
import time

from sim_core import serve
from sweep.config import ConfigError
from sim_core.serving import cannot_serve
from sweep.fleet import capacities, request_blocks, resolve
from sweep.report import fleet_pools
from sweep.report.answer import cheapest, margin, router_sentence, router_verdicts, there
from sweep.report.routing import points
from sweep.report.slo import Slo, cap_text, met_from, seconds
from sweep.serving import BASELINE, serve_row
from sweep.spec import capacity_sizes, resolve_counting

log = logging.getLogger("analysis")

POLICIES = ("lru", "s3fifo", "partial_node")


def axis(cfg, model, trace) -> tuple | None:
    """(the Fleet, the capacities it can serve, notes), or None for fleet=none. Checked as
    the sweep checks it (ConfigError); an SLO is required (it is what the advice sizes for)."""
    _, hardware = resolve_counting(cfg)
    fl = resolve(cfg, hardware)
    if fl is None:
        return None
    if not fl.slo:
        raise ConfigError(f"advise with fleet={fl.name} sizes the KV cache for an SLO: give fleet.slo_ttft (e.g. "
                          f"fleet.slo_ttft=2s) and, if you have one, fleet.slo_tpot (e.g. 100ms)")
    caps, _ = capacities(fl, capacity_sizes(cfg), model, trace.block_tokens)
    need = int(request_blocks(trace, fl).max())
    fit = [c for c in caps if c.blocks >= need]
    notes = []
    if len(fit) < len(caps):
        notes.append(f"{', '.join(c.label for c in caps if c.blocks < need)} cannot hold the trace's largest request "
                     f"({need:,} blocks with its output) in one replica, so it could never run there: left out of "
                     f"the serving step")
    if not fit:
        raise ConfigError(f"no capacity of the capacity group holds the trace's largest request ({need:,} blocks of "
                          f"{trace.block_tokens} tokens) under fleet={fl.name}: give larger ones with capacity=custom "
                          f"capacity.sizes=[...]")
    return fl, fit, notes


def run(trace, fl, caps, *, model, seed: int = 0, stored=None, pools=(("", ()),)) -> dict:
    """load -> name -> rows (one per capacity, as the sweep's curves.csv has them, with
    their `load`): the name is the policy, or with several routes "lru @ kv_router x8"
    (as sweep.report.slo.by_load names them); above lower tiers (tier=..., `pools` as
    sweep.plan.resolve_pools gives them), each pool under every replica: "lru above
    dram=1TiB @ kv_router x8". `stored` (analysis.stored.Stored): results computed before
    are read from it, and what is replayed here goes to its journal."""
    policies = [p for p in POLICIES if not cannot_serve(p)]
    out: dict = {}
    for load in fl.loads:
        for route in fl.routes:
            for label, tiers in pools:
                kw = fl.serve_kwargs(route, model)
                if tiers:  # as the sweep's runner: this pool under every replica (a shared tier: the fleet's)
                    kw["deployment"] = kw["deployment"].with_tiers([dict(t) for t in tiers])
                for p in policies:
                    t0 = time.perf_counter()
                    name = p + (f" above {label}" if label else "")
                    rows = []
                    for i, c in enumerate(caps):
                        def replay(p=p, c=c, load=load, kw=kw):
                            return serve(trace, p, c.blocks, arrival_speedup=load, seed=seed, **kw)
                        res = stored.get(p, load, route.label, i, replay, pool=label) if stored is not None \
                            else replay()
                        rows.append({"capacity_index": i, "capacity_label": c.label, "capacity_gib": c.gib,
                                     "load": load, **serve_row(res)})
                    out.setdefault(load, {})[f"{name} @ {route.label}" if fl.routed else name] = rows
                    log.info("serve %s at %gx load%s: %d capacities in %.1fs", name, load,
                             f", {route.label}" if fl.routed else "", len(caps), time.perf_counter() - t0)
    if stored is not None:
        stored.save()
    return out


def pool_curves(series: dict) -> dict:
    """run()'s series above lower tiers as a sweep's serving curves (label -> rows, the
    label naming the pool), which sweep.report.fleet_pools reads."""
    out: dict = {}
    for load, per in series.items():
        for name, rows in per.items():
            head = name.split(" @ ", 1)[0]
            if fleet_pools.ABOVE in head:
                policy, pool = head.split(fleet_pools.ABOVE, 1)
                out.setdefault(f"{policy} @ {load:g}x load{fleet_pools.ABOVE}{pool}", []).extend(rows)
    return out


def per_replica(row) -> str:
    """'188GiB (4,000 blocks) of KV cache per replica': a serving capacity, and what it is."""
    return f"{cap_text(row)} of KV cache per replica"


def advise(trace, fl, caps, notes: list[str], *, model, seed: int = 0, stored=None,
           pools=(("", ()),)) -> tuple[dict, dict]:
    """(the report's `serving` section, the recommendation). One answer per load: the
    cheapest configuration meeting the SLO (sweep.report.answer.cheapest: fewest replicas,
    least KV cache per replica, then the lowest p99 TTFT there), so the policy it names is
    the one with the lowest p99 TTFT at that size among those meeting the SLO there. With
    lower tiers (`pools`, from tier=...), every pool runs under every replica, and the
    section holds the pool sizing under load (sweep.report.fleet_pools): per router and
    replicas, the cheapest pool within a point of the best reuse, and the TTFT there."""
    series = run(trace, fl, caps, model=model, seed=seed, stored=stored, pools=pools)
    slo = Slo(fl.slo_ttft_s, fl.slo_tpot_s)
    section = {"fleet": f"fleet={fl.name}: {fl.describe()}", "slo": slo.text(), "notes": notes,
               "capacities": [{"label": c.label, "blocks": c.blocks, "gib": c.gib} for c in caps], "loads": {},
               "under_load": {}, "pool_sizing": fleet_pools.sizing(pool_curves(series))}
    verdicts, because, actions = [], [], []
    for load, per in series.items():
        pick = cheapest(per, slo)
        met = {p: r for p, rows in per.items() if (r := met_from(rows, slo)) is not None}
        section["loads"][f"{load:g}"] = {
            "smallest": None if pick is None else {
                "policy": pick.policy, "capacity": pick.row["capacity_label"], "blocks": pick.blocks,
                "policies": [p for p, r in met.items() if int(r["capacity_blocks"]) == pick.blocks]},
            "policies": {p: {"met_from": (lambda r: None if r is None else r["capacity_label"])(met_from(rows, slo)),
                             **{k: [r[k] for r in rows] for k in ("ttft_p99_s", "tpot_mean_s", "goodput_ratio",
                                                                  "reuse_ratio", "preemptions")}}
                         for p, rows in per.items()}}
        section["under_load"][f"{load:g}"] = compared(per, pick)
        verdicts.append(f"{load:g}x load: " + (f"{per_replica(pick.row)}, evicting with {pick.policy}" if pick
                                               else "no capacity swept meets it"))
        actions.append(f"at {load:g}x load, at least {per_replica(pick.row)}, evicting with {pick.policy}: "
                       f"{there(pick.row, slo)}" if pick else
                       f"at {load:g}x load no capacity swept meets it: the engine's queue may be the limit rather "
                       f"than the cache (more replicas with fleet.replicas, or a lower load)")
        because.append(f"p99 TTFT at {load:g}x load: " + "; ".join(
            f"{p} " + ", ".join(f"{seconds(r['ttft_p99_s'])} at {r['capacity_label']}" for r in rows)
            for p, rows in per.items()))
    action = (f"KV cache for {slo.text()} ({fl.describe()}), the smallest capacity swept from which every larger "
              f"one meets the SLO, and of the policies meeting it there the one with the lowest p99 TTFT: "
              + "; ".join(actions) + ".")
    if fl.routed:  # several routes: the advice is a fleet (replicas, capacity, router, policy)
        section["routing"], rec = fleet_advice(series, slo, fl)
        return section, rec
    return section, {"topic": "kv_cache_under_load", "verdict": "; ".join(verdicts), "action": action,
                     "because": ". ".join(because) + ". Each value is one sim_core.serve replay of the whole trace."}


def compared(per: dict, pick) -> dict | None:
    """Every policy at the answer's route and size (p99 TTFT, reuse, meets the SLO there):
    what step 3 of the advice (quick demotion) reads under load."""
    if pick is None:
        return None
    route = pick.name.split(" @ ", 1)[1] if " @ " in pick.name else ""
    at = {}
    for n, rows in per.items():
        if (n.split(" @ ", 1)[1] if " @ " in n else "") != route:
            continue
        r = next((x for x in rows if int(x["capacity_blocks"]) == pick.blocks), None)
        if r is not None:
            at[n.split(" @ ", 1)[0]] = {"ttft_p99_s": r["ttft_p99_s"], "reuse_ratio": r["reuse_ratio"]}
    return {"policy": pick.policy, "route": route, "blocks": pick.blocks, "where": per_replica(pick.row),
            "policies": at}


def _curves(series: dict) -> dict:
    """run()'s load -> name -> rows as the sweep's curve label -> rows (sweep.report.routing reads them)."""
    return {f"{n.split(' @ ', 1)[0]} @ {load:g}x load, {n.split(' @ ', 1)[1]}": rows
            for load, per in series.items() for n, rows in per.items()}


def fleet_advice(series: dict, slo: Slo, fl) -> tuple[dict, dict]:
    """(the section's `routing` part, the `fleet_under_load` recommendation)."""
    out, verdicts, actions, because = {}, [], [], []
    for load, per in series.items():
        best = cheapest(per, slo)
        notes = [router_sentence(n, x, ats, slo) for (n, x), ats in
                 router_verdicts(points(_curves({load: per})), slo, [r.router for r in fl.routes]).items()]
        if best is None:
            out[f"{load:g}"] = {"fleet": None, "regimes": notes}
            verdicts.append(f"{load:g}x load: no fleet swept")
            actions.append(f"at {load:g}x load no fleet swept meets it: more replicas or a larger KV cache")
            because += notes
            continue
        r, policy, router, reps = best.row, best.policy, best.router, best.replicas
        base = per.get(f"{policy} @ {BASELINE} x{reps}")
        at = {int(x["capacity_index"]): x for x in base or []}.get(int(r["capacity_index"]))
        base_from = met_from(base, slo) if base else None
        gap = best.ceiling_gap
        d = {"replicas": reps, "capacity": r["capacity_label"], "capacity_text": cap_text(r),
             "blocks": best.blocks, "router": router, "policy": policy, "also": list(best.also),
             "ttft_p99_s": r["ttft_p99_s"], "margin_pct": margin(r, slo),
             "reuse_ratio": r["reuse_ratio"], "ceiling_reuse_ratio": r["ceiling_reuse_ratio"],
             "ceiling_gap_points": gap, "regimes": notes,
             BASELINE: None if at is None else {
                 "met_from_blocks": None if base_from is None else int(base_from["capacity_blocks"]),
                 "ttft_p99_s": at["ttft_p99_s"], "reuse_ratio": at["reuse_ratio"],
                 "reuse_margin_points": 100.0 * (r["reuse_ratio"] - at["reuse_ratio"])}}
        out[f"{load:g}"] = {"fleet": d, "regimes": notes}
        what = f"{reps} replica{'s' if reps > 1 else ''} behind {router} with {per_replica(r)}, evicting with {policy}"
        verdicts.append(f"{load:g}x load: {what}")
        actions.append(f"at {load:g}x load, {what}: {there(r, slo)}" + (
            f"; also meeting it with as few replicas and as little cache: {', '.join(best.also)}" if best.also else ""))
        if router == BASELINE:
            vs = f"{BASELINE} is the router"
        elif at is None:
            vs = f"{BASELINE} was not swept"
        else:
            vs = (f"{BASELINE} with {policy} and {reps} replicas " + (
                f"meets it from {cap_text(base_from)}" if base_from else "never meets it in the range swept")
                + f"; at {cap_text(r)} its p99 TTFT is {seconds(at['ttft_p99_s'])} against {seconds(r['ttft_p99_s'])}"
                f", reuse {at['reuse_ratio']:.4f} against {r['reuse_ratio']:.4f} "
                f"({d[BASELINE]['reuse_margin_points']:+.2f} points)")
        because.append(f"{load:g}x load: {vs}; reuse {r['reuse_ratio']:.4f} is "
                       + (f"{gap:.2f} points below the fleet ceiling ({r['ceiling_reuse_ratio']:.4f}: Belady over one "
                          f"pooled cache of {fleet_pools.held_text(r, reps, best.blocks)})" if gap == gap
                          else "not compared with the fleet ceiling (not measured)"))
    action = (f"Fleet for {slo.text()} ({fl.describe()}): the fewest replicas, then the least KV cache per replica "
              f"from which every larger capacity swept meets the SLO, then the lowest p99 TTFT there: "
              + "; ".join(actions) + ".")
    return out, {"topic": "fleet_under_load", "verdict": "; ".join(verdicts), "action": action,
                 "because": ". ".join(because) + ". Each value is one sim_core.serve replay of the whole trace."}


def markdown(section: dict | None) -> list[str]:
    if not section:
        return []
    heads = [c["label"] for c in section["capacities"]]
    lines = ["", f"## KV cache under load ({section['fleet']})", "",
             f"p99 TTFT in seconds per KV cache per replica; the SLO: {section['slo']}; *meets from*: the smallest "
             "capacity from which every larger one swept meets it.", ""]
    for load, d in section["loads"].items():
        lines += [f"**{load}x load**", "", "| policy | " + " | ".join(heads) + " | meets from |",
                  "| --- |" + " ---: |" * len(heads) + " --- |"]
        for p, v in d["policies"].items():
            lines.append(f"| {p} | " + " | ".join(f"{x:.4g}" for x in v["ttft_p99_s"]) + f" | {v['met_from'] or '-'} |")
        lines.append("")
    for load, d in section.get("routing", {}).items():
        f = d["fleet"]
        lines += ["", f"**Fleet at {load}x load**: " + (
            "no fleet swept meets the SLO" if f is None else
            f"{f['replicas']} replica{'s' if f['replicas'] > 1 else ''} of {f['capacity_text']} behind "
            f"{f['router']}, evicting with {f['policy']}; reuse {f['reuse_ratio']:.4f}" + (
                f", {f['ceiling_gap_points']:.2f} points below the fleet ceiling"
                if f["ceiling_gap_points"] == f["ceiling_gap_points"] else "")), ""] + [f"- {s}" for s in d["regimes"]]
    return lines + fleet_pools.markdown(section.get("pool_sizing") or []) + [f"- {n}" for n in section["notes"]]
