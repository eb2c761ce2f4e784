"""Sampled replay against exact replay: error and speed-up per policy and rate.

    python -m benchmarks.sampling                      # 1/10-scale FreeInference-like trace
    python -m benchmarks.sampling --scale 0.02 --policies lru,s3fifo --rates 0.1,0.01

For every policy of `policy=all` it replays the trace exactly at 12 capacities (the
paper's four headline sizes and eight more spread over the 65) under every cost model,
then as a miniature simulation at each rate, with the sampling floor off (every capacity
sampled, so the error of small scaled caches shows) and reports, per policy and rate,
the mean and maximum absolute error in points of the hit ratio and of each cost model's
compute savings, and the speed-up (exact seconds / sampled seconds, same process).
Results: bench_results/sampling_scale<s>.{jsonl,csv,md,json}. Policies run in parallel
worker processes (`--jobs`), each timing its own exact and sampled replays back to back.
Each policy's rows are appended to the .jsonl as it finishes; a re-run skips the
policies already there (delete the file to measure again).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from types import SimpleNamespace

from sim_core import QWEN3_CODER_30B, REGISTRY, get_policy, simulate, to_blocks
from sim_core.traces import synth
from sim_core.traces import sample as smp
from sim_core.catalog.capacity import log_spaced_bytes

HEADLINE_GIB = (24, 48, 96, 1024)
COSTS = ("uniform", "linear", "qwen3_coder_30b")


def capacities(model, block_tokens: int) -> list[int]:
    """The four headline sizes plus eight spread evenly over paper65's other sizes."""
    paper = sorted({to_blocks(f"{b:.3f}B", model, block_tokens) for b in log_spaced_bytes("24GiB", "12TiB", 65)})
    head = [to_blocks(f"{g}GiB", model, block_tokens) for g in HEADLINE_GIB]
    rest = [c for c in paper if c not in head]
    step = len(rest) / 8
    spread = [rest[int(step * i + step / 2)] for i in range(8)]
    return sorted(set(head + spread))


def _trace(scale: float, seed: int):
    return synth.generate("freeinference", scale=scale, seed=seed)


def measure(policy: str, scale: float, seed: int, rates: list[float], by: str | None,
            exact_rows: list[dict] | None = None) -> list[dict]:
    """Rows (policy, rate, capacity, exact and sampled values, seconds) for one policy;
    one row with "error" when it failed. `exact_rows` (an earlier run's rows of this
    policy on the same trace) spare the exact replays."""
    try:
        return _measure(policy, scale, seed, rates, by, exact_rows)
    except Exception as e:  # noqa: BLE001 - one policy's failure must not lose the others
        return [{"policy": policy, "error": f"{type(e).__name__}: {e}"}]


def _measure(policy: str, scale: float, seed: int, rates: list[float], by: str | None,
             exact_rows: list[dict] | None) -> list[dict]:
    t = _trace(scale, seed)
    caps = capacities(QWEN3_CODER_30B, t.block_tokens)
    spec = get_policy(policy)
    by = by or spec.sample_by
    simulate(t.subset(200), policy, [64], cost_models=list(COSTS))  # compile outside the timings
    if exact_rows:
        first = {r["capacity_blocks"]: r for r in exact_rows if r["rate"] == exact_rows[0]["rate"]}
        exact = [SimpleNamespace(capacity_blocks=c, hit_ratio=first[c]["hit_ratio_exact"],
                                 compute_savings={m: first[c][f"savings_{m}_exact"] for m in COSTS}) for c in caps]
        t_exact = exact_rows[0]["exact_s"]
    else:
        t0 = time.perf_counter()
        exact = simulate(t, policy, caps, cost_models=list(COSTS))
        t_exact = time.perf_counter() - t0
    rows = []
    for r in rates:
        # samples are built once per trace and shared by every job of a sweep: not part of
        # a replay's time (this builds the raised-rate samples too)
        smp.capacity_rates(t, caps, r, 0, by, "request", floor=1)
        t0 = time.perf_counter()
        got = simulate(t, policy, caps, cost_models=list(COSTS), sample_rate=r, sample_by=by, sample_force=True,
                       sample_floor=1)  # every capacity sampled: the floor is chosen from this
        t_s = time.perf_counter() - t0
        for e, g in zip(exact, got):
            row = {"policy": policy, "sample_by": by, "rate": r, "capacity_blocks": e.capacity_blocks,
                   "scaled_blocks": smp.scaled_capacity(e.capacity_blocks, r, by), "sampled": g.sample_rate < 1,
                   "exact_s": t_exact, "sampled_s": t_s,
                   "hit_ratio_exact": e.hit_ratio, "hit_ratio_sampled": g.hit_ratio}
            for m in COSTS:
                row[f"savings_{m}_exact"] = e.compute_savings[m]
                row[f"savings_{m}_sampled"] = g.compute_savings[m]
            rows.append(row)
    return rows


