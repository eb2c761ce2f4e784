"""A disaggregated fleet (prefill and decode replicas, KV handed off between them) against
NVIDIA Dynamo 1.6.1's disaggregated replay, same trace and settings, one run.

    python -m benchmarks.disagg --part speed --reps 3        # 2+2 and 4+4, both routers: timings
    python -m benchmarks.disagg --part compare               # the docs' grid, both tools
    python -m benchmarks.disagg --part compare --grid subset # 48 of its settings (docs/disagg.md)
    python -m benchmarks.disagg --part equal                 # aggregated against disaggregated, ours
    python -m benchmarks.disagg --part decode                # the decode routers, ours
    python -m benchmarks.disagg --part all --out bench_results/disagg

`compare` runs prefill x decode replicas {(1,1), (2,2), (4,4), (2,6), (6,2)} x KV blocks
{4,000, 16,000} x router {round_robin, kv_router} x load {1x, 4x} x transfer {free,
50 GB/s, 5 GB/s at 98,304 bytes per token}: `sim_core.serve(engine="dynamo",
prefill_replicas=P, replicas=D)` and `dynamo.replay.run_trace_replay` with
num_prefill_workers=P, num_decode_workers=D and each role's engine args
{"block_size": 512, "num_gpu_blocks": B, "worker_type": role, "kv_transfer_bandwidth":
GB/s, "kv_bytes_per_token": 98304}: reuse, TTFT mean/p99, TPOT, handoff (prefill done
to decode activation) and wall time. `speed` times 2+2 and 4+4 at 16,000 blocks, real
time, both routers, `--reps` interleaved runs each (ours with a warm JIT). `equal` puts
aggregated and disaggregated fleets of the same GPU count side by side (TTFT p99, TPOT,
goodput under an SLO, reuse) and finds the bandwidth at which the better one changes;
`decode` compares the decode routers with only the missing blocks moved. Dynamo installs
here with `pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
typing_extensions`; without it only our side is printed.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from sim_core import serve
from sim_core.traces.loaders import load_trace

from .serving import BUNDLED, interleaved, publish

os.environ.setdefault("DYN_LOG", "error")  # Dynamo logs every routing decision at INFO
BPT = 98304  # KV bytes per token of the comparison (Dynamo's example value)
SHAPES = ((1, 1), (2, 2), (4, 4), (2, 6), (6, 2))
GRID = [(p, d, b, rt, x, g) for p, d in SHAPES for b in (4000, 16000) for rt in ("round_robin", "kv_router")
        for x in (1.0, 4.0) for g in (None, 50.0, 5.0)]
# the subset a shared two-core machine runs in a few minutes (docs/disagg.md): every shape,
# capacity and router at real time free and at 4x over 5 GB/s, plus 50 GB/s on 2:2 and 4:4
SUBSET = ([(p, d, b, rt, 1.0, None) for p, d in SHAPES for b in (4000, 16000) for rt in ("round_robin", "kv_router")]
          + [(p, d, b, rt, 4.0, 5.0) for p, d in SHAPES for b in (4000, 16000) for rt in ("round_robin", "kv_router")]
          + [(p, p, 16000, rt, x, 50.0) for p in (2, 4) for rt in ("round_robin", "kv_router") for x in (1.0, 4.0)])
SPEED = [(p, p, 16000, rt, 1.0, None) for p in (2, 4) for rt in ("round_robin", "kv_router")]
SLO = {"ttft": "2s", "tpot": "20ms"}


def ours(trace, P, D, blocks, router, speedup, gbs, **kw) -> tuple[dict, float]:
    x = {"bytes_per_token": BPT, "bandwidth_bps": gbs * 1e9, **kw.pop("transfer", {})} if gbs else None
    t0 = time.perf_counter()
    r = serve(trace, "lru", blocks, replicas=D, prefill_replicas=P, router=router, engine="dynamo",
              arrival_speedup=speedup, kv_transfer=x, slo=SLO, **kw)
    wall = time.perf_counter() - t0
    return {"reuse": r.reuse_ratio, "ttft_mean_ms": r.ttft_mean_s * 1e3, "ttft_p99_ms": r.ttft_p99_s * 1e3,
            "tpot_ms": r.tpot_mean_s * 1e3, "handoff_ms": r.handoff_mean_s * 1e3, "preemptions": r.preemptions,
            "goodput": r.goodput_ratio, "resident": r.decode_resident_ratio, "moved_gb": r.transfer_bytes / 1e9}, wall


def dynamo(path: Path, P, D, blocks, router, speedup, gbs) -> tuple[dict, float]:
    from dynamo.replay import run_trace_replay

    eng = {"block_size": 512, "num_gpu_blocks": blocks}
    if gbs:
        eng.update(kv_transfer_bandwidth=gbs, kv_bytes_per_token=BPT)
    t0 = time.perf_counter()
    rep = run_trace_replay([str(path)], prefill_engine_args={"engine": {**eng, "worker_type": "prefill"}},
                           decode_engine_args={"engine": {**eng, "worker_type": "decode"}}, num_prefill_workers=P,
                           num_decode_workers=D, router_mode=router, arrival_speedup_ratio=speedup,
                           trace_block_size=512, trace_format="mooncake", capture_per_request=True)
    wall = time.perf_counter() - t0
    s, per = rep.summary, rep.per_request
    hand = [q["destination_activated_ms"] - q["source_held_ms"] for q in per]
    return {"reuse": s["prefix_cache_reused_ratio"], "ttft_mean_ms": s["mean_ttft_ms"], "ttft_p99_ms": s["p99_ttft_ms"],
            "tpot_ms": s["mean_tpot_ms"], "handoff_ms": float(np.mean(hand)),
            "preemptions": sum(int(q.get("readmission_count") or 0) for q in per)}, wall


def both(trace, path: Path, reps: int, configs) -> list[dict]:
    """One row per (configuration, tool), `reps` interleaved runs, the median wall time;
    each row printed as it is run (a long grid keeps what it ran)."""
    return interleaved(trace, path, reps, configs, ours, dynamo,
                       fields=("prefill", "decode", "blocks", "router", "speedup", "gbs"),
                       warm=lambda: ours(trace, 2, 2, 16000, "round_robin", 1.0, None),
                       progress=lambda row: print(table([row]).splitlines()[-1], flush=True))


def _f(x, fmt):
    return "" if x is None or x != x else format(x, fmt)


def table(rows: list[dict]) -> str:
    out = ["| P:D | blocks | router | load | transfer | tool | reuse | TTFT mean (ms) | TTFT p99 (ms) | TPOT (ms) | "
           "handoff (ms) | preemptions | wall (s) |", "|" + "|".join(["---"] * 13) + "|"]
    for r in rows:
        x = "free" if not r["gbs"] else f"{r['gbs']:g} GB/s"
        out.append(f"| {r['prefill']}:{r['decode']} | {r['blocks']:,} | {r['router']} | {r['speedup']:g}x | {x} | "
                   f"{r['tool']} | {r['reuse']:.4f} | {r['ttft_mean_ms']:,.1f} | {r['ttft_p99_ms']:,.1f} | "
                   f"{r['tpot_ms']:.3f} | {r['handoff_ms']:,.2f} | {r['preemptions']} | {r['wall_s']:.2f} |")
    return "\n".join(out)


def side_by_side(rows: list[dict]) -> str:
    """The compare grid as the docs print it: each figure ours / Dynamo's on one row."""
    key = ("prefill", "decode", "blocks", "router", "speedup", "gbs")
    dyn = {tuple(r[k] for k in key): r for r in rows if r["tool"] == "dynamo"}
    out = ["| P:D | blocks | router | load | transfer | reuse | TTFT mean (ms) | TTFT p99 (ms) | TPOT (ms) | "
           "handoff (ms) |", "|" + "|".join(["---"] * 10) + "|"]
    figs = (("reuse", ".4f"), ("ttft_mean_ms", ",.1f"), ("ttft_p99_ms", ",.1f"), ("tpot_ms", ".3f"),
            ("handoff_ms", ",.2f"))
    for r in rows:
        if r["tool"] != "ours":
            continue
        d = dyn.get(tuple(r[k] for k in key), {})
        x = "free" if not r["gbs"] else f"{r['gbs']:g} GB/s"
        cells = [f"{_f(r[f], fmt)} / {_f(d.get(f), fmt) or '-'}" for f, fmt in figs]
        out.append(f"| {r['prefill']}:{r['decode']} | {r['blocks']:,} | {r['router']} | {r['speedup']:g}x | {x} | "
                   + " | ".join(cells) + " |")
    return "\n".join(out)


