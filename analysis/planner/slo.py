"""The SLO a plan sizes for: latency bounds on a serving replay's percentiles and means,
and optionally a goodput floor.

`{"ttft_p99": "2s", "tpot_mean": "50ms", "goodput": 0.99}`: every bound is a latency with
its unit (sim_core.serving.slo_seconds refuses a bare number); a deployment meets the SLO
when each bounded field of its sim_core.ServeResult is within its bound and, with a goodput
floor, when at least that share of requests has TTFT and TPOT within the loosest TTFT and
TPOT bounds given (serve's own per-request goodput, sim_core.serving.result.goodput_fields).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Mapping

from sim_core.serving import slo_seconds

#: an SLO key -> the ServeResult field it bounds, and its percentile (None: a mean)
METRICS = {"ttft_p50": ("ttft_p50_s", 50), "ttft_p90": ("ttft_p90_s", 90), "ttft_p99": ("ttft_p99_s", 99),
           "tpot_mean": ("tpot_mean_s", None), "tpot_p99": ("tpot_p99_s", 99), "e2e_p99": ("e2e_p99_s", 99)}


@dataclass(frozen=True)
class Bound:
    key: str  # a key of METRICS
    seconds: float
    text: str  # as given: "2s"

    @property
    def field(self) -> str:
        return METRICS[self.key][0]

    @property
    def percentile(self):
        return METRICS[self.key][1]


@dataclass(frozen=True)
class Slo:
    bounds: tuple  # Bound, in the order given
    goodput: float | None = None  # the least share of requests within the per-request bounds

    def values(self, r) -> dict:
        """key -> the result's value (goodput: its ratio)."""
        out = {b.key: float(getattr(r, b.field)) for b in self.bounds}
        if self.goodput is not None:
            out["goodput"] = float(r.goodput_ratio)
        return out

    def ratios(self, r) -> dict:
        """key -> how far the result is from its bound, as value / bound (goodput: floor /
        ratio): above 1 misses. A NaN value (no request with two output tokens) misses."""
        out = {}
        for b in self.bounds:
            v = float(getattr(r, b.field))
            out[b.key] = v / b.seconds if v == v else math.inf
        if self.goodput is not None:
            g = float(r.goodput_ratio)
            out["goodput"] = self.goodput / g if g > 0 else math.inf
        return out

    def meets(self, r) -> bool:
        return all(x <= 1.0 for x in self.ratios(r).values())

    def margin(self, r) -> float:
        """The tightest bound's slack, 1 - value / bound (negative: missed by that share)."""
        return 1.0 - max(self.ratios(r).values())

    def misses(self, r) -> dict:
        """key -> the share by which the result misses that bound (0.23: 23% over it)."""
        return {k: x - 1.0 for k, x in self.ratios(r).items() if x > 1.0}

    @property
    def primary(self) -> Bound:
        """The bound the front is drawn against: the first TTFT bound, else the first."""
        return next((b for b in self.bounds if b.key.startswith("ttft")), self.bounds[0])

    def per_request(self) -> dict | None:
        """serve(slo=...) for the goodput floor: the loosest TTFT and TPOT bounds (None
        without a floor: goodput is not needed)."""
        if self.goodput is None:
            return None
        out = {}
        for kind in ("ttft", "tpot"):
            mine = [b for b in self.bounds if b.key.startswith(kind)]
            if mine:
                out[kind] = max(mine, key=lambda b: b.seconds).text
        return out

    def text(self) -> str:
        parts = [f"{b.key.replace('_', ' ')} <= {b.text}" for b in self.bounds]
        if self.goodput is not None:
            parts.append(f"goodput >= {self.goodput:.4g}")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {**{b.key: b.text for b in self.bounds}, **({"goodput": self.goodput} if self.goodput is not None else {})}


def as_slo(slo) -> Slo:
    """A checked Slo; errors name the field (slo.<key>)."""
    if isinstance(slo, Slo):
        return slo
    if not isinstance(slo, Mapping) or not slo:
        raise ValueError(f"slo must map bounds to latencies, e.g. {{'ttft_p99': '2s'}}, got {slo!r}")
    unknown = sorted(set(slo) - set(METRICS) - {"goodput"})
    if unknown:
        raise ValueError(f"slo has no key {unknown[0]!r}; valid: {', '.join(METRICS)}, goodput")
    bounds = tuple(Bound(k, slo_seconds(v, f"slo.{k}"), str(v).strip()) for k, v in slo.items()
                   if k in METRICS and v is not None)
    g = slo.get("goodput")
    if g is not None:
        if isinstance(g, str) and g.strip().endswith("%"):
            try:
                g = float(g.strip()[:-1]) / 100
            except ValueError:
                raise ValueError(f"slo.goodput must be a share of requests such as 0.99 or '99%', got {g!r}") from None
        if isinstance(g, bool) or not isinstance(g, numbers.Real) or not 0 < g <= 1:
            raise ValueError(f"slo.goodput must be a share of requests in (0, 1], such as 0.99 or '99%', got {g!r}")
        if not any(b.key.startswith(("ttft", "tpot")) for b in bounds):
            raise ValueError("slo.goodput counts requests within the TTFT and TPOT bounds: give one, e.g. slo.ttft_p99")
    if not bounds:
        raise ValueError("slo has no bound: give at least one, e.g. {'ttft_p99': '2s'}")
    return Slo(bounds=bounds, goodput=None if g is None else float(g))
