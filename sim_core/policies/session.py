"""Session-level eviction (paper sec. 5.3): a victim session loses all its blocks at once.

Two registry entries, so a sweep selects them by name next to their block-level twins:

  lru_session             victim session = session of the least recently used block
                          (the same block `lru` would evict);
  random_compute_session  victim session = session of the block RandomCompute would evict
                          (`samples` uniform draws, lowest ComputeIntensity /
                          TimeSinceLastAccess; parameters as in random_compute.py).

(We chose separate names over a `granularity` parameter because the sweep and its result
tables key runs by policy name.)

Ownership: a block belongs to the session of the request that accessed it last; requests
whose trace.session is -1 are each their own session. A shared system-prompt block
therefore belongs to whichever session used it last, and is evicted with that session
even though other sessions still need it -- the cross-session sharing drawback the paper
notes.

Eviction: evict returns the chosen block, evict_more every other resident block of its
session. Blocks pinned by the current request (request mode) cannot be evicted and stay;
they can only be in the victim session if the victim is the current request's own
session (a block of it that the request does not reuse), in which case the session keeps
exactly the current request's blocks.

State: per-session intrusive doubly-linked lists over block ids (one sentinel per
session), plus the block-level structure of the twin policy (an LRU list, or the
RandomCompute pool). All hooks O(1); an eviction is O(blocks evicted).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from ..structures.dlist import move_to_head, new_list, pop_lru, push_head, unlink
from ..structures.pool import Pool, new_pool, pool_evict, pool_insert, pool_remove, touch
from .api import PolicySpec, register_hooks


def session_of_request(trace) -> tuple[np.ndarray, int]:
    """int32[R] dense session per request (-1 -> a session of its own) and the count."""
    sess = np.asarray(trace.session, dtype=np.int64)
    R = len(sess)
    out = np.empty(R, np.int64)
    known = sess >= 0
    uniq, inv = np.unique(sess[known], return_inverse=True)
    out[known] = inv
    n_known = len(uniq)
    out[~known] = n_known + np.arange(int((~known).sum()))
    return out.astype(np.int32), n_known + int((~known).sum())


def session_lists(trace):
    U = trace.n_unique
    sreq, S = session_of_request(trace)
    sprev = np.full(U + S, -1, np.int32)
    snext = np.full(U + S, -1, np.int32)
    sent = np.arange(U, U + S, dtype=np.int32)
    sprev[U:] = sent
    snext[U:] = sent
    return dict(sreq=sreq, bsess=np.full(U, -1, np.int32), sprev=sprev, snext=snext,
                pending=np.array([-1], np.int64))


@hook_njit
def _s_unlink(st, b):
    p = st.sprev[b]
    q = st.snext[b]
    st.snext[p] = q
    st.sprev[q] = p
    st.sprev[b] = -1
    st.snext[b] = -1


@hook_njit
def _s_push(st, b, s):
    h = st.bsess.shape[0] + s  # sentinel of session s
    q = st.snext[h]
    st.snext[b] = q
    st.sprev[b] = h
    st.sprev[q] = b
    st.snext[h] = b
    st.bsess[b] = s


@hook_njit
def _own(st, b, r):
    """Block b was accessed by request r: it now belongs to r's session."""
    s = st.sreq[r]
    if st.bsess[b] != s:
        if st.bsess[b] >= 0:
            _s_unlink(st, b)
        _s_push(st, b, s)


@hook_njit
def _forget(st, b):
    _s_unlink(st, b)
    st.bsess[b] = -1


@hook_njit
def _victim(st, v):
    """v, just taken out of the block-level structure, is evict's victim: it leaves its
    session, and the rest of the session follows in evict_more."""
    st.pending[0] = st.bsess[v]
    _forget(st, v)
    return v


