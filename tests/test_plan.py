"""The deployment planner (analysis.plan, `python -m analysis plan`; docs/planning.md).

Its answers are checked against a brute force that calls sim_core.serve on every candidate
of small spaces and prices them by hand, on the first 300 requests of the bundled Mooncake
trace at 4x its request rate (each replay well under a second).
"""
from __future__ import annotations

import json
import re

import pytest

from analysis import plan
from analysis.planner.report import text
from analysis.planner.search import Lane, search
from analysis.planner.slo import as_slo
from analysis.planner.space import Candidate
from sim_core import deployment, serve
from sim_core.traces.loaders import load_trace
from tests.helpers import SHARED_MOONCAKE, child_runs, run_module

CAP = 400  # blocks per replica: the largest of the 300 requests needs 239
LOAD = 4.0
PRICES = {"gpu": {"h100_sxm": 3.0, "h200": 4.0, "l40s": 1.86}}
MEASURED = "Qwen/Qwen3-30B-A3B"  # bundled with aiconfigurator-core; its tables are built once and cached on disk


@pytest.fixture(scope="module")
def trace():
    return load_trace(SHARED_MOONCAKE).subset(300)


def _secs(text: str) -> float:
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text[:-1])


def brute(trace, space: dict, slo: dict, engine="dynamo"):
    """Every candidate served directly and priced by hand: [(cost, ttft p99, axes, meets)],
    and the cheapest meeting `slo` (ties: the lower TTFT p99). `slo` bounds ttft_p99 and
    tpot_mean (with units) and may set a goodput floor over the TTFT bound."""
    rows = []
    for gpu in space.get("gpu", ["h100_sxm"]):
        for reps in space["replicas"]:
            for router in space["router"]:
                for pol in space.get("policy", ["lru"]):
                    r = serve(trace, pol, CAP, replicas=reps, router=router, engine=engine, hardware=gpu,
                              arrival_speedup=LOAD, slo={"ttft": slo["ttft_p99"]})
                    ok = r.ttft_p99_s <= _secs(slo["ttft_p99"])
                    ok &= "tpot_mean" not in slo or r.tpot_mean_s <= _secs(slo["tpot_mean"])
                    ok &= "goodput" not in slo or r.goodput_ratio >= slo["goodput"]
                    rows.append((reps * PRICES["gpu"][gpu], r.ttft_p99_s,
                                 {"gpu": gpu, "replicas": reps, "router": router, "policy": pol}, ok))
    ok = [x for x in rows if x[3]]
    return rows, (min(ok, key=lambda x: (x[0], x[1])) if ok else None)


