"""The typed schema of the sweep's `sim:` and `sweep:` keys (Hydra structured config).

conf/config.yaml names `kvsweep_schema` first in its defaults, so Hydra merges every
override onto these dataclasses at compose time. A choice (mode, hits, order,
partial_blocks) is an enum, an integer is an int, and a key that does not exist is refused
before any code of ours runs. `compose_error` turns Hydra's message into one that names the
field and its valid values.

Two kinds of key stay `Any` on purpose. A switch (true/false) is one: OmegaConf would take
`yes`, `on` or `1` for true, and spec.check_bool refuses those. So is a value of several
types (sample_rate: auto | a rate | null; warmup: a fraction or a duration). Range checks
(seed from 0 to 2^31-1, at least one shard) stay in sweep/spec.py, where the meaning is.
"""
from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf.errors import OmegaConfBaseException

from sim_core import Order
from sim_core.replay.accounting import PARTIAL_BLOCKS
from sim_core.replay.options import HITS, MODES
from sim_core.serving import ENGINES

SCHEMA = "kvsweep_schema"
ANALYSIS_SCHEMA = "kvsweep_analysis_schema"  # conf/analysis.yaml's (characterize, advise)


class Choice(str, enum.Enum):
    """A config choice. Its member names are its values (OmegaConf matches names), and
    str() gives the value, as the code that reads `str(cfg.sim.mode)` expects."""

    def __str__(self) -> str:
        return self.value


def _choice(name: str, values) -> type[Choice]:
    """An enum of the config from sim_core's own list of values (one source)."""
    return Choice(name, {str(v): str(v) for v in values})


ModeChoice = _choice("ModeChoice", MODES)
HitsChoice = _choice("HitsChoice", HITS)
OrderChoice = _choice("OrderChoice", [o.value for o in Order])
PartialBlocksChoice = _choice("PartialBlocksChoice", PARTIAL_BLOCKS)
EngineChoice = _choice("EngineChoice", ENGINES)  # fleet.engine: the serving engine presets
# the step-time models a sweep takes (a measured profile needs its table: sim_core.serve directly)
StepModelChoice = _choice("StepModelChoice", ("dynamo", "roofline", "measured"))


@dataclass
class AnalysisSimSchema:
    """The sim keys of `python -m analysis`: the replay switches."""

    mode: ModeChoice = ModeChoice["request"]
    hits: HitsChoice = HitsChoice["block"]
    order: Optional[OrderChoice] = None
    seed: int = 0
    sample_rate: Any = "auto"
    sample_seed: int = 0


@dataclass
class SimSchema(AnalysisSimSchema):
    """The sim keys of `python -m sweep`: the replay switches, counting and tiers' options."""

    counting: Optional[str] = None  # a counting preset (sim_core.catalog.counting)
    engine: Optional[str] = None  # deprecated: the older name of counting (sweep.spec.apply_counting moves it)
    sample_force: Any = False
    hbm_admit: str = "all"
    partial_blocks: PartialBlocksChoice = PartialBlocksChoice["cache"]
    warmup: Any = None
    window: Any = None
    overlap: Any = True
    tier_bound: Any = True


@dataclass
class SweepSchema:
    exclude_slow: Any = True
    shards_per_worker: int = 3
    max_capacities_per_job: Optional[int] = None
    fail_fast: Any = False
    resume: Any = True
    dry_run: Any = False
    yes: Any = False
    summary_points: int = 4
    log_level: str = "INFO"


@dataclass
class FleetSchema:
    """conf/fleet/*.yaml (sweep/fleet.py checks ranges and units): null everywhere is fleet=none."""

    engine: Optional[EngineChoice] = None
    arrival_speedup: Any = None  # a number or a list of them (an axis)
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    step_model: Optional[StepModelChoice] = None
    slo_ttft: Any = None  # a latency with its unit ("2s"): a bare number is refused, not read as a string
    slo_tpot: Any = None
    replicas: Any = None  # an integer or a list of them (an axis)
    router: Any = None  # a router of sim_core.ROUTERS or a list of them (an axis)
    router_params: Any = None  # router name -> its parameters
    model: Any = None  # a Hugging Face model id (step_model=measured times it; its KV memory bounds the cache)
    tp: Optional[int] = None  # tensor parallelism of each replica (GPUs per replica)
    backend: Any = None  # whose measured data: vllm | sglang | trtllm (null: the preset's engine)
    prefill_replicas: Any = None  # 0 (aggregated), a count of prefill replicas, or a list of them (an axis)
    prefill_capacity_blocks: Optional[int] = None  # disaggregated routes: the prefill replicas' KV cache
    decode_router: Any = None  # disaggregated routes: round_robin | load | cache_aware (null: Dynamo's pairing)
    decode_router_params: Any = None  # its parameters
    kv_transfer: Any = None  # disaggregated routes: how the prompt's KV moves (sim_core/serving/transfer.py)


@dataclass
class Groups:
    """The config groups both entry points take: each is checked by its own resolver
    (sweep/spec.py, sweep/traces.py, sweep/fleet.py)."""

    trace: Any = None
    capacity: Any = None
    cost: Any = None
    tier: Any = None
    hardware: Any = None
    fleet: FleetSchema = field(default_factory=FleetSchema)
    model: Any = None
    tracking: Any = None


@dataclass
class Schema(Groups):
    sim: SimSchema = field(default_factory=SimSchema)
    sweep: SweepSchema = field(default_factory=SweepSchema)
    policy: Any = None
    cluster: Any = None


@dataclass
class AnalysisSchema(Groups):
    sim: AnalysisSimSchema = field(default_factory=AnalysisSimSchema)
    analysis: Any = None
    plan: Any = None  # `python -m analysis plan` (analysis/planner/cli.py checks it)
    prices: Any = None  # conf/prices: the planner's prices
    cluster: Any = None  # where the planner's replays run, as the sweep's


def register() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA, node=Schema)
    ConfigStore.instance().store(name=ANALYSIS_SCHEMA, node=AnalysisSchema)


def compose_error(e: BaseException) -> str | None:
    """The field and what was wrong with it, from a Hydra composition error whose cause
    is OmegaConf's validation (None for any other error)."""
    cause = e
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    key = getattr(cause, "full_key", None) or "config"
    msg = str(getattr(cause, "msg", None) or cause).splitlines()[0]
    m = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", msg)
    if m:  # in the words of the other checks (sweep.config.ConfigError messages)
        return f"unknown {key} {m.group(1)!r}; valid: {m.group(2)}"
    m = re.match(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", msg)
    if m:
        want = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}.get(m.group(3), m.group(3))
        got = m.group(1) if m.group(2) in ("bool", "int", "float") else repr(m.group(1))
        return f"{key} must be {want}, got {got}"
    m = re.match(r"Key '(.*)' not in '(\w+)'", msg)
    schema = {c.__name__: c for c in (SimSchema, SweepSchema, AnalysisSimSchema, FleetSchema)}.get(m.group(2)) \
        if m else None
    if schema is not None:
        return f"unknown key {key}; valid: {', '.join(f.name for f in dataclasses.fields(schema))}"
    return f"{key}: {msg}"
