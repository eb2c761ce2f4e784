"""Where the Hydra configuration lives, the configs generated from it, and early checks.

`conf/` sits at the top of the repository, next to this package. It is found, in order:
$KVSWEEP_CONF_DIR, `<package>/../conf` (a checkout or an editable install), `./conf`.

Generated configs (Hydra ConfigStore, group `policy` and `cost`):
  policy=all   a config generated from the PolicySpec of every registered policy (except
               those with in_all=False: ilp); a yaml in conf/policy overrides its params
               and weight (or adds a variant);
  policy=<p>   for a registered policy without a yaml;
  cost=all     every yaml in conf/cost.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# defined in sim_core so that sim_core.traces.config raises the very error the CLIs report
from sim_core.config_checks import ConfigError, check_bool, check_int, check_number
from sim_core.policies import REGISTRY
from sim_core.traces.config import path_keys

from . import schema

GROUPS = ("trace", "policy", "capacity", "cost", "model", "cluster", "tracking", "fleet")
MULTI_GROUPS = ("policy", "cost")  # a list of options may be selected
ALL = "all"


def find_conf_dir() -> Path:
    candidates = []
    env = os.environ.get("KVSWEEP_CONF_DIR")
    if env:
        candidates.append(Path(env).expanduser())
    candidates.append(Path(__file__).resolve().parent.parent / "conf")
    candidates.append(Path.cwd() / "conf")
    for c in candidates:
        if (c / "config.yaml").is_file():
            return c.resolve()
    raise ConfigError(
        "cannot find the sweep configuration directory (conf/config.yaml); looked in "
        + ", ".join(str(c) for c in candidates)
        + ". Run from a checkout, install it editable (pip install -e .), or set KVSWEEP_CONF_DIR."
    )


def _yaml_options(conf_dir: Path, group: str) -> list[str]:
    d = conf_dir / group
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def _load_yaml(path: Path) -> dict:
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping")
    return data


def _check_package(path: Path, package: str) -> None:
    """Multi-select groups need each option in its own package (policy.<name>), or
    policy=[a,b] would merge a and b into one node."""
    with open(path) as f:
        for line in f:
            if line.strip():
                if line.split() == ["#", "@package", package]:
                    return
                break
    raise ConfigError(f"{path}: the first line must be '# @package {package}'")


@dataclass
class Generated:
    """What register_generated() added, for messages and validation."""

    policies: dict[str, dict] = field(default_factory=dict)  # every selectable policy -> node
    policy_yaml_unregistered: list[str] = field(default_factory=list)
    costs: dict[str, dict] = field(default_factory=dict)


_GENERATED: Generated | None = None


def _registry() -> dict:
    return REGISTRY


def policy_node_from_spec(spec) -> dict:
    """A policy's config, generated from its PolicySpec (the one source of these facts)."""
    return {
        "name": spec.name,
        "description": spec.description,
        "params": dict(spec.defaults),
        "weight": spec.weight,
        "slow": spec.slow,
    }


def register_generated(conf_dir: Path | None = None) -> Generated:
    """Add policy=all, cost=all and configs for registered policies without a yaml."""
    global _GENERATED
    if _GENERATED is not None:
        return _GENERATED
    from hydra.core.config_store import ConfigStore

    conf_dir = conf_dir or find_conf_dir()
    registry = _registry()
    gen = Generated()
    cs = ConfigStore.instance()
    schema.register()
    for stem in _yaml_options(conf_dir, "policy"):
        _check_package(conf_dir / "policy" / f"{stem}.yaml", f"policy.{stem}")
        node = _load_yaml(conf_dir / "policy" / f"{stem}.yaml")
        name = str(node.get("name", stem))
        if name not in registry:
            gen.policy_yaml_unregistered.append(name)
            continue
        owned = sorted(set(node) - {"name", "params", "weight"})
        if owned:
            raise ConfigError(f"conf/policy/{stem}.yaml: {', '.join(owned)} belong(s) to the policy's "
                              f"PolicySpec in sim_core/policies/{name}.py; a yaml may set only params "
                              f"and weight")
        spec_node = policy_node_from_spec(registry[name])
        gen.policies[stem] = {**spec_node, **node,
                              "params": {**spec_node["params"], **(node.get("params") or {})}}
    for name, spec in sorted(registry.items()):
        if name not in gen.policies and name not in gen.policy_yaml_unregistered:
            node = policy_node_from_spec(spec)
            gen.policies[name] = node
            cs.store(group="policy", name=name, node=node, package=f"policy.{name}")
    # policy=all: every policy but those kept to explicit selection (the ILP's size limit)
    cs.store(group="policy", name=ALL, node={k: v for k, v in gen.policies.items() if registry[v["name"]].in_all},
             package="policy")
    for stem in _yaml_options(conf_dir, "cost"):
        _check_package(conf_dir / "cost" / f"{stem}.yaml", f"cost.{stem}")
        gen.costs[stem] = _load_yaml(conf_dir / "cost" / f"{stem}.yaml")
    cs.store(group="cost", name=ALL, node=dict(gen.costs), package="cost")
    _GENERATED = gen
    return gen


