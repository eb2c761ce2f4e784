"""Serving engine presets: the scheduler, its limits and the step-time model of an engine.

`serve(engine=...)` takes a preset name, or a mapping {"preset": name, key: override, ...}
(a key of None keeps the preset's value), or a ServeEngine. Each preset's values and the
source file they were read from: docs/serving.md.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Mapping

from .schedulers import SCHEDULERS
from .stepmodel import KINDS

BACKENDS = ("vllm", "sglang", "trtllm")  # aiconfigurator-core's engines
SCHEDULE_POLICIES = ("fcfs", "fifo", "lpm")  # SGLang's queue orders (fifo: Dynamo's name for fcfs)
# the keys each scheduler alone reads: a mapping that sets the other's is refused
VLLM_KEYS = ("max_num_batched_tokens", "chunked_prefill", "admit_whole", "long_prefill_token_threshold", "watermark")
SGLANG_KEYS = ("schedule_policy", "chunked_prefill_size", "max_prefill_tokens", "clip_max_new_tokens",
               "schedule_conservativeness", "dynamo_compat")


@dataclass(frozen=True)
class ServeEngine:
    """One engine's scheduler (vLLM v1's or SGLang's) and step-time model."""

    name: str
    max_num_seqs: int  # running requests at most
    max_num_batched_tokens: int  # token budget per step
    chunked_prefill: bool = True  # a prefill longer than the budget runs in chunks
    # admit a waiting request only if the blocks of all its tokens fit (Dynamo's mocker);
    # False: only its first chunk's (vLLM)
    admit_whole: bool = False
    long_prefill_token_threshold: int = 0  # > 0: no request gets more tokens than this in one step
    watermark: float = 0.0  # fraction of the KV blocks a new admission must leave free
    step_model: str = "dynamo"  # one of stepmodel.KINDS
    step_params: Mapping = field(default_factory=dict)  # the step model's overrides
    profile: object = None  # step_model=profile: the table (mapping or JSON path)
    tp: int = 1  # tensor-parallel GPUs per engine (roofline, measured)
    default_output_tokens: int = 256  # for a trace without output lengths
    scheduler: str = "vllm"  # one of schedulers.SCHEDULERS
    # SGLang's scheduler (sched_sglang.py; server_args.py and schedule_policy.py defaults)
    schedule_policy: str = "fcfs"  # fcfs (alias fifo) or lpm: longest cached prefix first
    chunked_prefill_size: int = 8192  # new tokens of a prefill pass at most
    max_prefill_tokens: int = 16384  # new tokens of a prefill pass at most, chunk by chunk
    clip_max_new_tokens: int = 4096  # output room a request's reservation counts at most
    schedule_conservativeness: float = 1.0  # new_token_ratio starts at min(1, 0.7 x this)
    # where Dynamo 1.6.1's model of SGLang departs from SGLang, do as Dynamo does (comparisons only)
    dynamo_compat: bool = False
    # measured step model and KV capacity from memory (docs/serving.md)
    backend: str = ""  # vllm, sglang or trtllm data ('': the preset's own engine, vllm for dynamo)
    moe_tp: int = 0  # a MoE model's experts: moe_tp x moe_ep = tp (0: tp / moe_ep)
    moe_ep: int = 1
    gpu_memory_utilization: float = 0.9  # the fraction of GPU memory the engine takes (vLLM's default)

    def __post_init__(self) -> None:
        for k in ("max_num_seqs", "max_num_batched_tokens", "tp", "default_output_tokens", "moe_ep",
                  "chunked_prefill_size", "max_prefill_tokens", "clip_max_new_tokens"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"engine.{k} must be a positive integer, got {v!r}")
        v = self.long_prefill_token_threshold
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"engine.long_prefill_token_threshold must be an integer >= 0, got {v!r}")
        w = self.watermark
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0 <= w < 1:
            raise ValueError(f"engine.watermark must be in [0, 1), got {w!r}")
        for k in ("chunked_prefill", "admit_whole", "dynamo_compat"):
            if not isinstance(getattr(self, k), bool):
                raise ValueError(f"engine.{k} must be true or false, got {getattr(self, k)!r}")
        if self.step_model not in KINDS:
            raise ValueError(f"unknown engine.step_model {self.step_model!r}; valid: {', '.join(KINDS)}")
        if self.step_model == "profile" and self.profile is None:
            raise ValueError("engine.step_model=profile needs engine.profile (a table or a JSON file)")
        if not isinstance(self.step_params, Mapping):
            raise ValueError(f"engine.step_params must be a mapping, got {self.step_params!r}")
        if self.backend not in ("",) + BACKENDS:
            raise ValueError(f"unknown engine.backend {self.backend!r}; valid: {', '.join(BACKENDS)}")
        v = self.moe_tp
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"engine.moe_tp must be a positive integer (0: tp / moe_ep), got {v!r}")
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, numbers.Real) or not 0 < u <= 1:
            raise ValueError(f"engine.gpu_memory_utilization must be in (0, 1], got {u!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"unknown engine.scheduler {self.scheduler!r}; valid: {', '.join(SCHEDULERS)}")
        if not isinstance(self.schedule_policy, str) or self.schedule_policy.lower() not in SCHEDULE_POLICIES:
            raise ValueError(f"engine.schedule_policy must be one of {', '.join(SCHEDULE_POLICIES)}, "
                             f"got {self.schedule_policy!r}")
        c = self.schedule_conservativeness
        if isinstance(c, bool) or not isinstance(c, numbers.Real) or not 0 < c < float("inf"):
            raise ValueError(f"engine.schedule_conservativeness must be a number > 0, got {c!r}")

    @property
    def data_backend(self) -> str:
        """The engine whose measured data times it: engine.backend, else the preset's."""
        return self.backend or (self.name if self.name in BACKENDS else "vllm")

    @property
    def lpm(self) -> bool:
        """SGLang's queue order is longest prefix match."""
        return self.schedule_policy.lower() == "lpm"


ENGINES: dict[str, ServeEngine] = {e.name: e for e in (
    # Dynamo's mocker (lib/mocker): a vLLM-style scheduler with its polynomial timing
    ServeEngine("dynamo", max_num_seqs=256, max_num_batched_tokens=8192, admit_whole=True, step_model="dynamo"),
    # vLLM v1 defaults for a >= 70 GiB GPU (vllm/engine/arg_utils.py), with the roofline
    ServeEngine("vllm", max_num_seqs=1024, max_num_batched_tokens=8192, step_model="roofline"),
    # SGLang's scheduler with SGLang's budgets, as Dynamo's mocker sets them up for
    # backend=sglang (max_num_seqs 256 -> max_running_requests), and Dynamo's polynomial
    ServeEngine("sglang", max_num_seqs=256, max_num_batched_tokens=8192, scheduler="sglang", step_model="dynamo"),
)}


def as_engine(engine) -> ServeEngine:
    """A ServeEngine from a preset name, a ServeEngine or a mapping with overrides."""
    if isinstance(engine, ServeEngine):
        return engine
    if isinstance(engine, str):
        engine = {"preset": engine}
    if not isinstance(engine, Mapping):
        raise ValueError(f"engine must be a preset name or a mapping, got {engine!r}")
    d = dict(engine)
    name = str(d.pop("preset", None) or d.pop("name", None) or "dynamo").lower()
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; valid: {', '.join(ENGINES)}")
    fields = {f.name for f in dataclasses.fields(ServeEngine)} - {"name"}
    unknown = set(d) - fields
    if unknown:
        raise ValueError(f"engine has no key(s) {sorted(unknown)}; valid: preset, {', '.join(sorted(fields))}")
    eng = dataclasses.replace(ENGINES[name], **{k: v for k, v in d.items() if v is not None})
    other = VLLM_KEYS if eng.scheduler == "sglang" else SGLANG_KEYS
    wrong = sorted(k for k in other if d.get(k) is not None)
    if wrong:
        raise ValueError(f"engine key(s) {wrong} do not apply to the {eng.scheduler} scheduler (preset {name!r}); "
                         f"its keys: {', '.join(SGLANG_KEYS if eng.scheduler == 'sglang' else VLLM_KEYS)}")
    return eng
