"""Engine presets: the counting conventions of a serving engine as simulate() switches.

A preset sets mode, hits, order, partial_blocks and warmup the way an engine (or a
peer tool) counts, so a result can be held against what that engine reports. It does
not model the engine's scheduler, batching, chunked prefill or preemption. Each value
and the source file it was read from: docs/engines.md.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Preset:
    mode: str
    hits: str
    order: str
    partial_blocks: str
    warmup: float | None = None  # a fraction of the requests, as simulate(warmup=) takes it
    block_tokens: int | None = None  # the engine's usual block size (documented; the trace decides)

    def switches(self) -> dict:
        """simulate()'s keyword arguments (block_tokens is the trace's: sim_core.traces.reblock)."""
        d = asdict(self)
        d.pop("block_tokens")
        return d


PRESETS: dict[str, Preset] = {
    # the paper's accounting (today's default): every resident block is reused
    "paper": Preset(mode="request", hits="block", order="tail_first", partial_blocks="cache"),
    # prefix lookup over full-block hashes, LRU free queue fed tail first
    "vllm": Preset(mode="request", hits="prefix", order="tail_first", partial_blocks="skip", block_tokens=16),
    # radix tree, LRU over leaves (a request's tail first); page_size 1 caches every token
    "sglang": Preset(mode="request", hits="prefix", order="tail_first", partial_blocks="cache", block_tokens=1),
    # chunk store: a request's hit chunks are pinned until retrieved and its keys refreshed
    # in reverse (its first chunk ends most recent); prefix lookup over full chunks, LRU
    "lmcache": Preset(mode="request", hits="prefix", order="tail_first", partial_blocks="skip", block_tokens=256),
    # the hit-rate view of the Mooncake trace: prefix hits per access; the warm-up of half the
    # requests is how the issue describes Mooncake's simulator (not found in its source)
    "mooncake": Preset(mode="block", hits="prefix", order="forward", partial_blocks="cache", warmup=0.5,
                       block_tokens=512),
    # Dynamo's mocker (vLLM-like block manager, 64-token blocks)
    "dynamo": Preset(mode="request", hits="prefix", order="tail_first", partial_blocks="skip", block_tokens=64),
}


def preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown counting preset {name!r}; valid: {', '.join(PRESETS)}")
    return PRESETS[name]


def twins(name: str) -> list[str]:
    """The other presets whose switches equal `name`'s: they replay exactly alike (the
    block size is the trace's), so a result of one is a result of the others, and a
    resumed sweep finds it already computed."""
    mine = preset(name).switches()
    return [n for n, p in PRESETS.items() if n != name and p.switches() == mine]
