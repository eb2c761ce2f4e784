"""`python -m analysis characterize|advise` and `policy=ilp` in the sweep.

Expected values come from hand-built traces whose statistics are known by construction,
from sim_core.simulate / sim_core.oracles.ilp.solve called directly, or from the paper's rules
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
        hist = {k: [m.value for m in sorted(c.get_metric_history(r.info.run_id, f"curve/{k}"), key=lambda m: m.step)]
                for k in ("hits", "compute_savings", "evictions", "max_resident_blocks")}
        out[(r.data.tags["policy"], r.data.tags["cost_model"])] = (r, hist)
    return out


def test_ilp_in_a_sweep_is_the_solver_optimum_and_bounds_belady(ilp_sweep):
    from sim_core.oracles.ilp import solve

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
    from sim_core.oracles.ilp import check, requests_within

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


def test_ilp_refuses_a_far_too_large_trace_on_size_alone():
    """More than 50 block accesses per allowed interval: refused without counting intervals
    (a full-scale trace would take minutes and GBs to count), naming the limit and the
    trace's size: 120 single-block requests against a limit of 2."""
    from sim_core.oracles.ilp import check

    t = Trace.from_requests([[i % 7] for i in range(120)], name="big")
    with pytest.raises(ValueError) as e:
        check(t, [10], params={"max_intervals": 2})
    msg = str(e.value)
    assert "far too large" in msg and "limit of 2 reuse intervals" in msg
    assert "120 requests, 120 block accesses" in msg and "trace.max_requests=N" in msg


