"""Cluster-grade sweeps on one machine: result keys, resume, the journal, delivery when
the tracking store goes away, signals and stale runs.

The CLI tests run `python -m sweep` as a subprocess in a temporary directory (the way a
user does), tag every process they start with an environment marker, and check that no
process with the marker outlives the sweep.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from sim_core import QWEN3_CODER_30B, Result

REPO = Path(__file__).resolve().parent.parent
SMALL = ["trace=mooncake_conversation", "trace.max_requests=1500", "policy=[lru,fifo]", "cost=[uniform,linear]",
         "capacity=custom", "capacity.sizes=[2GiB,8GiB,64GiB]", "cluster.num_cpus=1"]
# a few seconds of jobs, so a signal lands mid-sweep: LHD and W-TinyLFU at 9 capacities
LONGER = ["trace=freeinference", "trace.scale=0.003", "trace.weeks=1", "policy=[lhd,wtinylfu]", "cost=[uniform]",
          "capacity=hbm", "cluster.num_cpus=1", "sweep.shards_per_worker=9"]


def _env(mark: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "KVSWEEP_TEST_MARK": mark}


def _marked(mark: str) -> list[int]:
    """pids of live processes carrying the marker in their environment."""
    needle = f"KVSWEEP_TEST_MARK={mark}".encode()
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if needle in (p / "environ").read_bytes().split(b"\0"):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def _reap(mark: str, wait_s: float = 15.0) -> list[int]:
    """Wait for marked processes to end; kill and return any that do not."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = _marked(mark)
        if not left:
            return []
        time.sleep(0.25)
    left = _marked(mark)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def sweep(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    mark = uuid.uuid4().hex
    try:
        return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env=_env(mark))
    finally:
        assert _reap(mark) == [], "processes outlived the sweep"


def _client(cwd: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{cwd}/mlflow.db")


def _runs(cwd: Path, experiment: str):
    c = _client(cwd)
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id]) if exp else []


def _curves(runs) -> Counter:
    return Counter((r.data.tags["kvsweep.curve_key"], r.info.status) for r in runs
                   if r.data.tags.get("kvsweep.kind") == "curve")


def _table(stdout: str) -> str:
    """The final compute-savings table of a sweep's output (without the work line: a
    re-run does none)."""
    return stdout[stdout.index("compute-savings ratio"):].split("\nMLflow experiment")[0].split("\nwork:")[0].strip()


def _journal_points(cwd: Path) -> int:
    p = cwd / "kvsweep-journal.jsonl"
    if not p.exists():
        return 0
    return sum(len(json.loads(line)["points"]) for line in p.read_text().splitlines()
               if line.strip() and '"kind":"points"' in line)


# ------------------------------------------------------------------ keys
def test_point_key_changes_with_every_part_of_the_identity():
    from sweep.keys import CurveIdentity

    base = dict(trace="t", policy="lru", params={"a": 1}, mode="request", hits="block", seed=0,
                cost_model="uniform", model=QWEN3_CODER_30B, simulator="s")
    k = CurveIdentity.make(**base).point_key(100)
    assert CurveIdentity.make(**base).point_key(100) == k  # stable
    assert CurveIdentity.make(**{**base, "params": {"a": 1}}).point_key(100) == k  # order-free params
    for field, other in [("trace", "u"), ("policy", "fifo"), ("params", {"a": 2}), ("mode", "block"),
                         ("hits", "prefix"), ("seed", 1), ("cost_model", "linear"), ("simulator", "z")]:
        assert CurveIdentity.make(**{**base, field: other}).point_key(100) != k, field
    assert CurveIdentity.make(**base).point_key(101) != k
    m2 = QWEN3_CODER_30B.__class__(**{**QWEN3_CODER_30B.__dict__, "layers": QWEN3_CODER_30B.layers + 1})
    assert CurveIdentity.make(**{**base, "model": m2}).point_key(100) != k


