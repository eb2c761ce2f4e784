"""Lower tiers in the serving replay (sim_core.serving.tiers): the engines' rules as simulate
runs them, each replica's own tiers, a pool the replicas share, the routers' view of it, the
fleet's ceilings. (Dynamo 1.6.1's replay beside ours: benchmarks/serve_tiers.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import ROUTERS, Trace, serve, simulate
from sim_core.tiers.rules import HIERARCHIES

INF = float("inf")


def trace(reqs, arrivals, bt=4, outputs=None):
    """Full blocks of `bt` tokens; one output token each unless given (no decode blocks)."""
    return Trace.from_requests(reqs, arrivals, block_tokens=bt, input_tokens=[len(r) * bt for r in reqs],
                               output_tokens=outputs or [1] * len(reqs))


def sparse(n=120, seed=3, bt=4):
    """Requests of 2-8 blocks over a few shared prefixes, each ending in a block of its own,
    1,000 s apart: nothing queues, so the engine sees one request at a time."""
    rng = np.random.default_rng(seed)
    stems = [list(range(100 * k, 100 * k + 6)) for k in range(6)]
    reqs = []
    for i in range(n):
        stem = stems[rng.integers(len(stems))]
        reqs.append(stem[:rng.integers(1, 6)] + [10_000 + i])
    return trace(reqs, [1000.0 * i for i in range(n)], bt)


# ---------------------------------------------------------------- the engines' rules, as simulate runs them
@pytest.mark.parametrize("name", list(HIERARCHIES))
def test_one_replica_serves_what_simulate_serves(name):
    """With one request at a time, serve's tiers hold what simulate's hold: the same tokens
    from HBM and from each tier, for every named hierarchy."""
    t = sparse()
    caps = [12, 20]
    tiers = [{"name": f"t{i + 1}", "capacity": caps[i]} for i in range(len(HIERARCHIES[name]))]
    sim = simulate(t, "lru", [8], counting="vllm", hierarchy=name, tiers=tiers)[0]
    assert sum(sim.tier_skipped_writes.values()) == 0  # serve retries a refused store, simulate does not
    srv = serve(t, "lru", 8, hierarchy=name, tiers=[{**x, "bandwidth_bps": INF} for x in tiers])
    assert srv.tier_hits == sim.tier_hits
    assert sum(sim.tier_hits.values()) > 0
    P = srv.prompt_tokens
    assert round(srv.hbm_first_reuse_ratio * P) == sim.hits * t.block_tokens
    assert srv.tier_first_tokens == {k: v * t.block_tokens for k, v in sim.tier_hits.items()}


def test_the_engine_brings_its_hierarchy():
    t = sparse(60)
    d = serve(t, "lru", 8, tiers=[{"name": "dram", "capacity": 12, "bandwidth_bps": INF}])
    v = serve(t, "lru", 8, tiers=[{"name": "dram", "capacity": 12, "bandwidth_bps": INF}], hierarchy="vllm_cpu")
    assert d.tier_hits == v.tier_hits  # Dynamo's native host offload is vLLM's CPU offload
    w = serve(t, "lru", 8, tiers=[{"name": "dram", "capacity": 12, "bandwidth_bps": INF}], hierarchy="victim")
    assert w.tier_hits != d.tier_hits


# ---------------------------------------------------------------- per replica, and a pool they share
POOL = [{"name": "dram", "capacity": 0}, {"name": "pool", "capacity": 10, "shared": True, "bandwidth_bps": INF}]


def test_a_block_one_replica_writes_to_the_pool_is_loaded_by_another():
    # round robin: [1, 2] on replica 0 (written to the pool when computed), then [1, 2, 3]
    # on replica 1, whose HBM is empty: it loads 1 and 2 from the pool
    r = serve(trace([[1, 2], [1, 2, 3]], [0.0, 10.0]), "lru", 10, replicas=2, tiers=POOL)
    assert r.tier_hits == {"dram": 0, "pool": 2} and r.pool_foreign_blocks == 2
    assert r.per_replica[1]["tier_tokens.pool"] == 8 and r.per_replica[1]["tier_tokens.dram"] == 0
    assert r.per_replica[0]["tier_loads.pool"] == 0 and r.per_replica[1]["pool_foreign_blocks"] == 2
    assert r.first_reuse_ratio == pytest.approx(8 / 20)


def test_a_private_tier_is_not_another_replicas():
    priv = [{"name": "dram", "capacity": 10, "bandwidth_bps": INF}]
    r = serve(trace([[1, 2], [1, 2, 3]], [0.0, 10.0]), "lru", 10, replicas=2, tiers=priv)
    assert r.tier_hits == {"dram": 0} and r.first_reuse_ratio == 0
    one = serve(trace([[1, 2], [9], [1, 2, 3]], [0.0, 5.0, 10.0]), "lru", 10, replicas=2, tiers=priv)
    assert one.tier_hits == {"dram": 0}  # replica 0 holds 1, 2 in HBM: nothing to load


def test_the_pool_is_counted_once():
    # a pool of 2 blocks: replica 0 writes 1, 2, then replica 1 writes 3, 4, which evicts them;
    # replica 0 then loads 3, 4 (another's), and replica 1 finds 1, 2 nowhere
    reqs = [[1, 2], [3, 4], [3, 4, 9], [1, 2, 7]]
    pool = [POOL[0], {**POOL[1], "capacity": 2}]
    r = serve(trace(reqs, [0.0, 10.0, 20.0, 30.0]), "lru", 10, replicas=2, tiers=pool)
    assert r.tier_hits == {"dram": 0, "pool": 2} and r.pool_foreign_blocks == 2
    assert r.per_replica[0]["tier_loads.pool"] == 2 and r.per_replica[1]["tier_loads.pool"] == 0
    each = serve(trace(reqs, [0.0, 10.0, 20.0, 30.0]), "lru", 10, replicas=2,
                 tiers=[POOL[0], {**POOL[1], "capacity": 5}])
    assert each.tier_hits["pool"] == 4  # room for every write: both loads


def test_a_pool_load_waits_for_its_link_and_latency():
    # one 4-token block of Qwen3-Coder-30B KV is 393,216 bytes: at that many bytes/s it takes
    # 1 s, after 0.5 s of latency, overlapped with the 4-token prefill
    pool = [POOL[0], {**POOL[1], "bandwidth_bps": 393216.0, "latency_s": 0.5}]
    r = serve(trace([[1, 2], [1, 2, 3]], [0.0, 10.0]), "lru", 10, replicas=2, tiers=pool)
    assert r.tier_hits["pool"] == 2
    assert r.tier_load_s["pool"] == pytest.approx(0.5 + 2.0)
    assert max(p["ttft_p99_s"] for p in r.per_replica) == pytest.approx(2.5)


def test_stores_to_the_pool_queue_on_the_link_and_its_readers_wait_for_them():
    # a block of 4 tokens (393,216 bytes) takes 1 s each way, no latency. Replica 0 stores
    # [1, 2] at about 0 s (its store lane busy until about 2 s), then [3, 4] of its next
    # request, which start on the lane at about 2 s. Replica 1 asks for [3, 4] at 2.5 s: they
    # are readable from about 3 s (the store's start + one block), and load until about 5 s.
    # Without the store lane they would be readable at about 1 s and load from 2.5 to 4.5 s.
    pool = [POOL[0], {**POOL[1], "bandwidth_bps": 393216.0}]
    t = trace([[1, 2], [9], [3, 4], [3, 4, 7]], [0.0, 0.001, 0.002, 2.5])
    r = serve(t, "lru", 10, replicas=2, router="round_robin", tiers=pool)
    assert r.tier_hits["pool"] == 2 and r.pool_foreign_blocks == 2
    assert r.tier_load_s["pool"] == pytest.approx(2.5, abs=0.05)


def test_a_router_can_see_the_pool():
    # SGLang's cache-aware router, deterministic on ties: [1, 2] (decoding for a while) goes
    # to replica 0, which also writes it to the pool; [1, 2, 3] follows. Its tree matches 2
    # blocks on replica 0 and none on replica 1, so it goes to replica 0; crediting the pool's
    # blocks as matched ties the replicas and the less busy one, replica 1, takes it (and
    # loads 1 and 2 from the pool)
    t = trace([[1, 2], [1, 2, 3]], [0.0, 1.0], outputs=[400, 1])
    base = serve(t, "lru", 400, replicas=2, router="cache_aware", tiers=POOL)
    assert base.per_replica[0]["requests"] == 2 and base.pool_foreign_blocks == 0
    seen = serve(t, "lru", 400, replicas=2, router="cache_aware", tiers=POOL, router_params={"pool_weight": 1.0})
    assert seen.per_replica[1]["requests"] == 1 and seen.pool_foreign_blocks == 2


def test_replica_counts_up_to_a_power_of_two_share_one_compiled_loop_with_tiers():
    """The replicas' tier views are padded to the next power of two (sim_core.serving._below):
    a fleet of 3 adds no compiled version of the loop to a fleet of 4's, and each replica
    still has a tier of its own."""
    from sim_core.serving.loop import run_serve

    t = sparse(40)
    priv = [{"name": "dram", "capacity": 12, "bandwidth_bps": INF}]
    serve(t, "lru", 8, replicas=4, tiers=priv)
    known = len(run_serve.signatures)
    assert len(serve(t, "lru", 8, replicas=3, tiers=priv).per_replica) == 3
    assert len(run_serve.signatures) == known
    # padding does not change results: a private tier per replica on 3 replicas serves what
    # three separate one-replica fleets over round robin's shares would (each replica's own)
    r = serve(t, "lru", 8, replicas=3, tiers=priv, router="round_robin")
    for q in range(3):
        part = Trace.from_requests([list(t.request_blocks(i)) for i in range(q, t.n_requests, 3)],
                                   [1000.0 * i for i in range(q, t.n_requests, 3)], block_tokens=4,
                                   input_tokens=[len(t.request_blocks(i)) * 4 for i in range(q, t.n_requests, 3)],
                                   output_tokens=[1] * len(range(q, t.n_requests, 3)))
        one = serve(part, "lru", 8, tiers=priv)
        assert r.per_replica[q]["tier_loads.dram"] == one.tier_hits["dram"]


# ---------------------------------------------------------------- the ceilings
# two replicas only: every replica count compiles the serving loop once more
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), router=st.sampled_from(ROUTERS), cap=st.integers(8, 16))
def test_an_infinite_pool_reuses_at_least_the_fleet_and_at_most_the_infinite_cache(seed, router, cap):
    replicas = 2
    rng = np.random.default_rng(seed)
    stems = [list(range(100 * k, 100 * k + 5)) for k in range(4)]
    reqs = [stems[rng.integers(4)][:rng.integers(1, 5)] + [1000 + i] for i in range(40)]
    t = trace(reqs, np.sort(rng.uniform(0, 2, 40)).tolist(), bt=16, outputs=rng.integers(1, 40, 40).tolist())
    flat = serve(t, "lru", cap, replicas=replicas, router=router)
    pool = serve(t, "lru", cap, replicas=replicas, router=router,
                 tiers=[{"name": "dram", "capacity": 0},
                        {"name": "pool", "capacity": 10**6, "shared": True, "bandwidth_bps": INF}])
    assert pool.first_reuse_ratio >= flat.first_reuse_ratio - 1e-12
    assert pool.first_reuse_ratio <= pool.infinite_reuse_ratio + 1e-12
    # Belady over every block the fleet holds, the pool's once (docs/fleet.md): here the pool
    # is as large as the trace, so it meets the infinite-cache ceiling
    assert pool.first_reuse_ratio <= pool.ceiling_reuse_ratio + 1e-12


def test_the_interface_outside_checks_use():
    """R replicas, each with H private host blocks under Dynamo's host-offload rules (vLLM's
    CPU offload), then the same with a pool they share."""
    t = sparse(60)
    host = [{"name": "dram", "capacity": 6, "bandwidth_bps": INF}]
    r = serve(t, "lru", 8, replicas=2, router="kv_router", engine="dynamo", arrival_speedup=4.0, tiers=host)
    for k in ("first_reuse_ratio", "reuse_ratio", "ttft_mean_s", "ttft_p50_s", "ttft_p99_s"):
        assert np.isfinite(getattr(r, k))
    assert len(r.per_replica) == 2 and r.tier_shared == {"dram": 0}
    assert sum(p["tier_loads.dram"] for p in r.per_replica) == r.tier_hits["dram"]
    pool = host + [{"name": "pool", "capacity": 40, "shared": True, "bandwidth_bps": INF}]
    s = serve(t, "lru", 8, replicas=2, router="kv_router", engine="dynamo", arrival_speedup=4.0, tiers=pool)
    assert s.tier_capacity == {"dram": 6, "pool": 40} and s.tier_shared == {"dram": 0, "pool": 1}
    assert s.first_reuse_ratio >= r.first_reuse_ratio and s.tier_hits["pool"] > 0


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("tiers, match", [
    ([{"name": "pool", "capacity": 10, "shared": True, "bandwidth_bps": 1e9}], "shared"),
    ([{"name": "dram", "capacity": 10, "bandwidth_bps": 1e9, "latency_s": -1.0}], "latency_s"),
    ([{"name": "dram", "capacity": 10, "bandwidth_bps": 0}], "bandwidth_bps"),
    ([{"name": "dram", "capacity": 10, "bandwidth_bps": 1e9},
      {"name": "pool", "capacity": 10, "shared": "yes", "bandwidth_bps": 1e9}], "shared"),
    ([{"name": "dram", "capacity": 10, "bandwidth_bps": 1e9},
      {"name": "pool", "capacity": 10, "shared": True, "bandwidth_bps": 1e9},
      {"name": "ssd", "capacity": 10, "bandwidth_bps": 1e9}], "shared"),
])
def test_bad_tiers_name_the_field(tiers, match):
    with pytest.raises(ValueError, match=match):
        serve(trace([[1, 2]], [0.0]), "lru", 10, replicas=2, tiers=tiers)


def test_an_unknown_hierarchy_is_refused():
    with pytest.raises(ValueError, match="hierarchy"):
        serve(trace([[1, 2]], [0.0]), "lru", 10, hierarchy="nvme_magic", tiers=[{"name": "d", "capacity": 4}])
