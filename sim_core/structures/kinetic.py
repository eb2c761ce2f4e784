"""Kinetic tournament (kinetic segment tree): an exact argmax of linear scores over time.

Each leaf (a "slot") holds one item with a positive weight c, a target time n and an
id. Its score at integer time t is linear in t:

    inverse=True    score(t) = (n - t) / c      (slope -1/c)
    inverse=False   score(t) = (n - t) * c      (slope -c)

Internal node k holds the child winner with the highest score at the tree's clock
(ties: smaller id wins) and its "melt" time: a time no later than the first moment at
which any certificate in its subtree fails (a loser's line overtakes its winner).
`advance` moves the clock forward and only revisits subtrees whose melt time has
passed; leaf updates recompute one root path at the current clock, stopping early once
nothing changes. Scores at the clock are queried with `top`.

Deferred updates (`put_leaf` / `drop_leaf`, then `flush` before `top` or `advance`) mark
leaves dirty and repair their ancestors level by level in one go: a request's accesses
touch neighbouring leaves (consecutive depths), whose root paths share all but their
lowest nodes, so the repair visits about two nodes per leaf instead of log2(P).
`flush(static=True)` repairs winners only, for repeated queries at one clock.

Exactness: every comparison and every melt time comes from `structures/crossing.py`, which
orders scores as exact rationals, independent of rounding.

Layout (flat arrays, so hot calls pass two arrays): `kt` int64 and `kc` float64[2P].
Every node k (1..2P-1; leaf s is node P + s) is a record of four words that carries
its winner's item, so that a node is recomputed from its two children's records, which
sit side by side (one or two cache lines), without looking up the leaves:
    kt[0] P (leaves, power of two)   kt[1] clock   kt[2] inverse flag   kt[3] tmax
    kt[4] number of dirty leaves
    kt[_H + 4k + 0]      winner slot of node k, -1 = none
    kt[_H + 4k + 1]      its n        kt[_H + 4k + 2]   its id
    kt[_H + 4k + 3]      melt time of node k (NO_EVENT = never before tmax)
    kc[k]                its c
    kt[_H + 8P ...]      scratch stack for `advance` (_STACK words), then, for `flush`,
                         the dirty leaves (P), two node lists (P each), a mark per node (2P)
tmax is the last time anyone will query; crossings after it are ignored.
"""
from __future__ import annotations

import numpy as np

from ..jit import inline_njit, njit
from .crossing import NO_EVENT, beats, match

_H = 8  # header words in kt
_STACK = 4 * 64 + 8
def new_tree(n_slots: int, inverse: bool, tmax: int, weights=None):
    """(kt, kc) of an empty tree with room for `n_slots` items; `weights`, if given,
    the c of each slot (what `weight` returns before the slot is first filled)."""
    P = 1
    while P < max(1, n_slots):
        P *= 2
    kt = np.zeros(_H + 8 * P + _STACK + 5 * P, np.int64)
    kt[0] = P
    kt[2] = 1 if inverse else 0
    kt[3] = max(0, int(tmax))
    rec = kt[_H:_H + 8 * P].reshape(2 * P, 4)
    rec[:, 0] = -1
    rec[:, 3] = NO_EVENT
    kc = np.ones(2 * P, np.float64)
    if weights is not None:
        kc[P:P + len(weights)] = weights
    return kt, kc


def tree_words(P: int) -> int:
    """Words of kt that hold the tree (header and records, not the scratch)."""
    return _H + 8 * P


@inline_njit
def _set_node(kt, kc, k, src, cw, m):
    """Node k takes the winner whose record starts at kt[src] (weight cw) and melt time
    m; returns (winner slot, m)."""
    r = _H + 4 * k
    w = kt[src]
    kt[r] = w
    kt[r + 1] = kt[src + 1]
    kt[r + 2] = kt[src + 2]
    kt[r + 3] = m
    kc[k] = cw
    return w, m


