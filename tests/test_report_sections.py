"""report.html from hand-made sweep tables: the whole page with its figures, the pool
sizing section of a tiered sweep and the windows section of a windowed one (present
when the table has them, absent otherwise), and curves.csv read back with its pools."""
from __future__ import annotations

import base64
import math
import re

import pytest

from sweep.report.sweeps import SweepTable

GIBS = (24.0, 32.0, 48.0, 64.0, 96.0, 1024.0)
BLOCKS = tuple(round(g * 683) for g in GIBS)
SATURATION = BLOCKS[-1]  # only 1 TiB holds the whole trace
LRU = (0.30, 0.34, 0.40, 0.45, 0.50, 0.62)


def _rows(values, **extra):
    return [{"capacity_index": i, "capacity_label": f"{g:g}GiB", "capacity_gib": g, "capacity_blocks": b,
             "hit_ratio": v, "compute_savings": v, "holes_per_request_mean": 1.0, "sample_rate": 1.0, **extra}
            for i, (g, b, v) in enumerate(zip(GIBS, BLOCKS, values))]


def _offset(points):
    """LRU plus `points` at the smallest capacity, shrinking to 0 at saturation."""
    return [v + points / 100 * (1 - i / (len(LRU) - 1)) for i, v in enumerate(LRU)]


CURVES = {"lru": LRU, "fifo": _offset(-2.0), "arc": _offset(-1.0), "s3fifo": _offset(1.5), "sieve": _offset(0.8),
          "s4fifo": _offset(0.4), "lirs": _offset(-0.5), "lfu": _offset(0.8), "belady": _offset(18.0)}


def table(windows=False, pools=None) -> SweepTable:
    """`pools`: pool label -> its rank k (served ratio +0.1 k, TTFT 200 - 50 k ms)."""
    curves = {"uniform": {}}
    for p, vals in CURVES.items():
        if pools:
            for pool, k in pools.items():
                curves["uniform"][f"{p} @ {pool}"] = [
                    {**r, "served_ratio": min(1.0, r["hit_ratio"] + 0.1 * k), "ttft_mean_s": 0.2 - 0.05 * k,
                     "compute_savings": min(1.0, r["hit_ratio"] + 0.1 * k)}  # a lower-tier hit saves compute
                    for r in _rows(vals, pool=pool)]
        else:
            curves["uniform"][p] = _rows(vals)
    t = SweepTable(experiment="t-synthetic", run_id="r" * 32, run_name="sweep-x", trace_source="synthetic",
                   n_capacities=len(GIBS), curves=curves, cost_models=["uniform"], saturation_blocks=SATURATION)
    if windows:
        from sweep.report.windows import ranking

        t.windows = [{"policy": p, "cost_model": "uniform", "capacity_index": i, "capacity_label": f"{GIBS[i]:g}GiB",
                      "window": w, "start_s": 600.0 * w, "accesses": 100, "hit_ratio": v + 0.02 * math.sin(w + k),
                      "token_hit_ratio": v, "compute_savings": v + 0.02 * math.sin(w + k)}
                     for k, (p, vals) in enumerate(CURVES.items()) for i, v in enumerate(vals) for w in range(12)]
        t.window_ranking = ranking(t.windows)
    return t


