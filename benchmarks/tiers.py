"""Tiered caches: speed of a two-tier replay, sampled-against-exact error with tiers,
and the per-tier table of docs/tiers.md.

    python -m benchmarks.tiers speed     # two tiers against one, same trace, same run
    python -m benchmarks.tiers sampling  # sampled against exact replay, with a DRAM pool
    python -m benchmarks.tiers table     # HBM x pool sizes x (LRU, S3-FIFO, Belady bound), TTFT

Each prints a markdown table with the command line and the machine it ran on. The
generated FreeInference-like trace is built by sim_core.traces.synth (one week, `--scale` of
the full size, `--seed`).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from sim_core import simulate, tier_bound, to_blocks
from sim_core.catalog.models import QWEN3_CODER_30B
from sim_core.traces.synth import generate

GIB = 1 << 30


def _trace(args):
    t = generate("freeinference", scale=args.scale, seed=args.seed)
    print(f"trace: freeinference synthetic, scale {args.scale:g}, seed {args.seed}: {t.n_requests:,} requests, "
          f"{t.n_accesses:,} block accesses, {t.n_unique:,} unique blocks", file=sys.stderr)
    return t


def _blocks(size: str, trace) -> int:
    return to_blocks(size, QWEN3_CODER_30B, trace.block_tokens)


def _pool(name: str, cap: int, policy: str, **kw) -> list[dict]:
    # the exclusive write-back victim cache these tables were measured with (tier=victim)
    return [{"name": name, "capacity": cap, "policy": policy, "write": "on_evict", "inclusive": False,
             "touch": "loads", **kw}]


def _header(args) -> str:
    return (f"`python -m benchmarks.tiers {' '.join(sys.argv[1:])}` on {platform.node()} "
            f"({os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()})")


def speed(args) -> None:
    """Median wall time of one replay (per-call overhead included), one tier against two,
    interleaved rep by rep so that both see the same machine."""
    t = _trace(args)
    hbm, pool = _blocks(args.hbm, t), _blocks(args.pool, t)
    rows = []
    for policy in args.policies.split(","):
        cases = {"HBM only": None, f"HBM + {args.pool} DRAM": _pool("dram", pool, policy)}
        for tiers in cases.values():  # compile outside the timing
            simulate(t, policy, [hbm], tiers=tiers, one_pass=False)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.reps):
            for k, tiers in cases.items():
                a = time.perf_counter()
                simulate(t, policy, [hbm], tiers=tiers, one_pass=False)
                times[k].append(time.perf_counter() - a)
        one, two = (statistics.median(v) for v in times.values())
        rows.append(f"| {policy} | {one:.3f} | {two:.3f} | {two / one:.2f}x |")
    print(f"{_header(args)}; {t.n_accesses:,} accesses, HBM {args.hbm}, median of {args.reps} interleaved reps\n")
    print("| policy | one tier (s) | two tiers (s) | two / one |\n|---|---:|---:|---:|")
    print("\n".join(rows))


def sampling(args) -> None:
    """served ratio and DRAM hit ratio of a sampled replay against the exact one."""
    t = _trace(args)
    rows = []
    for policy in args.policies.split(","):
        for hbm_s in args.hbm_sizes.split(","):
            for pool_s in args.pool_sizes.split(","):
                hbm, pool = _blocks(hbm_s, t), _blocks(pool_s, t)
                tiers = _pool("dram", pool, policy)
                exact = simulate(t, policy, [hbm], tiers=tiers)[0]
                s = simulate(t, policy, [hbm], tiers=tiers, sample_rate=args.rate)[0]
                rows.append(f"| {policy} | {hbm_s} | {pool_s} | {s.sample_rate:g} | {exact.served_ratio:.4f} | "
                            f"{s.served_ratio:.4f} | {100 * (s.served_ratio - exact.served_ratio):+.2f} | "
                            f"{100 * (s.hit_ratio - exact.hit_ratio):+.2f} |")
    print(f"{_header(args)}; {t.n_accesses:,} accesses, sampled at r = {args.rate:g} (raised where a scaled "
          f"cache would be below the floor)\n")
    print("| policy | HBM | DRAM | rate | served, exact | served, sampled | error (points) | HBM hit error (points) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


def table(args) -> None:
    """Per-tier results and TTFT on one GPU for LRU and S3-FIFO (in both tiers) and the
    Belady bound over the combined capacity."""
    t = _trace(args)
    rate = args.rate if args.rate < 1 else None
    kw = dict(cost_models=["qwen3_coder_30b"], hardware=args.hardware, sample_rate=rate)
    rows = []
    for hbm_s in args.hbm_sizes.split(","):
        hbm = _blocks(hbm_s, t)
        flat = {p: simulate(t, p, [hbm], **kw)[0] for p in ("lru", "s3fifo")}
        for pool_s in args.pool_sizes.split(","):
            pool = _blocks(pool_s, t)
            for policy in ("lru", "s3fifo"):
                r = simulate(t, policy, [hbm], tiers=_pool("dram", pool, policy), **kw)[0]
                base = flat[policy]
                rows.append(f"| {hbm_s} | {pool_s} | {policy} | {r.hit_ratio:.4f} | {r.tier_hits['dram'] / r.accesses:.4f} "
                            f"| {r.served_ratio:.4f} | {r.compute_savings['qwen3_coder_30b']:.4f} | "
                            f"{1e3 * r.ttft_mean_s:.1f} | {1e3 * r.ttft_p99_s:.1f} | {r.ttft_speedup:.2f}x | "
                            f"{base.ttft_speedup:.2f}x |")
            b = tier_bound(t, [hbm], _pool("dram", pool, "lru"), cost_models=["qwen3_coder_30b"], sample_rate=rate)[0]
            rows.append(f"| {hbm_s} | {pool_s} | Belady bound | | | {b.hit_ratio:.4f} | "
                        f"{b.compute_savings['qwen3_coder_30b']:.4f} | | | | |")
    print(f"{_header(args)}; {t.n_accesses:,} accesses; TTFT on {args.hardware} (service time, no queueing), "
          f"Qwen3-Coder-30B, loads overlapped with compute{'' if rate is None else f'; sampled at r = {rate:g}'}\n")
    print("| HBM | DRAM | policy | HBM hits | DRAM hits | served | savings (Qwen FLOPs) | TTFT mean (ms) | "
          "TTFT p99 (ms) | speed-up | speed-up, HBM only |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tiers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["speed", "sampling", "table"])
    p.add_argument("--scale", type=float, default=0.1, help="trace size as a fraction of the full week (0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", default="lru,s3fifo", help="comma-separated (speed, sampling)")
    p.add_argument("--hbm", default="48GiB", help="HBM size (speed)")
    p.add_argument("--pool", default="256GiB", help="DRAM pool size (speed)")
    p.add_argument("--hbm-sizes", default="24GiB,48GiB,96GiB")
    p.add_argument("--pool-sizes", default="256GiB,1TiB,4TiB")
    p.add_argument("--rate", type=float, default=0.01, help="sample rate (sampling, table; 1 = exact)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--hardware", default="h100_sxm")
    args = p.parse_args(argv)
    {"speed": speed, "sampling": sampling, "table": table}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
