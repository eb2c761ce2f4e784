"""The units of replay work: how `simulate` batches capacities into replays (the sweep's
planner costs jobs with it). What a capacity is, and where the cache saturates:
sim_core.catalog.capacity."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..result import Mode
from ..traces.trace import Trace

# a one-pass curve (sim_core.structures.onepass) costs about this many single-capacity replays,
# whatever its number of capacities (`python -m benchmarks.speed --skip speed,jit,ray`
# measures the crossover: docs/performance.md)
ONE_PASS_COST = 2.0


def depth_totals(trace: Trace, first: int = 0) -> np.ndarray:
    """int64[max_depth]: number of accesses at each depth (policy independent), over
    requests from `first` on (the counted ones after a warm-up); always the full length."""
    cached = getattr(trace, "_depth_totals", None)
    if cached is None and trace.depth is not None:  # a sample: its accesses' full-request depths
        cached = np.bincount(trace.depth).astype(np.int64)
        trace._depth_totals = cached
    if cached is None:
        # depth d occurs once in every request longer than d: a reverse cumulative count
        # of request lengths (O(requests), no per-access array at full scale)
        n_len = np.bincount(trace.request_lengths, minlength=max(trace.max_request_blocks, 1) + 1)
        cached = np.cumsum(n_len[::-1])[::-1][1:].astype(np.int64)
        trace._depth_totals = cached
    if first == 0:
        return cached
    if trace.depth is not None:
        part = np.bincount(trace.depth[trace.req_offsets[first]:], minlength=len(cached)).astype(np.int64)
    else:
        lens = trace.request_lengths[first:]
        n_len = np.bincount(lens, minlength=len(cached) + 1)
        part = np.cumsum(n_len[::-1])[::-1][1:].astype(np.int64)
    return part[:len(cached)]


@dataclass(frozen=True)
class ReplayUnit:
    """Capacities answered by one piece of replay work. kind: "one_pass" (a stack
    policy's whole curve from one pass), "saturated" (every capacity that holds the
    whole trace: no policy evicts there, one replay serves them all) or "single"."""

    kind: str
    capacities: tuple[int, ...]

    @property
    def cost(self) -> float:  # in single-capacity replays of the trace
        return ONE_PASS_COST if self.kind == "one_pass" else 1.0


def replay_units(capacities: Sequence[int], *, saturation: int, max_request_blocks: int,
                 mode: str | Mode = Mode.REQUEST, one_pass: bool = False) -> list[ReplayUnit]:
    """How `simulate` batches capacities (the sweep's planner costs jobs with it).

    A one-pass curve covers every capacity from the largest request up in request mode
    (smaller ones evict the request's own blocks: replayed one by one). It is chosen only
    where it is cheaper than replaying those capacities directly, i.e. where they would
    take more than ONE_PASS_COST replays. Capacities at or above `saturation` (see
    `saturation_capacity`) share one replay."""
    caps = sorted(dict.fromkeys(int(c) for c in capacities))
    units = []
    if one_pass:
        lo = max_request_blocks if Mode(mode) is Mode.REQUEST else 1
        big = tuple(c for c in caps if c >= lo)
        if len({min(c, saturation) for c in big}) > ONE_PASS_COST:  # the direct replays they take
            units.append(ReplayUnit("one_pass", big))
            caps = [c for c in caps if c < lo]
    sat = tuple(c for c in caps if c >= saturation)
    units += [ReplayUnit("single", (c,)) for c in caps if c < saturation]
    if sat:
        units.append(ReplayUnit("saturated", sat))
    return units
