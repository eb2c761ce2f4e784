"""Our plan against AIConfigurator's sizing, on traffic both can describe.

AIConfigurator (aiconfigurator-core's `find_best_agg_result_under_constraints`, what its
`recommend`-style answers size from) picks, for fixed input and output lengths, the batch
that gives one replica the most throughput within the TTFT and TPOT targets; a request rate
then needs ceil(rate / that replica's requests per second) replicas. We replay the same
lengths as a trace of Poisson arrivals at that rate (no reuse, or one shared prefix) through
`analysis.plan` on the same model, GPU, backend, TP and measured data, and search replicas.

    python -m benchmarks.aic_plan --rates 4,8,9,12,16,24 --prefix 0,2000

Prints one row per (rate, prefix): AIConfigurator's replica throughput, TTFT, TPOT and
replicas; ours: the fewest replicas meeting TTFT p99 and TPOT mean, their values, and the
replays it took. docs/planning.md#against-aiconfigurators-answer has the table and why the
answers differ.
"""
from __future__ import annotations

import argparse
import logging
import math
import time

import numpy as np

from analysis import plan
from sim_core.serving import deployment
from sim_core.serving.deployment import kv_capacity
from sim_core.serving.measured import aic
from sim_core.traces.trace import Trace

BT = 16  # tokens per block of the synthetic traces


def aic_replica(model: str, gpu: str, backend: str, tp: int, isl: int, osl: int, prefix: int, ttft_ms: float,
                tpot_ms: float) -> dict:
    """AIConfigurator's best aggregated replica under the targets: its requests per second,
    TTFT and TPOT (ms), batch size."""
    from aiconfigurator_core.sdk import config, models, perf_database
    from aiconfigurator_core.sdk.backends.factory import get_backend

    db = perf_database.get_database(gpu, backend, aic.data_version(gpu, backend))
    m = models.get_model(model, config.ModelConfig(tp_size=tp, moe_tp_size=tp, moe_ep_size=1), backend)
    rc = config.RuntimeConfig(isl=isl, osl=osl, prefix=prefix, ttft=ttft_ms, tpot=tpot_ms)
    with aic.quiet():
        s = get_backend(backend).find_best_agg_result_under_constraints(m, db, rc)
    df = s.get_summary_df()
    if df is None or not len(df):
        return {"rps": 0.0, "ttft_ms": math.nan, "tpot_ms": math.nan, "bs": 0}
    row = df.iloc[0]
    return {"rps": float(row["request_rate"]), "ttft_ms": float(row["ttft"]), "tpot_ms": float(row["tpot"]),
            "bs": int(row["bs"])}


def poisson_trace(rate: float, seconds: float, isl: int, osl: int, prefix: int, seed: int = 0) -> Trace:
    """Requests of `isl` prompt and `osl` output tokens at Poisson arrivals of `rate` per
    second; the first `prefix` tokens (whole blocks) the same on every request, the rest its own."""
    rng = np.random.default_rng(seed)
    n = max(int(rate * seconds), 2)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    shared = list(range(prefix // BT))
    own = -(-isl // BT) - len(shared)
    reqs = [shared + list(range(10**6 + i * own, 10**6 + (i + 1) * own)) for i in range(n)]
    return Trace.from_requests(reqs, arrival, block_tokens=BT, input_tokens=np.full(n, isl),
                               output_tokens=np.full(n, osl), name=f"poisson-{rate:g}rps-isl{isl}-osl{osl}-p{prefix}")


def ours(trace, model, gpu, backend, tp, ttft_s, tpot_s, max_replicas: int) -> dict:
    """Our plan over 1..max_replicas replicas behind round robin, KV from the GPU's memory."""
    dep = deployment(engine={"preset": backend, "step_model": "measured", "tp": tp}, hardware=gpu, model=model)
    cap, _ = kv_capacity(dep, None, BT)
    p = plan(trace, slo={"ttft_p99": f"{ttft_s}s", "tpot_mean": f"{tpot_s * 1000:g}ms"},
             space={"gpu": [gpu], "tp": [tp], "replicas": list(range(1, max_replicas + 1)), "router": ["round_robin"]},
             capacity_blocks=cap, engine=backend, step_model="measured", model=model, prices={"gpu": {gpu: 1.0}})
    b = p.best
    return {"replicas": b["replicas"] if b else None, "ttft_p99_s": b["ttft_p99_s"] if b else math.nan,
            "tpot_mean_s": b["tpot_mean_s"] if b else math.nan, "replays": p.evaluated, "capacity_blocks": cap}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen3-30B-A3B")
    ap.add_argument("--gpu", default="h100_sxm")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--isl", type=int, default=4000)
    ap.add_argument("--osl", type=int, default=500)
    ap.add_argument("--prefix", default="0", help="shared prefix tokens, a comma list")
    ap.add_argument("--rates", default="4,8,16", help="requests per second, a comma list")
    ap.add_argument("--ttft", type=float, default=2.0, help="seconds (ours: p99)")
    ap.add_argument("--tpot", type=float, default=0.05, help="seconds (ours: mean)")
    ap.add_argument("--seconds", type=float, default=120.0, help="of arrivals per trace")
    ap.add_argument("--max-replicas", type=int, default=8)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    print("| rate (req/s) | prefix | AIC: req/s per replica (batch) | AIC: TTFT / TPOT (ms) | AIC: replicas | "
          "ours: replicas | ours: TTFT p99 / TPOT mean | ours: replays | wall (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for prefix in (int(x) for x in a.prefix.split(",")):
        r = aic_replica(a.model, a.gpu, a.backend, a.tp, a.isl, a.osl, prefix, a.ttft * 1000, a.tpot * 1000)
        for rate in (float(x) for x in a.rates.split(",")):
            t0 = time.time()
            o = ours(poisson_trace(rate, a.seconds, a.isl, a.osl, prefix), a.model, a.gpu, a.backend, a.tp, a.ttft,
                     a.tpot, a.max_replicas)
            need = math.ceil(rate / r["rps"]) if r["rps"] > 0 else None
            mine = o["replicas"] if o["replicas"] is not None else f"> {a.max_replicas}"
            print(f"| {rate:g} | {prefix} | {r['rps']:.2f} ({r['bs']}) | {r['ttft_ms']:.0f} / {r['tpot_ms']:.1f} | "
                  f"{need} | {mine} | {o['ttft_p99_s']:.2f} s / {o['tpot_mean_s'] * 1000:.1f} ms | {o['replays']} | "
                  f"{time.time() - t0:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
