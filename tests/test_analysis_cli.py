"""`python -m analysis characterize|advise` and `policy=ilp` in the sweep.

Expected values come from hand-built traces whose statistics are known by construction,
from sim_core.simulate / sim_core.ilp.solve called directly, or from the paper's rules
applied to the reported numbers -- never from the code under test itself.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core import Trace, simulate
from tests.helpers import session_trace

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _run(args, cwd, timeout=600):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=ENV)


# ------------------------------------------------------------------ policy=ilp
ILP_CAPS = [30, 100, 300]
ILP_COSTS = ["uniform", "linear"]


@pytest.fixture(scope="module")
def ilp_sweep(tmp_path_factory):
    pytest.importorskip("highspy")
    d = tmp_path_factory.mktemp("ilp_sweep")
    trace = session_trace(n_sessions=40, seed=5)
    path = trace.save(d / "sessions.npz")
    uri = f"sqlite:///{d}/mlflow.db"
    proc = _run(["-m", "sweep", "trace=file", f"trace.path={path}", "policy=[lru,belady,ilp]",
                 f"cost=[{','.join(ILP_COSTS)}]", "capacity=custom", f"capacity.sizes=[{','.join(map(str, ILP_CAPS))}]",
                 "cluster.num_cpus=2", f"tracking.uri={uri}"], d)
    return {"proc": proc, "trace": Trace.load(path), "uri": uri}


def _curves(uri: str, experiment: str) -> dict:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(uri)
    runs = c.search_runs([c.get_experiment_by_name(experiment).experiment_id])
    out = {}
    for r in runs:
        if r.data.tags.get("kvsweep.kind") != "curve":
            continue
        hist = {k: [m.value for m in sorted(c.get_metric_history(r.info.run_id, k), key=lambda m: m.step)]
                for k in ("hits", "compute_savings", "evictions", "max_resident_blocks")}
        out[(r.data.tags["policy"], r.data.tags["cost_model"])] = (r, hist)
    return out


def test_ilp_in_a_sweep_is_the_solver_optimum_and_bounds_belady(ilp_sweep):
    from sim_core.ilp import solve

    p = ilp_sweep["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    assert "ilp" in p.stdout  # a row of the final table
    t = ilp_sweep["trace"]
    curves = _curves(ilp_sweep["uri"], "sessions-synthetic")  # a synthetic trace saved as .npz
    assert {pol for pol, _ in curves} == {"lru", "belady", "ilp"}
    for m in ILP_COSTS:
        run, got = curves[("ilp", m)]
        assert run.info.status == "FINISHED"
        assert run.data.params["offline"] == "true" and run.data.params["cost_aware"] == "true"
        want = [solve(t, c, m) for c in ILP_CAPS]
        assert np.allclose(got["compute_savings"], [w["compute_savings"] for w in want], rtol=0, atol=1e-12)
        assert got["hits"] == [w["hits"] for w in want]
        for pol in ("lru", "belady"):  # the optimum bounds every policy under its own cost model
            other = curves[(pol, m)][1]["compute_savings"]
            assert all(o <= g + 1e-12 for o, g in zip(other, got["compute_savings"])), (pol, m)
    # uniform cost: at least Belady's hits (Belady is not optimal under the residency constraint)
    ilp_hits = curves[("ilp", "uniform")][1]["hits"]
    bel_hits = curves[("belady", "uniform")][1]["hits"]
    assert all(i >= b for i, b in zip(ilp_hits, bel_hits))


def test_ilp_as_a_policy_matches_belady_where_belady_is_optimal():
    """Block mode, uniform cost: Belady (MIN) is the hit optimum, so the ILP's hits, and the
    evictions and peak residency of a cache that realises its solution, are Belady's."""
    pytest.importorskip("highspy")
    t = session_trace(n_sessions=30, seed=2)
    caps = [20, 60, 10**6]
    ilp = simulate(t, "ilp", caps, mode="block")
    bel = simulate(t, "belady", caps, mode="block")
    for a, b in zip(ilp, bel):
        assert (a.hits, a.evictions, a.max_resident_blocks) == (b.hits, b.evictions, b.max_resident_blocks)
        assert np.isnan(a.holes_total)  # holes are not modelled
    with pytest.raises(ValueError, match="block hits"):
        simulate(t, "ilp", 20, hits="prefix")


def test_ilp_limit_by_hand():
    """Request mode: [1,2] [3] [1,2] [3] [1,2] has reuse intervals ending at requests 2 (two),
    3 (one) and 4 (two): 5 in all. Under a limit of 2 the first 3 requests fit, under 3 the
    first 4."""
    pytest.importorskip("highspy")
    from sim_core.ilp import check, requests_within

    t = Trace.from_requests([[1, 2], [3], [1, 2], [3], [1, 2]], name="byhand")
    assert requests_within(t, 10, "request", 5) == 5
    assert requests_within(t, 10, "request", 2) == 3
    assert requests_within(t, 10, "request", 3) == 4
    check(t, [10], params={"max_intervals": 5})
    with pytest.raises(ValueError) as e:
        check(t, [10], params={"max_intervals": 3})
    msg = str(e.value)
    assert "5 reuse intervals" in msg and "limit of 3" in msg and "5 requests" in msg
    assert "trace.max_requests=4" in msg


def test_ilp_above_the_limit_is_refused_before_any_work(tmp_path):
    """The default synthetic trace has about 4.1M reuse intervals, over the 1M limit: exit 2,
    a message naming the limit and the trace's size, and nothing run or recorded."""
    proc = _run(["-m", "sweep", "trace=freeinference", "policy=[lru,ilp]", "capacity=paper4"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "limit of 1,000,000 intervals" in proc.stderr
    assert "2,184 requests" in proc.stderr and "4,493,678 block accesses" in proc.stderr
    assert "trace.max_requests=" in proc.stderr
    assert "starting a local Ray" not in proc.stderr
    assert not list(tmp_path.iterdir())  # no mlflow.db, no journal
