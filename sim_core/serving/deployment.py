"""A deployment: the one typed description of what `serve` replays a trace through.

Its replicas, the serving engine (preset and overrides: scheduler limits, step-time model,
tensor parallelism), the router with its parameters, the tiers below each replica's HBM,
the hardware and the model. `serve`, the sweep's fleet group (sweep.fleet) and any search
over deployments build one with `deployment(...)` (every field checked once, the error
naming the field) and pass it on; the policy, the KV capacity and the load stay arguments of
the replay, not of the deployment. `simulate` shares its option types (tiers:
sim_core.tiers.spec; hardware: sim_core.catalog.hardware; model:
sim_core.catalog.models).

`model` is one of sim_core.catalog.models (the roofline's and cost models' built-in
configs), a Hugging Face id bundled with aiconfigurator-core, or a local directory holding
config.json (its shape read by sim_core.catalog.hfarch). `hardware` is a
sim_core.catalog.hardware part or one of aiconfigurator-core's GPUs
(sim_core.catalog.gpus). With a GPU and a standard-attention Hugging Face model the KV
cache is derived from memory (`kv_capacity`, sim_core.catalog.kvmemory).
"""
from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass, fields
from typing import Mapping

from ..catalog.gpus import GPUS, resolve_hardware
from ..catalog.hardware import Hardware
from ..catalog.kvmemory import KVBudget, check_capacity, derived_capacity, fits, kv_budget
from ..catalog.models import MODELS, QWEN3_CODER_30B, ModelConfig, get_model
from ..tiers.spec import as_tier_specs
from .engines import ServeEngine, as_engine
from .measured import aic
from .measured.tables import configure
from .routers import get_router

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deployment:
    """What serves the trace (checked: build it with `deployment(...)`)."""

    replicas: int = 1  # engines behind the router, each with its own KV cache
    engine: ServeEngine = as_engine("dynamo")  # the serving engine: preset with its overrides
    router: str = "round_robin"  # a name of sim_core.ROUTERS
    router_params: tuple = ()  # the router's parameters, defaults filled in, as sorted (name, value) pairs
    tiers: tuple = ()  # sim_core.tiers.spec.TierSpec under each replica's HBM, top down
    hardware: Hardware | None = None  # the GPU part (roofline step times, tier links), or None
    model: ModelConfig = QWEN3_CODER_30B  # the served model (FLOPs, KV bytes): the roofline's and cost models' view
    overlap: bool = True  # tier loads overlap the step's compute (layer by layer) or add to it
    gpu: str | None = None  # aiconfigurator-core's system name of the GPU (measured steps, KV from memory)
    model_ref: object = None  # measured.aic.ModelRef: the Hugging Face model, when one was named

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
        if self.gpu is not None or self.hardware is not None:
            parts.append(f"on {self.gpu or self.hardware.name}")
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
    mdl, ref = served_model(model)
    hw, gpu = resolve_hardware(hardware)
    return Deployment(replicas=int(replicas), engine=as_engine(engine), router=spec.name,
                      router_params=tuple(sorted(got.items())), tiers=tuple(serving_tiers(tiers)),
                      hardware=hw, model=mdl, overlap=overlap, gpu=gpu, model_ref=ref)


def served_model(model) -> tuple[ModelConfig, object]:
    """(the ModelConfig the roofline and cost models read, the Hugging Face model or None)."""
    if model is None:
        return QWEN3_CODER_30B, None
    if isinstance(model, str) and model not in MODELS:
        ref = aic.resolve_model(model)
        return ref.arch.model_config(), ref
    return get_model(model), None


def kv_capacity(dep: Deployment, capacity_blocks, block_tokens: int) -> tuple[int, KVBudget | None]:
    """(each replica's KV cache in blocks, what GPU memory leaves for it or None). A given
    capacity is checked against memory where the GPU and model are known; None (or "auto")
    derives it from memory."""
    eng, ref = dep.engine, dep.model_ref
    budget = None
    if ref is not None and dep.gpu is not None and fits(ref.arch):
        budget = kv_budget(ref.arch, dep.gpu, eng.tp, float(eng.gpu_memory_utilization), eng.max_num_batched_tokens,
                           eng.max_num_seqs, block_tokens)
    name = ref.name if ref else dep.model.name
    if capacity_blocks is None or isinstance(capacity_blocks, str) and capacity_blocks == "auto":
        if budget is None:
            raise ValueError(f"capacity_blocks={capacity_blocks!r} derives the KV cache from GPU memory: it needs "
                             f"hardware= one of {', '.join(GPUS)} (got {dep.gpu or dep.hardware!r}) and model= a "
                             f"standard-attention Hugging Face model, bundled with {aic.PACKAGE} or a local "
                             f"directory holding config.json (got {dep.model.name!r})")
        cap = derived_capacity(budget, name, eng.tp)
        log.info("KV cache from memory: %s", budget.explain())
        return cap, budget
    if isinstance(capacity_blocks, bool) or not isinstance(capacity_blocks, numbers.Integral) or capacity_blocks < 1:
        raise ValueError(f"capacity_blocks must be a positive integer, or None (or 'auto') to derive it from GPU "
                         f"memory, got {capacity_blocks!r}")
    if budget is not None:
        check_capacity(int(capacity_blocks), budget, name, eng.tp)
    return int(capacity_blocks), budget


def measured_config(dep: Deployment):
    """The measured step model's configuration; ValueError naming the field."""
    if dep.model_ref is None:
        raise ValueError(f"step_model=measured needs model= a Hugging Face id bundled with {aic.PACKAGE} or a local "
                         f"directory holding config.json (got {dep.model.name!r})")
    return configure(dep.model_ref.name, dep.gpu or (dep.hardware.name if dep.hardware else None),
                     dep.engine.data_backend, dep.engine.tp, dep.engine.moe_tp, dep.engine.moe_ep)


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
