"""Policy registry: name -> PolicySpec. Each policy is one small module."""
from __future__ import annotations

import pkgutil
from importlib import import_module

from .api import PolicyContext, PolicySpec

# Every module in this package that defines SPEC (a PolicySpec, or a list of them for
# variants) is a policy: adding a policy is adding one file.
REGISTRY: dict[str, PolicySpec] = {}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _mod = import_module(f"{__name__}.{_info.name}")
    _specs = getattr(_mod, "SPEC", None)
    for _spec in _specs if isinstance(_specs, (list, tuple)) else [_specs] if _specs else []:
        if _spec.name in REGISTRY:
            raise RuntimeError(f"duplicate policy name {_spec.name!r} in {_info.name}")
        REGISTRY[_spec.name] = _spec


def get_policy(name: str) -> PolicySpec:
    key = name.lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[key]


def resolve_params(spec: PolicySpec, params) -> dict:
    """The policy's parameters: `params` over its defaults; an unknown name is an error."""
    params = dict(params or {})
    unknown = set(params) - set(spec.defaults)
    if unknown:
        raise ValueError(f"policy {spec.name!r} has no parameter(s) {sorted(unknown)}; "
                         f"valid: {sorted(spec.defaults) or 'none'}")
    return {**spec.defaults, **params}


def policy_names() -> list[str]:
    return sorted(REGISTRY)


__all__ = ["REGISTRY", "PolicyContext", "PolicySpec", "get_policy", "policy_names", "resolve_params"]
