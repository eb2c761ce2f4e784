"""Routers: which replica an arriving request goes to. One module per router, each with
its SPEC (name, typed parameters, the source it models) and a compiled `pick`; `ROUTERS`
lists them by name. What a router sees and the counters all of them keep: view.py.

With one replica every router sends every request to it.
"""
from __future__ import annotations

import math

from ...jit import hook_njit
from ...tiers.hierarchy import tier_on
from ..tiers import sight
from . import (cache_aware, kv_router, least_loaded, power_of_two, prefix_hash, random, round_robin, session,
               weighted)
from .spec import Param, RouterSpec
from .view import View, measure, new_view, on_finish, on_first_token, on_route

# the order is each router's kind number in the compiled dispatch below
_MODULES = (round_robin, random, least_loaded, power_of_two, session, prefix_hash, kv_router, cache_aware, weighted)
REGISTRY: dict[str, RouterSpec] = {m.SPEC.name: m.SPEC for m in _MODULES}
ROUTERS = tuple(REGISTRY)


def get_router(name: str) -> RouterSpec:
    key = str(name).lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown router {name!r}; valid: {', '.join(ROUTERS)}")
    return REGISTRY[key]


def lag(got) -> float:
    """Seconds KV events take to reach the router (resolved parameters): with a lag the
    replicas must time their index."""
    return float(got.get("event_lag", 0.0))


def router_view(spec: RouterSpec, got, seed: int, n_rep: int, n_unique: int, n_req: int) -> tuple[int, View]:
    """(the router's kind number, its view before the first arrival) for `serve`, from its
    resolved parameters `got` (RouterSpec.resolve)."""
    approx = spec.approximate and got.get("prefix_view", "approximate") == "approximate"
    v = new_view(spec.pack(got), seed, n_rep, n_unique, n_req, spec.tracks_blocks, approx,
                 float(got.get("ttl", math.inf)), lag(got))
    return ROUTERS.index(spec.name), v


@hook_njit
def route(kind, v, queues, cache, views, reqs, r, t, n_rep, bt):
    """The replica request r goes to at time t; the router's counters follow."""
    measure(v, cache, reqs, r, t, n_rep)
    if tier_on(views[0].t1) and n_rep > 1:  # the replicas' lower tiers and the shared pool, past HBM
        sight(views, v, reqs, r, n_rep)
    if n_rep == 1:
        q = 0
    elif kind == 0:
        q = round_robin.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 1:
        q = random.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 2:
        q = least_loaded.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 3:
        q = power_of_two.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 4:
        q = session.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 5:
        q = prefix_hash.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 6:
        q = kv_router.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    elif kind == 7:
        q = cache_aware.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    else:
        q = weighted.pick(v, queues, cache, reqs, r, t, n_rep, bt)
    on_route(v, reqs, r, q, t, n_rep, bt)
    return q


__all__ = ["REGISTRY", "ROUTERS", "Param", "RouterSpec", "View", "get_router", "lag", "on_finish", "on_first_token",
           "route", "router_view"]
