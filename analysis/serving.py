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
from sweep.fleet import request_blocks, resolve
from sweep.plan import resolve_capacities
from sweep.report.routing import regimes, sentence
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
    caps, _ = resolve_capacities(capacity_sizes(cfg), model, trace.block_tokens)
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


def run(trace, fl, caps, *, model, seed: int = 0) -> dict:
    """load -> name -> rows (one per capacity, as the sweep's curves.csv has them, with
    their `load`): the name is the policy, or with several routes "lru @ kv_router x8"
    (as sweep.report.slo.by_load names them)."""
    policies = [p for p in POLICIES if not cannot_serve(p)]
    out: dict = {}
    for load in fl.loads:
        for route in fl.routes:
            for p in policies:
                t0 = time.perf_counter()
                out.setdefault(load, {})[f"{p} @ {route.label}" if fl.routed else p] = [
                    {"capacity_index": i, "capacity_label": c.label, "capacity_gib": c.gib, "load": load,
                     **serve_row(serve(trace, p, c.blocks, arrival_speedup=load, seed=seed,
                                       **fl.serve_kwargs(route, model)))}
                    for i, c in enumerate(caps)]
                log.info("serve %s at %gx load%s: %d capacities in %.1fs", p, load,
                         f", {route.label}" if fl.routed else "", len(caps), time.perf_counter() - t0)
    return out


def smallest(per_policy: dict, slo: Slo) -> tuple[list[str], dict] | None:
    """(policies, row): the smallest capacity from which some policy meets the SLO, and
    every policy that does from there (in POLICIES order), or None."""
    met = {p: r for p, rows in per_policy.items() if (r := met_from(rows, slo)) is not None}
    if not met:
        return None
    low = min(int(r["capacity_blocks"]) for r in met.values())
    names = [p for p, r in met.items() if int(r["capacity_blocks"]) == low]
    return names, met[names[0]]


def advise(trace, fl, caps, notes: list[str], *, model, seed: int = 0) -> tuple[dict, dict]:
    """(the report's `serving` section, the recommendation)."""
    series = run(trace, fl, caps, model=model, seed=seed)
    slo = Slo(fl.slo_ttft_s, fl.slo_tpot_s)
    section = {"fleet": f"fleet={fl.name}: {fl.describe()}", "slo": slo.text(), "notes": notes,
               "capacities": [{"label": c.label, "blocks": c.blocks, "gib": c.gib} for c in caps], "loads": {}}
    verdicts, because, actions = [], [], []
    for load, per in series.items():
        best = smallest(per, slo)
        section["loads"][f"{load:g}"] = {
            "smallest": None if best is None else {"policies": best[0], "capacity": best[1]["capacity_label"],
                                                   "blocks": int(best[1]["capacity_blocks"])},
            "policies": {p: {"met_from": (lambda r: None if r is None else r["capacity_label"])(met_from(rows, slo)),
                             **{k: [r[k] for r in rows] for k in ("ttft_p99_s", "tpot_mean_s", "goodput_ratio",
                                                                  "reuse_ratio", "preemptions")}}
                         for p, rows in per.items()}}
        verdicts.append(f"{load:g}x load: " + (f"{cap_text(best[1])} with {' or '.join(best[0])}" if best
                                               else "none swept"))
        actions.append(f"at {load:g}x load, at least {cap_text(best[1])} per replica, evicting with "
                       f"{' or '.join(best[0])}" if best else f"at {load:g}x load no capacity swept is enough")
        because.append(f"p99 TTFT at {load:g}x load: " + "; ".join(
            f"{p} " + ", ".join(f"{seconds(r['ttft_p99_s'])} at {r['capacity_label']}" for r in rows)
            for p, rows in per.items()))
    action = (f"KV cache for {slo.text()} ({fl.describe()}): " + "; ".join(actions)
              + ": the smallest capacity swept from which every larger one meets the SLO.")
    if any(v.endswith("none swept") for v in verdicts):
        action += (" Where no capacity swept meets the SLO, the engine's queue may be the limit rather than the "
                   "cache: more replicas (fleet.replicas), a larger KV cache or a lower load.")
    if fl.routed:  # several routes: the advice is a fleet (replicas, capacity, router, policy)
        section["routing"], rec = fleet_advice(series, slo, fl)
        return section, rec
    return section, {"topic": "kv_cache_under_load", "verdict": "; ".join(verdicts), "action": action.strip(),
                     "because": ". ".join(because) + ". Each value is one sim_core.serve replay of the whole trace."}


