"""Tiers in the sweep: `tier=` and `hardware=` groups, a pool-size axis, keys that resume.

One `python -m sweep` run (module-scoped: Ray start-up is slow) with a DRAM pool of two
sizes under HBM; every curve in MLflow is checked against sim_core.simulate called
directly with the same tiers, and the pool of size 0 against a flat replay.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core import QWEN3_CODER_30B, simulate
from sim_core.traces.loaders import load_trace
from sweep.config import ConfigError
from sweep.spec import resolve
from tests.test_sweep import _write_mooncake

REPO = Path(__file__).resolve().parent.parent
HBM = [4, 8, 16]
POOLS = [0, 12]
POLICIES = ["lru", "fifo"]
COSTS = ["uniform", "linear"]


def _cmd(trace: Path, db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sweep", "trace=file", f"trace.path={trace}", "trace.format=mooncake",
            f"policy=[{','.join(POLICIES)}]", f"cost=[{','.join(COSTS)}]", "capacity=custom",
            f"capacity.sizes=[{','.join(map(str, HBM))}]", "tier=hbm_dram",
            f"tier.dram.capacities=[{','.join(map(str, POOLS))}]", "hardware=h100_sxm", "cluster.num_cpus=2",
            f"tracking.uri=sqlite:///{db}", *extra]


def _run(d: Path, cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiers")
    trace = d / "tiny_mooncake.jsonl"
    _write_mooncake(trace)
    db = d / "mlflow.db"
    return {"proc": _run(d, _cmd(trace, db)), "dir": d, "trace": trace, "db": db}


def _tiers(pool: int, **kw) -> list[dict]:
    # tier=hbm_dram's rules: vLLM's CPU offload
    return [{"name": "dram", "capacity": pool, "policy": "lru", "write": "on_compute", "admit": "all",
             "inclusive": True, "touch": "request", "link": "host", **kw}]


def test_every_tiered_curve_in_mlflow_equals_simulate(tiered):
    from mlflow.tracking import MlflowClient

    p = tiered["proc"]
    assert p.returncode == 0, p.stderr[-4000:]
    assert "lru @ dram=12" in p.stdout and "lru @ dram=0" in p.stdout
    c = MlflowClient(f"sqlite:///{tiered['db']}")
    exp = c.get_experiment_by_name("tiny_mooncake")
    runs = [r for r in c.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    by = {(r.data.tags["policy"], r.data.tags["cost_model"], r.data.tags.get("pool")): r for r in runs}
    parent = runs[0].data.tags["mlflow.parentRunId"]
    assert "plots/tiers.png" in {a.path for a in c.list_artifacts(parent, "plots")}
    # every record says whose tier rules it ran: the sweep run, each curve, the report
    assert c.get_run(parent).data.tags["kvsweep.tier_rules"] == "tier=hbm_dram, the rules of vllm_cpu"
    assert {r.data.params.get("tier_rules") for r in runs if r.data.tags.get("pool") != "dram=0"} == {"vllm_cpu"}
    assert "tier=hbm_dram, the rules of vllm_cpu" in Path(c.download_artifacts(parent, "report.html")).read_text()
    assert set(by) == {(q, m, f"dram={s}") for q in POLICIES + ["tier_bound"] for m in COSTS for s in POOLS}
    trace = load_trace(tiered["trace"], "mooncake")
    for s in POOLS:  # the bound each tiered sweep adds: Belady over HBM + the pool
        want = [r.served_ratio for r in simulate(trace, "belady", [h + s for h in HBM], model=QWEN3_CODER_30B)]
        hist = sorted(c.get_metric_history(by[("tier_bound", "uniform", f"dram={s}")].info.run_id,
                                           "curve/served_ratio"), key=lambda x: x.step)
        assert [h.value for h in hist] == want
    for q in POLICIES:
        flat = simulate(trace, q, HBM, cost_models=COSTS, model=QWEN3_CODER_30B)
        for s in POOLS:
            want = simulate(trace, q, HBM, cost_models=COSTS, model=QWEN3_CODER_30B, tiers=_tiers(s),
                            hardware="h100_sxm")
            if s == 0:  # an empty pool is the flat cache, field for field
                for a, b in zip(want, flat):
                    assert (a.hits, a.compute_savings, a.evictions) == (b.hits, b.compute_savings, b.evictions)
            else:
                assert sum(r.tier_hits["dram"] for r in want) > 0  # the pool serves something
            for m in COSTS:
                run = by[(q, m, f"dram={s}")]
                assert run.info.status == "FINISHED"
                for key, vals in (("compute_savings", [r.compute_savings[m] for r in want]),
                                  ("served_ratio", [r.served_ratio for r in want]),
                                  ("tier_hits.dram", [r.tier_hits["dram"] for r in want]),
                                  ("ttft_mean_s", [r.ttft_mean_s for r in want])):
                    hist = sorted(c.get_metric_history(run.info.run_id, "curve/" + key), key=lambda x: x.step)
                    assert np.allclose([h.value for h in hist], vals, rtol=1e-12, atol=0), (q, s, m, key)


def test_the_same_tiers_resume_and_other_tiers_do_not(tiered):
    assert tiered["proc"].returncode == 0, tiered["proc"].stderr[-4000:]
    same = _run(tiered["dir"], _cmd(tiered["trace"], tiered["db"], "sweep.dry_run=true"))
    assert same.returncode == 0, same.stderr[-3000:]
    assert "nothing to run" in same.stdout
    other = _run(tiered["dir"], _cmd(tiered["trace"], tiered["db"], "sweep.dry_run=true",
                                     "tier.dram.write=on_evict"))
    assert other.returncode == 0, other.stderr[-3000:]
    assert "nothing to run" not in other.stdout and "dry run:" in other.stdout


@pytest.mark.parametrize("override, field", [
    ("tier.dram.capacities=[-1]", "tier.dram.capacities"),
    ("tier.dram.capacities=[1.5]", "tier.dram.capacities"),
    ("tier.dram.policy=nope", "tier.dram"),
    ("tier.dram.write=sometimes", "write mode"),
    ("tier.dram.admit='after_hits=0'", "tier.dram"),
    ("hardware.mfu=1.5", "mfu"),
    ("hardware.host_link_bps=0", "host_link_bps"),
    ("sim.hbm_admit=maybe", "hbm_admit"),
    ("sim.partial_blocks=drop", "sim.partial_blocks"),
    ("sim.warmup=1.5", "sim.warmup"),
])
def test_bad_tier_and_hardware_settings_name_the_field(compose, override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):  # at compose time for sim.partial_blocks
        resolve(compose("tier=hbm_dram", "hardware=h100_sxm", override), "lru")


def test_tier_rules_come_from_the_named_hierarchy_or_the_engine(compose):
    """tier=hbm_dram runs vLLM's CPU offload, or sim.engine's hierarchy; a named one its
    own; a rule given on the command line wins; the sweep says whose rules it ran."""
    def rules(*ov):
        sp = resolve(compose("policy=lru", *ov), "lru")
        got = [{k: m[k] for k in ("write", "inclusive", "touch", "admit", "promote") if k in m}
               for _, _, modes in sp.tiers for m in modes]
        return sp.tier_rules, got

    vllm = {"write": "on_compute", "inclusive": True, "touch": "request", "admit": "all", "promote": 0}
    assert rules("tier=hbm_dram") == ("vllm_cpu", [vllm])
    assert rules("tier=hbm_dram", "sim.counting=vllm") == ("vllm_cpu", [vllm])
    assert rules("tier=hbm_dram", "sim.counting=mooncake") == ("mooncake_store", [{**vllm, "touch": "loads"}])
    assert rules("tier=victim") == ("victim", [{**vllm, "write": "on_evict", "inclusive": False, "touch": "loads"}])
    assert rules("tier=hbm_dram", "sim.counting=vllm", "tier.dram.touch=loads")[1] == [{**vllm, "touch": "loads"}]
    name, (g2, g3) = rules("tier=kvbm")
    assert name == "kvbm" and g3["admit"] == "frequency=2/600s" and g2["admit"] == "all"
    assert rules("tier=lmcache_cpu_disk")[1][1]["promote"] == 1
    with pytest.raises(ConfigError, match="tier=hbm_dram: hierarchy: unknown engine hierarchy 'nosuch'"):
        resolve(compose("tier=hbm_dram", "+tier.hierarchy=nosuch"), "lru")


def test_a_bad_tier_setting_records_nothing(tmp_path):
    trace = tmp_path / "t.jsonl"
    _write_mooncake(trace)
    db = tmp_path / "mlflow.db"
    p = _run(tmp_path, _cmd(trace, db, "tier.dram.capacities=[-4]"))
    assert p.returncode == 2, p.stderr[-2000:]
    assert "tier.dram.capacities" in p.stderr
    assert not db.exists() and not (tmp_path / "kvsweep-journal.jsonl").exists()


def test_flat_sweeps_keep_their_keys(compose):
    """No tier and default engine switches: the identity has no engine part, so results
    recorded before tiers existed are found again."""
    sp = resolve(compose(), "lru")
    assert sp.tiers == [] and sp.counting_key() == () and sp.hardware is None
    tiered = resolve(compose("tier=hbm_dram"), "lru")
    assert [t[0] for t in tiered.tiers] == ["dram"]


def test_windows_reach_mlflow_as_time_series(tmp_path):
    """sim.window: per capacity, one MLflow series per metric over the windows, equal to
    simulate's own per-window counts."""
    from mlflow.tracking import MlflowClient

    trace = tmp_path / "t.jsonl"
    _write_mooncake(trace)
    db = tmp_path / "mlflow.db"
    p = _run(tmp_path, [sys.executable, "-m", "sweep", "trace=file", f"trace.path={trace}", "trace.format=mooncake",
                        "policy=lru", "cost=uniform", "capacity=custom", "capacity.sizes=[8]", "sim.window=5m",
                        "cluster.num_cpus=1", f"tracking.uri=sqlite:///{db}"])
    assert p.returncode == 0, p.stderr[-3000:]
    c = MlflowClient(f"sqlite:///{db}")
    exp = c.get_experiment_by_name("t")
    run = [r for r in c.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags][0]
    want = simulate(load_trace(trace, "mooncake"), "lru", [8], model=QWEN3_CODER_30B, window="5m")[0].windows
    hist = sorted(c.get_metric_history(run.info.run_id, "window/8/accesses"), key=lambda m: m.step)
    assert [int(m.value) for m in hist] == [a for a in want["accesses"] if a == a]
    assert len(hist) > 1 and sum(m.value for m in hist) == sum(want["accesses"])
    # step: the window's start in seconds of trace time (5-minute windows)
    assert [m.step for m in hist] == [round(s) for s, a in zip(want["start_s"], want["accesses"]) if a == a]
    assert all(b - a >= 300 for a, b in zip([m.step for m in hist], [m.step for m in hist][1:]))
    parent = c.get_run(run.data.tags["mlflow.parentRunId"])
    assert {"windows.csv", "window_ranking.csv"} <= {a.path for a in c.list_artifacts(parent.info.run_id)}
    assert "per window of trace time" in p.stdout
    logged, again = _reports(db, "t", tmp_path)
    assert logged == again and '<section id="windows">' in logged and '<table class="windows"' in logged


