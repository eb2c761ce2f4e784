"""The engines' tier hierarchies on the bundled Mooncake trace (docs/tiers.md).

    python -m benchmarks.tier_engines [--hbm 1000,4000] [--pools 4000,16000,64000] [--named-hbm 4000]

Prints two markdown tables. First, `simulate(counting="vllm")` (vLLM's CPU offload: LRU
HBM and pool) beside NVIDIA Dynamo 1.6.1's replay with `native_host_offload` (its mocker
of vLLM's offloading, copies instantaneous), when Dynamo is installed: HBM and host-pool
hits in blocks (Dynamo's: the first admission's G1 and host reused tokens / 512; its
scheduler, decode blocks and preemptions are in its numbers, not in ours). Second, every
named hierarchy (sim_core.tiers.rules.HIERARCHIES) at one HBM size over the pool sizes,
each lower tier that size. Counts, not times.
"""
from __future__ import annotations

import argparse
import os
import platform

from sim_core import simulate
from sim_core.traces.loaders import bundled_path, load_trace
from sim_core.tiers.rules import HIERARCHIES


def ours(trace, hbm: int, pool: int) -> tuple[int, int]:
    r = simulate(trace, "lru", [hbm], counting="vllm", tiers=[{"name": "dram", "capacity": pool}])[0]
    return r.hits, r.tier_hits["dram"]


def dynamo(path, hbm: int, pool: int, block_tokens: int) -> tuple[int, int] | None:
    try:
        from dynamo.replay import run_trace_replay
    except ImportError:
        return None
    os.environ.setdefault("DYN_LOG", "error")
    # kv_cache_bytes_per_token only sizes the host blocks' bytes; no bandwidth: copies instantaneous
    engine = {"block_size": block_tokens, "num_gpu_blocks": hbm, "kv_cache_bytes_per_token": 2,
              "native_host_offload": {"num_host_blocks": pool}}
    rep = run_trace_replay([str(path)], extra_engine_args={"engine": engine}, num_workers=1,
                           router_mode="round_robin", trace_block_size=block_tokens, trace_format="mooncake",
                           capture_per_request=True)
    g1 = sum(int(q["first_admission_g1_reused_input_tokens"]) for q in rep.per_request)
    host = sum(int(q["first_admission_host_reused_input_tokens"]) for q in rep.per_request)
    return g1 // block_tokens, host // block_tokens


def vs_dynamo(trace, path, hbms, pools) -> str:
    out = ["| HBM (blocks) | pool (blocks) | ours: HBM hits | ours: pool hits | Dynamo: HBM hits | "
           "Dynamo: pool hits |", "|---:|---:|---:|---:|---:|---:|"]
    for h in hbms:
        for p in pools:
            a = ours(trace, h, p)
            b = dynamo(path, h, p, trace.block_tokens)
            dy = f"{b[0]:,} | {b[1]:,}" if b else "n/a | n/a"
            out.append(f"| {h:,} | {p:,} | {a[0]:,} | {a[1]:,} | {dy} |")
    return "\n".join(out)


def named(trace, hbm: int, pools) -> str:
    out = ["| hierarchy | pool (blocks) | HBM hits | lower-tier hits | served | skipped writes |",
           "|---|---:|---:|---|---:|---:|"]
    for name, rules in HIERARCHIES.items():
        for p in pools:
            tiers = [{"name": f"tier{i + 1}", "capacity": p} for i in range(len(rules))]
            r = simulate(trace, "lru", [hbm], counting="vllm", hierarchy=name, tiers=tiers)[0]
            low = ", ".join(f"{v:,}" for v in r.tier_hits.values())
            skip = sum(r.tier_skipped_writes.values())
            out.append(f"| {name} | {p:,} | {r.hits:,} | {low} | {r.served_ratio:.4f} | {skip:,} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tier_engines", description=__doc__.splitlines()[0])
    ap.add_argument("--hbm", default="1000,4000", help="HBM sizes in blocks, comma-separated")
    ap.add_argument("--pools", default="4000,16000,64000", help="pool sizes in blocks, comma-separated")
    ap.add_argument("--named-hbm", type=int, default=4000, help="the HBM size of the named-hierarchy table")
    a = ap.parse_args(argv)
    hbms, pools = [int(x) for x in a.hbm.split(",")], [int(x) for x in a.pools.split(",")]
    path = bundled_path("mooncake_conversation")
    t = load_trace(path)
    print(f"`python -m benchmarks.tier_engines --hbm {a.hbm} --pools {a.pools} --named-hbm {a.named_hbm}` "
          f"({platform.node()}, Python {platform.python_version()}); {t.name}: {t.n_requests:,} requests, "
          f"{t.n_accesses:,} block accesses of {t.block_tokens} tokens\n")
    print(vs_dynamo(t, path, hbms, pools))
    print()
    print(named(t, a.named_hbm, pools))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
