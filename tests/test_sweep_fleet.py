"""A fleet behind a router in the sweep: fleet.replicas and fleet.router as axes, router
parameters, keys that resume, bad input, the table, the report's routing section and the
fleet `advise` gives.

One `python -m sweep ... fleet=dynamo 'fleet.replicas=[1,2]' 'fleet.router=[round_robin,
least_loaded]'` run (module-scoped: Ray start-up is slow) on the first 300 requests of the
bundled Mooncake trace; every point in MLflow is checked against sim_core.serve called
directly, and the routing numbers are computed here by hand from those results.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim_core import QWEN3_CODER_30B, serve
from sim_core.serving import serve_metric_fields
from sim_core.traces.loaders import load_trace
from sweep.config import ConfigError
from sweep.fleet import Route, resolve as resolve_fleet
from sweep.journal import Journal
from sweep.report.slo import seconds
from sweep.traces import load
from tests.helpers import SHARED_MOONCAKE, child_runs, run_module

SIZES = [300, 1000, 4000]  # blocks of 512 tokens: the largest of the 300 requests needs 236
LOADS = [1, 4]
REPLICAS = [1, 2]
ROUTERS = ["round_robin", "least_loaded"]
SLO = "75s"
BASE = ["trace=mooncake_conversation", "trace.max_requests=300", "policy=[lru]", "capacity=custom",
        f"capacity.sizes=[{','.join(map(str, SIZES))}]", "fleet=dynamo"]
AXES = [f"fleet.replicas=[{','.join(map(str, REPLICAS))}]", f"fleet.router=[{','.join(ROUTERS)}]"]


def _sweep_args(db: Path, *extra: str) -> list[str]:
    return [*BASE, *AXES, f"fleet.arrival_speedup=[{','.join(map(str, LOADS))}]", f"fleet.slo_ttft={SLO}",
            "cluster.num_cpus=2", f"tracking.uri=sqlite:///{db}", *extra]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    db = d / "mlflow.db"
    return {"proc": run_module(d, *_sweep_args(db)), "dir": d, "db": db}


@pytest.fixture(scope="module")
def trace(compose):
    return load(compose(*BASE[:2]).trace, "mooncake_conversation")


@pytest.fixture(scope="module")
def direct(trace):
    """(router, replicas, load, capacity) -> sim_core.serve's result, with the sweep's settings."""
    return {(r, n, x, b): serve(trace, "lru", b, replicas=n, router=r, engine={"preset": "dynamo"}, arrival_speedup=x,
                                slo={"ttft": SLO}, model=QWEN3_CODER_30B, seed=0)
            for r in ROUTERS for n in REPLICAS for x in LOADS for b in SIZES}


def _met(direct, n: int, x: int) -> tuple[str | None, dict]:
    """By hand, per router (lru): the smallest capacity from which every larger one meets the
    SLO, and its p99 there; the best router meets it with the least capacity, then the lowest
    p99 there, then in the sweep's order (None: no router meets it)."""
    met = {}
    for r in ROUTERS:
        ok = [b for b in SIZES if all(direct[(r, n, x, y)].ttft_p99_s <= 75 for y in SIZES if y >= b)]
        if ok:
            met[r] = (min(ok), direct[(r, n, x, min(ok))].ttft_p99_s)
    return min(met, key=lambda r: (*met[r], ROUTERS.index(r)), default=None), met