EIGHT = [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("engine, space, slo", [
    ("dynamo", {"replicas": EIGHT, "router": ["round_robin", "kv_router"], "policy": ["lru", "fifo"]},
     {"ttft_p99": "50s"}),
    ("vllm", {"gpu": ["h100_sxm", "l40s"], "replicas": EIGHT, "router": ["round_robin", "kv_router"]},
     {"ttft_p99": "150s"}),
    # TPOT is far from monotone here (kv_router: 42.5 ms mean at 4 replicas, 42.8 at 5)
    ("dynamo", {"replicas": EIGHT, "router": ["round_robin", "kv_router"]}, {"ttft_p99": "50s", "tpot_mean": "41ms"}),
    ("dynamo", {"replicas": EIGHT, "router": ["round_robin", "kv_router"]}, {"ttft_p99": "100s", "goodput": 0.97}),
])
def test_answer_equals_brute_force(trace, engine, space, slo):
    p = plan(trace, slo=slo, space=space, capacity_blocks=CAP, engine=engine, arrival_speedup=LOAD, prices=PRICES)
    rows, best = brute(trace, space, slo, engine)
    assert best is not None and p.best is not None
    assert p.best["cost_per_hour"] == pytest.approx(best[0])
    assert {k: p.best[k] for k in best[2]} == best[2]
    assert p.evaluated < len(rows)  # the brute force replays every candidate, the plan fewer
    assert len(p.candidates) == p.evaluated and p.space_size == len(rows)
    # each GPU type's runner-up is its own cheapest
    for gpu in space.get("gpu", ["h100_sxm"]):
        assert p.runners_up[gpu]["cost_per_hour"] == pytest.approx(min(x[0] for x in rows
                                                                       if x[2]["gpu"] == gpu and x[3]))
    # what the plan read is what serve says, and it judged each candidate as the brute force did
    by_axes = {tuple(sorted(x[2].items())): x for x in rows}
    for c in p.candidates:
        x = by_axes[tuple(sorted((k, c[k]) for k in best[2]))]
        assert c["ttft_p99_s"] == x[1] and c["meets"] == x[3]


DISAGG_CAP = 2000  # disaggregated replays at 400 or 800 blocks stall in sim_core (reported); 2000 do not here
DISAGG = {"prefill_replicas": [0, 1, 2, 3], "replicas": [1, 2, 3, 4, 5, 6], "router": ["round_robin", "kv_router"]}


@pytest.fixture(scope="module")
def disagg_rows(trace):
    """Every candidate of DISAGG served directly: {(P, D, router): ServeResult}."""
    return {(pre, reps, router): serve(trace, "lru", DISAGG_CAP, prefill_replicas=pre, replicas=reps, router=router,
                                       engine="dynamo", arrival_speedup=LOAD)
            for pre in DISAGG["prefill_replicas"] for reps in DISAGG["replicas"] for router in DISAGG["router"]}


@pytest.mark.parametrize("slo, shape", [
    # TPOT wants more aggregated replicas than the space has (25 ms at 7), 2 prefill + 2 decode meet both
    ({"ttft_p99": "30s", "tpot_mean": "30ms"}, "disaggregated"),
    # TTFT alone: 4 aggregated replicas behind the KV router (3.24 s); 3 + 2 disaggregated cost more
    ({"ttft_p99": "4s"}, "aggregated"),
])
def test_disaggregated_answer_equals_brute_force(trace, disagg_rows, slo, shape):
    """Aggregated and disaggregated shapes in one space: the plan's answer is the brute
    force's cheapest (same cost, same candidate), each group's runner-up its own cheapest,
    a disaggregated candidate costs all its GPUs, and the lanes the prefill bound rules out
    (too few prefill replicas) miss at every decode count."""
    p = plan(trace, slo=slo, space=DISAGG, capacity_blocks=DISAGG_CAP, arrival_speedup=LOAD, prices=PRICES)
    sl = as_slo(slo)
    rows = [((pre + reps) * 3.0, r.ttft_p99_s, {"prefill_replicas": pre, "replicas": reps, "router": router},
             sl.meets(r)) for (pre, reps, router), r in disagg_rows.items()]
    best = min((x for x in rows if x[3]), key=lambda x: (x[0], x[1]))
    assert p.best["cost_per_hour"] == pytest.approx(best[0])
    assert {k: p.best[k] for k in best[2]} == best[2]
    assert p.best["gpus"] == p.best["prefill_replicas"] + p.best["replicas"]
    assert (p.best["prefill_replicas"] > 0) == (shape == "disaggregated")
    assert p.evaluated < len(rows) == p.space_size
    for group, agg in (("h100_sxm", True), ("h100_sxm disaggregated", False)):
        costs = [x[0] for x in rows if x[3] and (x[2]["prefill_replicas"] == 0) == agg]
        got = p.runners_up[group]
        assert (got is None and not costs) or got["cost_per_hour"] == pytest.approx(min(costs))
    for c in p.candidates:  # what the plan read is what serve says
        r = disagg_rows[(c["prefill_replicas"], c["replicas"], c["router"])]
        assert c["ttft_p99_s"] == r.ttft_p99_s and c["meets"] == sl.meets(r)
    pruned = [ln for ln in p.lanes if ln.cands[0].prefill_replicas and ln.bound_start == len(ln.cands)]
    assert pruned  # one prefill replica cannot compute the prompts in time
    for ln in pruned:
        assert not any(x[3] for x in rows if x[2]["prefill_replicas"] == ln.cands[0].prefill_replicas)
    other = "runner-up on h100_sxm " + ("aggregated" if shape == "disaggregated" else "disaggregated")
    assert other in text(p, trace.name)


def test_heavier_load_over_disaggregated_shapes(trace, disagg_rows):
    """check_load over aggregated and disaggregated shapes: the plan at 2x load, asked for 2x
    that (LOAD, where disagg_rows were served), answers the brute force's cheapest there."""
    slo = {"ttft_p99": "30s", "tpot_mean": "30ms"}
    p = plan(trace, slo=slo, space=DISAGG, capacity_blocks=DISAGG_CAP, arrival_speedup=LOAD / 2, check_load=2,
             prices=PRICES)
    sl = as_slo(slo)
    best = min(((pre + reps) * 3.0, r.ttft_p99_s) for (pre, reps, _), r in disagg_rows.items() if sl.meets(r))
    h = p.heavier
    assert h["load"] == LOAD and h["best"]["cost_per_hour"] == pytest.approx(best[0])
    assert h["best"]["ttft_p99_s"] == best[1] and h["best"]["cost_per_hour"] >= p.best["cost_per_hour"]


def test_gpu_types_that_replay_alike_share_replays(trace):
    """Dynamo's polynomial does not read the GPU: two GPU types replay once per candidate."""
    space = {"gpu": ["h100_sxm", "h200"], "replicas": [2, 4, 6], "router": ["kv_router"]}
    p = plan(trace, slo={"ttft_p99": "50s"}, space=space, capacity_blocks=CAP, arrival_speedup=LOAD, prices=PRICES)
    assert p.replays < p.evaluated and {c["gpu"] for c in p.candidates} == {"h100_sxm", "h200"}


def test_measured_step_times_per_gpu(trace):
    """step_model=measured: each GPU type replays on its own measured data (none shared),
    the answer's replay names the data, and it equals a brute force of the space."""
    # 30 s: 4 x h100_sxm (20.0 s) and 3 x h200 (26.5 s) cost the same 24 USD/h: the lower TTFT wins
    space = {"gpu": ["h100_sxm", "h200"], "tp": [2], "replicas": [2, 3, 4, 5], "router": ["kv_router"]}
    slo = {"ttft_p99": "30s"}
    p = plan(trace, slo=slo, space=space, capacity_blocks=CAP, engine="vllm", step_model="measured",
             model=MEASURED, arrival_speedup=LOAD, prices=PRICES)
    assert p.replays == p.evaluated  # no replay shared between the two GPU types
    assert "measured" in p.best["result"].step_model and "tp 2" in p.best["result"].step_model.lower()
    rows = []
    for gpu in space["gpu"]:
        for reps in space["replicas"]:
            r = serve(trace, "lru", CAP, replicas=reps, router="kv_router", hardware=gpu, model=MEASURED,
                      engine={"preset": "vllm", "step_model": "measured", "tp": 2}, arrival_speedup=LOAD)
            rows.append((reps * 2 * PRICES["gpu"][gpu], r.ttft_p99_s, gpu, reps))
    best = min((x for x in rows if x[1] <= 30.0), key=lambda x: (x[0], x[1]))
    assert (p.best["gpu"], p.best["replicas"], p.best["cost_per_hour"]) == (best[2], best[3], pytest.approx(best[0]))
    assert p.best["ttft_p99_s"] == best[1]


def test_capacity_from_memory_per_gpu(trace):
    """capacity_blocks="auto": each candidate's KV cache is what its GPU's memory leaves at its
    TP (an H200 holds more than an H100), the answer equals a brute force of serve() with
    capacity_blocks=None over the space, and a GPU and TP whose cache cannot hold the trace's
    largest request (237 blocks under vLLM's limits; an H100 at TP 1 leaves 232) is refused,
    naming both."""
    from sim_core.serving import kv_capacity

    space = {"gpu": ["h100_sxm", "h200"], "tp": [2], "replicas": [1, 2, 3], "router": ["kv_router"]}
    slo = {"ttft_p99": "30s"}
    eng = {"preset": "vllm", "step_model": "measured", "tp": 2}
    p = plan(trace, slo=slo, space=space, capacity_blocks="auto", engine="vllm", step_model="measured",
             model=MEASURED, arrival_speedup=LOAD, prices=PRICES)
    caps = {g: kv_capacity(deployment(engine=eng, hardware=g, model=MEASURED), None, 512)[0] for g in space["gpu"]}
    assert caps["h200"] > caps["h100_sxm"] >= 237
    assert {d["gpu"]: d["capacity_blocks"] for d in p.candidates} == caps
    rows = []
    for gpu in space["gpu"]:
        for reps in space["replicas"]:
            r = serve(trace, "lru", None, replicas=reps, router="kv_router", hardware=gpu, model=MEASURED,
                      engine=eng, arrival_speedup=LOAD)
            assert r.capacity_blocks == caps[gpu]
            rows.append((reps * 2 * PRICES["gpu"][gpu], r.ttft_p99_s, gpu, reps))
    best = min((x for x in rows if x[1] <= 30.0), key=lambda x: (x[0], x[1]))
    assert (p.best["gpu"], p.best["replicas"], p.best["ttft_p99_s"]) == (best[2], best[3], best[1])
    assert f"KV cache from GPU memory: {caps[best[2]]:,} blocks per replica" in text(p)
    # the fleet ceiling bounds the reuse found at first admissions; with preemptions (3 x H100
    # here) reuse_ratio also counts re-admissions and exceeds it: the gap is taken from the former
    pre = [d for d in p.candidates if d["result"].preemptions > 0]
    assert pre and any(d["reuse_ratio"] > d["ceiling_reuse_ratio"] for d in pre)
    assert all(d["ceiling_gap_points"] >= 0 for d in p.candidates)
    r = p.runners_up["h100_sxm"]["result"]
    assert f"reuse {r.reuse_ratio:.4f} ({r.first_reuse_ratio:.4f} at first admission)" in text(p)
    with pytest.raises(ValueError, match=r"capacity_blocks=auto gives 232 blocks per replica on 1 x h100_sxm"
                                         r".*cannot hold request 97 \(237 blocks"):
        plan(trace, slo=slo, space={**space, "tp": [1], "gpu": ["h100_sxm"]}, capacity_blocks="auto", engine="vllm",
             step_model="measured", model=MEASURED, arrival_speedup=LOAD, prices=PRICES)


def test_the_answer_meets_the_slo_replayed_alone(trace):
    p = plan(trace, slo={"ttft_p99": "50s"}, space={"replicas": [1, 2, 3, 4, 5, 6], "router": ["kv_router"]},
             capacity_blocks=CAP, engine="dynamo", policy="lru", arrival_speedup=LOAD, prices=PRICES)
    b = p.best
    d = deployment(replicas=b["replicas"], router=b["router"], engine={"preset": "dynamo", "tp": b["tp"]},
                   hardware=b["gpu"])
    again = serve(trace, b["policy"], CAP, deployment=d, arrival_speedup=LOAD)
    assert again.ttft_p99_s <= 50.0
    assert b["gpus"] == b["replicas"] and b["cost_per_hour"] == pytest.approx(3.0 * b["replicas"])


def test_an_infeasible_slo_names_the_closest_and_recommends_nothing(trace):
    space = {"replicas": [1, 2, 3, 4], "router": ["round_robin", "kv_router"]}
    p = plan(trace, slo={"ttft_p99": "1s"}, space=space, capacity_blocks=CAP, arrival_speedup=LOAD, prices=PRICES)
    assert p.best is None and all(v is None for v in p.runners_up.values())
    rows, best = brute(trace, space, {"ttft_p99": "1s"})
    assert best is None
    closest = min(rows, key=lambda x: (x[1], x[0]))  # under monotonicity, the most replicas of the best shape
    c = p.closest
    assert {k: c[k] for k in closest[2]} == closest[2]
    assert c["misses"]["ttft_p99"] == pytest.approx(closest[1] / 1.0 - 1)
    out = text(p, trace.name)
    assert "no candidate meets the SLO: nothing is recommended" in out
    assert f"closest: {c['label']}" in out and f"misses by {c['misses']['ttft_p99']:.1%}" in out
    assert "cheapest:" not in out


@pytest.mark.parametrize("kw, field", [
    ({"space": {"replicas": []}}, "space.replicas"),
    ({"space": {"router": []}}, "space.router"),
    ({"space": {"gpu": ["gh200"]}}, "prices.gpu.gh200"),  # the default prices leave gh200 out
    ({"slo": {"ttft_p99": 2}}, "slo.ttft_p99"),
    ({"slo": {"tpot_mean": "50"}}, "slo.tpot_mean"),
    ({"slo": {"goodput": 0.99}}, "slo.goodput"),
    ({"space": {"host_pool": [1, 2]}}, "space.host_pool"),
    ({"space": {"prefill_replicas": [-1, 2]}}, "space.prefill_replicas"),
    ({"engine": "sglang", "space": {"prefill_replicas": [0, 1]}}, "space.prefill_replicas=1"),  # vLLM's handoff only
    ({"step_model": "measured"}, "model: the measured step model times a named model"),
    ({"step_model": "measured", "model": "no-such-org/no-such-model"}, "model: "),
    ({"step_model": "measured", "model": MEASURED, "backend": "tensorrt"}, "backend: "),
    ({"backend": "sglang"}, "backend=sglang: picks the measured data"),
    ({"step_model": "measured", "model": MEASURED, "space": {"gpu": ["gh200"]}, "prices": {"gpu": {"gh200": 4.0}}},
     "space.gpu=gh200"),
    ({"step_model": "measured", "model": MEASURED, "space": {"tp": [3]}}, "space.tp=3"),
    ({"step_model": "measured", "model": MEASURED, "space": {"tp": [1]}}, "capacity_blocks=400 on 1 x h100_sxm"),
    ({"space": {"replicas": [0, 1]}}, "space.replicas"),
    ({"prices": {"gpu": {"h100_sxm": -1}}}, "prices.gpu.h100_sxm"),
    ({"capacity_blocks": 100}, "capacity_blocks=100 cannot hold request"),
])
def test_bad_input_names_the_field(trace, kw, field):
    args = {"slo": {"ttft_p99": "2s"}, "space": {"replicas": [1, 2]}, "capacity_blocks": CAP, **kw}
    with pytest.raises(ValueError, match=re.escape(field)):
        plan(trace, **args)


def _table_search(ttft: list, slo_s: float):
    """The search over one lane of made-up results (replicas 1..n, p99 TTFT `ttft`)."""
    cands = [Candidate("h100_sxm", 1, r, "round_robin", "lru") for r in range(1, len(ttft) + 1)]
    lane = Lane(shape=cands[0].shape, cands=cands, costs=[float(c.replicas) for c in cands])

    class R:  # the fields the SLO reads
        def __init__(self, t):
            self.ttft_p99_s = t

    gen = search([lane], as_slo({"ttft_p99": f"{slo_s}s"}), order=lambda c: c.replicas)
    asked, c = [], next(gen)
    try:
        while True:
            asked.append(c.replicas)
            c = gen.send(R(ttft[c.replicas - 1]))
    except StopIteration as stop:
        return stop.value, asked


def test_bisection_replays_few_when_monotone():
    ttft = [50, 20, 9, 6, 4, 3, 2.5, 2.2, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2]
    out, asked = _table_search(ttft, 2.0)
    assert out.best[0].replicas == 9 and not out.lanes[0].scanned
    assert len(asked) <= 5 < len(ttft)


def test_a_monotonicity_failure_is_seen_and_scanned():
    # the bisection alone would answer 7 replicas (8 meets, 4 and 6 miss, 7 meets); 6 misses
    # by more than 4 does, so the lane is scanned from the start and 3 is found
    ttft = [10, 9, 1.5, 3, 2.5, 3.2, 1, 1]
    out, asked = _table_search(ttft, 2.0)
    assert out.best[0].replicas == 3
    assert "ttft_p99 goes from 3 at 4 to 3.2 at 6 replicas" in out.lanes[0].scanned
    assert out.notes and asked[:3] == [8, 4, 6] and asked[3:] == [1, 2, 3]


def test_the_prefill_bound_is_safe_and_prunes(trace):
    """At 40x load the bound rules out the fewest replicas without replaying them; the
    most replicas it rules out, replayed here, indeed miss."""
    space = {"replicas": [1, 2, 3, 4, 5, 6, 7, 8], "router": ["round_robin"]}
    p = plan(trace, slo={"ttft_p99": "2s"}, space=space, capacity_blocks=CAP, arrival_speedup=40.0, prices=PRICES)
    start = p.lanes[0].bound_start  # candidates [0, start) are ruled out: replicas 1..start
    assert p.pruned_by_bound == start >= 1
    assert all(c["replicas"] > start for c in p.candidates)
    below = serve(trace, "lru", CAP, replicas=start, arrival_speedup=40.0)
    assert below.ttft_p99_s > 2.0


def test_heavier_load_costs_at_least_as_much(trace):
    space = {"replicas": [1, 2, 3, 4, 5, 6, 7, 8], "router": ["kv_router"]}
    p = plan(trace, slo={"ttft_p99": "50s"}, space=space, capacity_blocks=CAP, arrival_speedup=2.0, check_load=2,
             prices=PRICES)
    h = p.heavier
    assert h["load"] == 4.0 and h["best"] is not None
    assert h["best"]["cost_per_hour"] >= p.best["cost_per_hour"]
    rows, best = brute(trace, space, {"ttft_p99": "50s"})  # brute() serves at LOAD = 4 = 2 x 2
    assert h["best"]["cost_per_hour"] == pytest.approx(best[0])


def test_cli_resumes_an_interrupted_plan(tmp_path):
    """One plan on the sweep's Ray runner, logged to MLflow; its journal cut after the first
    replay (as an interrupted plan leaves it); the re-run replays only the rest, in this
    process, and gives the same answer; a third run replays nothing."""
    args = ["plan", "trace=mooncake_conversation", "trace.max_requests=300", f"plan.capacity_blocks={CAP}",
            f"plan.arrival_speedup={LOAD}", "plan.slo.ttft_p99=50s", "plan.space.replicas=[2,3,4,5]",
            "plan.space.router=[kv_router]", "plan.check_load=null", "cluster.num_cpus=1",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"analysis.out={tmp_path / 'out'}"]
    first = run_module(tmp_path, *args, module="analysis")
    assert first.returncode == 0, first.stderr[-3000:]
    answer = re.search(r"^cheapest: (.*)$", first.stdout, re.M).group(1)
    n = int(re.search(r"replayed (\d+) of the space's 4 candidates", first.stdout).group(1))
    journal = tmp_path / "kvsweep-journal.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) == n >= 2 and all(json.loads(x)["points"][0]["kind"] == "serve" for x in lines)
    journal.write_text(lines[0] + "\n")
    quick = ["plan.runner=local", "tracking.offline=true", "analysis.figures=false"]
    second = run_module(tmp_path, *args, *quick, module="analysis")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resume: 1 replays of this plan's candidates are already in the journal" in second.stderr
    assert f"({n - 1} replayed now" in second.stdout
    assert re.search(r"^cheapest: (.*)$", second.stdout, re.M).group(1) == answer
    third = run_module(tmp_path, *args, *quick, module="analysis")
    assert "(0 replayed now" in third.stdout and re.search(r"^cheapest: (.*)$", third.stdout, re.M).group(1) == answer
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["best"]["replicas"] == int(answer.split(" x ")[0]) and report["evaluated"] == n
    assert len(child_runs(tmp_path / "mlflow.db")) == n  # the first plan run's candidates as its children


def test_cli_bad_input_exits_2_naming_the_field(tmp_path):
    r = run_module(tmp_path, "plan", "trace=mooncake_conversation", "trace.max_requests=50", "plan.slo.ttft_p99=2",
                   "tracking.offline=true", module="analysis")
    assert r.returncode == 2 and "plan.slo.ttft_p99 must be a latency with its unit" in r.stderr
    r = run_module(tmp_path, "plan", "trace=mooncake_conversation", "trace.max_requests=50",
                   "plan.space.gpu=[h100_sxm,gh200]", "tracking.offline=true", module="analysis")
    assert r.returncode == 2 and "prices.gpu.gh200" in r.stderr
    r = run_module(tmp_path, "plan", "trace=mooncake_conversation", "trace.max_requests=50", "plan.step_model=measured",
                   f"plan.model={MEASURED}", "plan.backend=tensorrt", "tracking.offline=true", module="analysis")
    assert r.returncode == 2 and "plan.backend: unknown engine.backend 'tensorrt'" in r.stderr


def test_tpot_p99_is_the_99th_percentile_that_goodput_counts(trace):
    """ServeResult.tpot_p99_s (which slo.tpot_p99 bounds) against serve's per-request goodput:
    at that bound at least rank + 1 of the m requests with two or more output tokens are
    within it, just below it at most rank (rank = round((m - 1) 0.99))."""
    r = serve(trace, "lru", CAP, replicas=2, arrival_speedup=LOAD)
    multi = int((trace.output_tokens > 1).sum())
    single = trace.n_requests - multi
    rank = int((multi - 1) * 0.99 + 0.5)
    at = serve(trace, "lru", CAP, replicas=2, arrival_speedup=LOAD, slo={"tpot": f"{r.tpot_p99_s}s"})
    below = serve(trace, "lru", CAP, replicas=2, arrival_speedup=LOAD, slo={"tpot": f"{r.tpot_p99_s * (1 - 1e-9)}s"})
    assert round(at.goodput_ratio * trace.n_requests) - single >= rank + 1
    assert round(below.goodput_ratio * trace.n_requests) - single <= rank
    assert r.tpot_mean_s < r.tpot_p99_s


def test_aic_comparison_smoke(capsys):
    """benchmarks/aic_plan.py: its Poisson trace by hand, and one row of the table (AIConfigurator's
    sizing beside our plan on the same model, GPU, backend, TP and data)."""
    from benchmarks.aic_plan import main, poisson_trace

    t = poisson_trace(4.0, 10.0, 100, 20, prefix=32)
    assert t.n_requests == 40 and set(t.request_lengths) == {7} and set(t.output_tokens) == {20}
    assert len(set(t.blocks.tolist())) == 2 + 40 * 5  # two shared blocks, five of each request's own
    assert main(["--rates", "4", "--seconds", "20", "--max-replicas", "2"]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1].split(" | ")
    assert row[:2] == ["| 4", "0"] and row[4] == "1" and row[5] in ("1", "2")
