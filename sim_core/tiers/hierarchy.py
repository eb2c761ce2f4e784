"""Lower tiers under HBM: host memory, SSD, a remote store (the compiled side; the tier
spec and its checks are sim_core/tiers/spec.py, the engines' rules sim_core/tiers/rules.py).

A hierarchy is a replay of HBM with a chain of caches behind it (sim_core/replay/engine.py).
The residency constraint applies to HBM only. A lower tier sees only what the
hierarchy hands it, so each runs any registered policy over its own stream of events:
  - lookups: a block missing from HBM is looked up top down; the first tier holding it
    serves it (a load: the block is not recomputed). An inclusive tier keeps its copy,
    an exclusive one gives it up (the policy's `remove` hook);
  - writes: `on_evict` - a block evicted from the tier above is written here (SGLang
    HiCache write-back); `on_compute` - the blocks of a request this tier lacks are
    written here (vLLM's CPU offload, LMCache, HiCache write-through; in request mode
    HBM hits included: sim_core/tiers/request.py); `on_hit` - a block the tier above
    serves is written here (AIBrix's HOT ingestion into L2);
  - recency: `touch=loads` refreshes an inclusive tier's copy when it is loaded;
    `touch=request` refreshes every block of a request the tier holds, HBM hits
    included, deepest first (vLLM's connector, Dynamo's mocker: tier_request.py);
  - promotion: a tier with `promote=N` also copies a block into the tier above on its
    N-th hit here (LMCache writes a disk hit back to CPU; Mooncake's promotion_on_hit);
  - admission decides whether a write (or HBM's own insertion) happens at all: `all`,
    `after_hits=N` (requested at least N times before), `doorkeeper` (TinyLFU's: a
    block is admitted on its second request within a window of DOOR_WINDOW x capacity
    attempts), `lookups=N` (vLLM's store_threshold: the block was looked up in the tier
    N times, i.e. it lay past the HBM prefix hit of N requests), `frequency=N[/Ts]`
    (Dynamo KVBM's host-to-disk filter: a count starts at 1 and doubles per write
    attempt, loses 1 every T seconds of trace time (600), and passes at N).
A block a tier evicts is written to the tier below it when that one writes on_evict.

The full-pool rule (request mode): a tier never evicts a block of the request being
replayed (its blocks are pinned in the tier's `pin`, as HBM pins them); a write that
finds nothing it may evict is skipped and counted (T_SKIPPED; tier_request.py makes a
request's on_compute writes all-or-nothing, as vLLM's prepare_store does).

A lower tier's hooks run with request -2 except evict, which gets the pinning request
(c[T_REQ], -2 in block mode and in the serving replay), and, for a block written down,
the index of the block's last access and its depth: an oracle (Belady) then ranks it by
its true next use, and a policy that looks at the incoming block of an eviction
(S3-FIFO's ghost check) finds the block being written.

Up to three lower tiers: engine arguments t1, t2, t3, each a `Tier` or `NO_TIER`; numba
compiles one engine per combination of policy types, and with NO_TIER the tier code is
removed at compile time (tier_on is a constant there).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numba.extending import overload

from ..jit import njit
from ..policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert, p_remove, register_hooks

MAX_TIERS = 3
WRITES = ("on_evict", "on_compute", "on_hit")
WRITE_ON_EVICT, WRITE_ON_COMPUTE, WRITE_ON_HIT = 0, 1, 2
TOUCHES = ("loads", "request")
TOUCH_LOADS, TOUCH_REQUEST = 0, 1
# cfg layout
T_CAP, T_WRITE, T_INCLUSIVE, T_TOUCH, T_PROMOTE = range(5)
N_T_CFG = 5
# counters layout (per tier); T_REQ: the request whose blocks are pinned here (-2: none),
# T_PINNED: how many of them the tier holds; T_STAMP: who writes now (owner stamps, below)
(T_SIZE, T_WRITES, T_EVICTIONS, T_FAILED, T_BAD_VICTIM, T_COUNTING, T_MAX_SIZE, T_SKIPPED, T_REQ,
 T_PINNED, T_STAMP) = range(11)
N_T_COUNTERS = 11
# admission array layout: kind, N, window (doorkeeper), attempts in the window, the
# current request's tick and the tick length in seconds (frequency)
A_KIND, A_N, A_WINDOW, A_COUNT, A_NOW, A_TICK_S = range(6)
N_A = 6
ADMIT_ALL, ADMIT_AFTER_HITS, ADMIT_DOORKEEPER, ADMIT_LOOKUPS, ADMIT_FREQUENCY = range(5)
DOOR_WINDOW = 10  # a doorkeeper forgets every DOOR_WINDOW x capacity attempts
FREQ_BITS = 32  # frequency: door[b] = (tick of the last attempt << FREQ_BITS) | count
FREQ_CAP = 1 << 30  # a count saturates here (it doubles per sighting)


class Tier(NamedTuple):
    st: object  # the tier policy's state
    resident: np.ndarray  # bool[U]
    pin: np.ndarray  # int32[U]: the last request that pinned the block here
    extra: np.ndarray  # int32 scratch for evict_more
    out: np.ndarray  # int32: the victims of the last write, handed to the tier below
    c: np.ndarray  # int64[N_T_COUNTERS]
    cfg: np.ndarray  # int64[N_T_CFG]: capacity, write mode, inclusive, touch, promote
    adm: np.ndarray  # int64[N_A]: admission (A_* layout)
    door: np.ndarray  # int64[U] (or [1]): doorkeeper stamps, lookup or frequency counts
    hits: np.ndarray  # int32[U] (or [1]): hits here per block (promote=N)
    tick: np.ndarray  # int32[R] (or [1]): each request's tick (frequency admission)
    want: np.ndarray  # int8[max request length]: scratch, which blocks of r this tier takes
    owner: np.ndarray  # int64[U] (or [1]): c[T_STAMP] when each block was last written (a pool shared by
    # replicas: sim_core.serving.tiers stamps the writer and the time); [1] stamps nothing


class NoTierState(NamedTuple):
    x: np.ndarray


class NoTier(NamedTuple):
    """The absent tier: same fields as Tier, never consulted (tier_on is False)."""

    st: NoTierState
    resident: np.ndarray
    pin: np.ndarray
    extra: np.ndarray
    out: np.ndarray
    c: np.ndarray
    cfg: np.ndarray
    adm: np.ndarray
    door: np.ndarray
    hits: np.ndarray
    tick: np.ndarray
    want: np.ndarray
    owner: np.ndarray


@njit
def _no_hit(st, b, j, r, d):
    pass


@njit
def _no_evict(st, j, r, pin):
    return -1


@njit
def _no_remove(st, b):
    pass


register_hooks(NoTierState, _no_hit, _no_hit, _no_evict, remove=_no_remove)


def _empty_tier() -> NoTier:
    z32, c = np.zeros(1, np.int32), np.zeros(N_T_COUNTERS, np.int64)
    c[T_REQ] = -2
    return NoTier(NoTierState(np.zeros(1, np.int32)), np.zeros(1, np.bool_), np.full(1, -1, np.int32), z32.copy(),
                  z32.copy(), c, np.zeros(N_T_CFG, np.int64), np.zeros(N_A, np.int64), np.zeros(1, np.int64),
                  z32.copy(), z32.copy(), np.zeros(1, np.int8), np.zeros(1, np.int64))


NO_TIER = _empty_tier()


class Gate(NamedTuple):
    """HBM's admission rule (an engine argument; NO_GATE when every block is admitted)."""

    adm: np.ndarray  # int64[N_A]: A_* layout
    door: np.ndarray  # int64[U] (or [1]): doorkeeper generation stamps