@hook_njit
def _take_session(st, r, pin, out):
    """The rest of the session being evicted (st.pending): every block of it not pinned
    by request r leaves the session lists and is written to out; returns the count. The
    caller removes them from its block-level structure."""
    s = st.pending[0]
    st.pending[0] = -1
    if s < 0:
        return 0
    h = st.bsess.shape[0] + s
    k = 0
    b = st.snext[h]
    while b != h:
        q = st.snext[b]
        if pin[b] != r:
            _forget(st, b)
            out[k] = b
            k += 1
        b = q
    return k


# ------------------------------------------------------------------ lru_session
class LRUSessionState(NamedTuple):
    prev: np.ndarray
    nxt: np.ndarray
    sreq: np.ndarray     # int32[R] dense session of each request
    bsess: np.ndarray    # int32[U] session owning each resident block, -1 if none
    sprev: np.ndarray    # int32[U+S] per-session lists, sentinel of session s at U+s
    snext: np.ndarray
    pending: np.ndarray  # int64[1] session being evicted (evict -> evict_more)


def make_lru_session(ctx) -> LRUSessionState:
    prev, nxt = new_list(ctx.trace.n_unique)
    return LRUSessionState(prev, nxt, **session_lists(ctx.trace))


@hook_njit
def lru_on_hit(st, b, j, r, d):
    move_to_head(st.prev, st.nxt, b)
    _own(st, b, r)


@hook_njit
def lru_on_insert(st, b, j, r, d):
    push_head(st.prev, st.nxt, b)
    _own(st, b, r)


@hook_njit
def lru_evict(st, j, r, pin):
    v = pop_lru(st.prev, st.nxt, pin, r)  # the block lru.py evicts
    return -1 if v < 0 else _victim(st, v)


@hook_njit
def lru_evict_more(st, j, r, pin, out):
    k = _take_session(st, r, pin, out)
    for i in range(k):
        unlink(st.prev, st.nxt, out[i])
    return k


register_hooks(LRUSessionState, lru_on_hit, lru_on_insert, lru_evict, lru_evict_more)


# ------------------------------------------------------------------ random_compute_session
class RCSessionState(NamedTuple):
    pool: Pool           # RandomCompute's sampling pool (structures/pool.py)
    sreq: np.ndarray
    bsess: np.ndarray
    sprev: np.ndarray
    snext: np.ndarray
    pending: np.ndarray


def make_rc_session(ctx) -> RCSessionState:
    return RCSessionState(new_pool(ctx), **session_lists(ctx.trace))


@hook_njit
def rc_on_hit(st, b, j, r, d):
    touch(st.pool, b, j, r, d)
    _own(st, b, r)


@hook_njit
def rc_on_insert(st, b, j, r, d):
    pool_insert(st.pool, b, j, r, d)
    _own(st, b, r)


@hook_njit
def rc_evict(st, j, r, pin):
    v = pool_evict(st.pool, j, r, pin)  # the block random_compute evicts
    return -1 if v < 0 else _victim(st, v)


@hook_njit
def rc_evict_more(st, j, r, pin, out):
    k = _take_session(st, r, pin, out)
    for i in range(k):
        pool_remove(st.pool, out[i])
    return k


register_hooks(RCSessionState, rc_on_hit, rc_on_insert, rc_evict, rc_evict_more)

SPEC = [
    PolicySpec(
        "lru_session", make_lru_session,
        "Session-level LRU (paper 5.3) - the session of the least recently used block "
        "loses all its resident blocks at once.",
        family="session",
        weight=1.5),
    PolicySpec(
        "random_compute_session", make_rc_session,
        "Session-level RandomCompute (paper 5.3) - the session of RandomCompute's "
        "victim loses all its resident blocks at once.",
        defaults={"samples": 64, "clock": "access"}, cost_aware=True, family="session",
        # at the default floor its 24 GiB savings sit 0.2 point above the doubled rate's
        # (4 weeks, 128 against 256 sampled blocks; docs/performance.md), the largest
        # sampling error of the default study; docs/sampling.md ("The floor")
        sample_floor=128, weight=2.0),
]
