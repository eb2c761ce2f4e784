"""The sweep front door: planning, configuration, MLflow records and one end-to-end run.

The end-to-end test runs `python -m sweep` once (session-scoped, tests/conftest.py
e2e_sweep: Ray start-up is slow, and tests/test_browser.py opens the same sweep in
MLflow's UI) on a small Mooncake-format trace and checks every curve in MLflow against
sim_core.simulate called directly on the same file.
"""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core import QWEN3_CODER_30B, Trace, bytes_for_blocks, simulate
from sweep.plan import Capacity, make_plan, oversized_warnings, resolve_capacities
from sweep.report.tables import pick_points, summary_table
from sweep.spec import PolicyChoice

REPO = Path(__file__).resolve().parent.parent
GiB = 1 << 30


def pol(name, weight=1.0, cost_aware=False, one_pass=False):
    return PolicyChoice(name=name, params={}, weight=weight, cost_aware=cost_aware, one_pass=one_pass)


def caps(n):
    return [Capacity(index=i, label=str(100 * (i + 1)), blocks=100 * (i + 1), gib=0.1 * (i + 1))
            for i in range(n)]


# ----------------------------------------------------------------------- plan
def test_cost_unaware_policy_is_one_job_group_for_all_cost_models():
    jobs = make_plan([pol("lru"), pol("rc", cost_aware=True)], ["uniform", "linear", "qwen3_coder_30b"],
                     caps(4), accesses=1000, workers=1, shards_per_worker=1)
    groups = {j.group for j in jobs}
    assert ("lru", ("uniform", "linear", "qwen3_coder_30b")) in groups
    assert {g for g in groups if g[0] == "rc"} == {("rc", ("uniform",)), ("rc", ("linear",)),
                                                    ("rc", ("qwen3_coder_30b",))}
    assert len(groups) == 4


def test_every_capacity_of_every_curve_is_planned_exactly_once():
    cs = caps(13)
    policies = [pol("a", 1.0), pol("b", 3.0), pol("c", 2.0, cost_aware=True)]
    jobs = make_plan(policies, ["uniform", "linear"], cs, accesses=500, workers=4, shards_per_worker=3)
    seen = {}
    for j in jobs:
        for i, b in zip(j.cap_indices, j.capacities):
            assert cs[i].blocks == b
            seen.setdefault(j.group, []).append(i)
    assert len(seen) == 1 + 1 + 2
    for idx in seen.values():
        assert sorted(idx) == list(range(13))
    assert sorted(j.id for j in jobs) == list(range(len(jobs)))


def test_jobs_are_ordered_largest_first_and_heavy_curves_are_split_more():
    jobs = make_plan([pol("light", 1.0), pol("heavy", 4.0)], ["uniform"], caps(16), accesses=100,
                     workers=2, shards_per_worker=4)
    costs = [j.est_cost for j in jobs]
    assert costs == sorted(costs, reverse=True)
    assert jobs[0].policy == "heavy"
    n_heavy = {j.n_shards for j in jobs if j.policy == "heavy"}.pop()
    n_light = {j.n_shards for j in jobs if j.policy == "light"}.pop()
    assert n_heavy > n_light >= 1
    # the estimate is accesses x capacities x weight
    assert all(j.est_cost == 100 * len(j.capacities) * (4.0 if j.policy == "heavy" else 1.0) for j in jobs)
    # shards interleave capacities (each spans small and large ones)
    first = [j for j in jobs if j.policy == "heavy" and j.shard == 0][0]
    assert first.cap_indices == tuple(range(0, 16, n_heavy))


def test_one_pass_policy_is_never_split():
    jobs = make_plan([pol("lru", one_pass=True), pol("fifo")], ["uniform"], caps(20), accesses=100,
                     workers=8, shards_per_worker=4)
    lru = [j for j in jobs if j.policy == "lru"]
    assert len(lru) == 1 and len(lru[0].capacities) == 20


