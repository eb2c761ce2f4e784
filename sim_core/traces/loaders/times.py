"""Timestamps as traces record them: seconds, milliseconds, microseconds or nanoseconds,
numbers or numeric strings, absolute (Unix epoch) or relative to the trace's start.

Each format declares the unit its documentation gives (Mooncake: ms; Qwen Bailian: s;
LMCache's agent traces: µs). At the end of a file the unit is decided once, for the whole
file (:func:`resolve`):

* ``trace.time_unit`` (``time_unit=``) set: that unit.
* else the smallest stamp read as a Unix time: a value that is a date between 1980 and
  2100 in exactly one unit (3.2e8-4.1e9 s, 3.2e11-4.1e12 ms, 3.2e14-4.1e15 µs,
  3.2e17-4.1e18 ns: the ranges do not overlap) is an absolute time in that unit;
* else (relative times) the unit from the span: the format's own unit when, read in it,
  the trace is plausible, else the nearest unit that makes it so (finer when the span
  is too long, coarser when too short; :func:`span_unit`). Plausible: a span of at most
  a year and, for more than a thousand requests (enough to judge a rate), of at least a
  second with a mean gap between arrivals of at most 300 s. Relative µs stamps spanning
  3.6e9 over 3,000 requests in a ms format are 41.7 days with a request every 20
  minutes in ms, one hour in µs: read as µs. With a thousand requests or fewer the span
  says too little (ten arrivals may well be days apart): the format's unit is kept.

Absolute times are made relative (the first request arrives at 0). The unit and why it
was chosen are logged (a warning when the span overrode the format's unit); a span above
a year, or below a second for more than a thousand requests, is a warning naming the
unit read (a µs trace read as seconds spans years).
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from .lines import TraceFormatError

log = logging.getLogger("sim_core.traces.loaders")

#: unit -> units per second (``us`` and ``µs`` are one unit); dividing keeps 1200.5 ms = 1.2005 s exact
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
ALIASES = {"µs": "us", "sec": "s", "seconds": "s", "msec": "ms", "usec": "us", "nsec": "ns"}
_EPOCH_S = (3.2e8, 4.1e9)  # 1980-02 .. 2099-12 as Unix seconds
_YEAR_S = 365.25 * 86400
_MAX_DIGITS = 40  # a numeric string longer than this is not a timestamp
_MANY = 1000  # more requests than this: a span below a second, or a sparse rate, is implausible
_MAX_MEAN_GAP_S = 300.0  # fewer than 12 requests an hour over more than a thousand: not a serving trace


def unit_name(unit: str) -> str:
    """The canonical name of a unit (``µs`` -> ``us``); ValueError for an unknown one."""
    u = ALIASES.get(str(unit), str(unit))
    if u not in UNITS:
        raise ValueError(f"unknown time unit {unit!r}; valid: {', '.join(UNITS)}")
    return u


def stamp(ln, value: Any, field: str) -> float:
    """A timestamp: a finite number, or a string holding one (``"1753694362340138614"``)."""
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > _MAX_DIGITS:
            raise ln.fail(field, f"expected a number or a numeric string, got {value[:60]!r}")
        try:
            value = int(text) if text.lstrip("+-").isdigit() else float(text)
        except ValueError:
            raise ln.fail(field, f"expected a number or a numeric string, got {value[:60]!r}") from None
    return ln.number(value, field)


def absolute_unit(first: float) -> str | None:
    """The unit in which `first` (the smallest stamp) is a Unix time, or None."""
    for unit, per in UNITS.items():
        if _EPOCH_S[0] <= first / per <= _EPOCH_S[1]:
            return unit
    return None


def plausible(span_s: float, n: int) -> bool:
    """Whether `n` requests spanning `span_s` seconds look like a recorded trace."""
    if span_s > _YEAR_S:
        return False
    if n <= _MANY:
        return True
    return span_s >= 1.0 and span_s / (n - 1) <= _MAX_MEAN_GAP_S


def span_unit(raw_span: float, n: int, default: str) -> str:
    """The unit of relative stamps spanning `raw_span` (in the file's numbers) over `n`
    requests: `default` if plausible in it, else the nearest plausible unit in the
    direction the span asks for, else `default` (the caller warns)."""
    if n <= _MANY or plausible(raw_span / UNITS[default], n):
        return default
    names = list(UNITS)
    i = names.index(default)
    finer = raw_span / UNITS[default] > 1.0  # too long or too sparse: finer; too short: coarser
    for unit in (names[i + 1:] if finer else names[:i][::-1]):
        if plausible(raw_span / UNITS[unit], n):
            return unit
    return default


def resolve(raw: np.ndarray, default: str, override: str | None, where: str) -> tuple[np.ndarray, dict]:
    """(arrival seconds, what was decided) for a file's raw stamps (NaN: none given).
    The dict goes to ``Trace.meta["time"]``: unit, why, absolute, origin (raw)."""
    if np.isinf(raw).any():  # sub-agent offsets added up past float range
        raise TraceFormatError(f"{where}: timestamps overflow (an infinite arrival time)")
    finite = raw[np.isfinite(raw)]
    first = float(finite.min()) if len(finite) else 0.0
    guess = absolute_unit(first) if len(finite) else None
    if override is not None:
        unit, why = unit_name(override), "trace.time_unit"
        absolute = guess == unit
    elif guess is not None:
        unit, why, absolute = guess, "absolute (Unix time) by magnitude", True
    else:
        n_stamps = len(finite)
        raw_span = float(finite.max() - first) if n_stamps else 0.0
        unit, absolute = span_unit(raw_span, n_stamps, default), False
        why = ("relative; the format's unit" if unit == default else
               f"relative; by the span: {n_stamps} requests over {raw_span / UNITS[default]:.6g} s in the "
               f"format's {default}, {raw_span / UNITS[unit]:.6g} s in {unit}")
        if unit != default:
            log.warning("%s: timestamps read in %s, not the format's %s (%s); trace.time_unit=%s keeps the "
                        "format's", where, unit, default, why, default)
    origin = first if absolute else 0.0
    seconds = (raw - origin) / UNITS[unit]
    info = {"unit": unit, "why": why, "absolute": absolute, "origin": origin}
    span = float(np.nanmax(seconds) - np.nanmin(seconds)) if len(finite) else 0.0
    log.info("%s: timestamps read in %s (%s)%s; span %.6g s", where, unit, why,
             ", made relative to the first" if absolute else "", span)
    n = len(raw)
    if span > _YEAR_S or (span < 1.0 and n > 1000):
        what = f"{span / _YEAR_S:.1f} years" if span > _YEAR_S else f"{span:.3g} s for {n} requests"
        log.warning("%s: timestamps read in %s span %s; if the file's unit is another, set trace.time_unit "
                    "(one of %s)", where, unit, what, ", ".join(UNITS))
        info["span_warning"] = what
    if not math.isfinite(span):
        raise TraceFormatError(f"{where}: timestamps overflow when converted from {unit}")
    return seconds, info
