"""One replay's outcome at one capacity: the record every consumer iterates.

`simulate` fills it (one-pass and replayed capacities through `make_result`); the sweep's
tracker logs every metric field to MLflow, the CSV columns and the console table read
the same fields, and the README's metric list is checked against them by a test. A new
engine counter is one field here plus its line in `make_result`.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np


class Mode(str, enum.Enum):
    """Replay semantics (a str, so "request" == Mode.REQUEST)."""

    REQUEST = "request"  # residency constraint: the whole request is resident at prefill
    BLOCK = "block"  # libCacheSim: every access on its own

    def __str__(self) -> str:
        return self.value


class Hits(str, enum.Enum):
    """Hit accounting (changes what is counted, never the cache contents)."""

    BLOCK = "block"  # every resident block is reused; gaps are holes
    PREFIX = "prefix"  # reuse stops at the request's first missing block

    def __str__(self) -> str:
        return self.value


class Order(str, enum.Enum):
    """Recency order of a request's own blocks once it is served (request mode).

    The engine walks a request to prefill it; that walk is the order in which its blocks
    are touched, so it decides which of them a recency policy gives up first.
    """

    TAIL_FIRST = "tail_first"  # deepest block touched first: the tail is evicted first (vLLM, SGLang)
    FORWARD = "forward"  # shallowest block touched first: the head is evicted first

    def __str__(self) -> str:
        return self.value


def _metric(doc: str, optional: bool = False, **kw):
    # optional: not defined on a sample (holes need every block of a request): NaN there
    return field(metadata={"metric": True, "doc": doc, "optional": optional}, **kw)


@dataclass(frozen=True)
class Result:
    capacity_blocks: int = field(metadata={"doc": "cache capacity in blocks"})
    accesses: int = field(metadata={"doc": "block accesses replayed"})
    hits: int = _metric("block accesses served from the cache")
    hit_ratio: float = _metric("hits / accesses")
    compute_savings: Mapping[str, float] = field(
        metadata={"metric": True, "per_cost_model": True,
                  "doc": "saved prefill cost / total prefill cost, per cost model"})
    recomputed_blocks: int = _metric("block accesses recomputed (accesses - hits)")
    holes_total: float = _metric("runs of recomputed blocks, over all requests", optional=True)
    holes_per_request_mean: float = _metric("holes per request: mean", optional=True)
    holes_per_request_p50: float = _metric("holes per request: median", optional=True)
    holes_per_request_p99: float = _metric("holes per request: 99th percentile", optional=True)
    holes_per_request_max: float = _metric("holes per request: maximum", optional=True)
    hole_length_mean: float = _metric("recomputed blocks per hole", optional=True)
    evictions: int = _metric("blocks evicted")
    oversized_requests: int = _metric("requests larger than the cache (served uncached)")
    oversized_blocks: int = _metric("blocks of those requests")
    max_resident_blocks: int = _metric("largest number of resident blocks")
    sample_rate: float = _metric("1 = exact replay; below 1, a miniature simulation at this rate: counts are "
                                 "the sample's divided by the rate, holes are unavailable (NaN)", default=1.0)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["compute_savings"] = dict(self.compute_savings)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "Result":
        names = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = names - set(d)
        if missing:
            raise ValueError(f"result record lacks {sorted(missing)}")
        # values read back from a store may be floats: ints are restored by declared type
        return cls(**{f.name: int(d[f.name]) if f.type in ("int", int) else d[f.name]
                      for f in dataclasses.fields(cls) if f.name in d})

    def row(self, cost_model: str) -> dict:
        """Flat metric values under one cost model (compute_savings = that model's)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v[cost_model] if f.metadata.get("per_cost_model") else v
        return out


def metric_fields() -> tuple[str, ...]:
    """Names of the per-capacity metrics, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(Result) if f.metadata.get("metric"))


def optional_fields() -> tuple[str, ...]:
    """Metrics that a sampled result reports as unavailable (NaN)."""
    return tuple(f.name for f in dataclasses.fields(Result) if f.metadata.get("optional"))


def field_docs() -> dict[str, str]:
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(Result)}


def sampled(res: Result, rate: float, capacity: int, accesses: int) -> Result:
    """A result measured on a sample at `rate`, as an estimate for the full trace at
    `capacity`: ratios as measured, counts divided by the rate, holes unavailable."""
    nan = float("nan")
    hits = round(res.hit_ratio * accesses)
    return dataclasses.replace(
        res, capacity_blocks=int(capacity), accesses=int(accesses), hits=hits, recomputed_blocks=accesses - hits,
        **{k: nan for k in optional_fields()}, evictions=round(res.evictions / rate),
        oversized_requests=round(res.oversized_requests / rate), oversized_blocks=round(res.oversized_blocks / rate),
        max_resident_blocks=round(res.max_resident_blocks / rate), sample_rate=float(rate))


def make_result(capacity: int, accesses: int, hit_by_depth: np.ndarray, holes: dict,
                counters: Mapping[str, int], compute_savings: Mapping[str, float]) -> Result:
    """The one constructor both engine paths use. `holes` holds holes_total and the
    holes_per_request_* statistics; `counters` evictions, oversized_requests,
    oversized_blocks and max_resident_blocks."""
    n_hits = int(hit_by_depth.sum())
    misses = accesses - n_hits
    n_holes = int(holes["holes_total"])
    return Result(
        capacity_blocks=int(capacity), accesses=int(accesses), hits=n_hits,
        hit_ratio=n_hits / accesses, compute_savings=dict(compute_savings),
        recomputed_blocks=misses, holes_total=float(n_holes),
        holes_per_request_mean=float(holes["holes_per_request_mean"]),
        holes_per_request_p50=float(holes["holes_per_request_p50"]),
        holes_per_request_p99=float(holes["holes_per_request_p99"]),
        holes_per_request_max=float(holes["holes_per_request_max"]),
        hole_length_mean=misses / n_holes if n_holes else 0.0,
        evictions=int(counters["evictions"]), oversized_requests=int(counters["oversized_requests"]),
        oversized_blocks=int(counters["oversized_blocks"]),
        max_resident_blocks=int(counters["max_resident_blocks"]),
    )
