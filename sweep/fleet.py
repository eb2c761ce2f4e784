"""`fleet=dynamo|vllm`: serving under load in a sweep (sim_core.serve, docs/serving.md).

With a fleet the sweep runs one `serve()` per (policy, capacity, arrival_speedup, route)
instead of cache replays: the whole trace arrives at its timestamps (divided by the
speed-up) and queues for `replicas` engines behind a router (a `Route`), whose KV cache
per replica is the swept capacity. fleet.replicas and fleet.router may be lists: every
combination is a route. Each point is a sim_core.serving.ServeResult. Cost models do not
apply to serving, so its curves are recorded under one pseudo cost model, SERVE; a curve
is one (policy, arrival_speedup, route) over the capacities, and its key holds every
serving setting (`Fleet.key`: the router's parameters too), so it never meets a
cache-replay result or another load's or route's.

This module reads the `fleet` group (`resolve`, shared with `python -m analysis advise`),
applies what a fleet means to a sweep's spec (`for_sweep`, `check_capacities`), and
sets up a serving sweep's curves (sweep.serving holds their rows).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from sim_core.catalog.capacity import human_gib
from sim_core.serving import (ROUTERS, Deployment, cannot_serve, deployment, kv_capacity, measured_config,
                              prefill_pool_params, served_lengths, slo_seconds)
from sim_core.serving.engines import as_engine
from sim_core.policies import get_policy
from sim_core.serving.measured import aic
from sim_core.serving.routers import get_router

from .config import ConfigError, check_int
from .curves import Curve
from .keys import CurveIdentity
from .serving import BASELINE, SERVE
from .plan import resolve_capacities
from .spec import AUTO, COUNTING_DEFAULTS

log = logging.getLogger("sweep")

#: the keys of conf/fleet/*.yaml
KEYS = ("engine", "arrival_speedup", "max_num_seqs", "max_num_batched_tokens", "step_model", "slo_ttft",
        "slo_tpot", "replicas", "router", "router_params", "prefill_replicas", "model", "tp", "backend",
        "prefill_capacity_blocks", "decode_router", "decode_router_params", "kv_transfer")
#: the disaggregated routes' settings (serve()'s keywords of the same names; docs/disagg.md)
ROLE_KEYS = ("prefill_capacity_blocks", "decode_router", "decode_router_params", "kv_transfer")
#: the step models that time steps on a GPU (the hardware group names it)
ON_A_GPU = ("roofline", "measured")


@dataclass(frozen=True)
class Route:
    """One shape of the fleet: `replicas` engines behind `router`, with the router's
    parameters (defaults filled in, as sorted (name, value) pairs); with `prefill` > 0
    a disaggregated fleet, `prefill` prefill replicas behind the router handing off to
    `replicas` decode replicas (docs/disagg.md)."""

    replicas: int = 1
    router: str = BASELINE
    params: tuple = ()
    prefill: int = 0

    @property
    def label(self) -> str:
        """'kv_router x8', or 'kv_router 2:6' disaggregated: how curve labels, run names and
        tables name it."""
        return f"{self.router} {self.prefill}:{self.replicas}" if self.prefill else f"{self.router} x{self.replicas}"

    def given(self) -> str:
        """'overlap_weight=2': the parameters that differ from the router's defaults."""
        defaults = {k: p.default for k, p in get_router(self.router).params.items()}
        return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.params
                         if v != defaults.get(k))


