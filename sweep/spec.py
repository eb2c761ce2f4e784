"""Turn the composed Hydra config into a checked, typed sweep specification.

Everything here runs before any trace is loaded, any Ray process starts or any MLflow
run is created, so a bad override fails at once with the list of valid choices.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from sim_core import Hits, Mode, get_policy
from sim_core.replay.accounting import check_warmup, duration_s
from sim_core.catalog.capacity import log_spaced_bytes, parse_size
from sim_core.catalog.cost import cost_names
from sim_core.catalog.counting import preset, twins
from sim_core.catalog.hardware import as_hardware
from sim_core.tiers.rules import rules_at, rules_name
from sim_core.tiers.spec import as_tier_specs, parse_admit
from sim_core.catalog.models import ModelConfig
from sim_core.policies import REGISTRY
from sim_core.replay.options import resolve_order

from .config import ConfigError, check_bool, check_int, check_number, register_generated

log = logging.getLogger("sweep")


@dataclass(frozen=True)
class PolicyChoice:
    name: str
    params: dict
    weight: float = 1.0
    slow: bool = False
    cost_aware: bool = False
    offline: bool = False
    one_pass: bool = False  # stack policy: every capacity from one replay (sim_core.structures.onepass)
    description: str = ""
    pool: str = ""  # the lower tiers' sizes this variant runs with ("" = none), e.g. "dram=1TiB"
    tiers: tuple = ()  # their simulate() tier dicts (capacities in blocks), top down
    load: float = 0.0  # fleet=...: the arrival_speedup this variant is served at (0 = a cache replay)
    route: str = ""  # fleet=...: its replicas and router (sweep.fleet.Route.label, "kv_router x8")


# simulate()'s defaults for the counting switches a sweep passes (conf/config.yaml `sim:`)
COUNTING_DEFAULTS = {"hbm_admit": "all", "partial_blocks": "cache", "warmup": None, "window": None, "overlap": True}


@dataclass
class SweepSpec:
    policies: list[PolicyChoice]
    cost_models: list[str]
    capacity_sizes: list  # as given: '24GiB' strings or block counts
    capacity_name: str
    model: Any  # sim_core.catalog.models.ModelConfig
    mode: Any  # sim_core.Mode
    hits: Any  # sim_core.Hits
    seed: int
    order: Any = None  # sim_core.Order, resolved from sim.order and the mode
    sample_rate: float | None = None  # None: exact replay
    sample_seed: int = 0
    notes: list[str] = field(default_factory=list)
    sample_auto: bool = False  # sim.sample_rate=auto: the rate follows the trace's size (set at load)
    selected_all: bool = False  # policy=all (a policy that cannot be sampled is skipped under sampling)
    sample_force: bool = False  # sim.sample_force: sample also the policies with sample_ok=False
    tier_name: str = "none"
    tier_rules: str = ""  # the engine hierarchy whose rules filled the tiers' unset ones (sim_core.tiers.rules)
    tiers: list = field(default_factory=list)  # [(name, capacities as given, settings)], top down
    counting: dict = field(default_factory=dict)  # simulate()'s hbm_admit, partial_blocks, warmup, window, overlap
    hardware: Any = None  # a sim_core.catalog.hardware mapping {part, overrides}, or None (no TTFT)
    counting_preset: str | None = None  # sim.counting: its results are its own (keys, run names, tags)

    def counting_key(self, preset: bool = True) -> tuple:
        """The counting settings that change results, for a curve's identity: () when all
        are the defaults, so a flat sweep keeps the keys it had before tiers existed. A
        preset (sim.counting) is part of it: presets with equal switches (lmcache and vllm)
        replay alike, yet each records its own runs, as a user who names one expects."""
        d = {k: v for k, v in self.counting.items() if v != COUNTING_DEFAULTS[k]}
        if preset and self.counting_preset is not None:
            d["preset"] = self.counting_preset
        if self.hardware is not None:
            d["hardware"] = tuple(sorted(self.hardware.items()))
            d["overlap"] = self.counting.get("overlap", COUNTING_DEFAULTS["overlap"])
        return tuple(sorted(d.items()))

    def sampled(self, policy: str) -> bool:
        """Whether `policy` is replayed on a sample in this sweep."""
        spec = get_policy(policy)
        return self.sample_rate is not None and spec.solve is None and (self.sample_force or spec.sample_ok)

    def exact_policies(self) -> list[str]:
        """The policies of this sweep that are not replayed on a sample."""
        return [p.name for p in self.policies if not self.sampled(p.name)]


def _plain(node) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) or OmegaConf.is_config(node) else node


def resolve_model(cfg: DictConfig):
    raw = _plain(cfg.model)
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = set(raw) - names
    if unknown:
        raise ConfigError(f"model has unknown field(s) {sorted(unknown)}; valid: {sorted(names)}")
    try:
        m = ModelConfig(**raw)
    except TypeError as e:
        raise ConfigError(f"model: {e}") from None
    for k in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "kv_dtype_bytes", "context_tokens"):
        check_int(getattr(m, k), f"model.{k}", 1)
    for k in ("mlp_intermediate", "n_experts", "active_experts"):
        check_int(getattr(m, k), f"model.{k}", 0)
    return m


# Seeds reach numpy (uint64 generator state) and LightGBM (a C int): both accept this range.
SEED_MAX = 2**31 - 1
# Ray refuses a smaller object store (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES).
RAY_MIN_OBJECT_STORE = 78_643_200


def check_cluster(c: DictConfig) -> None:
    """cluster.* numbers, checked here because a bad one otherwise surfaces only inside Ray
    (a traceback and an empty FAILED run) or, for actors<=0, as a sweep that runs nothing."""
    check_int(c.get("num_cpus"), "cluster.num_cpus", 1, allow_none=True, none_means="all cores")
    check_int(c.get("actors"), "cluster.actors", 1, allow_none=True, none_means="one per CPU")
    check_int(c.get("object_store_memory"), "cluster.object_store_memory", RAY_MIN_OBJECT_STORE,
              allow_none=True, none_means="Ray's default; the value is in bytes")
    if "log_to_driver" in c:
        check_bool(c.get("log_to_driver"), "cluster.log_to_driver")


def check_sweep(s: DictConfig) -> None:
    """sweep.* switches: `x or default` in the CLI would silently turn a 0 into the default."""
    for k in ("exclude_slow", "fail_fast", "dry_run", "yes"):
        if k in s:
            check_bool(s.get(k), f"sweep.{k}")
    if "shards_per_worker" in s:
        check_int(s.get("shards_per_worker"), "sweep.shards_per_worker", 1)
    check_int(s.get("max_capacities_per_job"), "sweep.max_capacities_per_job", 1, allow_none=True,
              none_means="no cap")
    if "summary_points" in s:
        check_int(s.get("summary_points"), "sweep.summary_points", 1)


def _param_like(value, default, key: str):
    """A policy parameter checked against the type of its default (as that type), so a typo
    fails here instead of in every Ray job with the sweep half recorded."""
    if isinstance(default, bool):
        return check_bool(value, key)
    if isinstance(default, int):
        return check_int(value, key)
    if isinstance(default, float):
        return check_number(value, key, positive=False)
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{key} must be a string like its default {default!r}, got {value!r}")
    return value


def choice(spec, params: dict | None = None, weight: float | None = None) -> PolicyChoice:
    """A registered policy as a sweep runs it (its defaults under `params`)."""
    return PolicyChoice(name=spec.name, params={**spec.defaults, **(params or {})},
                        weight=spec.weight if weight is None else weight, slow=spec.slow,
                        cost_aware=spec.cost_aware, offline=spec.offline, one_pass=spec.curve is not None,
                        description=spec.description)


def resolve_policies(cfg: DictConfig, exclude_slow: bool, selected_all: bool = True
                     ) -> tuple[list[PolicyChoice], list[str]]:
    """Policies to run. `exclude_slow` drops `slow: true` ones only from policy=all:
    a slow policy named on the command line always runs."""
    notes = []
    gen = register_generated()
    sel = cfg.get("policy")
    if not sel:
        raise ConfigError(f"no policy selected; valid: all, {', '.join(sorted(gen.policies))}")
    out = []
    for key, node in sel.items():
        node = _plain(node)
        name = str(node.get("name", key)).lower()
        if name not in REGISTRY:
            raise ConfigError(
                f"policy {name!r} has a config in conf/policy but sim_core does not provide it (yet); "
                f"valid: {', '.join(sorted(gen.policies))}")
        spec = REGISTRY[name]
        params = dict(node.get("params") or {})
        unknown = set(params) - set(spec.defaults)
        if unknown:
            raise ConfigError(f"policy {name!r} has no parameter(s) {sorted(unknown)}; "
                              f"valid: {sorted(spec.defaults) or 'none'}")
        params = {k: _param_like(v, spec.defaults[k], f"policy.{key}.params.{k}") for k, v in params.items()}
        # the PolicySpec owns every fact; a config may override only params and weight
        w = node.get("weight")
        weight = spec.weight if w is None else check_number(w, f"policy.{key}.weight")
        out.append(choice(spec, params, weight))
    if exclude_slow and selected_all:
        dropped = [p.name for p in out if p.slow]
        out = [p for p in out if not p.slow]
        if dropped:
            notes.append(f"policy=all skips slow policies {', '.join(dropped)} "
                         f"(sweep.exclude_slow=false includes them)")
    if not out:
        raise ConfigError("no policy left to run (every selected policy is marked slow and "
                          "sweep.exclude_slow=true)")
    if gen.policy_yaml_unregistered:
        notes.append("configs without a sim_core policy (skipped by policy=all): "
                     + ", ".join(gen.policy_yaml_unregistered))
    return out, notes


def resolve_costs(cfg: DictConfig, model) -> list[str]:
    sel = cfg.get("cost")
    valid = cost_names()
    if not sel:
        raise ConfigError(f"no cost model selected; valid: {', '.join(valid)}")
    out = []
    for key, node in sel.items():
        node = _plain(node) or {}
        name = str(node.get("name", key))
        if name not in valid:
            raise ConfigError(f"unknown cost model {name!r}; valid: {', '.join(valid)}")
        needs = node.get("model")
        if needs and needs != model.name:
            raise ConfigError(f"cost model {name!r} is the FLOPs of model {needs!r} but model={model.name}; "
                              f"select model={needs} or drop it (cost=[uniform,linear])")
        out.append(name)
    order = {n: i for i, n in enumerate(valid)}  # uniform, linear, then model-derived
    return sorted(dict.fromkeys(out), key=lambda n: order[n])


def capacity_sizes(cfg: DictConfig) -> list:
    """The capacity list as given (strings with units, or block counts); syntax-checked."""
    c = cfg.capacity
    name = c.get("name", "custom")
    if OmegaConf.is_missing(c, "sizes"):
        raise ConfigError(f"capacity={name} needs a list: capacity.sizes=[24GiB,1TiB] "
                          f"(bytes) or capacity.sizes=[16384,699051] (blocks)")
    sizes = _plain(c.get("sizes"))
    if sizes is None:
        ls = _plain(c.get("logspace"))
        if not ls:
            raise ConfigError(f"capacity={name} sets neither sizes nor logspace")
        try:
            n = int(ls["n"])
            if n < 1:
                raise ValueError(f"capacity.logspace.n must be >= 1, got {n}")
            # exact byte strings: sim_core.catalog.capacity.to_blocks rounds to whole blocks
            sizes = [f"{b:.3f}B" for b in log_spaced_bytes(ls["lo"], ls["hi"], n)]
        except (KeyError, ValueError) as e:
            raise ConfigError(f"capacity={name}: bad logspace {ls}: {e}") from None
    return check_sizes(sizes, "capacity.sizes")


#: capacity.sizes=[auto]: each replica's KV cache is what its GPU's memory leaves (fleet=... only)
AUTO = "auto"


def check_sizes(sizes, where: str, zero_ok: bool = False) -> list:
    """A list of capacities (strings with units, or block counts), syntax-checked."""
    if not isinstance(sizes, list):
        sizes = [sizes]
    if not sizes:
        raise ConfigError(f"{where} is empty; give at least one size, e.g. [24GiB]")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, (str, int, float)):
            raise ConfigError(f"{where}: bad capacity {s!r}: expected e.g. 24GiB, 1TiB or 16384 (blocks)")
        if s == AUTO and where == "capacity.sizes":
            continue  # a fleet's KV cache from GPU memory (sweep.fleet.capacities); refused without a fleet
        try:
            value, kind = parse_size(s)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}; units: blocks (plain number), B, KiB, MiB, GiB, TiB, KB, MB, GB, "
                              "TB") from None
        if value < 0 or (value == 0 and not zero_ok):
            raise ConfigError(f"{where}: bad capacity {s!r}: must be {'>= 0' if zero_ok else 'positive'}")
        if kind == "blocks" and float(value) != int(value):
            raise ConfigError(f"{where}: bad capacity {s!r}: a block count must be a whole number")
    return sizes


TIER_KEYS = ("capacities", "policy", "write", "admit", "inclusive", "touch", "promote", "params", "link",
             "bandwidth_bps", "latency_s", "shared")
#: a list of values sweeps them: the mode axis, e.g. tier.dram.write=[on_evict,on_compute]
MODE_KEYS = ("write", "admit", "inclusive", "touch")


def resolve_tiers(cfg: DictConfig) -> tuple[str, list[tuple[str, list, list[dict]]], str]:
    """(tier config name, [(tier name, capacities as given, its modes)], whose rules
    filled the rest), top down. A mode is the tier's other settings; a list under write,
    admit, inclusive or touch sweeps them (every combination is a mode). A rule the config
    leaves out (or sets to null) is the engine hierarchy's: `tier.hierarchy`, else
    sim.counting's, else vLLM's CPU offload (sim_core.tiers.rules); a list of hierarchies
    compares them, each a mode tagged `hierarchy`. Every setting is checked
    here (sim_core.tiers.spec.as_tier_specs), before any work."""
    t = cfg.get("tier") or {}
    name = str(t.get("name", "none"))
    hier = _plain(t.get("hierarchy"))
    hiers = list(dict.fromkeys(hier)) if isinstance(hier, list) else [hier]
    if not hiers:
        raise ConfigError(f"tier={name}: tier.hierarchy is an empty list: give one hierarchy or several to compare")
    try:
        counting = cfg.sim.get("counting")
        names = [rules_name(h, None if counting is None else str(counting)) for h in hiers]
    except ValueError as e:
        raise ConfigError(f"tier={name}: {e}") from None
    levels = []
    for tier, node in t.items():
        if tier in ("name", "hierarchy"):
            continue
        where = f"tier.{tier}"
        d = _plain(node)
        if not isinstance(d, dict):
            raise ConfigError(f"{where} must be a mapping with capacities, policy, write, admit, inclusive")
        unknown = set(d) - set(TIER_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; valid: {', '.join(TIER_KEYS)}")
        if d.get("capacities") is None:
            raise ConfigError(f"{where}.capacities is missing: e.g. {where}.capacities=[256GiB,1TiB]")
        sizes = check_sizes(d.pop("capacities"), f"{where}.capacities", zero_ok=True)
        d = {k: v for k, v in d.items() if v is not None}
        axes = {k: list(dict.fromkeys(d.pop(k))) for k in MODE_KEYS if isinstance(d.get(k), list)}
        for k, vs in axes.items():
            if not vs:
                raise ConfigError(f"{where}.{k} is an empty list: give one value or several to compare")
        # several hierarchies are one more mode axis, named by `hierarchy` (sweep.plan drops the key)
        tagged = (lambda h: {"hierarchy": h}) if len(names) > 1 else (lambda h: {})
        modes = [{**rules_at(len(levels), h), **d, **dict(zip(axes, combo)), **tagged(h)}
                 for h in names for combo in itertools.product(*axes.values())]
        for m in modes:
            try:
                above = [{"name": f" above {k}", "capacity": 0} for k in range(len(levels))]  # its position
                as_tier_specs(above + [{"name": tier, "capacity": 0, **untagged(m)}])
            except (ValueError, KeyError) as e:
                raise ConfigError(f"{where}: {e}") from None
        levels.append((tier, sizes, modes))
    return name, levels, ",".join(names)


def untagged(mode: dict) -> dict:
    """A tier mode as simulate() takes it (without the hierarchy it was filled from)."""
    return {k: v for k, v in mode.items() if k != "hierarchy"}


def resolve_counting(cfg: DictConfig) -> tuple[dict, Any]:
    """(the counting and admission switches as simulate() takes them, the
    hardware mapping or None), checked."""
    sim = cfg.sim
    admit = str(sim.get("hbm_admit", COUNTING_DEFAULTS["hbm_admit"]))
    try:
        parse_admit(admit, "sim.hbm_admit")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    partial = str(sim.get("partial_blocks", COUNTING_DEFAULTS["partial_blocks"]))  # an enum (sweep/schema.py)
    warmup, window = _plain(sim.get("warmup")), _plain(sim.get("window"))
    try:
        check_warmup(warmup, "sim.warmup")
        if window is not None and duration_s(window, "sim.window") <= 0:
            raise ValueError(f"sim.window must be a positive duration, got {window!r}")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    counting = {"hbm_admit": admit, "partial_blocks": partial, "warmup": warmup, "window": window,
              "overlap": check_bool(sim.get("overlap", COUNTING_DEFAULTS["overlap"]), "sim.overlap")}
    hw = _plain(cfg.get("hardware") or {})
    if not hw or hw.get("part") is None:
        return counting, None
    hw = {k: v for k, v in hw.items() if v is not None}
    try:
        as_hardware(hw)
    except ValueError as e:
        raise ConfigError(f"hardware: {e}") from None
    return counting, hw


def apply_counting(cfg: DictConfig, overrides: list[str]) -> str | None:
    """sim.counting=<preset>: an engine's counting switches (sim_core.catalog.counting) go
    into cfg.sim, except those given on the command line, which win. Returns a note. The
    older key sim.engine is moved to sim.counting with a warning (one release)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    old = cfg.sim.get("engine")
    if old is not None:
        if cfg.sim.get("counting") is not None:
            raise ConfigError("give the counting preset once: sim.counting (sim.engine is its older name)")
        log.warning("sim.engine=%s is deprecated and will be removed in the next release: use sim.counting=%s "
                    "(fleet.engine is the serving engine)", old, old)
        with open_dict(cfg):
            cfg.sim.counting, cfg.sim.engine = old, None
    name = cfg.sim.get("counting")
    if name is None:
        return None
    try:
        p = preset(str(name))
    except ValueError as e:
        raise ConfigError(f"sim.counting: {e}") from None
    set_ = {}
    with open_dict(cfg):
        for k, v in p.switches().items():
            if f"sim.{k}" not in given:
                cfg.sim[k] = v
                set_[k] = v
    kept = sorted(k for k in p.switches() if k not in set_)
    return (f"sim.counting={name}: " + ", ".join(f"sim.{k}={'null' if v is None else v}" for k, v in set_.items()) +
            (f" (kept from the command line: {', '.join('sim.' + k for k in kept)})" if kept else "") +
            (f"; {name} usually runs {p.block_tokens}-token blocks (trace.block_tokens re-blocks a trace)"
             if p.block_tokens else "") + _twins_note(str(name)))


