"""A sampled sweep: sim.sample_rate=auto and numeric rates, end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core import QWEN3_CODER_30B, simulate
from sim_core.traces.sample import auto_rate

REPO = Path(__file__).resolve().parents[1]


def test_auto_rate_follows_the_trace_size():
    assert auto_rate(4_490_000) is None  # the 1/150 trace: exact
    assert auto_rate(9_999_999) is None
    assert auto_rate(10_000_000) == 0.5
    assert auto_rate(66_300_000) == pytest.approx(1 / 13)
    assert auto_rate(663_922_623) == 0.01  # full scale
    assert auto_rate(10 ** 11) == 0.01  # never below the rate the error target was measured at


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    d = tmp_path_factory.mktemp("sampled")
    uri = f"sqlite:///{d}/mlflow.db"
    cmd = [sys.executable, "-m", "sweep", "trace=freeinference", "trace.scale=0.002", "trace.weeks=1", "sim.sample_rate=0.25",
           "policy=[lru,lhd,belady,belady_compute]", "cost=[uniform,linear]", "capacity=custom", "capacity.sizes=[4000,20000]",
           "cluster.num_cpus=2", f"tracking.uri={uri}"]
    proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return {"proc": proc, "uri": uri}


def test_a_sampled_sweep_records_the_miniature_simulation(sampled):
    """lru runs sampled (its curve equals simulate's sampled replay), lhd, which misses
    the error target, runs exactly though named; tags and the table say which."""
    from mlflow.tracking import MlflowClient

    from sim_core.traces import synth

    p = sampled["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    assert "sampled replay at r=0.25" in p.stdout
    assert "lhd stay exact" in p.stderr
    c = MlflowClient(sampled["uri"])
    runs = c.search_runs([c.get_experiment_by_name("freeinference-synthetic").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.tags["sampled"] == "r=0.25"
    kids = {(r.data.tags["policy"], r.data.tags["cost_model"]): r for r in runs if r is not parent
            and "mlflow.parentRunId" in r.data.tags}
    assert kids[("lru", "linear")].data.tags["sampled"] == "r=0.25"
    assert kids[("lhd", "linear")].data.tags["sampled"] == "false"
    trace = synth.generate("freeinference", scale=0.002, seed=0)
    for pol, rate in (("lru", 0.25), ("lhd", None), ("belady", 0.25), ("belady_compute", 0.25)):
        for m in ("uniform", "linear"):
            want = simulate(trace, pol, [4000, 20000], cost_models=[m], model=QWEN3_CODER_30B, sample_rate=rate)
            assert [w.sample_rate for w in want] == ([0.25, 0.25] if rate else [1.0, 1.0])
            for k in ("compute_savings", "hit_ratio", "evictions"):
                hist = sorted(c.get_metric_history(kids[(pol, m)].info.run_id, f"curve/{k}"), key=lambda h: h.step)
                exp = [w.compute_savings[m] if k == "compute_savings" else getattr(w, k) for w in want]
                assert np.allclose([h.value for h in hist], exp, rtol=1e-12, atol=1e-12), (pol, m, k)


def test_belady_compute_uniform_is_read_off_belady(sampled):
    """BeladyCompute under the uniform cost model is Belady (PolicySpec.uniform_same_as):
    the sweep plans no job for it and fills its curve from Belady's replay (the values,
    checked against its own replay above)."""
    p = sampled["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    jobs = [line for line in p.stderr.splitlines() if " done: belady_compute " in line]
    assert jobs and all("[linear]" in line for line in jobs), jobs


def test_policy_all_under_sampling_skips_what_cannot_be_sampled(tmp_path):
    """Resolved as the load step does it, on a trace too small to matter."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from sim_core import Trace
    from sweep.config import find_conf_dir, register_generated
    from sweep.spec import resolve
    from sweep.study import Study, _resolve_sampling

    conf = find_conf_dir()
    register_generated(conf)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        def study(*ov, n=1000):
            cfg = compose("config", overrides=list(ov))
            policy = next((o.split("=", 1)[1] for o in ov if o.startswith("policy=")), "all")
            st = Study(cfg=cfg, overrides=list(ov), trace_choice="freeinference")
            st.spec = resolve(cfg, policy)
            st.trace = Trace.from_requests([list(range(n))])
            _resolve_sampling(st)
            return st

        names = [p.name for p in study("policy=all", "sim.sample_rate=0.1").spec.policies]
        assert "lru" in names and "lhd" not in names and "wtinylfu" not in names
        named = study("policy=[lru,lhd]", "sim.sample_rate=0.1").spec
        assert [p.name for p in named.policies] == ["lru", "lhd"] and named.sample_rate == 0.1
        forced = study("policy=all", "sim.sample_rate=0.1", "sim.sample_force=true").spec
        assert {"lhd", "wtinylfu"} <= {p.name for p in forced.policies} and forced.sampled("lhd")
        auto = study("policy=all").spec  # auto on a small trace: exact, nothing skipped
        assert auto.sample_rate is None and "lhd" in [p.name for p in auto.policies]
    GlobalHydra.instance().clear()