def test_max_capacities_per_job():
    jobs = make_plan([pol("fifo")], ["uniform"], caps(10), accesses=1, workers=1, shards_per_worker=1,
                     max_capacities_per_job=3)
    assert sorted(len(j.capacities) for j in jobs) == [2, 2, 3, 3]


def test_capacity_conversion_and_dedup_by_hand():
    # Qwen3-Coder-30B: 96 KiB/token -> 1.5 MiB per 16-token block, 48 MiB per 512-token block
    cs, notes = resolve_capacities(["1TiB", "24GiB", 16384, "24.0001GiB"], QWEN3_CODER_30B, 16)
    assert [c.blocks for c in cs] == [16384, 699051]
    assert cs[0].gib == 24.0 and cs[0].index == 0 and cs[1].index == 1
    assert len(notes) == 1 and "16384 blocks" in notes[0] and "24GiB" in notes[0]
    cs, notes = resolve_capacities(["24GiB", "48GiB"], QWEN3_CODER_30B, 512)  # 32x fewer blocks
    assert [c.blocks for c in cs] == [512, 1024] and notes == []


def test_capacities_below_the_largest_request_are_flagged():
    cs = caps(3)  # 100, 200, 300 blocks
    warns = oversized_warnings(cs, np.array([50, 150, 250, 120]))
    assert len(warns) == 2
    assert "100 blocks" in warns[0] and "3 request(s)" in warns[0]
    assert "200 blocks" in warns[1] and "1 request(s)" in warns[1]


def test_summary_table_points_and_order():
    assert pick_points(65, 4) == [0, 21, 43, 64]
    assert pick_points(3, 4) == [0, 1, 2]
    cs = caps(2)
    curves = {"uniform": {"a": [{"capacity_index": 0, "compute_savings": 0.1},
                                {"capacity_index": 1, "compute_savings": 0.3}],
                          "b": [{"capacity_index": 0, "compute_savings": 0.5},
                                {"capacity_index": 1, "compute_savings": 0.7}]}}
    text = summary_table(curves, cs, 4).splitlines()
    assert text[2] == "cost model uniform (= block hit ratio)"
    # no capacity in either regime: ranked by the mean over every capacity
    assert "ranked by the mean over all swept capacities" in text[0]
    assert text[5].split() == ["b", "0.5000", "0.7000", "0.6000", "-"]  # no LRU: no margin
    assert text[6].split() == ["a", "0.1000", "0.3000", "0.2000", "-"]
    # capacities that hold the whole trace share one column, marked "+"
    cs3 = caps(3)
    sat = {"uniform": {"a": [{"capacity_index": i, "compute_savings": v} for i, v in enumerate((0.1, 0.9, 0.9))]}}
    text = summary_table(sat, cs3, 4, saturation_blocks=200).splitlines()
    assert text[3].split() == ["policy", "102.4MiB", "204.8MiB+", "all", "mean", "all", "vs", "LRU"]
    assert "2 of 3" in text[0] and text[5].split() == ["a", "0.1000", "0.9000", "0.6333", "-"]


