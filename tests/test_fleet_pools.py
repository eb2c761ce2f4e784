"""Pool sizing under load (tier=... with fleet=...): the cheapest pool within a point of the
best first-admission reuse, per router and replicas, from serving rows (by hand) and from
advise's serving step against sim_core.serve called directly."""
from __future__ import annotations

import pytest

from sim_core import QWEN3_CODER_30B, serve
from sweep.report import fleet_pools

INF = float("inf")


def _row(reuse, priv, pool=0, *, router="round_robin", reps=2, ttft=1.0):
    r = {"router": router, "replicas": reps, "load": 1.0, "capacity_blocks": 100, "first_reuse_ratio": reuse,
         "ttft_mean_s": ttft, "ttft_p99_s": 2 * ttft, "tier_capacity.dram": priv, "tier_shared.dram": 0}
    if pool:
        r.update({"tier_capacity.pool": pool, "tier_shared.pool": 1})
    return r


def test_the_cheapest_pool_within_a_point_of_the_best():
    # blocks in all: 2 x private + shared. 2x100 -> 200 (0.300), 2x200 -> 400 (0.335),
    # 2x100 + 150 shared -> 350 (0.342), 2x400 -> 800 (0.345): the best is 0.345, and the
    # cheapest within a point of it (>= 0.335) is the 350-block pool with the shared tier
    curves = {"lru @ 1x load above dram=100": [_row(0.300, 100)],
              "lru @ 1x load above dram=200": [_row(0.335, 200, ttft=0.9)],
              "lru @ 1x load above dram=100,pool=150": [_row(0.342, 100, 150, ttft=0.8)],
              "lru @ 1x load above dram=400": [_row(0.345, 400, ttft=0.7)]}
    (d,) = fleet_pools.sizing(curves)
    assert (d["pool"], d["private_blocks"], d["shared_blocks"], d["total_blocks"]) == ("dram=100,pool=150", 100, 150,
                                                                                        350)
    assert d["saturation"] == 0.345 and d["ttft_mean_s"] == 0.8 and not d["rising"]
    # a router of its own is its own answer; the largest pool still a point above the rest: rising
    curves["lru @ 1x load above dram=100"].append(_row(0.20, 100, router="kv_router"))
    curves["lru @ 1x load above dram=400"].append(_row(0.25, 400, router="kv_router"))
    got = {d["router"]: d for d in fleet_pools.sizing(curves)}
    assert got["kv_router"]["pool"] == "dram=400" and got["kv_router"]["rising"]
    assert got["round_robin"]["pool"] == "dram=100,pool=150"
    assert any(line.startswith("  >pool") for line in fleet_pools.lines(list(got.values())))
    assert "Pool sizing under load" in fleet_pools.html_section(list(got.values()))
    # the capacity the fleet ceiling pools: HBM and the private tiers per replica, the shared pool once
    assert fleet_pools.held_text(_row(0.3, 4000, 64000), 2, 1000) == "2 x (1,000 + 4,000) + 64,000 shared blocks"
    assert fleet_pools.held_text({}, 8, 1000) == "8 x 1,000 blocks"


def test_advise_runs_every_pool_under_every_replica_as_serve_does(compose, monkeypatch):
    """analysis.serving.run with pools (advise's serving step): every point is serve() with that
    pool under every replica, and its pool sizing is the cheapest within a point of the best."""
    import analysis.serving as serving
    from sweep.fleet import setup
    from sweep.plan import resolve_pools
    from sweep.spec import resolve
    from sweep.traces import load

    monkeypatch.setattr(serving, "POLICIES", ["lru"])
    cfg = compose("trace=mooncake_conversation", "trace.max_requests=150", "policy=lru", "fleet=dynamo",
                  "fleet.replicas=2", "fleet.arrival_speedup=4", "tier=hbm_dram", "tier.dram.capacities=[0,2000]",
                  "tier.dram.bandwidth_bps=inf", "capacity=custom", "capacity.sizes=[300]")
    fl, sp = setup(cfg, resolve(cfg, "lru"), [])
    pools, _ = resolve_pools(sp.tiers, sp.model, 512)
    trace = load(cfg.trace, "mooncake_conversation")
    from sweep.fleet import capacities
    caps, _ = capacities(fl, ["300"], QWEN3_CODER_30B, 512)
    series = serving.run(trace, fl, caps, model=QWEN3_CODER_30B, pools=pools)
    for label, tiers in pools:
        got = series[4.0]["lru" + (f" above {label}" if label else "")][0]
        want = serve(trace, "lru", 300, replicas=2, arrival_speedup=4, model=QWEN3_CODER_30B,
                     tiers=[dict(t) for t in tiers] or None)
        assert got["first_reuse_ratio"] == pytest.approx(want.first_reuse_ratio)
        assert got["ttft_p99_s"] == pytest.approx(want.ttft_p99_s)
    sized = fleet_pools.sizing(serving.pool_curves(series))
    assert len(sized) == 1 and sized[0]["pools"] == len([p for p in pools if p[0]])