class NoGate(NamedTuple):
    adm: np.ndarray
    door: np.ndarray


NO_GATE = NoGate(np.zeros(N_A, np.int64), np.full(1, -1, np.int64))


def _present(absent):
    """A compile-time test `x is not the placeholder class absent`: numba sees a constant,
    so the branches it guards vanish from the specialisation without tiers or a gate."""
    def present(x):  # pragma: no cover - replaced at compile time
        raise NotImplementedError

    @overload(present, inline="always")
    def _ov(x):
        if getattr(x, "instance_class", None) is absent:
            return lambda x: False
        return lambda x: True

    return present


gate_on = _present(NoGate)
tier_on = _present(NoTier)


@njit
def tier_has(t, b):
    return tier_on(t) and t.resident[b]


DEPTH_BITS = 24  # a block's depth below 2^24 (16M blocks into a request), its access index below 2^39


@njit
def pack_last(j, d):
    """A block's last access index and depth in one int64 (Accounting.last)."""
    return (np.int64(j) << DEPTH_BITS) | np.int64(d)


@njit
def last_j(x):
    return x >> DEPTH_BITS


@njit
def last_depth(x):
    return x & ((np.int64(1) << DEPTH_BITS) - 1)


@njit
def counts_seen(t):
    """Whether tier t's admission reads the blocks' request counts (after_hits=N)."""
    return tier_on(t) and t.adm[A_KIND] == ADMIT_AFTER_HITS


