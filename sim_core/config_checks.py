"""Checks of configuration values shared by sim_core.traces.config, sweep and analysis.

`ConfigError` is defined here, in sim_core, so that the trace configuration
(sim_core.traces.config) raises the very error sweep's and analysis's command lines report
(sweep.config re-exports it).
"""
from __future__ import annotations

import re
import warnings


class ConfigError(ValueError):
    """Bad configuration or override: reported as one line, exit status 2."""


_INT_TEXT = re.compile(r"[+-]?\d+")


def check_int(value, key: str, lo: int | None = None, hi: int | None = None, *,
              allow_none: bool = False, none_means: str = "") -> int | None:
    """`value` as an int within [lo, hi], or ConfigError naming `key` and what is valid.

    Hydra hands over whatever was typed: 'abc' arrives as a str, true as a bool (which
    int() would quietly turn into 1) and 1e3 as a float. Whole floats and digit strings
    (e.g. from ${oc.env:...}) are accepted; booleans and fractions are not.
    """
    if lo is not None and hi is not None:
        valid = f"an integer from {lo} to {hi}"
    elif lo is not None:
        valid = f"an integer >= {lo}"
    else:
        valid = "an integer"
    if allow_none:
        valid += f" or null{f' ({none_means})' if none_means else ''}"
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"{key} must be {valid}, got null")
    if isinstance(value, bool):
        n = None
    elif isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        n = int(value)
    else:
        n = None
    if n is None or (lo is not None and n < lo) or (hi is not None and n > hi):
        raise ConfigError(f"{key} must be {valid}, got {value!r}")
    return n


def check_number(value, key: str, *, positive: bool = True, allow_none: bool = False,
                 none_means: str = "") -> float | None:
    """`value` as a finite float (> 0 when `positive`), or ConfigError naming `key`."""
    valid = "a positive number" if positive else "a number"
    if allow_none:
        valid += f" or null{f' ({none_means})' if none_means else ''}"
    if value is None and allow_none:
        return None
    x = None
    if not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:
            x = float(value)
        except ValueError:
            x = None
    if x is None or x != x or x in (float("inf"), float("-inf")) or (positive and x <= 0):
        raise ConfigError(f"{key} must be {valid}, got {value!r}")
    return x


def check_bool(value, key: str) -> bool:
    """true/false only: bool('no') is True, so a typo must not silently switch a flag on."""
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{key} must be true or false, got {value!r}")


#: names replaced in the deployment vocabulary (CHANGELOG 0.2.0): old keyword -> new keyword,
#: for simulate(); they work for one release with a DeprecationWarning
RENAMED = {"hbm_capacities": "capacity_blocks", "capacities": "capacity_blocks", "engine": "counting"}


def renamed(given: dict, where: str = "simulate", stacklevel: int = 3, **current):
    """The current keywords' values, with any old name in `given` (the call's leftover
    keywords) moved to its new one and a DeprecationWarning that names the new one. An
    unknown keyword is a TypeError, as Python gives it; a value given under both names is
    refused."""
    out = dict(current)
    for old, value in given.items():
        new = RENAMED.get(old)
        if new is None or new not in out:
            raise TypeError(f"{where}() got an unexpected keyword argument {old!r}")
        if out[new] is not None:
            raise ValueError(f"{where}: give {new} once ({old} is its older name)")
        warnings.warn(f"{where}({old}=...) is deprecated and will be removed in the next release: use {new}=",
                      DeprecationWarning, stacklevel=stacklevel)
        out[new] = value
    return tuple(out.values())
