"""W-TinyLFU (Einziger, Friedman, Manes: "TinyLFU: A Highly Efficient Cache Admission
Policy", ACM ToS 2017): a small LRU *window* in front of a segmented-LRU *main* cache,
with a TinyLFU frequency sketch deciding which of two blocks keeps a main-cache slot.

Published algorithm (the default, ``libcachesim: false``):

- window: LRU of ``W = max(1, round(window * capacity))`` blocks; every new block enters
  it. Main: SLRU of ``M = capacity - W`` blocks, ``protected`` (default 80%) of it the
  protected segment, the rest probation. A hit in probation promotes the block to the
  protected MRU end; protected overflow demotes the protected LRU block to the probation
  MRU end. A hit in protected or in the window moves the block to its MRU end.
- while the main cache has room, blocks leaving the window go straight to probation.
  Once the cache is full, the window's LRU block (the *candidate*) and the main cache's
  victim (probation LRU block, or the protected LRU block if probation is empty) duel:
  the candidate enters probation and the victim is evicted iff
  ``estimate(candidate) > estimate(victim)``; otherwise the candidate is evicted.
- frequency sketch: a count-min sketch of ``sketch_depth`` rows of ``sketch_width``
  counters (0 = next power of two >= capacity), counters saturating at ``counter_max``
  (15 = the paper's 4-bit counters); every access (hit or miss) is recorded. Aging
  ("reset"): after ``sample_factor * capacity`` recorded accesses all counters and the
  addition count are halved (and the doorkeeper cleared). ``doorkeeper: true`` puts a
  Bloom filter of ``sketch_width`` bits in front of the sketch: a block's first access
  only sets its doorkeeper bits, and the estimate adds 1 for a doorkeeper member.
  ``conservative: true`` uses the paper's minimal-increment update (only the smallest
  counters grow). Row hashes come from XXH64 of dense id + 1 (double hashing), whatever
  the blocks' source ids: results do not depend on how the trace named its blocks.
- request mode: pinned blocks (the current request's) are skipped when choosing the
  candidate and the victim; the window may then hold a few more than W blocks until the
  next eviction.

These are the paper's and Caffeine's static semantics, each pinned access by access on
hand-computed traces in tests/test_policies_frequency.py. Caffeine also resizes its
window by hill climbing and lets a warm candidate (frequency >= 6) that lost its duel in
with probability 1/128 (against hash flooding); neither is modelled.

``libcachesim: true`` reproduces libCacheSim's WTinyLFU.c (as shipped in libcachesim
0.3.5) hit for hit in block mode (but for the zombies of 4), given the same object ids.
libCacheSim's sketch hashes each object's 8-byte id, so this mode hashes
``Trace.object_ids()``: the blocks' source ids (the hashes the trace was built from),
else dense id + 1; ``sim_core.replay.reference.write_oracle_general`` gives libCacheSim the
same ids. (This mode used to hash dense id + 1 whatever ids libCacheSim saw: on
interleaved prefix-chained sessions given to libCacheSim with their own block ids, it
had 0.2037 where libCacheSim had 0.2497 at 2,000 blocks, for that reason alone: hash
collisions decide close duels in libCacheSim's never-aged sketch.) It differs from the paper in
these ways, all reproduced on purpose in that mode (see
tests/test_policies_frequency.py):

1. sketch: one shared array of ``ceil(14.38 * M)`` unsaturated counters (its
   "minimal increment CBF" sized for error 0.001, 10 hash functions by double hashing of
   two 32-bit XXH64 values with seeds 0x12345678 / 0x12344321 of the 8-byte object id),
   and despite its name every hashed counter is incremented (not minimal increment);
2. recording: a main-cache hit, an insertion and every window block pushed to the main
   cache or evicted are recorded; window hits are not; aging halves the counters after
   ``32 * M`` main-cache hits (not after a sample of all accesses); no doorkeeper;
3. window: W = floor(0.01 * capacity) and not enforced while the cache fills: every
   block stays in the window until the first eviction, which first moves the window's
   LRU blocks into the main cache until it is full (so 20% go to probation and the
   rest straight to protected, see 4), then holds the first duel; each later eviction
   removes exactly one block (a duel, or a main-cache eviction if the window is empty).
   That is the 0.3.5 wheel's behaviour, measured; the WTinyLFU.c source on GitHub
   (commit a98824e) reads as if an admitted candidate led to a further duel;
4. SLRU segments are floor(0.2 M) / floor(0.8 M); an insertion goes to probation, or
   to protected if probation is full, or to an over-full probation when both are full
   (possible when the floors lose a slot); then a later probation hit cools protected
   into probation and evicts the probation LRU block *during the hit*. Our engine cannot
   drop a block on a hit, so the block becomes a "zombie": still resident for the
   engine, it is the next block returned by ``evict`` (where libCacheSim would have had
   the free slot). Only if the zombie is accessed before that do the counts differ (we
   count a hit, libCacheSim a miss): ``zombie_hits`` in ``st.cnt`` tracks it.
5. capacities below 100 blocks give W = 0 and libCacheSim then caches nothing at all
   (its can_insert refuses every object); we keep W >= 1.

The two modes can be far apart at small capacities. On prefix-chained sessions the
default mode has 0.535 at 2,000 blocks where libCacheSim has 0.226
(tests/test_policies_frequency.py, chained_sessions(seed=0)), mostly because of the
aging in 2: the paper halves its sketch every 10 * C recorded accesses, libCacheSim
after 32 * M main-cache hits, which that trace never reaches, so counts only grow and
blocks of long-finished but much-read sessions keep winning the duel against live
sessions' blocks. Halving the default mode's sketch every 32 * C accesses instead gives 0.253,
never halving it 0.090; unsaturated counters alone give 0.475.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.dlist import new_list, push_front, tail_unpinned, unlink
from .api import PolicySpec, register_hooks

# list ids (sentinel of list k is U + k)
WIN, PROB, PROT, ZOMB = 0, 1, 2, 3
# where[b]
NONE, IN_WIN, IN_PROB, IN_PROT, IN_ZOMB = 0, 1, 2, 3, 4
# cnt layout
(N_WIN, N_PROB, N_PROT, N_ZOMB, WCAP, MCAP, MAX0, MAX1, ADDS, SAMPLE, CMAX, LCS, DOOR, CONS,
 ZHITS, AGE_EVERY) = range(16)

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
LCS_SEED0 = 0x12345678
LCS_SEED1 = 0x12344321


def _rotl(v: np.ndarray, r: int) -> np.ndarray:
    return (v << np.uint64(r)) | (v >> np.uint64(64 - r))


def xxh64_u64(keys: np.ndarray, seed: int) -> np.ndarray:
    """XXH64 of each 8-byte little-endian uint64 key (the xxHash spec's short-input path)."""
    x = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = np.uint64(seed) + _P5 + np.uint64(8)
        k = _rotl(x * _P2, 31) * _P1
        h = h ^ k
        h = _rotl(h, 27) * _P1 + _P4
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def double_hash_positions(keys: np.ndarray, n_hashes: int, modulus: int, seed_a: int, seed_b: int,
                          row_width: int = 0) -> np.ndarray:
    """int32[len(keys), n_hashes]: ((a + i*b) mod 2^32) mod modulus with 32-bit a, b from XXH64;
    with row_width > 0 hash i is placed in row i (offset i*row_width)."""
    mask = np.uint64(0xFFFFFFFF)
    a = xxh64_u64(keys, seed_a) & mask
    b = xxh64_u64(keys, seed_b) & mask
    out = np.empty((len(a), n_hashes), dtype=np.int32)
    with np.errstate(over="ignore"):
        for i in range(n_hashes):
            x = (a + np.uint64(i) * b) & mask
            out[:, i] = (x % np.uint64(modulus)).astype(np.int64) + i * row_width
    return out


def lcs_geometry(capacity: int, window: float = 0.01) -> dict:
    """libCacheSim's sizes: window, main, SLRU segments, CBF counters and hash count."""
    w = int(capacity * window)
    m = capacity - w
    bpe = -math.log(0.001) / 0.480453013918201
    hashes = int(math.ceil(0.693147180559945 * bpe))
    counters = int(min(math.ceil(bpe * m), 2**31 - 1))
    if counters < hashes:
        counters = 2 * hashes
    return dict(window=w, main=m, seg0=int(1 / 5 * m), seg1=int(4 / 5 * m), counters=counters,
                hashes=hashes, age_every=32 * m)


class WTinyLFUState(NamedTuple):
    prev: np.ndarray  # int32[U+4] lists: window, probation, protected, zombies
    nxt: np.ndarray
    where: np.ndarray  # int8[U]
    pos: np.ndarray  # int32[U, H] sketch counter indices
    sketch: np.ndarray  # int32[counters]
    dkpos: np.ndarray  # int32[U, Hd] doorkeeper bit indices
    door: np.ndarray  # bool[bits]
    cnt: np.ndarray  # int64[16], layout above
    cur: np.ndarray  # int64[4, 2] eviction cursor of each list (dlist.tail_unpinned)


def make_state(ctx) -> WTinyLFUState:
    p = ctx.params
    U = ctx.trace.n_unique
    cap = int(ctx.capacity)
    cnt = np.zeros(16, np.int64)
    lcs = bool(p["libcachesim"])
    if lcs:
        # libCacheSim hashes each object's 8-byte id: hash the ids it is given for this
        # trace (the blocks' source ids, else dense id + 1; what sim_core.replay.reference writes)
        keys = ctx.trace.object_ids()
        g = lcs_geometry(cap, float(p["window"]))
        wcap = max(1, g["window"])
        mcap = cap - wcap
        max0, max1 = (g["seg0"], g["seg1"]) if g["window"] >= 1 else (int(1 / 5 * mcap), int(4 / 5 * mcap))
        pos = double_hash_positions(keys, g["hashes"], g["counters"], LCS_SEED0, LCS_SEED1)
        sketch = np.zeros(g["counters"], np.int32)
        dkpos = np.zeros((1, 1), np.int32)
        door = np.zeros(1, np.bool_)
        cnt[AGE_EVERY] = max(1, 32 * mcap)
    else:
        keys = np.arange(1, U + 1, dtype=np.uint64)  # our own sketch: dense id + 1
        wcap = min(cap, max(1, int(round(float(p["window"]) * cap))))
        mcap = cap - wcap
        max1 = int(float(p["protected"]) * mcap)
        max0 = mcap - max1
        width = int(p["sketch_width"]) or 1 << max(4, (cap - 1).bit_length())
        depth = int(p["sketch_depth"])
        if depth < 1 or width < 1:
            raise ValueError("wtinylfu: sketch_depth and sketch_width must be positive")
        pos = double_hash_positions(keys, depth, width, 0, 1, row_width=width)
        sketch = np.zeros(depth * width, np.int32)
        if p["doorkeeper"]:
            dkpos = double_hash_positions(keys, depth, width, 2, 3)
            door = np.zeros(width, np.bool_)
        else:
            dkpos = np.zeros((1, 1), np.int32)
            door = np.zeros(1, np.bool_)
        cnt[SAMPLE] = max(1, int(round(float(p["sample_factor"]) * cap)))
        cnt[CMAX] = int(p["counter_max"])
        cnt[DOOR] = int(bool(p["doorkeeper"]))
        cnt[CONS] = int(bool(p["conservative"]))
    cnt[WCAP], cnt[MCAP], cnt[MAX0], cnt[MAX1], cnt[LCS] = wcap, mcap, max0, max1, int(lcs)
    prev, nxt = new_list(U, 4)
    return WTinyLFUState(prev, nxt, np.zeros(U, np.int8), pos, sketch, dkpos, door, cnt,
                         np.full((4, 2), -1, np.int64))


# ------------------------------------------------------------------ lists
@njit
def _tail(st, k, pin, r):
    """Block nearest the LRU end of list k that request r has not pinned, or -1. Only
    unpinned blocks move while r evicts, so the walk resumes after r's pinned blocks."""
    return tail_unpinned(st.prev, st.where.shape[0] + k, pin, r, st.cur[k])


@njit
def _move(st, b, k, wh, from_slot, to_slot):
    unlink(st.prev, st.nxt, b)
    push_front(st.prev, st.nxt, st.where.shape[0] + k, b)
    st.where[b] = wh
    st.cnt[from_slot] -= 1
    st.cnt[to_slot] += 1


@njit
def _drop(st, b, slot):
    unlink(st.prev, st.nxt, b)
    st.where[b] = NONE
    st.cnt[slot] -= 1


# ------------------------------------------------------------------ sketch
@njit
def _estimate(st, b):
    sk = st.sketch
    m = sk[st.pos[b, 0]]
    for i in range(1, st.pos.shape[1]):
        c = sk[st.pos[b, i]]
        if c < m:
            m = c
    if st.cnt[DOOR]:
        inside = True
        for i in range(st.dkpos.shape[1]):
            if not st.door[st.dkpos[b, i]]:
                inside = False
        if inside:
            m += 1
    return m


@njit
def _increment(st, b):
    sk = st.sketch
    cmax = st.cnt[CMAX]
    H = st.pos.shape[1]
    if st.cnt[CONS]:
        m = sk[st.pos[b, 0]]
        for i in range(1, H):
            c = sk[st.pos[b, i]]
            if c < m:
                m = c
        for i in range(H):
            q = st.pos[b, i]
            if sk[q] == m and (cmax == 0 or sk[q] < cmax):
                sk[q] += 1
    else:
        for i in range(H):
            q = st.pos[b, i]
            if cmax == 0 or sk[q] < cmax:
                sk[q] += 1


@njit
def _halve(st):
    sk = st.sketch
    for i in range(sk.shape[0]):
        sk[i] >>= 1


@njit
def _record(st, b):
    """Paper mode: one access of b (doorkeeper, sketch, periodic reset)."""
    counted = False
    if st.cnt[DOOR]:
        for i in range(st.dkpos.shape[1]):
            q = st.dkpos[b, i]
            if not st.door[q]:
                st.door[q] = True
                counted = True
    if not counted:
        _increment(st, b)
    st.cnt[ADDS] += 1
    if st.cnt[ADDS] >= st.cnt[SAMPLE]:
        _halve(st)
        st.door[:] = False
        st.cnt[ADDS] >>= 1


# ------------------------------------------------------------------ hooks
@njit
def _main_hit(st, b, lcs):
    """A hit in the main cache: b to the protected list's head; protected overflow goes
    to probation and, in libCacheSim mode (lcs), probation overflow to the zombies."""
    if st.where[b] == IN_PROT:
        _move(st, b, PROT, IN_PROT, N_PROT, N_PROT)
    else:
        _move(st, b, PROT, IN_PROT, N_PROB, N_PROT)
        U = st.where.shape[0]
        while st.cnt[N_PROT] > st.cnt[MAX1]:
            t = st.prev[U + PROT]
            _move(st, t, PROB, IN_PROB, N_PROT, N_PROB)
            while lcs and st.cnt[N_PROB] > st.cnt[MAX0]:
                # libCacheSim evicts the probation LRU block inside this hit
                z = st.prev[U + PROB]
                _move(st, z, ZOMB, IN_ZOMB, N_PROB, N_ZOMB)


@njit
def on_hit(st, b, j, r, d):
    w = st.where[b]
    if w == IN_WIN:
        _move(st, b, WIN, IN_WIN, N_WIN, N_WIN)
        if not st.cnt[LCS]:
            _record(st, b)
    elif w == IN_ZOMB:
        # libCacheSim had evicted it: its miss inserts it into the window (no eviction:
        # the zombie's slot is free there)
        _move(st, b, WIN, IN_WIN, N_ZOMB, N_WIN)
        _increment(st, b)
        st.cnt[ZHITS] += 1
    elif st.cnt[LCS]:
        _main_hit(st, b, True)
        _increment(st, b)
        st.cnt[ADDS] += 1
        if st.cnt[ADDS] >= st.cnt[AGE_EVERY]:
            st.cnt[ADDS] = 0
            _halve(st)
    else:
        _main_hit(st, b, False)
        _record(st, b)


@njit
def _main_insert(st, b, slot):
    """Move b from `slot`'s list into the main cache."""
    if st.cnt[LCS] and st.cnt[N_PROB] + 1 > st.cnt[MAX0] and st.cnt[N_PROT] + 1 <= st.cnt[MAX1]:
        _move(st, b, PROT, IN_PROT, slot, N_PROT)
    else:
        _move(st, b, PROB, IN_PROB, slot, N_PROB)


@njit
def on_insert(st, b, j, r, d):
    push_front(st.prev, st.nxt, st.where.shape[0] + WIN, b)
    st.where[b] = IN_WIN
    st.cnt[N_WIN] += 1
    if st.cnt[LCS]:
        _increment(st, b)
        return
    _record(st, b)
    U = st.where.shape[0]
    while st.cnt[N_WIN] > st.cnt[WCAP] and st.cnt[N_PROB] + st.cnt[N_PROT] < st.cnt[MCAP]:
        _main_insert(st, st.prev[U + WIN], N_WIN)


@njit
def _main_victim(st, pin, r):
    v = _tail(st, PROB, pin, r)
    if v < 0:
        v = _tail(st, PROT, pin, r)
    return v


@njit
def _drop_main(st, v):
    _drop(st, v, N_PROB if st.where[v] == IN_PROB else N_PROT)


@njit
def evict(st, j, r, pin):
    """The window's LRU block (the candidate) duels the main victim; libCacheSim mode
    first returns a zombie and records the candidate in the sketch whatever happens."""
    lcs = st.cnt[LCS]
    if lcs:
        z = _tail(st, ZOMB, pin, r)
        if z >= 0:  # libCacheSim already dropped it on a hit
            _drop(st, z, N_ZOMB)
            return z
    while True:
        cand = _tail(st, WIN, pin, r)
        if cand < 0:
            v = _main_victim(st, pin, r)
            if v >= 0:
                _drop_main(st, v)
            return v
        v = -1
        if st.cnt[N_PROB] + st.cnt[N_PROT] < st.cnt[MCAP]:
            admit = True  # main has room: the candidate moves, nothing is evicted yet
        else:
            v = _main_victim(st, pin, r)
            admit = v >= 0 and _estimate(st, cand) > _estimate(st, v)
            if admit:
                _drop_main(st, v)
        if admit:
            _main_insert(st, cand, N_WIN)
        else:
            _drop(st, cand, N_WIN)
        if lcs:
            _increment(st, cand)
        if not admit or v >= 0:  # else the candidate only moved: next candidate
            return v if admit else cand


register_hooks(WTinyLFUState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "wtinylfu", make_state,
    "W-TinyLFU - 1% LRU window + SLRU main (20/80); a count-min sketch admits a "
    "window victim only if it is more frequent than the main victim.",
    defaults={"window": 0.01, "protected": 0.8, "sketch_depth": 4, "sketch_width": 0,
              "counter_max": 15, "sample_factor": 10.0, "doorkeeper": False,
              "conservative": False, "libcachesim": False},
    family="frequency", sample_ok=False,  # its sampled error misses the target: table in docs/sampling.md
    weight=15.0, libcachesim="WTinyLFU")