def test_summary_table_ranks_by_regime_marks_oracles_and_names_identical_curves():
    """Hand-computed: HBM = 24 and 48 GiB, pool = 1 and 4 TiB; LRU's HBM mean 0.15."""
    cs = [Capacity(i, f"{g}GiB", 10 * (i + 1), g) for i, g in enumerate((24, 48, 1024, 4096))]
    vals = {"lru": (0.10, 0.20, 0.50, 0.60), "s3fifo": (0.12, 0.22, 0.50, 0.60), "s4fifo": (0.12, 0.22, 0.50, 0.60),
            "belady": (0.20, 0.30, 0.55, 0.60), "fifo": (0.30, 0.02, 0.40, 0.40), "sieve": (0.11, 0.20)}
    curves = {"uniform": {p: [{"capacity_index": i, "compute_savings": v} for i, v in enumerate(vs)]
                          for p, vs in vals.items()}}
    text = summary_table(curves, cs, 4).splitlines()
    assert "ranked by the mean over HBM (24-120 GiB)" in text[0]
    body = [ln.split() for ln in text[5:11]]
    # by HBM mean: belady .25, s3fifo = s4fifo .17, fifo .16 (though its pool mean falls), lru .15
    assert [r[0] for r in body] == ["belady", "s3fifo", "s4fifo", "fifo", "lru", "sieve"]
    assert body[0][:2] == ["belady", "[oracle]"] and body[0][-4:] == ["0.2500", "0.5750", "+10.00", "+2.50"]
    assert body[1][-4:] == ["0.1700", "0.5500", "+2.00", "+0.00"]
    assert body[3][-4:] == ["0.1600", "0.4000", "+1.00", "-15.00"]
    assert body[5][-4:] == ["-", "-", "(2/4", "capacities)"]  # partial: last, no margin
    notes = "\n".join(text[11:])
    assert "best online over HBM: s3fifo, s4fifo (tie), +2.00 points over LRU" in notes
    assert "best online over memory pool: lru, s3fifo, s4fifo (tie), +0.00 points over LRU" in notes
    assert ("identical curves (to 0.0001 at every capacity): s3fifo = s4fifo (S4-FIFO at its default knobs, "
            "without its learned selector, is S3-FIFO)") in notes
    assert "belady =" not in notes and "lru = " not in notes  # equal at 4 TiB only is not identical


# --------------------------------------------------------------------- config
def test_model_yaml_is_the_sim_core_model(compose):
    from sweep.spec import resolve_model

    assert resolve_model(compose()) == QWEN3_CODER_30B


def test_policy_all_lists_every_registered_policy_and_skips_slow_ones(compose):
    from sim_core.policies import REGISTRY
    from sweep.spec import resolve_policies

    cfg = compose("policy=all")
    explicit_only = {n for n, s in REGISTRY.items() if not s.in_all}
    # kept out of policy=all: the ILP's size limit refuses most traces; tier_bound is Belady
    # on a flat cache (a tiered sweep adds it itself)
    assert explicit_only == {"ilp", "tier_bound", "ttl_pin", "agent_end", "agent_next"}
    assert set(cfg.policy) == set(REGISTRY) - explicit_only
    names = [p.name for p in resolve_policies(cfg, exclude_slow=False)[0]]
    assert set(names) == set(REGISTRY) - explicit_only
    slow = {k for k, v in cfg.policy.items() if v.slow}
    kept, notes = resolve_policies(cfg, exclude_slow=True, selected_all=True)
    assert {p.name for p in kept} == set(REGISTRY) - slow - explicit_only
    assert [p.name for p in resolve_policies(compose("policy=[lru,belady,ilp]"), exclude_slow=True,
                                             selected_all=False)[0]] == ["lru", "belady", "ilp"]
    if slow:
        assert any("exclude_slow" in n for n in notes)
    # a slow policy named explicitly still runs
    for name in slow:
        explicit = resolve_policies(compose(f"policy=[lru,{name}]"), exclude_slow=True, selected_all=False)[0]
        assert [p.name for p in explicit] == ["lru", name]


def test_policy_list_and_params(compose):
    from sweep.spec import resolve_policies

    cfg = compose("policy=[lru,belady]", "policy.belady.params.horizon=7")
    ps = resolve_policies(cfg, exclude_slow=True, selected_all=False)[0]
    assert [p.name for p in ps] == ["lru", "belady"]
    assert ps[1].params["horizon"] == 7


