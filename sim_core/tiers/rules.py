"""The engines' hierarchies: the rules each sets for the tiers under HBM (write, inclusive,
admission, touch, promotion, eviction policy), as presets a tier spec's own keys override.

`HIERARCHIES[name]` lists the rules of each lower tier, top down (a tier beyond the list
takes the last one's). `vllm_cpu` is TierSpec's defaults (sim_core/tiers/spec.py). The
source each rule was read from, and what is not confirmed: docs/tiers.md.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..catalog.counting import PRESETS
from .spec import RULES, TierSpec

_VICTIM = {"write": "on_evict", "inclusive": False, "touch": "loads"}
HIERARCHIES: dict[str, list[dict]] = {
    # vLLM's OffloadingConnector with its CPU backend (kv_offloading_size); eviction_policy lru
    "vllm_cpu": [{}],
    "vllm_cpu_arc": [{"policy": "arc"}],
    # SGLang HiCache: write_through backs a node up on insert; host nodes are refreshed on the matched path
    "hicache_write_through": [{}],
    "hicache_write_back": [{"write": "on_evict"}],
    # write_through_selective: backed up once its insert-time hit count reaches 2 (the current
    # insert included), i.e. requested once before
    "hicache_selective": [{"admit": "after_hits=1"}],
    # LMCache: every chunk stored to CPU and local disk; a disk hit is copied back into CPU
    "lmcache_cpu_disk": [{}, {"promote": 1}],
    # Dynamo KVBM: G1 -> G2 (host) on compute; G2 -> G3 (disk) through its frequency filter
    "kvbm": [{"touch": "loads"}, {"touch": "loads", "admit": "frequency=2/600s"}],
    # Mooncake Store: DRAM pool written on put, SSD written eagerly (enable_offload), an
    # SSD-only hit promoted back to DRAM on its 2nd hit (promotion_on_hit, off by default)
    "mooncake_store": [{"touch": "loads"}, {"touch": "loads", "promote": 2}],
    # AIBrix KV cache: L1 CPU (S3-FIFO) under vLLM, L2 takes L1's hot blocks (ingestion HOT)
    "aibrix": [{"policy": "s3fifo", "touch": "loads"}, {"write": "on_hit", "touch": "loads"}],
    # the textbook exclusive write-back victim cache (no engine runs it; the LRU stack check does)
    "victim": [_VICTIM],
}
# the hierarchy a counting preset (sim.counting) brings; the paper's accounting has none of
# its own and takes the default
COUNTING_HIERARCHY = {"paper": "vllm_cpu", "vllm": "vllm_cpu", "dynamo": "vllm_cpu", "sglang": "hicache_write_through",
                    "lmcache": "lmcache_cpu_disk", "mooncake": "mooncake_store"}
DEFAULT = "vllm_cpu"
assert set(COUNTING_HIERARCHY) == set(PRESETS)
# the hierarchy a serving engine preset (sim_core.serving.engines) brings. Dynamo's native
# host offload models vLLM's OffloadingConnector (aisimulate-core 0.13.0,
# engine/scheduler/vllm/host_offload.rs: a per-request store cursor over prompt blocks, the
# missing ones written all or nothing with the cohort protected, every prompt block touched in
# reverse after a lookup and after a store; engine/host_offload/tier.rs: LRU over the host
# pool), i.e. vLLM's CPU offload; SGLang brings HiCache's write-through.
ENGINE_HIERARCHY = {"dynamo": "vllm_cpu", "vllm": "vllm_cpu", "sglang": "hicache_write_through"}


def hierarchy_rules(name: str, where: str = "hierarchy") -> list[dict]:
    if name not in HIERARCHIES:
        raise ValueError(f"{where}: unknown engine hierarchy {name!r}; valid: {', '.join(HIERARCHIES)}")
    return HIERARCHIES[name]


def counting_hierarchy(counting: str | None) -> str:
    if counting is None:
        return DEFAULT
    if counting not in COUNTING_HIERARCHY:
        raise ValueError(f"counting: unknown counting preset {counting!r}; valid: {', '.join(COUNTING_HIERARCHY)}")
    return COUNTING_HIERARCHY[counting]


def rules_name(hierarchy: str | None = None, counting: str | None = None) -> str:
    """Whose rules fill a tier's unset ones: the named hierarchy, else the counting preset's,
    else vLLM's CPU offload (checked)."""
    name = hierarchy if hierarchy is not None else counting_hierarchy(counting)
    hierarchy_rules(name)
    return name


def rules_at(i: int, name: str) -> dict:
    """Every rule of lower tier i (0: under HBM) in hierarchy `name` (TierSpec's defaults,
    vLLM's, where the hierarchy says nothing)."""
    rules = hierarchy_rules(name)
    return {k: rules[min(i, len(rules) - 1)].get(k, getattr(TierSpec, k)) for k in RULES}


def with_rules(tiers, hierarchy: str | None = None, counting: str | None = None) -> list[dict]:
    """The tier dicts with every rule they leave out (or set to None) filled from the
    named hierarchy, else the counting preset's, else vLLM's CPU offload; a rule given wins."""
    name = rules_name(hierarchy, counting)
    out = []
    for i, t in enumerate(tiers or []):
        if not isinstance(t, Mapping):  # a TierSpec: every rule already resolved
            out.append(t)
            continue
        out.append({**rules_at(i, name), **{k: v for k, v in dict(t).items() if v is not None}})
    return out
