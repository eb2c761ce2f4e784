"""The bundled Mooncake conversation trace under each engine preset (docs/engines.md).

    python -m benchmarks.presets [--policy lru] [--capacities 1000,4000,16000,64000]

Prints a markdown table: per preset and capacity (blocks), the block hit ratio, the token
hit ratio (what engines report), and both again after a warm-up of half the requests.
Exact replay; accuracy, not speed.
"""
from __future__ import annotations

import argparse
import platform

from sim_core import simulate
from sim_core.catalog.counting import PRESETS
from sim_core.traces.loaders import bundled_path, load_trace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.presets", description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="lru")
    ap.add_argument("--capacities", default="1000,4000,16000,64000", help="blocks, comma-separated")
    a = ap.parse_args(argv)
    caps = [int(x) for x in a.capacities.split(",")]
    t = load_trace(bundled_path("mooncake_conversation"))
    print(f"`python -m benchmarks.presets --policy {a.policy} --capacities {a.capacities}` "
          f"({platform.node()}, Python {platform.python_version()}); {t.name}: {t.n_requests:,} requests, "
          f"{t.n_accesses:,} block accesses of {t.block_tokens} tokens\n")
    print("| preset | capacity (blocks) | hit_ratio | token_hit_ratio | hit_ratio, warm-up 0.5 | "
          "token_hit_ratio, warm-up 0.5 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, p in PRESETS.items():
        sw = p.switches()
        full = simulate(t, a.policy, caps, **{**sw, "warmup": None})
        warm = simulate(t, a.policy, caps, **{**sw, "warmup": 0.5})
        for c, r, w in zip(caps, full, warm):
            print(f"| {name}{' (its preset: the warm-up columns)' if p.warmup else ''} | {c:,} | {r.hit_ratio:.4f} | "
                  f"{r.token_hit_ratio:.4f} | {w.hit_ratio:.4f} | {w.token_hit_ratio:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