def _reports(db: Path, experiment: str, out: Path) -> tuple[str, str]:
    """(report.html the sweep logged, the one `python -m analysis report` writes from the store)."""
    from mlflow.tracking import MlflowClient

    from analysis.__main__ import main

    c = MlflowClient(f"sqlite:///{db}")
    exp = c.get_experiment_by_name(experiment)
    parent = [r for r in c.search_runs([exp.experiment_id]) if r.data.tags.get("kvsweep.kind") == "sweep"][0]
    logged = Path(c.download_artifacts(parent.info.run_id, "report.html", str(out / "logged"))).read_text()
    assert main(["report", parent.info.run_id, "--tracking-uri", f"sqlite:///{db}", "--out", str(out / "again")]) == 0
    strip = lambda s: re.sub(r"base64,[A-Za-z0-9+/=]+", "", s)  # noqa: E731
    return strip(logged), strip((out / "again" / "report.html").read_text())


def test_the_report_sizes_the_pool(tiered, tmp_path):
    logged, again = _reports(tiered["db"], "tiny_mooncake", tmp_path)
    assert logged == again  # curves.csv keeps the pools
    section = re.search(r'<section id="tiers">.*?</section>', logged, re.S).group(0)
    knees = re.findall(r'<tr data-policy="([^"]+)" data-knee="([^"]+)"[^>]*>', section)
    assert {p for p, _ in knees} == set(POLICIES) | {"tier_bound"}
    assert {k for _, k in knees} <= {f"dram={s}" for s in POOLS}
    assert "TTFT mean (ms)" in section and "<th>gap</th>" in section  # hardware=h100_sxm; the bound