def test_capacity_groups(compose):
    from sweep.spec import capacity_sizes

    cs, _ = resolve_capacities(capacity_sizes(compose("capacity=paper65")), QWEN3_CODER_30B, 16)
    assert len(cs) == 65 and cs[0].blocks == 16384 and cs[-1].blocks == 12 * 1024 * 1024 // 1.5
    ratios = np.diff(np.log([c.blocks for c in cs]))
    assert np.allclose(ratios, np.log(512) / 64, rtol=1e-3)
    cs, _ = resolve_capacities(capacity_sizes(compose("capacity=paper4")), QWEN3_CODER_30B, 16)
    assert [c.blocks for c in cs] == [16384, 32768, 65536, 699051]  # paper Table 2
    cs, _ = resolve_capacities(capacity_sizes(compose("capacity=hbm")), QWEN3_CODER_30B, 16)
    assert cs[0].gib == 24 and cs[-1].gib == 120
    cs, _ = resolve_capacities(capacity_sizes(compose("capacity=pool")), QWEN3_CODER_30B, 16)
    assert cs[0].gib == pytest.approx(256, rel=1e-5) and cs[-1].gib == 12 * 1024
    cs, _ = resolve_capacities(capacity_sizes(compose("capacity=custom", "capacity.sizes=[1000,2000]")),
                               QWEN3_CODER_30B, 16)
    assert [c.blocks for c in cs] == [1000, 2000]


def test_cost_models_default_to_all_three_in_a_fixed_order(compose):
    from sweep.spec import resolve_costs, resolve_model

    cfg = compose()
    assert resolve_costs(cfg, resolve_model(cfg)) == ["uniform", "linear", "qwen3_coder_30b"]
    cfg = compose("cost=[linear,uniform]")
    assert resolve_costs(cfg, resolve_model(cfg)) == ["uniform", "linear"]


def test_bundled_trace_subset_and_experiment_name(compose):
    from sweep.traces import experiment_name, load

    cfg = compose("trace=mooncake_conversation", "trace.max_requests=100")
    t = load(cfg.trace, "mooncake_conversation")
    assert (t.n_requests, t.block_tokens, t.source) == (100, 512, "real")
    assert experiment_name(t) == "mooncake_conversation"
    t.source = "synthetic"
    assert experiment_name(t) == "mooncake_conversation-synthetic"
    assert experiment_name(t, "mine") == "mine"


# -------------------------------------------------------------- MLflow records
def _result(blocks, x):
    from sim_core import Result

    return Result(capacity_blocks=blocks, accesses=10, hits=int(10 * x), hit_ratio=x,
                  compute_savings={"uniform": x}, holes_total=1, holes_per_request_mean=1.0,
                  holes_per_request_p50=1.0, holes_per_request_p99=1.0, holes_per_request_max=1,
                  hole_length_mean=2.0, recomputed_blocks=3, evictions=4, oversized_requests=0,
                  oversized_blocks=0, max_resident_blocks=blocks)


def _curve(policy, blocks):
    from sim_core import QWEN3_CODER_30B
    from sweep.keys import CurveIdentity
    from sweep.curves import Curve

    ident = CurveIdentity.make(trace="t", policy=policy, params={}, mode="request", hits="block", seed=0,
                               cost_model="uniform", model=QWEN3_CODER_30B, simulator="s")
    return Curve(policy, "uniform", ident, tuple(blocks))