@dataclass(frozen=True)
class Fleet:
    """The serving settings of a sweep (or of advise): everything serve() takes but the
    policy, the capacity and the seed."""

    engine: dict  # serve(engine=...): {"preset": name, override: value} (overrides given only)
    step_model: str  # the step-time model in effect (the preset's unless overridden)
    loads: tuple  # the arrival_speedup axis, ascending
    routes: tuple = (Route(),)  # every (router, replicas) swept: routers as given, replicas ascending
    slo: dict = dataclasses.field(default_factory=dict)  # {"ttft": "2s", "tpot": "100ms"}: the bounds given
    slo_ttft_s: float = math.nan
    slo_tpot_s: float = math.nan
    hardware: dict | None = None  # the hardware mapping when steps are timed on a GPU (ON_A_GPU; else unused)
    model: str | None = None  # fleet.model: the Hugging Face model served (else the sweep's model group)
    roles: tuple = ()  # disaggregated routes' ROLE_KEYS given, as sorted (key, value) pairs (a mapping: sorted pairs)

    @property
    def name(self) -> str:
        return str(self.engine["preset"])

    @property
    def routed(self) -> bool:
        """More than one route swept: the table, the report and advise compare them."""
        return len(self.routes) > 1

    def route(self, label: str = "") -> Route:
        """The route of a label (Route.label; "" = the first)."""
        return self.routes[0] if not label else next(r for r in self.routes if r.label == label)

    def key(self, load: float, route: Route | None = None) -> tuple:
        """The serving settings of one load and route (default: the first), for a curve's
        identity (CurveIdentity.setup). The router's parameters enter only when it has any,
        so a parameterless router keeps the key it had before they existed."""
        r = route or self.routes[0]
        d = {"engine": tuple(sorted(self.engine.items())), "step_model": self.step_model,
             "arrival_speedup": float(load), "replicas": r.replicas, "router": r.router,
             "slo_ttft_s": None if math.isnan(self.slo_ttft_s) else self.slo_ttft_s,
             "slo_tpot_s": None if math.isnan(self.slo_tpot_s) else self.slo_tpot_s}
        if r.params:
            d["router_params"] = r.params
        if r.prefill:  # only then: an aggregated route keeps the key it had before roles existed
            d["prefill_replicas"] = r.prefill
            if self.roles:  # and the handoff's settings only when given: a route without them keeps its key
                d["roles"] = self.roles
        if self.hardware is not None:
            d["hardware"] = tuple(sorted(self.hardware.items()))
        if self.model is not None:
            d["model"] = self.model
        return (("fleet", tuple(sorted(d.items()))),)

    def deployment(self, route: Route | None = None, model=None) -> Deployment:
        """The deployment serve() replays on one route (default: the first): its replicas and
        router, the engine with its overrides, the hardware, the model."""
        r = route or self.routes[0]
        roles = self.role_kwargs() if r.prefill else {}
        return deployment(replicas=r.replicas, engine=dict(self.engine), router=r.router,
                          router_params=dict(r.params) or None, hardware=self.hardware,
                          model=self.model if self.model is not None else model, prefill_replicas=r.prefill, **roles)

    def role_kwargs(self) -> dict:
        """The disaggregated routes' settings as serve() takes them (mappings as dicts)."""
        return {k: dict(v) if isinstance(v, tuple) else v for k, v in self.roles}

    def serve_kwargs(self, route: Route | None = None, model=None) -> dict:
        """serve()'s keywords but the policy, capacity, load and seed, for one route: the
        deployment and the SLO."""
        return {"deployment": self.deployment(route, model), "slo": dict(self.slo) or None}

    def runner_kwargs(self, model) -> dict:
        """What the sweep's actors take (sweep.runner): the SLO, and each route's deployment
        by its label, which a job names."""
        return {"slo": dict(self.slo) or None, "deployments": {r.label: self.deployment(r, model) for r in self.routes}}

    def describe(self) -> str:
        """'engine dynamo (max_num_seqs=64), dynamo step times, 1 replica': for titles."""
        over = ", ".join(f"{k}={v}" for k, v in self.engine.items() if k != "preset")
        hw = f", {self.hardware['part']}" if self.hardware else ""
        hw += f", {self.model}" if self.model else ""
        routers = list(dict.fromkeys(r.router for r in self.routes))
        given = {r.router: r.given() for r in self.routes}
        named = ", ".join(r + (f" ({given[r]})" if given[r] else "") for r in routers)
        reps = sorted({r.replicas for r in self.routes})
        if not self.routed:
            r = self.routes[0]
            fleet = "1 replica" if r.replicas == 1 else f"{r.replicas} replicas behind a {named} router"
        else:
            fleet = (f"{'/'.join(map(str, reps))} replicas behind {'a ' if len(routers) == 1 else ''}"
                     f"{named} router{'s' if len(routers) > 1 else ''}")
        pre = sorted({r.prefill for r in self.routes})
        if pre != [0]:  # disaggregated shapes swept: the replicas above are the decode ones
            fleet += f", {'/'.join(map(str, pre))} prefill replicas"
            if self.roles:
                fleet += " (" + ", ".join(f"{k}=" + (", ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict)
                                                     else str(v)) for k, v in self.role_kwargs().items()) + ")"
        data = f" ({self.step_data()})" if self.step_model == "measured" else ""
        return f"engine {self.name}{f' ({over})' if over else ''}, {self.step_model} step times{data}{hw}, {fleet}"

    def step_data(self) -> str:
        """'vllm 0.24.0 data (aiconfigurator-core 0.12.0)': whose measured step times, which version."""
        c = measured_config(self.deployment())
        return f"{c.backend} {aic.data_version(c.gpu, c.backend)} data (aiconfigurator-core {aic.version()})"

    def params(self, route: str = "") -> dict:
        """MLflow params of a serving curve on a route (its label; the load is the curve's own)."""
        r = self.route(route)
        return {"fleet.engine": self.name, "fleet.step_model": self.step_model, "fleet.replicas": r.replicas,
                "fleet.router": r.router, **{f"fleet.router_params.{k}": v for k, v in r.params},
                **({"fleet.prefill_replicas": r.prefill} if r.prefill else {}),
                **({f"fleet.{k}": v for k, v in self.role_kwargs().items()} if r.prefill else {}),
                **{f"fleet.{k}": v for k, v in self.engine.items() if k != "preset"},
                "fleet.slo_ttft": self.slo.get("ttft"), "fleet.slo_tpot": self.slo.get("tpot"),
                **({"hardware": self.hardware.get("part")} if self.hardware else {}),
                **({"fleet.model": self.model} if self.model else {}),
                **({"fleet.step_data": self.step_data()} if self.step_model == "measured" else {})}

    def tags(self, route: str) -> dict:
        """A serving curve's tags beyond its load: its router and replicas."""
        r = self.route(route)
        return {"router": r.router, "replicas": str(r.replicas), **({"prefill_replicas": str(r.prefill)} if r.prefill
                                                                      else {})}


