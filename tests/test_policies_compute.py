"""Compute-aware eviction (paper sec. 5.2-5.4): RandomCompute, PartialNode, session-level
eviction, S3-FIFO + compute-aware main, and the exact ILP optimum.

Expected numbers come from hand computation, brute force, an independent pure-Python
uniform-random cache, libCacheSim, or the ILP bound -- never from the code under test.
"""
from __future__ import annotations

import itertools
import random
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.catalog.cost import cost_per_depth
from sim_core.policies import get_policy
from sim_core.policies.partial_node import radix_nodes
from tests.helpers import engine_kw, libcachesim, mooncake_trace, session_trace

MINE = ["random_compute", "partial_node", "lru_session", "random_compute_session", "s3fifo_compute"]
COSTS = ["uniform", "linear", "qwen3_coder_30b"]
EXACT = 10**9  # samples >= resident blocks: the exact minimum score (a scan)


def one(trace, policy, cap, **kw):
    return simulate(trace, policy, cap, **engine_kw(kw))[0]


def long_sessions(n_sessions=60, seed=0, turns=(8, 30), grow=(10, 60), sys_prompts=3,
                  sys_len=(20, 40), gap=20.0) -> Trace:
    """Long multi-turn sessions: every turn resends the whole context plus 10-60 blocks."""
    rng = np.random.default_rng(seed)
    nid = [1]

    def fresh(k):
        out = list(range(nid[0], nid[0] + k))
        nid[0] += k
        return out

    prompts = [fresh(int(rng.integers(*sys_len))) for _ in range(sys_prompts)]
    events = []
    for s in range(n_sessions):
        t = float(rng.uniform(0, 2000))
        ctx = list(prompts[int(rng.integers(sys_prompts))])
        for _ in range(int(rng.integers(*turns))):
            ctx = ctx + fresh(int(rng.integers(*grow)))
            events.append((t, s, list(ctx)))
            t += float(rng.exponential(gap))
    events.sort(key=lambda e: e[0])
    return Trace.from_requests([e[2] for e in events], arrival_s=[e[0] for e in events],
                               session=[e[1] for e in events], name="long_sessions")


@pytest.fixture(scope="module")
def sessions():
    return session_trace(n_sessions=400, seed=11)


@pytest.fixture(scope="module")
def small_sessions():
    return session_trace(n_sessions=120, seed=3)


# ---------------------------------------------------------------- registry and conf
@pytest.mark.parametrize("name", MINE)
def test_spec_and_conf(name):
    spec = get_policy(name)
    assert spec.name == name and not spec.offline
    assert spec.cost_aware == (name != "lru_session")
    from sweep.config import policy_node_from_spec

    conf = policy_node_from_spec(spec)  # the generated config comes from the spec
    assert conf["name"] == name and conf["slow"] is False and conf["description"]
    assert conf["params"] == spec.defaults


def test_bad_params_fail_early(sessions):
    with pytest.raises(ValueError, match="samples"):
        one(sessions, "random_compute", 10, samples=0)
    with pytest.raises(ValueError, match="clock"):
        one(sessions, "random_compute", 10, clock="wall")
    with pytest.raises(ValueError, match="chunk_blocks"):
        one(sessions, "partial_node", 10, chunk_blocks=0)
    with pytest.raises(ValueError, match="small_ratio"):
        one(sessions, "s3fifo_compute", 10, small_ratio=1.5)


# ---------------------------------------------------------------- RandomCompute
A, B, C, D, E, F, G, P, Q, R, S, T, U, V, W, X, Y = range(1, 18)


