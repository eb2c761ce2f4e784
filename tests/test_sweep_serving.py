"""Serving under load in the sweep: the `fleet=` group, one serve() per (policy, capacity,
load), keys that resume, bad input, the table, the report and `advise`.

One `python -m sweep ... fleet=dynamo` run (module-scoped: Ray start-up is slow) on the
first 600 requests of the bundled Mooncake trace; every point in MLflow and the journal
is checked against sim_core.serve called directly with the same settings.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from sim_core import QWEN3_CODER_30B, serve
from sim_core.catalog.capacity import human_gib
from sim_core.serving import serve_metric_fields
from sweep.config import ConfigError
from sweep.fleet import resolve as resolve_fleet
from sweep.journal import Journal
from sweep.report.slo import Slo, load_limit, met_from
from sweep.serving import complete, from_row, serve_row
from sweep.spec import resolve
from sweep.traces import load
from tests.helpers import child_runs, run_module

SIZES = [300, 1000, 4000]  # blocks of 512 tokens: the largest of the 600 requests needs 239
POLICIES = ["lru", "fifo"]
LOADS = [1, 4]
SLO = "200s"  # lru meets it from 1000 blocks up at 1x load, from 4000 at 4x
BASE = ["trace=mooncake_conversation", "trace.max_requests=600", f"policy=[{','.join(POLICIES)}]",
        "capacity=custom", f"capacity.sizes=[{','.join(map(str, SIZES))}]", "fleet=dynamo"]


def _sweep_args(db: Path, *extra: str) -> list[str]:
    return [*BASE, f"fleet.arrival_speedup=[{','.join(map(str, LOADS))}]", f"fleet.slo_ttft={SLO}",
            "cluster.num_cpus=2", f"tracking.uri=sqlite:///{db}", *extra]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("serving")
    db = d / "mlflow.db"
    return {"proc": run_module(d, *_sweep_args(db)), "dir": d, "db": db}


@pytest.fixture(scope="module")
def direct(compose):
    """(policy, load, capacity) -> sim_core.serve's result, with the sweep's settings."""
    trace = load(compose(*BASE[:2]).trace, "mooncake_conversation")
    return {(p, x, b): serve(trace, p, b, engine={"preset": "dynamo"}, arrival_speedup=x, slo={"ttft": SLO},
                             model=QWEN3_CODER_30B, seed=0)
            for p in POLICIES for x in LOADS for b in SIZES}


def _met(direct, q: str, x: int) -> int | None:
    """The smallest capacity from which every larger one has p99 TTFT <= the SLO, by hand."""
    return min((b for b in SIZES if all(direct[(q, x, y)].ttft_p99_s <= 200 for y in SIZES if y >= b)), default=None)


def _gib(blocks: int) -> str:
    return human_gib(blocks * 48 / 1024, digits=3)  # 512-token blocks of 96 KiB per token: 48 MiB each


def test_every_serving_point_in_mlflow_equals_serve(served, direct):
    from mlflow.tracking import MlflowClient

    p = served["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    runs = child_runs(served["db"])
    assert {r.info.run_name for r in runs} == {f"{q} @ {x}x load, round_robin x1 | serve" for q in POLICIES
                                               for x in LOADS}
    c = MlflowClient(f"sqlite:///{served['db']}")
    for r in runs:
        assert r.info.status == "FINISHED"
        q, x = r.data.tags["policy"], int(r.data.tags["load"])
        assert r.data.params["fleet.engine"] == "dynamo" and r.data.params["fleet.slo_ttft"] == SLO
        assert r.data.params["fleet.replicas"] == "1" and r.data.params["fleet.router"] == "round_robin"
        assert r.data.tags["replicas"] == "1" and r.data.tags["router"] == "round_robin"
        for key in serve_metric_fields():
            if isinstance(getattr(direct[(q, x, SIZES[0])], key), dict):
                assert getattr(direct[(q, x, SIZES[0])], key) == {}  # per lower tier: none without tiers
                continue
            want = [getattr(direct[(q, x, b)], key) for b in SIZES]
            got = sorted(c.get_metric_history(r.info.run_id, "curve/" + key), key=lambda m: m.step)
            if all(math.isnan(w) for w in want):  # not measured (no TPOT, ...): not logged
                assert not got, key
            else:
                assert [m.value for m in got] == [float(w) for w in want], (q, x, key)
    for r in runs:  # the summary metric a runs table sorts by
        q, x = r.data.tags["policy"], int(r.data.tags["load"])
        assert r.data.metrics.get("slo_met_from_blocks") == _met(direct, q, x)


def test_the_journal_holds_every_serve_result_whole(served, direct):
    assert served["proc"].returncode == 0, served["proc"].stderr[-4000:]
    got = list(Journal(served["dir"] / "kvsweep-journal.jsonl").results().values())
    assert len(got) == len(direct)
    for want in direct.values():  # per_replica, SLO bounds and every metric, NaN = NaN
        assert any(g == want for g in got)


def test_a_stored_point_reads_back_as_the_same_result(direct):
    import dataclasses

    res = direct[("lru", 4, 1000)]
    for r in (res, dataclasses.replace(res, tier_hits={"dram": 12}, tier_loaded_bytes={"dram": 12 << 20})):
        row = {k: float(v) for k, v in serve_row(r).items() if isinstance(v, (int, float)) and v == v}
        assert from_row(row) == r and complete(row)
        assert not complete({k: v for k, v in row.items() if k != "ttft_p99_s"})  # a batch cut short


def test_the_table_gives_each_load_and_where_the_slo_is_met(served, direct):
    out = served["proc"].stdout
    assert "load 1x: the trace's arrival times" in out and "load 4x: arrival times divided by 4" in out
    assert "TTFT p99 (s)" in out and "reuse" in out and "preempted" in out
    parts = {1: out[out.index("load 1x"):out.index("load 4x")], 4: out[out.index("load 4x"):out.index("highest")]}
    for x, part in parts.items():
        row = next(line for line in part.splitlines() if line.startswith("lru "))
        assert row.split()[1:4] == [f"{direct[('lru', x, b)].ttft_p99_s:.4g}" for b in SIZES]
        for q in POLICIES:
            b = _met(direct, q, x)
            assert (f"{q}: meets it from {_gib(b)} ({b:,} blocks) up" if b else f"{q}: never meets it") in part
    assert _met(direct, "lru", 1) < _met(direct, "lru", 4)  # the load moves it: the test has something to see
    grid = out[out.index("highest load at which a policy meets the SLO"):].splitlines()
    ok = {(x, b): direct[("lru", x, b)].ttft_p99_s <= 200 for x in LOADS for b in SIZES}
    want = ["none" if not ok[(1, b)] else "1x" if not ok[(4, b)] else "4x (all)" for b in SIZES]
    row = next(line for line in grid if line.startswith("lru "))
    assert re.split(r"\s{2,}", row.strip())[1:] == want


def test_another_process_finds_every_result_and_a_cache_replay_is_another_key(served):
    """The same sweep again, as a dry run in a new process: every (policy, load, capacity)
    key is found; without fleet= (a cache replay) none is. (Another load is another key:
    test_every_serving_setting_is_in_the_key; a full resume against the store:
    tests/test_resume.py.)"""
    assert served["proc"].returncode == 0, served["proc"].stderr[-4000:]
    again = run_module(served["dir"], *_sweep_args(served["db"], "sweep.dry_run=true"))
    assert again.returncode == 0 and "nothing to run" in again.stdout, (again.stdout[-2000:], again.stderr[-2000:])
    replay = run_module(served["dir"], *[a for a in _sweep_args(served["db"], "sweep.dry_run=true") if "fleet" not in a])
    assert replay.returncode == 0 and "nothing to run" not in replay.stdout  # a cache replay is another key
    assert len(child_runs(served["db"])) == len(POLICIES) * len(LOADS)  # nothing recorded


def test_the_report_draws_the_loads_and_reads_back_the_same(served, direct, tmp_path):
    from mlflow.tracking import MlflowClient

    from analysis.__main__ import main

    assert served["proc"].returncode == 0, served["proc"].stderr[-4000:]
    c = MlflowClient(f"sqlite:///{served['db']}")
    parent = c.get_run(child_runs(served["db"])[0].data.tags["mlflow.parentRunId"])
    assert "plots/serving.png" in {a.path for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert "lru: meets it from" in parent.data.tags["mlflow.note.content"]
    logged = Path(c.download_artifacts(parent.info.run_id, "report.html", str(tmp_path / "logged"))).read_text()
    assert main(["report", parent.info.run_id, "--tracking-uri", f"sqlite:///{served['db']}",
                 "--out", str(tmp_path / "again")]) == 0
    strip = lambda s: re.sub(r"base64,[A-Za-z0-9+/=]+", "", s)  # noqa: E731
    assert strip(logged) == strip((tmp_path / "again" / "report.html").read_text())
    assert '<section id="serving">' in logged and "fleet=dynamo" in logged
    b = _met(direct, "lru", 1)
    assert f'data-load="1">lru: meets the SLO (p99 TTFT &lt;= 200s) from {_gib(b)} ({b:,} blocks) up' in logged
    assert f"meets it up to 1x load and misses it at 4x at {_gib(b)}" in logged


@pytest.mark.parametrize("override, field", [
    ("fleet.arrival_speedup=0", "fleet.arrival_speedup"),
    ("fleet.slo_ttft=2", "fleet.slo_ttft"),
    ("sim.sample_rate=0.1", "sim.sample_rate"),
    ("fleet.router=bogus", "fleet.router"),
])
def test_bad_serving_input_exits_2_and_records_nothing(tmp_path, override, field):
    p = run_module(tmp_path, *BASE, override, "cluster.num_cpus=1", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    assert p.returncode == 2, p.stderr[-2000:]
    assert field in p.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "kvsweep-journal.jsonl").exists()


@pytest.mark.parametrize("overrides, message", [
    (["fleet.arrival_speedup=[1,-2]"], r"fleet\.arrival_speedup must be a positive number"),
    (["fleet.slo_tpot=fast"], r"fleet\.slo_tpot must be a latency with its unit"),
    (["fleet.replicas=0"], r"fleet\.replicas must be an integer >= 1"),
    (["fleet=vllm"], r"roofline step model .* hardware=h100_sxm"),
    (["fleet=none", "fleet.arrival_speedup=2"], r"fleet\.arrival_speedup is set, but no serving engine"),
    (["tier=hbm_dram"], r"tier\.dram\.bandwidth_bps is not set"),
    (["tier=hbm_dram", "tier.dram.bandwidth_bps=1e9", "fleet.prefill_replicas=1"], r"disaggregated route"),
    (["sim.window=1h"], r"sim\.window"),
    (["policy=[lru,lecar]"], r"policy lecar cannot run in the serving replay"),
])
def test_settings_serving_cannot_take_are_refused(compose, overrides, message):
    from sweep.fleet import setup

    with pytest.raises(ConfigError, match=message):
        cfg = compose(*BASE, *overrides)
        setup(cfg, resolve(cfg, "lru"), [])


def test_a_tier_sweep_serves_each_pool_under_every_replica(compose):
    """tier=... with fleet=...: one serving curve per (policy, pool, load, route), the pool a
    shared tier's size too; each job's deployment carries the pool (no replay here)."""
    from sweep.fleet import setup, variants
    from sweep.plan import resolve_pools

    cfg = compose(*BASE, "tier=hbm_dram_ssd", "tier.dram.capacities=[1000,4000]", "tier.dram.bandwidth_bps=1e18",
                  "tier.ssd.capacities=[64000]", "+tier.ssd.shared=true", "tier.ssd.bandwidth_bps=25e9",
                  "+tier.ssd.latency_s=5e-5")
    fl, sp = setup(cfg, resolve(cfg, "lru"), [])
    pools, _ = resolve_pools(sp.tiers, sp.model, 512)
    vs = variants(sp.policies, fl, pools)
    assert len(vs) == len(sp.policies) * len(pools) * len(fl.loads) * len(fl.routes) and len(pools) == 2
    dep = fl.deployment().with_tiers([dict(t) for t in vs[0].tiers])
    assert [t.shared for t in dep.tiers] == [False, True] and dep.tiers[1].latency_s == 5e-5


def test_independent_weeks_are_refused(compose):
    """freeinference's default trace.weeks=2 joins weeks back to back: not one arrival process."""
    from sweep.fleet import setup

    cfg = compose("trace=freeinference", "policy=lru", "fleet=dynamo")
    with pytest.raises(ConfigError, match=r"trace\.weeks=2 .* set trace\.weeks=1"):
        setup(cfg, resolve(cfg, "lru"), [])


