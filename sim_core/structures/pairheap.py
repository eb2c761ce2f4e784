"""A binary min-heap of (key, value) pairs in flat arrays: keys[:n], vals[:n], n = size[0].

Ties between equal keys come out in no particular order. A max-heap is the same heap over
negated keys. Used for the serving loop's released session turns (sim_core.serving.sessions)
and the fleet ceiling's Belady pass (sim_core.serving.ceiling).
"""
from __future__ import annotations

from ..jit import hook_njit


@hook_njit
def heap_push(keys, vals, size, k, v):
    """Add (k, v)."""
    i = size[0]
    size[0] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if keys[p] <= k:
            break
        keys[i] = keys[p]
        vals[i] = vals[p]
        i = p
    keys[i] = k
    vals[i] = v


@hook_njit
def heap_pop(keys, vals, size):
    """Remove the pair with the smallest key; its value."""
    top = vals[0]
    n = size[0] - 1
    size[0] = n
    k = keys[n]
    v = vals[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and keys[c + 1] < keys[c]:
            c += 1
        if keys[c] >= k:
            break
        keys[i] = keys[c]
        vals[i] = vals[c]
        i = c
    keys[i] = k
    vals[i] = v
    return top
