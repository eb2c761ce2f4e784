"""One-pass LRU curves equal per-capacity replay exactly."""
from __future__ import annotations

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.onepass import percentile_from_hist
from tests.helpers import mooncake_trace, session_trace

KEYS = ["hits", "hit_ratio", "recomputed_blocks", "holes_total", "holes_per_request_mean",
        "holes_per_request_p50", "holes_per_request_p99", "holes_per_request_max",
        "hole_length_mean", "evictions", "oversized_requests", "max_resident_blocks"]


def _compare(trace, caps, mode, hits, order=None):
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
    t = Trace.from_requests([[1, 2, 3, 4], [1, 2], [5], [1, 2, 3, 4]])
    recs = simulate(t, "lru", [3, 4, 6])
    assert recs[0].oversized_requests == 2
    assert [r.capacity_blocks for r in recs] == [3, 4, 6]
    _compare(t, [4, 5, 6, 9], "request", "block")


def test_percentile_from_hist_matches_numpy():
    rng = np.random.default_rng(0)
    for _ in range(50):
        vals = rng.integers(0, 9, rng.integers(1, 40))
        hist = np.bincount(vals)
        for q in (0, 50, 90, 99, 100):
            assert percentile_from_hist(hist, q) == pytest.approx(np.percentile(vals, q))
