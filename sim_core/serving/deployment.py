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
from dataclasses import dataclass, fields, replace
from typing import Mapping

from ..catalog.gpus import GPUS, resolve_hardware
from ..catalog.hardware import Hardware
from ..catalog.kvmemory import KVBudget, check_capacity, derived_capacity, fits, kv_budget
from ..catalog.models import MODELS, QWEN3_CODER_30B, ModelConfig, get_model
from ..tiers.rules import ENGINE_HIERARCHY, hierarchy_rules, with_rules
from ..tiers.spec import as_tier_specs
from .decode_routers import dynamo_decode_router, get_decode_router
from .engines import ServeEngine, as_engine
from .measured import aic
from .measured.tables import configure
from .routers import get_router
from .transfer import KVTransfer
from .transfer import kv_transfer as as_kv_transfer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deployment:
    """What serves the trace (checked: build it with `deployment(...)`)."""

    replicas: int = 1  # engines behind the router, each with its own KV cache
    engine: ServeEngine = as_engine("dynamo")  # the serving engine: preset with its overrides
    router: str = "round_robin"  # a name of sim_core.ROUTERS
    router_params: tuple = ()  # the router's parameters, defaults filled in, as sorted (name, value) pairs
    tiers: tuple = ()  # sim_core.tiers.spec.TierSpec under each replica's HBM, top down (a shared one: the fleet's)
    hardware: Hardware | None = None  # the GPU part (roofline step times, tier links), or None
    model: ModelConfig = QWEN3_CODER_30B  # the served model (FLOPs, KV bytes): the roofline's and cost models' view
    overlap: bool = True  # tier loads overlap the step's compute (layer by layer) or add to it
    gpu: str | None = None  # aiconfigurator-core's system name of the GPU (measured steps, KV from memory)
    model_ref: object = None  # measured.aic.ModelRef: the Hugging Face model, when one was named
    # a disaggregated fleet (sim_core.serving.handoff, docs/disagg.md): prefill_replicas > 0
    # prefill engines before the `replicas` decode engines; 0 is the aggregated fleet
    prefill_replicas: int = 0
    prefill_engine: ServeEngine | None = None  # the prefill role's engine (None: `engine`)
    prefill_capacity_blocks: int | None = None  # each prefill replica's KV blocks (None: serve's capacity_blocks)
    decode_router: str = ""  # a name of decode_routers.DECODE_ROUTERS ("" when aggregated)
    decode_router_params: tuple = ()  # its parameters, as sorted (name, value) pairs
    kv_transfer: KVTransfer | None = None  # the handoff's KV transfer (None: free, as Dynamo's default)
    hierarchy: str | None = None  # whose rules filled the tiers' unset ones (sim_core.tiers.rules), None without tiers

    def with_tiers(self, tiers, hierarchy: str | None = None) -> "Deployment":
        """This deployment over other lower tiers (mappings as deployment() takes them),
        checked; the rules they leave out from `hierarchy`, else this deployment's."""
        rules = engine_hierarchy(self.engine, hierarchy or self.hierarchy)
        specs = tuple(serving_tiers(tiers, rules))
        return replace(self, tiers=specs, hierarchy=rules if specs else None)

    @property
    def tp(self) -> int:
        """GPUs per replica (tensor parallelism)."""
        return self.engine.tp

    @property
    def disaggregated(self) -> bool:
        return self.prefill_replicas > 0

    @property
    def prefill(self) -> ServeEngine:
        """The prefill role's engine."""
        return self.prefill_engine or self.engine

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp + self.prefill_replicas * self.prefill.tp

    def describe(self) -> str:
        """'4 x dynamo (max_num_seqs=64) behind kv_router, on h100_sxm, tiers dram': one line."""
        base = as_engine(self.engine.name)
        over = [f"{f.name}={getattr(self.engine, f.name)}" for f in fields(ServeEngine)
                if f.name != "name" and getattr(self.engine, f.name) != getattr(base, f.name)]
        eng = self.engine.name + (f" ({', '.join(over)})" if over else "")
        rp = ", ".join(f"{k}={v}" for k, v in self.router_params)
        if self.disaggregated:
            pre = self.prefill.name if self.prefill_engine is not None else eng
            dp = ", ".join(f"{k}={v}" for k, v in self.decode_router_params)
            parts = [f"{self.prefill_replicas} prefill x {pre} behind {self.router}" + (f" ({rp})" if rp else ""),
                     f"{self.replicas} decode x {eng} behind {self.decode_router}" + (f" ({dp})" if dp else "")]
            if self.kv_transfer is not None:
                parts.append(self.kv_transfer.describe())
        else:
            parts = [f"{self.replicas} x {eng}" + (f" behind {self.router}" + (f" ({rp})" if rp else "")
                                                   if self.replicas > 1 else "")]
        if self.gpu is not None or self.hardware is not None:
            parts.append(f"on {self.gpu or self.hardware.name}")
        if self.tiers:
            parts.append("tiers " + ", ".join(t.name + (" (shared)" if t.shared else "") for t in self.tiers)
                         + f" [{self.hierarchy}]")
        return ", ".join(parts)