def test_ilp_above_the_limit_is_refused_before_any_work(tmp_path, compose):
    """In the sweep: a trace over policy.ilp.params.max_intervals (the first 300 Mooncake
    requests against 200 intervals; the message itself is test_ilp_limit_by_hand's) exits
    2 with a message naming the limit and the trace's size, and nothing run or recorded."""
    from sweep.traces import load

    base = ["trace=mooncake_conversation", "trace.max_requests=300"]
    proc = _run(["-m", "sweep", *base, "policy=[lru,ilp]", "capacity=paper4", "policy.ilp.params.max_intervals=200"],
                tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "limit of 200 intervals" in proc.stderr
    t = load(compose(*base).trace, "mooncake_conversation")
    assert f"{t.n_requests:,} requests" in proc.stderr and f"{t.n_accesses:,} block accesses" in proc.stderr
    assert "trace.max_requests=" in proc.stderr
    assert "starting a local Ray" not in proc.stderr
    assert not list(tmp_path.iterdir())  # no mlflow.db, no journal


# ------------------------------------------------------------------ characterize
def hand_trace() -> Trace:
    """Known by construction (16-token blocks, times in seconds):

        t=0  session 0  [1,2,3]        t=30 session 0  [1,2,3,4,6]
        t=10 session 0  [1,2,3,4]      t=40 session 2  [7,8]
        t=15 session 1  [1,5]

    accesses per block: 1:4, 2:3, 3:3, 4:2, 5-8:1 -> 8 blocks, 16 accesses, 4 one-hit blocks;
    lifetimes of reused blocks 30, 30, 30, 20; reuse intervals 10,5,15 (block 1), 10,20
    (2 and 3), 20 (4); session 0 has gaps 10 and 20 and lasts 30 s of a 40 s span;
    footprints 5 (session 0), 2, 2; block 1 is shared by two sessions (system), 2,3,4,6 are
    history, 5,7,8 single-turn."""
    return Trace.from_requests([[1, 2, 3], [1, 2, 3, 4], [1, 5], [1, 2, 3, 4, 6], [7, 8]],
                               arrival_s=[0, 10, 15, 30, 40], session=[0, 0, 1, 0, 2], name="hand")


def test_characterize_a_trace_known_by_construction():
    from analysis.characterize import measure
    from sim_core import QWEN3_CODER_30B

    rep, _ = measure(hand_trace(), QWEN3_CODER_30B)
    s = {k: v["values"] for k, v in rep["sections"].items()}
    assert all(v["status"] == "measured" for v in rep["sections"].values()) and rep["notes"] == []
    life = s["lifetimes"]
    assert life["one_hit_block_share"] == 0.5 and life["one_hit_access_share"] == 4 / 16
    assert life["reused_lifetime_s"]["median"] == 30 and life["reused_lifetime_s"]["max"] == 30
    assert life["session_duration_s"]["median"] == 30
    assert s["reuse"]["reuse_interval_s"]["median"] == 12.5  # of 5,10,10,10,15,20,20,20
    assert s["reuse"]["session_gap_s"]["median"] == 15 and s["reuse"]["session_gap_share_under_22min"] == 1.0
    freq = rep["sections"]["frequency"]["tables"]
    assert [(r["accesses"], r["blocks"]) for r in freq["by_frequency"]] == [("1", 4), ("2", 1), ("3-4", 3)]
    assert freq["by_frequency"][1]["interval_s"]["median"] == 20  # block 4
    assert freq["by_frequency"][2]["interval_s"]["median"] == 10  # of 5,10,10,10,15,20,20
    assert [r["p_further_reuse"] for r in freq["further_reuse"]] == [0.5, 0.75, pytest.approx(1 / 3), 0.0]
    assert s["request_lengths"]["input_tokens"]["median"] == 48
    assert s["request_lengths"]["input_tokens_multi_turn"]["median"] == 64  # 48, 64, 80
    fp = s["footprints"]
    assert fp["blocks"]["median"] == 2 and fp["blocks"]["max"] == 5
    assert fp["gib"]["max"] == pytest.approx(5 * 1.5 / 1024)  # 1.5 MiB per 16-token block
    assert fp["top10_share"] == pytest.approx(5 / 9)
    cat = s["categories"]
    assert (cat["system"]["block_share"], cat["history"]["block_share"], cat["single_turn"]["block_share"]) == \
        (1 / 8, 4 / 8, 3 / 8)
    assert (cat["system"]["access_share"], cat["history"]["access_share"]) == (4 / 16, 9 / 16)
    assert cat["single_turn"]["once_share"] == 1.0
    assert s["compulsory_misses"]["compulsory_miss_ratio"] == 0.5
    ses = s["sessions"]
    assert (ses["sessions"], ses["multi_turn_sessions"], ses["multi_turn_request_share"]) == (3, 1, 0.6)
    assert ses["concurrency_mean"] == 30 / 40 and ses["concurrency_max"] == 1


def test_cdf_lines_are_thinned_to_exact_points():
    # a full-scale trace has ~600M reuse intervals: the figure draws at most CDF_POINTS
    # of them, each at its exact empirical CDF (zeros included in the denominator)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis import figures

    v = np.concatenate((np.zeros(1000), np.random.default_rng(0).lognormal(2.0, 1.5, 99_000)))
    fig, ax = plt.subplots()
    figures._cdf(ax, v, "x")
    (line,) = ax.get_lines()
    x, y = line.get_xdata(), line.get_ydata()
    assert len(x) <= figures.CDF_POINTS and x.min() == v[v > 0].min() and x.max() == v.max()
    assert np.allclose(y, np.searchsorted(np.sort(v), x, side="right") / len(v))
    assert "1.0% at 0" in line.get_label()
    plt.close(fig)


def test_block_reuse_equals_a_brute_force_walk():
    # random requests (repeats inside a request included) against a dict walk in time order
    from analysis.workload import block_reuse

    rng = np.random.default_rng(3)
    reqs = [list(rng.integers(0, 40, rng.integers(0, 12))) for _ in range(200)]
    arrival = np.cumsum(rng.exponential(7.0, len(reqs)))
    tr = Trace.from_requests(reqs, arrival_s=arrival)
    first, last, pairs = {}, {}, []
    for i, t in enumerate(arrival):
        blocks = tr.request_blocks(i).tolist()
        for b in blocks:
            if b in last:
                pairs.append((b, t - last[b]))
            first.setdefault(b, t)
            last[b] = t
    r = block_reuse(tr)
    assert r["accesses"].tolist() == np.bincount(tr.blocks, minlength=tr.n_unique).tolist()
    assert r["lifetime_s"] == pytest.approx([last[b] - first[b] for b in range(tr.n_unique)], rel=1e-12)
    assert r["interval_block"].tolist() == [b for b, _ in pairs]
    assert r["interval_s"] == pytest.approx([d for _, d in pairs], rel=1e-6)


def test_characterize_cli_logs_a_run_with_the_reports(tmp_path):
    from mlflow.tracking import MlflowClient

    from analysis.__main__ import main

    path = hand_trace().save(tmp_path / "hand.npz")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "out"
    assert main(["characterize", "trace=file", f"trace.path={path}", f"tracking.uri={uri}",
                 f"analysis.out={out}"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["sections"]["lifetimes"]["values"]["one_hit_block_share"] == 0.5
    figs = {p.name for p in (out / "figures").iterdir()}
    assert {"lifetimes.png", "reuse.png", "frequency.png", "request_lengths.png", "footprints.png",
            "concurrency.png"} <= figs
    c = MlflowClient(uri)
    (run,) = c.search_runs([c.get_experiment_by_name("hand-synthetic").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["kvsweep.kind"] == "characterization"
    assert run.data.metrics["lifetimes.one_hit_block_share"] == 0.5
    assert run.data.metrics["compulsory_misses.compulsory_miss_ratio"] == 0.5
    assert {a.path for a in c.list_artifacts(run.info.run_id)} >= {"report.md", "report.json", "figures"}


def test_characterize_mooncake_skips_session_measurements_with_a_note(tmp_path, capsys):
    from analysis.__main__ import main

    out = tmp_path / "out"
    # trace.sessions=given: Mooncake's own (no) session ids, none inferred
    assert main(["characterize", "trace=mooncake_conversation", "trace.max_requests=1500", "trace.sessions=given",
                 "tracking.offline=true", f"analysis.out={out}"]) == 0
    rep = json.loads((out / "report.json").read_text())
    sec = rep["sections"]
    for k in ("footprints", "categories", "sessions"):
        assert sec[k]["status"] == "skipped" and "no session ids" in sec[k]["note"] and not sec[k]["values"]
    for k in ("lifetimes", "reuse", "request_lengths"):  # measured, their session parts skipped
        assert sec[k]["status"] == "partial" and "no session ids" in sec[k]["note"]
    assert "session_gap_s" not in sec["reuse"]["values"] and "session_duration_s" not in sec["lifetimes"]["values"]
    assert sec["frequency"]["status"] == sec["compulsory_misses"]["status"] == "measured"
    assert sec["lifetimes"]["values"]["one_hit_block_share"] > 0
    assert rep["trace"]["has_sessions"] is False and any("no session ids" in n for n in rep["notes"])
    assert rep["trace"]["sessions"] == "none"
    md = (out / "report.md").read_text()
    assert md.count("skipped: the trace has no session ids") >= 3
    assert not (tmp_path / "mlflow.db").exists()


def test_bad_overrides_and_help(tmp_path, capsys):
    from analysis.__main__ import main

    assert main(["characterize", "trace=nope"]) == 2
    assert "unknown trace 'nope'" in capsys.readouterr().err
    assert main(["advise", "sim.sample_rate=2"]) == 2
    assert "sim.sample_rate" in capsys.readouterr().err
    assert main(["advise", "sim.mode=fast"]) == 2  # the schema, at compose time (sweep/schema.py)
    assert "unknown sim.mode 'fast'; valid: request, block" in capsys.readouterr().err
    assert main(["advise", "sim.seed=abc"]) == 2
    assert "sim.seed must be an integer, got 'abc'" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert main(["advise", "--help"]) == 0
    text = capsys.readouterr().out
    assert "python -m analysis advise" in text and "trace" in text and "sample_rate" in text


# ------------------------------------------------------------------ advise
def test_recommendations_follow_the_papers_rules():
    from analysis.advise import recommend

    def row(cap, gib, gap, qd, loss):
        return {"capacity": cap, "capacity_blocks": 1, "capacity_gib": gib, "regime": "HBM" if gib <= 120 else "pool",
                "compute_gap_points": gap, "partial_node_gain_points": 1.0,
                "quick_demotion_gain_points": {"hit_ratio": qd, "compute_savings": qd},
                "session_loss_points": {"hit_ratio": loss, "compute_savings": loss}, "belady_headroom_points": 5.0,
                "holes_per_request_mean": {"lru": 1.0, "partial_node": 1.0},
                "hit_ratio": {"lru": 0.5}, "compute_savings": {}}

    work = {"one_hit_block_share": 0.5, "one_hit_access_share": 0.1}
    # FreeInference-like (sec. 5.2-5.3): +12.6-point oracle gap, session level loses 10.5 at 24 GiB
    recs = {r["topic"]: r for r in recommend([row("24GiB", 24, 12.6, 0.3, 10.5), row("1TiB", 1024, 0.2, -0.4, 0.1)],
                                             work, "qwen3_coder_30b")}
    assert recs["compute_awareness"]["verdict"] == "pays" and "12.6" in recs["compute_awareness"]["because"]
    assert recs["quick_demotion"]["verdict"] == "no effect"
    assert recs["granularity"]["verdict"] == "session-level acceptable in the pool"
    assert "Evict blocks at 24GiB" in recs["granularity"]["action"] and "At 1TiB" in recs["granularity"]["action"]
    # Qwen To-B-like (sec. 5.1): S3-FIFO 8.8 points over LRU at 24 GiB; a gap of 1 point
    recs = {r["topic"]: r for r in recommend([row("24GiB", 24, 1.0, 8.8, 3.0)], work, "qwen3_coder_30b")}
    assert recs["compute_awareness"]["verdict"] == "does not pay"
    assert recs["quick_demotion"]["verdict"] == "enable" and "24GiB" in recs["quick_demotion"]["action"]
    assert recs["granularity"]["verdict"] == "block-level"
    recs = {r["topic"]: r for r in recommend([row("24GiB", 24, 5.0, -3.0, 0.0)], work, "linear")}
    assert recs["compute_awareness"]["verdict"] == "marginal" and recs["quick_demotion"]["verdict"] == "avoid"
    assert recommend([row("24GiB", 24, 0.0, 0.0, 0.0)], work, "uniform")[1]["verdict"] == "not measured"


def test_advise_on_a_generated_trace(tmp_path, capsys):
    from analysis.advise import NEGLIGIBLE_POINTS, PAYS_POINTS, POLICIES
    from analysis.__main__ import main
    from sim_core import saturation_capacity

    trace = session_trace(n_sessions=80, seed=4)
    path = trace.save(tmp_path / "gen.npz")
    out = tmp_path / "out"
    # no capacity given: the paper's headline capacities all hold this small trace
    assert main(["advise", "trace=file", f"trace.path={path}", "cost=[uniform,linear]", "tracking.offline=true",
                 f"analysis.out={out}"]) == 0
    printed = capsys.readouterr().out
    rep = json.loads((out / "report.json").read_text())
    sat = saturation_capacity(trace)
    caps = [c["blocks"] for c in rep["capacities"]]
    assert caps and all(trace.max_request_blocks <= c < sat for c in caps)
    assert any("no capacity" in n and "below saturation" in n for n in rep["notes"])
    assert rep["primary_cost_model"] == "linear"
    assert set(rep["results"]) == set(POLICIES)
    assert rep["workload"]["one_hit_block_share"] == pytest.approx(
        float((np.bincount(trace.blocks) == 1).mean()))
    # the numbers are sim_core.simulate's, run here independently
    direct = {p: simulate(trace, p, caps, cost_models=["uniform", "linear"]) for p in POLICIES}
    for i, d in enumerate(rep["diagnostics"]):
        sav = {p: direct[p][i].compute_savings["linear"] for p in POLICIES}
        hit = {p: direct[p][i].hit_ratio for p in POLICIES}
        assert d["compute_gap_points"] == pytest.approx(100 * (sav["belady_compute"] - sav["belady"]), abs=0.006)
        assert d["quick_demotion_gain_points"]["hit_ratio"] == pytest.approx(100 * (hit["s3fifo"] - hit["lru"]),
                                                                             abs=0.006)
        assert d["session_loss_points"]["hit_ratio"] == pytest.approx(100 * (hit["lru"] - hit["lru_session"]),
                                                                      abs=0.006)
    # every section, and verdicts that follow from the numbers by the paper's thresholds
    recs = {r["topic"]: r for r in rep["recommendations"]}
    assert list(recs) == ["baseline", "compute_awareness", "quick_demotion", "granularity"]
    gap = max(d["compute_gap_points"] for d in rep["diagnostics"])
    want = "pays" if gap > PAYS_POINTS else "does not pay" if gap <= NEGLIGIBLE_POINTS else "marginal"
    assert recs["compute_awareness"]["verdict"] == want and str(gap) in recs["compute_awareness"]["because"]
    qd = [d["quick_demotion_gain_points"]["hit_ratio"] for d in rep["diagnostics"]]
    want = "enable" if max(qd) > NEGLIGIBLE_POINTS else "avoid" if min(qd) < -NEGLIGIBLE_POINTS else "no effect"
    assert recs["quick_demotion"]["verdict"] == want
    assert recs["granularity"]["verdict"] == "block-level"  # these capacities are all HBM-sized
    md = (out / "report.md").read_text()
    for head in ("## Recommendations", "## The numbers per capacity", "## Workload", "## Results: hit ratio",
                 "## Results: compute savings, cost model `linear`", "## Notes"):
        assert head in md
    assert "compute awareness:" in printed and "advice for gen" in printed
    assert {p.name for p in (out / "figures").iterdir()} == {"curves_uniform.png", "curves_linear.png"}
