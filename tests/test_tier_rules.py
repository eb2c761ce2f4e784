"""The engines' tier rules (sim_core/tiers/request.py, sim_core/tiers/rules.py): touch,
the full-pool rule, each write filter and promotion on hand-computed request-mode traces,
LRU's inclusion property across HBM and an inclusive pool, and the presets."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from sim_core import Trace, simulate
from sim_core.catalog.models import QWEN3_CODER_30B
from sim_core.tiers.rules import HIERARCHIES

BLOCK = QWEN3_CODER_30B.kv_bytes_per_block(16)
POOL = {"name": "dram", "write": "on_compute", "inclusive": True, "policy": "lru"}


def reqs(*rs, arrival=None) -> Trace:
    return Trace.from_requests([list(r) for r in rs], arrival_s=arrival)


def run(trace, hbm, tiers, **kw):
    return simulate(trace, "lru", [hbm], tiers=tiers, **kw)[0]


def pool(cap, **kw):
    return [{**POOL, "capacity": cap, **kw}]


def test_touch_request_refreshes_hbm_hits_in_the_pool_by_hand():
    # HBM 2, pool 2 (inclusive, write on compute). [1] [2]: both in both. [1]: an HBM hit;
    # touch=request refreshes 1 in the pool, touch=loads does not. [3]: HBM drops 2; the
    # pool makes room for 3 by dropping 2 (request) or 1 (loads). [2]: a pool hit only
    # under loads, which kept the block HBM had already dropped.
    t = reqs([1], [2], [1], [3], [2])
    req = run(t, 2, pool(2, touch="request"))
    loads = run(t, 2, pool(2, touch="loads"))
    assert (req.hits, req.tier_hits["dram"]) == (1, 0)
    assert (loads.hits, loads.tier_hits["dram"]) == (1, 1)


def test_touch_request_refreshes_the_head_last_by_hand():
    # HBM 2, pool 3, prefix reuse. [1 2]: the pool holds both, 1 most recent (the head is
    # touched last). [3]: HBM drops 2, the pool takes 3. [4]: HBM drops 1, the pool drops
    # its least recent, 2. [1 2]: 1 comes from the pool, 2 is recomputed. Had the head
    # been touched first, the pool would have kept 2 and lost 1: no reuse at all.
    t = reqs([1, 2], [3], [4], [1, 2])
    r = run(t, 2, pool(3), hits="prefix")
    assert (r.hits, r.tier_hits["dram"]) == (0, 1)


def test_full_pool_rule_by_hand():
    # HBM 4, pool 3. [1 2]: both stored. [3 4 5 6]: 4 blocks cannot fit a 3-block pool
    # without evicting... nothing it may keep: the store is skipped (4 blocks), 1 and 2
    # stay. [1 2]: both loaded from the pool. [1 2 7 8]: 1, 2 are HBM hits and pinned in
    # the pool, so only 1 block could be freed for 7, 8: skipped again (2 blocks).
    t = reqs([1, 2], [3, 4, 5, 6], [1, 2], [1, 2, 7, 8])
    r = run(t, 4, pool(3))
    assert (r.hits, r.tier_hits["dram"]) == (2, 2)
    assert r.tier_skipped_writes == {"dram": 6}
    assert r.tier_written_bytes["dram"] == 2 * BLOCK


def test_lookups_against_insert_counts_by_hand():
    # HBM 4, pool 4. vLLM's store_threshold=2 (lookups=2) counts a lookup only for blocks
    # past the HBM prefix hit; HiCache's selective write counts every insert walking the
    # block (threshold 2 = after_hits=1). [1 2]: both missing (1 lookup each). [1 2]: HBM
    # hits, no lookup; HiCache stores both now. [1 2 3]: only 3 is looked up.
    t = reqs([1, 2], [1, 2], [1, 2, 3])
    vllm = run(t, 4, pool(4, admit="lookups=2"))
    hicache = run(t, 4, pool(4, admit="after_hits=1"))
    assert vllm.tier_written_bytes["dram"] == 0
    assert hicache.tier_written_bytes["dram"] == 2 * BLOCK


def test_lookups_threshold_by_hand():
    # HBM 2, pool 4, lookups=2. [1] [2] [3]: one lookup each, nothing stored (HBM ends
    # with 2, 3). [1] [2] [3]: each looked up a second time, so stored. [1]: a pool hit.
    t = reqs([1], [2], [3], [1], [2], [3], [1])
    r = run(t, 2, pool(4, admit="lookups=2"))
    assert r.tier_hits["dram"] == 1 and r.tier_written_bytes["dram"] == 3 * BLOCK
    assert run(t, 2, pool(4)).tier_hits["dram"] == 4  # admit all: [1] [2] [3] [1] all come back


def test_frequency_filter_decays_with_trace_time_by_hand():
    # Dynamo KVBM's filter: a count starts at 1, doubles per attempt, loses 1 per 600 s,
    # passes at 2. HBM 1, pool 4. t=0 [1]: 1. t=10 [2]: 1. t=100 [1]: 2, stored.
    # t=700 [2]: one tick later 1 - 1 = 0, so it starts again at 1. t=710 [1]: a pool hit.
    # t=720 [2]: 2, stored. Without decay (a long interval) [2] is stored at t=700 and
    # t=720 is a pool hit too.
    t = reqs([1], [2], [1], [2], [1], [2], arrival=[0, 10, 100, 700, 710, 720])
    decayed = run(t, 1, pool(4, admit="frequency=2/600s"))
    kept = run(t, 1, pool(4, admit="frequency=2/100000s"))
    assert decayed.tier_hits["dram"] == 1 and decayed.tier_written_bytes["dram"] == 2 * BLOCK
    assert kept.tier_hits["dram"] == 2


@pytest.mark.parametrize("write,l2_hits,l2_writes", [("on_hit", 0, 1), ("on_evict", 1, 2), ("on_compute", 1, 3)])
def test_aibrix_ingestion_modes_by_hand(write, l2_hits, l2_writes):
    # HBM 1, L1 2 (on compute), L2 4. [1] [2] [3]: L1 drops 1 for 3. [2]: an L1 hit (HOT:
    # L2 takes 2). [1]: in L2 only if L2 took L1's victim (EVICTED) or every block (ALL);
    # L1 takes it back and drops 3 (EVICTED: L2's second write).
    t = reqs([1], [2], [3], [2], [1])
    tiers = [{**POOL, "name": "l1", "capacity": 2, "touch": "loads"},
             {**POOL, "name": "l2", "capacity": 4, "write": write, "touch": "loads"}]
    r = run(t, 1, tiers)
    assert r.tier_hits == {"l1": 1, "l2": l2_hits}
    assert r.tier_written_bytes["l2"] == l2_writes * BLOCK


@pytest.mark.parametrize("promote,hits", [(0, (0, 5)), (1, (3, 2)), (2, (1, 4))])
def test_promotion_by_hand(promote, hits):
    # HBM 1; CPU 2 takes nothing but promotions (its admission refuses every write); disk 8
    # takes every computed block and copies a block up on its N-th hit there.
    # [1] [2] [1] [2] [1] [2] [1]: promote=1: [1] [2] come from disk and go up, so the
    # next three come from CPU; promote=2: they go up on their second disk hit.
    t = reqs([1], [2], [1], [2], [1], [2], [1])
    tiers = [{**POOL, "name": "cpu", "capacity": 2, "admit": "after_hits=100"},
             {**POOL, "name": "disk", "capacity": 8, "promote": promote}]
    r = run(t, 1, tiers)
    assert (r.tier_hits["cpu"], r.tier_hits["disk"]) == hits


@settings(max_examples=80, deadline=None)
@given(reqs_=hs.lists(hs.lists(hs.integers(0, 40), min_size=1, max_size=5, unique=True), min_size=1, max_size=40),
       hbm=hs.integers(5, 14), extra=hs.integers(-9, 9), hits=hs.sampled_from(["block", "prefix"]))
def test_inclusive_pool_with_request_touch_is_one_lru_of_the_larger_size(reqs_, hbm, extra, hits):
    """LRU's inclusion property: HBM and an inclusive write-on-compute LRU pool that
    touches whole requests order blocks alike, so the smaller holds a subset of the larger
    and together they serve what one LRU of the larger size hits (no request outgrows
    either tier, requests walked tail first)."""
    p = max(5, hbm + extra)
    t = Trace.from_requests(reqs_)
    h = simulate(t, "lru", [hbm], hits=hits, tiers=pool(p, touch="request"))[0]
    flat = simulate(t, "lru", [max(hbm, p)], hits=hits)[0]
    assert h.hits + h.tier_hits["dram"] == flat.hits
    assert h.tier_skipped_writes == {"dram": 0}


def test_the_counting_preset_fills_the_rules_it_leaves_out():
    t = reqs([1, 2], [3], [1, 2], [4, 5], [2, 1], [3])
    vllm = {"write": "on_compute", "inclusive": True, "touch": "request", "policy": "lru", "admit": "all"}
    switches = {"mode": "request", "hits": "prefix", "order": "tail_first", "partial_blocks": "skip"}
    got = run(t, 2, [{"name": "dram", "capacity": 2}], counting="vllm")
    want = run(t, 2, [{"name": "dram", "capacity": 2, **vllm}], **switches)
    assert got.to_dict() == want.to_dict()
    # a rule given wins over the preset's; a named hierarchy fills the rest
    mine = run(t, 2, [{"name": "dram", "capacity": 2, "write": "on_evict", "inclusive": False, "touch": "loads"}],
               counting="vllm")
    named = run(t, 2, [{"name": "dram", "capacity": 2}], counting="vllm", hierarchy="victim")
    assert mine.to_dict() == named.to_dict() != got.to_dict()
    # without a counting preset, a tier runs vLLM's CPU offload too
    assert run(t, 2, [{"name": "dram", "capacity": 2}], **switches).to_dict() == got.to_dict()


def test_every_named_hierarchy_runs():
    t = Trace.from_requests([[i % 7, 10 + i % 5, 20 + i] for i in range(60)])
    for name, rules in HIERARCHIES.items():
        tiers = [{"name": f"t{i}", "capacity": 6} for i in range(len(rules))]
        r = simulate(t, "lru", [3], hierarchy=name, tiers=tiers)[0]
        assert r.hits + r.lower_tier_hits + r.recomputed_blocks == r.accesses, name


@pytest.mark.parametrize("kw,words", [
    (dict(hierarchy="nosuch"), "hierarchy: unknown engine hierarchy 'nosuch'"),
    (dict(counting="nosuch"), "counting: unknown counting preset 'nosuch'"),
    (dict(tiers=[{"name": "dram", "capacity": 4, "admit": "lookups=0"}]), "tier 'dram'.*threshold must be >= 1"),
    (dict(tiers=[{"name": "dram", "capacity": 4, "admit": "frequency=0"}]), "tier 'dram'.*threshold must be >= 1"),
    (dict(tiers=[{"name": "dram", "capacity": 4, "admit": "after_hits=-1"}]), "tier 'dram'.*threshold must be >= 1"),
    (dict(tiers=[{"name": "dram", "capacity": 4, "touch": "sometimes"}]), "tier 'dram': unknown touch"),
    (dict(tiers=[{"name": "dram", "capacity": 4, "promote": 1}]), "tier 'dram': promote"),
    (dict(tiers=[{"name": "dram", "capacity": 4, "write": "on_hit"}]), "tier 'dram': write=on_hit"),
    (dict(tiers=[{"name": "a", "capacity": 4}, {"name": "b", "capacity": 4, "promote": -1}]), "tier 'b': promote"),
    (dict(hbm_admit="lookups=2"), "hbm_admit"),
])
def test_bad_rules_name_the_field(kw, words):
    with pytest.raises(ValueError, match=words):
        simulate(reqs([1], [2]), "lru", [1], **kw)


def test_the_serving_replay_runs_every_rule():
    """serve runs simulate's rules (tests/test_serving_tiers.py compares the two)."""
    from sim_core import serve

    t = Trace.from_requests([[1], [2]], arrival_s=[0.0, 1.0])
    ok = {"name": "dram", "capacity": 4, "bandwidth_bps": 1e9}
    for rule in ({"touch": "request"}, {"touch": "loads"}, {"admit": "lookups=2"}, {"admit": "frequency=2"}):
        assert serve(t, "lru", 100, tiers=[{**ok, **rule}]).tier_capacity == {"dram": 4}