def _twins_note(name: str) -> str:
    same = twins(name)
    return (f"; the same switches as {', '.join(same)} (they count alike), recorded as {name}'s own runs"
            if same else "")


def resolve(cfg: DictConfig, policy_choice: str = "all") -> SweepSpec:
    check_sweep(cfg.sweep)
    check_cluster(cfg.cluster)
    seed = check_int(cfg.sim.get("seed", 0), "sim.seed", 0, SEED_MAX)
    mode, hits = str(cfg.sim.mode), str(cfg.sim.hits)  # enums of sweep/schema.py, checked at compose
    raw_order = cfg.sim.get("order")
    try:
        order = resolve_order(mode, None if raw_order is None else str(raw_order))
    except ValueError as e:
        raise ConfigError(f"sim.order: {e}") from None
    raw_rate = cfg.sim.get("sample_rate")
    auto = isinstance(raw_rate, str) and raw_rate.strip().lower() == "auto"
    rate = None if auto else check_number(raw_rate, "sim.sample_rate", allow_none=True,
                                          none_means="exact replay; or auto")
    if rate is not None and rate > 1:
        raise ConfigError(f"sim.sample_rate must be in (0, 1], null (exact replay) or auto, got {rate}")
    if rate is not None and rate < 1 and hits == "prefix":
        raise ConfigError("sim.hits=prefix is not defined on a sample (a request's first miss may be a block "
                          "the sample drops): use sim.hits=block or sim.sample_rate=null")
    sample_seed = check_int(cfg.sim.get("sample_seed", 0), "sim.sample_seed", 0, SEED_MAX)
    model = resolve_model(cfg)
    policies, notes = resolve_policies(cfg, cfg.sweep.get("exclude_slow", False),
                                       selected_all=str(policy_choice) == "all")
    costs = resolve_costs(cfg, model)
    sizes = capacity_sizes(cfg)
    tier_name, tiers, tier_rules = resolve_tiers(cfg)
    if tiers and check_bool(cfg.sim.get("tier_bound", True), "sim.tier_bound") and \
            not any(p.name == "tier_bound" for p in policies):
        policies.append(choice(REGISTRY["tier_bound"]))  # every policy's gap to it: the pool sizing table
    counting, hardware = resolve_counting(cfg)
    preset_name = cfg.sim.get("counting")
    return SweepSpec(policies=policies, cost_models=costs, capacity_sizes=sizes,
                     tier_name=tier_name, tiers=tiers, tier_rules=tier_rules, counting=counting, hardware=hardware,
                     counting_preset=None if preset_name is None else str(preset_name),
                     capacity_name=str(cfg.capacity.get("name", "custom")), model=model,
                     mode=Mode(mode), hits=Hits(hits), seed=seed, order=order,
                     sample_rate=None if rate is None or rate == 1 else rate, sample_seed=sample_seed, notes=notes,
                     sample_auto=auto, selected_all=str(policy_choice) == "all",
                     sample_force=check_bool(cfg.sim.get("sample_force", False), "sim.sample_force"))
