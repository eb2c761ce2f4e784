"""Lower tiers under HBM (sim_core.tiers.hierarchy): hand-computed traces, an independent
reference model in plain Python, and the identities a hierarchy must keep."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as hs

from sim_core import Trace, simulate
from sim_core.catalog.hardware import PARTS
from sim_core.tiers.hierarchy import DOOR_WINDOW
from sim_core.traces.loaders import bundled_path, load_trace
from sim_core.catalog.models import QWEN3_CODER_30B
from sim_core.result import per_tier_fields


def singles(seq: str) -> Trace:
    """One single-block request per letter."""
    return Trace.from_requests([[ord(c)] for c in seq])


def tier(cap, **kw):
    return [{"name": "dram", "capacity": cap, **kw}]


VICTIM = {"write": "on_evict", "inclusive": False, "touch": "loads"}  # conf/tier/victim.yaml


def victim(cap, **kw):
    """The exclusive write-back victim cache (the default before vLLM's CPU offload)."""
    return tier(cap, **{**VICTIM, **kw})


def run(trace, hbm, tiers, **kw):
    kw.setdefault("mode", "block")
    return simulate(trace, kw.pop("policy", "lru"), [hbm], tiers=tiers, **kw)[0]


def conserved(r):
    return r.hits + sum(r.tier_hits.values()) + r.recomputed_blocks == r.accesses


# ------------------------------------------------------------------ hand-computed
def test_exclusive_write_on_evict_by_hand():
    # HBM 1, DRAM 1. A: miss. B: miss, A -> DRAM. A: DRAM hit (moves up), B -> DRAM.
    # C: miss, A -> DRAM (B leaves). B: miss, C -> DRAM. A: miss.
    r = run(singles("ABACBA"), 1, victim(1))
    assert (r.hits, r.tier_hits["dram"], r.recomputed_blocks) == (0, 1, 5)
    assert r.tier_written_bytes["dram"] == 5 * QWEN3_CODER_30B.kv_bytes_per_block(16)  # every HBM eviction
    assert r.tier_loaded_bytes["dram"] == QWEN3_CODER_30B.kv_bytes_per_block(16)
    assert r.tier_evictions["dram"] == 3 and conserved(r)
    assert r.served_ratio == pytest.approx(1 / 6) and r.hit_ratio == 0


def test_write_through_against_write_back_by_hand():
    # HBM 1, DRAM 2, trace A B C A B.
    # on_compute (inclusive): DRAM takes A, B, then C (A leaves); A: miss, written back
    # (B leaves); B: miss. No tier hit.
    wt = run(singles("ABCAB"), 1, tier(2, write="on_compute", inclusive=True, touch="loads"))
    assert (wt.hits, wt.tier_hits["dram"]) == (0, 0)
    # on_evict (exclusive): A, B -> DRAM as C and B arrive; A and B are then DRAM hits.
    wb = run(singles("ABCAB"), 1, victim(2))
    assert (wb.hits, wb.tier_hits["dram"]) == (0, 2)
    assert conserved(wt) and conserved(wb)


def test_inclusive_keeps_the_copy_and_skips_the_rewrite():
    # HBM 1, DRAM 2 inclusive on_evict, trace A B A B C A: A and B reach DRAM once each
    # (a block evicted from HBM that DRAM still holds is not written again), C when the
    # last A evicts it: 3 DRAM hits, 3 writes. Exclusive: every HBM eviction is a write
    # (5), the same 3 hits.
    inc = run(singles("ABABCA"), 1, victim(2, inclusive=True))
    exc = run(singles("ABABCA"), 1, victim(2))
    assert inc.tier_hits["dram"] == exc.tier_hits["dram"] == 3
    block = QWEN3_CODER_30B.kv_bytes_per_block(16)
    assert inc.tier_written_bytes["dram"] == 3 * block
    assert exc.tier_written_bytes["dram"] == 5 * block


def test_after_hits_admission_by_hand():
    # HBM 1, DRAM 1, trace A B A B. after_hits=2: A and B have been requested once when
    # they leave HBM: never written, no tier hit. all: both come back from DRAM.
    assert run(singles("ABAB"), 1, victim(1, admit="after_hits=2")).tier_hits["dram"] == 0
    assert run(singles("ABAB"), 1, victim(1, admit="after_hits=1")).tier_hits["dram"] == 2
    assert run(singles("ABAB"), 1, victim(1)).tier_hits["dram"] == 2


def test_doorkeeper_admits_on_the_second_attempt_by_hand():
    # HBM 1, DRAM 2 (window 20 attempts), trace A B A B A: the first two writes (A, B)
    # are refused; A's second write is admitted, so the last A is a DRAM hit, and B's
    # second write (as that A evicts it) too.
    r = run(singles("ABABA"), 1, victim(2, admit="doorkeeper"))
    assert r.tier_hits["dram"] == 1 and r.tier_written_bytes["dram"] == 2 * QWEN3_CODER_30B.kv_bytes_per_block(16)
    assert DOOR_WINDOW * 2 > 5  # all five attempts fall in one window


def test_hbm_admission_by_hand():
    # HBM 2, after_hits=1: a block is cached from its second request on.
    # A: miss (not cached) A: miss (cached) B: miss B: miss (cached) A: hit.
    r = run(singles("AABBA"), 2, [], hbm_admit="after_hits=1")
    assert r.hits == 1
    assert run(singles("AABBA"), 2, []).hits == 3


def test_request_mode_loads_before_evicting_by_hand():
    # HBM 2, DRAM 2. [A B]: computed. [C]: B, the least recent (tail-first walk), goes
    # to DRAM. [A B]: A is in HBM, B is loaded from DRAM; C is evicted to make room.
    t = Trace.from_requests([[1, 2], [3], [1, 2]])
    r = run(t, 2, victim(2), mode="request")
    assert (r.hits, r.tier_hits["dram"], r.recomputed_blocks) == (1, 1, 3)
    # under prefix reuse a DRAM block after the first block no level holds is recomputed:
    # HBM 3. [1 2]; [3 4] evicts 2 (DRAM); [1 9 2]: 1 in HBM, 9 new, 2 in DRAM
    t = Trace.from_requests([[1, 2], [3, 4], [1, 9, 2]])
    blk = run(t, 3, victim(2), mode="request", hits="block")
    pre = run(t, 3, victim(2), mode="request", hits="prefix")
    assert blk.tier_hits["dram"] == 1 and pre.tier_hits["dram"] == 0
    assert pre.hits == 1 and conserved(pre) and conserved(blk)


def test_pool_of_capacity_zero_is_the_single_tier_result():
    t = load_trace(bundled_path("mooncake_conversation"))
    for policy in ("lru", "s3fifo", "belady"):
        for mode in ("request", "block"):
            one = simulate(t, policy, [1000, 8000], mode=mode, cost_models=["uniform", "qwen3_coder_30b"])
            zero = simulate(t, policy, [1000, 8000], mode=mode, cost_models=["uniform", "qwen3_coder_30b"],
                            tiers=tier(0))
            for a, b in zip(one, zero):
                da, db = a.to_dict(), b.to_dict()
                for k in per_tier_fields():
                    assert db.pop(k) == {"dram": 0}
                    da.pop(k)
                assert da == db


@pytest.mark.parametrize("mode", ["block", "request"])
def test_exclusive_lru_hierarchy_is_one_lru_stack_on_mooncake(mode):
    t = load_trace(bundled_path("mooncake_conversation"))
    for c0, c1 in [(300, 700), (1000, 3000), (4000, 12000)]:
        h = run(t, c0, victim(c1), mode=mode)
        flat = simulate(t, "lru", [c0 + c1], mode=mode)[0]
        assert h.hits + h.tier_hits["dram"] == flat.hits
        assert h.compute_savings == pytest.approx(flat.compute_savings, rel=1e-12)


# ------------------------------------------------------------------ reference model
class _Cache:
    """A plain-Python LRU or FIFO cache (front of the list = next to evict)."""

    def __init__(self, cap, policy):
        self.cap, self.policy, self.order = cap, policy, []

    def __contains__(self, b):
        return b in self.order

    def touch(self, b):
        if self.policy == "lru":
            self.order.remove(b)
            self.order.append(b)

    def evict(self):
        return self.order.pop(0)


def reference(seq, hbm_cap, tiers, hbm_policy="lru"):
    """Block-mode hierarchy, written from the semantics in sim_core/tiers/hierarchy.py:
    (HBM hits, hits per tier)."""
    hbm = _Cache(hbm_cap, hbm_policy)
    low = [_Cache(t["capacity"], t["policy"]) for t in tiers]
    seen: dict = {}
    door = [{} for _ in tiers]
    attempts = [0] * len(tiers)

    def admitted(k, b):
        rule = tiers[k].get("admit", "all")
        if rule == "all":
            return True
        if rule.startswith("after_hits="):
            return seen.get(b, 0) >= int(rule.split("=")[1])
        gen = attempts[k] // (DOOR_WINDOW * max(tiers[k]["capacity"], 1))
        attempts[k] += 1
        if door[k].get(b) == gen:
            return True
        door[k][b] = gen
        return False

    def write(k, b, via):
        if k >= len(low):
            return
        t = tiers[k]
        if t.get("write", "on_evict") != via or t["capacity"] == 0 or b in low[k] or not admitted(k, b):
            return
        victims = []
        while len(low[k].order) >= low[k].cap:
            victims.append(low[k].evict())
        low[k].order.append(b)
        for v in victims:
            write(k + 1, v, "on_evict")

    def promote(k, b):  # tier k served b: copied into tier k - 1 on its N-th hit here
        n = tiers[k].get("promote", 0)
        if not n:
            return
        served[k][b] = served[k].get(b, 0) + 1
        up = low[k - 1]
        if served[k][b] >= n and up.cap > 0 and b not in up:
            victims = []
            while len(up.order) >= up.cap:
                victims.append(up.evict())
            up.order.append(b)
            for v in victims:
                write(k, v, "on_evict")

    served = [{} for _ in tiers]
    hits, tier_hits = 0, [0] * len(tiers)
    for b in seq:
        for k, c in enumerate(low):  # touch=request: the access refreshes a tier's copy first
            if tiers[k].get("touch") == "request" and b in c:
                c.touch(b)
        if b in hbm:
            hbm.touch(b)
            hits += 1
        else:
            lv = next((k for k, c in enumerate(low) if b in c), -1)
            if lv >= 0:
                tier_hits[lv] += 1
                if tiers[lv].get("inclusive", False):
                    if tiers[lv].get("touch") == "loads":
                        low[lv].touch(b)
                else:
                    low[lv].order.remove(b)
                write(lv + 1, b, "on_hit")
                if lv > 0:
                    promote(lv, b)
            if len(hbm.order) >= hbm.cap:
                write(0, hbm.evict(), "on_evict")
            hbm.order.append(b)
            for k in range(len(low)):
                if k != lv:
                    write(k, b, "on_compute")
        seen[b] = seen.get(b, 0) + 1
    return hits, tier_hits


# one tier policy per example: each combination of policy types compiles its own engine
_tier = hs.fixed_dictionaries({
    "capacity": hs.integers(0, 6),
    "write": hs.sampled_from(["on_evict", "on_compute", "on_hit"]), "inclusive": hs.booleans(),
    "admit": hs.sampled_from(["all", "after_hits=1", "after_hits=2", "doorkeeper"]),
    "touch": hs.sampled_from(["loads", "request"]), "promote": hs.integers(0, 2)})


def _chain(tiers, policy):
    """Named tiers; the first has only HBM above it (no on_hit writes, no promotion)."""
    out = [dict(t, name=f"t{i}", policy=policy) for i, t in enumerate(tiers)]
    out[0].update(promote=0, write="on_compute" if out[0]["write"] == "on_hit" else out[0]["write"])
    return out


@settings(max_examples=150, deadline=None)
@given(seq=hs.lists(hs.integers(0, 12), min_size=1, max_size=60), hbm=hs.integers(1, 5),
       tiers=hs.lists(_tier, min_size=1, max_size=3), hbm_policy=hs.sampled_from(["lru", "fifo"]),
       tier_policy=hs.sampled_from(["lru", "fifo"]))
def test_block_mode_equals_the_reference_model(seq, hbm, tiers, hbm_policy, tier_policy):
    named = _chain(tiers, tier_policy)
    r = simulate(Trace.from_requests([[b] for b in seq]), hbm_policy, [hbm], mode="block", tiers=named)[0]
    hits, tier_hits = reference(seq, hbm, named, hbm_policy)
    assert r.hits == hits
    assert [r.tier_hits[t["name"]] for t in named] == tier_hits
    assert conserved(r)


@settings(max_examples=60, deadline=None)
@given(reqs=hs.lists(hs.lists(hs.integers(0, 30), min_size=1, max_size=6), min_size=1, max_size=25),
       c0=hs.integers(6, 12), c1=hs.integers(0, 20), mode=hs.sampled_from(["block", "request"]))
# a one-block tier takes two HBM victims in one request: the first must not be pinned as
# if it were the request's own block (it was, and the second write was skipped)
@example(reqs=[[0, 4, 5, 6, 7, 1], [2, 3], [1]], c0=6, c1=1, mode="request")
def test_exclusive_lru_hierarchy_is_one_lru_stack(reqs, c0, c1, mode):
    t = Trace.from_requests(reqs)
    h = simulate(t, "lru", [c0], mode=mode, tiers=victim(c1))[0]
    flat = simulate(t, "lru", [c0 + c1], mode=mode)[0]
    assert h.hits + h.tier_hits["dram"] == flat.hits
    assert conserved(h)


@pytest.mark.parametrize("policy", ["lru", "fifo", "s3fifo", "sieve", "arc", "belady"])
@pytest.mark.parametrize("inclusive", [False, True])
def test_every_required_policy_runs_a_lower_tier(policy, inclusive):
    t = load_trace(bundled_path("mooncake_conversation")).subset(3000)
    for mode in ("request", "block"):
        r = simulate(t, "lru", [500], mode=mode, tiers=[{"name": "dram", "capacity": 1500, "policy": policy,
                                                          "inclusive": inclusive},
                                                         {"name": "ssd", "capacity": 3000, "policy": policy,
                                                          "write": "on_compute", "inclusive": True, "link": "ssd"}])[0]
        assert conserved(r)
        assert r.tier_hits["dram"] > 0 and r.served_ratio > r.hit_ratio


# ------------------------------------------------------------------ TTFT
def test_ttft_by_hand():
    """A 64K-token prompt, then the same prompt with 8K more tokens. Qwen3-Coder-30B: the
    paper's 71.1 TFLOP for 8K tokens from scratch, 493.3 TFLOP after a 64K prefix."""
    m = QWEN3_CODER_30B
    assert m.prefill_flops(8192) == pytest.approx(71.1e12, rel=1e-3)
    assert m.prefill_flops(8192, 65536) == pytest.approx(493.3e12, rel=1e-3)
    base = list(range(4096))
    t = Trace.from_requests([base, list(range(10_000, 14_608)), base + list(range(20_000, 20_512))],
                            arrival_s=[0.0, 1.0, 2.0])
    hw = {"part": "h100_sxm", "peak_flops": 1e15, "mfu": 0.5, "host_link_bps": 64e9}
    speed = 1e15 * 0.5
    # HBM holds 4,608 blocks: the second request pushes the first one's 4,096 blocks to DRAM
    for overlap in (True, False):
        r = simulate(t, "lru", [4608], tiers=tier(10_000), hardware=hw, overlap=overlap,
                     cost_models=["qwen3_coder_30b"])[0]
        assert r.tier_hits["dram"] == 4096
        load = 4096 * m.kv_bytes_per_block(16) / 64e9
        third = m.prefill_flops(8192, 65536) / speed
        third = max(third, load) if overlap else third + load
        times = [m.prefill_flops(65536) / speed, m.prefill_flops(4608 * 16) / speed, third]
        assert r.ttft_mean_s == pytest.approx(np.mean(times), rel=1e-9)
        assert r.ttft_p50_s == pytest.approx(np.median(times), rel=1e-9)
        assert r.ttft_p99_s == pytest.approx(np.percentile(times, 99), rel=1e-9)
        no_cache = np.mean([m.prefill_flops(65536), m.prefill_flops(4608 * 16), m.prefill_flops(72 * 1024)]) / speed
        assert r.ttft_speedup == pytest.approx(no_cache / np.mean(times), rel=1e-9)
    plain = simulate(t, "lru", [4608])[0]
    assert plain.ttft_mean_s != plain.ttft_mean_s  # NaN without hardware


def test_hardware_parts_are_the_datasheets():
    assert set(PARTS) == {"h100_sxm", "h200", "b200", "gh200", "l40s"}
    assert PARTS["gh200"].host_link_bps > PARTS["h100_sxm"].host_link_bps  # NVLink-C2C against PCIe


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("bad,words", [
    ({"capacity": -1}, "capacity"), ({"capacity": 2.5}, "capacity"), ({"capacity": "10"}, "capacity"),
    ({"capacity": 10, "policy": "nosuch"}, "unknown policy"), ({"capacity": 10, "write": "sometimes"}, "write mode"),
    ({"capacity": 10, "admit": "after_hits=0"}, "admission"), ({"capacity": 10, "bandwidth_bps": 0}, "bandwidth"),
    ({"capacity": 10, "policy": "lfu", "inclusive": False}, "remove hook"), ({"capacity": 10, "inclusive": "yes"}, "inclusive"),
    ({"capacity": 10, "link": "nvme"}, "link"), ({"capacity": 10, "colour": 1}, "unknown field"),
])
def test_bad_tiers_name_the_field(bad, words):
    with pytest.raises(ValueError, match=words):
        simulate(singles("AB"), "lru", [1], tiers=[{"name": "dram", **bad}])


@pytest.mark.parametrize("hw,words", [({"part": "h100_sxm", "mfu": 0}, "mfu"), ({"part": "h100_sxm", "mfu": 1.5}, "mfu"),
                                      ({"part": "h100_sxm", "host_link_bps": 0}, "host_link_bps"),
                                      ({"part": "tpu"}, "unknown hardware part")])
def test_bad_hardware_names_the_field(hw, words):
    with pytest.raises(ValueError, match=words):
        simulate(singles("AB"), "lru", [1], hardware=hw)


def test_sampled_replay_scales_every_tier():
    from sim_core.traces.synth import generate

    t = generate("freeinference", scale=0.02, seed=1) if _has_generate() else None
    if t is None:
        pytest.skip("no generator entry point")
    exact = simulate(t, "lru", [4000], tiers=tier(16_000))[0]
    s = simulate(t, "lru", [4000], tiers=tier(16_000), sample_rate=0.1)[0]
    assert s.sample_rate < 1
    assert abs(s.served_ratio - exact.served_ratio) < 0.03
    assert s.tier_hits["dram"] == pytest.approx(exact.tier_hits["dram"], rel=0.15)


def _has_generate() -> bool:
    import sim_core.traces.synth as synth

    return hasattr(synth, "generate")


@settings(max_examples=80, deadline=None)
@given(seq=hs.lists(hs.integers(0, 15), min_size=1, max_size=80), hbm=hs.integers(1, 5),
       tiers=hs.lists(_tier, min_size=1, max_size=2), hbm_policy=hs.sampled_from(["lru", "s3fifo"]))
def test_no_hierarchy_serves_more_than_the_bound_in_block_mode(seq, hbm, tiers, hbm_policy):
    from sim_core import tier_bound

    named = _chain(tiers, "lru")
    t = Trace.from_requests([[b] for b in seq])
    r = simulate(t, hbm_policy, [hbm], mode="block", tiers=named)[0]
    bound = tier_bound(t, [hbm], named, mode="block")[0]
    assert r.hits + r.lower_tier_hits <= bound.hits
    assert bound.capacity_blocks == hbm


def test_tier_bound_is_belady_at_the_combined_capacity_and_not_in_policy_all():
    from sim_core import get_policy
    from sim_core.policies import REGISTRY

    t = Trace.from_requests([[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3], [5, 6, 7], [1, 2, 4]])
    pools = [{"name": "dram", "capacity": 3, "policy": "lru"}, {"name": "ssd", "capacity": 2, "policy": "fifo"}]
    bound = simulate(t, "tier_bound", [2, 4], tiers=pools)
    flat = simulate(t, "belady", [7, 9])
    assert [(b.capacity_blocks, b.hits, b.accesses) for b in bound] == [(2, flat[0].hits, flat[0].accesses),
                                                                          (4, flat[1].hits, flat[1].accesses)]
    assert bound[0].tier_hits == {} and bound[0].served_ratio == flat[0].hit_ratio
    assert get_policy("tier_bound").in_all is False and "tier_bound" in REGISTRY
