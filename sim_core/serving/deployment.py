"""A deployment: the one typed description of what `serve` replays a trace through.

Its replicas, the serving engine (preset and overrides: scheduler limits, step-time model,
tensor parallelism), the router with its parameters, the tiers below each replica's HBM,
the hardware and the model. `serve`, the sweep's fleet group (sweep.fleet) and any search
over deployments build one with `deployment(...)` (every field checked once, the error
naming the field) and pass it on; the policy, the KV capacity and the load stay arguments of
the replay, not of the deployment. `simulate` shares its option types (tiers:
sim_core.tiers.spec; hardware: sim_core.catalog.hardware; model:
sim_core.catalog.models).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, fields
from typing import Mapping

from ..catalog.hardware import Hardware, as_hardware
from ..catalog.models import QWEN3_CODER_30B, ModelConfig, get_model
from ..tiers.spec import as_tier_specs
from .engines import ServeEngine, as_engine
from .routers import get_router


@dataclass(frozen=True)
class Deployment:
    """What serves the trace (checked: build it with `deployment(...)`)."""

    replicas: int = 1  # engines behind the router, each with its own KV cache
    engine: ServeEngine = as_engine("dynamo")  # the serving engine: preset with its overrides
    router: str = "round_robin"  # a name of sim_core.ROUTERS
    router_params: tuple = ()  # the router's parameters, defaults filled in, as sorted (name, value) pairs
    tiers: tuple = ()  # sim_core.tiers.spec.TierSpec under each replica's HBM, top down
    hardware: Hardware | None = None  # the GPU part (roofline step times, tier links), or None
    model: ModelConfig = QWEN3_CODER_30B  # the served model (FLOPs, KV bytes)
    overlap: bool = True  # tier loads overlap the step's compute (layer by layer) or add to it

    @property
    def tp(self) -> int:
        """GPUs per replica (tensor parallelism)."""
        return self.engine.tp

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    def describe(self) -> str:
        """'4 x dynamo (max_num_seqs=64) behind kv_router, on h100_sxm, tiers dram': one line."""
        base = as_engine(self.engine.name)
        over = [f"{f.name}={getattr(self.engine, f.name)}" for f in fields(ServeEngine)
                if f.name != "name" and getattr(self.engine, f.name) != getattr(base, f.name)]
        eng = self.engine.name + (f" ({', '.join(over)})" if over else "")
        rp = ", ".join(f"{k}={v}" for k, v in self.router_params)
        parts = [f"{self.replicas} x {eng}" + (f" behind {self.router}" + (f" ({rp})" if rp else "")
                                               if self.replicas > 1 else "")]
        if self.hardware is not None:
            parts.append(f"on {self.hardware.name}")
        if self.tiers:
            parts.append("tiers " + ", ".join(t.name for t in self.tiers))
        return ", ".join(parts)


# the keyword forms serve() accepts for a deployment's fields
FIELDS = tuple(f.name for f in fields(Deployment))


def deployment(*, replicas: int = 1, engine="dynamo", router: str = "round_robin", router_params: Mapping | None = None,
               tiers=None, hardware=None, model=None, overlap: bool = True) -> Deployment:
    """A checked Deployment. `engine` is a preset name of sim_core.serving.ENGINES, a mapping
    {"preset": name, key: override} or a ServeEngine; `tiers` a list of tier mappings as
    `simulate` takes them (the serving replay's rules: sim_core.serving.serving_tiers);
    `hardware` a part name or a mapping with overrides; `model` a name of
    sim_core.catalog.models.MODELS or a ModelConfig."""
    if isinstance(replicas, bool) or not isinstance(replicas, numbers.Integral) or replicas < 1:
        raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
    if not isinstance(router, str):
        raise ValueError(f"router must be a router's name, got {router!r}")
    spec = get_router(router)
    got = spec.resolve(router_params)
    if not isinstance(overlap, bool):
        raise ValueError(f"overlap must be true or false, got {overlap!r}")
    return Deployment(replicas=int(replicas), engine=as_engine(engine), router=spec.name,
                      router_params=tuple(sorted(got.items())), tiers=tuple(serving_tiers(tiers)),
                      hardware=as_hardware(hardware),
                      model=get_model(model) if model is not None else QWEN3_CODER_30B, overlap=overlap)


def serving_tiers(tiers) -> list:
    """The lower tiers of a serving replay: it refreshes a tier's copy on loads only
    (touch=loads, its default here) and models write on_evict/on_compute with all,
    after_hits or doorkeeper admission; the engines' other rules are simulate()'s."""
    specs = as_tier_specs([{"touch": "loads", **(t if isinstance(t, dict) else t.__dict__)} for t in tiers or []])
    for s in specs:
        if s.touch != "loads" or s.promote or s.write == "on_hit" or s.admit.split("=")[0] in ("lookups",
                                                                                             "frequency"):
            raise ValueError(f"tier {s.name!r}: the serving replay does not model touch=request, promote, "
                             f"write=on_hit or lookups/frequency admission (simulate() does)")
    return specs