def _plain(node) -> Any:
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True) if OmegaConf.is_config(node) else node


def _loads(raw) -> tuple:
    values = raw if isinstance(raw, list) else [1 if raw is None else raw]
    if not values:
        raise ConfigError("fleet.arrival_speedup is an empty list: give one speed-up or several, e.g. [1,2,4]")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
            raise ConfigError(f"fleet.arrival_speedup must be a positive number (2 = twice the trace's request "
                              f"rate) or a list of them, got {v!r}")
        out.append(float(v))
    return tuple(sorted(set(out)))


def _axis(raw, key: str) -> list:
    """A scalar or a list (an axis), as a list; an empty list is refused."""
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise ConfigError(f"{key} is an empty list: give one value or several, e.g. [1,2]")
    return values


def routes(f: dict) -> tuple:
    """fleet.replicas x fleet.router x fleet.prefill_replicas (each a scalar or a list), with
    fleet.router_params (router name -> its parameters), checked: every Route, routers as
    given, prefill then replicas ascending (prefill 0: aggregated). ConfigError names the
    field."""
    reps = sorted({check_int(v, "fleet.replicas", 1) for v in _axis(1 if f.get("replicas") is None
                                                                      else f["replicas"], "fleet.replicas")})
    names = []
    for v in _axis(f.get("router") or BASELINE, "fleet.router"):
        if not isinstance(v, str) or v.lower() not in ROUTERS:
            raise ConfigError(f"unknown fleet.router {v!r}; valid: {', '.join(ROUTERS)}")
        names += [v.lower()] if v.lower() not in names else []
    given = f.get("router_params") or {}
    if not isinstance(given, dict):
        raise ConfigError(f"fleet.router_params must map a router to its parameters, e.g. "
                          f"'fleet.router_params={{kv_router:{{overlap_weight:2}}}}', got {given!r}")
    for name, ps in given.items():
        if name not in ROUTERS:
            raise ConfigError(f"fleet.router_params names an unknown router {name!r}; valid: {', '.join(ROUTERS)}")
        if name not in names:
            raise ConfigError(f"fleet.router_params.{name} is given, but {name} is not swept (fleet.router="
                              f"{','.join(names)}): add it to fleet.router or drop its parameters")
        if ps is not None and not isinstance(ps, dict):
            raise ConfigError(f"fleet.router_params.{name} must map parameter names to values, got {ps!r}")
    pre = sorted({check_int(v, "fleet.prefill_replicas", 0) for v in _axis(f.get("prefill_replicas") or 0,
                                                                            "fleet.prefill_replicas")})
    resolved = {}
    for name in names:
        spec = get_router(name)
        for disagg in {p > 0 for p in pre}:
            ps = prefill_pool_params(name, given.get(name)) if disagg else given.get(name)  # as serve fills it
            try:
                got = spec.resolve(ps)
            except ValueError as e:
                raise ConfigError(f"fleet.router_params.{name}: {e}") from None
            # 2 and 2.0 are one setting (one key): numbers as their declared type
            resolved[name, disagg] = tuple(sorted((k, v if spec.params[k].choices else int(v) if spec.params[k].integer
                                                   else float(v)) for k, v in got.items()))
    return tuple(Route(r, name, resolved[name, p > 0], p) for name in names for p in pre for r in reps)


