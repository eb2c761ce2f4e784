"""Policy registry: name -> PolicySpec. Each policy is one small module."""
from __future__ import annotations

from importlib import import_module

from .api import PolicyContext, PolicySpec

# module names under sim_core.policies; each defines SPEC
_MODULES = ("lru", "fifo", "lfu", "belady")

REGISTRY: dict[str, PolicySpec] = {}
for _m in _MODULES:
    _spec = import_module(f"{__name__}.{_m}").SPEC
    REGISTRY[_spec.name] = _spec


def get_policy(name: str) -> PolicySpec:
    key = name.lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[key]


def policy_names() -> list[str]:
    return sorted(REGISTRY)


__all__ = ["REGISTRY", "PolicyContext", "PolicySpec", "get_policy", "policy_names"]
