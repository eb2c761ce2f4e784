"""Issue 35, part 3: the smaller defects, each pinned by hand."""
from __future__ import annotations

import json
import logging

from sim_core.catalog.counting import PRESETS, twins
from sweep.plan import Capacity
from sweep.report.tables import summary_table


def test_columns_in_neither_regime_are_marked():
    # 23.44 GiB and 187.5 GiB lie outside HBM (24-120 GiB) and the pool (256 GiB-12 TiB)
    gibs = (23.4375, 48.0, 187.5, 1024.0)
    cs = [Capacity(i, f"{g}GiB", 10 * (i + 1), g) for i, g in enumerate(gibs)]
    curves = {"uniform": {"lru": [{"capacity_index": i, "compute_savings": v}
                                  for i, v in enumerate((0.1, 0.2, 0.3, 0.4))]}}
    lines = summary_table(curves, cs, 4).splitlines()
    head = lines[3].split()
    assert head[1:5] == ["23.44GiB~", "48GiB", "187.5GiB~", "1TiB"]
    assert "~ = in neither regime (HBM 24-120 GiB, memory pool 256-12288 GiB): shown, in no mean" in lines[0]
    # the regime means are the in-regime columns only: HBM 0.2 (48 GiB), pool 0.4 (1 TiB)
    assert lines[5].split()[5:7] == ["0.2000", "0.4000"]
    two = [Capacity(i, f"{g}GiB", 10 * (i + 1), g) for i, g in enumerate((48.0, 1024.0))]
    inside = summary_table({"uniform": {"lru": curves["uniform"]["lru"][:2]}}, two, 4).splitlines()
    assert "~" not in inside[0] + inside[3]


def test_engine_presets_with_the_same_switches_are_named():
    same = {n for n, p in PRESETS.items() if n != "lmcache" and p.switches() == PRESETS["lmcache"].switches()}
    assert set(twins("lmcache")) == same and "vllm" in same
    assert twins("paper") == []


def test_engine_note_says_lmcache_counts_as_vllm_and_records_its_own():
    from omegaconf import OmegaConf

    from sweep.spec import apply_counting

    cfg = OmegaConf.create({"sim": {"engine": "lmcache"}})
    note = apply_counting(cfg, [])
    assert "the same switches as vllm" in note and "recorded as lmcache's own runs" in note


def test_a_preset_is_part_of_a_results_identity(compose):
    """Presets with equal switches replay alike, but each is its own result (key), so a
    sweep under sim.counting=lmcache after one under vllm simulates and records its runs."""
    from sweep import study

    def spec(*over):
        cfg = compose("trace=mooncake_conversation", "policy=lru", *over)
        return study.configure(cfg, list(over), "mooncake_conversation", "lru").spec

    vllm, lmc, none = spec("sim.counting=vllm"), spec("sim.counting=lmcache"), spec()
    assert vllm.counting == lmc.counting and vllm.mode == lmc.mode and vllm.hits == lmc.hits
    assert dict(lmc.counting_key())["preset"] == "lmcache" and dict(vllm.counting_key())["preset"] == "vllm"
    assert lmc.counting_key(preset=False) == vllm.counting_key(preset=False)
    paper = spec("sim.counting=paper")  # the default switches: a flat sweep still, with its own key
    assert paper.counting_key(preset=False) == none.counting_key() == () and paper.counting_key() == (("preset", "paper"),)


def test_sweep_under_lmcache_after_vllm_records_its_own_runs(tmp_path):
    from tests.helpers import child_runs, run_module

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 64 * (i % 5 + 1),
                                         "hash_ids": list(range(i % 5 + 1))}) + "\n" for i in range(40)))
    common = ["trace=file", f"trace.path={trace}", "trace.file_block_tokens=64", "policy=lru", "cost=[uniform]",
              "capacity=custom", "capacity.sizes=[2,4]", "cluster.num_cpus=1"]
    first = run_module(tmp_path, *common, "sim.counting=vllm")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_module(tmp_path, *common, "sim.counting=lmcache")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "nothing to simulate" not in second.stderr
    assert "recorded as lmcache's own runs" in second.stderr
    runs = child_runs(tmp_path / "mlflow.db", "t")
    assert sorted(r.data.tags.get("counting") for r in runs) == ["lmcache", "vllm"]
    assert sorted(r.info.run_name for r in runs) == ["lru | uniform | counting=lmcache", "lru | uniform | counting=vllm"]
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.params["sim.counting"] == r.data.tags["counting"]
    # same switches, same numbers
    hits = {r.data.tags["counting"]: r.data.metrics["hit_ratio_mean"] for r in runs}
    assert hits["lmcache"] == hits["vllm"]
    # (that lmcache's results are then its own key: test_a_preset_is_part_of_a_results_identity)


def test_oversized_warning_only_where_requests_must_fit(tmp_path, compose, caplog):
    from sweep import study

    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "hash_ids": list(range(100 * i, 100 * i + 30))}) + "\n"
                         for i in range(3)))
    for mode, warned in (("request", True), ("block", False)):
        cfg = compose("trace=file", f"trace.path={p}", "policy=lru", "capacity=custom", "capacity.sizes=[20,40]",
                      f"sim.mode={mode}", "tracking.offline=true")
        st = study.configure(cfg, [], "file", "lru")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            study.load(st)
        assert ("smaller than the largest request" in caplog.text) == warned, mode


def test_oversized_warnings_and_resumed_note_by_hand():
    from sim_core import Mode
    from sweep.plan import oversized_warnings

    caps = [Capacity(0, "20", 20, 0.1), Capacity(1, "40", 40, 0.2)]
    assert len(oversized_warnings(caps, [30, 10], Mode.REQUEST)) == 1  # 20 < 30 <= 40
    assert oversized_warnings(caps, [30, 10], Mode.BLOCK) == [] and oversized_warnings(caps, [30], "block") == []


def test_sweep_summary_marks_the_issues_columns(tmp_path):
    """As the issue ran it: capacities in blocks on the 512-token Mooncake trace (48 MiB a
    block for Qwen3-Coder-30B): 500 blocks = 23.4375 GiB, 4,000 = 187.5 GiB, both outside
    HBM (24-120 GiB) and the pool (256 GiB-12 TiB); 1,000 blocks = 46.875 GiB is in HBM."""
    from tests.helpers import run_module

    out = run_module(tmp_path, "trace=mooncake_conversation", "trace.max_requests=300", "policy=lru",
                     "cost=[uniform]", "capacity=custom", "capacity.sizes=[500,1000,4000]", "cluster.num_cpus=1",
                     "tracking.offline=true")
    assert out.returncode == 0, out.stderr[-3000:]
    table = out.stdout[out.stdout.index("compute-savings ratio"):]
    assert "~ = in neither regime (HBM 24-120 GiB, memory pool 256-12288 GiB): shown, in no mean" in table
    head = next(line for line in table.splitlines() if line.startswith("policy"))
    assert "23.44GiB~" in head and "187.5GiB~" in head and "46.88GiB " in head + " " and "46.88GiB~" not in head