# the keyword forms serve() accepts for a deployment's fields
FIELDS = tuple(f.name for f in fields(Deployment))


def deployment(*, replicas: int = 1, engine="dynamo", router: str = "round_robin", router_params: Mapping | None = None,
               tiers=None, hardware=None, model=None, overlap: bool = True, prefill_replicas: int = 0,
               prefill_engine=None, prefill_capacity_blocks: int | None = None, decode_router: str | None = None,
               decode_router_params: Mapping | None = None, kv_transfer=None,
               hierarchy: str | None = None) -> Deployment:
    """A checked Deployment. `engine` is a preset name of sim_core.serving.ENGINES, a mapping
    {"preset": name, key: override} or a ServeEngine; `tiers` a list of tier mappings as
    `simulate` takes them, each replica's own unless marked shared (one pool for the fleet);
    the rules a tier leaves out come from `hierarchy` (a name of sim_core.tiers.rules.HIERARCHIES)
    or else the engine's (ENGINE_HIERARCHY: Dynamo's and vLLM's CPU offload, SGLang's HiCache);
    `hardware` a part name or a mapping with overrides; `model` a name of
    sim_core.catalog.models.MODELS or a ModelConfig.

    prefill_replicas > 0 disaggregates the fleet: that many prefill replicas (engine
    `prefill_engine`, default `engine`; KV `prefill_capacity_blocks`, default serve's
    capacity_blocks) behind `router`, and `replicas` decode replicas behind
    `decode_router` (sim_core.serving.decode_routers; default: the one Dynamo pairs with
    `router`), the KV moving as `kv_transfer` says (sim_core.serving.transfer; default:
    free)."""
    if isinstance(replicas, bool) or not isinstance(replicas, numbers.Integral) or replicas < 1:
        raise ValueError(f"replicas must be a positive integer, got {replicas!r}")
    if not isinstance(router, str):
        raise ValueError(f"router must be a router's name, got {router!r}")
    spec = get_router(router)
    if not isinstance(overlap, bool):
        raise ValueError(f"overlap must be true or false, got {overlap!r}")
    mdl, ref = served_model(model)
    hw, gpu = resolve_hardware(hardware)
    eng = as_engine(engine)
    roles = disaggregation(prefill_replicas, prefill_engine, prefill_capacity_blocks, decode_router,
                           decode_router_params, kv_transfer, spec.name, eng, mdl)
    if roles:
        eng = dynamo_rounding(eng)
    if roles.get("prefill_replicas"):
        router_params = prefill_pool_params(spec.name, router_params)
    got = spec.resolve(router_params)
    rules = engine_hierarchy(eng, hierarchy)
    specs = tuple(serving_tiers(tiers, rules))
    if specs and roles.get("prefill_replicas"):
        raise ValueError("tiers with prefill_replicas > 0 are not modelled: give no tiers, or an aggregated fleet")
    return Deployment(replicas=int(replicas), engine=eng, router=spec.name,
                      router_params=tuple(sorted(got.items())), tiers=specs,
                      hardware=hw, model=mdl, overlap=overlap, gpu=gpu, model_ref=ref,
                      hierarchy=rules if specs else None, **roles)


