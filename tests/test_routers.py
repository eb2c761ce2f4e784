"""Routers in front of several replicas: each router's choice on small hand-made fleets,
one replica equal to the engine alone, seeds, regret and bad parameters.

Which replica served which request is read off ServeResult.per_replica: request i's
prompt ends in a partial block of 2^i tokens, so a replica's prompt tokens modulo the
block size is the bit mask of the requests it served."""
from __future__ import annotations

import dataclasses
import json

import numba
import pytest

from sim_core import ROUTERS, Trace, serve
from sim_core.serving.routers import REGISTRY
from tests.helpers import SHARED_MOONCAKE

BT = 512


def fleet_trace(blocks, arrivals, outputs=None, session=None):
    """Request i: its full prompt blocks, then a partial block of 2^i tokens."""
    n = len(blocks)
    assert n <= 9
    return Trace.from_requests(blocks, arrivals, session, block_tokens=BT,
                               input_tokens=[len(b) * BT + 2 ** i for i, b in enumerate(blocks)],
                               output_tokens=outputs or [2] * n)


def served(res) -> list[set[int]]:
    """The requests each replica served."""
    return [{i for i in range(9) if (p["prompt_tokens"] % BT) >> i & 1} for p in res.per_replica]


def together(res, *groups) -> bool:
    """Each group of requests went to one replica, and different groups to different ones."""
    where = {i: q for q, s in enumerate(served(res)) for i in s}
    reps = [{where[i] for i in g} for g in groups]
    return all(len(r) == 1 for r in reps) and len({next(iter(r)) for r in reps}) == len(groups)


# A and B arrive together, unrelated; once both are done, D shares B's first block and C
# extends A's prefix. Round robin sends them 0, 1, 0, 1 (A, B, D, C): D with A, C with B.
AFFINITY = fleet_trace([[1, 2, 3, 4], [9], [9, 7], [1, 2, 3, 4, 5]], [0.0, 0.0, 30.0, 30.0])


def test_round_robin_goes_by_arrival_order_and_misses_the_prefixes():
    res = serve(AFFINITY, "lru", 100, replicas=2, router="round_robin")
    assert served(res) == [{0, 2}, {1, 3}]
    # C (request 3) went to replica 1 while replica 0 held its first 4 blocks: 4 x 512 tokens
    # of regret; D (request 2) to replica 0 while replica 1 held its first block: 512 more
    assert res.regret_tokens == 5 * BT
    assert res.first_reuse_ratio == 0.0


@pytest.mark.parametrize("router", ["kv_router", "cache_aware", "weighted", "prefix_hash"])
def test_cache_aware_routers_follow_the_prefix(router):
    """kv_router: A and B at t=0: B costs more where A's prefill is active, so they part;
    C's and D's costs are lowest where their prefixes are. cache_aware: A to the least
    loaded (0), B to replica 1; D matches 1 of its 3 blocks on 1 (> 0.3), C 4 of 6 on 0.
    weighted: B goes where nothing waits; the prefix score decides C and D. prefix_hash:
    the key is the first block, so {A, C} and {B, D} each share a replica (whether A and B
    part is the hash's call)."""
    res = serve(AFFINITY, "lru", 100, replicas=2, router=router)
    if router == "prefix_hash":
        where = served(res)
        assert any({0, 3} <= s for s in where) and any({1, 2} <= s for s in where)
    else:
        assert together(res, {0, 3}, {1, 2})
        assert res.regret_tokens == 0
    assert res.first_reuse_ratio == pytest.approx((4 + 1) * BT / res.prompt_tokens)


def test_cache_aware_falls_back_to_least_loaded_below_its_threshold():
    res = serve(AFFINITY, "lru", 100, replicas=2, router="cache_aware", router_params={"cache_threshold": 1.0})
    # nothing matches all of a prompt: the least loaded, the lowest index on ties: D (idle
    # fleet) to 0, then C, which replica 0 holds most of, to 1 where nothing is in flight
    assert served(res) == [{0, 2}, {1, 3}]


