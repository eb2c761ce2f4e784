"""`advise` under load (`fleet=dynamo fleet.arrival_speedup=2 fleet.slo_ttft=2s`): the smallest
KV cache per replica that meets the SLO at your load, and the policy that gets there.

The online policies of the advice that can serve run sim_core.serve over the whole trace
(never a sample: spatial sampling does not preserve queueing) at every capacity of the
`capacity` group that holds the trace's largest request, at each load of
fleet.arrival_speedup. Where a policy meets the SLO (p99 TTFT within fleet.slo_ttft, mean
TPOT within fleet.slo_tpot when given) is read by sweep.report.slo, as the sweep's serving
table reads it: the smallest capacity from which every larger one swept meets it.
"""
from __future__ import annotations

import logging
import time

from sim_core import serve
from sweep.config import ConfigError
from sim_core.serving import cannot_serve
from sweep.fleet import request_blocks, resolve
from sweep.plan import resolve_capacities
from sweep.report.slo import Slo, cap_text, met_from, seconds
from sweep.serving import serve_row
from sweep.spec import capacity_sizes, resolve_engine

log = logging.getLogger("analysis")

POLICIES = ("lru", "s3fifo", "partial_node")


def axis(cfg, model, trace) -> tuple | None:
    """(the Fleet, the capacities it can serve, notes), or None for fleet=none. Checked as
    the sweep checks it (ConfigError); an SLO is required (it is what the advice sizes for)."""
    _, hardware = resolve_engine(cfg)
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
    """load -> policy -> rows (one per capacity, as the sweep's curves.csv has them)."""
    policies = [p for p in POLICIES if not cannot_serve(p)]
    out: dict = {}
    for load in fl.loads:
        for p in policies:
            t0 = time.perf_counter()
            out.setdefault(load, {})[p] = [
                {"capacity_index": i, "capacity_label": c.label, "capacity_gib": c.gib,
                 **serve_row(serve(trace, p, c.blocks, arrival_speedup=load, model=model, seed=seed,
                                   **fl.serve_kwargs()))}
                for i, c in enumerate(caps)]
            log.info("serve %s at %gx load: %d capacities in %.1fs", p, load, len(caps), time.perf_counter() - t0)
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
    return section, {"topic": "kv_cache_under_load", "verdict": "; ".join(verdicts), "action": action.strip(),
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
    return lines + [f"- {n}" for n in section["notes"]]
