"""Replay engine semantics on hand-computed traces, brute force and libCacheSim."""
from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
import pytest

from sim_core import Trace, simulate
from tests.helpers import engine_kw, mooncake_trace, session_trace

ONLINE = ["lru", "fifo", "lfu"]
A, B, C, D, E = 1, 2, 3, 4, 5


def hits(trace, policy, cap, **kw):
    return simulate(trace, policy, cap, **engine_kw(kw))[0].hits


# ---------------------------------------------------------------- hand-computed
def test_residency_constraint_changes_the_answer():
    # [A,B] [C] [A,B] at capacity 2.
    # block mode LRU: A B miss; C evicts A; A evicts B; B evicts C -> 0 hits.
    # request mode LRU, forward walk: C evicts A; request 3 pins resident B, evicts C for A -> B hits.
    t = Trace.from_requests([[A, B], [C], [A, B]])
    assert hits(t, "lru", 2, mode="block") == 0
    rec = simulate(t, "lru", 2, mode="request", order="forward")[0]
    assert rec.hits == 1 and rec.hit_ratio == pytest.approx(1 / 5)
    assert rec.holes_total == 3  # [A,B], [C], and the hole at A in request 3
    # prefix hits: reuse stops at A, so B is recomputed
    pre = simulate(t, "lru", 2, mode="request", hits="prefix", order="forward")[0]
    assert pre.hits == 0 and pre.holes_total == 3


def test_tail_first_evicts_a_requests_tail_first():
    # [A,B] [C] [A,B] at capacity 2, request mode, the default tail-first walk: request 1
    # touches B then A, so B is older; C evicts B; request 3 hits A (its head, a prefix
    # hit too) and evicts C for B.
    t = Trace.from_requests([[A, B], [C], [A, B]])
    for h in ("block", "prefix"):
        rec = simulate(t, "lru", 2, hits=h)[0]
        assert rec.hits == 1 and rec.holes_total == 3 and rec.hit_ratio == pytest.approx(1 / 5)
        assert rec.compute_savings == {"uniform": pytest.approx(1 / 5)}
    lin = simulate(t, "lru", 2, cost_models=["linear"])[0]
    fwd = simulate(t, "lru", 2, cost_models=["linear"], order="forward")[0]
    # linear cost = depth + 1: accesses cost 1+2, 1, 1+2 = 7; the hit on A saves 1, on B 2
    assert lin.compute_savings["linear"] == pytest.approx(1 / 7)
    assert fwd.compute_savings["linear"] == pytest.approx(2 / 7)
    with pytest.raises(ValueError, match="needs mode=request"):
        simulate(t, "lru", 2, mode="block", order="tail_first")


def test_block_vs_prefix_hits_hole_accounting():
    # [A,B,C,D] then [A,E], then [A,B,C,D] at capacity 5, LRU request mode (forward walk).
    # r1 inserts E (5 resident). r2: A,B,C,D resident -> 4 hits; nothing to evict.
    t = Trace.from_requests([[A, B, C, D], [A, E], [A, B, C, D]])
    r = simulate(t, "lru", 5, order="forward")[0]
    assert r.hits == 1 + 4
    # capacity 4: r1 evicts LRU non-pinned block B; r2 = [A hit, B miss, C hit, D hit]
    r4 = simulate(t, "lru", 4, order="forward")[0]
    assert r4.hits == 1 + 3
    assert r4.holes_per_request_max == 1
    assert r4.holes_total == 1 + 1 + 1  # r0 all miss, r1 E, r2 B
    p4 = simulate(t, "lru", 4, hits="prefix", order="forward")[0]
    assert p4.hits == 1 + 1  # r2 stops at B
    assert p4.recomputed_blocks == 10 - 2
    # tail-first: r0 leaves D oldest, so r1 evicts D; r2 = [A, B, C hit, D miss]:
    # one hole at the tail, and prefix hits lose nothing
    for h in ("block", "prefix"):
        t4 = simulate(t, "lru", 4, hits=h)[0]
        assert t4.hits == 1 + 3 and t4.holes_total == 3


def test_block_mode_hole_count_and_lengths():
    # capacity 3, FIFO, block mode. [A,B,C] [D] [A,B,C]:
    # D evicts A; r2: A miss (evicts B), B miss (evicts C), C miss (evicts D) -> 0 hits
    t = Trace.from_requests([[A, B, C], [D], [A, B, C]])
    r = simulate(t, "fifo", 3, mode="block")[0]
    assert r.hits == 0 and r.holes_total == 3 and r.hole_length_mean == pytest.approx(7 / 3)


def test_oversized_requests_are_counted_not_dropped():
    t = Trace.from_requests([[A, B, C, D], [A, B], [A, B]])
    r = simulate(t, "lru", 3)[0]
    assert r.oversized_requests == 1 and r.oversized_blocks == 4
    assert r.accesses == 8 and r.hits == 2  # the 4 blocks count as recomputed
    assert r.max_resident_blocks <= 3