def resolve(cfg, hardware: dict | None) -> Fleet | None:
    """The `fleet` group, checked (ConfigError naming the key); None for fleet=none.
    `hardware` is the hardware group's mapping (sweep.spec.resolve_counting), or None."""
    f = _plain(cfg.get("fleet")) or {}
    unknown = sorted(set(f) - set(KEYS))
    if unknown:
        raise ConfigError(f"fleet has no key(s) {unknown}; valid: {', '.join(KEYS)}")
    if f.get("engine") is None:
        given = [k for k in KEYS if f.get(k) is not None]
        if given:
            raise ConfigError(f"fleet.{given[0]} is set, but no serving engine is: pick fleet=dynamo or "
                              f"fleet=vllm (fleet=none replays the cache without queueing)")
        return None
    engine = {"preset": str(f["engine"])}
    for k in ("max_num_seqs", "max_num_batched_tokens"):
        v = check_int(f.get(k), f"fleet.{k}", 1, allow_none=True, none_means="the preset's")
        if v is not None:
            engine[k] = v
    if f.get("step_model") is not None:
        engine["step_model"] = str(f["step_model"])
    tp = check_int(f.get("tp"), "fleet.tp", 1, allow_none=True, none_means="1")
    if tp is not None:
        engine["tp"] = tp
    if f.get("backend") is not None:
        engine["backend"] = str(f["backend"])
    try:
        eng = as_engine(engine)
    except ValueError as e:
        raise ConfigError(f"fleet: {str(e).replace('engine.', 'fleet.')}") from None
    slo, secs = {}, {}
    for k in ("ttft", "tpot"):
        v = f.get(f"slo_{k}")
        if v is not None:
            try:
                secs[k] = slo_seconds(v, f"fleet.slo_{k}")
            except ValueError as e:
                raise ConfigError(str(e)) from None
            slo[k] = str(v)
    rts = routes(f)
    if eng.step_model in ON_A_GPU and hardware is None:
        raise ConfigError(f"fleet={eng.name}: the {eng.step_model} step model times steps on a GPU: pick one with "
                          f"hardware=h100_sxm (or h200, b200, gh200, l40s), or set fleet.step_model=dynamo")
    model = None if f.get("model") is None else str(f["model"])
    if eng.step_model == "measured" and model is None:
        raise ConfigError(f"fleet={eng.name}: the measured step model times a named model: set fleet.model to a "
                          f"Hugging Face id (e.g. fleet.model=Qwen/Qwen3-30B-A3B)")
    roles = _roles(f, rts)
    fl = Fleet(engine=engine, step_model=eng.step_model, loads=_loads(f.get("arrival_speedup")),
               routes=rts, slo=slo, slo_ttft_s=secs.get("ttft", math.nan), slo_tpot_s=secs.get("tpot", math.nan),
               hardware=hardware if eng.step_model in ON_A_GPU else None, model=model, roles=roles)
    try:  # the model, the GPU and the data exist (aiconfigurator-core), before any job starts
        dep = fl.deployment()
        if eng.step_model == "measured":
            measured_config(dep)
        if roles:  # the handoff's settings as a disaggregated route takes them
            fl.deployment(next(r for r in rts if r.prefill))
    except (ValueError, ImportError) as e:
        msg = str(e).replace('engine.', 'fleet.').replace('model=', 'fleet.model=')
        for k in ROLE_KEYS:  # serve's keyword -> the sweep's key
            msg = re.sub(rf"(?<![.\w]){k}\b", f"fleet.{k}", msg)
        raise ConfigError(f"fleet: {msg}") from None
    return fl


