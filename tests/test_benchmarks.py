"""The benchmarks (benchmarks/, run as `python -m benchmarks.<name>`): smoke runs on tiny
traces, their helpers by hand, and their tables against the policy registry."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from benchmarks import fidelity, speed
from benchmarks.agents import contexts_regime, gap_to_next_turn, main as agents_main, overlaid
from sim_core import REGISTRY, Trace
from sim_core.policies.agent import tool_waits
from tests.helpers import aiconfigurator, session_trace


def test_speed_references_name_registered_policies_without_an_equal():
    """NEAREST is for policies libCacheSim has no equal of; every key is a policy."""
    assert set(speed.NEAREST) <= set(REGISTRY) and set(speed.TARGETS) <= set(REGISTRY)
    assert not [p for p in speed.NEAREST if REGISTRY[p].libcachesim]
    assert speed.reference_of("lru") == ("LRU", True, 20)
    assert speed.reference_of("random_compute") == ("Hyperbolic", False, 2)
    assert speed.reference_of("belady")[1:] == (True, 2)


def test_bench_smoke(tmp_path):
    """`python -m benchmarks.speed` end to end on a tiny trace: table rows, ratios, files."""
    assert speed.main(["--accesses", "3e5", "--policies", "lru,fifo,random_compute", "--reps", "1",
                       "--skip", "jit,ray", "--capacity", "2000", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "bench.json").read_text())
    rows = {r["policy"]: r for r in res["speed"]}
    assert set(rows) == {"lru", "fifo", "random_compute"}
    for r in rows.values():
        assert r["accesses"] >= 3e5 and r["ours_acc_per_s"] > 0 and r["ours_request_acc_per_s"] > 0
    # same policy in libCacheSim: identical hit ratio; a nearest-policy reference is marked
    assert rows["lru"]["lcs_hit_ratio"] == pytest.approx(rows["lru"]["ours_hit_ratio"], abs=1e-12)
    assert rows["lru"]["same_policy"] and not rows["random_compute"]["same_policy"]
    assert rows["random_compute"]["lcs_policy"] == "Hyperbolic"
    eng = res["engine"]
    assert eng["ratio_request_vs_block"] > 0 and eng["one_pass_capacities"] > 1
    assert eng["lru_3_capacities_curve_s"] > 0 and eng["belady_compute_over_belady_qwen3_coder_30b"] > 0
    assert "| lru |" in (tmp_path / "bench.md").read_text()


def test_bench_ray_scaling_runs_the_same_plan_on_1_and_2_actors():
    # two of its policies: each actor process loads (on a cold cache, compiles) every
    # policy's engine, which is the benchmark's cost, not what this test checks
    out = speed.ray_scaling(session_trace(n_sessions=30), capacity=200, n_caps=2, policies=("fifo", "lfu"))
    assert out["jobs_policies"] == ["fifo", "lfu"]
    assert out["actors_1_acc_per_s"] > 0 and out["actors_2_acc_per_s"] > 0 and out["speedup"] > 0


def test_bench_fidelity_set_parses_profile_fields_and_rejects_others():
    assert fidelity._overrides(["diurnal=0", "compaction=false"]) == {"diurnal": 0, "compaction": False}
    for bad in (["nope=1"], ["diurnal"]):
        with pytest.raises(ValueError, match="SynthProfile field"):
            fidelity._overrides(bad)
    # a value the profile rejects is refused up front, naming the field
    with pytest.raises(ValueError, match="sys_burst_share must be in"):
        fidelity._overrides(["sys_burst_share=2"])


def test_bench_fidelity_seed_summary_by_hand():
    rows = [{"lru@24GiB:qwen": [0.50, 0.40]}, {"lru@24GiB:qwen": [0.52, 0.46]}, {"lru@24GiB:qwen": [0.54, 0.43]}]
    got = fidelity.seed_summary(rows)
    hr, sv = got["lru@24GiB:qwen:hit_ratio"], got["lru@24GiB:qwen:savings"]
    assert hr == {"mean": 0.52, "sd_points": 2.0, "min": 0.5, "max": 0.54,
                  "below_mean_points": -2.0, "above_mean_points": 2.0}
    assert sv["mean"] == 0.43 and sv["sd_points"] == 3.0 and sv["below_mean_points"] == -3.0


def test_serving_bench_rows():
    """`python -m benchmarks.serving`: our side on one configuration (Dynamo's when installed)."""
    from benchmarks import serving

    rows = serving.run(serving.BUNDLED, 1, configs=[(1, 16000, "round_robin", 1.0)])
    ours = [r for r in rows if r["tool"] == "ours"]
    assert len(ours) == 1 and ours[0]["reuse"] == pytest.approx(0.2703, abs=5e-5) and ours[0]["wall_s"] > 0
    assert "| 1 | 16,000 | round_robin | 1x | ours |" in serving.table(rows)


def test_disagg_bench_rows():
    """`python -m benchmarks.disagg`: one disaggregated setting, ours (and Dynamo's when
    installed) side by side; round robin agrees exactly (docs/disagg.md)."""
    from benchmarks import disagg, serving

    cfg = (1, 1, 4000, "round_robin", 4.0, 5.0)
    rows = disagg.both(serving.load_trace(serving.BUNDLED), serving.BUNDLED, 1, [cfg])
    ours = next(r for r in rows if r["tool"] == "ours")
    assert ours["reuse"] == pytest.approx(0.0916, abs=5e-5) and ours["wall_s"] > 0 and ours["gbs"] == 5.0
    assert disagg.side_by_side(rows).splitlines()[2].startswith("| 1:1 | 4,000 | round_robin | 4x | 5 GB/s | 0.0916 / ")


def test_fleet_bench_tables():
    """`python -m benchmarks.fleet`: our side of one configuration and one router's row."""
    from benchmarks import fleet, serving

    trace = serving.load_trace(serving.BUNDLED)
    m, wall = fleet.ours(trace, 2, 16000, "kv_router", 1.0)
    assert wall > 0 and m["reuse"] <= m["ceiling"] <= m["infinite"] and m["prefill_imbalance"] >= 1
    rows = [{"replicas": 2, "blocks": 16000, "router": "kv_router", "speedup": 1.0, "tool": "ours", **m,
             "wall_s": wall}]
    md = fleet.tables(rows, [{"router": "kv_router", **m, "wall_s": wall}])
    assert "| 2 | 16,000 | kv_router | 1x | ours |" in md and f"| kv_router | {m['reuse']:.4f} |" in md


def test_fleet_ceiling_bench_times_the_ceiling_alone(capsys):
    """`python -m benchmarks.fleet --ceiling` on a small input: the row and its target."""
    from benchmarks import fleet

    r = fleet.ceiling_speed(n_requests=2000, capacity=500, reps=1)
    assert r["accesses"] > 2000 and 0 < r["hits"] < r["infinite"] and r["wall_s"] > 0
    assert f"| {r['accesses']:,} | 500 | {r['hits']:,} |" in fleet.ceiling_table(r)


def test_tier_engines_tables(monkeypatch):
    """`python -m benchmarks.tier_engines`: a row per setting (ours; Dynamo's column n/a
    here) and per named hierarchy and pool size, on a small trace."""
    from benchmarks import tier_engines
    from sim_core import Trace
    from sim_core.tiers.rules import HIERARCHIES

    t = Trace.from_requests([[i % 7, 10 + i % 5, 20 + i] for i in range(60)])
    monkeypatch.setattr(tier_engines, "dynamo", lambda *a: None)
    h, p = tier_engines.ours(t, 3, 6)
    assert f"| 3 | 6 | {h:,} | {p:,} | n/a | n/a |" in tier_engines.vs_dynamo(t, None, [3], [6])
    md = tier_engines.named(t, 3, [6, 12])
    assert all(f"| {n} | 12 |" in md for n in HIERARCHIES) and len(md.splitlines()) == 2 + 2 * len(HIERARCHIES)


def test_rechain_bench_prints_the_before_after_table(capsys):
    from benchmarks import rechain

    assert rechain.main(["--sessions", "20", "--capacities", "100,400"]) == 0
    out = capsys.readouterr().out
    assert "| LRU capacity (blocks) | hit ratio, raw ids | hit ratio, re-chained |" in out
    assert out.count("\n| 1") == 1 and "| 400 |" in out


def test_agents_bench_derives_tool_waits_from_the_next_turn():
    """benchmarks.agents' tool waits (Trace.tool_wait_s: the wait before a request): the gap
    from the same session's previous request, 0 for a first turn and without a session;
    ttl_pin reads them back as the wait after each turn."""
    t = Trace.from_requests([[1], [2], [1, 3], [4], [2, 5]], arrival_s=[0.0, 1.0, 4.0, 5.0, 11.0],
                            session=[7, 3, 7, -1, 3])
    got = gap_to_next_turn(t)
    assert got.tolist() == [0.0, 0.0, 4.0, 0.0, 10.0]
    after = tool_waits(dataclasses.replace(t, tool_wait_s=got))
    assert after[:2].tolist() == [4.0, 10.0] and all(math.isnan(x) for x in after[2:])


def test_agents_bench_overlays_sessions_by_hand():
    """Sessions that ran one after another, started together: the i-th (by first arrival)
    at i seconds, each keeping its own gaps; blocks and token counts travel with requests."""
    t = Trace.from_requests([[1, 2], [1, 2, 3], [9], [9, 8]], arrival_s=[100.0, 102.0, 200.0, 205.0],
                            session=[0, 0, 1, 1], input_tokens=[30, 45, 10, 20])
    o = overlaid(t)
    assert o.arrival_s.tolist() == [0.0, 1.0, 2.0, 6.0]
    assert o.session.tolist() == [0, 1, 0, 1] and o.input_tokens.tolist() == [30, 10, 45, 20]
    assert [t.source_ids[o.source_ids[o.request_blocks(r)]].tolist() for r in range(4)] == [[1, 2], [9], [1, 2, 3], [9, 8]]
    assert contexts_regime(t) == [("contexts", [3, 6, 12])]  # room for 1, 2, 4 of the 3-block prompt


def test_agents_bench_lmcache_rows(capsys):
    """The bundled LMCache excerpt's rows: every hint of each of the four traces, in the
    contexts regime, and a footprint line per agent kind."""
    assert agents_main(["--traces", "lmcache"]) == 0
    out = capsys.readouterr().out
    for label in ("lmcache miniswe", "lmcache miniswe, sessions overlaid", "lmcache magagent",
                  "lmcache magagent, sessions overlaid"):
        assert f"| {label} | contexts |" in out
    assert out.count("| agent_next |") == 4 and "freeinference" not in out
    assert "- lmcache miniswe: 38 requests in 5 sessions" in out and "- lmcache magagent: 34 requests in 3 sessions" in out


def test_stepmodel_bench_tables():
    """`python -m benchmarks.stepmodel`: the KV capacity rows against the package and the table layout."""
    aiconfigurator()
    from benchmarks import stepmodel

    cap = stepmodel.capacity([("Qwen/Qwen3-30B-A3B", 1)])
    assert cap[0]["ours"] == pytest.approx(cap[0]["theirs"], rel=0.15)
    assert "| Qwen/Qwen3-30B-A3B | 1 | 119,265 |" in stepmodel.capacity_table(cap)
    sp = {"load": 0.5, "model": "measured (fused)", "wall_s": 1.2, "steps": 10, "us_per_step": 5.0, "ratio": 1.2}
    row = {"load": 0.5, "model": "roofline", "ttft_mean_ms": 1.0, "ttft_p50_ms": 1.0, "ttft_p99_ms": 2.0,
           "tpot_ms": 3.0, "steps": 10, "preemptions": 0, "extrapolated": 0}
    md = stepmodel.tables([sp], [row])
    assert "| 0.5x | measured (fused) | 1.200 | 10 | 5.00 | 1.20x |" in md and "| 0.5x | roofline | 1.0 |" in md
