"""Benchmark: our replay speed against libCacheSim on the same trace, and the costs that
decide how long a sweep takes (request vs block mode, one-pass curves, JIT, memory).

    python -m benchmarks.speed                      # every policy, default sizes
    python -m benchmarks.speed --accesses 20e6 --policies lru,fifo,arc --reps 3
    python -m benchmarks.speed --full-scale         # + FreeInference-scale load/RSS figures

All numbers of one table come from one run on one machine: ours and libCacheSim's are
timed back to back on the same access sequence and capacity, the median of --reps runs.
Speed is block accesses per second per core (both simulators are single-threaded).
Results: a markdown table on stdout, plus CSV/markdown files under --out.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from sim_core import QWEN3_CODER_30B, get_policy, policy_names, simulate, to_blocks
from sim_core.traces import synth
from sim_core.jit import njit
from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general
from sweep.plan import Capacity, make_plan
from sweep.runner import RayCluster
from sweep.spec import PolicyChoice
from sweep.traces import to_payload

from . import sampling

# Each policy is timed against libCacheSim's class for the same policy
# (PolicySpec.libcachesim) or, where libCacheSim has none, against NEAREST[policy]: same
# eviction family, same data-structure work per access, different hit ratios. The
# sampled compute-aware policies draw 64 blocks per eviction and score each by a ratio
# over its age, which is what libCacheSim's Hyperbolic does (n_sample=64); libCacheSim's
# Random draws one, i.e. does 1/64 of that work per eviction.
NEAREST = {
    "asymcache": "GDSF",
    "belady_compute": "Belady",
    "lru_session": "LRU",
    "partial_node": "Hyperbolic",
    "random_compute": "Hyperbolic",
    "random_compute_session": "Hyperbolic",
    "s3fifo_compute": "S3FIFO",
    "s4fifo": "S3FIFO",
    "workload_aware": "GDSF",
}
#: the speed-up over libCacheSim a policy must reach: TARGETS[policy], else DEFAULT_TARGET
TARGETS = {"arc": 10, "fifo": 20, "lfu": 10, "lru": 20, "s3fifo": 10, "sieve": 10}
DEFAULT_TARGET = 2
HAVE_LCS = importlib.util.find_spec("libcachesim") is not None  # an optional dependency ('.[test]')


def reference_of(name: str) -> tuple[str | None, bool, float]:
    """(libCacheSim class timed against or None, whether it is the same policy, target)."""
    same = get_policy(name).libcachesim
    return same or NEAREST.get(name), same is not None, TARGETS.get(name, DEFAULT_TARGET)


def bench_trace(accesses: float, seed: int = 0):
    """A generated FreeInference-like trace with at least `accesses` block accesses."""
    probe = synth.generate("freeinference", scale=synth.DEFAULT_SCALE, seed=seed)
    scale = synth.DEFAULT_SCALE * max(1.0, accesses / max(probe.n_accesses, 1)) * 1.02
    return synth.generate("freeinference", scale=scale, seed=seed)


def _median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@njit
def yardstick_lru(blocks, n_unique, capacity):
    """The simplest flat-array LRU we can write: the machine's limit for our LRU."""
    prev = np.full(n_unique + 1, -1, np.int32)
    nxt = np.full(n_unique + 1, -1, np.int32)
    S = n_unique
    prev[S] = S
    nxt[S] = S
    inside = np.zeros(n_unique, np.bool_)
    size = 0
    hits = 0
    for j in range(blocks.shape[0]):
        b = blocks[j]
        if inside[b]:
            hits += 1
            p = prev[b]
            q = nxt[b]
            nxt[p] = q
            prev[q] = p
        else:
            if size >= capacity:
                v = prev[S]
                p = prev[v]
                nxt[p] = S
                prev[S] = p
                inside[v] = False
                size -= 1
            inside[b] = True
            size += 1
        h = nxt[S]
        nxt[b] = h
        prev[b] = S
        prev[h] = b
        nxt[S] = b
    return hits


def speed_table(trace, policies, capacity, reps, oracle_path):
    rows = []
    n = trace.n_accesses
    for name in policies:
        spec = get_policy(name)
        cost = ["qwen3_coder_30b"] if spec.cost_aware else ["uniform"]
        run = lambda: simulate(trace, name, capacity, mode="block", cost_models=cost, one_pass=False)
        rec = run()[0]  # compile + warm up
        ours = _median_time(run, reps)
        req = lambda: simulate(trace, name, capacity, mode="request", cost_models=cost, one_pass=False)
        req()
        row = {"policy": name, "capacity_blocks": capacity, "accesses": n,
               "ours_hit_ratio": rec.hit_ratio, "ours_acc_per_s": n / ours,
               "ours_request_acc_per_s": n / _median_time(req, reps)}
        ref, same, target = reference_of(name)
        if HAVE_LCS and ref:
            theirs_hr = libcachesim_hit_ratio(oracle_path, ref, capacity)
            theirs = _median_time(lambda: libcachesim_hit_ratio(oracle_path, ref, capacity), reps)
            row.update(lcs_policy=ref, same_policy=same, lcs_hit_ratio=theirs_hr,
                       lcs_acc_per_s=n / theirs, speedup=theirs / ours,
                       target=target)
            row["meets_target"] = row["speedup"] >= row["target"]
        rows.append(row)
        print(_fmt_row(row), flush=True)
    return rows


