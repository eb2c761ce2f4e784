"""Closed-loop sessions: turn k+1 of a session is sent only after turn k finishes.

With `serve(..., sessions=True)` a session's first turn arrives at its trace time; each later
turn is released when the turn before it finishes, plus the gap between the two turns' trace
arrivals (scaled by the speed-up), as an agent loop or a user waits for an answer before the
next call. Its TTFT counts from that release. Requests without a session id (-1) arrive at
their trace times.

Released turns wait in a min-heap of (time, request) pairs (sim_core.structures.pairheap).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from ..structures.pairheap import heap_pop, heap_push


class Turns(NamedTuple):
    nxt: np.ndarray  # int64[N]: the session's next turn, -1 if none (or open loop)
    gap: np.ndarray  # float64[N]: seconds from the previous turn's finish to this turn's release
    hk: np.ndarray  # float64[N]: heap keys (release times)
    hv: np.ndarray  # int64[N]: heap values (requests)
    hn: np.ndarray  # int64[1]: heap size


def turns(session: np.ndarray, arrive: np.ndarray, closed: bool) -> tuple[Turns, np.ndarray]:
    """The links between turns, and the requests that arrive on their own (in arrival order)."""
    n = len(arrive)
    nxt = np.full(n, -1, np.int64)
    gap = np.zeros(n, np.float64)
    first = np.ones(n, bool)
    if closed:
        order = np.lexsort((np.arange(n), arrive, session))
        same = (session[order][1:] == session[order][:-1]) & (session[order][1:] >= 0)
        prev, cur = order[:-1][same], order[1:][same]
        nxt[prev] = cur
        gap[cur] = arrive[cur] - arrive[prev]
        first[cur] = False
    alone = np.flatnonzero(first)
    alone = alone[np.argsort(arrive[alone], kind="stable")].astype(np.int64)
    return Turns(nxt, gap, np.zeros(max(n, 1)), np.zeros(max(n, 1), np.int64), np.zeros(1, np.int64)), alone


@hook_njit
def push(tu, t, r):
    """Release request r at time t."""
    heap_push(tu.hk, tu.hv, tu.hn, t, r)


@hook_njit
def pop(tu):
    """Remove the earliest release and return its request."""
    return heap_pop(tu.hk, tu.hv, tu.hn)
