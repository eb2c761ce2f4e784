"""Routers of a disaggregated fleet's decode pool: which decode replica takes a request
whose prefill has completed (sim_core.serving.handoff).

The decode replica is chosen when the prefill completes, in the order prefills complete,
as Dynamo 1.6.1's replay does (ai-dynamo/aisimulate crates/core/src/replay/disagg.rs:
the ReserveDestination action is issued after SourceHeld). A decode router sees each
decode replica's active blocks (the prompt blocks of the requests placed on it and not
finished: Handoff.load) and the blocks its index holds (the exact view). Each is declared
like the fleet's routers (routers/spec.py) and dispatched by its index in `REGISTRY`.

round_robin  request i, in the order prefills complete, to decode replica i mod D
             (Dynamo's replay with router_mode round_robin: one cyclic counter per pool)
load         fewest active blocks, ties at random: Dynamo's decode-pool KV router, which
             it derives with overlap_score_credit = 0, router_assume_kv_reuse = false and
             router_track_prefill_tokens = false (dynamo lib/mocker/src/replay/offline/
             extensions/kv_router/composition_disagg.rs, derive_decode_router_config)
cache_aware  fewest active blocks - overlap_weight x the prompt's leading blocks the
             replica holds, ties at random: the same cost crediting what need not be
             transferred (with kv_transfer tokens=missing, a shorter transfer)
"""
from __future__ import annotations

import math

from ..jit import hook_njit
from .routers.spec import Param, RouterSpec
from .routers.view import RS_ROUTED, rand_below

_SPECS = (
    RouterSpec("round_robin", "in the order prefills complete, decode replica i mod D",
               "ai-dynamo/aisimulate: crates/core/src/replay/core/round_robin.rs (one counter per pool)"),
    RouterSpec("load", "fewest active blocks (prompt blocks placed and not finished), ties at random",
               "ai-dynamo/dynamo: lib/mocker/src/replay/offline/extensions/kv_router/composition_disagg.rs"),
    RouterSpec("cache_aware", "fewest active blocks minus overlap_weight x the prompt blocks the replica holds",
               "this project: the decode-pool KV router with Dynamo's overlap credit kept",
               {"overlap_weight": Param(1.0, 0.0, 1e6, "active blocks credited per prompt block the replica holds")}),
)
REGISTRY: dict[str, RouterSpec] = {s.name: s for s in _SPECS}
DECODE_ROUTERS = tuple(REGISTRY)
DR_ROUND_ROBIN, DR_LOAD, DR_CACHE_AWARE = range(3)


def get_decode_router(name: str) -> RouterSpec:
    key = str(name).lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown decode_router {name!r}; valid: {', '.join(DECODE_ROUTERS)}")
    return REGISTRY[key]


def dynamo_decode_router(router: str) -> str:
    """The decode pool's router Dynamo's replay pairs with a prefill router: round robin
    with round robin, its load-only KV router otherwise."""
    return "round_robin" if router == "round_robin" else "load"


@hook_njit
def _held(cache, dreqs, q, r):
    """The prompt's leading full blocks decode replica q's index holds."""
    s = dreqs.offs[r]
    k = 0
    while k < dreqs.full[r] and cache.resident[q, dreqs.blocks[s + k]]:
        k += 1
    return k


@hook_njit
def pick_decode(kind, vd, load, cache, dreqs, r, first, n, bt):
    """The decode replica (first .. first + n - 1) that takes request r."""
    if n == 1:
        return first
    if kind == DR_ROUND_ROBIN:
        return first + vd.rs[RS_ROUTED] % n
    lo = math.inf
    for i in range(n):
        q = first + i
        c = float(load[q])
        if kind == DR_CACHE_AWARE:
            c -= vd.p[0] * _held(cache, dreqs, q, r)
        vd.sc[i] = c
        lo = min(lo, c)
    best = first
    ties = 0
    for i in range(n):
        if vd.sc[i] == lo:
            ties += 1
            if rand_below(vd, ties) == 0:  # reservoir: each tied replica equally likely
                best = first + i
    return best