def test_random_compute_keeps_the_old_expensive_block():
    # request mode, capacity 4, linear cost (depth d costs d+1), exact scoring.
    # r0 [P,Q,R] at j=0,1,2 (costs 1,2,3); r1 [S] j=3; r2 [T] j=4: scores at now=4:
    #   P 1/4, Q 2/3, R 3/2, S 1/1 -> evict P (LRU too).
    # r3 [U] j=5: Q 2/4=.5, R 3/3=1, S 1/2=.5, T 1 -> tie Q/S, older access wins: Q (LRU too)
    # r4 [V] j=6: R 3/4, S 1/3, T 1/2, U 1 -> evict S; LRU evicts R instead.
    # r5 [P,Q,R]: R (depth 2, cost 3) hits; total cost 6+1+1+1+1+6 = 16.
    t = Trace.from_requests([[P, Q, R], [S], [T], [U], [V], [P, Q, R]])
    rc = one(t, "random_compute", 4, cost_models=["linear"], samples=EXACT)
    assert rc.hits == 1 and rc.compute_savings["linear"] == pytest.approx(3 / 16)
    assert one(t, "lru", 4, cost_models=["linear"]).hits == 0
    # under the uniform model the score is 1/age: exactly LRU
    assert one(t, "random_compute", 4, samples=EXACT).hits == 0


def test_seconds_clock_uses_arrival_times():
    # block mode, capacity 2, uniform cost. A at t=0, B at t=10, A again at t=11 -> A is the
    # more recent in both clocks. C arrives at t=11 as well (same request as A's reuse):
    # [A] t0, [B] t10, [A, C] t11: at C, ages in seconds: A 0 (infinite score, kept), B 1 -> B.
    t = Trace.from_requests([[A], [B], [A, C], [B]], arrival_s=[0, 10, 11, 12])
    for clock in ("access", "seconds"):
        r = one(t, "random_compute", 2, mode="block", samples=EXACT, clock=clock)
        assert r.hits == 1  # A's reuse; B was evicted for C
    # seconds clock with equal ages: ties go to the older access. [A,B] t0, [C] t0
    # (ages 0 for both -> both infinite -> older access A evicted).
    t2 = Trace.from_requests([[A, B], [C], [B], [A]], arrival_s=[0, 0, 1, 2])
    r = one(t2, "random_compute", 2, mode="block", samples=EXACT, clock="seconds")
    assert r.hits == 1  # B hits; A was evicted


@pytest.mark.parametrize("mode", ["request", "block"])
def test_exact_random_compute_is_lru_under_uniform_cost(sessions, mode):
    for cap in (50, 200, 800, 3200):
        assert (one(sessions, "random_compute", cap, mode=mode, samples=EXACT).hits
                == one(sessions, "lru", cap, mode=mode).hits)


def test_deterministic_per_seed(sessions):
    a = one(sessions, "random_compute", 300, seed=5)
    b = one(sessions, "random_compute", 300, seed=5)
    c = one(sessions, "random_compute", 300, seed=6)
    assert a.hits == b.hits and a.evictions == b.evictions
    assert a.hits != c.hits or a.holes_total != c.holes_total


def _python_uniform_random(blocks, cap, seed):
    """Independent block-mode cache evicting a uniformly random resident block."""
    rng = random.Random(seed)
    res, pos, hits = [], {}, 0
    for b in blocks:
        if b in pos:
            hits += 1
            continue
        if len(res) >= cap:
            i = rng.randrange(len(res))
            v = res[i]
            last = res.pop()
            if i < len(res):
                res[i] = last
                pos[last] = i
            del pos[v]
        pos[b] = len(res)
        res.append(b)
    return hits / len(blocks)


def test_one_sample_is_uniform_random_eviction(sessions):
    blocks = sessions.blocks.tolist()
    for cap in (100, 400, 1600):
        ours = np.mean([one(sessions, "random_compute", cap, mode="block", samples=1, seed=s).hit_ratio
                        for s in range(4)])
        ref = np.mean([_python_uniform_random(blocks, cap, s) for s in range(4)])
        assert abs(ours - ref) < 0.005, (cap, ours, ref)