def test_trace_digest_is_content_not_name():
    from sim_core import Trace
    from sim_core.digest import trace_digest

    a = Trace.from_requests([[1, 2], [1, 3]], name="a")
    b = Trace.from_requests([[1, 2], [1, 3]], name="b")
    c = Trace.from_requests([[1, 2], [1, 4, 5]], name="a")
    assert trace_digest(a) == trace_digest(b) != trace_digest(c)


# ------------------------------------------------------------------ journal and delivery
def _result(blocks: int, x: float) -> Result:
    return Result(capacity_blocks=blocks, accesses=10, hits=int(10 * x), hit_ratio=x, compute_savings={"uniform": x},
                  recomputed_blocks=3, holes_total=1, holes_per_request_mean=1.0, holes_per_request_p50=1.0,
                  holes_per_request_p99=1.0, holes_per_request_max=1, hole_length_mean=2.0, evictions=4,
                  oversized_requests=0, oversized_blocks=0, max_resident_blocks=blocks)


def test_journal_round_trip_and_torn_last_line(tmp_path):
    from sweep.journal import Journal, Point

    j = Journal(tmp_path / "j.jsonl")
    j.add_points("u", "e", [Point("k1", "r1", 0, "uniform", _result(10, 0.5)),
                            Point("k2", "r1", 1, "uniform", _result(20, 0.75))])
    j.mark_delivered("u", [("r1", 0)])
    with open(j.path, "a") as f:
        f.write('{"kind": "points", "poi')  # a crash mid-write
    assert j.results() == {"k1": _result(10, 0.5), "k2": _result(20, 0.75)}
    pending = j.undelivered()
    assert [(e, p.key, p.step) for e, p in pending["u"]] == [("e", "k2", 1)]


class _FlakyClient:
    """Wraps an MlflowClient; every call fails while `down` is set (a dead server).
    `seen` holds (method, probe()) at each failed call."""

    def __init__(self, real, probe=lambda: None):
        self.real, self.down, self.failed, self.probe, self.seen = real, False, 0, probe, []

    def __getattr__(self, name):
        fn = getattr(self.real, name)

        def call(*a, **kw):
            if self.down:
                self.failed += 1
                self.seen.append((name, self.probe()))
                raise ConnectionError("connection refused")
            return fn(*a, **kw)
        return call