@inline_njit
def _node(kt, kc, k, t, tmax, inv):
    """Recompute node k (winner and certificate) from its children's records at clock
    t; returns the winner slot and the melt time. Inlined at numba IR level
    (inline="always"), so no array crosses a call per tree level."""
    ra = _H + 8 * k
    rb = ra + 4
    a = kt[ra]
    b = kt[rb]
    m = min(kt[ra + 3], kt[rb + 3])
    src = ra
    cw = kc[2 * k]
    if a < 0 or b < 0:
        if a < 0:
            src = rb
            cw = kc[2 * k + 1]
    else:
        ca = kc[2 * k]
        cb = kc[2 * k + 1]
        side, own = match(ca, kt[ra + 1], kt[ra + 2], cb, kt[rb + 1], kt[rb + 2], t, tmax, inv)
        if side == 1:
            src = rb
            cw = cb
        if own < m:
            m = own
    return _set_node(kt, kc, k, src, cw, m)


@njit
def _fix_path(kt, kc, s):
    """Recompute the ancestors of leaf s at the clock; stop once a node is unchanged
    and not won by s."""
    P = kt[0]
    T = kt[1]
    inv = kt[2] != 0
    tmax = kt[3]
    k = (P + s) >> 1
    while k >= 1:
        r = _H + 4 * k
        w0 = kt[r]
        m0 = kt[r + 3]
        w, m = _node(kt, kc, k, T, tmax, inv)
        if w == w0 and m == m0 and w0 != s:
            return
        k >>= 1


@njit
def _fix_path_static(kt, kc, s):
    """`_fix_path` for winners only: each node on the path takes its winner at the clock
    T and the melt time T, so the next `advance` past T recomputes it in full. This is
    the walk of every further victim of a request (its slot won each node on the path,
    so the walk goes to the root). The path's winner is carried in registers and taken
    with selects rather than branches, which measured faster: the outcome per level is a
    coin toss."""
    P = kt[0]
    T = kt[1]
    inv = kt[2] != 0
    k = P + s
    r = _H + 4 * k
    ws = kt[r]
    wn = kt[r + 1]
    wi = kt[r + 2]
    wc = kc[k]
    while k > 1:
        o = k ^ 1
        ro = _H + 4 * o
        os = kt[ro]
        if os >= 0:
            on = kt[ro + 1]
            oi = kt[ro + 2]
            oc = kc[o]
            # ids are unique, so which of the two is asked first does not matter
            take = ws < 0 or beats(oc, on, oi, wc, wn, wi, T, inv)
            ws = os if take else ws
            wn = on if take else wn
            wi = oi if take else wi
            wc = oc if take else wc
        k >>= 1
        r = _H + 4 * k
        if kt[r] == ws and kt[r + 3] == T and ws != s:
            return
        kt[r] = ws
        kt[r + 1] = wn
        kt[r + 2] = wi
        kt[r + 3] = T
        kc[k] = wc


@njit
def _write_leaf(kt, kc, s, c, n, ident):
    r = _H + 4 * (kt[0] + s)
    kt[r] = s
    kt[r + 1] = n
    kt[r + 2] = ident
    kc[kt[0] + s] = c


@njit
def set_leaf(kt, kc, s, c, n, ident):
    """Put (or replace) item (c, n, ident) in slot s."""
    _write_leaf(kt, kc, s, c, n, ident)
    _fix_path(kt, kc, s)


# flush's regions after the stack: dirty leaves (P), two node lists (P each), marks (2P)
@njit
def _regions(P):
    lb = _H + 8 * P + _STACK
    return lb, lb + P, lb + 2 * P, lb + 3 * P


@njit
def _mark_dirty(kt, s):
    P = kt[0]
    lb, _, _, mk = _regions(P)
    if kt[mk + P + s] == 0:
        kt[mk + P + s] = 1
        kt[lb + kt[4]] = P + s
        kt[4] += 1


@njit
def put_leaf(kt, kc, s, c, n, ident):
    """`set_leaf` deferred: the ancestors are repaired by the next `flush`."""
    _write_leaf(kt, kc, s, c, n, ident)
    _mark_dirty(kt, s)


