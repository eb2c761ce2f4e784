"""Sessions in eviction classes: per-session LRU lists under one heap per class.

Used by the agent-hint policies (policies/agent.py). A resident block belongs to the
session of the request that touched it last; each session keeps its blocks in an
intrusive list (dlist layout, sentinel of session s at U + s, head = newest). Every
session holding blocks sits in the heap of its class (0 is evicted first, then 1);
inside a heap the top session is the one whose key is largest:

  -stamp of its tail block  (LRU across sessions: the oldest block of the class), or
  a fixed key per session   (policies/agent.py's agent_next: its next turn's index).

A third heap orders held sessions by deadline (ttl_pin): `expire` moves a session whose
deadline has passed to class 0. The heaps are structures/heap.py's regions over one
slot array H (class 0 at 0, class 1 at S, deadlines at 2S), positions P and keys K
(class heaps at [0, S), deadlines at [S, 2S), the key being -deadline).

The functions take the policy state `st` and read these fields of it:
  prev, nxt  int32[U+S]   per-session lists
  bsess      int32[U]     owning session of each resident block, -1 if none
  stamp      int64[U]     access index of each block's last access
  H, P, K, n              the heaps (n: int64[3], their sizes)
  cls        int8[S]      each session's class; inh bool[S]: in its class heap
  fixkey     float64[S]   a session's fixed key (used when st.sv[FIXED] == 1)
  stash      int32[S]     sessions set aside during one eviction
  sv         int64[3]     CUR: cursor of the request holding access j; FIXED: class 1
                          ordered by fixkey (1) or by tail (0); LAST: last request seen
"""
from __future__ import annotations

import numpy as np

from ..jit import hook_njit
from .dlist import push_front, unlink
from .heap import push_at, rekey_at, remove_at

CUR, FIXED, LAST = 0, 1, 2


def new_classes(n_unique: int, n_sessions: int, fixed: bool) -> dict:
    U, S = n_unique, max(n_sessions, 1)
    prev = np.full(U + S, -1, np.int32)
    nxt = np.full(U + S, -1, np.int32)
    prev[U:] = np.arange(U, U + S, dtype=np.int32)  # empty list: sentinel points to itself
    nxt[U:] = prev[U:]
    return dict(prev=prev, nxt=nxt, bsess=np.full(U, -1, np.int32), stamp=np.zeros(U, np.int64),
                H=np.zeros(3 * S, np.int32), P=np.full(2 * S, -1, np.int64), K=np.zeros(2 * S, np.float64),
                n=np.zeros(3, np.int64), cls=np.zeros(S, np.int8), inh=np.zeros(S, np.bool_),
                fixkey=np.zeros(S, np.float64), stash=np.zeros(S, np.int32),
                sv=np.array([0, 1 if fixed else 0, -1], np.int64))


@hook_njit
def _sentinel(st, s):
    return st.bsess.shape[0] + s


@hook_njit
def _key(st, s):
    if st.cls[s] == 1 and st.sv[FIXED] == 1:
        return st.fixkey[s]
    return -float(st.stamp[st.prev[_sentinel(st, s)]])


@hook_njit
def _add(st, s):
    c = st.cls[s]
    S = st.cls.shape[0]
    st.K[s] = _key(st, s)
    push_at(st.H, c * S, st.P, 0, st.K, 0, st.n[c], s)
    st.n[c] += 1
    st.inh[s] = True


@hook_njit
def _del(st, s):
    c = st.cls[s]
    remove_at(st.H, c * st.cls.shape[0], st.P, 0, st.K, 0, st.n[c], s)
    st.n[c] -= 1
    st.inh[s] = False


@hook_njit
def _rekey(st, s):
    if st.inh[s]:
        c = st.cls[s]
        rekey_at(st.H, c * st.cls.shape[0], st.P, 0, st.K, 0, st.n[c], s, _key(st, s))