def test_least_loaded_counts_waiting_and_running():
    # A runs on 0 for a long time (many outputs); B at t=0 sees A waiting on 0 and goes to 1
    # and finishes; C at t=5 sees A running on 0 and nothing on 1: it goes to 1
    t = fleet_trace([[1], [2], [3]], [0.0, 0.0, 5.0], outputs=[2000, 2, 2])
    assert served(serve(t, "lru", 100, replicas=2, router="least_loaded")) == [{0}, {1, 2}]
    assert served(serve(t, "lru", 100, replicas=2, router="round_robin")) == [{0, 2}, {1}]


def test_power_of_two_balances_requests_in_flight():
    t = fleet_trace([[1], [2], [3], [4]], [0.0] * 4)
    for seed in range(4):
        res = serve(t, "lru", 100, replicas=2, router="power_of_two", seed=seed)
        assert [p["requests"] for p in res.per_replica] == [2, 2]


def test_session_router_keeps_a_session_on_one_replica_until_it_is_overloaded():
    blocks = [[10 + i] for i in range(9)]
    sessions = [3, 4, 5] * 3
    t = fleet_trace(blocks, [10.0 * i for i in range(9)], session=sessions)
    where = served(serve(t, "lru", 100, replicas=3, router="session"))
    for s in set(sessions):  # one at a time: each session stays where the ring puts it
        mine = {i for i in range(9) if sessions[i] == s}
        assert sum(mine <= w for w in where) == 1
    # nine requests of one session at once: the ring's replica keeps request k while its
    # in-flight count <= 1.25 (k + 1) / 3, else the least loaded takes it: the ring's
    # replica gets requests 0, 2, 4, 7 and the others 1, 5, 8 and 3, 6
    t = fleet_trace(blocks, [0.0] * 9, session=[7] * 9)
    res = serve(t, "lru", 100, replicas=3, router="session")
    assert sorted(p["requests"] for p in res.per_replica) == [2, 3, 4]
    res = serve(t, "lru", 100, replicas=3, router="session", router_params={"load_factor": 100})
    assert sorted(p["requests"] for p in res.per_replica) == [0, 0, 9]


def test_every_replica_count_up_to_16_runs_one_compiled_loop():
    """A replica count is not part of the compiled loop's type below 16 (replica_states pads
    the states' tuple): fleets of 2, 3, 9 and 16 add no compiled version of the loop, and
    each pads to the length its doubling names."""
    from sim_core.serving.loop import replica_states, run_serve

    serve(AFFINITY, "lru", 100, replicas=2, router="kv_router")
    known = len(run_serve.signatures)
    for n in (3, 9, 16):
        res = serve(AFFINITY, "lru", 100, replicas=n, router="kv_router")
        assert len(res.per_replica) == n
    assert len(run_serve.signatures) == known
    assert [len(replica_states((0,) * n)) for n in (1, 16, 17, 32, 33)] == [16, 16, 32, 32, 64]
    assert replica_states((5, 6))[:2] == (5, 6)
    # a vLLM engine's aggregated fleet passes no SGLang state (ss) and no handoff (ho): the
    # loop compiles with both None, which type-checks only because numba prunes the code
    # that would use them
    none = [sig for sig in run_serve.signatures if sig[8] == numba.types.none and sig[-1] == numba.types.none]
    assert none, run_serve.signatures

@pytest.mark.parametrize("router", ["session", "prefix_hash"])
def test_a_prompt_shorter_than_a_block_is_routed_by_itself(router):
    """A request with no block (2 tokens of 512) is keyed by itself, not by whatever follows
    it in the trace's block array (the next request's first block, or memory past the end):
    whichever block the next request starts with, it goes to the same replica."""
    where = set()
    for b in [1, 2, 3, 4, 5, 6, 7, 8, 50]:
        t = fleet_trace([[1, 2, 3, 4, 5, 6, 7, 8], [], [b, 99]], [0.0, 30.0, 60.0])
        res = serve(t, "lru", 100, replicas=2, router=router)
        where.add(next(q for q, s in enumerate(served(res)) if 1 in s))
    assert len(where) == 1

