"""Sampled replay (miniature simulation): what a sample keeps, and how simulate uses it."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.traces.sample import MIN_SAMPLED_BLOCKS, capacity_rates, keep_mask, sample, sample_of
from tests.helpers import session_trace


@pytest.fixture(scope="module")
def big():
    # ~100 sessions x up to 12 turns of prefix-chained requests, a few thousand blocks
    return session_trace(n_sessions=400, seed=5)


def test_rate_one_is_the_exact_replay(big):
    caps = [50, 300, 2000]
    for policy in ("lru", "fifo", "s3fifo", "belady", "random_compute"):
        exact = simulate(big, policy, caps, cost_models=["uniform", "linear"])
        assert simulate(big, policy, caps, cost_models=["uniform", "linear"], sample_rate=1.0) == exact


def test_a_sample_keeps_every_access_of_a_kept_block_in_order_with_its_true_depth(big):
    s = sample(big, 0.3, seed=1, by="block")
    keep = keep_mask(big.blocks.astype(np.int64), 0.3, 1)
    kept_ids = np.unique(big.blocks[keep])
    # every access of a kept block survives (hashing keys, not accesses)
    assert int(np.isin(big.blocks, kept_ids).sum()) == s.n_accesses == int(keep.sum())
    assert s.n_unique == len(kept_ids)
    # request by request: the kept blocks in order, each with its depth in the full request
    r_s = 0
    depths = big.depths()
    for r in range(big.n_requests):
        lo, hi = big.req_offsets[r], big.req_offsets[r + 1]
        k = keep[lo:hi]
        if not k.any():
            continue
        got = s.blocks[s.req_offsets[r_s]:s.req_offsets[r_s + 1]]
        assert len(got) == k.sum()
        assert list(s.depth[s.req_offsets[r_s]:s.req_offsets[r_s + 1]]) == list(depths[lo:hi][k])
        assert s.arrival_s[r_s] == big.arrival_s[r]
        r_s += 1
    assert r_s == s.n_requests
    assert abs(len(kept_ids) / big.n_unique - 0.3) < 0.03


def test_sampling_is_deterministic_for_a_seed(big):
    a, b, c = (sample(big, 0.2, seed=s, by=by) for s, by in ((7, "block"), (7, "block"), (8, "block")))
    assert np.array_equal(a.blocks, b.blocks) and np.array_equal(a.depth, b.depth)
    assert not (a.n_accesses == c.n_accesses and np.array_equal(a.blocks, c.blocks))
    r1 = simulate(big, "s3fifo", [3000, 6000], sample_rate=0.2, sample_seed=7)
    r2 = simulate(big, "s3fifo", [3000, 6000], sample_rate=0.2, sample_seed=7)
    key = [(x.hit_ratio, x.compute_savings, x.evictions, x.sample_rate) for x in r1]
    assert key == [(x.hit_ratio, x.compute_savings, x.evictions, x.sample_rate) for x in r2]
    assert all(x.sample_rate == 0.2 for x in r1)


def test_session_sampling_keeps_whole_sessions(big):
    s = sample(big, 0.25, seed=3, by="session")
    kept = set(s.session.tolist())
    for r in range(big.n_requests):
        if big.session[r] in kept:
            assert big.session[r] >= 0
    # a kept session keeps all its requests, whole
    n_full = sum(int(big.req_offsets[r + 1] - big.req_offsets[r]) for r in range(big.n_requests)
                 if big.session[r] in kept)
    assert s.n_accesses == n_full


def test_capacities_below_the_floor_are_sampled_at_a_higher_rate_and_say_so(big):
    def floor(r):
        return max(MIN_SAMPLED_BLOCKS["block"], sample_of(big, r, by="block").max_request_blocks)

    hi = int(floor(0.1) / 0.1) + 50  # scales to just above the floor at r = 0.1
    lo = int(floor(0.1) / 0.1) - 50  # just below: needs r = 0.2
    tiny = 3  # below the floor at every rate: replayed exactly
    rates = capacity_rates(big, [tiny, lo, hi], 0.1, 0, "block", "request")
    assert rates[hi] == 0.1 and rates[tiny] == 1.0
    assert rates[lo] == 0.2 and round(lo * 0.2) >= floor(0.2)
    got = simulate(big, "lru", [tiny, lo, hi], sample_rate=0.1, sample_by="block")
    assert [g.sample_rate for g in got] == [1.0, 0.2, 0.1]
    assert got[0] == simulate(big, "lru", tiny)[0]
    assert got[2].hit_ratio == simulate(sample_of(big, 0.1, by="block"), "lru", round(hi * 0.1))[0].hit_ratio
    assert all(math.isnan(getattr(got[2], k)) for k in ("holes_total", "holes_per_request_mean", "hole_length_mean"))
    assert got[2].accesses == big.n_accesses and got[2].capacity_blocks == hi


def test_prefix_hits_and_bad_rates_are_refused(big):
    with pytest.raises(ValueError, match="prefix"):
        simulate(big, "lru", 2000, hits="prefix", sample_rate=0.1)
    for bad in (0, -0.1, 1.5, "0.1", True):
        with pytest.raises(ValueError, match="sample_rate"):
            simulate(big, "lru", 2000, sample_rate=bad)


def test_a_sample_charges_the_true_depth():
    # [0..7], its first half, [0..7] again, in an unbounded cache: the kept blocks' costs
    # must be their depths in the full requests, not their positions in the sample
    t = Trace.from_requests([list(range(8)), list(range(4)), list(range(8))])
    s = sample(t, 0.5, seed=11, by="block")
    kept = np.arange(8)[keep_mask(np.arange(8, dtype=np.int64), 0.5, 11)]
    assert 1 < len(kept) < 8 and kept.min() > 0  # a sample whose positions differ from depths
    assert list(s.depth[: len(kept)]) == list(kept)
    w = kept + 1.0  # linear cost of depth k
    half = w[kept < 4]
    want = (half.sum() + w.sum()) / (2 * w.sum() + half.sum())
    rec = simulate(s, "lru", 100, cost_models=["linear"])[0]
    assert rec.compute_savings["linear"] == pytest.approx(want)


def test_actors_can_replay_from_the_samples_alone(big):
    """A sweep ships only the samples when every capacity is sampled: results equal
    those computed on the trace itself, and an exact replay is refused clearly."""
    from sim_core.traces.sample import SampleSet
    from sweep.traces import from_payload, to_payload

    caps = [2000, 4000, 9000]
    want = simulate(big, "s3fifo", caps, cost_models=["uniform", "linear"], sample_rate=0.1)
    shipped = from_payload(to_payload(SampleSet.of(big)))
    got = simulate(shipped, "s3fifo", caps, cost_models=["uniform", "linear"], sample_rate=0.1)
    assert [(g.hit_ratio, g.compute_savings, g.sample_rate, g.accesses) for g in got] == \
        [(w.hit_ratio, w.compute_savings, w.sample_rate, w.accesses) for w in want]
    with pytest.raises(AttributeError, match="needs the trace itself"):
        simulate(shipped, "s3fifo", 3, cost_models=["uniform"], sample_rate=0.1)


def test_a_policy_that_misses_the_error_target_stays_exact_unless_forced(big):
    from sim_core import get_policy

    assert not get_policy("wtinylfu").sample_ok and get_policy("lru").sample_ok
    caps = [3000, 6000]
    exact = simulate(big, "wtinylfu", caps)
    assert simulate(big, "wtinylfu", caps, sample_rate=0.2) == exact  # replayed exactly: equal, holes included
    forced = simulate(big, "wtinylfu", caps, sample_rate=0.2, sample_force=True)
    assert [f.sample_rate for f in forced] == [0.2, 0.2]


def test_a_depth_sample_keeps_every_mth_depth_of_each_prefix_tree(big):
    """by="depth": block b is kept iff (depth(b) + h(root(b))) % m == 0, so each request
    keeps floor or ceil of len/m blocks, and a request that fits a cache of C blocks
    fits the scaled cache of ceil(C/m): requests and caches scale alike."""
    from sim_core.traces.sample import depth_keep, scaled_capacity, stride

    rate, seed = 0.2, 4
    m = stride(rate)
    assert m == 5
    keep = depth_keep(big, rate, seed)
    # brute force: a block's depth and root where it first appears, then the rule
    first = {}
    depths = big.depths()
    for r in range(big.n_requests):
        lo, hi = big.req_offsets[r], big.req_offsets[r + 1]
        for i in range(lo, hi):
            first.setdefault(int(big.blocks[i]), (int(depths[i]), int(big.blocks[lo])))
    offs = {}
    for b, (d, root) in first.items():
        offs.setdefault(root, (d + 0) % m if keep[b] else None)
    for b, (d, root) in first.items():
        # within one prefix tree, the kept depths are one residue class mod m
        same = [(dd % m) for bb, (dd, rr) in first.items() if rr == root and keep[bb]]
        assert len(set(same)) <= 1
        if same:
            assert keep[b] == (d % m == same[0])
    s = sample(big, rate, seed=seed, by="depth")
    lengths, kept_len = big.request_lengths, []
    r_s = 0
    for r in range(big.n_requests):
        k = int(keep[big.blocks[big.req_offsets[r]:big.req_offsets[r + 1]]].sum())
        assert lengths[r] // m <= k <= -(-lengths[r] // m)
        if k:
            assert s.request_lengths[r_s] == k
            r_s += 1
    assert r_s == s.n_requests
    # a request fits the real cache => its sample fits the scaled cache
    for cap in (7, 40, int(lengths.max())):
        fits = lengths <= cap
        per_req = [int(keep[big.blocks[big.req_offsets[r]:big.req_offsets[r + 1]]].sum()) for r in range(big.n_requests)]
        assert all(k <= scaled_capacity(cap, rate, "depth") for k, f in zip(per_req, fits) if f)
    assert abs(s.n_unique / big.n_unique - 1 / m) < 0.05


def test_depth_sampling_is_the_default_and_close_to_exact(big):
    from sim_core import get_policy

    assert get_policy("lru").sample_by == "depth" and get_policy("partial_node").sample_by == "depth"
    caps = [3000, 5000, 9000]  # scaled: >= 64 blocks, the floor
    exact = simulate(big, "lru", caps)
    got = simulate(big, "lru", caps, sample_rate=0.1, sample_seed=3)
    assert [g.sample_rate for g in got] == [0.1] * 3
    for g, e in zip(got, exact):
        assert g.hit_ratio == simulate(sample_of(big, 0.1, 3, "depth"), "lru",
                                       -(-g.capacity_blocks // 10))[0].hit_ratio
        assert abs(g.hit_ratio - e.hit_ratio) < 0.05


def test_a_policy_keeps_its_own_floor(big):
    """Depth samples: 64 blocks; PartialNode asks for 512 (PolicySpec.sample_floor), so
    a capacity scaling to 64-511 blocks runs at a raised rate for it only."""
    from sim_core import get_policy

    assert MIN_SAMPLED_BLOCKS["depth"] == 64 and get_policy("partial_node").sample_floor == 512
    assert get_policy("random_compute_session").sample_floor == get_policy("lecar").sample_floor == 128
    cap = 2000  # depth, r = 0.1: ceil(2000 / 10) = 200 sampled blocks
    assert capacity_rates(big, [cap], 0.1, 0, "depth", "request") == {cap: 0.1}
    assert capacity_rates(big, [1000], 0.1, 0, "depth", "request") == {1000: 0.1}  # 100 >= 64
    assert capacity_rates(big, [600], 0.1, 0, "depth", "request") == {600: 0.2}  # 60 < 64
    assert capacity_rates(big, [cap], 0.1, 0, "depth", "request", floor=256) == {cap: 0.2}
    assert simulate(big, "random_compute", [cap], sample_rate=0.1)[0].sample_rate == 0.1
    assert simulate(big, "partial_node", [cap], sample_rate=0.1)[0].sample_rate == 0.4  # 200, 400, 800 blocks
    assert simulate(big, "partial_node", [cap], sample_rate=0.1, sample_floor=1)[0].sample_rate == 0.1


def test_depth_keep_compiled_rule_is_the_numpy_splitmix_rule():
    """The compiled loop hashes as `_mix` does (uint64 wrap-around), for any seed and
    stride: the samples, and so every sampled result, stay what they were."""
    from sim_core.traces.sample import _depth_keep, _mix

    rng = np.random.default_rng(7)
    d0 = rng.integers(0, 100_000, 50_000).astype(np.int32)
    root = rng.integers(0, 2**31 - 1, 50_000).astype(np.int32)
    for seed in (0, 1, 12345, 2**40):
        for m in (1, 2, 7, 100, 800):
            want = (d0 + (_mix(root, seed) % np.uint64(m)).astype(np.int64)) % m == 0
            assert np.array_equal(_depth_keep(d0, root, m, seed), want), (seed, m)