def summarize(rows: list[dict], floor: int | None = None) -> list[dict]:
    """Per (policy, sample_by, rate): MAE and max |error| in points over the capacities
    whose scaled size is at least `floor` (default: the sampling unit's floor; the others
    would run at a raised rate)."""
    out = []
    keys = sorted({(r["policy"], r["sample_by"], r["rate"]) for r in rows}, key=lambda k: (k[0], k[1], -k[2]))
    for p, by, rate in keys:
        rs = [r for r in rows if (r["policy"], r["sample_by"], r["rate"]) == (p, by, rate)]
        kept = [r for r in rs if r["scaled_blocks"] >= (smp.MIN_SAMPLED_BLOCKS[by] if floor is None else floor)]
        s = {"policy": p, "sample_by": by, "rate": rate, "capacities": len(kept),
             "speedup": rs[0]["exact_s"] / max(rs[0]["sampled_s"], 1e-9)}
        for name, a, b in [("hit_ratio", "hit_ratio_exact", "hit_ratio_sampled")] + \
                [(f"savings_{m}", f"savings_{m}_exact", f"savings_{m}_sampled") for m in COSTS]:
            errs = [abs(r[a] - r[b]) * 100 for r in kept]
            s[f"{name}_mae"] = sum(errs) / len(errs) if errs else math.nan
            s[f"{name}_max"] = max(errs) if errs else math.nan
        out.append(s)
    return out