@njit
def tier_begin(t, r, counting, request_mode):
    """Request r starts: what the tier counts, whom it protects, its clock."""
    if tier_on(t):
        t.c[T_COUNTING] = counting
        t.c[T_PINNED] = 0
        t.c[T_REQ] = r if request_mode else -2
        if t.adm[A_KIND] == ADMIT_FREQUENCY:
            t.adm[A_NOW] = t.tick[r]


@njit
def admit(adm, door, seen, b):
    """Whether block b may be written (or inserted into HBM). Records the attempt."""
    kind = adm[A_KIND]
    if kind == ADMIT_ALL:
        return True
    if kind == ADMIT_AFTER_HITS:
        return seen[b] >= adm[A_N]
    if kind == ADMIT_LOOKUPS:  # counted where the lookups happen (tier_request.tier_pin)
        return door[b] >= adm[A_N]
    if kind == ADMIT_FREQUENCY:
        now = adm[A_NOW]
        x = door[b]
        count = x & ((np.int64(1) << FREQ_BITS) - 1)
        if count > 0:
            count -= now - (x >> FREQ_BITS)  # one decay per tick since the last attempt
        count = min(count * 2, FREQ_CAP) if count > 0 else 1
        door[b] = (now << FREQ_BITS) | count
        return count >= adm[A_N]
    gen = adm[A_COUNT] // adm[A_WINDOW]  # the window this attempt falls in
    adm[A_COUNT] += 1
    if door[b] == gen:
        return True
    door[b] = gen
    return False


@njit
def tier_hit(t, b, j, d):
    """Block b is loaded from tier t into HBM: an inclusive tier keeps its copy (and
    refreshes it under touch=loads), an exclusive one hands it over."""
    if t.cfg[T_INCLUSIVE]:
        if t.cfg[T_TOUCH] == TOUCH_LOADS:
            p_on_hit(t.st, b, j, -2, d)
    else:
        p_remove(t.st, b)
        t.resident[b] = False
        t.c[T_SIZE] -= 1
        if t.pin[b] == t.c[T_REQ]:
            t.c[T_PINNED] -= 1


@njit
def promotes(t, b):
    """Tier t served block b: whether it is copied into the tier above (promote=N)."""
    n = t.cfg[T_PROMOTE]
    if n <= 0:
        return False
    if t.hits[b] < 2147483647:
        t.hits[b] += 1
    return t.hits[b] >= n


@njit
def _drop(t, v):
    if v < 0 or not t.resident[v] or t.pin[v] == t.c[T_REQ]:
        t.c[T_FAILED] = 1
        t.c[T_BAD_VICTIM] = v
        return False
    t.resident[v] = False
    t.c[T_SIZE] -= 1
    if t.c[T_COUNTING]:
        t.c[T_EVICTIONS] += 1
    return True


@njit
def room(t, k):
    """Whether k more blocks fit in tier t once every block it may evict is gone."""
    return k <= t.cfg[T_CAP] - t.c[T_PINNED]


