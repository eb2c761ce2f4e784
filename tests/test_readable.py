"""Every answer readable where users look (issue 36): the pool sizing table's rows and
knees, tier semantics in labels, the HBM warning, counts, run names, a Description under
MLflow's limit, and the views a sweep writes for MLflow's UI. Expected values are set by
hand from the inputs below."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace as NS

from sweep.metrics import MAX_TAG
from sweep.plan import Capacity, hbm_warning, pool_count
from sweep.record import description, sweep_name
from sweep.report.sizing import tier_table
from sweep.report.tables import summary_table
from sweep.views import rank_key, view_state, view_url

GIB = [24.0, 1024.0]
CAPS = [Capacity(i, f"{g:g}GiB", int(g * 1024 / 1.5), g) for i, g in enumerate(GIB)]


def _curve(policy, pool, served):
    """A curve whose served ratio at both HBM capacities is `served`."""
    return NS(policy=policy, pool=pool, cost_model="uniform",
              rows={i: {"served_ratio": served, "ttft_mean_s": 0.1 + i} for i in range(len(CAPS))})


def _table(served_by_pool):
    return tier_table([_curve("lru", pool, s) for pool, s in served_by_pool.items()], CAPS)


def _rows(text):
    return [x for x in text.splitlines() if x.startswith("lru ")]


def test_the_knee_stands_on_the_row_of_the_mode_that_wins_there():
    # on_compute sorts first; on_evict serves more at every pool: the knee is its row's
    text = _table({"dram=0": 0.30, "dram=64GiB[on_compute]": 0.40, "dram=64GiB[on_evict]": 0.50,
                   "dram=1TiB[on_compute]": 0.405, "dram=1TiB[on_evict]": 0.505})
    rows = _rows(text)
    assert [r.split()[2] for r in rows] == ["on_compute", "on_evict"] * 2
    for compute, evict in (rows[0:2], rows[2:4]):
        assert len(compute.split()) == 6  # policy, HBM, mode, three pools: no knee
        assert evict.split()[6] == "dram=64GiB"  # 0.50 is within a point of 0.505
    assert not any(r.split()[-1] == "tie" or " tie " in r for r in rows)  # on_evict serves 10 points more
    assert "not saturated" not in text


def test_a_knee_at_the_largest_pool_says_it_is_not_saturated():
    text = _table({"dram=0": 0.30, "dram=64GiB": 0.40, "dram=1TiB": 0.47})  # +7 points at the largest
    # policy, HBM, three pools, knee, TTFT
    assert [r.split()[2:6] for r in _rows(text)] == [["0.3000", "0.4000", "0.4700", ">dram=1TiB"]] * 2
    assert ">dram=1TiB: not saturated in the range swept" in text


def test_the_bound_is_marked_as_an_oracle_and_lines_stay_short():
    curves = [_curve("lru", p, s) for p, s in (("dram=0", 0.3), ("dram=1TiB", 0.4))] + \
        [_curve("tier_bound", p, s) for p, s in (("dram=0", 0.5), ("dram=1TiB", 0.6))]
    text = tier_table(curves, CAPS)
    assert any(x.startswith("tier_bound [oracle]") for x in text.splitlines())
    assert max(len(x) for x in text.splitlines()) <= 100


def _rank_rows(savings):
    return [{"capacity_index": i, "capacity_gib": g, "capacity_blocks": c.blocks, "compute_savings": savings + i / 10}
            for i, (g, c) in enumerate(zip(GIB, CAPS))]


def test_with_tiers_savings_are_the_served_ratio_and_lru_is_the_one_above_the_same_pool():
    curves = {"uniform": {"lru @ dram=0": _rank_rows(0.10), "s3fifo @ dram=0": _rank_rows(0.12),
                          "lru @ dram=1TiB": _rank_rows(0.30), "s3fifo @ dram=1TiB": _rank_rows(0.31)}}
    text = summary_table(curves, CAPS)
    assert "cost model uniform (= served ratio: HBM + lower tiers)" in text and "block hit ratio" not in text
    assert "vs LRU = mean minus LRU's above the same pool" in text
    s3 = {x.split()[2]: x.split() for x in text.splitlines() if x.startswith("s3fifo @")}
    assert s3["dram=0"][-2:] == ["+2.00", "+2.00"] and s3["dram=1TiB"][-2:] == ["+1.00", "+1.00"]
    flat = summary_table({"uniform": {"lru": _rank_rows(0.1)}}, CAPS)
    assert "cost model uniform (= block hit ratio)" in flat


def test_an_hbm_capacity_above_the_parts_memory_is_warned_of():
    w = hbm_warning(CAPS, {"part": "h100_sxm"})
    assert "h100_sxm has 80 GB of HBM per GPU" in w and "1 HBM capacity" in w and "1TiB" in w and "24GiB" not in w
    assert hbm_warning(CAPS[:1], {"part": "h100_sxm"}) == "" and hbm_warning(CAPS, None) == ""


def test_counts_say_sizes_times_modes_in_the_right_number():
    pools = [(p, ()) for p in ("dram=0", "dram=64GiB[on_evict]", "dram=64GiB[on_compute]", "dram=1TiB[on_evict]",
                               "dram=1TiB[on_compute]")]
    assert pool_count(pools) == "3 pool sizes x 2 modes"
    assert pool_count([("dram=1TiB", ())]) == "1 pool size"


def _study(table_lines=0, **kw):
    spec = NS(policies=[NS(name=n) for n in ("lru", "s3fifo", "tier_bound")], cost_models=["uniform", "linear"],
              tiers=[{"capacity": 1}], tier_name="hbm_dram", tier_rules="vllm_cpu", hardware={"part": "h100_sxm"},
              counting={"window": None}, sample_rate=None, counting_preset="vllm")
    return NS(trace=NS(name="mooncake_conversation", source="real"), spec=spec, caps=CAPS, fleet=None,
              pools=[("dram=0", ()), ("dram=1TiB[on_evict]", ()), ("dram=1TiB[on_compute]", ())],
              warnings=[hbm_warning(CAPS, spec.hardware)], cfg=NS(sim={"engine": "vllm"}), **kw)


def test_run_names_say_what_the_sweep_is():
    assert sweep_name(_study(), "20260101-000000") == \
        "mooncake_conversation | tier=hbm_dram (vllm_cpu) | counting=vllm | 20260101-000000"


def test_the_description_stays_under_mlflows_limit_as_valid_markdown():
    st = _study()
    head = description(st, views={"uniform": "#/experiments/1/runs?viewStateShareKey=k"})
    assert "2 policies (+ tier_bound [oracle], the hierarchy's bound) x 2 capacities" in head
    assert "2 pool sizes x 2 modes" in head and "sim.counting=vllm" in head and "**Warning:** hardware=h100" in head
    assert "[uniform](#/experiments/1/runs?viewStateShareKey=k)" in head
    sections = ["\n".join(f"section {k} line {j} " + "x" * 80 for j in range(12)) for k in range(20)]
    text = description(st, "\n\n".join(sections), "work: 1 job", views={})
    assert len(text) <= MAX_TAG and text.count("```") == 2 and text.endswith("```")
    assert "the rest: summary.txt" in text and "section 0 line 11" in text and "section 19" not in text
    small = description(st, "one table", "work: 1 job")
    assert small.endswith("```\none table\n\nwork: 1 job\n```") and "the rest" not in small


def test_a_view_draws_one_cost_model_over_capacity_on_a_log_axis():
    ids = ["a" * 32, "b" * 32]
    st = view_state(ids, "uniform", GIB, tiered=True)
    assert st["searchFilter"] == f"attributes.run_id IN ('{ids[0]}', '{ids[1]}')"
    assert st["runsHiddenMode"] == "SHOW_ALL" and st["orderByKey"] == "metrics.`compute_savings_mean_hbm`"
    assert "metrics.`compute_savings_mean_pool`" in st["selectedColumns"] and "tags.`pool`" in st["selectedColumns"]
    lines = st["compareRunCharts"]
    assert [c["metricKey"] for c in lines] == ["curve/compute_savings", "curve/served_ratio", "curve/ttft_mean_s"]
    # MLflow 3.17 draws a log x axis for the step only; a curve's step is its capacity in MiB
    assert all(c["xAxisKey"] == "step" and c["xAxisScaleType"] == "log" and c["runsCountToCompare"] >= 1000
               for c in lines)
    assert len(json.dumps(view_state(["c" * 32] * 200, "uniform", GIB, True))) < 20000  # an experiment tag's limit
    assert rank_key([300.0]) == "compute_savings_mean_pool" and rank_key([1.0]) == "compute_savings_mean"
    url = view_url("http://127.0.0.1:5000/#/experiments/3?workflowType=machine_learning", "k")
    assert re.fullmatch(r"http://127\.0\.0\.1:5000/#/experiments/3/runs\?workflowType=machine_learning"
                        r"&compareRunsMode=CHART&viewStateShareKey=k", url)


def test_a_pool_is_a_number_a_chart_can_plot():
    from sweep.record import pool_gib

    st = _study()
    st.pools = [("dram=0", ({"capacity": 0},)), ("dram=1TiB[on_evict]", ({"capacity": 699051},))]
    assert pool_gib(st, "dram=1TiB[on_evict]") == pool_gib(st, "dram=1TiB") == round(699051 * 1.5 / 1024, 6)
    assert pool_gib(st, "dram=0") == 0.0
