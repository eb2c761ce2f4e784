"""The policy interface of the replay engine.

A policy is a NamedTuple of flat arrays (its state) plus three njit hooks:

    on_hit(st, b, j, r, d)      resident block b was accessed (access j, request r, depth d)
    on_insert(st, b, j, r, d)   missing block b was just inserted
    evict(st, j, r, pin) -> v   choose, remove from st and return a resident victim
                                with pin[v] != r (pin marks the current request's blocks).
                                In request mode evictions for r happen before r's
                                on_hit/on_insert calls, so r's blocks may sit anywhere
                                in the policy's structures and must be skipped. evict
                                is called again for r until r fits, and r's blocks do
                                not move in between: a walk that skips them should
                                resume where it stopped (mlist.tail_unpinned,
                                fbuckets.lowest_unpinned), or a request that hits many
                                old blocks costs O(hits x evictions).
    evict_more(st, j, r, pin, out) -> k   optional: after a victim, further blocks that
                                must go with it (session-level eviction); writes k ids to
                                `out`, each resident, not pinned and removed from st
    remove(st, b)               optional: take resident block b out of st (an exclusive
                                lower tier hands a hit block up to HBM: sim_core.tiers.hierarchy);
                                a policy with it sets `removable=True` in its PolicySpec

Hooks are inlined into an engine compiled without numba's reference counting: they
must not allocate arrays (allocate everything in make_state).

`register_hooks(StateClass, ...)` binds them to the state type; the engine calls the
generic stubs below and numba resolves them by the *type* of the state at compile time,
so each policy gets its own specialised, disk-cached engine with no runtime dispatch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from numba.extending import overload

_HOOKS: dict[type, tuple[Any, Any, Any, Any, Any]] = {}


def register_hooks(state_cls: type, on_hit, on_insert, evict, evict_more=None, remove=None) -> None:
    _HOOKS[state_cls] = (on_hit, on_insert, evict, evict_more, remove)


def has_remove(state_cls: type) -> bool:
    return state_cls in _HOOKS and _HOOKS[state_cls][4] is not None


def _hooks_for(st):
    cls = getattr(st, "instance_class", None)
    if cls not in _HOOKS:
        raise TypeError(f"no policy hooks registered for state type {st}")
    return _HOOKS[cls]


def p_on_hit(st, b, j, r, d):  # pragma: no cover - replaced at compile time
    raise NotImplementedError


def p_on_insert(st, b, j, r, d):  # pragma: no cover
    raise NotImplementedError


def p_evict(st, j, r, pin):  # pragma: no cover
    raise NotImplementedError


def p_evict_more(st, j, r, pin, out):  # pragma: no cover
    raise NotImplementedError


def p_remove(st, b):  # pragma: no cover
    raise NotImplementedError


# The hooks' bodies are inlined into the engine (numba IR inlining): a call per
# access would cost a reference-count round trip for every array of the state.
@overload(p_on_hit, inline="always")
def _ov_on_hit(st, b, j, r, d):
    return _hooks_for(st)[0].py_func


@overload(p_on_insert, inline="always")
def _ov_on_insert(st, b, j, r, d):
    return _hooks_for(st)[1].py_func


@overload(p_evict, inline="always")
def _ov_evict(st, j, r, pin):
    return _hooks_for(st)[2].py_func


@dataclass
class PolicyContext:
    """What a policy's `make_state` may look at (all read-only)."""

    trace: Any  # sim_core.traces.trace.Trace
    capacity: int
    mode: str  # "request" | "block"
    cost_per_depth: Any  # float64[max_depth]: the cost model a cost-aware policy optimises
    params: dict = field(default_factory=dict)
    seed: int = 0


@dataclass(frozen=True)
class PolicySpec:
    """A named policy: how to build its state, and what it needs."""

    name: str
    make_state: Callable[[PolicyContext], Any]
    description: str
    defaults: dict = field(default_factory=dict)
    cost_aware: bool = False  # savings differ per cost model: one pass per model
    offline: bool = False  # looks at the future (oracle)
    family: str = "recency"
    # sampled replay (sim_core.traces.sample): which unit the sample keeps ("depth": every m-th
    # depth of each prefix tree; "block": hashed block ids; "session"), chosen per policy
    # from the measured error (docs/sampling.md)
    sample_by: str = "depth"
    # False: its sampled error misses the target (docs/sampling.md), so a sampled
    # simulate replays it exactly unless asked to sample it anyway (sample_force)
    sample_ok: bool = True
    # the smallest scaled cache (blocks) it is sampled into; None: the unit's
    # (sim_core.traces.sample.MIN_SAMPLED_BLOCKS). Capacities below it are sampled at a higher rate.
    sample_floor: int | None = None
    # cost-aware policies that decide exactly like another policy under the uniform cost
    # model (a tested identity): params -> (that policy, its params). A sweep running both
    # reads this policy's uniform curve off the other's replay (sweep/derived.py).
    uniform_same_as: Callable[[dict], tuple[str, dict]] | None = None
    # policies it is known to equal at its defaults: name -> why (the console table names
    # the reason when their curves tie)
    identical_to: dict = field(default_factory=dict)
    # learned policies: replay pauses every `train_every` requests and calls
    # train(state, ctx, next_request) in Python, which may rewrite the state's arrays
    train_every: int = 0
    train: Callable[[Any, PolicyContext, int], None] | None = None
    # stack policies (inclusion property): njit function giving every capacity of a
    # curve in one pass, signature as sim_core.structures.onepass.lru_curve
    curve: Any = None
    # scheduling: run time per block access relative to FIFO (request mode, 20M-access
    # bench, `python -m benchmarks.speed`); a sweep orders its jobs by accesses x weight
    weight: float = 1.0
    # policy=all leaves it out while sweep.exclude_slow=true (named explicitly, it runs)
    slow: bool = False
    # libCacheSim's class for the same policy: equality tests and `benchmarks.speed`
    libcachesim: str | None = None
    # an offline optimum computed by a solver over the whole trace instead of replayed
    # (sim_core.oracles.ilp): solve(trace, capacities, *, cost_models, mode, hits, model, params)
    # -> one Result per capacity. make_state and the hooks are then never used.
    solve: Callable[..., list] | None = None
    # checked before any simulation: check(trace, capacities, *, mode, hits, params)
    # raises ValueError when the policy cannot run there (the ILP's size limit)
    check: Callable[..., None] | None = None
    # policy=all selects it; False keeps it to explicit selection (policy=[lru,ilp])
    in_all: bool = True
    # its hooks include `remove`, so it can run an exclusive lower tier (sim_core.tiers.hierarchy)
    removable: bool = False
    # a bound, not a policy: that policy run as one flat cache of HBM plus every lower
    # tier's capacity (sim_core.simulate.tier_bound); make_state and the hooks are unused
    bound_of: str | None = None
    # why the serving replay (sim_core.serving) cannot run it; "" when it can. There every
    # in-flight request's blocks are pinned with one value (structures.pins.SHARED_PIN) and
    # evict's r is that value, not a request
    no_serving: str = ""


@overload(p_evict_more, inline="always")
def _ov_evict_more(st, j, r, pin, out):
    f = _hooks_for(st)[3]
    if f is None:
        return lambda st, j, r, pin, out: 0
    return f.py_func


@overload(p_remove, inline="always")
def _ov_remove(st, b):
    f = _hooks_for(st)[4]
    if f is None:  # never called: sim_core.tiers.hierarchy refuses exclusive tiers of such a policy
        return lambda st, b: None
    return f.py_func