def _roles(f: dict, rts) -> tuple:
    """fleet.prefill_capacity_blocks, decode_router, decode_router_params and kv_transfer as
    sorted pairs (a mapping as sorted pairs); refused where no route is disaggregated."""
    given = {k: f[k] for k in ROLE_KEYS if f.get(k) is not None}
    if given and not any(r.prefill for r in rts):
        raise ConfigError(f"fleet.{sorted(given)[0]} sets the handoff of a disaggregated fleet: give "
                          f"fleet.prefill_replicas >= 1 (or a list with such a value: '[0,2]')")
    out = []
    for k, v in sorted(given.items()):
        if k in ("decode_router_params", "kv_transfer"):
            if not isinstance(v, dict):
                raise ConfigError(f"fleet.{k} must be a mapping, e.g. " + (
                    "'fleet.kv_transfer={bandwidth_bps:5e9,latency_s:0.001}'" if k == "kv_transfer"
                    else "'fleet.decode_router_params={overlap_weight:2}'") + f", got {v!r}")
            v = tuple(sorted(v.items()))
        elif k == "prefill_capacity_blocks":
            v = check_int(v, "fleet.prefill_capacity_blocks", 1)
        else:
            v = str(v)
        out.append((k, v))
    return tuple(out)


def setup(cfg, sp, overrides: list[str]):
    """(the Fleet or None, the sweep's spec under it): fleet.resolve, then for_sweep."""
    fl = resolve(cfg, sp.hardware)
    if fl is None:
        return None, sp
    sp = for_sweep(sp, fl, cfg, overrides)
    return with_tier_links(fl, sp.tiers, sp.hardware), sp


