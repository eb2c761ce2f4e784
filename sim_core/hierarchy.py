"""Lower tiers under HBM: host memory, SSD, a remote store.

A hierarchy is a replay of HBM with a chain of caches behind it (sim_core/engine.py).
The residency constraint applies to HBM only. A lower tier sees only what the
hierarchy hands it, so each runs any registered policy over its own stream of events:
  - lookups: a block missing from HBM is looked up top down; the first tier holding it
    serves it (a load: the block is not recomputed). An inclusive tier keeps its copy
    (on_hit), an exclusive one gives it up (the policy's `remove` hook);
  - writes: `on_evict` - a block evicted from the tier above is written here (SGLang
    HiCache write-back); `on_compute` - every block HBM receives and this tier lacks is
    written here as it arrives (vLLM's CPU offload, LMCache, HiCache write-through);
  - admission decides whether a write (or HBM's own insertion) happens at all:
    `all`, `after_hits=N` (the block was requested at least N times before: each of
    those is a hit where it stayed cached; HiCache's selective write), or `doorkeeper`
    (TinyLFU's: a block is admitted on its second request within a window of
    DOOR_WINDOW x capacity admission attempts, Caffeine's sample size for its sketch;
    the window is a generation stamp, so a reset costs nothing).
A block a tier evicts is written to the tier below it when that one writes on_evict.

A lower tier's hooks run with request -2 (nothing is pinned there) and, for a block
written down, the index of the block's last access and its depth: an oracle (Belady)
then ranks it by its true next use, and a policy that looks at the incoming block of an
eviction (S3-FIFO's ghost check) finds the block being written.

Up to three lower tiers: engine arguments t1, t2, t3, each a `Tier` or `NO_TIER`; numba
compiles one engine per combination of policy types, and with NO_TIER the tier code is
removed at compile time (tier_on is a constant there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from numba.extending import overload

from .jit import njit
from .policies.api import p_evict, p_evict_more, p_on_hit, p_on_insert, p_remove, register_hooks

MAX_TIERS = 3
WRITES = ("on_evict", "on_compute")
WRITE_ON_EVICT, WRITE_ON_COMPUTE = 0, 1
# cfg layout
T_CAP, T_WRITE, T_INCLUSIVE = range(3)
# counters layout (per tier)
T_SIZE, T_WRITES, T_EVICTIONS, T_FAILED, T_BAD_VICTIM, T_COUNTING, T_MAX_SIZE = range(7)
N_T_COUNTERS = 7
# admission array layout: kind, N (after_hits), window (doorkeeper), attempts in the window
A_KIND, A_N, A_WINDOW, A_COUNT = range(4)
ADMIT_ALL, ADMIT_AFTER_HITS, ADMIT_DOORKEEPER = 0, 1, 2
DOOR_WINDOW = 10  # a doorkeeper forgets every DOOR_WINDOW x capacity attempts


class Tier(NamedTuple):
    st: object  # the tier policy's state
    resident: np.ndarray  # bool[U]
    pin: np.ndarray  # int32[U], all -1: nothing is pinned in a lower tier
    extra: np.ndarray  # int32 scratch for evict_more
    out: np.ndarray  # int32: the victims of the last write, handed to the tier below
    c: np.ndarray  # int64[N_T_COUNTERS]
    cfg: np.ndarray  # int64[3]: capacity, write mode, inclusive
    adm: np.ndarray  # int64[4]: admission (A_* layout)
    door: np.ndarray  # int32[U] (or [1]): doorkeeper generation stamps


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
    z32, z64 = np.zeros(1, np.int32), np.zeros(N_T_COUNTERS, np.int64)
    return NoTier(NoTierState(np.zeros(1, np.int32)), np.zeros(1, np.bool_), np.full(1, -1, np.int32), z32.copy(),
                  z32.copy(), z64, np.zeros(3, np.int64), np.zeros(4, np.int64), z32.copy())


NO_TIER = _empty_tier()


class Gate(NamedTuple):
    """HBM's admission rule (an engine argument; NO_GATE when every block is admitted)."""

    adm: np.ndarray  # int64[4]: A_* layout
    door: np.ndarray  # int32[U] (or [1]): doorkeeper generation stamps


class NoGate(NamedTuple):
    adm: np.ndarray
    door: np.ndarray


NO_GATE = NoGate(np.zeros(4, np.int64), np.full(1, -1, np.int32))


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