@njit
def drop_leaf(kt, s):
    """`clear_leaf` deferred to the next `flush`."""
    kt[_H + 4 * (kt[0] + s)] = -1
    _mark_dirty(kt, s)


@njit
def flush(kt, kc, static=False):
    """Repair the ancestors of every dirty leaf at the clock, a level at a time: a node
    is recomputed once however many of its descendants changed, and its parent only if
    it changed or its winner is a dirty leaf (where `_fix_path` would go on).

    static=True repairs winners only, leaf by leaf (`_fix_path_static`), and leaves the
    certificates to the next `advance`: for repeated queries at one clock, such as a
    request's victims, whose root paths overlap, so each node's certificate is computed
    once per clock. One dirty leaf is one walk either way: no lists, no marks."""
    nd = kt[4]
    if nd == 0:
        return
    P = kt[0]
    lb, cur, nxt, mk = _regions(P)
    if static or nd == 1:
        for i in range(nd):
            kt[mk + kt[lb + i]] = 0
        kt[4] = 0
        for i in range(nd):
            if static:
                _fix_path_static(kt, kc, kt[lb + i] - P)
            else:
                _fix_path(kt, kc, kt[lb + i] - P)
        return
    T = kt[1]
    inv = kt[2] != 0
    tmax = kt[3]
    src = lb
    n = nd
    while n > 0:
        m = 0  # the distinct parents of the nodes in src
        for i in range(n):
            k = kt[src + i] >> 1
            if k >= 1 and kt[mk + k] == 0:
                kt[mk + k] = 1
                kt[cur + m] = k
                m += 1
        n = 0  # those that changed (kept in place)
        for i in range(m):
            k = kt[cur + i]
            kt[mk + k] = 0
            r = _H + 4 * k
            w0 = kt[r]
            m0 = kt[r + 3]
            w, mm = _node(kt, kc, k, T, tmax, inv)
            if w != w0 or mm != m0 or (w0 >= 0 and kt[mk + P + w0] != 0):
                kt[cur + n] = k
                n += 1
        src = cur
        cur, nxt = nxt, cur
    for i in range(nd):
        kt[mk + kt[lb + i]] = 0
    kt[4] = 0


@njit
def clear_leaf(kt, kc, s):
    """Empty slot s."""
    kt[_H + 4 * (kt[0] + s)] = -1
    _fix_path(kt, kc, s)


@njit
def leaf_is(kt, s, n, ident):
    """True if slot s is occupied by exactly (n, ident)."""
    r = _H + 4 * (kt[0] + s)
    return kt[r] >= 0 and kt[r + 1] == n and kt[r + 2] == ident


@njit
def leaf_used(kt, s):
    return kt[_H + 4 * (kt[0] + s)] >= 0


@njit
def weight(kt, kc, s):
    """c of slot s (kept when the slot is emptied)."""
    return kc[kt[0] + s]


@njit
def clock(kt):
    return kt[1]


@njit
def top(kt):
    """Slot with the highest score at the clock, -1 if the tree is empty."""
    return kt[_H + 4]


@njit
def top_id(kt):
    """Id of the item with the highest score at the clock (the tree must not be empty)."""
    return kt[_H + 6]


@njit
def advance(kt, kc, t):
    """Move the clock forward to t (never backwards) and repair failed certificates."""
    if t <= kt[1]:
        return
    kt[1] = t
    P = kt[0]
    if kt[_H + 7] > t:
        return
    inv = kt[2] != 0
    tmax = kt[3]
    sb = _H + 8 * P
    kt[sb] = 1
    sp = 1
    while sp > 0:
        sp -= 1
        k = kt[sb + sp]
        if k < 0:  # children done: recompute node -k
            _node(kt, kc, -k, t, tmax, inv)
            continue
        if k >= P or kt[_H + 4 * k + 3] > t:
            continue
        kt[sb + sp] = -k
        sp += 1
        if kt[_H + 8 * k + 3] <= t:
            kt[sb + sp] = 2 * k
            sp += 1
        if kt[_H + 8 * k + 7] <= t:
            kt[sb + sp] = 2 * k + 1
            sp += 1