# libCacheSim cross-checks (block mode). RandomCompute has no libCacheSim counterpart; under
# the uniform cost model it is sampled LRU: exact LRU with samples >= capacity, uniform
# random eviction with samples=1, within a point of LRU at the default 64 samples.
def _lcs(trace, policy, caps):
    from sim_core.replay.reference import libcachesim_hit_ratio, write_oracle_general

    with tempfile.TemporaryDirectory() as d:
        p = write_oracle_general(trace, Path(d) / "t.bin")
        return [libcachesim_hit_ratio(p, policy, c) for c in caps]


def _check_against_libcachesim(trace, caps, exact=True):
    libcachesim()
    lru = _lcs(trace, "lru", caps)
    rnd = _lcs(trace, "Random", caps)
    n = trace.n_accesses
    for cap, l_lru, l_rnd in zip(caps, lru, rnd):
        if exact:
            assert one(trace, "random_compute", cap, mode="block", samples=EXACT).hits == round(l_lru * n)
        ours64 = one(trace, "random_compute", cap, mode="block").hit_ratio
        assert abs(ours64 - l_lru) < 0.01, (cap, ours64, l_lru)
        ours1 = np.mean([one(trace, "random_compute", cap, mode="block", samples=1, seed=s).hit_ratio
                         for s in range(3)])
        # libCacheSim's Random samples its hash table, which is measurably not uniform: it
        # sits 0.8-1.0 points below both our sampler and the independent Python cache above
        # on session_trace(400, 11), at every hashpower from 12 to 26. Hence 1.5 points.
        assert abs(ours1 - l_rnd) < 0.015, (cap, ours1, l_rnd)


def test_libcachesim_sessions(sessions):
    _check_against_libcachesim(sessions, [100, 400, 1600, 6400])


@pytest.mark.slow
def test_libcachesim_mooncake():
    t = mooncake_trace()
    _check_against_libcachesim(t, [1000, 4000, 16000, 64000], exact=False)
    _check_against_libcachesim(t, [250, 1000], exact=True)


# ---------------------------------------------------------------- PartialNode
def test_radix_nodes_by_hand():
    # [S,A,B,C] [S,D,E] [S,A,B] [X]: S branches (children A, D) -> nodes {S}, {A,B,C}, {D,E}, {X}
    t = Trace.from_requests([[S, A, B, C], [S, D, E], [S, A, B], [X]])
    child, nstart, nidx = radix_nodes(t.req_offsets, t.blocks, t.n_unique, False)
    s, a, b, c, d, e, x = range(7)  # dense ids in order of first appearance
    assert list(nstart) == [s, a, a, a, d, d, x]
    assert list(nidx) == [0, 0, 1, 2, 0, 1, 0]
    assert list(child) == [-1, b, c, -1, e, -1, -1]


def test_partial_node_evicts_from_the_node_start():
    # request mode, capacity 4, uniform cost, exact scoring, chunk_blocks=2.
    # r0 [A,B,C] j0-2 (one node), r1 [A] j3, r2 [X] j4 -> resident A,B,C,X.
    # r3 [Y]: oldest block is B (A was reused at j3) -> node {A,B,C}; the chunk starts at the
    #   node's first resident block A: A and B go (2 evictions), not just B.
    # r4 [A,B,C]: A,B missing, C hits; 3 resident + 2 > 4 -> evict the oldest, X (1 more).
    t = Trace.from_requests([[A, B, C], [A], [X], [Y], [A, B, C]])
    pn = one(t, "partial_node", 4, samples=EXACT, chunk_blocks=2)
    assert pn.evictions == 3 and pn.hits == 1 + 1
    # RandomCompute evicts only B at r3, then X at r4: A and C hit at r4
    rc = one(t, "random_compute", 4, samples=EXACT)
    assert rc.evictions == 2 and rc.hits == 1 + 2
    # chunk_blocks=1 is RandomCompute restricted to node heads: A (not B) goes at r3
    pn1 = one(t, "partial_node", 4, samples=EXACT, chunk_blocks=1)
    assert pn1.evictions == 2 and pn1.hits == 1 + 2