def _curves(series: dict) -> dict:
    """run()'s load -> name -> rows as the sweep's curve label -> rows (sweep.report.routing reads them)."""
    return {f"{n.split(' @ ', 1)[0]} @ {load:g}x load, {n.split(' @ ', 1)[1]}": rows
            for load, per in series.items() for n, rows in per.items()}


def cheapest(per: dict, slo: Slo) -> dict | None:
    """The fleet meeting the SLO with the fewest replicas, then the smallest KV cache per
    replica (ties: the lower p99 TTFT there, then the sweep's order): {"name", "row"} and
    the other (router, policy) names that meet it there too; None when none does."""
    met = [(n, r) for n, rows in per.items() if (r := met_from(rows, slo)) is not None]
    if not met:
        return None
    order = list(per)
    key = lambda nr: (int(nr[1]["replicas"]), int(nr[1]["capacity_blocks"]), nr[1]["ttft_p99_s"],  # noqa: E731
                      order.index(nr[0]))
    name, row = min(met, key=key)
    same = [n for n, r in met if key((n, r))[:2] == key((name, row))[:2] and n != name]
    return {"name": name, "row": row, "also": same}


def fleet_advice(series: dict, slo: Slo, fl) -> tuple[dict, dict]:
    """(the section's `routing` part, the `fleet_under_load` recommendation)."""
    out, verdicts, actions, because = {}, [], [], []
    for load, per in series.items():
        best = cheapest(per, slo)
        notes = [sentence(g) for g in regimes(_curves({load: per}))]
        if best is None:
            out[f"{load:g}"] = {"fleet": None, "regimes": notes}
            verdicts.append(f"{load:g}x load: no fleet swept")
            actions.append(f"at {load:g}x load no fleet swept meets it: more replicas or a larger KV cache")
            because += notes
            continue
        r, (policy, route) = best["row"], best["name"].split(" @ ", 1)
        router, reps = str(r["router"]), int(r["replicas"])
        base = per.get(f"{policy} @ {BASELINE} x{reps}")
        at = {int(x["capacity_index"]): x for x in base or []}.get(int(r["capacity_index"]))
        base_from = met_from(base, slo) if base else None
        gap = 100.0 * (r["ceiling_reuse_ratio"] - r["reuse_ratio"])
        d = {"replicas": reps, "capacity": r["capacity_label"], "capacity_text": cap_text(r),
             "blocks": int(r["capacity_blocks"]),
             "router": router, "policy": policy, "also": best["also"], "ttft_p99_s": r["ttft_p99_s"],
             "reuse_ratio": r["reuse_ratio"], "ceiling_reuse_ratio": r["ceiling_reuse_ratio"],
             "ceiling_gap_points": gap, "regimes": notes,
             BASELINE: None if at is None else {
                 "met_from_blocks": None if base_from is None else int(base_from["capacity_blocks"]),
                 "ttft_p99_s": at["ttft_p99_s"], "reuse_ratio": at["reuse_ratio"],
                 "reuse_margin_points": 100.0 * (r["reuse_ratio"] - at["reuse_ratio"])}}
        out[f"{load:g}"] = {"fleet": d, "regimes": notes}
        what = f"{reps} replica{'s' if reps > 1 else ''} of {cap_text(r)} behind {router}, evicting with {policy}"
        verdicts.append(f"{load:g}x load: {what}")
        actions.append(f"at {load:g}x load, {what}" + (
            f" (the lowest p99 TTFT of those meeting it with as few replicas and as little cache; the others: "
            f"{', '.join(best['also'])})" if best["also"] else ""))
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
                          f"pooled cache of {reps} x {int(r['capacity_blocks']):,} blocks)" if gap == gap
                          else "not compared with the fleet ceiling (not measured)"))
    action = (f"Fleet for {slo.text()} ({fl.describe()}): " + "; ".join(actions)
              + ": the fewest replicas, then the smallest KV cache per replica swept from which every larger one "
                "meets the SLO.")
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
    return lines + [f"- {n}" for n in section["notes"]]
