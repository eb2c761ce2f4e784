"""Agent hints against LRU and Belady: the share of the LRU-to-Belady gap each recovers.

    python -m benchmarks.agents [--rate 0.01] [--seed 0] [--mode request]

Prints the markdown table of docs/agents.md. For each trace and regime (the paper's HBM
and memory-pool capacities, sweep/report/regimes.py), every policy's hit ratio at each
capacity and its share of the gap recovered, (hint - LRU) / (Belady - LRU), of hit
ratios summed over the regime's capacities (a capacity where Belady and LRU tie adds
nothing), and the mean TTFT over those capacities (service time on an H100, no queueing:
docs/tiers.md), HBM alone and, for the HBM regime, above a 1 TiB DRAM pool (LRU, written
on eviction from HBM, host link). Traces:

- `freeinference`: one full-scale week of sim_core.synth's FreeInference stand-in (seed
  `--seed`, true sessions), every policy replayed sampled by depth at `--rate` as a sweep
  samples it (sim_core.sample: every request and session kept, each m-th depth of each
  prefix tree; caches scaled by the rate, raised at small capacities by the floor). The
  generator's small scale is not a smaller copy of the workload (docs/traces.md), and a
  session sample keeps whole requests that a scaled HBM cache cannot hold;
- `freeinference + tool waits`: the same trace where each turn's tool wait is the gap to
  its session's next turn (Trace.tool_wait_s; an agent framework that knows how long its
  tool calls take); ttl_pin then holds a session for its wait plus `ttl`;
- `mooncake (inferred sessions)`: the bundled Mooncake conversation trace (no session
  ids; sessions inferred from prefix chains by sim_core.sessions.infer_links), unscaled.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys

import numpy as np

from sim_core import QWEN3_CODER_30B, simulate, to_blocks
from sim_core.loaders import bundled_path, load_trace
from sim_core.sessions import infer_links, next_in_session
from sim_core.synth import generate

#: (regime, sizes in GiB): inside the paper's HBM (24-120 GiB) and pool (0.25-12 TiB) ranges
REGIME_GIB = (("HBM", (24.0, 48.0, 96.0)), ("pool", (256.0, 1024.0, 4096.0)))
#: (label, policy, params)
HINTS = (("ttl_pin (10 s)", "ttl_pin", {"ttl": 10.0, "source": "fixed"}),
         ("ttl_pin (60 s)", "ttl_pin", {"ttl": 60.0, "source": "fixed"}),
         ("agent_end", "agent_end", None),
         ("agent_next", "agent_next", None))
TOOL_WAIT_HINT = ("ttl_pin (tool wait + 1 s)", "ttl_pin", {"ttl": 1.0, "source": "tool_wait"})


def gap_to_next_turn(trace) -> np.ndarray:
    """float64[R]: as a tool wait (Trace.tool_wait_s: the wait before each request), the
    whole gap from the previous turn of its session to it (0 for a session's first)."""
    out = np.zeros(trace.n_requests)
    a, b = next_in_session(trace)
    out[b] = trace.arrival_s[b] - trace.arrival_s[a]
    return out


def traces(args):
    t = generate("freeinference", scale=1.0, seed=args.seed)
    yield "freeinference", t, args.rate, HINTS
    # a new Trace, not an assignment: the replay views cached on `t` would not see it
    t = dataclasses.replace(t, tool_wait_s=gap_to_next_turn(t))
    yield "freeinference + tool waits", t, args.rate, HINTS[2:] + (TOOL_WAIT_HINT,)
    m = load_trace(bundled_path("mooncake_conversation"))
    m = dataclasses.replace(m, session=infer_links(m)[1])
    yield "mooncake (inferred sessions)", m, 1.0, HINTS


def _ttft_ms(results) -> float:
    return 1e3 * float(np.mean([r.ttft_mean_s for r in results]))


def rows(args) -> list[str]:
    out = ["| trace | regime | capacities (blocks) | LRU | Belady | policy | hit ratio | gap recovered | "
           "TTFT ms, HBM alone (LRU: hint) | TTFT ms, over 1 TiB DRAM (LRU: hint) |",
           "|---|---|---|---:|---:|---|---:|---:|---:|---:|"]
    for label, t, rate, hints in traces(args):
        for regime, sizes in REGIME_GIB:
            caps = [to_blocks(f"{g}GiB", QWEN3_CODER_30B, t.block_tokens) for g in sizes]
            kw = dict(mode=args.mode, hardware="h100_sxm")
            if rate < 1:
                kw.update(sample_rate=rate, sample_by="depth", sample_seed=args.seed)
            lru_r = simulate(t, "lru", caps, **kw)
            lru = [r.hit_ratio for r in lru_r]
            lru_ms = _ttft_ms(lru_r)
            dram = None
            if regime == "HBM":
                dram = [{"name": "dram", "capacity": to_blocks("1TiB", QWEN3_CODER_30B, t.block_tokens),
                         "policy": "lru", "write": "on_evict", "link": "host"}]
                lru_dram = _ttft_ms(simulate(t, "lru", caps, tiers=dram, **kw))
            # hit ratios, not hits: a sampled replay's counts are estimates at each capacity's rate
            opt = [r.hit_ratio for r in simulate(t, "belady", caps, **kw)]
            k = len(caps)
            first = True
            for name, policy, params in hints:
                res = simulate(t, policy, caps, params=params, **kw)
                got = [r.hit_ratio for r in res]
                ms = _ttft_ms(res)
                tiered = (f"{lru_dram:.1f}: {_ttft_ms(simulate(t, policy, caps, params=params, tiers=dram, **kw)):.1f}"
                          if dram else "-")
                gap = sum(opt) - sum(lru)
                share = (sum(got) - sum(lru)) / gap if gap > 0 else float("nan")
                head = (f"| {label} | {regime} | {', '.join(f'{c:,}' for c in caps)} | {sum(lru) / k:.4f} | "
                        f"{sum(opt) / k:.4f} |") if first else "| | | | | |"
                out.append(f"{head} {name} | {sum(got) / k:.4f} | {share:+.1%} | "
                           f"{lru_ms:.1f}: {ms:.1f} | {tiered} |")
                first = False
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.agents", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=0.01, help="depth sampling rate of the generated week")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="request", choices=("request", "block"))
    args = ap.parse_args(argv)
    cmd = " ".join(["python -m benchmarks.agents"] + (argv if argv is not None else sys.argv[1:]))
    print(f"`{cmd}` ({platform.node()}, Python {platform.python_version()}); mode={args.mode}, hits=block, "
          f"order=tail_first; hit ratios are means over the regime's capacities\n")
    print("\n".join(rows(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
