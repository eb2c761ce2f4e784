"""What ids that are not prefix-chained do to block-mode reuse, before and after
re-chaining (sim_core.traces.loaders: trace.rechain; docs/traces.md#re-chaining).

    python -m benchmarks.rechain [--sessions 300] [--seed 0] [--capacities 500,1000,4000]

Generates agentic sessions in Mooncake's layout whose ids name a block's content only,
as a tracer that hashes each block alone would write them: sessions start from one of a
few shared system prompts, then each turn appends blocks, a quarter of them read from a
shared pool of documents (the same file read by several sessions, after other
prefixes). A request resends its session's whole history. The file is read twice:
with its raw ids (trace.rechain=false) and re-chained by position (the default), and
replayed through LRU (request mode, block hits). Prints a markdown table.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from sim_core import simulate
from sim_core.traces.loaders import load_trace

PROMPTS, PROMPT_BLOCKS, DOCS = 3, 8, 2000


def write_trace(path: Path, sessions: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    fresh = PROMPTS * PROMPT_BLOCKS + DOCS  # ids below: prompts, then documents
    rows = []
    for s in range(sessions):
        p = int(rng.integers(PROMPTS))
        history = list(range(p * PROMPT_BLOCKS, (p + 1) * PROMPT_BLOCKS))
        t = float(rng.uniform(0, 3600))
        for _ in range(int(rng.integers(2, 12))):
            for _ in range(int(rng.integers(1, 6))):
                if rng.random() < 0.25:  # a shared document block: Zipf over the pool
                    history.append(PROMPTS * PROMPT_BLOCKS + min(int(rng.zipf(1.3)) - 1, DOCS - 1))
                else:
                    history.append(fresh)
                    fresh += 1
            rows.append({"timestamp": round(t * 1000), "input_length": 512 * len(history), "hash_ids": list(history)})
            t += float(rng.exponential(30))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--capacities", default="500,1000,4000")
    a = ap.parse_args(argv)
    caps = [int(c) for c in a.capacities.split(",")]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "unchained.jsonl"
        write_trace(path, a.sessions, a.seed)
        raw = load_trace(path, rechain=False)
        chained = load_trace(path)
    ch = chained.meta["chaining"]
    print(f"{raw.n_requests:,} requests, {raw.n_accesses:,} block accesses; {ch['ids']:,} ids, "
          f"{ch['ids_after_several_prefixes']:,} after more than one predecessor, {ch['ids_at_several_depths']:,} "
          f"at more than one depth; {ch['ids_by_position']:,} blocks once chained by position\n")
    print("| LRU capacity (blocks) | hit ratio, raw ids | hit ratio, re-chained | overstated by (points) |")
    print("| ---: | ---: | ---: | ---: |")
    before = simulate(raw, "lru", caps)
    after = simulate(chained, "lru", caps)
    for c, b, r in zip(caps, before, after):
        print(f"| {c:,} | {b.hit_ratio:.4f} | {r.hit_ratio:.4f} | {100 * (b.hit_ratio - r.hit_ratio):+.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