def test_every_route_is_a_curve_whose_points_equal_serve(swept, direct):
    from mlflow.tracking import MlflowClient

    p = swept["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    runs = child_runs(swept["db"])
    assert {r.info.run_name for r in runs} == {f"lru @ {x}x load, {r} x{n} | serve"
                                               for r in ROUTERS for n in REPLICAS for x in LOADS}
    c = MlflowClient(f"sqlite:///{swept['db']}")
    for run in runs:
        assert run.info.status == "FINISHED"
        tags, params = run.data.tags, run.data.params
        r, n, x = tags["router"], int(tags["replicas"]), int(tags["load"])
        assert tags["route"] == f"{r} x{n}" and params["fleet.router"] == r and params["fleet.replicas"] == str(n)
        for key in serve_metric_fields():
            want = [getattr(direct[(r, n, x, b)], key) for b in SIZES]
            if isinstance(want[0], dict):
                continue  # per lower tier: none without tiers
            got = sorted(c.get_metric_history(run.info.run_id, "curve/" + key), key=lambda m: m.step)
            if all(w != w for w in want):
                assert not got, key
            else:
                assert [m.value for m in got] == [float(w) for w in want], (r, n, x, key)
    got = list(Journal(swept["dir"] / "kvsweep-journal.jsonl").results().values())
    assert len(got) == len(direct) and all(any(g == w for g in got) for w in direct.values())
    assert {g.router for g in got} == set(ROUTERS)


def test_the_table_has_router_and_replicas_columns_and_the_best_router(swept, direct):
    out = swept["proc"].stdout
    assert swept["proc"].returncode == 0, swept["proc"].stderr[-4000:]
    part = out[out.index("load 4x"):]
    assert re.search(r"^router\s+replicas\s+policy\s+TTFT p99 \(s\)", part, re.M)
    for r in ROUTERS:
        for n in REPLICAS:
            row = next(line for line in part.splitlines() if re.match(rf"{r}\s+{n}\s+lru\s", line))
            assert row.split()[3:6] == [f"{direct[(r, n, 4, b)].ttft_p99_s:.4g}" for b in SIZES]
    for x in LOADS:  # the verdict rests on the SLO: the router meeting it with the least cache, its p99 there
        best, met = _met(direct, 2, x)
        line = next(s for s in out.splitlines() if s.strip().startswith(f"2 replicas at {x}x load:")).strip()
        if best is None:
            assert line.startswith(f"2 replicas at {x}x load: no router meets the SLO"), line
            continue
        b, p99 = met[best]
        assert line.startswith(f"2 replicas at {x}x load: {best} meets the SLO from "), line
        assert f"({b:,} blocks) per replica, with lru, p99 TTFT {seconds(p99)} there" in line


def test_another_process_finds_every_result_by_its_key(swept):
    """The same sweep again, as a dry run in a new process: every (route, load, capacity)
    key the first one journaled is found, nothing is left to run. (That another route,
    router or router parameter is another key, and the defaults given are the same key:
    test_routes_and_their_keys; a full resume against the store: tests/test_resume.py.)"""
    assert swept["proc"].returncode == 0, swept["proc"].stderr[-4000:]
    again = run_module(swept["dir"], *_sweep_args(swept["db"], "sweep.dry_run=true"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to run" in again.stdout, again.stdout[-3000:]
    assert len(child_runs(swept["db"])) == len(ROUTERS) * len(REPLICAS) * len(LOADS)  # nothing recorded


def test_the_report_has_a_routing_section_computed_as_by_hand(swept, direct, tmp_path):
    from mlflow.tracking import MlflowClient

    from analysis.__main__ import main

    assert swept["proc"].returncode == 0, swept["proc"].stderr[-4000:]
    c = MlflowClient(f"sqlite:///{swept['db']}")
    parent = c.get_run(child_runs(swept["db"])[0].data.tags["mlflow.parentRunId"]).info.run_id
    assert {"plots/serving.png", "plots/routing.png"} <= {a.path for a in c.list_artifacts(parent, "plots")}
    html = Path(c.download_artifacts(parent, "report.html", str(tmp_path / "logged"))).read_text()
    assert main(["report", parent, "--tracking-uri", f"sqlite:///{swept['db']}", "--out", str(tmp_path / "again")]) == 0
    strip = lambda s: re.sub(r"base64,[A-Za-z0-9+/=]+", "", s)  # noqa: E731
    assert strip(html) == strip((tmp_path / "again" / "report.html").read_text())  # read back: the same
    assert '<section id="routing">' in html and '<section id="answer">' in html
    for x in LOADS:
        best, met = _met(direct, 2, x)
        assert f'data-replicas="2" data-load="{x}" data-best="{best or ""}">' in html
        for r in ROUTERS:  # every number is the one where the router first meets the SLO
            row = re.search(rf'<tr[^>]*data-router="{r}" data-replicas="2" data-load="{x}">(.*?)</tr>', html).group(1)
            cells = re.findall(r"<td>(.*?)</td>", row)
            if r not in met:
                assert cells[3].startswith("never"), cells
                continue
            q = direct[(r, 2, x, met[r][0])]
            assert cells[4] == "lru" and cells[5] == seconds(q.ttft_p99_s) and cells[7] == f"{q.reuse_ratio:.4f}"
            assert cells[6] == f"{100 * (1 - q.ttft_p99_s / 75):.0f}%"
            gap = q.ceiling_reuse_ratio - q.first_reuse_ratio  # the ceiling bounds first-admission reuse
            assert cells[8] == ("-" if gap != gap else f"{100 * gap:.2f}")
            assert cells[9] == f"{q.busy_imbalance:.3f}" and cells[10] == f"{q.jain_busy:.3f}"
        assert re.search(rf'data-replicas="1" data-load="{x}" data-best="[a-z_]*">1 replica at {x}x load: every router',
                         html)


@pytest.mark.parametrize("override, field", [
    ("fleet.router=[round_robin,bogus]", "fleet.router"),
    ("fleet.replicas=0", "fleet.replicas"),
    ("fleet.replicas=[1,0]", "fleet.replicas"),
    ("fleet.router_params={bogus:{a:1}}", "fleet.router_params"),
    ("fleet.router_params={least_loaded:{waiting_weight:-1}}", "fleet.router_params.least_loaded"),
    ("fleet.router_params={least_loaded:{bogus:1}}", "fleet.router_params.least_loaded"),
])
def test_bad_fleet_input_exits_2_and_records_nothing(tmp_path, override, field):
    p = run_module(tmp_path, *BASE, "fleet.router=[round_robin,least_loaded]", override, "cluster.num_cpus=1",
             f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    assert p.returncode == 2, p.stderr[-2000:]
    assert field in p.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "kvsweep-journal.jsonl").exists()


def test_routes_and_their_keys(compose):
    fl = resolve_fleet(compose(*BASE, *AXES, "fleet.replicas=[2,1,2]"), None)
    assert fl.routed and [r.label for r in fl.routes] == ["round_robin x1", "round_robin x2", "least_loaded x1",
                                                          "least_loaded x2"]
    assert fl.route("least_loaded x2") == Route(2, "least_loaded", (("waiting_weight", 4.0),))
    assert len({fl.key(1, r) for r in fl.routes}) == 4
    tuned = resolve_fleet(compose(*BASE, *AXES, "fleet.router_params={least_loaded:{waiting_weight:1}}"), None)
    assert tuned.key(1, tuned.route("least_loaded x2")) != fl.key(1, fl.route("least_loaded x2"))
    assert tuned.key(1, tuned.route("round_robin x2")) == fl.key(1, fl.route("round_robin x2"))
    assert tuned.deployment(tuned.route("least_loaded x2")).router_params == (("waiting_weight", 1.0),)
    assert tuned.deployment(tuned.route("round_robin x2")).router_params == ()
    # another replica count or router is another key; least_loaded's defaults, given, are not
    others = {resolve_fleet(compose(*BASE, *AXES, ov), None).key(1, r) for ov in ("fleet.replicas=3", "fleet.router=random")
              for r in resolve_fleet(compose(*BASE, *AXES, ov), None).routes}
    assert others.isdisjoint(fl.key(1, r) for r in fl.routes)
    given = resolve_fleet(compose(*BASE, *AXES, "fleet.router=[least_loaded,round_robin]",
                                  "fleet.router_params={least_loaded:{waiting_weight:4.0}}"), None)
    assert {given.key(1, r) for r in given.routes} == {fl.key(1, r) for r in fl.routes}
    single = resolve_fleet(compose(*BASE), None)  # a parameterless router keeps the key it had
    assert dict(single.key(1)[0][1]).keys() == {"engine", "step_model", "arrival_speedup", "replicas", "router",
                                                "slo_ttft_s", "slo_tpot_s"}
    with pytest.raises(ConfigError, match=r"fleet\.router_params\.least_loaded is given, but least_loaded is not"):
        resolve_fleet(compose(*BASE, "fleet.router_params={least_loaded:{waiting_weight:1}}"), None)


def test_advise_gives_the_fleet_meeting_the_slo_by_hand(tmp_path, trace):
    from analysis.serving import POLICIES as SERVED

    out = tmp_path / "advice"
    p = run_module(tmp_path, "advise", *BASE[:2], *BASE[3:], *AXES, "fleet.arrival_speedup=4", f"fleet.slo_ttft={SLO}",
             "tracking.offline=true", "analysis.figures=false", f"analysis.out={out}", module="analysis")
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    got = report["serving"]["routing"]["4"]["fleet"]
    res = {(q, r, n, b): serve(trace, q, b, replicas=n, router=r, arrival_speedup=4, model=QWEN3_CODER_30B)
           for q in SERVED for r in ROUTERS for n in REPLICAS for b in SIZES}
    ok = lambda q, r, n, b: res[(q, r, n, b)].ttft_p99_s <= 75  # noqa: E731
    first = {(q, r, n): min((b for b in SIZES if all(ok(q, r, n, y) for y in SIZES if y >= b)), default=None)
             for q in SERVED for r in ROUTERS for n in REPLICAS}
    order = [(q, r, n) for r in ROUTERS for n in REPLICAS for q in SERVED]  # advise's order
    met = [(n, b, res[(q, r, n, b)].ttft_p99_s, order.index((q, r, n)), q, r) for (q, r, n), b in first.items()
           if b is not None]
    n, b, ttft, _, q, r = min(met)
    assert (got["replicas"], got["blocks"], got["router"], got["policy"]) == (n, b, r, q)
    assert got["ttft_p99_s"] == pytest.approx(ttft)
    base = got["round_robin"]
    assert base["met_from_blocks"] == first[(q, "round_robin", n)]
    assert base["reuse_margin_points"] == pytest.approx(
        100 * (res[(q, r, n, b)].reuse_ratio - res[(q, "round_robin", n, b)].reuse_ratio))
    gap = res[(q, r, n, b)].ceiling_reuse_ratio - res[(q, r, n, b)].first_reuse_ratio
    assert got["ceiling_gap_points"] == (None if gap != gap else pytest.approx(100 * gap))
    rec = next(x for x in report["recommendations"] if x["topic"] == "fleet_under_load")
    assert f"{n} replica{'s' if n > 1 else ''} behind {r} with" in rec["verdict"]
    assert f"({b:,} blocks) of KV cache per replica, evicting with {q}" in rec["verdict"]
    assert "## KV cache under load" in (out / "report.md").read_text()


def test_advise_reads_the_sweep_and_names_the_best_policy_where_it_sizes(swept, trace, compose):
    """advise on the sweep's settings reads the sweep's results instead of replaying them; the
    policy it names at the fleet and size it names is, of every policy stored there (the
    sweep's and advise's own, in the journal) that meets the SLO from there up, the one with
    the lowest p99 TTFT; and its quick-demotion step says the same, under load."""
    from dataclasses import replace

    from analysis.serving import POLICIES as SERVED
    from sim_core import get_policy
    from sim_core.digest import source_digest, trace_digest
    from sweep.fleet import identity
    from sweep.spec import choice

    assert swept["proc"].returncode == 0, swept["proc"].stderr[-4000:]
    out = swept["dir"] / "advice"
    p = run_module(swept["dir"], "advise", *BASE[:2], *BASE[3:], *AXES, "fleet.arrival_speedup=4",
                   f"fleet.slo_ttft={SLO}", f"tracking.uri=sqlite:///{swept['db']}", "analysis.figures=false",
                   f"analysis.out={out}", module="analysis")
    assert p.returncode == 0, p.stderr[-3000:]
    stored = len(ROUTERS) * len(REPLICAS) * len(SIZES)  # the sweep's lru points at 4x
    assert re.search(rf"serving results: {stored} read from earlier sweeps", p.stderr), p.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    got = report["serving"]["routing"]["4"]["fleet"]
    fl = resolve_fleet(compose(*BASE, *AXES, "fleet.arrival_speedup=4", f"fleet.slo_ttft={SLO}"), None)
    known = Journal(swept["dir"] / "kvsweep-journal.jsonl").results()
    route = f"{got['router']} x{got['replicas']}"

    def at(q, b):
        ident = identity(fl, replace(choice(get_policy(q)), load=4.0, route=route), trace=trace_digest(trace),
                         simulator=source_digest(), seed=0, model=QWEN3_CODER_30B)
        return known[ident.point_key(b)]

    meeting = {q: at(q, got["blocks"]).ttft_p99_s for q in SERVED
               if all(at(q, y).ttft_p99_s <= 75 for y in SIZES if y >= got["blocks"])}
    assert got["policy"] == min(meeting, key=lambda q: (meeting[q], SERVED.index(q)))
    quick = next(r for r in report["recommendations"] if r["topic"] == "quick_demotion")
    assert quick["verdict"].endswith("(under load)") and f"evict with {got['policy']}" in quick["action"] or (
        got["policy"] == "s3fifo" and "enable S3-FIFO" in quick["action"])


def test_the_sglang_preset_file_replays_sglangs_scheduler(compose):
    """fleet=sglang (conf/fleet/sglang.yaml) is the engine preset "sglang": SGLang's scheduler
    with its own limits, a result of its own beside the same fleet under vLLM's."""
    from sweep.spec import resolve_counting

    def fleet(*ov):
        cfg = compose(*ov)
        return resolve_fleet(cfg, resolve_counting(cfg)[1])

    fl = fleet(*BASE, "fleet=sglang")
    eng = fl.deployment().engine
    assert (eng.name, eng.scheduler, eng.max_num_seqs, eng.step_model) == ("sglang", "sglang", 256, "dynamo")
    assert fl.params()["fleet.engine"] == "sglang"
    assert fl.key(1) != fleet(*BASE, "fleet=vllm", "fleet.step_model=dynamo").key(1)


def test_capacity_auto_is_what_the_gpu_memory_leaves_and_bytes_count_the_fleets_model(compose):
    """capacity.sizes=[auto] in a fleet sweep is each replica's KV cache from its GPU's memory:
    Qwen3-30B-A3B on one H100 at vLLM's 0.9 leaves 232 blocks of 512 tokens, within 1% of
    aiconfigurator-core's own estimate (118,341 tokens); sizes in bytes convert at the KV
    bytes of fleet.model (Qwen3-32B: 256 KiB per token, so 4 GiB is 32 blocks), not the
    model group's; auto without a fleet, or without a GPU and model, is refused."""
    from sweep.fleet import capacities
    from sweep.plan import resolve_capacities
    from sweep.spec import capacity_sizes, resolve_counting

    def caps(*ov):
        cfg = compose(*BASE[:3], "capacity=custom", *ov)
        fl = resolve_fleet(cfg, resolve_counting(cfg)[1])
        return capacities(fl, capacity_sizes(cfg), QWEN3_CODER_30B, 512)[0]

    got = caps("capacity.sizes=[auto,200]", "fleet=vllm", "hardware=h100_sxm", "fleet.model=Qwen/Qwen3-30B-A3B",
               "fleet.step_model=measured")
    assert [(c.label, c.blocks) for c in got] == [("200", 200), ("auto", 232)]
    assert abs(232 * 512 - 118_341) / 118_341 < 0.01
    assert [c.blocks for c in caps("capacity.sizes=[4GiB]", "fleet=vllm", "hardware=h100_sxm",
                                   "fleet.model=Qwen/Qwen3-32B")] == [32]
    assert [c.blocks for c in caps("capacity.sizes=[16GiB]", "fleet=dynamo")] == [16 * 2**30 // (48 * 4 * 128 * 2 * 2 * 512)]
    with pytest.raises(ConfigError, match="hardware="):
        caps("capacity.sizes=[auto]", "fleet=dynamo")
    with pytest.raises(ConfigError, match=r"capacity.sizes: 300: .* holds at most 232 blocks"):
        caps("capacity.sizes=[auto,300]", "fleet=vllm", "hardware=h100_sxm", "fleet.model=Qwen/Qwen3-30B-A3B")
    with pytest.raises(ConfigError, match=re.escape("fleet=vllm, dynamo or sglang")):
        resolve_capacities(["auto"], QWEN3_CODER_30B, 512)


def test_a_measured_fleet_names_its_model_gpu_and_parallelism(compose):
    """fleet.step_model=measured: the deployment each job replays carries the model, the GPU
    of the hardware group and fleet.tp; each is part of the results' key; what it lacks is
    refused naming the key, before any job."""
    from sweep.spec import resolve_counting

    measured = [*BASE, "fleet=vllm", "fleet.step_model=measured"]

    def fleet(*ov):
        cfg = compose(*ov, *([] if any(o.startswith("hardware=") for o in ov) else ["hardware=h100_sxm"]))
        return resolve_fleet(cfg, resolve_counting(cfg)[1])

    fl = fleet(*measured, "fleet.model=Qwen/Qwen3-30B-A3B", "fleet.tp=2")
    d = fl.deployment()
    assert (d.gpu, d.model_ref.name, d.engine.tp, d.engine.step_model) == ("h100_sxm", "Qwen/Qwen3-30B-A3B", 2,
                                                                          "measured")
    assert "Qwen/Qwen3-30B-A3B" in fl.describe() and fl.params()["fleet.model"] == "Qwen/Qwen3-30B-A3B"
    # the data's version, as the replay names it (ServeResult.step_model), in the title and the params
    from sim_core.serving.measured import aic

    data = f"vllm {aic.data_version('h100_sxm', 'vllm')} data (aiconfigurator-core {aic.version()})"
    assert data in fl.describe() and fl.params()["fleet.step_data"] == data
    assert data in serve(load_trace(SHARED_MOONCAKE).subset(20), "lru", 400, deployment=d).step_model
    keys = {fl.key(1), fleet(*measured, "fleet.model=Qwen/Qwen3-30B-A3B").key(1),
            fleet(*measured, "fleet.model=Qwen/Qwen3-32B", "fleet.tp=2").key(1),
            fleet(*BASE, "fleet=vllm", "fleet.tp=2").key(1)}
    assert len(keys) == 4  # tp, the model and the step model each make another result
    for ov, field in ((["hardware=none", "fleet.model=Qwen/Qwen3-30B-A3B"], "hardware="),
                      ([], "fleet.model"), (["fleet.model=nobody/nothing"], "nobody/nothing"),
                      (["fleet.model=Qwen/Qwen3-30B-A3B", "fleet.backend=tgi"], "fleet.backend"),
                      (["fleet.model=Qwen/Qwen3-30B-A3B", "fleet.tp=0"], "fleet.tp")):
        with pytest.raises(ConfigError, match=re.escape(field)):
            fleet(*measured, *ov)


def test_a_measured_fleet_sweep_records_what_serve_gives(tmp_path, compose):
    """One measured-step-time sweep (Qwen3-30B-A3B on two H100s per replica, vLLM's data):
    its points in MLflow are sim_core.serve's with that deployment, step for step."""
    from mlflow.tracking import MlflowClient

    from sim_core.serving import deployment

    db = tmp_path / "mlflow.db"
    p = run_module(tmp_path, "trace=mooncake_conversation", "trace.max_requests=100", "policy=[lru]", "capacity=custom",
                   "capacity.sizes=[300,1000]", "fleet=vllm", "fleet.step_model=measured", "hardware=h100_sxm",
                   "fleet.model=Qwen/Qwen3-30B-A3B", "fleet.tp=2", "fleet.replicas=2", "cluster.num_cpus=1",
                   f"tracking.uri=sqlite:///{db}")
    assert p.returncode == 0, p.stderr[-4000:]
    (run,) = child_runs(db)
    assert run.data.params["fleet.model"] == "Qwen/Qwen3-30B-A3B" and run.data.params["fleet.tp"] == "2"
    d = deployment(replicas=2, engine={"preset": "vllm", "step_model": "measured", "tp": 2}, hardware="h100_sxm",
                   model="Qwen/Qwen3-30B-A3B")
    first = load(compose("trace=mooncake_conversation", "trace.max_requests=100").trace, "mooncake_conversation")
    want = [serve(first, "lru", b, deployment=d, seed=0) for b in (300, 1000)]
    c = MlflowClient(f"sqlite:///{db}")
    for key in ("ttft_p99_s", "tpot_mean_s", "reuse_ratio"):
        got = sorted(c.get_metric_history(run.info.run_id, "curve/" + key), key=lambda m: m.step)
        assert [m.value for m in got] == [float(getattr(w, key)) for w in want], key
    assert want[0].step_model.startswith("measured: Qwen/Qwen3-30B-A3B on h100_sxm") and want[0].ttft_p99_s != want[1].ttft_p99_s
