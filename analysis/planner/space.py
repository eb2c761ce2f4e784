"""The space a plan searches: its axes, the candidate deployments, and what each costs.

A candidate is one value per axis: the GPU part, tensor parallelism, prefill replicas (0:
an aggregated fleet; P > 0: P prefill replicas beside `replicas` decode replicas,
docs/disagg.md), replicas, the router and the eviction policy. Its *shape* is every axis
but the replicas: the planner bisects over the (decode) replicas of one shape, P fixed
(docs/planning.md). Its *group* is what the answer names a runner-up for: the GPU part,
aggregated or disaggregated.

Prices are per GPU-hour by part (and per GB-hour of host memory, for the host tiers to
come), read from conf/prices/default.yaml unless given; the answer names the prices it used.
"""
from __future__ import annotations

import itertools
import math
import numbers
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping

from omegaconf import OmegaConf

from sim_core import ROUTERS
from sim_core.catalog.hardware import PARTS
from sim_core.policies import get_policy
from sim_core.serving import cannot_serve
from sweep.config import find_conf_dir

#: axes that belong to shapes still being built: named, so that giving one says why it is refused
LATER = {"host_pool": "host tiers and shared pools under a fleet are not modelled yet"}


@dataclass(frozen=True, order=True)
class Candidate:
    """One deployment of the space (the fields are its axes, in the order a label reads them)."""

    gpu: str
    tp: int
    replicas: int
    router: str
    policy: str
    prefill_replicas: int = 0  # 0: aggregated; else the prefill role's replicas (`replicas` decode)

    @property
    def shape(self) -> tuple:
        """Every axis but the replicas: a bisection runs over the replicas of one shape."""
        return tuple(getattr(self, a) for a in AXES if a != "replicas")

    @property
    def group(self) -> str:
        """What the answer names a runner-up for: the GPU part, and 'disaggregated' after it
        for a prefill/decode fleet (an aggregated group is the part's name alone)."""
        return self.gpu + (" disaggregated" if self.prefill_replicas else "")

    @property
    def gpus(self) -> int:
        """Every GPU paid for: both roles' replicas, each of tp GPUs."""
        return (self.prefill_replicas + self.replicas) * self.tp

    def axes(self) -> dict:
        return {a: getattr(self, a) for a in AXES}

    def label(self) -> str:
        """'4 x h100_sxm (tp 2) behind kv_router, lru'; '2 prefill + 3 decode x h100_sxm ...'."""
        tp = f" (tp {self.tp})" if self.tp > 1 else ""
        n = f"{self.prefill_replicas} prefill + {self.replicas} decode" if self.prefill_replicas else str(self.replicas)
        return f"{n} x {self.gpu}{tp} behind {self.router}, {self.policy}"


AXES = tuple(f.name for f in fields(Candidate))


@dataclass(frozen=True)
class Space:
    """The values of each axis (replicas ascending, the others as given)."""

    gpu: tuple
    tp: tuple
    replicas: tuple
    router: tuple
    policy: tuple
    prefill_replicas: tuple = (0,)

    @property
    def size(self) -> int:
        return math.prod(len(getattr(self, a)) for a in AXES)

    def shapes(self) -> list[tuple]:
        """Every shape, in the space's order."""
        return list(itertools.product(*(getattr(self, a) for a in AXES if a != "replicas")))

    def lane(self, shape: tuple) -> list[Candidate]:
        """The candidates of one shape, replicas ascending."""
        named = dict(zip([a for a in AXES if a != "replicas"], shape))
        return [Candidate(replicas=r, **named) for r in self.replicas]

    def describe(self) -> str:
        reps = self.replicas
        span = f"{reps[0]}..{reps[-1]}" if list(reps) == list(range(reps[0], reps[-1] + 1)) and len(reps) > 2 \
            else ",".join(map(str, reps))
        pre = "" if self.prefill_replicas == (0,) else f" x prefill {'/'.join(map(str, self.prefill_replicas))}"
        return (f"{' | '.join(self.gpu)} x tp {'/'.join(map(str, self.tp))}{pre} x replicas {span} x "
                f"{' | '.join(self.router)} x {' | '.join(self.policy)}: {self.size} candidates")


