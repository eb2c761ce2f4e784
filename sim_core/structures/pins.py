"""The pin convention shared by the replay engines and the policies' walkers.

A policy's `evict(st, j, r, pin)` must skip every block v with pin[v] == r. The cache
replay (sim_core.replay.engine) passes the request being served as r, and its blocks do not move
while it evicts, so a walk may keep a cursor keyed on r and resume after the blocks it
skipped. The serving replay (sim_core.serving) pins every block of every in-flight
request with one value, SHARED_PIN, and those pins change between calls: no cursor may
carry over from one call to the next there.
"""
from __future__ import annotations

from ..jit import inline_njit

SHARED_PIN = 2**31 - 2  # larger than any request index


@inline_njit
def keeps_cursor(r):
    """A walk's cursor for pin owner r may be resumed on r's next call."""
    return r >= 0 and r != SHARED_PIN
