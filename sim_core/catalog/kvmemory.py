"""The KV cache a GPU holds for a model: memory x fraction - weights - activations - runtime.

vLLM sizes its cache this way (gpu_worker.determine_available_memory): it takes
`gpu_memory_utilization` of the GPU's total memory, loads the weights, profiles a forward
pass of `max_num_batched_tokens` tokens (plus the sampler over `max_num_seqs` rows) for
the activation peak, and keeps what the CUDA runtime and graphs hold outside PyTorch;
what remains, divided by the KV bytes of one token on one GPU, is the cache. Our terms:
- weights: counted from config.json (sim_core.catalog.hfarch), split over the TP GPUs;
- activations per token: the MoE kernel's buffers (top-k x (gate-up + down-in + out)) or
  the MLP's, the QKV projection and four hidden-sized tensors (residual, norm, attention
  and MLP outputs), all 16-bit and split over TP where the layer is; plus fp32 logits and
  probabilities for every sequence the sampler may see;
- runtime: 2 GiB per GPU outside PyTorch (CUDA context and workspaces, CUDA graphs),
  0.5 GiB more for NCCL when TP > 1. A round figure: for Qwen3-30B-A3B on one H100 each
  GiB of it moves the cache by about 11,000 tokens (9%).
aiconfigurator-core's estimate (`sdk.memory.estimate_num_gpu_blocks`) is the independent
check (tests/test_stepmodel_measured.py); docs/serving.md compares the two.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .gpus import GPUS, GiB
from .hfarch import Arch

RUNTIME_BYTES = 2 * GiB
NCCL_BYTES = GiB // 2


@dataclass(frozen=True)
class KVBudget:
    gpu: str
    memory_bytes: float
    fraction: float
    weights_bytes: float  # per GPU
    activations_bytes: float
    runtime_bytes: float
    kv_bytes_per_token: int  # per GPU
    tokens: int  # the KV cache, tokens per GPU (an engine of TP GPUs holds this many)
    block_tokens: int
    blocks: int
    host_blocks: int  # blocks the GPU's share of its host's DRAM holds (0: no typical host)

    def explain(self) -> str:
        g = GiB
        return (f"{self.fraction:g} x {self.memory_bytes / g:.1f} GiB ({self.gpu}) - {self.weights_bytes / g:.1f} GiB "
                f"weights - {self.activations_bytes / g:.1f} GiB activations - {self.runtime_bytes / g:.1f} GiB "
                f"runtime = {self.kv_bytes / g:.2f} GiB for KV, {self.kv_bytes_per_token:,} B a token: "
                f"{self.tokens:,} tokens, {self.blocks:,} blocks of {self.block_tokens}")

    @property
    def kv_bytes(self) -> float:
        return self.fraction * self.memory_bytes - self.weights_bytes - self.activations_bytes - self.runtime_bytes

    def as_dict(self) -> dict:
        return {**asdict(self), "kv_bytes": self.kv_bytes}


def activation_bytes(arch: Arch, tp: int, max_tokens: int, max_seqs: int) -> float:
    """The peak of a profiled forward pass of `max_tokens` tokens on one of `tp` GPUs."""
    if arch.experts:
        mlp = arch.top_k * (3 * arch.moe_intermediate / tp + arch.hidden)
    else:
        mlp = 3 * arch.intermediate / tp
    qkv = (arch.heads + 2 * arch.kv_heads) * arch.head_dim / tp
    per_token = 2.0 * (mlp + qkv + 4 * arch.hidden)
    return max_tokens * per_token + max_seqs * arch.vocab * 4.0 * 2


def kv_budget(arch: Arch, gpu: str, tp: int, fraction: float, max_tokens: int, max_seqs: int,
              block_tokens: int) -> KVBudget:
    g = GPUS[gpu]
    per_token = arch.kv_bytes_per_token_per_gpu(tp)
    runtime = RUNTIME_BYTES + (NCCL_BYTES if tp > 1 else 0)
    b = KVBudget(gpu, g.memory_bytes, fraction, arch.weights() / tp, activation_bytes(arch, tp, max_tokens, max_seqs),
                 runtime, per_token, 0, block_tokens, 0, 0)
    tokens = max(int(b.kv_bytes // per_token), 0)
    return KVBudget(**{**asdict(b), "tokens": tokens, "blocks": tokens // block_tokens,
                       "host_blocks": int(g.host_bytes // (per_token * block_tokens))})


def derived_capacity(budget: KVBudget, model: str, tp: int) -> int:
    """The budget's blocks; ValueError when the model leaves no room for a block."""
    if budget.blocks < 1:
        raise ValueError(f"capacity_blocks=None: {model} leaves no KV cache on {budget.gpu} x{tp} at "
                         f"gpu_memory_utilization {budget.fraction:g}: {budget.explain()}")
    return budget.blocks


def check_capacity(cap: int, budget: KVBudget, model: str, tp: int) -> None:
    """Refuse a cache the GPU cannot hold, with the numbers that show why."""
    if cap > budget.blocks:
        need = cap * budget.block_tokens * budget.kv_bytes_per_token
        raise ValueError(f"capacity_blocks={cap} needs {need / GiB:.2f} GiB of KV cache per GPU "
                         f"({cap:,} x {budget.block_tokens} tokens x {budget.kv_bytes_per_token:,} B) for {model} "
                         f"on {budget.gpu} x{tp}, which holds at most {budget.blocks:,} blocks: {budget.explain()}. "
                         f"Give capacity_blocks=None to use it, or raise engine.gpu_memory_utilization or tp")


def fits(arch: Arch) -> bool:
    """Whether our weight and KV count applies (standard attention, one kind of layer)."""
    return arch.standard and not math.isnan(arch.weights())