def test_lfu_tie_break_is_fifo_within_frequency():
    # block mode, capacity 2: A B A | C evicts B (freq 1); D evicts C (freq1, newer than none)
    t = Trace.from_requests([[A], [B], [A], [C], [D], [A], [B]])
    r = simulate(t, "lfu", 2, mode="block")[0]
    # A hit (3rd), C evicts B, D evicts C, A hit, B miss
    assert r.hits == 2


def test_belady_keeps_the_block_used_soonest():
    t = Trace.from_requests([[A], [B], [C], [A], [B], [C]])
    # capacity 2: at C evict B (next use 4) not A (next use 3): A hits; at B, C/B...
    assert hits(t, "belady", 2, mode="block") == 2
    assert hits(t, "lru", 2, mode="block") == 0


# ----------------------------------------------------------------- brute force
def brute_force_opt(seq, cap):
    """Max hits over every demand-eviction schedule (block mode)."""

    @lru_cache(maxsize=None)
    def go(i, cache):
        if i == len(seq):
            return 0
        x = seq[i]
        if x in cache:
            return 1 + go(i + 1, cache)
        if len(cache) < cap:
            return go(i + 1, cache | {x})
        return max(go(i + 1, (cache - {v}) | {x}) for v in cache)

    return go(0, frozenset())


@pytest.mark.parametrize("seed", range(25))
def test_belady_equals_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 13))
    seq = [int(x) for x in rng.integers(0, 5, n)]
    cap = int(rng.integers(1, 4))
    t = Trace.from_requests([[x] for x in seq])
    assert hits(t, "belady", cap, mode="block") == brute_force_opt(tuple(seq), cap)


@pytest.mark.parametrize("seed", range(10))
def test_online_policies_never_beat_belady(seed):
    t = session_trace(n_sessions=40, seed=seed)
    caps = [8, 20, 50, 120]
    for mode in ("block", "request"):
        opt = [r.hits for r in simulate(t, "belady", caps, mode=mode)]
        for p in ONLINE:
            got = [r.hits for r in simulate(t, p, caps, mode=mode)]
            assert all(g <= o for g, o in zip(got, opt)), (p, mode, got, opt)


# ---------------------------------------------------------------- invariants
@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "belady"])
def test_invariants(policy):
    t = session_trace(n_sessions=50, seed=3)
    for mode in ("block", "request"):
        for cap in (5, 30, 200):
            blk = simulate(t, policy, cap, mode=mode, cost_models=["uniform", "linear"])[0]
            pre = simulate(t, policy, cap, mode=mode, hits="prefix")[0]
            assert blk.max_resident_blocks <= cap
            assert pre.hits <= blk.hits
            assert blk.compute_savings["uniform"] == pytest.approx(blk.hit_ratio, abs=1e-15)
            # prefix semantics leaves at most one hole per request
            assert pre.holes_per_request_max <= 1
    # a cache larger than the trace keeps everything: only compulsory misses
    big = simulate(t, policy, t.n_unique)[0]
    assert big.hits == t.n_accesses - t.n_unique and big.evictions == 0


def test_more_capacity_never_hurts_lru():
    t = session_trace(n_sessions=60, seed=5)
    caps = list(range(5, 400, 15))
    for mode in ("block", "request"):
        hr = [r.hits for r in simulate(t, "lru", caps, mode=mode)]
        assert hr == sorted(hr)


def test_bad_arguments_are_rejected():
    t = Trace.from_requests([[A, B]])
    with pytest.raises(ValueError, match="unknown policy 'nope'.*lru"):
        simulate(t, "nope", 4)
    with pytest.raises(ValueError, match="capacity must be at least one block"):
        simulate(t, "lru", 0)
    with pytest.raises(ValueError, match="unknown mode"):
        simulate(t, "lru", 4, mode="blocks")
    with pytest.raises(ValueError, match="unknown hits"):
        simulate(t, "lru", 4, hits="prefixes")
    with pytest.raises(ValueError, match="has no parameter"):
        simulate(t, "lru", 4, params={'horizon': 3})
    with pytest.raises(ValueError, match="unknown cost model"):
        simulate(t, "lru", 4, cost_models=["quadratic"])


# ------------------------------------------------------------------ libCacheSim
@pytest.fixture(scope="module")
def mooncake():
    return mooncake_trace()


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "belady"])
def test_block_mode_equals_libcachesim_on_mooncake(policy, mooncake, tmp_path, lcs):
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    path = write_oracle_general(mooncake, tmp_path / "mc.oracleGeneral")
    for cap in (100, 1000, 5000, 20000):
        ours = simulate(mooncake, policy, cap, mode="block")[0].hits
        theirs = libcachesim_hit_ratio(path, policy, cap)
        # compare counts: libCacheSim reports 1 - miss ratio in floating point
        assert ours == round(theirs * mooncake.n_accesses), (policy, cap)


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "belady"])
def test_block_mode_equals_libcachesim_on_sessions(policy, tmp_path, lcs):
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    t = session_trace(n_sessions=400, seed=11)
    path = write_oracle_general(t, tmp_path / "s.oracleGeneral")
    for cap in (50, 200, 800, 3000):
        ours = simulate(t, policy, cap, mode="block")[0].hits
        assert ours == round(libcachesim_hit_ratio(path, policy, cap) * t.n_accesses), (policy, cap)


