"""Model configurations: KV bytes per token, prefill FLOPs parameters, context window."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    context_tokens: int
    kv_dtype_bytes: int = 2
    # dense MLP width, or per-expert width with n_experts/active_experts for MoE
    mlp_intermediate: int = 0
    n_experts: int = 0
    active_experts: int = 0

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * self.kv_heads * self.head_dim * 2 * self.kv_dtype_bytes

    def kv_bytes_per_block(self, block_tokens: int) -> int:
        return self.kv_bytes_per_token * block_tokens

    @property
    def active_nonembedding_params(self) -> int:
        """Weights touched per token, excluding embedding and LM head."""
        attn = self.hidden * self.head_dim * (2 * self.q_heads + 2 * self.kv_heads)  # q,o + k,v
        if self.n_experts:
            mlp = self.active_experts * 3 * self.hidden * self.mlp_intermediate
            router = self.hidden * self.n_experts
        else:
            mlp = 3 * self.hidden * self.mlp_intermediate
            router = 0
        return self.layers * (attn + mlp + router)

    @property
    def flops_a(self) -> float:
        """Position-independent FLOPs per token: 2 x active non-embedding params."""
        return 2.0 * self.active_nonembedding_params

    @property
    def flops_b(self) -> float:
        """FLOPs per token per preceding position: 4 x layers x q_heads x head_dim."""
        return 4.0 * self.layers * self.q_heads * self.head_dim

    def prefill_flops(self, new_tokens: int, cached_prefix: int = 0) -> float:
        """FLOPs to prefill `new_tokens` after `cached_prefix` cached tokens."""
        p0, n = cached_prefix, new_tokens
        return n * self.flops_a + self.flops_b * (n * p0 + n * (n - 1) / 2)


# Qwen3-Coder-30B-A3B-Instruct (config.json): 48 layers, hidden 2048, 32 query heads,
# 4 KV heads, head_dim 128, 128 experts of width 768 with 8 active, 256K context.
QWEN3_CODER_30B = ModelConfig(
    name="qwen3_coder_30b", layers=48, hidden=2048, q_heads=32, kv_heads=4, head_dim=128,
    context_tokens=262_144, mlp_intermediate=768, n_experts=128, active_experts=8,
)

MODELS = {m.name: m for m in (QWEN3_CODER_30B,)}


def get_model(name_or_cfg) -> ModelConfig:
    if isinstance(name_or_cfg, ModelConfig):
        return name_or_cfg
    if isinstance(name_or_cfg, dict):
        return ModelConfig(**name_or_cfg)
    try:
        return MODELS[name_or_cfg]
    except KeyError:
        raise ValueError(f"unknown model {name_or_cfg!r}; valid: {sorted(MODELS)}") from None