def test_partial_node_leaves_far_fewer_holes():
    # Long multi-turn sessions at a tight capacity (about a seventh of the footprint).
    t = long_sessions()
    cap = 3000
    rc = one(t, "random_compute", cap, cost_models=["qwen3_coder_30b"])
    pn = one(t, "partial_node", cap, cost_models=["qwen3_coder_30b"])
    lru = one(t, "lru", cap, cost_models=["qwen3_coder_30b"])
    ratio = rc.holes_per_request_mean / pn.holes_per_request_mean
    # every request has at least one hole (its new turn), so compare the holes beyond it too
    extra = (rc.holes_per_request_mean - 1) / max(pn.holes_per_request_mean - 1, 1e-9)
    # (the measured figures go in the assertion messages, not on the console)
    assert ratio > 2.5 and extra > 8, (rc.holes_per_request_mean, pn.holes_per_request_mean, ratio, extra)
    assert pn.hole_length_mean > 2.5 * rc.hole_length_mean
    assert abs(rc.compute_savings["qwen3_coder_30b"] - pn.compute_savings["qwen3_coder_30b"]) < 0.02
    assert pn.recomputed_blocks <= 1.02 * rc.recomputed_blocks


# ---------------------------------------------------------------- session granularity
def test_session_eviction_takes_the_shared_system_prompt_along():
    # capacity 4, request mode. P is a system prompt shared by sessions 1 and 2.
    # r0 s2 [X] j0; r1 s1 [P,A] j1,2; r2 s2 [P,B] j3,4 (P hits and now belongs to s2).
    # r3 s3 [C]: 4 resident + 1 > 4. The LRU block is X (j0), session 2:
    #   block LRU evicts X only; session LRU evicts X, P and B (3 evictions).
    # r4 s1 [P,A,Q]: block LRU: P, A hit (evicts B for Q); session LRU: P is gone, A hits.
    t = Trace.from_requests([[X], [P, A], [P, B], [C], [P, A, Q]], session=[2, 1, 2, 3, 1])
    blk = one(t, "lru", 4)
    ses = one(t, "lru_session", 4)
    assert blk.hits == 3 and blk.evictions == 2
    assert ses.hits == 2 and ses.evictions == 3
    # exact RandomCompute under the uniform model picks the same (LRU) victim
    assert one(t, "random_compute_session", 4, samples=EXACT).hits == 2
    # without session ids every request is its own session: r2 owns P and B, X is alone
    t_none = Trace.from_requests([[X], [P, A], [P, B], [C], [P, A, Q]])
    assert one(t_none, "lru_session", 4).hits == 3


def test_session_granularity_costs_at_tight_capacity_and_converges(sessions):
    cm = ["qwen3_coder_30b"]
    for cap in (100, 400):
        blk, ses = one(sessions, "lru", cap), one(sessions, "lru_session", cap)
        assert blk.hit_ratio - ses.hit_ratio > 0.01, cap
        rb = one(sessions, "random_compute", cap, cost_models=cm).compute_savings[cm[0]]
        rs = one(sessions, "random_compute_session", cap, cost_models=cm).compute_savings[cm[0]]
        assert rb - rs > 0.01, cap
    big = 2000  # ~11% of the unique blocks; the paper's pool regime
    for b, s in (("lru", "lru_session"), ("random_compute", "random_compute_session")):
        assert abs(one(sessions, b, big).hit_ratio - one(sessions, s, big).hit_ratio) < 0.002
        huge = sessions.n_unique
        assert one(sessions, b, huge).hits == one(sessions, s, huge).hits


# ---------------------------------------------------------------- S3-FIFO + compute
def test_s3fifo_compute_filters_a_scan():
    # block mode, capacity 4: small target 1, main 3, ghost 3.
    # A -> small; B, C, D -> main (small full before any eviction, as libCacheSim).
    # X1..X5 pass through small one by one (each evicts the previous, freq 0 -> ghost).
    # A: ghost forgot it (ghost holds X2..X4) -> small (evicts X5); B, C, D hit in main.
    scan = [[A], [B], [C], [D], [11], [12], [13], [14], [15], [A], [B], [C], [D]]
    t = Trace.from_requests(scan)
    assert one(t, "s3fifo_compute", 4, mode="block").hits == 3
    assert one(t, "lru", 4, mode="block").hits == 0