def brute_force_opt_request(reqs, cap):
    """Max block hits over every eviction choice under the residency constraint."""

    @lru_cache(maxsize=None)
    def go(i, cache):
        if i == len(reqs):
            return 0
        r = reqs[i]
        rs = frozenset(r)
        if len(r) > cap:  # oversized: served without the cache
            return go(i + 1, cache)
        h = sum(1 for b in r if b in cache)
        need = len(cache | rs) - cap
        if need <= 0:
            return h + go(i + 1, cache | rs)
        return h + max(go(i + 1, (cache - frozenset(ev)) | rs)
                       for ev in itertools.combinations(sorted(cache - rs), need))

    return go(0, frozenset())


def test_belady_equals_brute_force_optimum_in_request_mode():
    rng = np.random.default_rng(7)
    for _ in range(300):
        reqs = [list(rng.choice(6, int(rng.integers(1, 4)), replace=False)) for _ in range(int(rng.integers(2, 7)))]
        cap = int(rng.integers(1, 5))
        t = Trace.from_requests(reqs)
        dense = tuple(tuple(int(x) for x in t.request_blocks(i)) for i in range(t.n_requests))
        assert hits(t, "belady", cap) == brute_force_opt_request(dense, cap), (reqs, cap)


def reference_request_mode(reqs, cap, policy, walk="forward"):
    """Plain-Python FIFO / LFU under the residency constraint (the engine's request
    mode): returns block hits. LFU ties go to the block that reached its count first.
    `walk`: the order that touches a served request's blocks (tail_first: last first)."""
    order = []  # FIFO: insertion order; LFU: (count, stamp) per block
    freq, stamp, clock = {}, {}, itertools.count()
    hits_ = 0
    for r in reqs:
        if len(r) > cap:
            continue
        cached = set(order) if policy == "fifo" else set(freq)
        missing = len(set(r) - cached)
        while len(cached) + missing > cap:
            if policy == "fifo":
                v = next(b for b in order if b not in r)
                order.remove(v)
            else:
                v = min((b for b in freq if b not in r), key=lambda b: (freq[b], stamp[b]))
                del freq[v], stamp[v]
            cached.discard(v)
        for b in (r[::-1] if walk == "tail_first" else r):
            if b in cached:
                hits_ += 1
                if policy == "lfu":
                    freq[b] += 1
                    stamp[b] = next(clock)
            else:
                cached.add(b)
                if policy == "fifo":
                    order.append(b)
                else:
                    freq[b], stamp[b] = 1, next(clock)
    return hits_


@pytest.mark.parametrize("order", ["forward", "tail_first"])
@pytest.mark.parametrize("policy", ["fifo", "lfu"])
def test_request_mode_equals_plain_python_reference(policy, order):
    """Long requests that hit many old blocks and then evict many times exercise the
    eviction cursors (walks resume after the request's pinned blocks)."""
    rng = np.random.default_rng(11)
    for _ in range(150):
        pool = int(rng.integers(4, 40))
        reqs = [list(rng.choice(pool, int(rng.integers(1, min(pool, 25))), replace=False))
                for _ in range(int(rng.integers(2, 30)))]
        cap = int(rng.integers(1, pool))
        t = Trace.from_requests(reqs)
        dense = [[int(x) for x in t.request_blocks(i)] for i in range(t.n_requests)]
        assert (hits(t, policy, cap, one_pass=False, order=order)
                == reference_request_mode(dense, cap, policy, order)), (reqs, cap)


@pytest.mark.parametrize("policy", sorted(n for n, s in __import__("sim_core").REGISTRY.items() if s.solve is None))
def test_capacities_past_saturation_share_one_replay(policy):
    """Capacities >= saturation_capacity are answered by one replay at that capacity:
    check it against a real replay at a larger capacity and against the no-eviction
    count (every access after a block's first is a hit)."""
    from sim_core.policies import get_policy
    from sim_core.simulate import _replay
    from sim_core.catalog.capacity import saturation_capacity
    from sim_core.replay.units import depth_totals
    from sim_core.catalog.cost import cost_per_depth
    from sim_core.replay.engine import EVICTIONS

    t = session_trace(n_sessions=25, seed=3)
    sat = saturation_capacity(t)
    big = 3 * sat + 7
    first_uses = len(np.unique(t.blocks))
    for mode in ("block", "request"):
        recs = simulate(t, policy, [sat, big], mode=mode, one_pass=False, cost_models=["linear"])
        depth = len(depth_totals(t))
        rp = _replay(get_policy(policy), t, big, mode, "block", cost_per_depth("linear", depth, t.block_tokens),
                     {**get_policy(policy).defaults}, 0, depth)
        direct, counters = rp.hit_by_depth, rp.counters
        assert counters[EVICTIONS] == 0  # no evictions at all
        for rec in recs:
            assert rec.hits == int(direct.sum()) == t.n_accesses - first_uses
            assert rec.evictions == 0
        assert [r.capacity_blocks for r in recs] == [sat, big]
