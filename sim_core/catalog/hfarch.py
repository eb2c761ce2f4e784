"""A model's shape from its Hugging Face config.json: weights, KV bytes and TP splits.

Read from a local directory holding config.json, or from the configs bundled with
aiconfigurator-core (`aic.bundled_config`). Only the fields a standard attention model
has are read (dense or mixture-of-experts MLP, grouped-query attention); a model with
latent (MLA), linear or sliding-window attention, or layers of several kinds, is flagged
`standard=False`: the measured step model still times it (the package knows it), but
our weight count and KV bytes would be wrong, so the KV capacity is not derived for it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .models import ModelConfig

# bytes per weight of a checkpoint's linear layers, by quantization method
_QUANT_BYTES = {"fp8": 1.0, "compressed-tensors": 1.0, "modelopt": 1.0, "mxfp4": 0.5, "nvfp4": 0.5, "awq": 0.5,
                "gptq": 0.5}
_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}
# config keys that mark an attention or layer layout this reader does not count
_NONSTANDARD = ("kv_lora_rank", "q_lora_rank", "linear_attn_config", "layer_types", "hybrid_override_pattern",
                "layers_block_type", "attn_type_list", "block_configs", "linear_num_key_heads", "mamba_num_heads",
                "attention_chunk_size", "first_k_dense_replace", "mlp_only_layers", "sliding_window_size")


@dataclass(frozen=True)
class Arch:
    """What the KV capacity and the TP check need of a model."""

    name: str  # the Hugging Face id or the directory
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # the LM head shares the embedding
    intermediate: int  # dense MLP width (0 for MoE layers)
    experts: int  # routed experts (0: dense)
    moe_intermediate: int
    top_k: int
    shared_intermediate: int  # shared expert width in each MoE layer (0: none)
    weight_bytes: float  # per weight of the linear layers
    kv_dtype_bytes: int  # per KV cache element (2: 16-bit, 1: FP8)
    context: int
    standard: bool  # grouped-query attention and one kind of layer

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token of the whole model."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    def kv_bytes_per_token_per_gpu(self, tp: int) -> int:
        """A GPU holds its share of the KV heads; with more GPUs than KV heads each holds one."""
        return 2 * self.layers * max(self.kv_heads // tp, 1) * self.head_dim * self.kv_dtype_bytes

    def weights(self) -> float:
        """Weight bytes of the whole checkpoint (norms and biases left out: < 0.1%)."""
        h, hd = self.hidden, self.head_dim
        attn = h * hd * (2 * self.heads + 2 * self.kv_heads)
        if self.experts:
            mlp = self.experts * 3 * h * self.moe_intermediate + h * self.experts + 3 * h * self.shared_intermediate
        else:
            mlp = 3 * h * self.intermediate
        emb = self.vocab * h * (1 if self.tied else 2)
        return self.layers * (attn + mlp) * self.weight_bytes + emb * 2.0  # embeddings stay 16-bit

    def model_config(self) -> ModelConfig:
        """The roofline's and cost models' view (sim_core.catalog.models)."""
        dense = not self.experts
        return ModelConfig(name=self.name, layers=self.layers, hidden=self.hidden, q_heads=self.heads,
                           kv_heads=self.kv_heads, head_dim=self.head_dim, context_tokens=self.context,
                           kv_dtype_bytes=self.kv_dtype_bytes,
                           mlp_intermediate=self.intermediate if dense else self.moe_intermediate,
                           n_experts=self.experts, active_experts=self.top_k)

    def tp_problem(self, tp: int, moe_tp: int, moe_ep: int) -> str:
        """Why the model cannot be split this way ('' when it can)."""
        if self.heads % tp:
            return f"its {self.heads} attention heads do not split over {tp} GPUs"
        if self.kv_heads % tp and tp % self.kv_heads:
            return f"its {self.kv_heads} KV heads neither split over nor replicate onto {tp} GPUs"
        if self.experts:
            if moe_tp * moe_ep != tp:
                return f"moe_tp x moe_ep = {moe_tp} x {moe_ep} must equal tp = {tp}"
            if self.experts % moe_ep:
                return f"its {self.experts} experts do not split over moe_ep = {moe_ep}"
            if self.moe_intermediate % moe_tp:
                return f"its experts' width {self.moe_intermediate} does not split over moe_tp = {moe_tp}"
        elif self.intermediate % tp:
            return f"its MLP width {self.intermediate} does not split over {tp} GPUs"
        return ""

    def valid_tp(self) -> list[int]:
        """The TP sizes (powers of two up to 64) the model splits over, experts TP-sharded."""
        return [t for t in (1, 2, 4, 8, 16, 32, 64) if not self.tp_problem(t, t, 1)]


def read_arch(config: dict, name: str, quant: dict | None = None) -> Arch:
    """An Arch from a parsed config.json (a multimodal config's text_config is its LM) and
    the checkpoint's hf_quant_config.json when it has one (ModelOpt's NVFP4/FP8 exports)."""
    c = config.get("text_config") or config
    where = f"model {name!r} (config.json)"

    def need(*keys):
        for k in keys:
            if isinstance(c.get(k), int) and not isinstance(c.get(k), bool):
                return int(c[k])
        raise ValueError(f"{where} has no {' or '.join(keys)}")

    def opt(*keys) -> int:
        for k in keys:
            v = c.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return int(v)
        return 0

    heads = need("num_attention_heads")
    hidden = need("hidden_size")
    experts = opt("num_experts", "num_local_experts", "n_routed_experts")
    shared = opt("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    if not shared and opt("n_shared_experts"):
        shared = opt("n_shared_experts") * opt("moe_intermediate_size")
    q = (quant or {}).get("quantization") or {}
    method = q.get("quant_algo") or (config.get("quantization_config") or c.get("quantization_config") or {}).get(
        "quant_method")
    wb = _QUANT_BYTES.get(str(method).lower(), 1.0) if method else _DTYPE_BYTES.get(
        str(c.get("torch_dtype") or c.get("dtype") or "bfloat16"), 2.0)
    kvb = 1 if str(q.get("kv_cache_quant_algo") or "").upper() == "FP8" else 2
    standard = not any(c.get(k) for k in _NONSTANDARD) and not c.get("use_sliding_window") \
        and (c.get("interleave_moe_layer_step") or 1) == 1
    return Arch(name=name, layers=need("num_hidden_layers"), hidden=hidden, heads=heads,
                kv_heads=opt("num_key_value_heads") or heads, head_dim=opt("head_dim") or hidden // heads,
                vocab=need("vocab_size"), tied=bool(c.get("tie_word_embeddings", False)),
                intermediate=0 if experts else opt("intermediate_size"), experts=experts,
                moe_intermediate=opt("moe_intermediate_size", "intermediate_size") if experts else 0,
                top_k=opt("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k"),
                shared_intermediate=shared, weight_bytes=wb, kv_dtype_bytes=kvb,
                context=opt("max_position_embeddings") or 32768, standard=standard)


def local_config(model: str) -> Path | None:
    """config.json of a local model directory, or None."""
    p = Path(model).expanduser()
    return p / "config.json" if p.is_dir() and (p / "config.json").is_file() else None


def load_json(path: Path, name: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"model {name!r}: cannot read {path} ({e})") from None