def _pngs(html: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def test_the_whole_report_renders_with_its_figures(tmp_path):
    from sweep.report.html import write_report

    html = write_report(table(), tmp_path).read_text()
    assert [p[:8] for p in _pngs(html)] == [b"\x89PNG\r\n\x1a\n"]
    assert (tmp_path / "plots" / "curves_uniform.png").is_file()
    # lfu and sieve are the same curve: drawn once, and the page says so
    assert re.search(r'<p class="identical" data-cost-model="uniform">[^<]*lfu = sieve', html)
    assert 'id="tiers"' not in html and 'id="windows"' not in html
    assert not (tmp_path / "plots" / "tiers.png").exists() and not (tmp_path / "plots" / "windows.png").exists()


def test_windows_section_when_the_sweep_has_windows(tmp_path):
    from sweep.report.html import write_report

    t = table(windows=True)
    html = write_report(t, tmp_path).read_text()
    section = re.search(r'<section id="windows">.*?</section>', html, re.S).group(0)
    assert len(_pngs(section)) == 1 and (tmp_path / "plots" / "windows.png").is_file()
    rows = re.findall(r'<tr data-policy="([^"]+)"><td>([^<]*)</td>', section)
    # below saturation (1 TiB is left out): 32 and 64 GiB, the online policies only
    assert {c for _, c in rows} == {"32 GiB", "64 GiB"}
    assert {p for p, _ in rows} == set(CURVES) - {"belady"}
    won = {r["policy"]: r for r in t.window_ranking if r["capacity_index"] == 1}
    best = max(won, key=lambda p: won[p]["won_share"])
    first = re.search(r'<tr data-policy="([^"]+)"><td>32 GiB</td>.*?</tr>', section).group(0)
    assert f'data-policy="{best}"' in first and f"{won[best]['gap_mean_points']:.2f}" in first
    assert '<a href="#windows">' in html


def test_tier_section_when_the_sweep_has_pools(tmp_path):
    from sweep.report.html import write_report
    from sweep.report.sizing import knee

    pools = ("dram=0", "dram=12GiB", "dram=1TiB")
    # in the order of the file, not of size: the report sorts them
    html = write_report(table(pools={"dram=1TiB": 2, "dram=0": 0, "dram=12GiB": 1}), tmp_path).read_text()
    section = re.search(r'<section id="tiers">.*?</section>', html, re.S).group(0)
    assert len(_pngs(section)) == 1 and (tmp_path / "plots" / "tiers.png").is_file()
    tables = re.findall(r'<table class="tiers" data-capacity-index="(\d+)">(.*?)</table>', section, re.S)
    assert [int(i) for i, _ in tables] == [0, 2, 3, 5]  # pick_points(6, 4)
    head = re.findall(r"<th>(dram=[^<]+)</th>", tables[0][1])
    assert head[:3] == list(pools) and len(head) == 6  # served ratio, then TTFT, per pool
    lru = re.search(r'<tr data-policy="lru" data-knee="([^"]+)" data-saturated="([a-z]+)"><td>lru</td>(.*?)</tr>',
                    tables[0][1])
    served = [(p, min(1.0, LRU[0] + 0.1 * k)) for k, p in enumerate(pools)]
    assert lru.group(1) == pools[knee(served)] == "dram=1TiB"
    # 10 points from 12 GiB to 1 TiB: the largest pool is no knee, and the cell says so
    assert lru.group(2) == "false"
    cells = re.findall(r"<td>([^<]*)</td>", lru.group(3))
    assert cells[:3] == [f"{s:.4f}" for _, s in served] and cells[4:] == ["200.0", "150.0", "100.0"]
    assert cells[3] == "not saturated in the range swept (&gt;dram=1TiB)"


def test_a_tiered_sweep_is_compared_with_lru_at_the_smallest_pool():
    from sweep.report.plots import reference_label

    assert reference_label({"lru @ dram=1TiB": [], "lru @ dram=12GiB": [], "lru @ dram=0": [], "fifo @ dram=0": []}) \
        == "lru @ dram=0"
    assert reference_label({"lru": [], "lru @ dram=0": []}) == "lru"
    assert reference_label({"fifo": []}) == "lru"  # none: the figure says LRU is not in the sweep


def test_curves_csv_keeps_the_pool(tmp_path):
    from sweep.curves import csv_columns, write_csv
    from sweep.report.sweeps import read_curves_csv, read_rows_csv

    rows = [{"policy": "lru @ dram=1TiB", "cost_model": "uniform", "capacity_index": 0, "capacity_label": "24GiB",
             "capacity_gib": 24.0, "capacity_blocks": 16, "served_ratio": 0.5, "pool": "dram=1TiB"},
            {"policy": "lru @ dram=0", "cost_model": "uniform", "capacity_index": 0, "capacity_label": "24GiB",
             "capacity_gib": 24.0, "capacity_blocks": 16, "served_ratio": 0.4}]  # as before the column
    write_csv(tmp_path / "curves.csv", rows, csv_columns(rows))
    got = read_curves_csv(tmp_path / "curves.csv")["uniform"]
    assert got["lru @ dram=1TiB"][0]["pool"] == "dram=1TiB" and got["lru @ dram=0"][0]["pool"] == "dram=0"
    assert got["lru @ dram=0"][0]["capacity_index"] == 0 and got["lru @ dram=0"][0]["served_ratio"] == 0.4
    flat = [{"policy": "lru", "cost_model": "uniform", "capacity_blocks": 16.0, "window": 3, "accesses": 10, "hit_ratio": 0.25}]
    write_csv(tmp_path / "w.csv", flat, csv_columns(flat, ()))
    assert read_rows_csv(tmp_path / "w.csv") == [{**flat[0]}]
    assert "pool" not in read_curves_csv(tmp_path / "w.csv")["uniform"]["lru"][0]


@pytest.mark.parametrize("windows", [False, True])
def test_the_logged_and_regenerated_reports_agree(tmp_path, windows):
    """The sweep renders from rows in memory, `analysis report` from the CSVs: same page.
    The curves go through curves.csv as the sweep writes it (sweep.tracking) and come back
    through read_curves_csv, the windows through windows.csv and window_ranking.csv."""
    import dataclasses

    from sweep.curves import LABEL_COLUMNS, csv_columns, write_csv
    from sweep.report.html import render_html
    from sweep.report.sweeps import read_curves_csv, read_rows_csv

    t = table(windows=windows)
    rows = [{"policy": p, "cost_model": m, **r} for m, per in t.curves.items() for p, rs in per.items() for r in rs]
    write_csv(tmp_path / "curves.csv", rows, csv_columns(rows, ("policy", "cost_model") + LABEL_COLUMNS))
    back = dataclasses.replace(t, curves=read_curves_csv(tmp_path / "curves.csv"), windows=[], window_ranking=[])
    assert back.curves.keys() == t.curves.keys() and back.curves["uniform"].keys() == t.curves["uniform"].keys()
    if windows:
        write_csv(tmp_path / "w.csv", t.windows, csv_columns(t.windows, ()))
        write_csv(tmp_path / "r.csv", t.window_ranking, csv_columns(t.window_ranking, ()))
        back.windows, back.window_ranking = read_rows_csv(tmp_path / "w.csv"), read_rows_csv(tmp_path / "r.csv")
        assert 'id="windows"' in render_html(back, {})
    assert render_html(back, {}) == render_html(t, {})


def test_a_tiered_sweep_takes_margins_against_lru_above_the_same_pool():
    from sweep.report.html import ranking, reference_of, regimes, says

    t = table(pools={"dram=0": 0, "dram=1TiB": 1})
    assert reference_of("s3fifo @ dram=1TiB") == "lru @ dram=1TiB" and reference_of("s3fifo") == "lru"
    rank = ranking(t, "uniform", regimes(t, "uniform")[0])
    by = {r.policy: r for r in rank}
    assert by["lru @ dram=1TiB"].vs_lru == 0.0 and by["lru @ dram=0"].vs_lru == 0.0
    assert all(r.vs_lru is not None for r in rank)
    assert not any("LRU is not in this sweep" in s for s in says(t, "uniform"))


def test_tier_section_with_modes_and_the_bound(tmp_path):
    """Pools swept over two write modes, with the bound's curves: a row per (policy, mode),
    the knee and the winning mode on the winning mode's row only, each row's gap to the
    bound at the knee, and the bound marked as an oracle."""
    from sweep.report.html import write_report

    t = table(pools={"dram=0": 0, "dram=1TiB[a]": 1, "dram=1TiB[b]": 2})
    for pool, k in (("dram=0", 0), ("dram=1TiB", 3)):  # the bound: one curve per pool size
        t.curves["uniform"][f"tier_bound @ {pool}"] = [
            {**r, "served_ratio": min(1.0, r["hit_ratio"] + 0.1 * k), "compute_savings": r["hit_ratio"]}
            for r in _rows(LRU, pool=pool)]
    html = write_report(t, tmp_path).read_text()
    section = re.search(r'<section id="tiers">.*?</section>', html, re.S).group(0)
    first = re.findall(r'<table class="tiers" data-capacity-index="(\d+)">(.*?)</table>', section, re.S)[0][1]
    rows = re.findall(r'<tr data-policy="lru" data-mode="([^"]+)" data-knee="([^"]+)" data-saturated="false">'
                      r'<td>lru</td>(.*?)</tr>', first)
    assert [(m, k) for m, k, _ in rows] == [("a", "dram=1TiB"), ("b", "dram=1TiB")]
    cells = {m: re.findall(r"<td>([^<]*)</td>", c) for m, _, c in rows}
    # mode, served at 0 and 1 TiB, knee, wins, TTFT at 0 and 1 TiB, gap
    served = {"a": LRU[0] + 0.1, "b": LRU[0] + 0.2}
    assert cells["b"][4] == "b" and cells["a"][3:5] == ["", ""]  # b serves the most at the knee: its row
    assert cells["b"][3].startswith("not saturated in the range swept")
    for m in ("a", "b"):
        assert cells[m][2] == f"{served[m]:.4f}"
        assert cells[m][-1] == f"{(LRU[0] + 0.3 - served[m]) * 100:+.2f}"
    assert re.search(r'<tr data-policy="tier_bound"[^>]* class="oracle"><td>tier_bound \[oracle\]</td>', first)


def test_the_agent_hint_section_has_the_gap_recovered_by_hand():
    from sweep.report.agents import gap_rows
    from sweep.report.html import render_html

    assert 'id="agents"' not in render_html(table(), {})  # no hint swept: no section
    t = table()
    # agent_end: LRU + 9 points everywhere, half of Belady's 18-point lead at 24 GiB only;
    # over the HBM capacities (24, 32, 48, 64, 96 GiB) Belady leads by 18 x (1 + .8 + .6 + .4 + .2) = 54
    # points in sum, agent_end by 9 x 5 = 45: 45 / 54 recovered. The pool regime (1 TiB) has
    # no gap (saturation): no share.
    t.curves["uniform"]["agent_end"] = _rows([v + 0.09 if i < 5 else v for i, v in enumerate(LRU)])
    rows = {r["regime"]: r for r in gap_rows(t)}
    assert rows["HBM"]["share"] == pytest.approx(45 / 54)
    assert rows["HBM"]["capacities"] == 5
    assert math.isnan(rows["memory pool"]["share"])
    html = render_html(t, {})
    assert 'id="agents"' in html and "+83.3%" in html
