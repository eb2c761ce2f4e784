"""Routers: which replica an arriving request goes to.

A router sees the request and each replica's load (its waiting and running counts). Each
router is a kind number for the compiled loop and a name here (`ROUTERS`). With one
replica every router sends every request to it.

round_robin   request i (in arrival order) to replica i mod R (Dynamo's replay default)
random        a seeded uniform choice
least_loaded  fewest waiting plus running requests, lowest index on ties (vLLM's
              data-parallel balancer counts these two)
"""
from __future__ import annotations

import numpy as np

from ..jit import hook_njit

ROUTERS = ("round_robin", "random", "least_loaded")
RT_ROUND_ROBIN, RT_RANDOM, RT_LEAST_LOADED = range(3)


def router_code(name: str) -> int:
    key = str(name).lower()
    if key not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; valid: {', '.join(ROUTERS)}")
    return ROUTERS.index(key)


def new_router_state(seed: int) -> np.ndarray:
    """int64[2]: [arrivals routed, the random router's LCG state]."""
    return np.array([0, (int(seed) * 0x9E3779B9 + 0x2545F491) % 2**62], np.int64)


@hook_njit
def route(kind, rs, queues, n_rep):
    i = rs[0]
    rs[0] = i + 1
    if n_rep == 1:
        return 0
    if kind == RT_ROUND_ROBIN:
        return i % n_rep
    if kind == RT_RANDOM:  # Knuth's MMIX LCG (wraps modulo 2^64), high bits
        x = rs[1] * 6364136223846793005 + 1442695040888963407
        rs[1] = x
        return ((x >> 33) & 0x7FFFFFFF) % n_rep
    best = 0
    load = queues.wn[0] + queues.nrun[0]
    for k in range(1, n_rep):
        lk = queues.wn[k] + queues.nrun[k]
        if lk < load:
            best = k
            load = lk
    return best