def for_sweep(sp, fl: Fleet, cfg, overrides: list[str]):
    """The sweep's spec under a fleet: exact replay, one pseudo cost model, the policies
    that can serve. Settings that serving does not model are refused (ConfigError)."""
    where = f"fleet={fl.name}"
    if sp.sample_rate is not None:
        raise ConfigError(f"sim.sample_rate={sp.sample_rate:g}: spatial sampling does not preserve queueing; "
                          f"{where} replays the whole trace: set sim.sample_rate=null")
    if sp.tiers:
        check_tiers(sp, fl)
    weeks = int(cfg.trace.get("weeks") or 1)
    if weeks > 1:
        raise ConfigError(f"trace.weeks={weeks} with {where}: independent weeks back to back are not one arrival "
                          f"process to queue; set trace.weeks=1")
    if cfg.sim.get("counting") is not None:
        raise ConfigError(f"sim.counting={cfg.sim.counting} sets how the cache replay counts hits; {where} replays "
                          f"the engine itself (fleet.engine): drop sim.counting")
    for k in ("hbm_admit", "warmup", "window"):
        if sp.counting.get(k) != COUNTING_DEFAULTS[k]:
            raise ConfigError(f"sim.{k}={sp.counting[k]} is not modelled by the serving replay ({where}): leave it "
                              f"at its default ({COUNTING_DEFAULTS[k]})")
    bounds = [p.name for p in sp.policies if get_policy(p.name).bound_of]  # tier_bound: a cache replay's bound
    sp = replace(sp, policies=[p for p in sp.policies if p.name not in bounds])
    why = {p.name: w for p in sp.policies if (w := cannot_serve(p.name))}
    if why and not sp.selected_all:
        name = next(iter(why))
        raise ConfigError(f"policy {name} cannot run in the serving replay ({where}): {why[name]}; leave it out "
                          f"of policy=[...]")
    if why:
        log.warning("%s: policy=all leaves out %s (they cannot run in the serving replay: %s)", where,
                    ", ".join(why), "; ".join(f"{p}: {w}" for p, w in why.items()))
    policies = [p for p in sp.policies if p.name not in why]
    if not policies:
        raise ConfigError(f"no policy left to run with {where}")
    if any(o.split("=", 1)[0].lstrip("+~") == "cost" for o in overrides):
        log.info("%s: cost models do not apply to serving (each point is one serve() result); cost= is ignored",
                 where)
    return replace(sp, sample_rate=None, sample_auto=False, cost_models=[SERVE], policies=policies)


def check_tiers(sp, fl: Fleet) -> None:
    """tier=... with fleet=...: every replica gets the pool (a tier with shared: true is one
    for the fleet); the serving replay loads at a link's bandwidth, so each tier needs
    tier.<name>.bandwidth_bps or a hardware part whose link it names."""
    if as_engine(fl.engine).scheduler != "vllm":
        raise ConfigError(f"tier={sp.tier_name} with fleet={fl.name}: lower tiers are modelled for the vLLM "
                          f"scheduler only (fleet=dynamo or fleet=vllm)")
    if any(r.prefill for r in fl.routes):
        raise ConfigError(f"tier={sp.tier_name} with fleet={fl.name}: a disaggregated route (prefill replicas) runs "
                          f"no lower tiers yet; sweep tiers over aggregated routes")
    for name, _, modes in sp.tiers:
        if any(m.get("bandwidth_bps") is None for m in modes) and sp.hardware is None:
            raise ConfigError(f"tier.{name}.bandwidth_bps is not set and there is no hardware part to take a link "
                              f"from: give tier.{name}.bandwidth_bps (bytes/s; inf copies instantaneously) or "
                              f"hardware=h100_sxm")


def with_tier_links(fl: Fleet, tiers, hardware: dict | None) -> Fleet:
    """The fleet with the hardware its tiers' links come from (part of every curve's key);
    `tiers`: the sweep's tier axes (anything but empty when there are lower tiers)."""
    if tiers and hardware is not None and fl.hardware is None:
        return replace(fl, hardware=hardware)
    return fl