def markdown(summary: list[dict], target_mae: float = 0.5, target_max: float = 1.5) -> str:
    lines = ["| policy | by | r | caps | hit ratio MAE / max | savings uniform | savings linear | savings qwen3 "
             "| speed-up | r=0.01 target |", "|---|---|---:|---:|---|---|---|---|---:|---|"]
    for s in summary:
        cells = [f"{s[f'{k}_mae']:.2f} / {s[f'{k}_max']:.2f}" for k in
                 ("hit_ratio", "savings_uniform", "savings_linear", "savings_qwen3_coder_30b")]
        worst_mae = max(s[f"{k}_mae"] for k in ("hit_ratio", "savings_uniform", "savings_linear",
                                                  "savings_qwen3_coder_30b"))
        worst_max = max(s[f"{k}_max"] for k in ("hit_ratio", "savings_uniform", "savings_linear",
                                                  "savings_qwen3_coder_30b"))
        ok = "" if s["rate"] != 0.01 else ("ok" if worst_mae <= target_mae and worst_max <= target_max else "MISSED")
        lines.append(f"| {s['policy']} | {s['sample_by']} | {s['rate']:g} | {s['capacities']} | "
                     + " | ".join(cells) + f" | {s['speedup']:.1f}x | {ok} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sampling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rates", default="0.1,0.01,0.001")
    ap.add_argument("--policies", default="all", help="comma list, or all (policy=all's set)")
    ap.add_argument("--by", default=None, choices=[None, "block", "session", "depth"], help="override each policy's own")
    ap.add_argument("--floor", type=int, default=None, help="summarise only scaled caches >= this many blocks "
                                                             "(default: sim_core.traces.sample.MIN_SAMPLED_BLOCKS)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", default="bench_results")
    ap.add_argument("--reuse-exact", default=None, help="an earlier run's .jsonl on the same trace: its exact "
                                                        "results spare the exact replays")
    args = ap.parse_args(argv)
    pols = [p for p, s in REGISTRY.items() if not s.slow and s.in_all and p not in ("lrb", "threelcache")] \
        if args.policies == "all" else args.policies.split(",")
    rates = [float(x) for x in args.rates.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"sampling_scale{args.scale:g}" + (f"_{args.by}" if args.by else "")
    log_path = out / f"{tag}.jsonl"
    done = {}
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            r = json.loads(line)
            done.setdefault(r["policy"], []).append(r)
    todo = [p for p in pols if p not in done or any("error" in r for r in done[p])]
    # longest first, so the last worker is not left with the slowest policy
    todo.sort(key=lambda p: -REGISTRY[p].weight * (len(COSTS) if REGISTRY[p].cost_aware else 1))
    earlier: dict = {}
    if args.reuse_exact:
        for line in Path(args.reuse_exact).read_text().splitlines():
            r = json.loads(line)
            if "error" not in r:
                earlier.setdefault(r["policy"], []).append(r)
    with ProcessPoolExecutor(max_workers=args.jobs) as ex:
        futs = {ex.submit(measure, p, args.scale, args.seed, rates, args.by, earlier.get(p)): p for p in todo}
        for fut in as_completed(futs):
            got = fut.result()
            done[futs[fut]] = got
            with open(log_path, "a") as f:
                f.writelines(json.dumps(r) + "\n" for r in got)
            head = got[0]
            print(f"{head['policy']}: " + (f"FAILED {head['error']}" if "error" in head else
                                           f"exact {head['exact_s']:.1f}s"), flush=True)
    rows = [r for p in pols for r in done.get(p, []) if "error" not in r]
    with open(out / f"{tag}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summ = summarize(rows, args.floor)
    (out / f"{tag}.json").write_text(json.dumps({"rows": rows, "summary": summ, "floor": args.floor}, indent=1))
    md = markdown(summ)
    (out / f"{tag}.md").write_text(md + "\n")
    print(md)
    return 0


def convergence(policies=("lru", "s3fifo", "belady"), candidates=(("exact", 1 / 150, None), ("exact", 0.05, None),
                                                                   ("sampled", 1.0, 0.01), ("sampled", 1.0, 0.005)),
                seed: int = 0) -> list[dict]:
    """Hit ratio and Qwen3 compute savings at the four headline capacities: the exact
    full-scale replay against each candidate default (a smaller trace replayed exactly,
    or the full-scale trace sampled). Rows: policy, candidate, capacity, values, seconds."""
    caps = [to_blocks(f"{g}GiB", QWEN3_CODER_30B, 16) for g in HEADLINE_GIB]
    full = _trace(1.0, seed)
    rows = []
    ref = {}
    for p in policies:
        t0 = time.perf_counter()
        ref[p] = simulate(full, p, caps, cost_models=["uniform", "qwen3_coder_30b"])
        rows.append({"policy": p, "candidate": "full scale, exact", "seconds": time.perf_counter() - t0,
                     **{f"hr_{g}": r.hit_ratio for g, r in zip(HEADLINE_GIB, ref[p])},
                     **{f"qwen_{g}": r.compute_savings["qwen3_coder_30b"] for g, r in zip(HEADLINE_GIB, ref[p])}})
    for kind, scale, rate in candidates:
        t = full if scale == 1.0 else _trace(scale, seed)
        for p in policies:
            t0 = time.perf_counter()
            got = simulate(t, p, caps, cost_models=["uniform", "qwen3_coder_30b"], sample_rate=rate)
            name = f"scale {scale:.4g}, exact" if rate is None else f"scale {scale:g}, sampled r={rate:g}"
            row = {"policy": p, "candidate": name, "seconds": time.perf_counter() - t0}
            for g, a, b in zip(HEADLINE_GIB, ref[p], got):
                row[f"hr_{g}"] = b.hit_ratio
                row[f"qwen_{g}"] = b.compute_savings["qwen3_coder_30b"]
                row[f"dhr_{g}"] = (b.hit_ratio - a.hit_ratio) * 100
                row[f"dqwen_{g}"] = (b.compute_savings["qwen3_coder_30b"] - a.compute_savings["qwen3_coder_30b"]) * 100
                row[f"rate_{g}"] = b.sample_rate
            rows.append(row)
        del t
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