def test_knee_is_the_smallest_pool_within_one_point_of_the_largest():
    from sweep.report.sizing import knee

    assert knee([("0", 0.50), ("1", 0.885), ("2", 0.895), ("3", 0.90)]) == 2
    assert knee([("0", 0.90), ("1", 0.90)]) == 0
    assert knee([("0", 0.2), ("1", 0.3)]) == 1


def test_the_summary_sizes_the_pool(tiered):
    out = tiered["proc"].stdout
    assert "pool sizing: served ratio" in out and "knee" in out
    table = out[out.index("pool sizing"):].splitlines()
    rows = [x.split() for x in table if x.startswith(("lru ", "fifo "))]
    assert len(rows) == len(POLICIES) * len(HBM)
    # the knee names a pool, or says the largest is not one (the note under the table says why)
    assert all(r[-3] in {f"dram={s}" for s in POOLS} | {f">dram={POOLS[-1]}"} for r in rows)
    assert any(r[-3].startswith(">") for r in rows) == ("not saturated in the range swept" in out)
    assert all(re.fullmatch(r"[+-]\d+\.\d\d", r[-1]) for r in rows)  # the gap to the bound, in points


def test_engine_defaults_are_simulates():
    """A flat sweep's keys leave out the engine switches at their defaults: those must be
    simulate()'s own, or a default run would be keyed as a changed one."""
    import inspect

    from sweep.spec import COUNTING_DEFAULTS

    params = inspect.signature(simulate).parameters
    # simulate's partial_blocks=None is the engine preset's, "cache" without one
    assert params["partial_blocks"].default is None and COUNTING_DEFAULTS["partial_blocks"] == "cache"
    assert COUNTING_DEFAULTS == {k: params[k].default if k != "partial_blocks" else "cache" for k in COUNTING_DEFAULTS}


