"""What `serve` runs on: the hardware part, the GPU, the model and the KV cache it leaves.

`model` is one of sim_core.models (the roofline's and cost models' built-in configs), or
a Hugging Face id bundled with aiconfigurator-core, or a local directory holding
config.json (its shape read by sim_core.serving.hfarch). `hardware` is a sim_core.hardware
part or one of aiconfigurator-core's GPUs (sim_core.serving.gpus). With a GPU and a
standard-attention Hugging Face model the KV cache is derived from memory
(sim_core.serving.kvmemory): `capacity_blocks=None` takes it, and a larger one is refused.
"""
from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass

from ..models import MODELS, QWEN3_CODER_30B, ModelConfig, get_model
from . import aic
from .engines import ServeEngine
from .gpus import GPUS, resolve_hardware
from .kvmemory import KVBudget, check_capacity, derived_capacity, fits, kv_budget

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deployment:
    hw: object  # sim_core.hardware.Hardware or None
    gpu: str | None  # aiconfigurator-core's system name
    mdl: ModelConfig  # the roofline's and cost models' view
    ref: aic.ModelRef | None  # the Hugging Face model, when one was named
    budget: KVBudget | None  # the KV cache memory leaves (GPU and HF model known)
    capacity: int  # blocks per replica


def served_model(model) -> tuple[ModelConfig, aic.ModelRef | None]:
    if model is None:
        return QWEN3_CODER_30B, None
    if isinstance(model, str) and model not in MODELS:
        ref = aic.resolve_model(model)
        return ref.arch.model_config(), ref
    return get_model(model), None


def deployment(eng: ServeEngine, hardware, model, capacity_blocks, block_tokens: int) -> Deployment:
    mdl, ref = served_model(model)
    hw, gpu = resolve_hardware(hardware)
    budget = None
    if ref is not None and gpu is not None and fits(ref.arch):
        budget = kv_budget(ref.arch, gpu, eng.tp, float(eng.gpu_memory_utilization), eng.max_num_batched_tokens,
                           eng.max_num_seqs, block_tokens)
    name = ref.name if ref else mdl.name
    if not (capacity_blocks is None or isinstance(capacity_blocks, str) and capacity_blocks == "auto"):
        cap = _positive_int(capacity_blocks)
        if budget is not None:
            check_capacity(cap, budget, name, eng.tp)
    else:
        if budget is None:
            raise ValueError(f"capacity_blocks={capacity_blocks!r} derives the KV cache from GPU memory: it needs "
                             f"hardware= one of {', '.join(GPUS)} (got {hardware!r}) and model= a standard-attention "
                             f"Hugging Face model, bundled with {aic.PACKAGE} or a local directory holding "
                             f"config.json (got {model!r})")
        cap = derived_capacity(budget, name, eng.tp)
        log.info("KV cache from memory: %s", budget.explain())
    return Deployment(hw, gpu, mdl, ref, budget, cap)


def _positive_int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"capacity_blocks must be a positive integer, or None (or 'auto') to derive it from GPU "
                         f"memory, got {v!r}")
    return int(v)


def measured_config(eng: ServeEngine, dep: Deployment, hardware):
    """The measured step model's configuration; ValueError naming the field."""
    from .measured import configure

    if dep.ref is None:
        raise ValueError(f"step_model=measured needs model= a Hugging Face id bundled with {aic.PACKAGE} or a local "
                         f"directory holding config.json (got {dep.mdl.name!r})")
    return configure(dep.ref.name, dep.gpu or hardware, eng.data_backend, eng.tp, eng.moe_tp, eng.moe_ep)
