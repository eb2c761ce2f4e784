"""sweep.report.windows: the per-window ranking of online policies against Belady, by hand."""
from __future__ import annotations

import pytest

from sweep.report.windows import ranking, ranking_text


def _row(policy, window, cs, acc=10):
    return {"policy": policy, "cost_model": "uniform", "capacity_index": 0, "capacity_label": "24GiB",
            "window": window, "start_s": 60.0 * window, "accesses": acc, "hit_ratio": cs, "token_hit_ratio": cs,
            "compute_savings": cs}


def test_ranking_by_hand():
    # window 0: lru 0.5, fifo 0.4, belady 0.6; window 1: lru 0.3 = fifo 0.3 (a tie), belady 0.5;
    # window 2 has no accesses and is left out
    rows = [_row("lru", 0, 0.5), _row("fifo", 0, 0.4), _row("belady", 0, 0.6),
            _row("lru", 1, 0.3), _row("fifo", 1, 0.3), _row("belady", 1, 0.5),
            _row("lru", 2, 0.0, acc=0), _row("fifo", 2, 0.9, acc=0), _row("belady", 2, 0.9, acc=0)]
    got = {r["policy"]: r for r in ranking(rows)}
    assert set(got) == {"lru", "fifo"}  # the oracle is the yardstick, not ranked
    assert got["lru"]["windows"] == 2 and got["lru"]["won_share"] == 1.0
    assert got["fifo"]["won_share"] == 0.5
    assert got["lru"]["gap_mean_points"] == pytest.approx((10 + 20) / 2)
    assert got["fifo"]["gap_worst_points"] == pytest.approx(20)
    # lru wins window 0 by 10 points and ties window 1 (lead 0); fifo wins only the tie
    assert got["lru"]["lead_mean_points"] == pytest.approx(5.0)
    assert got["fifo"]["lead_mean_points"] == pytest.approx(0.0)
    text = ranking_text(ranking(rows), "uniform")
    assert text.splitlines()[3].split()[1] == "lru"  # most windows won first


def test_without_belady_there_is_no_gap():
    r = ranking([_row("lru", 0, 0.5), _row("fifo", 0, 0.4)])
    assert all(x["gap_mean_points"] != x["gap_mean_points"] for x in r)
    lead = {x["policy"]: x["lead_mean_points"] for x in r}
    assert lead["lru"] == pytest.approx(10.0) and lead["fifo"] != lead["fifo"]  # fifo never wins
    assert "no Belady curve" in ranking_text(r, "uniform")
