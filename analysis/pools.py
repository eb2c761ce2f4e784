"""`advise` with tiers (`tier=hbm_dram ...`): how big a pool under each HBM capacity, with
which write/admission mode, and the TTFT there.

LRU and S3-FIFO run HBM above every pool size and mode of the `tier` group (as a sweep
does: sweep.plan.resolve_pools), with the hierarchy's bound (sim_core's `tier_bound`).
Per HBM capacity the knee, the winning mode, the TTFT there and the gap to the bound come
from sweep.report.sizing, the same reading as the sweep's pool sizing table.
"""
from __future__ import annotations

import logging
import math
import time

from sim_core import simulate
from sweep.plan import resolve_pools
from sweep.report.families import pool_parts
from sweep.report.sizing import BOUND, KNEE_POINTS, NOT_SATURATED, by_capacity, knee_text
from sweep.spec import resolve_counting, resolve_tiers

from .config import replay_kwargs

log = logging.getLogger("analysis")

POLICIES = ("lru", "s3fifo")


def axis(cfg, model, block_tokens: int) -> tuple[str, list, dict | None]:
    """(tier config name with the engine hierarchy whose rules it ran, the pools [(label,
    tier dicts)], the hardware mapping or None); no pools for tier=none. Checked as the
    sweep checks them (ConfigError)."""
    name, levels, rules = resolve_tiers(cfg)
    if not levels:
        return name, [], None
    pools, _ = resolve_pools(levels, model, block_tokens)
    _, hardware = resolve_counting(cfg)
    return f"{name}, {rules} rules", pools, hardware


def run(trace, caps_blocks: list[int], pools, *, sim, model, hardware, policies=POLICIES) -> dict:
    """(policy, pool label) -> capacity index -> Result; the bound once per pool size."""
    kw = dict(model=model, **replay_kwargs(sim))
    out, sizes = {}, set()
    for label, tiers in pools:
        t0 = time.perf_counter()
        for p in policies:
            got = simulate(trace, p, caps_blocks, tiers=list(tiers), hardware=hardware, **kw)
            out[(p, label)] = dict(enumerate(got))
        size = pool_parts(label)[0]
        if size not in sizes:
            sizes.add(size)
            out[(BOUND, size)] = dict(enumerate(simulate(trace, BOUND, caps_blocks, tiers=list(tiers), **kw)))
        log.info("pool %s: %s at %d capacities in %.1fs", label, ", ".join(policies), len(caps_blocks),
                 time.perf_counter() - t0)
    return out


def sizing(series: dict, caps, policies=POLICIES) -> list[dict]:
    """One row per (HBM capacity, policy): the knee, its winning mode, TTFT, gap."""
    rows = []
    for i, c in enumerate(caps):
        for p in policies:
            s = by_capacity(series, p, i)
            if s is None:
                continue
            ttft = s.ttft.get((s.knee, s.mode), math.nan)
            rows.append({"capacity": c.label, "policy": p, "knee": s.knee, "knee_text": knee_text(s),
                         "knee_saturated": s.saturated, "mode": s.mode, "tied": list(s.tied),
                         "served": {f"{z}" + (f"[{m}]" if m else ""): round(s.at(z, m), 4)
                                    for z in s.sizes for m in s.modes},
                         "served_at_knee": round(s.at(s.knee), 4),
                         "saturated": round(max(s.at(s.sizes[-1], m) for m in s.modes), 4),
                         "ttft_ms_at_knee": None if ttft != ttft else round(ttft * 1e3, 1),
                         "bound_gap_points": None if s.bound != s.bound else round(s.gap_points, 2),
                         "modes_swept": len(s.modes) > 1})
    return rows


def recommendation(rows: list[dict]) -> dict | None:
    """The pool-size step of the advice: per HBM capacity, the better policy's knee."""
    if not rows:
        return None
    best = {}
    for r in rows:
        k = r["capacity"]
        if k not in best or r["served_at_knee"] > best[k]["served_at_knee"]:
            best[k] = r
    parts = []
    for r in best.values():
        mode = f" with {r['mode']}" + (" (tied with " + ", ".join(m for m in r["tied"] if m != r["mode"]) + ")"
                                       if len(r["tied"]) > 1 else "") if r["modes_swept"] else ""
        ttft = f", TTFT {r['ttft_ms_at_knee']:.1f} ms" if r["ttft_ms_at_knee"] is not None else ""
        g = r["bound_gap_points"]
        gap = "" if g is None else f", {abs(g):.2f} points {'below' if g >= 0 else 'above'} the bound"
        parts.append(f"HBM {r['capacity']}: {r['knee_text']}{mode} under {r['policy']} serves {r['served_at_knee']:.4f} "
                     f"(saturated: {r['saturated']:.4f}){ttft}{gap}")
    return {"topic": "pool_size", "verdict": "; ".join(f"{r['capacity']}: {r['knee_text']}" for r in best.values()),
            "action": "Give each GPU the smallest pool within "
                      f"{KNEE_POINTS * 100:g} point of the saturated served ratio (the knee); larger pools serve "
                      "almost nothing more.",
            "because": ". ".join(parts) + ". TTFT is service time without queueing (docs/tiers.md)."}


def markdown(rows: list[dict], tier_name: str) -> list[str]:
    if not rows:
        return []
    pools = list(rows[0]["served"])
    lines = ["", f"## Pool sizing (tier={tier_name})", "",
             f"Served ratio (HBM + lower tiers) per pool; knee: the smallest pool within {KNEE_POINTS * 100:g} "
             f"point of the saturated served ratio ({NOT_SATURATED} where it still rises by more at the largest "
             "pool); mode: the write/admission mode serving the most there; gap: "
             "`tier_bound` (Belady over HBM + every tier) minus the policy at the knee, in points.", "",
             "| HBM | policy | " + " | ".join(pools) + " | knee | mode | TTFT ms | gap |",
             "| --- | --- |" + " ---: |" * len(pools) + " --- | --- | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['capacity']} | {r['policy']} | " + " | ".join(f"{r['served'][p]:.4f}" for p in pools)
                     + f" | {r['knee_text']} | {r['mode'] or '-'} | {r['ttft_ms_at_knee'] or '-'} | "
                     + (f"{r['bound_gap_points']:+.2f}" if r["bound_gap_points"] is not None else "-") + " |")
    return lines