def equal_gpus(trace) -> tuple[list[dict], list[dict]]:
    """Aggregated R against disaggregated P:D with P + D = R, 16,000 blocks, kv_router, at
    each load; then, for the best disaggregated shape at 4x load (3:1 against 4, 6:2 against
    8), the transfer bandwidth below which the aggregated fleet wins."""
    rows = []
    for n, shapes in ((4, ((0, 4), (1, 3), (2, 2), (3, 1))), (8, ((0, 8), (2, 6), (4, 4), (6, 2)))):
        for x in (1.0, 2.0, 4.0):
            for p, d in shapes:
                m, _ = ours(trace, p, d, 16000, "kv_router", x, None if p else None)
                rows.append({"gpus": n, "shape": f"{p}:{d}" if p else f"{d}", "speedup": x, **m})
    flips = []
    for n, (p, d) in ((4, (3, 1)), (8, (6, 2))):
        agg = next(r for r in rows if r["gpus"] == n and r["shape"] == str(n) and r["speedup"] == 4.0)
        for gbs in (0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0):
            m, _ = ours(trace, p, d, 16000, "kv_router", 4.0, gbs)
            flips.append({"gbs": gbs, "shape": f"{p}:{d}", "gpus": n, "agg_goodput": agg["goodput"],
                          "agg_ttft_p99_ms": agg["ttft_p99_ms"], **m})
    return rows, flips