@hook_njit
def set_class(st, s, c, key):
    """Session s is now in class c (with fixed key `key`, used when FIXED)."""
    st.fixkey[s] = key
    if st.cls[s] == c:
        _rekey(st, s)
        return
    was = st.inh[s]
    if was:
        _del(st, s)
    st.cls[s] = c
    if was:
        _add(st, s)


@hook_njit
def hold_until(st, s, deadline):
    """Session s is held (class 1) until `deadline`; a negative deadline ends a hold."""
    S = st.cls.shape[0]
    if st.P[S + s] >= 0:  # already in the deadline heap
        if deadline < 0:
            remove_at(st.H, 2 * S, st.P, S, st.K, S, st.n[2], s)
            st.n[2] -= 1
            st.P[S + s] = -1
        else:
            rekey_at(st.H, 2 * S, st.P, S, st.K, S, st.n[2], s, -deadline)
    elif deadline >= 0:
        st.K[S + s] = -deadline
        push_at(st.H, 2 * S, st.P, S, st.K, S, st.n[2], s)
        st.n[2] += 1


@hook_njit
def expire(st, now):
    """Every held session whose deadline is not after `now` goes to class 0."""
    S = st.cls.shape[0]
    while st.n[2] > 0 and -st.K[S + st.H[2 * S]] <= now:
        s = st.H[2 * S]
        remove_at(st.H, 2 * S, st.P, S, st.K, S, st.n[2], s)
        st.n[2] -= 1
        st.P[S + s] = -1
        set_class(st, s, 0, 0.0)


@hook_njit
def attach(st, b, s, j):
    """Block b (resident) was accessed at j by a request of session s: it moves to the
    head of s's list."""
    old = st.bsess[b]
    if old >= 0:
        was_tail = st.prev[_sentinel(st, old)] == b
        unlink(st.prev, st.nxt, b)
        if st.nxt[_sentinel(st, old)] == _sentinel(st, old):
            _del(st, old)
        elif was_tail:
            _rekey(st, old)
    st.stamp[b] = j
    push_front(st.prev, st.nxt, _sentinel(st, s), b)
    st.bsess[b] = s
    if not st.inh[s]:
        _add(st, s)
    elif st.prev[_sentinel(st, s)] == b:  # b is s's only block
        _rekey(st, s)


@hook_njit
def request_at(st, offsets, j):
    """The request holding access j (j never decreases between calls)."""
    c = st.sv[CUR]
    while offsets[c + 1] <= j:
        c += 1
    st.sv[CUR] = c
    return c


@hook_njit
def _pop_class(st, c, j, r, pin):
    """Remove and return the oldest block of the top session of class c that request r
    has not pinned (-1 if none). A pinned tail moves to its session's head stamped j (r
    touches it right after, as lru's pop_lru); a session whose tail is already stamped
    j has only pinned blocks left and waits in the stash until the victim is found."""
    S = st.cls.shape[0]
    ns = 0
    v = -1
    while st.n[c] > 0:
        s = st.H[c * S]
        h = _sentinel(st, s)
        t = st.prev[h]
        if pin[t] == r:
            if st.stamp[t] == j:
                _del(st, s)
                st.stash[ns] = s
                ns += 1
            else:
                unlink(st.prev, st.nxt, t)
                st.stamp[t] = j
                push_front(st.prev, st.nxt, h, t)
                _rekey(st, s)
            continue
        unlink(st.prev, st.nxt, t)
        st.bsess[t] = -1
        if st.nxt[h] == h:
            _del(st, s)
        else:
            _rekey(st, s)
        v = t
        break
    for i in range(ns):
        _add(st, st.stash[i])
    return v


@hook_njit
def pop_victim(st, j, r, pin):
    """The victim: class 0 first, then class 1."""
    v = _pop_class(st, 0, j, r, pin)
    if v < 0:
        v = _pop_class(st, 1, j, r, pin)
    return v
