"""sim_core: traces, cost models, policies and the numba replay engine.

Never imports sweep, ray or mlflow.
"""
from . import jit as _jit  # noqa: F401  (configures the numba cache before any compile)
from .catalog.capacity import blocks_for_bytes, bytes_for_blocks, to_blocks
from .catalog.cost import cost_per_depth
from .catalog.models import MODELS, QWEN3_CODER_30B, ModelConfig, get_model
from .policies import REGISTRY, get_policy, policy_names
from .traces.reblock import reblock
from .result import Hits, Mode, Order, Result, metric_fields
from .simulate import simulate, tier_bound
from .serving import ENGINES as SERVE_ENGINES, ROUTERS, Deployment, ServeResult, deployment, serve
from .catalog.capacity import saturation_capacity
from .replay.units import replay_units
from .traces.trace import Trace

__all__ = [
    "Deployment", "Hits", "MODELS", "ROUTERS", "SERVE_ENGINES", "ServeResult", "Mode", "QWEN3_CODER_30B", "REGISTRY", "ModelConfig", "Order", "Result", "Trace", "blocks_for_bytes",
    "bytes_for_blocks", "cost_per_depth", "deployment", "get_model", "get_policy", "policy_names",
    "metric_fields", "reblock", "replay_units", "saturation_capacity", "serve", "simulate", "tier_bound", "to_blocks",
]