def test_interrupted_sweep_keeps_finished_curves(tmp_path):
    """A curve whose capacities all arrived is FINISHED; a partial one and the parent
    KILLED, the partial one tagged as such and without means."""
    from mlflow.tracking import MlflowClient

    from sweep.delivery import Delivery
    from sweep.journal import Journal
    from sweep.tracking import Tracker

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cs = caps(2)
    tr = Tracker(uri, "t")
    tr.start_parent(run_name="p", sweep_key="k", params={"a": 1}, tags={"trace_source": "synthetic"},
                    metrics={"m": 1.0}, texts={"config.yaml": "a: 1\n"}, capacities=cs)
    a, b = _curve("a", [c.blocks for c in cs]), _curve("b", [c.blocks for c in cs])
    for c in (a, b):
        tr.open_curve(c, {}, {})
    d = Delivery(tr, Journal(tmp_path / "j.jsonl"), uri)
    a.rows = {0: _result(cs[0].blocks, 0.25), 1: _result(cs[1].blocks, 0.5)}
    b.rows = {0: _result(cs[0].blocks, 0.25)}  # its second capacity never arrives
    d.points(a, dict(a.rows))
    d.points(b, dict(b.rows))
    d.finish(b, "KILLED")
    assert d.drain(30) == 0
    d.stop()
    tr.close_parent("KILLED", [a, b])
    c = MlflowClient(uri)
    runs = {r.info.run_name: r for r in c.search_runs([tr.experiment_id])}
    assert runs["a | uniform"].info.status == "FINISHED"
    assert runs["b | uniform"].info.status == "KILLED"
    assert runs["p"].info.status == "KILLED"
    assert [m.value for m in sorted(c.get_metric_history(runs["a | uniform"].info.run_id, "curve/hit_ratio"),
                                    key=lambda m: m.step)] == [0.25, 0.5]
    assert runs["a | uniform"].data.metrics["hit_ratio_mean"] == 0.375
    assert "hit_ratio_mean" not in runs["b | uniform"].data.metrics
    assert runs["a | uniform"].data.metrics["compute_savings_auc"] == pytest.approx(0.375)  # (0.25 + 0.5) / 2
    # a partial curve logs no summary at all (nor a duration it did not finish)
    assert all(k.startswith("curve/") for k in runs["b | uniform"].data.metrics)
    assert runs["b | uniform"].data.tags["kvsweep.partial"].startswith("1 of 2 capacities")
    arts = {x.path for x in c.list_artifacts(runs["p"].info.run_id)}
    assert {"config.yaml", "curves.csv", "plots"} <= arts


# ------------------------------------------------------------------ end to end
E2E_POLICIES = ["lru", "fifo", "lfu", "belady"]
E2E_COSTS = ["uniform", "linear"]
# Mooncake blocks are 512 tokens = 48 MiB: 1GiB -> 21 blocks, 0.96GiB -> 20 blocks (= the
# explicit 20, deduplicated), so the curve has 4 points: 20, 21, 50, 400 blocks.
E2E_SIZES = "[20,50,1GiB,0.96GiB,400]"
E2E_BLOCKS = [20, 21, 50, 400]


def _write_mooncake(path: Path, n_sessions=30, turns=6, seed=3) -> None:
    """Multi-turn sessions with growing shared prefixes plus some one-off prompts."""
    rng = np.random.default_rng(seed)
    nxt = 0
    events = []
    for s in range(n_sessions):
        ctx = []
        t = float(rng.uniform(0, 600))
        for _ in range(turns):
            new = list(range(nxt, nxt + int(rng.integers(1, 4))))  # sessions stay below 20 blocks
            nxt += len(new)
            ctx = ctx + new
            events.append((t, list(ctx)))
            t += float(rng.exponential(30))
    events.append((700.0, list(range(nxt, nxt + 30))))  # bigger than the two smallest capacities
    events.sort(key=lambda e: e[0])
    with open(path, "w") as f:
        for t, h in events:
            f.write(json.dumps({"timestamp": int(t * 1000), "input_length": 512 * len(h),
                                "output_length": 10, "hash_ids": h}) + "\n")


def run_e2e(d: Path) -> dict:
    """The end-to-end sweep in directory d: its process, the trace file and the store."""
    trace_path = d / "tiny_mooncake.jsonl"
    _write_mooncake(trace_path)
    db = d / "mlflow.db"
    cmd = [sys.executable, "-m", "sweep", "trace=file", f"trace.path={trace_path}", "trace.format=mooncake",
           f"policy=[{','.join(E2E_POLICIES)}]", f"cost=[{','.join(E2E_COSTS)}]", "capacity=custom",
           f"capacity.sizes={E2E_SIZES}", "cluster.num_cpus=2", f"tracking.uri=sqlite:///{db}"]
    proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return {"proc": proc, "dir": d, "trace": trace_path, "uri": f"sqlite:///{db}", "db": db}


