"""Capacities as the advice writes them: with their units and what they are. The cache
replay's are one cache of that size (in the HBM or the memory-pool regime, sec. 3.1); the
serving step's are the KV cache of each replica (analysis.serving.per_replica)."""
from __future__ import annotations

from sim_core.catalog.capacity import human_gib


def one_cache(row: dict) -> str:
    """'4,000 blocks (188 GiB, one cache: memory-pool regime)': a capacity of the cache replay, with
    its units and what it is (the serving step's capacities are per replica: analysis.serving)."""
    blocks = f"{row['capacity_blocks']:,} block{'s' * (row['capacity_blocks'] != 1)}"
    label = str(row["capacity"])
    head, other = (blocks, human_gib(row["capacity_gib"], digits=3)) if label.isdigit() else (label, blocks)
    return f"{head} ({other}, one cache: {'HBM' if row['regime'] == 'HBM' else 'memory-pool'} regime)"
