"""Closed-loop sessions: turn k+1 of a session is sent only after turn k finishes.

With `serve(..., sessions=True)` a session's first turn arrives at its trace time; each later
turn is released when the turn before it finishes, plus the gap between the two turns' trace
arrivals (scaled by the speed-up), as an agent loop or a user waits for an answer before the
next call. Its TTFT counts from that release. Requests without a session id (-1) arrive at
their trace times.

Released turns wait in a binary min-heap of (time, request) kept in flat arrays.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit


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
    i = tu.hn[0]
    tu.hn[0] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if tu.hk[p] <= t:
            break
        tu.hk[i] = tu.hk[p]
        tu.hv[i] = tu.hv[p]
        i = p
    tu.hk[i] = t
    tu.hv[i] = r


@hook_njit
def pop(tu):
    """Remove the earliest release and return its request."""
    r = tu.hv[0]
    n = tu.hn[0] - 1
    tu.hn[0] = n
    t = tu.hk[n]
    v = tu.hv[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and tu.hk[c + 1] < tu.hk[c]:
            c += 1
        if tu.hk[c] >= t:
            break
        tu.hk[i] = tu.hk[c]
        tu.hv[i] = tu.hv[c]
        i = c
    tu.hk[i] = t
    tu.hv[i] = v
    return r