@njit
def _put(t, b, j, d, own):
    """Write block b into tier t, evicting first; the victims go to t.out. Returns their
    number (-1 on a policy bug). `own`: b is a block of the request being replayed (a
    compute, a load or a promotion), not a victim from above."""
    k = 0
    cap = t.cfg[T_CAP]
    r = t.c[T_REQ]
    while t.c[T_SIZE] >= cap:
        v = p_evict(t.st, j, r, t.pin)
        if not _drop(t, v):
            return -1
        t.out[k] = v
        k += 1
        m = p_evict_more(t.st, j, r, t.pin, t.extra)
        for i in range(m):
            x = t.extra[i]
            if not _drop(t, x):
                return -1
            t.out[k] = x
            k += 1
    t.resident[b] = True
    t.c[T_SIZE] += 1
    if t.owner.shape[0] > 1:
        t.owner[b] = t.c[T_STAMP]
    if own and r >= 0:  # a block of the request being replayed (request mode): protected until it ends
        t.pin[b] = r
        t.c[T_PINNED] += 1
    if t.c[T_SIZE] > t.c[T_MAX_SIZE]:
        t.c[T_MAX_SIZE] = t.c[T_SIZE]
    if t.c[T_COUNTING]:
        t.c[T_WRITES] += 1
    p_on_insert(t.st, b, j, -2, d)
    return k


@njit
def _accepts(t, b, seen, via):
    if not (t.cfg[T_WRITE] == via and t.cfg[T_CAP] > 0 and not t.resident[b]
            and admit(t.adm, t.door, seen, b)):
        return False
    if t.c[T_SIZE] >= t.cfg[T_CAP] and not room(t, 1):  # full of the request's own blocks
        if t.c[T_COUNTING]:
            t.c[T_SKIPPED] += 1
        return False
    return True


@njit
def put_down3(t3, b, j, d, seen, last, own):
    _put(t3, b, j, d, own)  # the last tier's victims leave the hierarchy


@njit
def put_down2(t2, t3, b, j, d, seen, last, own):
    k = _put(t2, b, j, d, own)
    if tier_on(t3):
        for i in range(k):
            v = t2.out[i]
            write_down3(t3, v, last_j(last[v]), last_depth(last[v]), seen, last, WRITE_ON_EVICT)


@njit
def put_down1(t1, t2, t3, b, j, d, seen, last, own):
    """Block b goes into tier 1 (admitted already); its victims go on down the chain."""
    k = _put(t1, b, j, d, own)
    if tier_on(t2):
        for i in range(k):
            v = t1.out[i]
            write_down2(t2, t3, v, last_j(last[v]), last_depth(last[v]), seen, last, WRITE_ON_EVICT)


@njit
def write_down3(t3, b, j, d, seen, last, via):
    if _accepts(t3, b, seen, via):
        put_down3(t3, b, j, d, seen, last, via != WRITE_ON_EVICT)


@njit
def write_down2(t2, t3, b, j, d, seen, last, via):
    if _accepts(t2, b, seen, via):
        put_down2(t2, t3, b, j, d, seen, last, via != WRITE_ON_EVICT)


@njit
def write_down1(t1, t2, t3, b, j, d, seen, last, via):
    """Block b arrives at tier 1 by `via` (an eviction from HBM, or a compute); tier
    1's victims go on down the chain."""
    if _accepts(t1, b, seen, via):
        put_down1(t1, t2, t3, b, j, d, seen, last, via != WRITE_ON_EVICT)


@njit
def _lift(t, b):
    """Whether a promotion may copy block b into tier t (it lacks b and has room)."""
    return t.cfg[T_CAP] > 0 and not t.resident[b] and (t.c[T_SIZE] < t.cfg[T_CAP] or room(t, 1))


@njit
def take(t1, t2, t3, b, j, d, lvl, seen, last):
    """Load block b from lower tier `lvl` into HBM (a copy if the tier is inclusive); the
    tier below may take it (write=on_hit), the tier above may get it back (promote)."""
    if lvl == 1:
        tier_hit(t1, b, j, d)
        if tier_on(t2) and t2.cfg[T_WRITE] == WRITE_ON_HIT:
            write_down2(t2, t3, b, j, d, seen, last, WRITE_ON_HIT)
    elif lvl == 2:
        tier_hit(t2, b, j, d)
        if tier_on(t3) and t3.cfg[T_WRITE] == WRITE_ON_HIT:
            write_down3(t3, b, j, d, seen, last, WRITE_ON_HIT)
        if promotes(t2, b) and _lift(t1, b):
            put_down1(t1, t2, t3, b, j, d, seen, last, True)
    elif lvl == 3:
        tier_hit(t3, b, j, d)
        if promotes(t3, b) and _lift(t2, b):
            put_down2(t2, t3, b, j, d, seen, last, True)
