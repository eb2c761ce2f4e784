"""BeladyCompute: the compute-aware offline oracle of paper sec. 5.2 (after BeladySize).

At each eviction, at time `now` (the access index the engine passes to evict: the
current access in block mode, the request's first access in request mode), every
resident, non-pinned block i gets

    TimeUntilNextAccess(i) = next_use(i) - now            (accesses, virtual time)
    ComputeIntensity(i)    = cost_per_depth[d_i]          (d_i: depth at i's latest access)

and the block with the highest score is evicted. `score` selects how they combine:

    "time_per_cost" (default)  TimeUntilNextAccess / ComputeIntensity
        evicts blocks reused late *and* cheap to recompute, keeping deep, expensive ones.
        This is the BeladySize analogue (a block holds one slot, a hit saves its cost)
        and the reading under which the oracle beats Belady on compute savings, as the
        paper reports.
    "cost_times_time"          ComputeIntensity x TimeUntilNextAccess
        the product literally as printed in the paper; it evicts expensive blocks first.

Under the uniform cost model both are Belady (same victims, same ties).

Blocks never used again -- or, with `horizon` > 0, not reused within `horizon` accesses
of their latest access, and in request mode not counting requests larger than the cache
as uses (all as in `belady`) -- have an infinite score and are evicted first: cheapest
first, ties by smaller block id. Ties between equal finite scores go to the smaller
block id. Scores are compared exactly (no rounding effects), so the victims are those
of a brute-force argmax over exact rationals.

Data structures (flat arrays; O(log n) per hook plus amortised kinetic events):
  * blocks are grouped into cost classes (depths with equal cost). Inside a class every
    score is (n - now) x const, so the order is the static order of next uses: one
    indexed max-heap per class keyed by next use, as in `belady`. Each class heap lives
    in its own region of one array, sized by an upper bound on how many blocks can be
    in that class at once. One more region holds the infinite-score heap (key -class,
    classes being numbered by increasing cost).
  * the class heads (heap tops) are the leaves of a kinetic tournament (`structures/kinetic.py`):
    each head's score is a line in `now`; the tree keeps the max at its clock and only
    repairs nodes whose winner changed since the last eviction. Hooks only mark the
    leaves they change; the eviction repairs them all at once (`flush`), which costs
    about two nodes per leaf since a request's depths are neighbouring classes. The clock is the time
    of the latest eviction (eviction times never decrease); hooks update leaves at that
    clock, which is valid because a line does not depend on when it was written. A
    request's further victims, all at one clock, repair winners only (`flush(static=True)`):
    their root paths overlap, and each node's certificate is recomputed once, at the next
    `advance`.
  * `_place`, the work of both hooks, is inlined into them at numba IR level
    (`inline_njit`): as a function of its own, the call alone cost a sixth of a replay.
  * pinned blocks met at the top during request-mode evictions are "parked" (taken out
    of their heap) for the rest of that request's evictions; the request's own on_hit
    refiles them (any left over are restored by the first hook of the next request), so
    a pinned block costs O(log n) at most once per request however many victims it needs.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..oracles.future import NEVER, next_use
from ..jit import inline_njit, njit
from ..structures.heap import push_at, rekey_at, remove_at
from ..structures.kinetic import advance, clock, drop_leaf, flush, leaf_is, leaf_used, new_tree, put_leaf, top, top_id, weight
from ..result import Mode
from .api import PolicySpec, register_hooks

SCORES = ("time_per_cost", "cost_times_time")

# block status
_ABSENT = 0
_FIN = 1          # in its class heap
_INF = 2          # in the infinite-score heap
_PARKED_FIN = 3   # pinned by the current request, out of its class heap
_PARKED_INF = 4   # pinned by the current request, out of the infinite heap

# Every integer of the policy lives in one int64 array `I` (one array per call keeps
# numba's reference counting off the hot path). Header words:
_U = 0         # blocks
_K = 1         # cost classes; heap K is the infinite-score heap
_HORIZON = 2
_NPARK = 3     # parked blocks
_PARK_R = 4    # request that parked them
_O_ST = 5      # offsets of: status[U]
_O_CL = 6      #   class[U] (of a resident block, at its latest access)
_O_POS = 7     #   pos[U] (index in its heap, or in the park list)
_O_KEY = 8     #   key[U] (heap key: next use, or -class in the infinite heap)
_O_SZ = 9      #   size[K+1] of each heap
_O_BASE = 10   #   base[K+2]: heap r occupies I[base[r] : base[r+1]]
_O_DCL = 11    #   class of each depth
_O_PARK = 12   #   park list
_HDR = 13


class BeladyComputeState(NamedTuple):
    nxt: np.ndarray  # int64[N] next use per access
    I: np.ndarray    # int64: everything else that is an integer (see the header above)
    kt: np.ndarray   # kinetic tree over classes (int part)
    kc: np.ndarray   # the tree's float part (leaf weights: the cost of each class)


@njit
def _class_bounds(offsets, blocks, depth, cls_of_d, n_unique, n_classes):
    """Per class: an upper bound on the blocks it can hold at once (class changes per
    block). `depth` as the engine takes it (Trace.engine_depth)."""
    cnt = np.zeros(n_classes, np.int64)
    last = np.full(n_unique, -1, np.int64)
    for r in range(offsets.shape[0] - 1):
        s = offsets[r]
        for j in range(s, offsets[r + 1]):
            b = blocks[j]
            k = cls_of_d[depth[j] if depth.shape[0] > 0 else j - s]
            if last[b] != k:
                last[b] = k
                cnt[k] += 1
    return cnt


def make_state(ctx) -> BeladyComputeState:
    t = ctx.trace
    horizon = int(ctx.params.get("horizon", 0) or 0)
    if horizon < 0:
        raise ValueError("belady_compute horizon must be >= 0 (0 = unlimited)")
    score = ctx.params.get("score", "time_per_cost")
    if score not in SCORES:
        raise ValueError(f"belady_compute score must be one of {SCORES}, got {score!r}")
    cost = np.ascontiguousarray(ctx.cost_per_depth, dtype=np.float64)
    if len(cost) == 0:
        cost = np.ones(1)
    if not (np.all(np.isfinite(cost)) and cost.min() > 0):
        raise ValueError("belady_compute needs finite, positive costs per depth")
    # classes sorted by cost: the infinite heap's key -class means cheapest first
    ccost, cls_of_d = np.unique(cost, return_inverse=True)
    cls_of_d = cls_of_d.astype(np.int64).reshape(-1)
    K = len(ccost)
    D = len(cls_of_d)
    U = t.n_unique
    cap = max(1, min(U, int(ctx.capacity)))
    cache = t.__dict__.setdefault("_class_bounds", {})  # per cost model, whatever the capacity
    key = cls_of_d.tobytes()
    if key not in cache:  # K words each
        cache[key] = _class_bounds(t.req_offsets, t.blocks, t.engine_depth(), cls_of_d, U, K)
    bound = np.minimum(cache[key], cap)
    sizes = np.append(np.maximum(bound, 1), cap + 1)  # heap K: infinite scores
    o_st = _HDR
    o_sz = o_st + 4 * U
    o_base = o_sz + K + 1
    o_dcl = o_base + K + 2
    o_park = o_dcl + D
    o_heap = o_park + cap + 1
    I = np.zeros(o_heap + int(sizes.sum()), np.int64)
    I[[_U, _K, _HORIZON, _NPARK, _PARK_R]] = [U, K, horizon, 0, -3]
    I[[_O_ST, _O_CL, _O_POS, _O_KEY, _O_SZ, _O_BASE, _O_DCL, _O_PARK]] = [
        o_st, o_st + U, o_st + 2 * U, o_st + 3 * U, o_sz, o_base, o_dcl, o_park]
    I[o_base:o_base + K + 2] = o_heap + np.concatenate([[0], np.cumsum(sizes)])
    I[o_dcl:o_dcl + D] = cls_of_d
    kt, kc = new_tree(K, score == "time_per_cost", t.n_accesses, ccost)
    return BeladyComputeState(next_use(t, ctx.capacity if ctx.mode == Mode.REQUEST else None), I, kt, kc)


# ---------------------------------------------------------------- heaps in I
# Heap r holds block ids in I[base_r : base_r + size_r]; pos[b] is b's index in it.
# Max-heap on key, ties to the smaller id (structures/heap.py over regions of I).

@njit
def _hpush(I, r, b):
    base = I[I[_O_BASE] + r]
    n = I[I[_O_SZ] + r]
    if base + n >= I[I[_O_BASE] + r + 1]:
        raise RuntimeError("belady_compute: heap region overflow")
    I[I[_O_SZ] + r] = n + 1
    push_at(I, base, I, I[_O_POS], I, I[_O_KEY], n, b)


@njit
def _hremove(I, r, b):
    n = I[I[_O_SZ] + r]
    I[I[_O_SZ] + r] = n - 1
    remove_at(I, I[I[_O_BASE] + r], I, I[_O_POS], I, I[_O_KEY], n, b)


@njit
def _hrekey(I, r, b, k):
    rekey_at(I, I[I[_O_BASE] + r], I, I[_O_POS], I, I[_O_KEY], I[I[_O_SZ] + r], b, k)


@njit
def _refresh(I, kt, kc, k):
    """Make leaf k of the tournament show the current head of class heap k."""
    if I[I[_O_SZ] + k] == 0:
        if leaf_used(kt, k):
            drop_leaf(kt, k)
        return
    h = I[I[I[_O_BASE] + k]]
    n = I[I[_O_KEY] + h]
    if not leaf_is(kt, k, n, h):
        put_leaf(kt, kc, k, weight(kt, kc, k), n, h)


# ---------------------------------------------------------------------- hooks

@njit
def _restore(I, kt, kc):
    """Give back every block parked by the previous request."""
    K = I[_K]
    ost = I[_O_ST]
    op = I[_O_PARK]
    for i in range(I[_NPARK]):
        b = I[op + i]
        w = I[ost + b]
        if w == _PARKED_FIN:
            I[ost + b] = _FIN
            k = I[I[_O_CL] + b]
            _hpush(I, k, b)
            _refresh(I, kt, kc, k)
        elif w == _PARKED_INF:
            I[ost + b] = _INF
            _hpush(I, K, b)
    I[_NPARK] = 0


@njit
def _park(I, v, r):
    n = I[_NPARK]
    I[I[_O_PARK] + n] = v
    I[I[_O_POS] + v] = n
    I[_NPARK] = n + 1
    I[_PARK_R] = r


@njit
def _unpark(I, b):
    """Drop b from the park list: the current request touches a block it parked."""
    op = I[_O_PARK]
    i = I[I[_O_POS] + b]
    n = I[_NPARK] - 1
    I[_NPARK] = n
    last = I[op + n]
    I[op + i] = last
    I[I[_O_POS] + last] = i
    I[I[_O_ST] + b] = _ABSENT


@inline_njit
def _place(nxt, I, kt, kc, b, j, r, d):
    """(Re)file resident block b after its access j at depth d of request r."""
    if I[_NPARK] > 0 and I[_PARK_R] != r:
        _restore(I, kt, kc)
    K = I[_K]
    ost = I[_O_ST]
    ocl = I[_O_CL]
    k = I[I[_O_DCL] + d]
    nu = nxt[j]
    h = I[_HORIZON]
    finite = nu != NEVER and (h == 0 or nu - j <= h)
    w = I[ost + b]
    if w == _PARKED_FIN or w == _PARKED_INF:
        _unpark(I, b)
        w = _ABSENT
    if finite and w == _FIN and I[ocl + b] == k:
        top_slot = I[I[_O_BASE] + k]
        was_head = I[top_slot] == b
        _hrekey(I, k, b, nu)
        if was_head or I[top_slot] == b:  # otherwise the class's head is as it was
            _refresh(I, kt, kc, k)
        return
    if w == _FIN:
        k0 = I[ocl + b]
        was_head = I[I[I[_O_BASE] + k0]] == b
        _hremove(I, k0, b)
        if was_head:
            _refresh(I, kt, kc, k0)
    elif w == _INF:
        _hremove(I, K, b)
    I[ocl + b] = k
    if finite:
        I[ost + b] = _FIN
        I[I[_O_KEY] + b] = nu
        _hpush(I, k, b)
        if I[I[I[_O_BASE] + k]] == b:
            _refresh(I, kt, kc, k)
    else:
        I[ost + b] = _INF
        I[I[_O_KEY] + b] = -k
        _hpush(I, K, b)


@njit
def _evict(I, kt, kc, j, r, pin):
    if I[_NPARK] > 0 and I[_PARK_R] != r:
        _restore(I, kt, kc)
    K = I[_K]
    ost = I[_O_ST]
    while True:
        if I[I[_O_SZ] + K] > 0:
            v = I[I[I[_O_BASE] + K]]
            _hremove(I, K, v)
            if pin[v] != r:
                I[ost + v] = _ABSENT
                return v
            I[ost + v] = _PARKED_INF
        else:
            # the tournament is brought to time j only when a finite score is needed: most
            # victims come from the infinite heap, and the dirty leaves wait for one that does not
            if j == clock(kt):
                flush(kt, kc, True)
            else:
                flush(kt, kc)
                advance(kt, kc, j)  # a no-op after the first pass of this loop
            k = top(kt)
            if k < 0:
                return np.int64(-1)
            v = top_id(kt)
            _hremove(I, k, v)
            _refresh(I, kt, kc, k)
            if pin[v] != r:
                I[ost + v] = _ABSENT
                return v
            I[ost + v] = _PARKED_FIN
        _park(I, v, r)


@njit
def on_hit(st, b, j, r, d):
    _place(st.nxt, st.I, st.kt, st.kc, b, j, r, d)


@njit
def on_insert(st, b, j, r, d):
    _place(st.nxt, st.I, st.kt, st.kc, b, j, r, d)


@njit
def evict(st, j, r, pin):
    return _evict(st.I, st.kt, st.kc, j, r, pin)


register_hooks(BeladyComputeState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "belady_compute", make_state,
    "Offline compute-aware oracle - evicts the block with the most time until "
    "its next use per unit of recompute cost (one pass per cost model).",
    defaults={"horizon": 0, "score": "time_per_cost"}, cost_aware=True, offline=True,
    family="oracle", uniform_same_as=lambda params: ("belady", {"horizon": params["horizon"]}),
    weight=14.0)