def request_blocks(trace, fl: Fleet) -> np.ndarray:
    """The KV blocks each request of `trace` holds at its end in the engine (prompt and
    output tokens), as serve() counts them: a capacity below the largest can never run it."""
    prompt, out, _ = served_lengths(trace, as_engine(fl.engine))
    return -(-(prompt + out - 1) // int(trace.block_tokens))


def capacities(fl: Fleet, sizes, model, block_tokens: int) -> tuple[list, list[str]]:
    """A fleet sweep's capacity axis (sweep.plan.Capacity, notes): sizes in bytes convert at
    the KV bytes of the fleet's model (fleet.model, else the model group's); `auto` is what
    each replica's GPU memory leaves for KV cache (serve's capacity_blocks=None), labelled auto."""
    dep = fl.deployment(model=model)
    given, notes = [s for s in sizes if s != AUTO], []
    derived = None
    if len(given) < len(sizes):
        try:
            derived, budget = kv_capacity(dep, None, block_tokens)
        except ValueError as e:
            raise ConfigError(f"capacity.sizes=[auto]: {e}") from None
        notes.append(f"auto: {derived:,} blocks per replica ({budget.explain()})")
        given.append(derived)
    caps, more = resolve_capacities(given, dep.model, block_tokens)
    for c in caps:  # where the GPU and model are known, a cache its memory cannot hold: before any job
        try:
            kv_capacity(dep, c.blocks, block_tokens)
        except ValueError as e:
            raise ConfigError(f"capacity.sizes: {c.label}: {e}") from None
    caps = [replace(c, label=AUTO) if c.blocks == derived else c for c in caps]
    return caps, notes + more


def check_capacities(trace, caps, fl: Fleet) -> None:
    """Every request must fit each replica's KV cache, or serve() could never run it."""
    need = request_blocks(trace, fl)
    big = int(need.max()) if len(need) else 0
    small = [c for c in caps if c.blocks < big]
    if small:
        r = int(np.argmax(need))
        gib = big * small[0].gib / small[0].blocks  # the model's KV bytes per block, as the capacities were converted
        raise ConfigError(
            f"capacity.sizes: {', '.join(f'{c.label} ({c.blocks:,} blocks)' for c in small)} cannot hold request {r} "
            f"({big:,} blocks of {trace.block_tokens} tokens with its output) in one replica's KV cache, so it could "
            f"never run (fleet={fl.name}): the smallest capacity that holds every request is {big:,} blocks "
            f"({human_gib(gib, digits=3)}); drop the smaller ones from capacity.sizes or start it there")


def variants(policies, fl: Fleet, pools=(("", ()),)) -> list:
    """Every policy once per load, route (spec.PolicyChoice with its `load` and `route`,
    the Route's label) and pool of lower tiers (its `pool` label and `tiers`)."""
    return [replace(p, load=x, route=r.label, pool=label, tiers=tuple(tiers), one_pass=False)
            for label, tiers in pools for x in fl.loads for r in fl.routes for p in policies]


def identity(fl: Fleet, p, *, trace: str, simulator: str, seed: int, model) -> CurveIdentity:
    """A serving curve's identity: its own mode and cost model, and every serving setting
    (Fleet.key), so it never shares a key with a cache replay, another load or route."""
    tiers = tuple(tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in t.items()))
                  for t in p.tiers)
    return CurveIdentity.make(trace=trace, policy=p.name, params=p.params, mode=SERVE, hits="prefix", seed=seed,
                              cost_model=SERVE, model=model, simulator=simulator, order="",
                              setup=fl.key(p.load, fl.route(p.route)) + ((("tiers", tiers),) if tiers else ()))


def curves(fl: Fleet, variants, blocks: tuple, **ident) -> list[Curve]:
    """One curve per (policy, load, route) of `variants` over the capacities `blocks`;
    `ident`: identity()'s trace, simulator, seed and model."""
    return [Curve(p.name, SERVE, identity(fl, p, **ident), blocks, load=p.load, route=p.route, pool=p.pool)
            for p in variants]