def test_s3fifo_compute_ghost_readmits_to_main():
    # capacity 4, block mode, threshold 2, exact main scoring (uniform = LRU within main).
    # A -> small; B, C, D -> main. E evicts A (ghost). A returns: ghost hit -> main, small's
    # E is evicted to make room (small before main: main holds 3 = its target).
    # F: main holds 4 > 3 -> main evicts its LRU block B; F -> small.
    # B: miss (B was evicted from main, not remembered) -> small, evicting F (freq 0).
    # A, C, D hit.
    t = Trace.from_requests([[A], [B], [C], [D], [E], [A], [F], [B], [A], [C], [D]])
    r = one(t, "s3fifo_compute", 4, mode="block", samples=EXACT)
    assert r.hits == 3 and r.evictions == 4


def test_s3fifo_compute_near_libcachesim_s3fifo_under_uniform(sessions):
    # not the same main cache (RandomCompute vs 2-bit CLOCK), same quick demotion
    libcachesim()
    caps = [100, 400, 1600, 6400]
    for cap, ref in zip(caps, _lcs(sessions, "s3fifo", caps)):
        assert abs(one(sessions, "s3fifo_compute", cap, mode="block").hit_ratio - ref) < 0.02


# ---------------------------------------------------------------- request-mode invariants
@pytest.mark.parametrize("name", MINE)
def test_request_mode_invariants(sessions, name):
    for cap in (8, 60, 400, 1600):
        recs = simulate(sessions, name, cap, cost_models=COSTS)
        pre = simulate(sessions, name, cap, hits="prefix")[0]
        bel = simulate(sessions, "belady", cap)[0]
        r = recs[0]
        assert r.max_resident_blocks <= cap
        assert pre.hits <= r.hits
        assert r.hit_ratio <= bel.hit_ratio + 1e-12
        for m in COSTS:
            assert 0.0 <= r.compute_savings[m] <= 1.0


# ---------------------------------------------------------------- the ILP optimum
def _brute_force(trace, cap, cost, mode):
    reqs = [tuple(int(b) for b in trace.request_blocks(r)) for r in range(trace.n_requests)]
    flat = [(b, d) for req in reqs for d, b in enumerate(req)]

    if mode == "block":
        @lru_cache(maxsize=None)
        def best(j, resident):
            if j == len(flat):
                return 0.0
            b, d = flat[j]
            if b in resident:
                return cost[d] + best(j + 1, resident)
            if len(resident) < cap:
                return best(j + 1, resident | {b})
            return max(best(j + 1, (resident - {v}) | {b}) for v in resident)
        return best(0, frozenset())

    @lru_cache(maxsize=None)
    def best_req(r, resident):
        if r == len(reqs):
            return 0.0
        req = reqs[r]
        if len(req) > cap:
            return best_req(r + 1, resident)
        gain, seen = 0.0, set()
        for d, b in enumerate(req):
            if b in seen or b in resident:
                gain += cost[d]
            seen.add(b)
        missing = seen - resident
        need = max(0, len(resident) + len(missing) - cap)
        cands = sorted(resident - seen)
        return gain + max(best_req(r + 1, (resident - set(ev)) | seen)
                          for ev in itertools.combinations(cands, need))
    return best_req(0, frozenset())


