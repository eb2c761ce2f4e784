"""SGLang's scheduler in the serving replay against NVIDIA Dynamo's SGLang engine, side by side.

    python -m benchmarks.sglang                       # the bundled Mooncake trace, both tools
    python -m benchmarks.sglang --out bench_results/sglang
    python -m benchmarks.sglang --compat             # ours with engine.dynamo_compat

For each configuration (replicas x KV blocks x router x arrival speed-up x queue order) it
runs `sim_core.serve(engine={"preset": "sglang", ...})` (SGLang's scheduler, Dynamo's
polynomial) and, when it is installed, Dynamo 1.6.1's `dynamo.replay.run_trace_replay`
with `backend: sglang` and the same settings (block size 512 = the trace's, its SGLang
defaults otherwise), and prints reuse, TTFT mean and p99, TPOT, retractions and each
tool's wall time (ours with a warm JIT cache). `--compat` runs ours with Dynamo's
departures from SGLang (engine.dynamo_compat, docs/serving.md). Dynamo installs as benchmarks/serving.py
says; without it only our side is printed.
"""
from __future__ import annotations

import time
from pathlib import Path

from sim_core import serve
from sim_core.traces.loaders import load_trace

from .serving import SHAPE, have_dynamo, md_table, publish, replay_parser

# (replicas, KV blocks per replica, router, arrival speed-up, schedule_policy)
CONFIGS = [(1, b, "round_robin", s, "fcfs") for b in (4000, 16000) for s in (1.0, 4.0)] + \
          [(4, b, rt, s, "fcfs") for b in (4000, 16000) for rt in ("round_robin", "kv_router") for s in (1.0, 4.0)] + \
          [(1, b, "round_robin", s, "lpm") for b in (4000, 16000) for s in (1.0, 4.0)]

SGLANG = {"chunked_prefill_size": 8192, "max_prefill_tokens": 16384, "clip_max_new_tokens": 4096,
          "schedule_conservativeness": 1.0}


def ours(trace, replicas: int, blocks: int, router: str, speedup: float, policy: str,
         compat: bool = False) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = serve(trace, "lru", blocks, replicas=replicas, router=router, arrival_speedup=speedup,
              engine={"preset": "sglang", "step_model": "dynamo", "schedule_policy": policy, "dynamo_compat": compat,
                      **SGLANG})
    wall = time.perf_counter() - t0
    return {"reuse": r.reuse_ratio, "ttft_mean_ms": r.ttft_mean_s * 1e3, "ttft_p99_ms": r.ttft_p99_s * 1e3,
            "tpot_ms": r.tpot_mean_s * 1e3, "retractions": r.preemptions}, wall


def dynamo(path: Path, replicas: int, blocks: int, router: str, speedup: float, policy: str) -> tuple[dict, float]:
    from dynamo.replay import run_trace_replay

    engine = {"backend": "sglang", "block_size": 512, "num_gpu_blocks": blocks,
              "sglang": {"schedule_policy": "fifo" if policy == "fcfs" else policy, **SGLANG}}
    t0 = time.perf_counter()
    rep = run_trace_replay([str(path)], extra_engine_args={"engine": engine}, num_workers=replicas,
                           router_mode=router, arrival_speedup_ratio=speedup, trace_block_size=512,
                           trace_format="mooncake", capture_per_request=True)
    wall = time.perf_counter() - t0
    s = rep.summary
    # a retraction is one re-admission of a request (its summary has no count of them)
    back = sum(int(r.get("readmission_count", 0) or 0) for r in rep.per_request or [])
    return {"reuse": s["prefix_cache_reused_ratio"], "ttft_mean_ms": s["mean_ttft_ms"],
            "ttft_p99_ms": s["p99_ttft_ms"], "tpot_ms": s["mean_tpot_ms"], "retractions": back}, wall


def run(path: Path, configs=CONFIGS, compat: bool = False) -> list[dict]:
    trace = load_trace(path)
    both = have_dynamo()
    for n in sorted({c[0] for c in configs}):  # JIT: compiled (or loaded) before timing
        ours(trace, n, 16000, "round_robin", 1.0, "lpm")
    rows = []
    for cfg in configs:
        got = {"ours (compat)" if compat else "ours": ours(trace, *cfg, compat=compat)}
        if both:
            got["dynamo"] = dynamo(path, *cfg)
        for tool, (m, wall) in got.items():
            rows.append({"replicas": cfg[0], "blocks": cfg[1], "router": cfg[2], "speedup": cfg[3],
                         "policy": cfg[4], "tool": tool, **m, "wall_s": wall})
    return rows


def table(rows: list[dict]) -> str:
    return md_table(SHAPE + [
        ("order", lambda r: r["policy"]), ("tool", lambda r: r["tool"]), ("reuse", lambda r: f"{r['reuse']:.4f}"),
        ("TTFT mean (ms)", lambda r: f"{r['ttft_mean_ms']:,.1f}"), ("TTFT p99 (ms)", lambda r: f"{r['ttft_p99_ms']:,.1f}"),
        ("TPOT (ms)", lambda r: f"{r['tpot_ms']:.2f}"), ("retractions", lambda r: f"{r['retractions']}"),
        ("wall (s)", lambda r: f"{r['wall_s']:.2f}")], rows)


def main(argv=None) -> int:
    ap = replay_parser(__doc__, "sglang", reps=None)
    ap.add_argument("--compat", action="store_true", help="ours with engine.dynamo_compat (Dynamo's departures)")
    a = ap.parse_args(argv)
    rows = run(a.trace, compat=a.compat)
    publish(table(rows), rows, 1, a.out, "sglang_compat" if a.compat else "sglang")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
