"""Cost models: the recompute cost of a block as a function of its depth in the request.

uniform            every block costs 1 (compute savings == hit ratio)
linear             cost proportional to depth + 1 (attention-dominated extreme)
<model name>       FLOPs of the block's tokens: sum over its positions p of a + b*p
"""
from __future__ import annotations

import numpy as np

from .models import MODELS, ModelConfig, get_model

BUILTIN = ("uniform", "linear")


def cost_names() -> list[str]:
    return list(BUILTIN) + sorted(MODELS)


def cost_per_depth(name: str, max_depth: int, block_tokens: int,
                   model: ModelConfig | str | dict | None = None) -> np.ndarray:
    """float64[max_depth]: cost of recomputing the block at depth d (0-based)."""
    d = np.arange(max_depth, dtype=np.float64)
    if name == "uniform":
        return np.ones(max_depth)
    if name == "linear":
        return d + 1.0
    if model is None and name in MODELS:
        model = name
    if model is None:
        raise ValueError(f"unknown cost model {name!r}; valid: {cost_names()}")
    m = get_model(model)
    T = float(block_tokens)
    # tokens dT .. dT+T-1: T*a + b*(T*dT + T(T-1)/2)
    return T * m.flops_a + m.flops_b * (T * d * T + T * (T - 1) / 2.0)