def _tiny_traces(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        reqs = [[rng.randrange(6) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(4, 8))]
        yield Trace.from_requests(reqs), rng.randint(1, 4)


def test_ilp_equals_brute_force_on_tiny_traces():
    from sim_core.oracles.ilp import solve

    for t, cap in _tiny_traces(40, seed=7):
        depths = t.depths()
        for cm in ("uniform", "linear"):
            cost = cost_per_depth(cm, t.max_request_blocks, t.block_tokens)
            total = cost[depths].sum()
            for mode in ("request", "block"):
                got = solve(t, cap, cm, mode=mode)
                assert got["status"] == "Optimal"
                want = _brute_force(t, cap, cost, mode) / total
                assert got["compute_savings"] == pytest.approx(want, abs=1e-9), (mode, cm, cap)
                mip = solve(t, cap, cm, mode=mode, integral=True)
                assert mip["compute_savings"] == pytest.approx(want, abs=1e-9)


def _check_ilp_bounds(t, cases, policies):
    from sim_core.oracles.ilp import solve

    for mode, cap, cm in cases:
        opt = solve(t, cap, cm, mode=mode)
        assert opt["status"] == "Optimal" and opt["gap"] < 1e-9
        for p in policies:
            got = one(t, p, cap, mode=mode, cost_models=[cm])
            assert got.compute_savings[cm] <= opt["compute_savings"] + 1e-9, (mode, cap, cm, p, got, opt)
        if cm == "uniform":
            bel = one(t, "belady", cap, mode=mode)
            assert opt["hits"] >= bel.hits
            if mode == "block":  # Belady (MIN) is the hit optimum of demand paging
                assert opt["hits"] == bel.hits


POLICIES_VS_ILP = ["belady", "belady_compute", "lru"] + MINE


def test_ilp_bounds_every_policy(small_sessions):
    cases = [("request", cap, cm) for cap in (30, 100, 300) for cm in COSTS]
    cases += [("block", 100, "uniform"), ("block", 100, "linear")]
    _check_ilp_bounds(small_sessions, cases, POLICIES_VS_ILP)


@pytest.mark.slow
def test_ilp_bounds_every_policy_full(small_sessions):
    cases = [(mode, cap, cm) for mode in ("request", "block") for cap in (30, 100, 300) for cm in COSTS]
    _check_ilp_bounds(small_sessions, cases, POLICIES_VS_ILP)
    moon = mooncake_trace().subset(3000)
    cases = [("request", cap, cm) for cap in (500, 2000, 8000) for cm in COSTS]
    _check_ilp_bounds(moon, cases, POLICIES_VS_ILP)


def test_ilp_refuses_large_traces_and_bad_input(small_sessions):
    from sim_core.oracles.ilp import solve

    with pytest.raises(ValueError, match="max_intervals"):
        solve(small_sessions, 100, max_intervals=10)
    with pytest.raises(ValueError, match="mode"):
        solve(small_sessions, 100, mode="token")
    with pytest.raises(ValueError, match="capacity"):
        solve(small_sessions, 0)


def test_ilp_oversized_requests_and_repeats():
    # capacity 2: [A,B,C] does not fit -> recomputed and not a use; [A,A] repeats A (1 hit);
    # [A] after it hits (consecutive requests both pinning A). Uniform: 2 hits of 6.
    from sim_core.oracles.ilp import solve

    t = Trace.from_requests([[A, B, C], [A, A], [A]])
    got = solve(t, 2, "uniform")
    assert got["hits"] == 2 and got["hit_ratio"] == pytest.approx(2 / 6)
    assert one(t, "lru", 2).hits == 2


def test_s3fifo_compute_promotion_during_evictions_stays_evictable():
    """Regression (found at 1/10 FreeInference scale): a reused small-queue block promoted
    to main while the request's own blocks were parked joined the parked tail, so the
    sampler could not draw it and evict returned no victim (RuntimeError)."""
    reqs = [[0, 2, 5, 4, 1], [0], [3, 0], [5, 6, 4, 1, 0], [6], [6, 1, 2, 0, 4], [0], [4, 2, 1, 3],
            [1, 2, 3, 5, 6]]
    t = Trace.from_requests(reqs)
    rec = simulate(t, "s3fifo_compute", 5, mode="request", one_pass=False, params={'small_ratio': 0.5, 'samples': 2})[0]
    assert rec.max_resident_blocks <= 5
    assert rec.hits <= simulate(t, "belady", 5, mode="request")[0].hits