def as_space(space: Mapping | None, *, gpu=None, policy: str = "lru") -> Space:
    """A checked Space from {axis: value or list}. An axis left out takes `gpu` (the GPU
    part; default h100_sxm), tp 1, prefill_replicas 0 (aggregated), round_robin, or
    `policy`. Errors name the field."""
    if space is None:
        space = {}
    if not isinstance(space, Mapping):
        raise ValueError(f"space must map axes to values, e.g. {{'replicas': [1, 2, 4]}}, got {space!r}")
    for k in space:
        if k in LATER:
            raise ValueError(f"space.{k}: not searchable yet: {LATER[k]}")
    unknown = sorted(set(space) - set(AXES))
    if unknown:
        raise ValueError(f"space has no axis {unknown[0]!r}; valid: {', '.join(AXES)}")
    given = {"gpu": gpu or "h100_sxm", "tp": 1, "prefill_replicas": 0, "replicas": 1, "router": "round_robin",
             "policy": policy,
             **{k: v for k, v in space.items() if v is not None}}
    vals = {a: _values(given[a], f"space.{a}") for a in AXES}
    gpus = [str(g).lower() for g in vals["gpu"]]
    for g in gpus:
        if g not in PARTS:
            raise ValueError(f"space.gpu: unknown part {g!r}; valid: {', '.join(PARTS)}")
    for a, least in (("tp", 1), ("prefill_replicas", 0), ("replicas", 1)):
        for v in vals[a]:
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < least:
                raise ValueError(f"space.{a} must hold {'positive' if least else 'non-negative'} integers"
                                 f"{' (0: aggregated)' if not least else ''}, got {v!r}")
    routers = [str(r).lower() for r in vals["router"]]
    for r in routers:
        if r not in ROUTERS:
            raise ValueError(f"space.router: unknown router {r!r}; valid: {', '.join(ROUTERS)}")
    policies = [get_policy(str(p)).name for p in vals["policy"]]
    for p in policies:
        why = cannot_serve(p)
        if why:
            raise ValueError(f"space.policy: {p} cannot run in the serving replay: {why}")
    return Space(gpu=_unique(gpus), tp=_unique(int(v) for v in vals["tp"]),
                 prefill_replicas=tuple(sorted({int(v) for v in vals["prefill_replicas"]})),
                 replicas=tuple(sorted({int(v) for v in vals["replicas"]})), router=_unique(routers),
                 policy=_unique(policies))


def _values(v, where: str) -> list:
    """A scalar, a list, or a range 'a..b' (inclusive), as a non-empty list."""
    if isinstance(v, str) and re.fullmatch(r"\s*\d+\s*\.\.\s*\d+\s*", v):
        a, b = (int(x) for x in v.split(".."))
        v = list(range(a, b + 1))
    out = list(v) if isinstance(v, (list, tuple, range)) else [v]
    if not out:
        raise ValueError(f"{where} is empty: give at least one value")
    return out


def _unique(xs) -> tuple:
    return tuple(dict.fromkeys(xs))


# ---------------------------------------------------------------------------- prices
PRICES_FILE = "prices/default.yaml"


@dataclass(frozen=True)
class Prices:
    """What a deployment costs per hour: each GPU part's price per GPU-hour, and host
    memory per GB-hour (for host tiers and pools, not searched yet)."""

    gpu: Mapping  # part -> $ per GPU-hour
    host_memory_gb_hour: float
    currency: str = "USD"
    source: str = ""  # where the numbers come from, and when

    def per_hour(self, c: Candidate) -> float:
        return c.gpus * float(self.gpu[c.gpu])

    def describe(self, parts) -> str:
        """'h100_sxm 3.00, h200 4.00 USD per GPU-hour (source)'."""
        return (", ".join(f"{p} {float(self.gpu[p]):.2f}" for p in parts) + f" {self.currency} per GPU-hour"
                + (f" ({self.source})" if self.source else ""))

    def to_dict(self) -> dict:
        return {"gpu": dict(self.gpu), "host_memory_gb_hour": self.host_memory_gb_hour,
                "currency": self.currency, "source": self.source}


def default_prices() -> dict:
    """conf/prices/default.yaml as a plain mapping (the one place the defaults live)."""
    path = Path(find_conf_dir()) / PRICES_FILE
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def as_prices(prices: Mapping | Prices | None, parts) -> Prices:
    """Prices over the defaults (a mapping's keys replace theirs; gpu prices merge per part),
    checked for every GPU part of the space: a part without a price is an error naming it."""
    if isinstance(prices, Prices):
        p = prices
    else:
        if prices is not None and not isinstance(prices, Mapping):
            raise ValueError(f"prices must be a mapping such as {{'gpu': {{'h100_sxm': 3.0}}}}, got {prices!r}")
        base = default_prices()
        given = dict(prices or {})
        unknown = sorted(set(given) - {"gpu", "host_memory_gb_hour", "currency", "source"})
        if unknown:
            raise ValueError(f"prices has no key {unknown[0]!r}; valid: gpu, host_memory_gb_hour, currency, source")
        gpu = given.get("gpu") or {}
        if not isinstance(gpu, Mapping):
            raise ValueError(f"prices.gpu must map GPU parts to a price per GPU-hour, got {gpu!r}")
        merged = {**(base.get("gpu") or {}), **{str(k).lower(): v for k, v in gpu.items()}}
        src = given.get("source") or str(base.get("source", "")) + (
            f"; given: {', '.join(sorted(gpu))}" if gpu else "")
        p = Prices(gpu={k: v for k, v in merged.items() if v is not None},
                   host_memory_gb_hour=given.get("host_memory_gb_hour", base.get("host_memory_gb_hour")),
                   currency=str(given.get("currency") or base.get("currency") or "USD"), source=str(src))
    for part in parts:
        if part not in p.gpu:
            raise ValueError(f"prices.gpu.{part}: GPU {part} of the space has no price; give one (per GPU-hour), "
                             f"e.g. prices.gpu.{part}=3.5 on the command line or prices={{'gpu': {{'{part}': 3.5}}}}")
        _positive(p.gpu[part], f"prices.gpu.{part}")
    _positive(p.host_memory_gb_hour, "prices.host_memory_gb_hour", zero=True)
    return p


def _positive(v, where: str, zero: bool = False) -> None:
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if zero else v > 0)
    if not ok:
        raise ValueError(f"{where} must be a {'non-negative' if zero else 'positive'} number, got {v!r}")