def new_gate(rule, n_unique: int, capacity: int = 1):
    """HBM's admission as an engine argument: NO_GATE for `all` (compiled away)."""
    adm, door = new_admission(rule, n_unique, capacity)
    return NO_GATE if adm[A_KIND] == ADMIT_ALL else Gate(adm, door)


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
def admit(adm, door, seen, b):
    """Whether block b may be written (or inserted into HBM). Records the attempt."""
    kind = adm[A_KIND]
    if kind == ADMIT_ALL:
        return True
    if kind == ADMIT_AFTER_HITS:
        return seen[b] >= adm[A_N]
    gen = np.int32(adm[A_COUNT] // adm[A_WINDOW])  # the window this attempt falls in
    adm[A_COUNT] += 1
    if door[b] == gen:
        return True
    door[b] = gen
    return False


@njit
def tier_hit(t, b, j, d):
    """Block b is loaded from tier t into HBM: an inclusive tier keeps (and refreshes)
    its copy, an exclusive one hands it over."""
    if t.cfg[T_INCLUSIVE]:
        p_on_hit(t.st, b, j, -2, d)
    else:
        p_remove(t.st, b)
        t.resident[b] = False
        t.c[T_SIZE] -= 1


@njit
def _drop(t, v):
    if v < 0 or not t.resident[v]:
        t.c[T_FAILED] = 1
        t.c[T_BAD_VICTIM] = v
        return False
    t.resident[v] = False
    t.c[T_SIZE] -= 1
    if t.c[T_COUNTING]:
        t.c[T_EVICTIONS] += 1
    return True


@njit
def _put(t, b, j, d):
    """Write block b into tier t, evicting first; the victims go to t.out. Returns their
    number (-1 on a policy bug)."""
    k = 0
    cap = t.cfg[T_CAP]
    while t.c[T_SIZE] >= cap:
        v = p_evict(t.st, j, -2, t.pin)
        if not _drop(t, v):
            return -1
        t.out[k] = v
        k += 1
        m = p_evict_more(t.st, j, -2, t.pin, t.extra)
        for i in range(m):
            x = t.extra[i]
            if not _drop(t, x):
                return -1
            t.out[k] = x
            k += 1
    t.resident[b] = True
    t.c[T_SIZE] += 1
    if t.c[T_SIZE] > t.c[T_MAX_SIZE]:
        t.c[T_MAX_SIZE] = t.c[T_SIZE]
    if t.c[T_COUNTING]:
        t.c[T_WRITES] += 1
    p_on_insert(t.st, b, j, -2, d)
    return k


@njit
def _accepts(t, b, seen, via):
    return (t.cfg[T_WRITE] == via and t.cfg[T_CAP] > 0 and not t.resident[b]
            and admit(t.adm, t.door, seen, b))


@njit
def write_down3(t3, b, j, d, seen, last, via):
    if _accepts(t3, b, seen, via):
        _put(t3, b, j, d)  # the last tier's victims leave the hierarchy


@njit
def write_down2(t2, t3, b, j, d, seen, last, via):
    if _accepts(t2, b, seen, via):
        k = _put(t2, b, j, d)
        if tier_on(t3):
            for i in range(k):
                v = t2.out[i]
                write_down3(t3, v, last_j(last[v]), last_depth(last[v]), seen, last, WRITE_ON_EVICT)


@njit
def write_down1(t1, t2, t3, b, j, d, seen, last, via):
    """Block b arrives at tier 1 by `via` (an eviction from HBM, or a compute); tier
    1's victims go on down the chain."""
    if _accepts(t1, b, seen, via):
        k = _put(t1, b, j, d)
        if tier_on(t2):
            for i in range(k):
                v = t1.out[i]
                write_down2(t2, t3, v, last_j(last[v]), last_depth(last[v]), seen, last, WRITE_ON_EVICT)


# ---------------------------------------------------------------------- Python side
@dataclass(frozen=True)
class TierSpec:
    """One lower tier, as `simulate(..., tiers=[...])` takes it (a dict with these keys)."""

    name: str
    capacity: int  # blocks
    policy: str = "lru"
    write: str = "on_evict"
    inclusive: bool = False
    admit: str = "all"  # all | after_hits=N | doorkeeper
    params: dict = field(default_factory=dict)
    link: str = "host"  # which hardware bandwidth loads from it use (TTFT): host | ssd
    bandwidth_bps: float | None = None  # overrides the hardware's bandwidth for this tier

    def key(self) -> tuple:
        """What decides the tier's replay (a result's key). The bandwidth is not in it:
        it changes the TTFT estimate only."""
        return (self.name, int(self.capacity), self.policy, self.write, bool(self.inclusive), self.admit,
                tuple(sorted(self.params.items())))


def parse_admit(text, where: str) -> tuple[int, int]:
    """(kind, N) of an admission rule: 'all', 'after_hits=N' (N >= 1) or 'doorkeeper'."""
    s = "all" if text is None else str(text).strip().lower()
    if s == "all":
        return ADMIT_ALL, 0
    if s == "doorkeeper":
        return ADMIT_DOORKEEPER, 0
    if s.startswith("after_hits="):
        v = s.split("=", 1)[1]
        if v.isdigit() and int(v) >= 1:
            return ADMIT_AFTER_HITS, int(v)
    raise ValueError(f"{where}: unknown admission {text!r}; valid: all, after_hits=N (N >= 1), doorkeeper")


def new_admission(rule, n_unique: int, capacity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(admission array, doorkeeper stamps) of a rule for a cache of `capacity` blocks;
    stamps only for a doorkeeper."""
    kind, n = parse_admit(rule, "admit")
    adm = np.array([kind, n, DOOR_WINDOW * max(int(capacity), 1), 0], np.int64)
    door = np.full(n_unique if kind == ADMIT_DOORKEEPER else 1, -1, np.int32)
    return adm, door


def as_tier_specs(tiers, n_max: int = MAX_TIERS) -> list[TierSpec]:
    """Checked TierSpecs from dicts (or TierSpecs); a bad field is named."""
    from .policies import get_policy

    out: list[TierSpec] = []
    names = set()
    for i, t in enumerate(tiers or []):
        d = dict(t.__dict__) if isinstance(t, TierSpec) else dict(t)
        where = f"tiers[{i}]"
        allowed = {"name", "capacity", "policy", "write", "inclusive", "admit", "params", "link", "bandwidth_bps"}
        unknown = set(d) - allowed
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; valid: {sorted(allowed)}")
        name = str(d.get("name") or f"tier{i + 1}")
        where = f"tier {name!r}"
        if name in names or name == "hbm":
            raise ValueError(f"{where}: tier names must be unique and not 'hbm'")
        names.add(name)
        cap = d.get("capacity")
        if isinstance(cap, bool) or not isinstance(cap, (int, np.integer, float)) or \
                (isinstance(cap, float) and not cap.is_integer()) or cap < 0:
            raise ValueError(f"{where}: capacity must be a whole number of blocks >= 0, got {cap!r}")
        policy = str(d.get("policy", "lru"))
        spec = get_policy(policy)  # raises on an unknown name, listing the valid ones
        if spec.solve is not None or spec.train is not None:
            raise ValueError(f"{where}: policy {policy!r} cannot run a lower tier (it is solved or trained over "
                             f"the whole trace)")
        write = str(d.get("write", "on_evict"))
        if write not in WRITES:
            raise ValueError(f"{where}: unknown write mode {write!r}; valid: {', '.join(WRITES)}")
        inclusive = d.get("inclusive", False)
        if not isinstance(inclusive, (bool, np.bool_)):
            raise ValueError(f"{where}: inclusive must be true or false, got {inclusive!r}")
        if not inclusive and not spec.removable:
            raise ValueError(f"{where}: policy {policy!r} has no remove hook, so it can only run an inclusive tier "
                             f"(inclusive=true); exclusive tiers run: {', '.join(removable_policies())}")
        admit_rule = str(d.get("admit", "all"))
        parse_admit(admit_rule, where)
        params = dict(d.get("params") or {})
        unknown = set(params) - set(spec.defaults)
        if unknown:
            raise ValueError(f"{where}: policy {policy!r} has no parameter(s) {sorted(unknown)}")
        link = str(d.get("link") or "host")
        if link not in ("host", "ssd"):
            raise ValueError(f"{where}: unknown link {link!r}; valid: host, ssd")
        bw = d.get("bandwidth_bps")
        if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float, np.number)) or not bw > 0
                               or bw == float("inf")):
            raise ValueError(f"{where}: bandwidth_bps must be a positive number of bytes/s, got {bw!r}")
        out.append(TierSpec(name, int(cap), spec.name, write, bool(inclusive), admit_rule,
                            {**spec.defaults, **params}, link, None if bw is None else float(bw)))
    if len(out) > n_max:
        raise ValueError(f"at most {n_max} lower tiers, got {len(out)}")
    return out


def removable_policies() -> list[str]:
    from .policies import REGISTRY

    return sorted(n for n, s in REGISTRY.items() if s.removable)


def build_tier(spec: TierSpec, trace, cost_per_depth, seed: int) -> Tier:
    """A lower tier's state over `trace` (the replay's view)."""
    from .policies import PolicyContext, get_policy
    from .result import Mode

    p = get_policy(spec.policy)
    cap = int(spec.capacity)
    U = trace.n_unique
    st = p.make_state(PolicyContext(trace=trace, capacity=max(cap, 1), mode=Mode.BLOCK,
                                    cost_per_depth=cost_per_depth, params=dict(spec.params), seed=seed))
    adm, door = new_admission(spec.admit, U, cap)
    cfg = np.array([cap, WRITES.index(spec.write), int(spec.inclusive)], np.int64)
    return Tier(st, np.zeros(U, np.bool_), np.full(U, -1, np.int32), np.empty(max(cap, 1), np.int32),
                np.empty(max(cap, 1) + 1, np.int32), np.zeros(N_T_COUNTERS, np.int64), cfg, adm, door)
