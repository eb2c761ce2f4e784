"""Prefix-specific policies (paper sec. 3.2 "domain-specific"): workload_aware and asymcache.

libCacheSim implements neither, so there is no cross-check against it. Instead:
hand-computed tiny traces for each policy's distinctive decision, exact equality with
our LRU (itself checked against libCacheSim) in the settings where the policy reduces to
LRU, engine invariants in both modes, the Belady bound, and a sanity range against LRU
on the session trace (numbers reported, not asserted to beat LRU).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim_core import Trace, get_policy, simulate
from sim_core.policies.workload_aware import request_categories
from sim_core.structures.reuse_fit import H_BINS, H_OFF, hist_rate, hist_record
from tests.helpers import engine_kw, mooncake_trace, session_trace


POLICIES = ["workload_aware", "asymcache"]
A, B, C, D, E, F, G, H = range(1, 9)


def hits(trace, policy, cap, **kw):
    return simulate(trace, policy, cap, **engine_kw(kw))[0].hits


# ------------------------------------------------------------------ workload_aware
@pytest.mark.parametrize("mode", ["block", "request"])
def test_workload_aware_keeps_a_prompts_head_over_its_tail(mode):
    # [A,B,C] then [D] then [A,B] at capacity 3, one category (no sessions).
    # A, B, C share their request's time, so ReuseProb ties and the offset decides: D
    # evicts C (deepest), and [A,B] hits twice, whatever order the engine walks a request
    # in. LRU walking the request forward makes A its least recent block: block mode D
    # evicts A, then A evicts B, B evicts C -> 0 hits; request mode D evicts A, then [A,B]
    # pins B and evicts C for A -> 1 hit. Request mode's default tail-first walk leaves C
    # least recent, as Workload-aware does -> 2 hits.
    t = Trace.from_requests([[A, B, C], [D], [A, B]])
    assert hits(t, "workload_aware", 3, mode=mode) == 2
    if mode == "request":
        assert hits(t, "workload_aware", 3, mode=mode, order="forward") == 2
        assert hits(t, "lru", 3, mode=mode, order="forward") == 1
    assert hits(t, "lru", 3, mode=mode) == (0 if mode == "block" else 2)
    # with the access-index clock there are no ties: the offset never decides
    assert hits(t, "workload_aware", 3, mode=mode, clock="access") == hits(t, "lru", 3, mode=mode)


def _category_trace():
    # time  req  session  blocks  category
    #   0    r0     1      [A]    multi-turn, first turn (2)
    #  10    r1     2      [A]    multi-turn, first turn (2): A reused after 10 s
    #  11    r2     3      [S1]   single-turn (1)
    #  12    r3     4      [S2]   single-turn (1)
    #  13    r4     5      [S3]   single-turn (1)
    #  14    r5     6      [S4]   single-turn (1) -> capacity 4 is full: evict one
    #  15    r6     1      [A]    later turn (3)
    #  16    r7     2      [A]    later turn (3)
    reqs = [[A], [A], [11], [12], [13], [14], [A], [A]]
    return Trace.from_requests(reqs, arrival_s=[0, 10, 11, 12, 13, 14, 15, 16],
                               session=[1, 2, 3, 4, 5, 6, 1, 2])


def test_category_mapping():
    t = _category_trace()
    cat, W = request_categories(t, "session_turn", 2)
    assert W == 4 and cat.tolist() == [2, 2, 1, 1, 1, 1, 3, 3]
    cat, W = request_categories(t, "turn", 2)
    assert W == 3 and cat.tolist() == [1, 1, 1, 1, 1, 1, 2, 2]
    cat, W = request_categories(t, "session_turn", 1)  # one bucket for all turns
    assert W == 3 and cat.tolist() == [2, 2, 1, 1, 1, 1, 2, 2]
    u = Trace.from_requests([[A], [B], [C]], session=[-1, 7, -1])
    assert request_categories(u, "session_turn", 2)[0].tolist() == [0, 1, 0]


@pytest.mark.parametrize("mode", ["block", "request"])
def test_workload_aware_prefers_the_category_with_higher_reuse_probability(mode):
    # refit_every=1, min_samples=1, fit="mean": the last refit before r5's eviction runs
    # at r4's first touch and has seen: one reuse interval of 10 s (A, attributed to the
    # first-turn category 2), accesses cat 2: 2 (A, A) with 1 reuse, cat 1: 2 (S1, S2)
    # with none. lambda = 1/10 for every category (cat 2 its own, others pooled);
    # p_2 = (1+1)/(2+2) = 1/2, p_1 = (0+1)/(2+2) = 1/4 (life term equal for all).
    # At r5 (t=14): cat 1's LRU block S1 (age 3): ln(1/4) - 0.3 = -1.69
    #               cat 2's LRU block A  (age 4): ln(1/2) - 0.4 = -1.09
    # -> S1 is evicted although A is older; A then hits in r6 and r7 (3 hits in all).
    # LRU evicts A at r5 and misses it in r6 (2 hits).
    t = _category_trace()
    kw = dict(mode=mode, refit_every=1, min_samples=1, fit="mean")
    assert hits(t, "workload_aware", 4, **kw) == 3
    assert hits(t, "lru", 4, mode=mode) == 2
    # without categories p and lambda are shared: oldest first, like LRU
    assert hits(t, "workload_aware", 4, categories="none", **kw) == 2
    # without the reuse ratio the categories share lambda = 1/10 too: age decides
    assert hits(t, "workload_aware", 4, reuse_ratio=False, **kw) == 2


def test_exponential_fit_from_histogram():
    # layout used by the helpers: histogram F[0:H_BINS], sum F[H_BINS], count F[H_BINS+1]
    rng = np.random.default_rng(0)
    F = np.zeros(H_BINS + 2)
    S, N = H_BINS, H_BINS + 1
    for x in rng.exponential(5.0, 20000):  # rate 0.2
        hist_record(F, 0, S, N, float(x))
    assert F[N] == 20000 and F[:H_BINS].sum() == 20000
    assert hist_rate(F, 0, S, N, 1) == pytest.approx(F[N] / F[S])  # maximum likelihood
    assert hist_rate(F, 0, S, N, 1) == pytest.approx(0.2, rel=0.03)
    # the median is interpolated inside a log2 bucket: a few percent off
    assert hist_rate(F, 0, S, N, 0) == pytest.approx(0.2, rel=0.1)
    # zero intervals (same arrival second) land in the lowest bucket, rates stay finite
    Z = np.zeros(H_BINS + 2)
    hist_record(Z, 0, S, N, 0.0)
    assert Z[0] == 1 and math.isfinite(hist_rate(Z, 0, S, N, 0))
    assert hist_rate(Z, 0, S, N, 1) == 2.0 ** H_OFF


@pytest.mark.parametrize("mode", ["block", "request"])
def test_workload_aware_without_categories_on_the_access_clock_is_lru(mode):
    # one category + access-index time: ReuseProb is decreasing in age only -> LRU
    t = session_trace(n_sessions=60, seed=2)
    caps = [5, 20, 60, 150, 400]
    ours = [r.hits for r in simulate(t, "workload_aware", caps, mode=mode, params={'categories': "none", 'clock': "access"})]
    lru = [r.hits for r in simulate(t, "lru", caps, mode=mode, one_pass=False)]
    assert ours == lru


# ----------------------------------------------------------------------- asymcache
@pytest.mark.parametrize("mode", ["block", "request"])
def test_asymcache_keeps_deep_expensive_blocks(mode):
    # linear cost: depth d costs d+1. tau fixed at 1 s, so key = ln(cost) + t_last.
    # r0 t=0 [A,B,C]: keys 0, ln2=0.69, ln3=1.10; r1 t=1 [E]: key 1.0 (cap 4 full).
    # r2 [F] evicts A (equal recency: the cheap shallow block goes), r3 [G] evicts B,
    # r4 [H] evicts E (1.0) rather than the older but deeper C (1.10); r5 [C] hits.
    # LRU evicts A, B, C in turn and misses C.
    t = Trace.from_requests([[A, B, C], [E], [F], [G], [H], [C]])
    lin = simulate(t, "asymcache", 4, mode=mode, cost_models=["linear"], params={'tau': 1.0})[0]
    assert lin.hits == 1
    assert hits(t, "lru", 4, mode=mode) == 0
    # uniform cost: recency only (B, C, E go by age; ties by block id) -> no hit either
    assert hits(t, "asymcache", 4, mode=mode, tau=1.0) == 0
    # a larger tau weighs recency less: with tau = 10 s C outlives E, F, G too
    assert simulate(t, "asymcache", 4, mode=mode, cost_models=["linear"], params={'tau': 10.0})[0].hits == 1


def test_asymcache_equal_recency_evicts_the_shallow_block():
    # one request [A,B,C,D] then [E] at capacity 4: all four share the arrival time, so
    # the victim is the cheapest: depth 0 (A) under linear cost -> [B,C,D] hit 3 times.
    t = Trace.from_requests([[A, B, C, D], [E], [B, C, D]])
    assert simulate(t, "asymcache", 4, mode="block", cost_models=["linear"])[0].hits == 3
    # with the deepest block as the victim instead, [B,C,D] would have lost D


@pytest.mark.parametrize("mode", ["block", "request"])
def test_asymcache_uniform_cost_on_the_access_clock_is_lru(mode):
    t = session_trace(n_sessions=60, seed=4)
    caps = [5, 20, 60, 150, 400]
    ours = [r.hits for r in simulate(t, "asymcache", caps, mode=mode, params={'clock': "access"})]
    lru = [r.hits for r in simulate(t, "lru", caps, mode=mode, one_pass=False)]
    assert ours == lru


def test_asymcache_is_cost_aware():
    t = session_trace(n_sessions=80, seed=6)
    rec = simulate(t, "asymcache", 120, mode="block", cost_models=["uniform", "linear"])[0]
    uni = simulate(t, "asymcache", 120, mode="block", cost_models=["uniform"])[0]
    lin = simulate(t, "asymcache", 120, mode="block", cost_models=["linear"])[0]
    assert rec.compute_savings["uniform"] == pytest.approx(uni.hit_ratio)
    assert rec.compute_savings["linear"] == pytest.approx(lin.compute_savings["linear"])


# ---------------------------------------------------------------------- both policies
VARIANTS = [
    ("workload_aware", {}),
    ("workload_aware", {"categories": "turn", "turn_buckets": 3, "fit": "mean", "conditional": True}),
    ("workload_aware", {"clock": "request", "refit_every": 1, "min_samples": 1, "life": 5.0,
                        "decay": 0.9, "count_miss_reuses": False}),
    ("asymcache", {}),
    ("asymcache", {"clock": "request", "fit": "mean", "refit_every": 1, "min_samples": 1,
                   "retau_tol": 0.0}),
]


@pytest.mark.parametrize("policy,params", VARIANTS)
def test_invariants_both_modes(policy, params):
    t = session_trace(n_sessions=50, seed=3)
    for mode in ("block", "request"):
        for cap in (5, 30, 200):
            # the engine raises if a pinned block (of the request being served) is evicted
            blk = simulate(t, policy, cap, mode=mode, cost_models=["uniform", "linear"], params=params)[0]
            pre = simulate(t, policy, cap, mode=mode, hits="prefix", cost_models=["uniform", "linear"], params=params)[0]
            assert blk.max_resident_blocks <= cap
            assert pre.hits <= blk.hits
            assert pre.holes_per_request_max <= 1
            opt = simulate(t, "belady", cap, mode=mode)[0]
            assert blk.hits <= opt.hits
    big = simulate(t, policy, t.n_unique, params=params)[0]
    assert big.hits == t.n_accesses - t.n_unique and big.evictions == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_oversized_requests_and_tiny_caches(policy):
    t = Trace.from_requests([[A, B, C, D], [A, B], [C], [A, B], [E, F, G, H], [A]],
                            session=[1, 1, 2, 1, 3, 1])
    for cap in (1, 2, 3):
        for mode in ("block", "request"):
            r = simulate(t, policy, cap, mode=mode, cost_models=["linear"])[0]
            assert r.max_resident_blocks <= cap


@pytest.mark.parametrize("policy", POLICIES)
def test_deterministic(policy):
    t = session_trace(n_sessions=40, seed=9)
    a = simulate(t, policy, 50, mode="block", seed=1)[0]
    b = simulate(t, policy, 50, mode="block", seed=2)[0]
    assert a.hits == b.hits  # no randomness: the seed does not matter


@pytest.mark.parametrize("policy", POLICIES)
def test_mooncake_subset_sane(policy):
    t = mooncake_trace().subset(1500)
    for mode in ("block", "request"):
        for cap in (500, 3000):
            ours = simulate(t, policy, cap, mode=mode, cost_models=["linear"])[0]
            lru = simulate(t, "lru", cap, mode=mode, cost_models=["linear"])[0]
            assert ours.max_resident_blocks <= cap
            assert abs(ours.hit_ratio - lru.hit_ratio) < 0.1


@pytest.mark.parametrize("policy", POLICIES)
def test_session_trace_lands_near_lru(policy):
    # A sanity band around LRU only (the comparison numbers are reported, not asserted).
    t = session_trace(n_sessions=150, seed=11)
    for mode in ("block", "request"):
        for cap in (60, 300, 1000):
            ours = simulate(t, policy, cap, mode=mode)[0].hit_ratio
            lru = simulate(t, "lru", cap, mode=mode)[0].hit_ratio
            assert lru - 0.08 <= ours <= lru + 0.15, (mode, cap, ours, lru)


@pytest.mark.parametrize("policy,bad", [
    ("workload_aware", {"categories": "nope"}), ("workload_aware", {"clock": "nope"}),
    ("workload_aware", {"fit": "mode"}), ("workload_aware", {"turn_buckets": 0}),
    ("workload_aware", {"decay": 0.0}), ("workload_aware", {"refit_every": 0}),
    ("asymcache", {"clock": "seconds"}), ("asymcache", {"tau": -1.0}), ("asymcache", {"fit": "x"}),
])
def test_bad_parameters_are_rejected(policy, bad):
    t = Trace.from_requests([[A, B], [A]])
    with pytest.raises(ValueError):
        simulate(t, policy, 1, params=bad)


@pytest.mark.parametrize("policy", POLICIES)
def test_generated_config_comes_from_the_spec(policy):
    from sweep.config import policy_node_from_spec

    spec = get_policy(policy)
    conf = policy_node_from_spec(spec)
    assert conf["name"] == policy and conf["params"] == spec.defaults and conf["slow"] is False
    assert spec.family == "prefix_specific" and not spec.offline
    assert spec.cost_aware == (policy == "asymcache")
