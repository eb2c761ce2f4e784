"""The cluster topology of docker/ on this machine, without Docker (issue 9, section 4).

PostgreSQL, an MLflow server on it (served artifacts), a Ray head and a second Ray node
are started with the same docker/services scripts as docker-compose.yml, in a private
loopback-only network namespace (tests/stack.py). Sweeps run against them with
`cluster=ray tracking=server`, and every curve is read back through MLflow's REST API and
compared with sim_core.simulate run here. Then the MLflow server and the worker node are
killed in the middle of sweeps.

KVSWEEP_STACK_KEEP=1 keeps the services' logs and data (path printed at the end).
Skipped when the machine lacks PostgreSQL (or root), unless KVSWEEP_REQUIRE_STACK=1
(.ci/run sets it, after installing PostgreSQL), where that is a failure.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import stack as st
from tests.helpers import require

pytestmark = pytest.mark.stack

MAX_REQUESTS = 3000
POLICIES = ("lru", "fifo", "s3fifo", "belady")
# the node-loss sweep: more policies, so the head node's actor is still busy (each policy's
# first job loads its compiled engine) when the worker node is declared dead
NODE_LOSS_POLICIES = POLICIES + ("arc", "lfu", "sieve", "lirs", "s4fifo", "lecar")
COST_MODELS = ("uniform", "linear", "qwen3_coder_30b")
CAPACITY_SIZES = ("24GiB", "48GiB", "96GiB", "1TiB")  # conf/capacity/paper4.yaml
SWEEP_TIMEOUT = 240.0


def _require_stack() -> None:
    require("the cluster stack", st.missing_prerequisites(), "KVSWEEP_REQUIRE_STACK")


@pytest.fixture(scope="module")
def stack():
    _require_stack()
    # short path: Ray puts Unix sockets under it (108-byte limit)
    root = Path(tempfile.mkdtemp(prefix="kvs", dir="/tmp"))
    netns = st.LoopbackNetns()
    s = None
    try:
        netns.__enter__()
        s = st.Stack(root, head_cpus=1, worker_cpus=1)
        s.start()
        yield s
    finally:
        if s is not None:
            s.stop()
        netns.__exit__(None, None, None)
        if os.environ.get("KVSWEEP_STACK_KEEP") == "1":  # keep logs and databases to look at
            print(f"\ncluster stack state kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def expected():
    """(policy, cost model) -> {"hit_ratio": [...], "compute_savings": [...]} per capacity,
    from sim_core on the same trace, without sweep, Ray or MLflow."""
    from sim_core import get_model, simulate, to_blocks
    from sim_core.traces.loaders import bundled_path, load_mooncake

    model = get_model("qwen3_coder_30b")
    trace = load_mooncake(bundled_path("mooncake_conversation.jsonl"), name="mooncake_conversation",
                          context_tokens=model.context_tokens).subset(MAX_REQUESTS)
    caps = sorted({to_blocks(s, model, trace.block_tokens) for s in CAPACITY_SIZES})
    out = {}
    for p in NODE_LOSS_POLICIES:
        recs = simulate(trace, p, caps, cost_models=list(COST_MODELS), model=model)
        assert [r.capacity_blocks for r in recs] == caps
        for m in COST_MODELS:
            out[(p, m)] = {"hit_ratio": [r.hit_ratio for r in recs],
                           "compute_savings": [r.compute_savings[m] for r in recs]}
    return out


# --------------------------------------------------------------------------- helpers
class Sweep:
    """`python -m sweep ... cluster=ray tracking=server` as a child process group."""

    def __init__(self, s: st.Stack, experiment: str, policies=POLICIES):
        self.experiment = experiment
        self.log = s.root / "logs" / f"sweep-{experiment}.log"
        cmd = [sys.executable, "-m", "sweep", "trace=mooncake_conversation", f"trace.max_requests={MAX_REQUESTS}",
               f"policy=[{','.join(policies)}]", "capacity=paper4", f"cost=[{','.join(COST_MODELS)}]",
               "cluster=ray", f"cluster.address={s.ray_address}",
               "tracking=server", f"tracking.uri={s.tracking_uri}", f"tracking.experiment={experiment}",
               # a journal per experiment: each test's sweep must simulate, not reuse another's results
               f"tracking.journal={s.root / ('journal-' + experiment + '.jsonl')}"]
        with open(self.log, "wb") as f:
            self.proc = subprocess.Popen(cmd, cwd=s.root, env=s.sweep_env(), stdin=subprocess.DEVNULL,
                                         stdout=f, stderr=subprocess.STDOUT, start_new_session=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = SWEEP_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            pytest.fail(f"the sweep did not finish within {timeout:.0f}s; end of its output:\n{self.output()}")

    def output(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def kill(self) -> None:
        if self.running():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def _finished_children(rest: st.MlflowRest, experiment: str) -> int:
    try:
        eid = rest.experiment_id(experiment)
        if eid is None:
            return 0
        return sum(1 for r in rest.runs(eid)
                   if "mlflow.parentRunId" in st.tags(r) and r["info"]["status"] == "FINISHED")
    except OSError:  # the server is down or restarting
        return 0


def check_experiment(s: st.Stack, experiment: str, expected: dict, policies=POLICIES) -> None:
    """Exactly one parent run and one child run per (policy, cost model), all FINISHED,
    each curve's metrics logged once per capacity and equal to `expected`; read through
    the REST API, then cross-checked in PostgreSQL and the served artifact store."""
    expected = {k: v for k, v in expected.items() if k[0] in policies}
    rest = st.MlflowRest(s.tracking_uri)
    eid = rest.experiment_id(experiment)
    assert eid is not None, f"no experiment {experiment!r} on the server"
    runs = rest.runs(eid)
    parents = [r for r in runs if "mlflow.parentRunId" not in st.tags(r)]
    assert len(parents) == 1, f"{len(parents)} sweep (parent) runs, expected 1"
    parent = parents[0]["info"]
    assert parent["status"] == "FINISHED"
    children = [r for r in runs if "mlflow.parentRunId" in st.tags(r)]
    keys = [(st.tags(r).get("policy"), st.tags(r).get("cost_model")) for r in children]
    assert sorted(keys) == sorted(expected), "child runs (policy, cost model) missing or duplicated"
    n_caps = len(CAPACITY_SIZES)
    for r, key in zip(children, keys):
        info = r["info"]
        assert st.tags(r)["mlflow.parentRunId"] == parent["run_id"]
        assert info["status"] == "FINISHED", f"{key}: {info['status']}"
        for metric in ("hit_ratio", "compute_savings"):
            hist = rest.metric_history(info["run_id"], "curve/" + metric)
            steps = sorted(int(h.get("step", 0)) for h in hist)
            # one step per capacity (step = the capacity in MiB: distinct, one per point)
            assert len(steps) == len(set(steps)) == n_caps, f"{key} {metric}: steps {steps} (lost or duplicated points)"
            got = [v for _, v in sorted((int(h.get("step", 0)), float(h["value"])) for h in hist)]
            assert got == pytest.approx(expected[key][metric], abs=1e-12), f"{key} {metric}"

    # the server really keeps runs in PostgreSQL, and artifacts in its served store
    import psycopg2

    with psycopg2.connect(s.db_uri.replace("+psycopg2", ""), connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs WHERE experiment_id = %s AND status = 'FINISHED'", (int(eid),))
        assert cur.fetchone()[0] == len(runs)
    curves = list(s.artifacts.rglob("curve.csv"))
    child_ids = {r["info"]["run_id"] for r in children}
    assert child_ids <= {p.parent.parent.name for p in curves}, "a child run's curve.csv is not in the artifact store"


# --------------------------------------------------------------------------- tests
def test_two_ray_nodes_on_loopback(stack):
    nodes = stack.ray_nodes()
    assert len(nodes) == 2 and len({n["id"] for n in nodes}) == 2
    assert {n["ip"] for n in nodes} == {"127.0.0.1"}
    assert sum(n["cpus"] for n in nodes) == 2


@pytest.fixture(scope="module")
def restarted(stack):
    """A sweep on the cluster whose tracking server dies once the first curve is FINISHED
    and comes back a few seconds later (same database, same artifact store): (exit
    status, the end of its output)."""
    rest = st.MlflowRest(stack.tracking_uri)
    sweep = Sweep(stack, "stack-mlflow-restart")
    try:
        st.wait_until(lambda: _finished_children(rest, sweep.experiment) or not sweep.running(), 120,
                      "the first finished curve", interval=0.1)
        assert sweep.running(), "the sweep ended before the server could be killed:\n" + sweep.output()
        stack.services["mlflow"].kill()
        time.sleep(3)
        stack.start_mlflow()
        code = sweep.wait()
    finally:
        sweep.kill()
    return code, sweep.output(400)


def test_sweep_survives_mlflow_server_restart(stack, expected, restarted):
    """Through the restart nothing is lost or duplicated: every curve read back from the
    server equals sim_core.simulate's (the cluster's end-to-end check, with
    tests/test_sweep.py's on a local Ray instance)."""
    code, out = restarted
    assert code == 0, out
    assert out.count("is not taking results") == 1 and "MLflow is back" in out, out
    check_experiment(stack, "stack-mlflow-restart", expected)


