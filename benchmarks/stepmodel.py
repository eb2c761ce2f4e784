"""The measured step model against the polynomial and the roofline on the bundled Mooncake trace.

    python -m benchmarks.stepmodel                       # speed ratio and the latency table
    python -m benchmarks.stepmodel --reps 7 --out bench_results/stepmodel

One engine throughout: vLLM's scheduler and defaults (engine preset "vllm"), Qwen/Qwen3-30B-A3B
on two H100s (hardware=h100_sxm, TP 2: on one, the 118,000-token KV cache cannot hold the
trace's longest requests, up to 121,000 tokens), the KV cache derived from memory
(capacity_blocks=None: 1,665 blocks of the trace's 512 tokens), LRU; only the step-time
model changes.

Speed: `serve` with step_model=measured against step_model=dynamo (Dynamo's polynomial) and
the roofline, once the tables exist and the JIT is warm (one untimed run of each first),
alternating `--reps` times at each `--speed-loads`: median wall times, their ratio to the
polynomial's and the time per step (the models schedule different numbers of steps, since
their step times differ).

Latencies: TTFT mean/p50/p99 and TPOT mean under each model at each `--speedups` load,
with steps, preemptions and steps timed beyond the measured data.

Capacity: the KV cache we derive from memory (sim_core.catalog.kvmemory) against
aiconfigurator-core's estimate_kv_cache, for a few models and TP sizes on an H100 at
gpu_memory_utilization 0.9 (vLLM's max_num_batched_tokens 8,192 and max_num_seqs 1,024).
"""
from __future__ import annotations

import statistics
import time

from sim_core import serve
from sim_core.traces.loaders import load_trace

from .serving import md_table, publish, replay_parser

MODEL, GPU, TP = "Qwen/Qwen3-30B-A3B", "h100_sxm", 2
MODELS = {  # label -> engine overrides on the vllm preset
    "polynomial (dynamo)": {"step_model": "dynamo"},
    "roofline": {"step_model": "roofline"},
    "measured (fused)": {"step_model": "measured"},
    "measured (dynamo passes)": {"step_model": "measured", "step_params": {"composition": "dynamo"}},
}


def run_one(trace, over: dict, speedup: float = 1.0):
    t0 = time.perf_counter()
    r = serve(trace, "lru", None, engine={"preset": "vllm", "tp": TP, **over}, hardware=GPU, model=MODEL,
              arrival_speedup=speedup)
    return r, time.perf_counter() - t0


SPEED = ("measured (fused)", "polynomial (dynamo)", "roofline")


def speed(trace, reps: int, load: float = 1.0) -> list[dict]:
    """Alternating timed runs of the measured model, the polynomial and the roofline at one
    load: median wall time, steps, time per step and the ratio to the polynomial."""
    steps = {m: run_one(trace, MODELS[m], load)[0].steps for m in SPEED}  # untimed: tables, compiled loop
    walls: dict[str, list] = {m: [] for m in SPEED}
    for _ in range(reps):
        for m in SPEED:
            walls[m].append(run_one(trace, MODELS[m], load)[1])
    med = {m: statistics.median(w) for m, w in walls.items()}
    poly = med["polynomial (dynamo)"]
    return [{"load": load, "model": m, "wall_s": med[m], "steps": steps[m], "us_per_step": med[m] / steps[m] * 1e6,
             "ratio": med[m] / poly, "runs": walls[m]} for m in SPEED]


def latencies(trace, speedups) -> list[dict]:
    rows = []
    for s in speedups:
        for label, over in MODELS.items():
            r, _ = run_one(trace, over, s)
            rows.append({"load": s, "model": label, "ttft_mean_ms": r.ttft_mean_s * 1e3,
                         "ttft_p50_ms": r.ttft_p50_s * 1e3, "ttft_p99_ms": r.ttft_p99_s * 1e3,
                         "tpot_ms": r.tpot_mean_s * 1e3, "steps": r.steps, "preemptions": r.preemptions,
                         "extrapolated": r.extrapolated_steps, "blocks": r.capacity_blocks})
    return rows