def test_write_and_admission_modes_are_an_axis(compose):
    from sweep.plan import resolve_pools

    sp = resolve(compose("policy=lru", "tier=hbm_dram", "tier.dram.capacities=[0,12]",
                         "tier.dram.write=[on_evict,on_compute]",
                         "tier.dram.admit=[all,'after_hits=2']"), "lru")
    pools, _ = resolve_pools(sp.tiers, sp.model, 16)
    labels = [lab for lab, _ in pools]
    assert labels == ["dram=0"] + [f"dram=12[{w}+{a}]" for w in ("on_evict", "on_compute")
                                   for a in ("all", "after_hits=2")]  # a pool of size 0 runs once
    assert {(t[0]["write"], t[0]["admit"]) for _, t in pools[1:]} == {
        (w, a) for w in ("on_evict", "on_compute") for a in ("all", "after_hits=2")}
    assert [p.name for p in sp.policies] == ["lru", "tier_bound"]  # the bound comes with tiers
    off = resolve(compose("policy=lru", "tier=hbm_dram", "sim.tier_bound=false"), "lru")
    assert [p.name for p in off.policies] == ["lru"]
    with pytest.raises(ConfigError, match=r"tier\.dram\.write is an empty list"):
        resolve(compose("tier=hbm_dram", "tier.dram.write=[]"), "lru")
    with pytest.raises(ConfigError, match="write mode"):
        resolve(compose("tier=hbm_dram", "tier.dram.write=[on_evict,sometimes]"), "lru")


