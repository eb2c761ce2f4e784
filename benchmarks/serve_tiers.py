"""Lower tiers under load and across the fleet: `serve` with tiers against NVIDIA Dynamo 1.6.1's
replay with its native host offload, the shared pool, and the speed of both (docs/tiers.md,
docs/fleet.md).

    python -m benchmarks.serve_tiers compare [--replicas 1,2,4,8] [--out bench_results/serve_tiers]
    python -m benchmarks.serve_tiers pool [--replicas 1,2,4,8] [--out ...]
    python -m benchmarks.serve_tiers speed [--reps 3] [--out ...]

compare   the bundled Mooncake trace, R replicas of 1,000 and 4,000 HBM blocks with 4,000 and
          16,000 host blocks each, round robin and kv_router, at real time and 4x load, copies
          instantaneous and at Dynamo's default link (32 GB/s each way): first-admission reuse,
          host-tier tokens, TTFT mean and p99, ours (`engine="dynamo"`, LRU, vLLM's CPU offload)
          beside Dynamo's `run_trace_replay` with `native_host_offload` (512-token blocks, the
          KV bytes of our default model, Qwen3-Coder-30B: 98,304 per token).
pool      the same fleets above a pool of 64,000 blocks all replicas share, per router: how
          much of the first-admission reuse comes through the pool (and of that, from blocks
          another replica wrote), TTFT mean and p99, and the reuse without the pool.
speed     `serve` with a host tier against Dynamo's replay with native_host_offload, 1 to 8
          workers, same settings: median wall time of --reps interleaved runs, warm JIT.

Dynamo installs with `pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
typing_extensions`; without it only our side is printed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from sim_core import serve
from sim_core.catalog.models import QWEN3_CODER_30B
from sim_core.traces.loaders import load_trace

from .serving import BUNDLED, have_dynamo, publish, replay

KV_BYTES = QWEN3_CODER_30B.kv_bytes_per_token  # 98,304: the model whose KV our tiers move
DEFAULT_GBPS = 32.0  # Dynamo 1.6.1's native_host_offload d2h/h2d default (_normalize_mocker_config)
LINKS = {"inf": 0.0, "32GB/s": DEFAULT_GBPS}  # Dynamo: 0 = unlimited
POOL = 64_000


def _tiers(host: int, link: str, pool: int = 0) -> list:
    bw = float("inf") if LINKS[link] == 0 else LINKS[link] * 1e9
    out = [{"name": "dram", "capacity": host, "bandwidth_bps": bw}]
    if pool:
        out.append({"name": "pool", "capacity": pool, "shared": True, "bandwidth_bps": bw})
    return out


def ours(trace, replicas, hbm, host, router, speedup, link, pool=0, router_params=None):
    t0 = time.perf_counter()
    r = serve(trace, "lru", hbm, replicas=replicas, router=router, engine="dynamo", arrival_speedup=speedup,
              tiers=_tiers(host, link, pool), router_params=router_params)
    wall = time.perf_counter() - t0
    P = r.prompt_tokens
    return {"first_reuse": r.first_reuse_ratio, "host_tokens": r.tier_first_tokens.get("dram", 0),
            "pool_tokens": r.tier_first_tokens.get("pool", 0), "foreign": r.pool_foreign_blocks,
            "ttft_mean_ms": r.ttft_mean_s * 1e3, "ttft_p99_ms": r.ttft_p99_s * 1e3,
            "hbm_share": r.hbm_first_reuse_ratio, "prompt": P, "preemptions": r.preemptions}, wall


def dynamo(path, replicas, hbm, host, router, speedup, link):
    os.environ.setdefault("DYN_LOG", "error")
    g = LINKS[link]
    engine = {"block_size": 512, "num_gpu_blocks": hbm, "kv_cache_bytes_per_token": KV_BYTES,
              "native_host_offload": {"num_host_blocks": host, "d2h_bandwidth_gbps": g, "h2d_bandwidth_gbps": g}}
    rep, wall = replay(path, engine, replicas, router, speedup)
    s = rep.summary
    host_tok = sum(int(q["first_admission_host_reused_input_tokens"] or 0) for q in rep.per_request)
    pre = sum(int(q.get("readmission_count", 0) or 0) for q in rep.per_request)
    return {"first_reuse": s["first_admission_prefix_cache_reused_ratio"], "host_tokens": host_tok,
            "ttft_mean_ms": s["mean_ttft_ms"], "ttft_p99_ms": s["p99_ttft_ms"], "preemptions": pre}, wall


def compare_configs(replicas):
    out = []
    for R in replicas:
        for hbm in (1000, 4000):
            for host in (4000, 16000):
                for router in (("round_robin",) if R == 1 else ("round_robin", "kv_router")):
                    for speedup in (1.0, 4.0):
                        for link in LINKS:
                            out.append((R, hbm, host, router, speedup, link))
    return out


def compare(trace, path, replicas) -> tuple[str, list]:
    both = have_dynamo()
    ours(trace, 1, 4000, 4000, "round_robin", 1.0, "inf")  # JIT
    rows = []
    head = ("| replicas | HBM | host | router | load | link | tool | first-admission reuse | host-tier tokens (M) "
            "| TTFT mean (ms) | TTFT p99 (ms) |")
    md = [head, "|" + "|".join(["---"] * 11) + "|"]
    for cfg in compare_configs(replicas):
        got = {"ours": ours(trace, *cfg)[0]}
        if both:
            got["dynamo"] = dynamo(path, *cfg)[0]
        for tool, m in got.items():
            rows.append({"replicas": cfg[0], "hbm": cfg[1], "host": cfg[2], "router": cfg[3], "speedup": cfg[4],
                         "link": cfg[5], "tool": tool, **m})
            md.append(f"| {cfg[0]} | {cfg[1]:,} | {cfg[2]:,} | {cfg[3]} | {cfg[4]:g}x | {cfg[5]} | {tool} | "
                      f"{m['first_reuse']:.4f} | {m['host_tokens'] / 1e6:.2f} | {m['ttft_mean_ms']:,.1f} | "
                      f"{m['ttft_p99_ms']:,.1f} |")
        print(md[-1], flush=True)
    return "\n".join(md), rows


POOL_ROUTERS = (("round_robin", None), ("kv_router", None), ("kv_router", {"pool_weight": 0.5}),
                ("cache_aware", None), ("weighted", None))


def pool(trace, replicas) -> tuple[str, list]:
    rows = []
    head = ("| replicas | HBM | host | router | load | first-admission reuse | without the pool | through the pool "
            "| of it another replica's | TTFT mean (ms) | TTFT p99 (ms) | without the pool: TTFT mean (ms) |")
    md = [head, "|" + "|".join(["---"] * 12) + "|"]
    for R in replicas:
        for hbm in (1000, 4000):
            for host in (4000, 16000):
                for router, rp in POOL_ROUTERS:
                    if R == 1 and router != "round_robin":
                        continue
                    for speedup in (1.0, 4.0):
                        m = ours(trace, R, hbm, host, router, speedup, "inf", POOL, rp)[0]
                        b = ours(trace, R, hbm, host, router, speedup, "inf", 0, rp)[0]
                        reused = m["first_reuse"] * m["prompt"]
                        via = m["pool_tokens"] / reused if reused else 0.0
                        foreign = m["foreign"] * trace.block_tokens / m["pool_tokens"] if m["pool_tokens"] else 0.0
                        name = router + ("" if not rp else " (" + ", ".join(f"{k}={v:g}" for k, v in rp.items()) + ")")
                        rows.append({"replicas": R, "hbm": hbm, "host": host, "router": name, "speedup": speedup,
                                     **m, "without": b["first_reuse"], "without_ttft_mean_ms": b["ttft_mean_ms"]})
                        md.append(f"| {R} | {hbm:,} | {host:,} | {name} | {speedup:g}x | {m['first_reuse']:.4f} | "
                                  f"{b['first_reuse']:.4f} | {via:.3f} | {foreign:.3f} | {m['ttft_mean_ms']:,.1f} | "
                                  f"{m['ttft_p99_ms']:,.1f} | {b['ttft_mean_ms']:,.1f} |")
                        print(md[-1], flush=True)
    return "\n".join(md), rows


def speed(trace, path, reps: int, replicas=(1, 2, 4, 8)) -> tuple[str, list]:
    both = have_dynamo()
    for R in replicas:
        ours(trace, R, 4000, 16000, "round_robin", 1.0, "inf")  # JIT per replica count
    rows = []
    md = ["| workers | HBM | host | ours (s) | Dynamo (s) | Dynamo / ours |", "|---|---|---|---|---|---|"]
    for R in replicas:
        w = {"ours": [], "dynamo": []}
        for _ in range(reps):  # interleaved, so drift in the machine's speed hits both
            w["ours"].append(ours(trace, R, 4000, 16000, "round_robin", 1.0, "inf")[1])
            if both:
                w["dynamo"].append(dynamo(path, R, 4000, 16000, "round_robin", 1.0, "inf")[1])
        a = statistics.median(w["ours"])
        b = statistics.median(w["dynamo"]) if w["dynamo"] else float("nan")
        rows.append({"workers": R, "ours_s": a, "dynamo_s": b})
        md.append(f"| {R} | 4,000 | 16,000 | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
        print(md[-1], flush=True)
    return "\n".join(md), rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.serve_tiers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("compare", "pool", "speed"))
    ap.add_argument("--trace", type=Path, default=BUNDLED, help="a Mooncake-format trace (512-token blocks)")
    ap.add_argument("--replicas", default="1,2,4,8", help="replica counts, comma-separated")
    ap.add_argument("--reps", type=int, default=3, help="speed: timed runs of each tool (median)")
    ap.add_argument("--out", type=Path, default=None, help="write serve_tiers_<what>.json and .md here")
    a = ap.parse_args(argv)
    trace = load_trace(a.trace)
    reps = [int(x) for x in a.replicas.split(",")]
    print(f"`python -m benchmarks.serve_tiers {a.what} --replicas {a.replicas}"
          + (f" --reps {a.reps}" if a.what == "speed" else "") + "`\n", flush=True)
    if a.what == "compare":
        md, rows = compare(trace, a.trace, reps)
    elif a.what == "pool":
        md, rows = pool(trace, reps)
    else:
        md, rows = speed(trace, a.trace, a.reps, tuple(reps))
    publish(md, rows, a.reps if a.what == "speed" else 1, a.out, f"serve_tiers_{a.what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
