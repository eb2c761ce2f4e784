"""Small independent trace builders for tests (no dependency on the generator)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core import Trace

REPO = Path(__file__).resolve().parents[1]
SHARED_MOONCAKE = REPO / "sim_core" / "data" / "mooncake_conversation.jsonl"


def run_module(d: Path, *args: str, module: str = "sweep") -> subprocess.CompletedProcess:
    """`python -m module args` in directory d, as a user runs it from there."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=d, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def child_runs(db: Path, experiment: str = "mooncake_conversation") -> list:
    """The MLflow child runs (one per curve) of an experiment in a sqlite store."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{db}")
    exp = c.get_experiment_by_name(experiment)
    return [r for r in c.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]


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


def chained_sessions(n_sessions=100, concurrent=8, turns=(4, 30), new_blocks=(2, 24), seed=0,
                     stride=1_000_000) -> tuple[list[list[int]], Trace]:
    """Interleaved prefix-chained sessions, named as a prefix hash would name them:
    `concurrent` sessions are open at once; each step picks an open one at random and
    issues its next request = its previous request's blocks + a few new ones; a session
    that has made its last turn is replaced by a new one. Block k of session s has the id
    s * stride + k + 1 (unique per session prefix, so not in order of first appearance
    once sessions interleave). Returns (requests, trace)."""
    rng = np.random.default_rng(seed)
    started = 0

    def start():
        nonlocal started
        started += 1
        return [started - 1, 0, int(rng.integers(turns[0], turns[1] + 1))]  # session, length, turns left

    live = [start() for _ in range(min(concurrent, n_sessions))]
    requests = []
    while live:
        i = int(rng.integers(len(live)))
        s = live[i]
        s[1] += int(rng.integers(new_blocks[0], new_blocks[1] + 1))
        requests.append([s[0] * stride + k + 1 for k in range(s[1])])
        s[2] -= 1
        if s[2] == 0:
            if started < n_sessions:
                live[i] = start()
            else:
                live.pop(i)
    return requests, Trace.from_requests(requests, name="chained_sessions")


def require(what: str, missing: list[str], env: str, module: bool = False) -> None:
    """Skip a test (or a whole module, from its top level) whose prerequisites are missing,
    or fail it where `env`=1 (CI) forbids skipping: a test that silently never runs checks
    nothing."""
    if not missing:
        return
    msg = f"{what} needs " + "; ".join(missing)
    if os.environ.get(env) == "1":
        pytest.fail(f"{msg} ({env}=1 forbids skipping)", pytrace=False)
    pytest.skip(f"{msg} (set {env}=1 to make this a failure)", allow_module_level=module)


def aiconfigurator(module: bool = False):
    """aiconfigurator-core, the measured kernel data of the measured step model: a
    dependency only where it ships wheels (pyproject.toml). Missing: skipped, or a failure
    under KVSWEEP_REQUIRE_REFERENCES=1 (.ci/run)."""
    try:
        import aiconfigurator_core
    except ImportError:
        require("the measured step model", ["aiconfigurator-core (no wheel for this platform?)"],
                "KVSWEEP_REQUIRE_REFERENCES", module)
    return aiconfigurator_core


def libcachesim():
    """libCacheSim's Python bindings (the `test` extra), the independent reference of the
    cross-checks. Missing: those tests are skipped, or fail where
    KVSWEEP_REQUIRE_REFERENCES=1 (.ci/run sets it); tests that do not compare with
    libCacheSim never depend on it."""
    try:
        import libcachesim as lcs
    except ImportError:
        require("this libCacheSim cross-check", ["the Python package libcachesim (pip install -e '.[test]')"],
                "KVSWEEP_REQUIRE_REFERENCES")
    return lcs