def _fmt_row(row):
    s = (f"{row['policy']:>22}  ours {row['ours_acc_per_s'] / 1e6:7.2f} M/s (request mode "
         f"{row['ours_request_acc_per_s'] / 1e6:6.2f})  hr {row['ours_hit_ratio']:.4f}")
    if "lcs_acc_per_s" in row:
        s += (f" | libCacheSim {row['lcs_policy']:>8}{'' if row['same_policy'] else '*'} "
              f"{row['lcs_acc_per_s'] / 1e6:6.2f} M/s hr {row['lcs_hit_ratio']:.4f}"
              f" | x{row['speedup']:6.1f} (target x{row['target']}: {'ok' if row['meets_target'] else 'MISSED'})")
    return s


def engine_figures(trace, capacity, reps):
    """Request vs block mode, one-pass vs per-capacity, yardstick LRU."""
    n = trace.n_accesses
    out = {}
    yardstick_lru(trace.blocks, trace.n_unique, capacity)
    out["yardstick_lru_s"] = _median_time(lambda: yardstick_lru(trace.blocks, trace.n_unique, capacity), reps)
    blk = lambda: simulate(trace, "lru", capacity, mode="block", one_pass=False)
    req = lambda: simulate(trace, "lru", capacity, mode="request", one_pass=False)
    blk(), req()
    out["lru_block_s"] = _median_time(blk, reps)
    out["lru_request_s"] = _median_time(req, reps)
    lo = max(trace.max_request_blocks, 1)
    caps = sorted({int(c) for c in np.geomspace(lo, max(lo + 1, trace.n_unique), 65)})
    single = lambda: simulate(trace, "lru", caps[len(caps) // 2], mode="request", one_pass=False)
    curve = lambda: simulate(trace, "lru", caps, mode="request")
    single(), curve()
    out["lru_single_capacity_s"] = _median_time(single, reps)
    out["lru_one_pass_s"] = _median_time(curve, reps)
    out["one_pass_capacities"] = len(caps)
    out["lru_per_capacity_projection_s"] = out["lru_single_capacity_s"] * len(caps)
    out["ratio_lru_vs_yardstick"] = out["lru_block_s"] / out["yardstick_lru_s"]
    out["ratio_request_vs_block"] = out["lru_request_s"] / out["lru_block_s"]
    out["ratio_one_pass_vs_single"] = out["lru_one_pass_s"] / out["lru_single_capacity_s"]
    # the crossover replay_units decides by (ONE_PASS_COST): a curve over k capacities
    # against k direct replays, k = 3 the smallest it takes the curve for
    for k in (3, 9):
        few = caps[len(caps) // 4::max(1, len(caps) // (2 * k))][:k]
        curve_k = lambda: simulate(trace, "lru", few, mode="request")
        direct_k = lambda: simulate(trace, "lru", few, mode="request", one_pass=False)
        curve_k(), direct_k()
        out[f"lru_{k}_capacities_curve_s"] = _median_time(curve_k, reps)
        out[f"lru_{k}_capacities_direct_s"] = _median_time(direct_k, reps)
    # one capacity through simulate's default (one_pass=True): the direct replay is chosen
    dflt = lambda: simulate(trace, "lru", capacity, mode="block")
    dflt()
    out["lru_one_capacity_default_s"] = _median_time(dflt, reps)
    out.update(belady_compute_ratio(trace, capacity, reps))
    out["accesses"] = n
    return out


def belady_compute_ratio(trace, capacity, reps) -> dict:
    """BeladyCompute's time per replay over Belady's, at one capacity in request mode,
    per cost model (Belady's replay does not depend on it). The two replays alternate,
    at least 5 times each, so that the machine's drift falls on both; medians."""
    out = {}
    for model in ("uniform", "qwen3_coder_30b"):
        runs = {p: (lambda p=p: simulate(trace, p, capacity, mode="request", cost_models=[model]))
                for p in ("belady", "belady_compute")}
        for f in runs.values():
            f()
        secs = {p: [] for p in runs}
        for _ in range(max(reps, 5)):
            for p, f in runs.items():
                secs[p].append(_median_time(f, 1))
        med = {p: statistics.median(v) for p, v in secs.items()}
        out[f"belady_compute_over_belady_{model}"] = med["belady_compute"] / med["belady"]
    return out


_JIT_SNIPPET = """
import time, sys
t0 = time.perf_counter()
import sim_core
from sim_core import Trace, simulate
t1 = time.perf_counter()
t = Trace.from_requests([[1, 2, 3], [1, 2, 4]])
simulate(t, sys.argv[1], 2, mode="request")
print(time.perf_counter() - t1)
"""


def jit_times(policy: str = "lru") -> dict:
    """First-call compile time in a fresh process with an empty vs a warm JIT cache."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NUMBA_CACHE_DIR=d)
        cold = float(subprocess.check_output([sys.executable, "-c", _JIT_SNIPPET, policy], env=env))
        warm = float(subprocess.check_output([sys.executable, "-c", _JIT_SNIPPET, policy], env=env))
    return {"policy": policy, "jit_cold_s": cold, "jit_warm_s": warm}


_SCALE_SNIPPET = """
import json, resource, sys, time
import numpy as np
from sim_core import Trace, simulate
t0 = time.perf_counter()
t = Trace.load(sys.argv[1])
load_s = time.perf_counter() - t0
per_access = (t.blocks.nbytes) / t.n_accesses
per_request = sum(a.nbytes for a in (t.req_offsets, t.arrival_s, t.session, t.input_tokens, t.output_tokens)) / t.n_requests
t0 = time.perf_counter()
r = simulate(t, "lru", int(sys.argv[2]), mode="request", one_pass=False)[0]
replay_s = time.perf_counter() - t0
print(json.dumps(dict(load_s=load_s, accesses=t.n_accesses, requests=t.n_requests, unique=t.n_unique,
     bytes_per_access=per_access, bytes_per_request=per_request, lru_replay_s=replay_s,
     lru_hit_ratio=r.hit_ratio, peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)))
"""


def full_scale_figures(workdir: Path, capacity: int) -> dict:
    """Generate the full-scale FreeInference-like trace, then load it and replay LRU in a
    fresh process (so peak RSS is the replay's, not the generator's)."""
    path = workdir / "freeinference_full.npz"
    t0 = time.perf_counter()
    tr = synth.generate("freeinference", scale=1.0)
    gen_s = time.perf_counter() - t0
    tr.save(path)
    del tr
    res = json.loads(subprocess.check_output([sys.executable, "-c", _SCALE_SNIPPET, str(path), str(capacity)]))
    res["generate_s"] = gen_s
    res["file_gib"] = path.stat().st_size / 2**30
    return res


RAY_POLICIES = ("fifo", "lfu", "arc", "s3fifo", "lirs", "sieve", "belady", "lecar")


def ray_scaling(trace, capacity: int, n_caps: int = 6, actors=(1, 2), policies=RAY_POLICIES) -> dict:
    """Sweep throughput (block accesses replayed per wall second, the trace's trip
    through the object store and actor start-up included, Ray's start-up not) with 1
    and with 2 actors, on
    the same plan: `policies` (RAY_POLICIES) x n_caps capacities around `capacity`, request mode."""
    blocks = sorted({max(1, int(capacity * f)) for f in np.geomspace(0.5, 2.0, n_caps)})
    caps = [Capacity(index=i, label=str(b), blocks=b, gib=0.0) for i, b in enumerate(blocks)]
    pols = [PolicyChoice(name=p, params={}, weight=1.0, cost_aware=False, one_pass=False) for p in policies]
    out = {"jobs_policies": list(policies), "capacities": blocks}
    # untimed first pass: the first sweep of a process pays one-off costs (measured: 3x
    # slower than the same 1-actor pass afterwards), which would flatter the 2-actor run
    with RayCluster(OmegaConf.create({"num_cpus": max(actors), "actors": 1})) as cluster:
        warm = make_plan(pols, ["uniform"], caps[:1], trace.n_accesses, 1)
        for _ in cluster.pool_for(to_payload(trace), {"mode": "request"}, len(warm)).results(warm, fail_fast=True):
            pass
    for n in actors:
        jobs = make_plan(pols, ["uniform"], caps, trace.n_accesses, n)
        cfg = OmegaConf.create({"num_cpus": max(actors), "actors": n})
        with RayCluster(cfg) as cluster:  # Ray's own start-up is not timed
            t0 = time.perf_counter()
            for _ in cluster.pool_for(to_payload(trace), {"mode": "request"}, len(jobs)).results(jobs, fail_fast=True):
                pass
            wall = time.perf_counter() - t0
        out[f"actors_{n}_wall_s"] = wall
        out[f"actors_{n}_acc_per_s"] = sum(j.accesses for j in jobs) / wall
    if len(actors) == 2:
        out["speedup"] = out[f"actors_{actors[1]}_acc_per_s"] / out[f"actors_{actors[0]}_acc_per_s"]
    return out


def write_outputs(out_dir: Path, rows, figures, jit, scale, ray=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    if rows:
        keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
        with open(out_dir / "speed.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    lines = ["| policy | ours M acc/s (block) | ours request mode | libCacheSim policy | libCacheSim M acc/s "
             "| speed-up | target | hit ratio ours / lcs |",
             "|---|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        head = (f"| {r['policy']} | {r['ours_acc_per_s'] / 1e6:.2f} | {r['ours_request_acc_per_s'] / 1e6:.2f} | ")
        if "lcs_acc_per_s" in r:
            lines.append(head + f"{r['lcs_policy']}{'' if r['same_policy'] else ' (nearest)'} | "
                         f"{r['lcs_acc_per_s'] / 1e6:.2f} | {r['speedup']:.1f}x | "
                         f"{r['target']}x {'ok' if r['meets_target'] else 'MISSED'} | "
                         f"{r['ours_hit_ratio']:.4f} / {r['lcs_hit_ratio']:.4f} |")
        else:
            lines.append(head + f"- | - | - | - | {r['ours_hit_ratio']:.4f} / - |")
    extra = {"engine": figures, "jit": jit, "full_scale": scale, "ray": ray or {}}
    lines += ["", "```json", json.dumps(extra, indent=2), "```"]
    (out_dir / "bench.md").write_text("\n".join(lines) + "\n")
    (out_dir / "bench.json").write_text(json.dumps({"speed": rows, **extra}, indent=2))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accesses", type=float, default=20e6, help="block accesses in the generated trace (default 20e6)")
    ap.add_argument("--capacity", default="48GiB", help="capacity for the speed table (bytes or blocks; default 48GiB)")
    ap.add_argument("--policies", default="all", help="comma list or 'all' (default: every online policy and oracle)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions, median reported (default 3)")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: speed,engine,jit,ray")
    ap.add_argument("--full-scale", action="store_true", help="also measure a full-scale (327.5K requests) trace")
    ap.add_argument("--sampling", action="store_true",
                    help="also print sampled replay's error table (python -m benchmarks.sampling: 1/10-scale "
                         "trace, every policy, r = 0.1, 0.01, 0.001; about an hour of CPU)")
    ap.add_argument("--out", default="bench_results", help="output directory (default bench_results/)")
    ap.add_argument("--mlflow", default=None, help="tracking URI to log the results to (optional)")
    args = ap.parse_args(argv)

    skip = set(filter(None, args.skip.split(",")))
    t0 = time.perf_counter()
    trace = bench_trace(args.accesses)
    print(f"trace: {trace.n_accesses:,} accesses, {trace.n_unique:,} unique blocks, "
          f"{trace.n_requests:,} requests (generated in {time.perf_counter() - t0:.1f}s)", flush=True)
    capacity = to_blocks(args.capacity, QWEN3_CODER_30B, trace.block_tokens)
    # "all" as in policy=all: a policy kept to explicit selection (the ILP) is no replay to time
    names = [n for n in policy_names() if get_policy(n).in_all] if args.policies == "all" else \
        [p.strip() for p in args.policies.split(",")]
    rows, figures, jit, scale, ray = [], {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as d:
        if "speed" not in skip:
            oracle = write_oracle_general(trace, Path(d) / "trace.oracleGeneral")
            print(f"block mode, capacity {capacity:,} blocks ({args.capacity}), median of {args.reps}:")
            rows = speed_table(trace, names, capacity, args.reps, oracle)
        if "engine" not in skip:
            figures = engine_figures(trace, capacity, args.reps)
            print("engine:", json.dumps(figures, indent=1))
        if "jit" not in skip:
            jit = jit_times("lru")
            print("jit:", jit)
        if "ray" not in skip:
            ray = ray_scaling(trace, capacity)
            print("ray:", json.dumps(ray))
        if args.full_scale:
            scale = full_scale_figures(Path(d), to_blocks("24GiB", QWEN3_CODER_30B, 16))
            print("full scale:", scale)
        if args.sampling:
            sampling.main(["--out", args.out])
    table = write_outputs(Path(args.out), rows, figures, jit, scale, ray)
    print(table)
    if args.mlflow:
        import mlflow  # only with --mlflow, and slow to import


        mlflow.set_tracking_uri(args.mlflow)
        mlflow.set_experiment("benchmarks")
        with mlflow.start_run(run_name="bench"):
            for r in rows:
                mlflow.log_metric(f"{r['policy']}_acc_per_s", r["ours_acc_per_s"])
                if "speedup" in r:
                    mlflow.log_metric(f"{r['policy']}_speedup", r["speedup"])
            for k, v in {**figures, **{f"ray_{k}": v for k, v in ray.items()}}.items():
                if isinstance(v, (int, float)):
                    mlflow.log_metric(k, float(v))
            mlflow.log_artifacts(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
