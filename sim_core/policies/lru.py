"""LRU: evict the least recently used block."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.onepass import lru_curve
from ..structures.dlist import move_to_head, new_list, pop_lru, push_head, remove_hook
from .api import PolicySpec, register_hooks


class LRUState(NamedTuple):
    prev: np.ndarray
    nxt: np.ndarray


def make_state(ctx) -> LRUState:
    return LRUState(*new_list(ctx.trace.n_unique))


@njit
def on_hit(st, b, j, r, d):
    move_to_head(st.prev, st.nxt, b)


@njit
def on_insert(st, b, j, r, d):
    push_head(st.prev, st.nxt, b)


@njit
def evict(st, j, r, pin):
    return pop_lru(st.prev, st.nxt, pin, r)


register_hooks(LRUState, on_hit, on_insert, evict, remove=remove_hook)

SPEC = PolicySpec(
    "lru", make_state,
    "Least recently used block is evicted first (the baseline of vLLM/SGLang).",
    family="recency", curve=lru_curve, removable=True,
    weight=1.0, libcachesim="LRU")