def test_delivery_keeps_results_while_the_store_is_down_and_sends_them_after(tmp_path, caplog):
    from mlflow.tracking import MlflowClient

    from sweep.delivery import Delivery
    from sweep.journal import Journal, Point
    from sweep.keys import CurveIdentity
    from sweep.plan import Capacity
    from sweep.curves import Curve
    from sweep.tracking import Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    caps = [Capacity(i, str(b), b, 0.1 * b) for i, b in enumerate((10, 20, 30))]
    tr = Tracker(uri, "t")
    tr.start_parent(run_name="p", sweep_key="s", params={}, tags={}, metrics={}, texts={}, capacities=caps)
    ident = CurveIdentity.make(trace="t", policy="lru", params={}, mode="request", hits="block", seed=0,
                               cost_model="uniform", model=QWEN3_CODER_30B, simulator="x")
    c = Curve("lru", "uniform", ident, (10, 20, 30))
    tr.open_curve(c, {}, {})
    def warnings() -> int:
        return sum("not taking results" in r.getMessage() for r in caplog.records)

    flaky = _FlakyClient(tr.client, warnings)
    tr.client = flaky
    j = Journal(tmp_path / "j.jsonl")
    d = Delivery(tr, j, uri)
    flaky.down = True
    for i, b in enumerate((10, 20, 30)):
        res = _result(b, 0.1 * (i + 1))
        j.add_points(uri, "t", [Point(c.point_keys[i], c.run_id, i, "uniform", res)])
        c.rows[i] = res
        d.points(c, {i: res})

    def attempts() -> list[int]:  # warnings out at each failed attempt to send the points
        return [w for name, w in list(flaky.seen) if name == "log_batch"]

    deadline = time.monotonic() + 60  # a bound for a stuck thread, not a speed claim
    while len(attempts()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    # at once: the warning was out when the first retry failed (not after backing off);
    # only once: no more warnings over three failed attempts
    assert attempts()[:3] == [0, 1, 1] and warnings() == 1
    assert d.backlog == 3 and j.undelivered()  # nothing lost, nothing sent
    flaky.down = False
    assert d.drain(30) == 0
    d.stop()
    assert flaky.failed >= 1
    assert not j.undelivered()
    real = MlflowClient(uri)
    run = real.get_run(c.run_id)
    assert run.info.status == "FINISHED"
    hist = sorted((m.step, m.value) for m in real.get_metric_history(c.run_id, "curve/hit_ratio"))
    assert hist == [(1024, 0.1), (2048, 0.2), (3072, pytest.approx(0.3))]  # step = capacity in MiB


def test_sync_sends_journaled_points_and_finishes_their_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from sweep.journal import Journal, Point
    from sweep.keys import CurveIdentity
    from sweep.plan import Capacity
    from sweep.sync import main as sync_main
    from sweep.curves import Curve
    from sweep.tracking import Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    caps = [Capacity(i, str(b), b, 0.1 * b) for i, b in enumerate((10, 20))]
    tr = Tracker(uri, "t")
    tr.start_parent(run_name="p", sweep_key="s", params={}, tags={}, metrics={}, texts={}, capacities=caps)
    ident = CurveIdentity.make(trace="t", policy="lru", params={}, mode="request", hits="block", seed=0,
                               cost_model="uniform", model=QWEN3_CODER_30B, simulator="x")
    c = Curve("lru", "uniform", ident, (10, 20))
    tr.open_curve(c, {}, {})
    tr.log_points(c, {0: _result(10, 0.5)})  # the first point made it; the server died then
    jpath = tmp_path / "j.jsonl"
    Journal(jpath).add_points(uri, "t", [Point(c.point_keys[i], c.run_id, i, "uniform", _result(b, x))
                                         for i, (b, x) in enumerate(((10, 0.5), (20, 0.75)))])
    assert sync_main(["--journal", str(jpath)]) == 0
    run = MlflowClient(uri).get_run(c.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["hit_ratio_mean"] == 0.625
    assert len(MlflowClient(uri).get_metric_history(c.run_id, "curve/hit_ratio")) == 2  # no duplicate step 0
    assert not Journal(jpath).undelivered()


# ------------------------------------------------------------------ the CLI
def test_rerun_does_no_simulation_and_no_duplicates(tmp_path):
    first = sweep(tmp_path, *SMALL)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = _runs(tmp_path, "mooncake_conversation")
    assert set(_curves(runs).values()) == {1} and len(_curves(runs)) == 4  # 2 policies x 2 costs
    again = sweep(tmp_path, *SMALL)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to simulate" in again.stderr
    assert "starting a local Ray" not in again.stderr
    assert len(_runs(tmp_path, "mooncake_conversation")) == len(runs)  # nothing new recorded
    assert _table(again.stdout) == _table(first.stdout) and "lru" in _table(first.stdout)

    # one more policy: only its curves run; the others are reused, not duplicated
    more = sweep(tmp_path, *[a if not a.startswith("policy=") else "policy=[lru,fifo,sieve]" for a in SMALL])
    assert more.returncode == 0, more.stderr[-3000:]
    assert "resume: 12 of 18 results" in more.stderr
    curves = _curves(_runs(tmp_path, "mooncake_conversation"))
    assert len(curves) == 6 and set(curves.values()) == {1}
    assert all(s == "FINISHED" for _, s in curves)

    # resume=false recomputes, and the old runs are superseded, never duplicated
    forced = sweep(tmp_path, *SMALL, "sweep.resume=false")
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "starting a local Ray" in forced.stderr
    curves = _curves(_runs(tmp_path, "mooncake_conversation"))
    assert len(curves) == 6 and set(curves.values()) == {1}


def test_sigterm_mid_sweep_then_resume(tmp_path):
    """SIGTERM while jobs run: exit 143, finished curves FINISHED, partial ones and the
    sweep KILLED, no process left; the next run simulates only what is missing and the
    curves equal an uninterrupted sweep's."""
    mark = uuid.uuid4().hex
    p = subprocess.Popen([sys.executable, "-m", "sweep", *LONGER], cwd=tmp_path, env=_env(mark),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while _journal_points(tmp_path) == 0 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert p.poll() is None, "the sweep ended before a signal could land"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143, err[-3000:]
    assert "SIGTERM received" not in err  # Ray's handler did not take over
    assert _reap(mark) == [], "processes outlived the sweep"
    runs = _runs(tmp_path, "freeinference-synthetic")
    parent = [r for r in runs if r.data.tags.get("kvsweep.kind") == "sweep"]
    assert len(parent) == 1 and parent[0].info.status == "KILLED"
    statuses = {s for _, s in _curves(runs)}
    assert statuses <= {"FINISHED", "KILLED"} and "KILLED" in statuses
    done_before = _journal_points(tmp_path)
    assert done_before >= 1

    again = sweep(tmp_path, *LONGER)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resume: {done_before} of 18 results already computed" in again.stderr
    runs = _runs(tmp_path, "freeinference-synthetic")
    curves = _curves(runs)
    assert len(curves) == 2 and set(curves.values()) == {1} and {s for _, s in curves} == {"FINISHED"}
    assert [r.info.status for r in runs if r.data.tags.get("kvsweep.kind") == "sweep"] == ["FINISHED"]

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    ref = sweep(fresh, *LONGER)
    assert ref.returncode == 0
    c1, c2 = _client(tmp_path), _client(fresh)
    for a in _runs(tmp_path, "freeinference-synthetic"):
        if a.data.tags.get("kvsweep.kind") != "curve":
            continue
        b = [r for r in _runs(fresh, "freeinference-synthetic")
             if r.data.tags.get("kvsweep.curve_key") == a.data.tags["kvsweep.curve_key"]][0]
        for k in ("hit_ratio", "compute_savings", "evictions", "holes_per_request_mean"):
            ha = sorted((m.step, m.value) for m in c1.get_metric_history(a.info.run_id, "curve/" + k))
            hb = sorted((m.step, m.value) for m in c2.get_metric_history(b.info.run_id, "curve/" + k))
            assert ha == hb and len(ha) == 9, k


def test_sigkill_driver_leaves_stale_runs_that_the_next_sweep_resumes(tmp_path):
    mark = uuid.uuid4().hex
    p = subprocess.Popen([sys.executable, "-m", "sweep", *LONGER], cwd=tmp_path, env=_env(mark),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while _journal_points(tmp_path) == 0 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    p.kill()
    p.wait(timeout=30)
    _reap(mark, wait_s=5)  # Ray's processes of a SIGKILLed driver: not ours to judge here
    runs = _runs(tmp_path, "freeinference-synthetic")
    assert any(r.info.status == "RUNNING" for r in runs)
    again = sweep(tmp_path, *LONGER)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "left RUNNING by a sweep whose driver is gone" in again.stderr
    runs = _runs(tmp_path, "freeinference-synthetic")
    assert not any(r.info.status == "RUNNING" for r in runs)
    curves = _curves(runs)
    assert len(curves) == 2 and {s for _, s in curves} == {"FINISHED"} and set(curves.values()) == {1}


def _signal_at(tmp_path, args, phase: str, sig, after_s: float):
    """Start a sweep, send `sig` `after_s` seconds after a log line containing `phase`;
    (exit code, stderr). Fails if a marked process outlives it."""
    import threading

    mark = uuid.uuid4().hex
    p = subprocess.Popen([sys.executable, "-m", "sweep", *args], cwd=tmp_path, env=_env(mark),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any(phase in x for x in lines) and p.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(after_s)
    p.send_signal(sig)
    p.wait(timeout=60)
    reader.join(timeout=10)
    assert _reap(mark) == [], "processes outlived the sweep"
    return p.returncode, "".join(lines)


def test_sigint_while_loading_exits_130_and_records_nothing(tmp_path):
    # generating a half-scale trace takes seconds: the signal lands inside it
    code, err = _signal_at(tmp_path, ["trace=freeinference", "trace.scale=0.5", "trace.weeks=1", "policy=lru"],
                           "generating a synthetic", signal.SIGINT, 0.5)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err and "SIGINT" in err
    assert not (tmp_path / "mlflow.db").exists()


def test_sigterm_while_ray_starts_exits_143_and_leaves_no_run(tmp_path):
    """Ray's own SIGTERM handler (sys.exit inside ray.init, once swallowed so that the
    sweep went on) must not take over: our handler stops the sweep, Ray is shut down, and
    the sweep run, killed before any result, is removed (sweep/partial.py: no empty run)."""
    code, err = _signal_at(tmp_path, SMALL, "starting a local Ray", signal.SIGTERM, 0.3)
    assert code == 143, err[-3000:]
    # (a signal that lands in a finalizer shows as "Exception ignored in ...": harmless,
    # signals.check() raises it again)
    assert "SIGTERM received" not in err and "SIGTERM: finished curves are kept" in err
    sweeps = [r for r in _runs(tmp_path, "mooncake_conversation") if r.data.tags.get("kvsweep.kind") == "sweep"]
    assert sweeps == [] and "removed" in err and "nothing ran" in err


def test_offline_run_then_online_run_records_without_simulating(tmp_path):
    off = sweep(tmp_path, *SMALL, "tracking.offline=true")
    assert off.returncode == 0, off.stderr[-3000:]
    assert not (tmp_path / "mlflow.db").exists() and _journal_points(tmp_path) == 12
    on = sweep(tmp_path, *SMALL)
    assert on.returncode == 0, on.stderr[-3000:]
    assert "starting a local Ray" not in on.stderr and "nothing to simulate" in on.stderr
    curves = _curves(_runs(tmp_path, "mooncake_conversation"))
    assert len(curves) == 4 and {s for _, s in curves} == {"FINISHED"}


def test_unreachable_tracking_server_fails_fast_before_any_work(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = sweep(tmp_path, *SMALL, "tracking=server", f"tracking.uri=http://127.0.0.1:{port}")
    assert r.returncode == 2
    # before any work: the trace was not even loaded (its summary line), Ray not started
    assert "block accesses" not in r.stderr and "starting a local Ray" not in r.stderr, r.stderr[-3000:]
    assert f"tracking server http://127.0.0.1:{port} does not answer" in r.stderr
    assert "tracking.offline=true" in r.stderr
    assert _journal_points(tmp_path) == 0


def test_two_sweeps_started_together_in_an_empty_directory(tmp_path):
    marks = [uuid.uuid4().hex for _ in range(2)]
    args = [[*SMALL, "policy=lru"], [*SMALL, "policy=fifo"]]
    procs = [subprocess.Popen([sys.executable, "-m", "sweep", *a], cwd=tmp_path, env=_env(m),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for a, m in zip(args, marks)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    for m in marks:
        assert _reap(m) == []
    assert len(_curves(_runs(tmp_path, "mooncake_conversation"))) == 4


def test_a_new_experiment_is_a_model_development_one(tmp_path):
    """MLflow 3's UI shows untagged experiments in GenAI mode (traces, evaluation runs)."""
    from sweep.tracking import Tracker

    tr = Tracker(f"sqlite:///{tmp_path}/mlflow.db", "t")
    exp = tr.client.get_experiment(tr.experiment_id)
    assert exp.tags.get("mlflow.experimentKind") == "custom_model_development"