def test_the_same_sweep_again_resumes_from_the_server(stack, expected, restarted):
    assert restarted[0] == 0, restarted[1]
    again = Sweep(stack, "stack-mlflow-restart")  # resume from the server's store: nothing to do
    assert again.wait() == 0, again.output()
    assert "nothing to simulate" in again.output() and "joining Ray cluster" not in again.output()
    check_experiment(stack, "stack-mlflow-restart", expected)  # still one run per curve


def _simulator_on(svc: st.Service) -> bool:
    """A simulator actor lives on this node (Ray titles an actor's process
    ray::<Class>[.<method running>]); the sweep hands every actor its first jobs at once."""
    for pid in svc.session_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(b"ray::SimulatorShard"):
            return True
    return False


def test_sweep_survives_worker_node_loss(stack, expected):
    """The second Ray node dies while its simulator actor holds jobs: they run on the head
    node instead and every curve is the same. Runs last: it kills that node."""
    worker = stack.services["ray-worker"]
    sweep = Sweep(stack, "stack-node-loss", NODE_LOSS_POLICIES)
    try:
        st.wait_until(lambda: _simulator_on(worker) or not sweep.running(), 120,
                      "a simulator actor on the worker node", interval=0.05)
        assert sweep.running(), "the sweep ended before the worker node could be killed:\n" + sweep.output()
        worker.kill()
        code = sweep.wait()
    finally:
        sweep.kill()
    assert code == 0, sweep.output()
    assert "retrying it once on another actor" in sweep.output(400), "no job was lost with the node"
    check_experiment(stack, "stack-node-loss", expected, NODE_LOSS_POLICIES)
    assert len(stack.ray_nodes()) == 1
