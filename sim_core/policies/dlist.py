"""Intrusive doubly-linked list over block ids (flat int32 arrays, sentinel = n).

head side = most recent / newest, tail side = eviction end.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit


def new_list(n_unique: int) -> tuple[np.ndarray, np.ndarray]:
    prev = np.full(n_unique + 1, -1, dtype=np.int32)
    nxt = np.full(n_unique + 1, -1, dtype=np.int32)
    prev[n_unique] = n_unique  # empty list: sentinel points to itself
    nxt[n_unique] = n_unique
    return prev, nxt


@njit
def push_head(prev, nxt, b):
    s = prev.shape[0] - 1
    h = nxt[s]
    nxt[b] = h
    prev[b] = s
    prev[h] = b
    nxt[s] = b


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
