"""Intrusive doubly-linked lists over block ids (flat int32 arrays).

prev/nxt have n_unique + k entries: blocks, then one sentinel per list (a block sits in
at most one list). new_list/push_head/tail serve the single-list case (sentinel n).
head side = most recent / newest, tail side = eviction end.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit


def new_list(n_unique: int, n_lists: int = 1) -> tuple[np.ndarray, np.ndarray]:
    prev = np.full(n_unique + n_lists, -1, dtype=np.int32)
    nxt = np.full(n_unique + n_lists, -1, dtype=np.int32)
    for s in range(n_unique, n_unique + n_lists):
        prev[s] = s  # empty list: sentinel points to itself
        nxt[s] = s
    return prev, nxt


@njit
def push_front(prev, nxt, s, b):
    """Insert b at the head of the list with sentinel s."""
    h = nxt[s]
    nxt[b] = h
    prev[b] = s
    prev[h] = b
    nxt[s] = b


@njit
def push_head(prev, nxt, b):
    push_front(prev, nxt, prev.shape[0] - 1, b)


@njit
def unlink(prev, nxt, b):
    p = prev[b]
    q = nxt[b]
    nxt[p] = q
    prev[q] = p
    prev[b] = -1
    nxt[b] = -1


@njit
def tail(prev):
    """Last element, or -1 if the list is empty."""
    s = prev.shape[0] - 1
    t = prev[s]
    return -1 if t == s else t


@njit
def move_to_head(prev, nxt, b):
    unlink(prev, nxt, b)
    push_head(prev, nxt, b)