@pytest.fixture(scope="module")
def e2e(e2e_sweep):
    return e2e_sweep


def test_e2e_exits_cleanly_and_prints_the_ui_command(e2e):
    p = e2e["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    assert f"mlflow ui --backend-store-uri {e2e['uri']}" in p.stdout
    assert "compute-savings ratio" in p.stdout
    assert "smaller than the largest request" in p.stderr  # 30-block request vs 20/21 blocks
    assert "20 blocks" in p.stderr and "run once" in p.stderr  # dedup note
    assert not (e2e["dir"] / "outputs").exists()  # Hydra wrote nothing into the CWD


def test_e2e_curves_in_mlflow_equal_simulate(e2e):
    from mlflow.tracking import MlflowClient

    from sim_core.traces.loaders import load_trace

    assert e2e["proc"].returncode == 0, e2e["proc"].stderr[-4000:]
    c = MlflowClient(e2e["uri"])
    exp = c.get_experiment_by_name("tiny_mooncake")
    assert exp is not None
    runs = c.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["trace_source"] == "real"
    assert json.loads(parent.data.params["capacities_blocks"]) == E2E_BLOCKS
    arts = {a.path for a in c.list_artifacts(parent.info.run_id)}
    assert {"config.yaml", "curves.csv", "plots", "summary.txt"} <= arts
    # one MLflow view per cost model, linked from the Description and the console
    tags = c.get_experiment(parent.info.experiment_id).tags
    views = [k for k in tags if k.startswith("mlflow.sharedViewState.kvsweep-" + parent.info.run_id[:12])]
    assert len(views) == len(E2E_COSTS)
    assert all(f"viewStateShareKey={k.split('.', 2)[2]}" in e2e["proc"].stdout for k in views)
    work = {k: v for k, v in parent.data.metrics.items() if k.startswith("work.")}
    assert work["work.accesses_replayed"] > 0 and work["work.actor_cpu_s"] > 0, work
    assert f"block accesses in" in e2e["proc"].stdout and f"{work['work.accesses_replayed']:.4g}" in e2e["proc"].stdout
    note = parent.data.tags["mlflow.note.content"]  # MLflow's Description: where to look, and the final table
    assert "report.html" in note and "capacity in MiB" in note and "block accesses in" in note, note
    plots = {a.path for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert plots == {f"plots/curves_{m}.png" for m in E2E_COSTS}

    children = {(r.data.tags["policy"], r.data.tags["cost_model"]): r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {(p, m) for p in E2E_POLICIES for m in E2E_COSTS}
    assert all(re.fullmatch(r"#[0-9a-f]{6}", r.data.tags["mlflow.runColor"]) for r in children.values())

    trace = load_trace(e2e["trace"], "mooncake")
    for p in E2E_POLICIES:
        expected = simulate(trace, p, E2E_BLOCKS, cost_models=E2E_COSTS, model=QWEN3_CODER_30B)
        for m in E2E_COSTS:
            run = children[(p, m)]
            assert run.info.status == "FINISHED"
            assert json.loads(run.data.params["capacities_blocks"]) == E2E_BLOCKS
            for key, want in (("hit_ratio", [r.hit_ratio for r in expected]),
                              ("compute_savings", [r.compute_savings[m] for r in expected]),
                              ("holes_per_request_mean", [r.holes_per_request_mean for r in expected]),
                              ("oversized_requests", [r.oversized_requests for r in expected])):
                hist = sorted(c.get_metric_history(run.info.run_id, "curve/" + key), key=lambda x: x.step)
                # step = the capacity in MiB (MLflow's chart view draws curves over capacity)
                assert [h.step for h in hist] == [round(bytes_for_blocks(b, QWEN3_CODER_30B, 512) / 2**20)
                                                  for b in E2E_BLOCKS], (p, m, key)
                assert np.allclose([h.value for h in hist], want, rtol=0, atol=1e-12), (p, m, key)
            assert [r.oversized_requests for r in expected][:2] == [1, 1]
            csv_path = c.download_artifacts(run.info.run_id, "curve.csv", str(e2e["dir"] / f"dl_{p}_{m}"))
            lines = Path(csv_path).read_text().splitlines()
            assert lines[0].startswith("capacity_index,capacity_label,capacity_gib,capacity_blocks")
            assert len(lines) == 1 + len(E2E_BLOCKS)


def test_trace_travels_to_workers_unchanged():
    from sweep.traces import from_payload, to_payload

    t = Trace.from_requests([[1, 2, 3], [1, 2, 4, 5], [9]], block_tokens=16, name="x", source="real")
    u = from_payload(to_payload(t))
    for k in ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens"):
        assert np.array_equal(getattr(t, k), getattr(u, k))
    assert (u.name, u.source, u.block_tokens) == ("x", "real", 16)


def test_a_worker_trace_has_the_drivers_array_types():
    """ray.get hands a worker read-only arrays, which numba types apart from writable ones,
    so each kernel would compile twice: the per-request arrays arrive writable, the blocks
    stay shared (read-only, not copied)."""
    import numba

    from sweep.traces import from_payload, to_payload

    t = Trace.from_requests([[1, 2, 3], [1, 2, 4, 5], [9]], block_tokens=16, name="x", source="real")
    per_request = ("req_offsets", "arrival_s", "session", "input_tokens", "output_tokens")
    driver = {k: numba.typeof(getattr(t, k)) for k in per_request}
    d = {k: a.copy() if isinstance(a, np.ndarray) else a for k, a in to_payload(t).items()}
    for a in d.values():
        if isinstance(a, np.ndarray):
            a.flags.writeable = False  # as ray.get gives them
    u = from_payload(d)
    for k in per_request:
        assert numba.typeof(getattr(u, k)) == driver[k], k
    assert np.shares_memory(u.blocks, d["blocks"])

def test_a_failing_job_fails_only_its_curves(e2e, tmp_path):
    """belady with a negative horizon raises in the worker: its curve ends FAILED, the
    other policy's curve is FINISHED, the sweep run FAILED and the exit status 1."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "sweep", "trace=file", f"trace.path={e2e['trace']}", "trace.format=mooncake",
         "policy=[fifo,belady]", "policy.belady.params.horizon=-1", "cost=uniform", "capacity=custom",
         "capacity.sizes=[20,50]", "cluster.num_cpus=1", f"tracking.uri={uri}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "horizon" in proc.stderr
    c = MlflowClient(uri)
    runs = {r.info.run_name: r for r in c.search_runs([c.get_experiment_by_name("tiny_mooncake").experiment_id])}
    assert runs["fifo | uniform"].info.status == "FINISHED"
    assert runs["belady | uniform"].info.status == "FAILED"
    assert "horizon" in runs["belady | uniform"].data.tags["error"]
    parent = [r for n, r in runs.items() if n.startswith("tiny_mooncake | flat | ")]
    assert len(parent) == 1 and parent[0].info.status == "FAILED"


def test_saturated_capacities_are_one_unit_of_work():
    # capacities 100..1000; from 600 blocks on the trace fits whole: one replay covers 600..1000
    cs = caps(10)
    jobs = make_plan([pol("fifo"), pol("lru", one_pass=True)], ["uniform"], cs, accesses=10, workers=2,
                     shards_per_worker=2, saturation_blocks=600)
    fifo = [j for j in jobs if j.policy == "fifo"]
    owners = [j for j in fifo if 5 in j.cap_indices]
    assert len(owners) == 1 and set(range(5, 10)) <= set(owners[0].cap_indices)
    assert sorted(i for j in fifo for i in j.cap_indices) == list(range(10))
    # 5 capacities below saturation + 1 shared replay = 6 units of work
    assert sum(j.est_cost for j in fifo) == 6 * 10
    assert sum(j.accesses for j in fifo) == 6 * 10
