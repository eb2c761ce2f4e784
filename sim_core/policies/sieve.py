"""SIEVE (Zhang et al., NSDI'24): a FIFO queue with one visited bit per block and a hand.

Algorithm:
  hit    -> set the block's visited bit (the block does not move);
  insert -> new block at the head (newest end) of the queue, visited = 0;
  evict  -> the hand starts where it stopped last time (the tail, i.e. the oldest block,
            on the first eviction or after it ran past the head) and moves towards the
            head: a visited block keeps its place and has its bit cleared, the first
            unvisited block is evicted and the hand stays at its newer neighbour.
Survivors are never moved, so new blocks that are not reused are demoted quickly while
reused ones are retained in place. No parameters.

Equality with libCacheSim (Sieve.c): identical hand movement and wrap-around (run past
the head -> restart at the tail); block mode equals libcachesim.Sieve exactly.

Request mode: blocks of the current request are pinned; the hand passes over a pinned
unvisited block without evicting it (a pinned visited block has its bit cleared as
usual). The engine guarantees an unpinned resident block exists, so the hand stops
within two sweeps.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.mlist import new_links, push_head, unlink
from .api import PolicySpec, register_hooks

L, VISITED, META = 0, 2, 3  # rows of lk: L, L + 1 links (prev = towards the head); bits; scalars
HAND = 0  # lk[META, HAND]: block the hand points at, -1 = start at the tail
N_META = 1


class SieveState(NamedTuple):
    lk: np.ndarray  # int32[4, U+1+N_META]: queue links (sentinel U), visited bits, the hand


def make_state(ctx) -> SieveState:
    lk = new_links(ctx.trace.n_unique, 1, 4, n_meta=N_META)
    lk[META, HAND] = -1
    return SieveState(lk)


@njit
def on_hit(st, b, j, r, d):
    st.lk[VISITED, b] = 1


@njit
def on_insert(st, b, j, r, d):
    push_head(st.lk, L, st.lk.shape[1] - 1 - N_META, b)
    st.lk[VISITED, b] = 0


@njit
def evict(st, j, r, pin):
    lk = st.lk
    s = lk.shape[1] - 1 - N_META
    o = lk[META, HAND]
    if o < 0:
        o = lk[L, s]
    if o == s:
        return -1  # empty
    while True:
        if lk[VISITED, o]:
            lk[VISITED, o] = 0
        elif pin[o] != r:
            break
        o = lk[L, o]
        if o == s:  # ran past the head: wrap to the tail
            o = lk[L, s]
    h = lk[L, o]
    lk[META, HAND] = -1 if h == s else h
    unlink(lk, L, o)
    return o


@njit
def remove(st, b):
    lk = st.lk
    if lk[META, HAND] == b:  # the hand moves on to b's newer neighbour, as after an eviction
        s = lk.shape[1] - 1 - N_META
        h = lk[L, b]
        lk[META, HAND] = -1 if h == s else h
    unlink(lk, L, b)


register_hooks(SieveState, on_hit, on_insert, evict, remove=remove)

SPEC = PolicySpec(
    "sieve", make_state,
    "SIEVE (NSDI'24) - FIFO queue with visited bits; a moving hand evicts the "
    "first unvisited block.",
    family="quick_demotion", removable=True,
    weight=1.0, libcachesim="Sieve")
