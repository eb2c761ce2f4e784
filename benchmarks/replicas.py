"""Replicas of Qwen3-30B-A3B on H100s under vLLM timing: the polynomial against the measured data.

    python -m benchmarks.replicas                         # the tables of docs/serving.md, the bundled Mooncake trace
    python -m benchmarks.replicas --out bench_results/replicas

The bundled Mooncake trace through 1, 4 and 8 replicas (round robin) of vLLM's scheduler and
defaults (engine preset "vllm"), Qwen/Qwen3-30B-A3B on one H100 each (hardware=h100_sxm, TP 1),
each replica's KV cache derived from GPU memory (capacity_blocks=None), LRU, at real time and
4x the load; only the step-time model changes: Dynamo's polynomial or aiconfigurator-core's
measured data.

Fit: at vLLM's default gpu_memory_utilization 0.9 one H100 leaves 119,265 tokens of KV cache
(232 blocks of 512), and 27 of the trace's requests need more (up to 126,526 tokens with their
output): such a deployment cannot serve the trace. The first table says what each remedy
gives; the others run with `--fraction` (default 0.92: the smallest step of 0.01 whose cache
holds a 131,072-token request, the max_model_len Qwen3 reaches with YaRN, which vLLM checks at
start-up) and `--tp`.

Replicas needed: for each step model and load, the fewest replicas meeting p99 TTFT <= 2 s
and mean TPOT <= 50 ms (the sweep's SLO reading), found by doubling the replicas until they
meet it, then bisecting (so n meets it and n - 1 does not).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from sim_core import serve
from sim_core.serving import deployment, kv_capacity, served_lengths
from sim_core.traces.loaders import load_trace

from .serving import BUNDLED, publish

MODEL, GPU = "Qwen/Qwen3-30B-A3B", "h100_sxm"
STEP_MODELS = {"polynomial (dynamo)": "dynamo", "measured": "measured"}
SLO = {"ttft": "2s", "tpot": "50ms"}
TTFT_S, TPOT_S = 2.0, 0.05


def engine(step_model: str, tp: int, fraction: float) -> dict:
    return {"preset": "vllm", "step_model": step_model, "tp": tp, "gpu_memory_utilization": fraction}


def fit(trace, settings=((1, 0.9), (1, 0.91), (1, 0.92), (1, 0.95), (2, 0.9))) -> list[dict]:
    """Per (TP, gpu_memory_utilization): the derived KV cache and the requests it cannot hold."""
    bt = int(trace.block_tokens)
    rows = []
    for tp, u in settings:
        eng = engine("dynamo", tp, u)
        dep = deployment(engine=eng, hardware=GPU, model=MODEL)
        cap, budget = kv_capacity(dep, None, bt)
        prompt, out, _ = served_lengths(trace, dep.engine)
        need = -(-(prompt + out - 1) // bt)
        big = need > cap
        rows.append({"tp": tp, "fraction": u, "tokens": budget.tokens, "blocks": cap, "too_big": int(big.sum()),
                     "largest_tokens": int((prompt + out - 1).max()), "largest_blocks": int(need.max()),
                     "context": dep.model_ref.arch.context,
                     "beyond_context": int((prompt + out > dep.model_ref.arch.context).sum())})
    return rows


def run_one(trace, step_model: str, replicas: int, load: float, tp: int, fraction: float):
    t0 = time.perf_counter()
    r = serve(trace, "lru", None, engine=engine(step_model, tp, fraction), hardware=GPU, model=MODEL,
              replicas=replicas, router="round_robin", arrival_speedup=load, slo=SLO)
    return r, time.perf_counter() - t0


def meets(r) -> bool:
    return r.ttft_p99_s <= TTFT_S and not r.tpot_mean_s > TPOT_S


def row(label: str, replicas: int, load: float, r, wall: float) -> dict:
    return {"model": label, "replicas": replicas, "load": load, "blocks": r.capacity_blocks,
            "ttft_mean_ms": r.ttft_mean_s * 1e3, "ttft_p99_ms": r.ttft_p99_s * 1e3, "tpot_ms": r.tpot_mean_s * 1e3,
            "preemptions": r.preemptions, "goodput": r.goodput_ratio, "steps": r.steps,
            "extrapolated": r.extrapolated_steps, "meets": meets(r), "wall_s": wall, "step_model": r.step_model}


def fewest(trace, step_model: str, load: float, tp: int, fraction: float, known: dict, most: int = 64):
    """(fewest replicas meeting the SLO or None, {replicas: meets}): doubling, then bisection.
    `known` caches (replicas -> result) runs already made."""
    seen = {}

    def ok(n: int) -> bool:
        if n not in known:
            known[n] = run_one(trace, step_model, n, load, tp, fraction)
        seen[n] = meets(known[n][0])
        return seen[n]

    n = 1
    while not ok(n):
        if n >= most:
            return None, seen
        n *= 2
    lo, hi = n // 2, n  # lo misses (or is 0), hi meets
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, seen


def run(trace, replicas=(1, 4, 8), loads=(1.0, 4.0), tp: int = 1, fraction: float = 0.92) -> tuple[list, list]:
    serve(trace, "lru", None, engine=engine("measured", tp, fraction), hardware=GPU, model=MODEL,
          arrival_speedup=64.0)  # untimed: the tables and the compiled loop exist before timing
    rows, answers = [], []
    for load in loads:
        for label, sm in STEP_MODELS.items():
            known: dict = {}
            for n in replicas:
                known[n] = run_one(trace, sm, n, load, tp, fraction)
                rows.append(row(label, n, load, *known[n]))
            best, seen = fewest(trace, sm, load, tp, fraction, known)
            answers.append({"model": label, "load": load, "fewest": best, "tried": dict(sorted(seen.items()))})
    return rows, answers


def fit_table(rows: list[dict]) -> str:
    out = ["| TP | gpu_memory_utilization | KV tokens per GPU | blocks of 512 | requests that do not fit | "
           "largest request (tokens, blocks) | requests beyond the model's context |", "|" + "---|" * 7]
    for r in rows:
        out.append(f"| {r['tp']} | {r['fraction']:g} | {r['tokens']:,} | {r['blocks']:,} | {r['too_big']} | "
                   f"{r['largest_tokens']:,}, {r['largest_blocks']} | {r['beyond_context']} (> {r['context']:,}) |")
    return "\n".join(out)


def table(rows: list[dict], answers: list[dict]) -> str:
    out = ["| load | replicas | step model | TTFT mean (ms) | TTFT p99 (ms) | TPOT mean (ms) | preemptions | "
           "goodput | meets | steps beyond the data | wall (s) |", "|" + "---|" * 11]
    for r in sorted(rows, key=lambda r: (r["load"], r["replicas"], r["model"] != "polynomial (dynamo)")):
        out.append(f"| {r['load']:g}x | {r['replicas']} | {r['model']} | {r['ttft_mean_ms']:,.1f} | "
                   f"{r['ttft_p99_ms']:,.1f} | {r['tpot_ms']:.1f} | {r['preemptions']:,} | {r['goodput']:.3f} | "
                   f"{'yes' if r['meets'] else 'no'} | {r['extrapolated']:,} | {r['wall_s']:.1f} |")
    out += ["", "| load | step model | fewest replicas meeting p99 TTFT <= 2 s and TPOT <= 50 ms | replicas tried "
                "(meets?) |", "|---|---|---|---|"]
    for a in answers:
        tried = ", ".join(f"{n} {'yes' if m else 'no'}" for n, m in a["tried"].items())
        out.append(f"| {a['load']:g}x | {a['model']} | {a['fewest'] if a['fewest'] else 'none up to 64'} | {tried} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=BUNDLED, help="a Mooncake-format trace (512-token blocks)")
    ap.add_argument("--tp", type=int, default=1, help="GPUs per replica (tensor parallelism)")
    ap.add_argument("--fraction", type=float, default=0.92, help="engine.gpu_memory_utilization")
    ap.add_argument("--replicas", default="1,4,8", help="replicas of the side-by-side table, comma-separated")
    ap.add_argument("--loads", default="1,4", help="arrival speed-ups, comma-separated")
    ap.add_argument("--out", type=Path, default=None, help="write replicas.json and replicas.md here")
    a = ap.parse_args(argv)
    trace = load_trace(a.trace)
    fits = fit(trace)
    rows, answers = run(trace, tuple(int(x) for x in a.replicas.split(",")),
                        tuple(float(x) for x in a.loads.split(",")), a.tp, a.fraction)
    steps = sorted({r["step_model"] for r in rows})
    md = fit_table(fits) + "\n\n" + table(rows, answers) + "\n\nstep models: " + "; ".join(steps)
    publish(md, {"fit": fits, "rows": rows, "answers": answers}, 1, a.out, "replicas")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
