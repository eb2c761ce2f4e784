"""One-pass LRU curves equal per-capacity replay exactly."""
from __future__ import annotations

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.structures.onepass import percentile_from_hist
from sim_core.catalog.capacity import saturation_capacity
from sim_core.replay.units import ONE_PASS_COST, replay_units
from tests.helpers import mooncake_trace, session_trace

KEYS = ["hits", "hit_ratio", "recomputed_blocks", "holes_total", "holes_per_request_mean",
        "holes_per_request_p50", "holes_per_request_p99", "holes_per_request_max",
        "hole_length_mean", "evictions", "oversized_requests", "max_resident_blocks"]


def _compare(trace, caps, mode, hits, order=None):
    units = replay_units(caps, saturation=saturation_capacity(trace), max_request_blocks=trace.max_request_blocks,
                         mode=mode, one_pass=True)
    assert any(u.kind == "one_pass" for u in units), "the comparison must run a one-pass curve"
    one = simulate(trace, "lru", caps, mode=mode, hits=hits, order=order, cost_models=["uniform", "linear"])
    each = simulate(trace, "lru", caps, mode=mode, hits=hits, order=order, cost_models=["uniform", "linear"],
                    one_pass=False)
    for a, b in zip(one, each):
        for k in KEYS:
            assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-12, abs=1e-12), (mode, hits, a.capacity_blocks, k)
        for m in ("uniform", "linear"):
            assert a.compute_savings[m] == pytest.approx(b.compute_savings[m], rel=1e-12)


@pytest.mark.parametrize("mode,order", [("request", None), ("request", "forward"), ("block", None)])
@pytest.mark.parametrize("hits", ["block", "prefix"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_pass_equals_replay_on_session_traces(mode, order, hits, seed):
    """Request mode in both walks: the default tail-first one and the forward one."""
    t = session_trace(n_sessions=150, seed=seed)
    lo = t.max_request_blocks
    caps = sorted({lo, lo + 1, lo + 7, 2 * lo, 3 * lo + 5, 10 * lo, t.n_unique, t.n_unique + 50})
    _compare(t, caps, mode, hits, order)


@pytest.mark.parametrize("mode", ["request", "block"])
@pytest.mark.parametrize("hits", ["block", "prefix"])
def test_one_pass_equals_replay_on_mooncake(mode, hits):
    t = mooncake_trace()
    caps = [int(c) for c in np.unique(np.geomspace(t.max_request_blocks, 2 * t.n_unique, 12).astype(int))]
    _compare(t, caps, mode, hits)


@pytest.mark.parametrize("mode", ["request", "block"])
def test_one_pass_equals_replay_every_capacity_of_a_random_trace(mode):
    # many accesses per distinct block: the stack's timestamps are renumbered many times,
    # and every capacity from the largest request to all blocks is a bucket boundary
    rng = np.random.default_rng(7)
    reqs = [list(rng.zipf(1.3, rng.integers(1, 9)) % 1500) for _ in range(3000)]
    t = Trace.from_requests(reqs)
    caps = list(range(t.max_request_blocks, t.n_unique + 2))
    _compare(t, caps, mode, "block")


def test_small_capacities_fall_back_to_replay():
    # capacity 3 is below the largest request: oversized there, one-pass above
    t = Trace.from_requests([[1, 2, 3, 4], [1, 2], [5], [6, 7], [1, 2, 3, 4], [8]])
    recs = simulate(t, "lru", [3, 4, 5, 6])
    assert recs[0].oversized_requests == 2
    assert [r.capacity_blocks for r in recs] == [3, 4, 5, 6]
    _compare(t, [3, 4, 5, 6, 9], "request", "block")


def test_one_pass_only_where_it_is_cheaper():
    """A curve costs ONE_PASS_COST replays: fewer capacities are replayed directly, and
    capacities at or above saturation count as one replay."""
    assert ONE_PASS_COST == 2.0  # the cases below are written for it
    kinds = lambda caps, **kw: [(u.kind, u.capacities) for u in replay_units(
        caps, saturation=100, max_request_blocks=10, one_pass=True, **kw)]
    assert kinds([50]) == [("single", (50,))]
    assert kinds([20, 50]) == [("single", (20,)), ("single", (50,))]
    assert kinds([50, 100, 200]) == [("single", (50,)), ("saturated", (100, 200))]
    assert kinds([20, 50, 100]) == [("one_pass", (20, 50, 100))]
    assert kinds([5, 20, 50, 60]) == [("one_pass", (20, 50, 60)), ("single", (5,))]
    assert kinds([5], mode="block") == [("single", (5,))]
    assert kinds([5, 6, 7], mode="block") == [("one_pass", (5, 6, 7))]


@pytest.mark.parametrize("mode", ["request", "block"])
def test_a_single_capacity_equals_its_point_of_the_curve(mode):
    """The same numbers whichever way the rule sends a capacity: alone (a direct replay)
    and among many (the one-pass curve)."""
    t = session_trace(n_sessions=120, seed=3)
    lo = t.max_request_blocks
    caps = [lo, 2 * lo, 5 * lo, t.n_unique]
    curve = simulate(t, "lru", caps, mode=mode, cost_models=["uniform", "linear"])
    for cap, a in zip(caps, curve):
        b = simulate(t, "lru", [cap], mode=mode, cost_models=["uniform", "linear"])[0]
        for k in KEYS:
            assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-12, abs=1e-12), (cap, k)


def test_percentile_from_hist_matches_numpy():
    rng = np.random.default_rng(0)
    for _ in range(50):
        vals = rng.integers(0, 9, rng.integers(1, 40))
        hist = np.bincount(vals)
        for q in (0, 50, 90, 99, 100):
            assert percentile_from_hist(hist, q) == pytest.approx(np.percentile(vals, q))
