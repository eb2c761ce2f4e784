"""Belady (MIN): evict the resident block whose next use is furthest in the future.

Offline oracle for hit ratio. `horizon` (accesses, 0 = unlimited) limits the lookahead:
a block not reused within the horizon counts as never reused.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..oracles.future import NEVER, next_use
from ..jit import njit
from ..structures.heap import new_heap, pop_max_unpinned, push, remove as heap_remove, update
from ..result import Mode
from .api import PolicySpec, register_hooks


class BeladyState(NamedTuple):
    heap: np.ndarray
    pos: np.ndarray
    key: np.ndarray
    size: np.ndarray
    nxt: np.ndarray  # int64[N] next use per access
    stash: np.ndarray
    horizon: np.ndarray  # int64[1]


def make_state(ctx) -> BeladyState:
    t = ctx.trace
    heap, pos, key, size = new_heap(t.n_unique, ctx.capacity)
    horizon = int(ctx.params.get("horizon", 0) or 0)
    if horizon < 0:
        raise ValueError("belady horizon must be >= 0 (0 = unlimited)")
    nxt = next_use(t, ctx.capacity if ctx.mode == Mode.REQUEST else None)
    return BeladyState(heap, pos, key, size, nxt, np.empty(len(heap), np.int32),
                       np.array([horizon], np.int64))


@njit
def _key(st, j):
    nu = st.nxt[j]
    h = st.horizon[0]
    if nu == NEVER or (h > 0 and nu - j > h):
        return np.inf
    return float(nu)


@njit
def on_hit(st, b, j, r, d):
    update(st.heap, st.pos, st.key, st.size, b, _key(st, j))


@njit
def on_insert(st, b, j, r, d):
    push(st.heap, st.pos, st.key, st.size, b, _key(st, j))


@njit
def evict(st, j, r, pin):
    return pop_max_unpinned(st.heap, st.pos, st.key, st.size, pin, r, st.stash)


@njit
def remove(st, b):
    heap_remove(st.heap, st.pos, st.key, st.size, b)


register_hooks(BeladyState, on_hit, on_insert, evict, remove=remove)

BELADY = PolicySpec(
    "belady", make_state,
    "Offline optimum for hit ratio (MIN) - evicts the block reused furthest in "
    "the future.",
    defaults={"horizon": 0}, offline=True, family="oracle", removable=True,
    weight=7.0, libcachesim="Belady")

# The hierarchy's offline bound: Belady over HBM plus every lower tier (a tiered sweep
# adds it per pool size; flat, it is Belady itself, so policy=all leaves it out).
TIER_BOUND = PolicySpec(
    "tier_bound", make_state,
    "A bound, not a policy: Belady over the combined capacity of HBM and every lower tier; no "
    "hierarchy of those capacities serves more (block mode, HBM admitting all).",
    defaults={"horizon": 0}, offline=True, family="bound", in_all=False, weight=7.0, bound_of="belady")

SPEC = [BELADY, TIER_BOUND]