def check_compose(args: list[str], conf_dir: Path) -> None:
    """Compose the config once with the command line's overrides, so that a value the
    schema refuses (sweep/schema.py: sim.mode=fast, sim.seed=abc) fails here as bad input,
    naming the field and the valid values. Other composition errors are left to Hydra."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    cli = [a for a in args if not a.startswith("-")]
    if not cli or any(a in ("-m", "--multirun", "-h", "--help", "--hydra-help") for a in args):
        return
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            compose("config", overrides=cli)
    except Exception as e:  # noqa: BLE001 - only the schema's refusals are ours to report
        msg = schema.compose_error(e)
        if msg:
            raise ConfigError(msg) from None
    finally:
        GlobalHydra.instance().clear()


def group_options(group: str, conf_dir: Path | None = None) -> list[str]:
    conf_dir = conf_dir or find_conf_dir()
    opts = set(_yaml_options(conf_dir, group))
    if group == "policy":
        gen = register_generated(conf_dir)
        opts |= set(gen.policies) | {ALL}
    elif group == "cost":
        opts.add(ALL)
    return sorted(opts)


def precheck_overrides(args: list[str], conf_dir: Path | None = None) -> None:
    """Fail before Hydra (and before any work) on an unknown option of a config group.

    Hydra itself lists the options only for a single unknown choice, not inside a list
    such as policy=[lru,bogus]; this check covers both and names the valid choices.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cli = [a for a in args if not a.startswith("-")]
    if not cli:
        return
    parser = OverridesParser.create()
    for a in cli:
        _check_quoting(parser, a)
    try:
        overrides = parser.parse_overrides(cli)
    except Exception:  # noqa: BLE001 - malformed overrides: Hydra reports them itself
        return
    multirun = any(a in ("-m", "--multirun") for a in args)
    for ov in overrides:
        if not multirun and ov.is_sweep_override() and ov.key_or_group in STRING_KEYS:
            # trace.path=/data/a,b.jsonl: Hydra sees a sweep over two paths
            raise ConfigError(f"{ov.input_line}: the comma makes this a list of values; quote the "
                              f"value to keep it one string: {_quoted_arg(ov.key_or_group, _value_text(ov.input_line))}")
        group = ov.key_or_group
        if group not in GROUPS or ov.package or ov.is_delete():
            continue
        value = ov.value()
        names = value if isinstance(value, list) else [value]
        valid = group_options(group, conf_dir)
        if isinstance(value, list) and group not in MULTI_GROUPS:
            raise ConfigError(f"{group} takes one option, got a list {names}; valid: {', '.join(valid)}")
        for n in names:
            if not isinstance(n, str) or n not in valid:
                raise ConfigError(f"unknown {group} {n!r}; valid: {', '.join(valid)}")


# Keys whose value is free text (file paths, names, URIs). Hydra's override grammar reads
# unquoted values only from a limited ASCII alphabet, so these often need quoting.
STRING_KEYS = path_keys() | {"trace.name", "tracking.uri", "tracking.experiment", "tracking.artifact_location",
                             "cluster.address"}


def _value_text(arg: str) -> str:
    return arg.partition("=")[2]


def _quoted_arg(key: str, value: str) -> str:
    """`key='value'` as one shell word: the quotes must reach Hydra, so the shell needs
    its own outer quotes."""

    inner = f"{key}='{value}'" if "'" not in value else f'{key}="{value}"'
    if not any(c in inner for c in '"$`\\!'):
        return f'"{inner}"'
    return shlex.quote(inner)


def _check_quoting(parser, arg: str) -> None:
    """Turn Hydra's bare LexerNoViableAltException for a value such as a non-ASCII path
    (trace.path=/data/tracé.jsonl) into a message that says how to quote it. Quoted values
    may hold any character, so the suggested form does work; other malformed overrides are
    left to Hydra."""
    try:
        parser.parse_overrides([arg])
        return
    except Exception:  # noqa: BLE001 - any parse failure: see below whether quoting helps
        pass
    key, sep, value = arg.partition("=")
    if not sep or not value or value[0] in "'\"" or ("'" in value and '"' in value):
        return
    odd = sorted({c for c in value if ord(c) > 127})
    if not odd and key.lstrip("+~") not in STRING_KEYS:
        return
    inner = f"{key}='{value}'" if "'" not in value else f'{key}="{value}"'
    try:
        parser.parse_overrides([inner])
    except Exception:  # noqa: BLE001 - quoting does not help: Hydra's own message stands
        return
    what = f"non-ASCII character(s) {' '.join(odd)}" if odd else "special characters"
    raise ConfigError(f"{key}={value}: Hydra reads values with {what} only inside quotes, and the "
                      f"quotes must reach it past the shell: {_quoted_arg(key, value)}")