def test_one_replica_is_the_engine_alone_for_every_router():
    rows = [json.loads(x) for x in SHARED_MOONCAKE.open() if x.strip()][:300]
    t = Trace.from_requests([r["hash_ids"] for r in rows], [r["timestamp"] / 1000 for r in rows],
                            block_tokens=512, input_tokens=[r["input_length"] for r in rows],
                            output_tokens=[r["output_length"] for r in rows])
    one = serve(t, "lru", 2000)
    assert set(ROUTERS) == {"round_robin", "random", "least_loaded", "power_of_two", "session", "prefix_hash",
                            "kv_router", "cache_aware", "weighted"}
    for router in ROUTERS:
        res = serve(t, "lru", 2000, router=router)
        assert dataclasses.replace(res, router="round_robin") == one, router
        assert res.regret_tokens == 0 and res.jain_busy == 1.0
    # and several replicas: the same seed repeats, another seed (for the random ones) differs
    for router in ROUTERS:
        a = serve(t, "lru", 2000, replicas=3, router=router, seed=1)
        assert serve(t, "lru", 2000, replicas=3, router=router, seed=1) == a
        if router in ("random", "power_of_two"):
            assert serve(t, "lru", 2000, replicas=3, router=router, seed=2).per_replica != a.per_replica
        assert 1 / 3 <= a.jain_busy <= 1 and a.busy_imbalance >= 1
        # no router reuses more than the fleet ceiling (docs/fleet.md), itself within the infinite cache's
        assert a.first_reuse_ratio <= a.ceiling_reuse_ratio <= a.infinite_reuse_ratio



def test_the_fleet_ceiling_is_belady_over_the_pooled_cache():
    # a b a b of four blocks each, one replica of 6 blocks: Belady keeps 6 of the 8 blocks
    # a and b will need again; an infinite cache keeps all 8
    t = fleet_trace([[1, 2, 3, 4], [5, 6, 7, 8]] * 2, [0.0, 10.0, 20.0, 30.0])
    res = serve(t, "lru", 6)
    assert res.ceiling_reuse_ratio == 6 * BT / res.prompt_tokens
    assert res.infinite_reuse_ratio == 8 * BT / res.prompt_tokens
    assert res.first_reuse_ratio <= res.ceiling_reuse_ratio
    # two replicas of 6 pool 12 blocks: the ceiling is the infinite cache's
    two = serve(t, "lru", 6, replicas=2)
    assert two.ceiling_reuse_ratio == two.infinite_reuse_ratio == 8 * BT / two.prompt_tokens


@pytest.mark.parametrize("router, params, match", [
    ("nearest", None, "unknown router 'nearest'"),
    ("kv_router", {"overlap_weight": -1}, "kv_router.*overlap_weight must be in"),
    ("kv_router", {"warmth": 1}, "no parameter.*warmth"),
    ("cache_aware", {"cache_threshold": 1.5}, "cache_threshold must be in"),
    ("cache_aware", {"balance_abs": 2.5}, "balance_abs must be an integer"),
    ("weighted", {"prefix_view": "psychic"}, "prefix_view must be one of exact, approximate"),
    ("weighted", {"queue_weight": "high"}, "queue_weight must be a number"),
    ("session", {"load_factor": 0.5}, "load_factor must be in"),
])
def test_bad_router_input_names_the_field(router, params, match):
    with pytest.raises(ValueError, match=match):
        serve(AFFINITY, "lru", 100, replicas=2, router=router, router_params=params)


def test_every_router_cites_its_source():
    for spec in REGISTRY.values():
        assert spec.source and spec.doc and "/" in spec.source


def test_kv_events_that_arrive_late_hide_the_prefixes():
    # A's blocks are in replica X's index from t ~ 0; at t = 30 a router whose events lag
    # by 1 ms sees them as one without lag does, one lagging 1,000 s sees an empty fleet
    now = serve(AFFINITY, "lru", 100, replicas=2, router="kv_router")
    assert serve(AFFINITY, "lru", 100, replicas=2, router="kv_router",
                 router_params={"event_lag": 0.001}) == now
    rows = [json.loads(x) for x in SHARED_MOONCAKE.open() if x.strip()][:400]
    t = Trace.from_requests([r["hash_ids"] for r in rows], [r["timestamp"] / 1000 for r in rows],
                            block_tokens=512, input_tokens=[r["input_length"] for r in rows],
                            output_tokens=[r["output_length"] for r in rows])
    fresh = serve(t, "lru", 2000, replicas=4, router="kv_router")
    stale = serve(t, "lru", 2000, replicas=4, router="kv_router", router_params={"event_lag": 1000.0})
    assert stale.regret_tokens > fresh.regret_tokens and stale.first_reuse_ratio < fresh.first_reuse_ratio
