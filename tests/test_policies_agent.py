"""Agent hints (sim_core/policies/agent.py): hand-computed cases, a plain-Python reference
of "class first, LRU within a class", LRU equivalences, and the Belady bound."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from sim_core import Trace, simulate
from sim_core.digest import trace_digest
from sim_core.policies.agent import tool_waits
from sim_core.traces.sample import sample
from tests.helpers import session_trace

W, Y, Z, V = 1, 2, 3, 4
AGENT = ("ttl_pin", "agent_end", "agent_next")


def hits(t, policy, cap, **kw):
    mode = kw.pop("mode", "request")
    order = kw.pop("order", None)  # None: the mode's default (request: the tail-first view)
    return simulate(t, policy, cap, mode=mode, order=order, params=kw or None)[0].hits


# ------------------------------------------------------------------ hand-computed
def test_agent_end_demotes_a_finished_session():
    # cap 2. r0 B[y] (B returns at r3), r1 A[x] (A's only turn), r2 C[z] must evict:
    # LRU drops y (oldest), agent_end drops x (A is over). r3 B[y]: a hit for agent_end only.
    t = Trace.from_requests([[Y], [W], [Z], [Y]], session=[1, 0, 2, 1])
    assert hits(t, "lru", 2) == 0
    assert hits(t, "agent_end", 2) == 1
    assert hits(t, "belady", 2) == 1


def test_agent_next_evicts_the_session_that_returns_last():
    # cap 2, all sessions live until their last turn. D: r0, r3; B: r1, r5; E: r2, r4.
    # r2 evicts: LRU / agent_end drop w (oldest); agent_next drops y (B returns at r5,
    # after D at r3). agent_next then hits w at r3 and z at r4; LRU and agent_end hit z
    # at r4 only (r3 evicts y, r5 finds y gone).
    t = Trace.from_requests([[W], [Y], [Z], [W], [Z], [Y]], session=[3, 1, 4, 3, 4, 1])
    assert hits(t, "lru", 2) == 1
    assert hits(t, "agent_end", 2) == 1
    assert hits(t, "agent_next", 2) == 2
    assert hits(t, "belady", 2) == 2


def test_ttl_pin_holds_a_session_through_its_tool_wait():
    # cap 2. r0 B[y] at t=0 ends in a 20 s tool call; r1 A[x] at t=1 and r2 C[z] at t=2
    # end without one; B returns at t=20.5 (Trace.tool_wait_s: the wait before each request).
    t = Trace.from_requests([[Y], [W], [Z], [Y]], arrival_s=[0, 1, 2, 20.5], session=[1, 0, 2, 1])
    t.tool_wait_s = np.array([0.0, 0.0, 0.0, 20.0])
    assert np.array_equal(tool_waits(t), [20.0, np.nan, np.nan, np.nan], equal_nan=True)
    # r2 evicts: B is held until 0 + 20 + 1 (ttl is the margin), A is not -> x goes, y hits
    assert hits(t, "ttl_pin", 2, ttl=1.0) == 1
    # the margin 0: B's hold ends at t=20, before its turn; held or not, y is the only
    # held block at r2 (A, C unheld) so x still goes and y still hits at r3
    assert hits(t, "ttl_pin", 2, ttl=0.0) == 1
    # a fixed TTL of 5 s: at t=2 B (until 5) and A (until 6) are both held, nothing else is:
    # the oldest held block, y, goes (LRU within the class) -> no hit, as LRU
    assert hits(t, "ttl_pin", 2, ttl=5.0, source="fixed") == 0
    assert hits(t, "lru", 2) == 0
    # a fixed TTL of 0.5 s: both holds have expired at t=2 -> LRU
    assert hits(t, "ttl_pin", 2, ttl=0.5, source="fixed") == 0


def test_ttl_pin_refuses_a_missing_tool_wait_and_bad_parameters():
    t = Trace.from_requests([[Y], [W]], session=[1, 1])
    with pytest.raises(ValueError, match="tool waits"):
        hits(t, "ttl_pin", 1, source="tool_wait")
    with pytest.raises(ValueError, match="ttl"):
        hits(t, "ttl_pin", 1, ttl=-1.0)
    with pytest.raises(ValueError, match="source"):
        hits(t, "ttl_pin", 1, source="guess")


# ------------------------------------------------------------------ reference
def reference(reqs, sess, arrival, cap, policy, ttl=0.0, walk="forward"):
    """Plain Python, request mode: every resident block has an owner session (its last
    user's; -1 requests each their own) and a stamp (walk order); the victim is the
    unpinned block of lowest (class, order within class)."""
    R = len(reqs)
    sid = [s if s >= 0 else ("solo", r) for r, s in enumerate(sess)]
    turns = [r for r in range(R) if 0 < len(reqs[r]) <= cap]
    nxt = {}
    for i, r in enumerate(turns):
        later = [q for q in turns[i + 1:] if sid[q] == sid[r]]
        nxt[r] = later[0] if later else math.inf
    owner, stamp, deadline, ended, nextturn = {}, {}, {}, {}, {}
    clock = 0
    got = 0
    for r in range(R):
        blocks = reqs[r]
        if not blocks or len(blocks) > cap:
            continue
        now = arrival[r]

        def rank(b):
            s = owner[b]
            if policy == "ttl_pin":
                return (1 if deadline.get(s, -1) > now else 0, stamp[b])
            if policy == "agent_end" or ended.get(s, False):
                return (0 if ended.get(s, False) else 1, stamp[b])
            return (1, -nextturn[s], stamp[b])  # agent_next, live: furthest next turn first

        missing = len(set(blocks) - set(owner))
        while len(owner) + missing > cap:
            v = min((b for b in owner if b not in blocks), key=rank)
            del owner[v], stamp[v]
        s = sid[r]
        deadline[s] = now + ttl
        ended[s] = nxt[r] == math.inf
        nextturn[s] = nxt[r]
        for b in (blocks[::-1] if walk == "tail_first" else blocks):
            got += b in owner
            owner[b] = s
            stamp[b] = clock
            clock += 1
    return got


@pytest.mark.parametrize("walk", ["forward", "tail_first"])
@pytest.mark.parametrize("policy", AGENT)
def test_request_mode_equals_plain_python_reference(policy, walk):
    # 400 traces: ttl_pin's holds change the hit count of few random traces (about 1 in 25
    # differs from ttl 0), so fewer would leave the hold logic barely checked
    rng = np.random.default_rng(5)
    for _ in range(400):
        pool = int(rng.integers(3, 25))
        R = int(rng.integers(2, 25))
        reqs = [[int(x) for x in rng.choice(pool, int(rng.integers(1, min(pool, 8))), replace=False)]
                for _ in range(R)]
        sess = [int(x) for x in rng.integers(-1, 5, R)]
        arrival = np.cumsum(rng.exponential(2.0, R))
        cap = int(rng.integers(1, pool))
        ttl = float(rng.choice([0.5, 3.0, 20.0]))
        t = Trace.from_requests(reqs, arrival_s=arrival, session=sess)
        dense = [[int(x) for x in t.request_blocks(i)] for i in range(R)]
        kw = {"ttl": ttl} if policy == "ttl_pin" else {}
        assert hits(t, policy, cap, order=walk, **kw) == reference(dense, sess, arrival, cap, policy, ttl, walk), \
            (reqs, sess, cap, ttl)


# ------------------------------------------------------------------ equivalences and bounds
@pytest.mark.parametrize("mode,order", [("request", "forward"), ("request", "tail_first"), ("block", "forward")])
def test_ttl_zero_is_lru(mode, order):
    caps = [3, 10, 40, 150]
    for seed in range(6):
        t = session_trace(n_sessions=40, seed=seed)
        lru = [r.hits for r in simulate(t, "lru", caps, mode=mode, order=order, one_pass=False)]
        ttl0 = [r.hits for r in simulate(t, "ttl_pin", caps, mode=mode, order=order, params={"ttl": 0.0})]
        assert ttl0 == lru, (seed, ttl0, lru)


@pytest.mark.parametrize("policy", ["agent_end", "agent_next"])
def test_without_sessions_every_request_ends_and_the_hints_are_lru(policy):
    t = session_trace(n_sessions=40, seed=2)
    t.session[:] = -1  # each request a one-turn session: ended once served
    for mode in ("request", "block"):
        caps = [5, 30, 120]
        lru = [r.hits for r in simulate(t, "lru", caps, mode=mode, one_pass=False)]
        assert [r.hits for r in simulate(t, policy, caps, mode=mode)] == lru


def test_the_hints_use_their_information():
    """On multi-turn sessions each hint beats LRU somewhere (a test that could not tell a
    hint from LRU would pass the equivalences above for free)."""
    t = session_trace(n_sessions=60, seed=1)
    caps = [20, 40, 80, 150]
    lru = [r.hits for r in simulate(t, "lru", caps)]
    for p in ("agent_end", "agent_next"):
        got = [r.hits for r in simulate(t, p, caps)]
        assert any(g > x for g, x in zip(got, lru)), (p, got, lru)


@pytest.mark.parametrize("seed", range(8))
def test_agent_hints_never_beat_belady(seed):
    """Belady is the optimum of hit count in block mode (libCacheSim's) and under the
    residency constraint (tests/test_engine.py checks both against brute force)."""
    t = session_trace(n_sessions=40, seed=seed)
    t.tool_wait_s = np.random.default_rng(seed).exponential(5.0, t.n_requests)
    caps = [4, 12, 30, 80, 200]
    for mode in ("block", "request"):
        opt = [r.hits for r in simulate(t, "belady", caps, mode=mode)]
        for p, params in [("ttl_pin", {"ttl": 2.0}), ("ttl_pin", {"ttl": 30.0, "source": "fixed"}),
                          ("agent_end", None), ("agent_next", None)]:
            got = [r.hits for r in simulate(t, p, caps, mode=mode, params=params)]
            assert all(g <= o for g, o in zip(got, opt)), (p, params, mode, got, opt)


@pytest.mark.parametrize("policy", AGENT)
def test_residency_and_accounting_invariants(policy):
    t = session_trace(n_sessions=50, seed=3)
    for mode in ("block", "request"):
        for cap in (5, 30, 200):
            blk = simulate(t, policy, cap, mode=mode, cost_models=["uniform"])[0]
            pre = simulate(t, policy, cap, mode=mode, hits="prefix")[0]
            assert blk.max_resident_blocks <= cap
            assert pre.hits <= blk.hits and pre.holes_per_request_max <= 1
    big = simulate(t, policy, t.n_unique)[0]
    assert big.hits == t.n_accesses - t.n_unique and big.evictions == 0


def test_tool_waits_travel_with_the_trace():
    """ttl_pin reads Trace.tool_wait_s on whatever the replay runs: the tail-first view and
    a session sample carry it, and it is part of the trace's identity (result keys)."""
    t = session_trace(n_sessions=30, seed=4)
    waits = np.arange(t.n_requests, dtype=np.float64)
    w = dataclasses.replace(t, tool_wait_s=waits)
    assert np.array_equal(w.tail_first_view().tool_wait_s, waits)
    s = sample(w, 0.5, seed=1, by="session")
    kept = np.isin(t.arrival_s, s.arrival_s)  # arrival times are distinct floats here
    assert len(np.unique(t.arrival_s)) == t.n_requests and 0 < s.n_requests < t.n_requests
    assert np.array_equal(s.tool_wait_s, waits[kept])
    assert trace_digest(w) != trace_digest(t) == trace_digest(dataclasses.replace(t))
    with pytest.raises(ValueError, match="tool_wait_s"):
        dataclasses.replace(t, tool_wait_s=waits[:-1])


def test_the_hints_are_registered_under_their_names():
    """The interface outside checks use (issue 35): the three names in policy_names()."""
    from sim_core import get_policy, policy_names

    assert {"ttl_pin", "agent_end", "agent_next"} <= set(policy_names())
    assert get_policy("agent_next").offline and not get_policy("ttl_pin").offline and not get_policy("agent_end").offline