CAPACITY = [("Qwen/Qwen3-30B-A3B", 1), ("Qwen/Qwen3-30B-A3B", 2), ("Qwen/Qwen3-30B-A3B", 4), ("Qwen/Qwen3-8B", 1),
            ("Qwen/Qwen3-32B", 2), ("meta-llama/Meta-Llama-3.1-8B", 1), ("meta-llama/Meta-Llama-3.1-70B", 4)]


def capacity(pairs=CAPACITY) -> list[dict]:
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    from sim_core.serving.measured import aic
    from sim_core.catalog.kvmemory import kv_budget

    rows = []
    for model, tp in pairs:
        arch = aic.resolve_model(model).arch
        ours = kv_budget(arch, GPU, tp, 0.9, 8192, 1024, 16)
        moe = dict(moe_tp_size=tp, moe_ep_size=1) if arch.experts else {}  # experts TP-sharded, as vLLM's default
        with aic.quiet():
            theirs = estimate_kv_cache(model, GPU, "vllm", "current", max_num_tokens=8192, max_batch_size=1024,
                                       memory_fraction_kind="of_total", memory_fraction_value=0.9, tp_size=tp, **moe)
        rows.append({"model": model, "tp": tp, "ours": ours.tokens, "theirs": int(theirs["total_kv_size_tokens"]),
                     "ours_weights_gib": ours.weights_bytes / 2**30,
                     "theirs_weights_gib": theirs["memory_breakdown"]["weights_bytes"] / 2**30})
    return rows


def capacity_table(rows: list[dict]) -> str:
    out = ["| model | TP | KV tokens per GPU, ours | aiconfigurator-core | difference | weights per GPU, ours / "
           "theirs (GiB) |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['tp']} | {r['ours']:,} | {r['theirs']:,} | "
                   f"{r['ours'] / r['theirs'] - 1:+.1%} | {r['ours_weights_gib']:.1f} / {r['theirs_weights_gib']:.1f} |")
    return "\n".join(out)


def tables(speeds: list[dict], rows: list[dict]) -> str:
    speed_md = md_table([
        ("load", lambda r: f"{r['load']:g}x"), ("step model", lambda r: r["model"]),
        ("wall (s, median)", lambda r: f"{r['wall_s']:.3f}"), ("steps", lambda r: f"{r['steps']:,}"),
        ("us per step", lambda r: f"{r['us_per_step']:.2f}"), ("wall / polynomial's", lambda r: f"{r['ratio']:.2f}x")],
        speeds)
    latency_md = md_table([
        ("load", lambda r: f"{r['load']:g}x"), ("step model", lambda r: r["model"]),
        ("TTFT mean (ms)", lambda r: f"{r['ttft_mean_ms']:,.1f}"), ("p50", lambda r: f"{r['ttft_p50_ms']:,.1f}"),
        ("p99", lambda r: f"{r['ttft_p99_ms']:,.1f}"), ("TPOT mean (ms)", lambda r: f"{r['tpot_ms']:.1f}"),
        ("steps", lambda r: f"{r['steps']:,}"), ("preemptions", lambda r: f"{r['preemptions']:,}"),
        ("steps beyond the data", lambda r: f"{r['extrapolated']:,}")], rows)
    return speed_md + "\n\n" + latency_md


def main(argv=None) -> int:
    ap = replay_parser(__doc__, "stepmodel", reps=5, reps_help="timed runs of each model, alternating (median)")
    ap.add_argument("--speedups", default="0.25,0.5,1", help="arrival speed-ups of the latency table, comma-separated")
    ap.add_argument("--speed-loads", default="0.5,1", help="arrival speed-ups of the speed comparison")
    a = ap.parse_args(argv)
    trace = load_trace(a.trace)
    sp = [row for x in a.speed_loads.split(",") for row in speed(trace, a.reps, float(x))]
    rows = latencies(trace, [float(x) for x in a.speedups.split(",")])
    cap = capacity()
    publish(tables(sp, rows) + "\n\n" + capacity_table(cap), {"speed": sp, "latencies": rows, "capacity": cap},
            a.reps, a.out, "stepmodel")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
