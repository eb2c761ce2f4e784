"""Small independent trace builders for tests (no dependency on the generator)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sim_core import Trace

SHARED_MOONCAKE = Path(__file__).resolve().parents[1] / "sim_core" / "data" / "mooncake_conversation.jsonl"


def mooncake_trace() -> Trace:
    """The shipped Mooncake conversation trace, parsed here with plain json."""
    path = SHARED_MOONCAKE
    if not path.exists():  # before the bundled copy lands, fall back to shared/
        path = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation.jsonl"
    reqs = [json.loads(line)["hash_ids"] for line in path.open() if line.strip()]
    return Trace.from_requests(reqs, block_tokens=512, name="mooncake_conversation", source="real")


def session_trace(n_sessions=60, seed=0, max_turns=12, sys_prompts=4, single_share=0.4) -> Trace:
    """Prefix-chained multi-turn sessions interleaved in time, plus single-turn prompts."""
    rng = np.random.default_rng(seed)
    next_id = [10_000]

    def fresh(k):
        out = list(range(next_id[0], next_id[0] + k))
        next_id[0] += k
        return out

    prompts = [fresh(int(rng.integers(2, 6))) for _ in range(sys_prompts)]
    events = []  # (time, session, blocks)
    for s in range(n_sessions):
        t = float(rng.uniform(0, 1000))
        ctx = list(prompts[int(rng.integers(sys_prompts))])
        turns = 1 if rng.random() < single_share else int(rng.integers(2, max_turns))
        for _ in range(turns):
            ctx = ctx + fresh(int(rng.integers(1, 20)))
            events.append((t, s, list(ctx)))
            t += float(rng.exponential(8.0))
    events.sort(key=lambda e: e[0])
    return Trace.from_requests([e[2] for e in events], arrival_s=[e[0] for e in events],
                               session=[e[1] for e in events], name="sessions")


ENGINE_KEYS = frozenset({"mode", "hits", "order", "cost_models", "model", "seed", "one_pass"})


def engine_kw(kw: dict) -> dict:
    """simulate() keywords from a test's mixed keywords: policy parameters go to params=."""
    out = {k: v for k, v in kw.items() if k in ENGINE_KEYS}
    params = {k: v for k, v in kw.items() if k not in ENGINE_KEYS}
    return {**out, "params": params} if params else out