def test_the_knee_and_the_mode_that_wins_there():
    from sweep.report.sizing import pool_sizing

    rows = {"dram=0": {"served_ratio": 0.5}, "dram=1TiB[a]": {"served_ratio": 0.80},
            "dram=1TiB[b]": {"served_ratio": 0.895}, "dram=4TiB[a]": {"served_ratio": 0.90},
            "dram=4TiB[b]": {"served_ratio": 0.90}, "dram=12GiB[a]": {"served_ratio": 0.6},
            "dram=12GiB[b]": {"served_ratio": 0.6}}
    s = pool_sizing(rows, {"dram=1TiB": {"served_ratio": 0.93}})
    assert s.sizes == ("dram=0", "dram=12GiB", "dram=1TiB", "dram=4TiB") and s.modes == ("a", "b")
    assert (s.knee, s.mode, s.tied) == ("dram=1TiB", "b", ("b",))  # b is within a point of 0.90 at 1 TiB
    assert s.at("dram=0", "a") == 0.5 and round(s.gap_points, 6) == 3.5
    tie = pool_sizing({"dram=1TiB[a]": {"served_ratio": 0.9}, "dram=1TiB[b]": {"served_ratio": 0.9}})
    assert (tie.mode, tie.tied) == ("a", ("a", "b")) and tie.bound != tie.bound  # no bound: NaN


def test_a_sweep_over_write_modes_names_the_winner(tmp_path):
    trace = tmp_path / "t.jsonl"
    _write_mooncake(trace)
    p = _run(tmp_path, [sys.executable, "-m", "sweep", "trace=file", f"trace.path={trace}", "trace.format=mooncake",
                        "policy=lru", "cost=uniform", "capacity=custom", "capacity.sizes=[4]", "tier=hbm_dram",
                        "tier.dram.capacities=[4,12]", "tier.dram.write=[on_evict,on_compute]",
                        "tier.dram.inclusive=[false,true]", "cluster.num_cpus=1", "tracking.offline=true"])
    assert p.returncode == 0, p.stderr[-3000:]
    t = load_trace(trace, "mooncake")
    modes = [(w, i) for w in ("on_compute", "on_evict") for i in (False, True)]  # as labels sort
    served = {(pool, w, i): simulate(t, "lru", [4], model=QWEN3_CODER_30B,
                                     tiers=_tiers(pool, write=w, inclusive=i))[0].served_ratio
              for pool in (4, 12) for w, i in modes}
    top = max(served[(12, w, i)] for w, i in modes)
    knee = 4 if max(served[(4, w, i)] for w, i in modes) >= top - 0.01 - 1e-12 else 12
    best = max(served[(knee, w, i)] for w, i in modes)
    want = [f"{w}+{'inclusive' if i else 'exclusive'}" for w, i in modes if served[(knee, w, i)] >= best - 1e-4]
    table = p.stdout[p.stdout.index("pool sizing"):].splitlines()
    rows = [x.split() for x in table if x.startswith("lru ")]
    assert [r[2] for r in rows] == [f"{w}+{'inclusive' if i else 'exclusive'}" for w, i in modes]
    for r, (w, i) in zip(rows, modes):
        assert [float(v) for v in r[3:5]] == [round(served[(pool, w, i)], 4) for pool in (4, 12)]
    # the knee, the winner, TTFT and gap stand on the winner's row, and on no other
    win = [j for j, r in enumerate(rows) if len(r) > 5]
    assert len(win) == 1 and rows[win[0]][2] == want[0]
    assert rows[win[0]][5] in (f"dram={knee}", f">dram={knee}")
    assert (rows[win[0]][6] == "tie") == (len(want) > 1)


def test_hierarchies_compared_are_a_mode_axis(compose):
    from sweep.plan import resolve_pools

    sp = resolve(compose("policy=lru", "tier=hbm_dram", "tier.dram.capacities=[12]",
                         "tier.hierarchy=[vllm_cpu,victim]"), "lru")
    pools, _ = resolve_pools(sp.tiers, sp.model, 16)
    assert [lab for lab, _ in pools] == ["dram=12[vllm_cpu]", "dram=12[victim]"]
    assert [(t[0]["write"], t[0]["inclusive"]) for _, t in pools] == [("on_compute", True), ("on_evict", False)]
    assert all("hierarchy" not in t[0] for _, t in pools) and sp.tier_rules == "vllm_cpu,victim"
    with pytest.raises(ConfigError, match="unknown engine hierarchy 'nosuch'"):
        resolve(compose("tier=hbm_dram", "tier.hierarchy=[vllm_cpu,nosuch]"), "lru")