def equal_tables(rows, flips) -> str:
    out = ["| GPUs | shape | load | reuse | TTFT mean (ms) | TTFT p99 (ms) | TPOT (ms) | goodput (TTFT 2 s, TPOT 20 ms) "
           "| best goodput |", "|" + "|".join(["---"] * 9) + "|"]
    for r in rows:
        peers = [q for q in rows if q["gpus"] == r["gpus"] and q["speedup"] == r["speedup"]]
        best = max(peers, key=lambda q: (q["goodput"], -q["ttft_p99_ms"]))
        out.append(f"| {r['gpus']} | {r['shape']} | {r['speedup']:g}x | {r['reuse']:.4f} | {r['ttft_mean_ms']:,.1f} | "
                   f"{r['ttft_p99_ms']:,.1f} | {r['tpot_ms']:.3f} | {r['goodput']:.4f} | "
                   f"{'yes' if best is r else ''} |")
    out += ["", "| GPUs | shape (4x) | transfer (GB/s) | handoff (ms) | TTFT p99 (ms) | goodput | aggregated TTFT p99 "
                "(ms) | aggregated goodput | better |", "|" + "|".join(["---"] * 9) + "|"]
    for r in flips:
        win = "disaggregated" if r["goodput"] > r["agg_goodput"] else "aggregated"
        out.append(f"| {r['gpus']} | {r['shape']} | {r['gbs']:g} | {r['handoff_ms']:,.1f} | {r['ttft_p99_ms']:,.1f} | "
                   f"{r['goodput']:.4f} | {r['agg_ttft_p99_ms']:,.1f} | {r['agg_goodput']:.4f} | {win} |")
    return "\n".join(out)


def decode_routers(trace) -> str:
    out = ["| P:D | load | decode router | transfer | reuse | decode resident | moved (GB) | TTFT mean (ms) | "
           "TTFT p99 (ms) | TPOT (ms) |", "|" + "|".join(["---"] * 10) + "|"]
    for p, d in ((2, 2), (2, 6)):
        for x in (1.0, 4.0):
            for dr in ("load", "cache_aware"):
                for tok in ("prompt", "missing"):
                    m, _ = ours(trace, p, d, 16000, "kv_router", x, 5.0, decode_router=dr, transfer={"tokens": tok})
                    out.append(f"| {p}:{d} | {x:g}x | {dr} | 5 GB/s, {tok} | {m['reuse']:.4f} | {m['resident']:.4f} | "
                               f"{m['moved_gb']:,.0f} | {m['ttft_mean_ms']:,.1f} | {m['ttft_p99_ms']:,.1f} | "
                               f"{m['tpot_ms']:.3f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=BUNDLED, help="a Mooncake-format trace (512-token blocks)")
    ap.add_argument("--part", choices=("speed", "compare", "equal", "decode", "all"), default="speed")
    ap.add_argument("--reps", type=int, default=3, help="timed runs of each tool per configuration (median)")
    ap.add_argument("--grid", choices=("full", "subset"), default="full",
                    help="compare: the whole grid (120 settings) or SUBSET (48)")
    ap.add_argument("--out", type=Path, default=None, help="write disagg_<part>.json and .md here")
    a = ap.parse_args(argv)
    trace = load_trace(a.trace)
    parts = ("speed", "compare", "equal", "decode") if a.part == "all" else (a.part,)
    for part in parts:
        if part in ("speed", "compare"):
            grid = SUBSET if a.grid == "subset" else GRID
            rows = both(trace, a.trace, a.reps if part == "speed" else 1, SPEED if part == "speed" else grid)
            md = table(rows) if part == "speed" else side_by_side(rows)
            publish(md, rows, a.reps if part == "speed" else 1, a.out, f"disagg_{part}")
        elif part == "equal":
            rows, flips = equal_gpus(trace)
            publish(equal_tables(rows, flips), {"shapes": rows, "bandwidth": flips}, 1, a.out, "disagg_equal")
        else:
            publish(decode_routers(trace), {}, 1, a.out, "disagg_decode")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
