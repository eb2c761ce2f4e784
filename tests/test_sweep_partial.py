"""A serving sweep cut short says so: its summary, work line and report count only what ran
and mark every table and verdict partial with the share done; no empty run is left in
MLflow (an early Ctrl-C leaves the experiment as it was).

Small fleet sweeps (3,000 requests of the bundled Mooncake trace, one serve() a job),
interrupted with SIGINT as a user's Ctrl-C; every process they start is reaped.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.test_resume import _env, _journal_points, _reap

REPLICAS, ROUTERS, LOADS, SIZES = [1, 2], ["round_robin", "kv_router"], [1, 4], [1000, 4000, 16000]
N = len(REPLICAS) * len(ROUTERS) * len(LOADS) * len(SIZES)  # one policy
ARGS = ["trace=mooncake_conversation", "trace.max_requests=3000", "policy=[lru]", "capacity=custom",
        f"capacity.sizes=[{','.join(map(str, SIZES))}]", "fleet=dynamo", f"fleet.replicas=[{','.join(map(str, REPLICAS))}]",
        f"fleet.router=[{','.join(ROUTERS)}]", f"fleet.arrival_speedup=[{','.join(map(str, LOADS))}]",
        "fleet.slo_ttft=2s", "cluster.num_cpus=1"]


def _interrupt(cwd: Path, when) -> tuple[subprocess.CompletedProcess, str]:
    """Run the sweep, send SIGINT once `when(stderr so far)` holds; (the process, its mark)."""
    mark = uuid.uuid4().hex
    p = subprocess.Popen([sys.executable, "-m", "sweep", *ARGS], cwd=cwd, env=_env(mark), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # generous: on a loaded 2-core machine the first replays come minutes after the start
    err, deadline, ready = [], time.monotonic() + 900, False
    while p.poll() is None and time.monotonic() < deadline:
        line = p.stderr.readline()
        err.append(line)
        if when("".join(err), cwd):
            ready = True
            break
    assert p.poll() is None, "the sweep ended before a signal could land:\n" + "".join(err)[-3000:]
    if not ready:  # a timeout is not an interruption at the point the test asks for
        p.kill()
        p.communicate(timeout=120)
        _reap(mark)
        raise AssertionError("the sweep did not reach the point to interrupt within 900 s:\n" + "".join(err)[-3000:])
    p.send_signal(signal.SIGINT)
    out, rest = p.communicate(timeout=120)
    assert _reap(mark) == [], "processes outlived the sweep"
    return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(err) + rest), mark


def _runs(cwd: Path) -> list:
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{cwd}/mlflow.db")
    exp = c.get_experiment_by_name("mooncake_conversation")
    return [] if exp is None else c.search_runs([exp.experiment_id])  # active runs only, as the UI lists them


def test_a_sweep_stopped_midway_says_partial_with_what_ran(tmp_path):
    p, _ = _interrupt(tmp_path, lambda err, d: _journal_points(d) >= 2)
    assert p.returncode == 130, p.stderr[-3000:]
    done = _journal_points(tmp_path)
    assert 2 <= done < N
    out = p.stdout
    assert f"PARTIAL: {done} of {N} results ({100 * done / N:.0f}%), stopped by SIGINT." in out
    m = re.search(r"^work \(stopped by SIGINT\): (\d+) of (\d+) jobs ran (\d+) of (\d+) serve\(\) calls", out, re.M)
    assert m and m.group(1) == m.group(3) == str(done) and m.group(2) == m.group(4) == str(N), out[-2000:]
    assert "at any capacity and load swept" not in out  # no verdict about the whole sweep from a part
    runs = _runs(tmp_path)
    parent = [r for r in runs if r.data.tags.get("kvsweep.kind") == "sweep"]
    curves = [r for r in runs if r.data.tags.get("kvsweep.kind") == "curve"]
    assert len(parent) == 1 and parent[0].info.status == "KILLED"
    assert parent[0].data.tags["kvsweep.partial"] == f"{done} of {N} results ({100 * done / N:.0f}%), stopped by SIGINT"
    from mlflow.tracking import MlflowClient

    c = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    logged = [len(c.get_metric_history(r.info.run_id, "curve/ttft_p99_s")) for r in curves]
    assert logged and min(logged) >= 1 and sum(logged) == done  # every run left holds a point
    report = Path(c.download_artifacts(parent[0].info.run_id, "report.html", str(tmp_path / "rep"))).read_text()
    assert f"Partial: {done} of {N} results" in report


def test_a_sweep_stopped_before_its_first_result_leaves_no_run(tmp_path):
    p, _ = _interrupt(tmp_path, lambda err, d: "MLflow: experiment" in err)
    assert p.returncode == 130, p.stderr[-3000:]
    assert _journal_points(tmp_path) == 0
    assert _runs(tmp_path) == []
    assert "removed" in p.stderr and "nothing ran" in p.stderr