def test_policy_all_leaves_out_what_cannot_serve_and_auto_means_exact(compose):
    from sim_core.serving import cannot_serve
    from sweep.fleet import SERVE, Route, setup

    cfg = compose("trace=mooncake_conversation", "fleet=dynamo")
    fl, sp = setup(cfg, resolve(cfg, "all"), [])
    names = {p.name for p in sp.policies}
    assert names and not any(cannot_serve(n) for n in names) and {"lecar", "workload_aware"}.isdisjoint(names)
    assert sp.sample_rate is None and not sp.sample_auto and sp.cost_models == [SERVE]
    assert fl.loads == (1.0,) and fl.routes == (Route(1, "round_robin"),) and not fl.routed


def test_every_serving_setting_is_in_the_key(compose):
    base = resolve_fleet(compose(*BASE), None)
    keys = {base.key(1)}
    for ov in ("fleet.max_num_seqs=64", "fleet.max_num_batched_tokens=4096", "fleet.replicas=2",
               "fleet.router=least_loaded", "fleet.slo_ttft=2s", "fleet.slo_tpot=100ms", "fleet.step_model=roofline"):
        fl = resolve_fleet(compose(*BASE, ov), {"part": "h100_sxm"})
        keys.add(fl.key(1))
    keys.add(base.key(2))
    assert len(keys) == 9
    same = resolve_fleet(compose(*BASE, "fleet.slo_ttft=2000ms"), None).key(1)
    assert same == resolve_fleet(compose(*BASE, "fleet.slo_ttft=2s"), None).key(1)  # the same bound