def disaggregation(prefill_replicas, prefill_engine, prefill_capacity_blocks, decode_router, decode_router_params,
                   kv_transfer, router: str, engine: ServeEngine, model: ModelConfig) -> dict:
    """The Deployment fields of the roles, checked (ValueError naming the field); {} when
    prefill_replicas is 0 (the aggregated fleet)."""
    if isinstance(prefill_replicas, bool) or not isinstance(prefill_replicas, numbers.Integral) or prefill_replicas < 0:
        raise ValueError(f"prefill_replicas must be an integer >= 0 (0: an aggregated fleet), got {prefill_replicas!r}")
    given = {k: v for k, v in (("prefill_engine", prefill_engine), ("prefill_capacity_blocks", prefill_capacity_blocks),
                               ("decode_router", decode_router), ("decode_router_params", decode_router_params),
                               ("kv_transfer", kv_transfer)) if v is not None}
    if prefill_replicas == 0:
        if given:
            raise ValueError(f"{sorted(given)[0]} applies to a disaggregated fleet: give prefill_replicas >= 1 "
                             f"(prefill replicas beside the `replicas` decode replicas)")
        return {}
    pre = as_engine(prefill_engine) if prefill_engine is not None else None
    for role, e in (("engine", engine), ("prefill_engine", pre or engine)):
        if e.scheduler != "vllm":
            raise ValueError(f"{role}: a disaggregated fleet is modelled with vLLM's scheduler (Dynamo's source-first "
                             f"handoff), not engine {e.name!r}'s {e.scheduler} scheduler (SGLang's destination-first "
                             f"handoff is not modelled yet)")
    cap = prefill_capacity_blocks
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 1):
        raise ValueError(f"prefill_capacity_blocks must be a positive integer (None: capacity_blocks), got {cap!r}")
    dspec = get_decode_router(decode_router if decode_router is not None else dynamo_decode_router(router))
    dgot = dspec.resolve(decode_router_params)
    return {"prefill_replicas": int(prefill_replicas), "prefill_engine": pre and dynamo_rounding(pre),
            "prefill_capacity_blocks": None if cap is None else int(cap), "decode_router": dspec.name,
            "decode_router_params": tuple(sorted(dgot.items())),
            "kv_transfer": as_kv_transfer(kv_transfer, model.kv_bytes_per_token)}


def prefill_pool_params(router: str, given) -> dict:
    """The parameters of `router` in front of a disaggregated fleet's prefill pool, `given`
    over its defaults there: Dynamo's kv_router tracks no active blocks on a prefill pool."""
    return {"active_blocks": 0.0, **dict(given or {})} if router == "kv_router" else dict(given or {})


def dynamo_rounding(eng: ServeEngine) -> ServeEngine:
    """A disaggregated fleet's engine with Dynamo's step model times prefills at Dynamo's
    integer means (stepmodel.DYNAMO_OPTIONS round_means) unless told otherwise: which prefill
    completes first decides the decode round robin, and a token's difference reorders it."""
    if eng.step_model != "dynamo" or "round_means" in eng.step_params:
        return eng
    return replace(eng, step_params={**eng.step_params, "round_means": 1})


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


def engine_hierarchy(eng: ServeEngine, hierarchy: str | None = None) -> str:
    """Whose rules fill the tiers' unset ones: `hierarchy` if given (checked), else the
    engine preset's (ENGINE_HIERARCHY), else its scheduler's."""
    if hierarchy is not None:
        if not isinstance(hierarchy, str):
            raise ValueError(f"hierarchy must be an engine hierarchy's name, got {hierarchy!r}")
        hierarchy_rules(hierarchy)
        return hierarchy
    return ENGINE_HIERARCHY.get(eng.name, ENGINE_HIERARCHY[eng.scheduler])


def serving_tiers(tiers, hierarchy: str = "vllm_cpu") -> list:
    """The lower tiers of a serving replay: every rule simulate() runs (writes, admission,
    touches, promotion, the full-pool rule), those a tier leaves out from `hierarchy`; a
    tier marked shared is one pool for the fleet (sim_core.serving.tiers)."""
    given = [t if isinstance(t, Mapping) else dict(t.__dict__) for t in tiers or []]
    return as_tier_specs(with_rules(given, hierarchy))
