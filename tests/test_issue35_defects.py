"""Issue 35, part 3: the smaller defects, each pinned by hand."""
from __future__ import annotations

import json
import logging

from sim_core.engines import PRESETS, twins
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


def test_engine_note_says_lmcache_replays_as_vllm():
    from omegaconf import OmegaConf

    from sweep.spec import apply_engine

    cfg = OmegaConf.create({"sim": {"engine": "lmcache"}})
    note = apply_engine(cfg, [])
    assert "the same switches as vllm" in note and "resumed, not simulated again" in note


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
    from sweep.spec import resumed_engine_note

    caps = [Capacity(0, "20", 20, 0.1), Capacity(1, "40", 40, 0.2)]
    assert len(oversized_warnings(caps, [30, 10], Mode.REQUEST)) == 1  # 20 < 30 <= 40
    assert oversized_warnings(caps, [30, 10], Mode.BLOCK) == [] and oversized_warnings(caps, [30], "block") == []
    assert resumed_engine_note("lmcache") == " (sim.engine=lmcache replays as vllm, dynamo do: the results may be theirs)"
    assert resumed_engine_note(None) == resumed_engine_note("paper") == ""