def test_slo_readings_by_hand():
    slo = Slo(ttft_s=2.0, tpot_s=0.1)
    rows = [{"capacity_blocks": b, "capacity_gib": b / 10, "ttft_p99_s": t, "tpot_mean_s": 0.05}
            for b, t in ((100, 9.0), (200, 1.5), (300, 3.0), (400, 1.0), (800, 0.5))]
    assert met_from(rows, slo)["capacity_blocks"] == 400  # 200 meets it, 300 does not
    assert met_from(rows[:3], slo) is None
    assert not slo.meets({"ttft_p99_s": 1.0, "tpot_mean_s": 0.2})
    assert slo.meets({"ttft_p99_s": 1.0, "tpot_mean_s": math.nan})  # no request with two tokens
    by = {1.0: {"ttft_p99_s": 1}, 2.0: {"ttft_p99_s": 1.9}, 4.0: {"ttft_p99_s": 5}, 8.0: {"ttft_p99_s": 1}}
    assert load_limit(by, Slo(ttft_s=2.0)) == (2.0, 4.0)  # the first load that misses ends it
    assert load_limit({1.0: {"ttft_p99_s": 3}}, Slo(ttft_s=2.0)) == (None, 1.0)


def test_advise_gives_the_smallest_kv_cache_meeting_the_slo(tmp_path, compose):
    from analysis.serving import POLICIES as SERVED

    out = tmp_path / "advice"
    p = run_module(tmp_path, "advise", *BASE[:2], "capacity=custom", f"capacity.sizes=[{','.join(map(str, SIZES))}]",
             "fleet=dynamo", "fleet.arrival_speedup=2", "fleet.slo_ttft=200s", "tracking.offline=true",
             "analysis.figures=false", f"analysis.out={out}", module="analysis")
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    got = report["serving"]["loads"]["2"]["smallest"]
    trace = load(compose(*BASE[:2]).trace, "mooncake_conversation")
    p99 = {(q, b): serve(trace, q, b, arrival_speedup=2, model=QWEN3_CODER_30B).ttft_p99_s
           for q in SERVED for b in SIZES}
    first = {q: min((b for b in SIZES if all(p99[(q, y)] <= 200 for y in SIZES if y >= b)), default=None)
             for q in SERVED}
    want = min(b for b in first.values() if b is not None)
    assert got["blocks"] == want and want > SIZES[0]  # not simply the smallest capacity
    assert got["policies"] == [q for q in SERVED if first[q] == want]
    rec = next(r for r in report["recommendations"] if r["topic"] == "kv_cache_under_load")
    assert f"{want:,} blocks" in rec["verdict"] and "2x load" in rec["verdict"]
    assert "## KV cache under load" in (out / "report.md").read_text()


def test_advise_under_load_needs_an_slo(tmp_path):
    p = run_module(tmp_path, "advise", *BASE[:2], "fleet=dynamo", "tracking.offline=true", module="analysis")
    assert p.returncode == 2 and "fleet.slo_ttft" in p.stderr
