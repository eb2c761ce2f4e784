"""One replay's outcome at one capacity: the record every consumer iterates.

`simulate` fills it (one-pass and replayed capacities through `make_result`); the sweep's
tracker logs every metric field to MLflow, the CSV columns and the console table read
the same fields, and the field table of docs/concepts.md is checked against them by a test. A new
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


def _per_tier(doc: str):
    # a mapping from lower-tier name to a count; flattened as `<field>.<tier>` (Result.row)
    return field(default_factory=dict, metadata={"metric": True, "per_tier": True, "doc": doc})


def _ttft(doc: str):
    # service time (no queueing) on a `hardware` part: NaN without one, percentiles NaN on a sample
    return field(default=float("nan"), metadata={"metric": True, "doc": doc, "optional": True, "ttft": True})


NAN = float("nan")


@dataclass(frozen=True, eq=False)
class Result:
    capacity_blocks: int = field(metadata={"doc": "HBM capacity in blocks"})
    accesses: int = field(metadata={"doc": "block accesses counted (after the warm-up)"})
    hits: int = _metric("block accesses served from HBM")
    hit_ratio: float = _metric("hits / accesses (HBM only)")
    compute_savings: Mapping[str, float] = field(
        metadata={"metric": True, "per_cost_model": True,
                  "doc": "saved prefill cost / total prefill cost, per cost model; a block served from any tier "
                         "is saved compute"})
    recomputed_blocks: int = _metric("block accesses recomputed (accesses - hits - lower-tier hits)")
    holes_total: float = _metric("runs of recomputed blocks, over all requests", optional=True)
    holes_per_request_mean: float = _metric("holes per request: mean", optional=True)
    holes_per_request_p50: float = _metric("holes per request: median", optional=True)
    holes_per_request_p99: float = _metric("holes per request: 99th percentile", optional=True)
    holes_per_request_max: float = _metric("holes per request: maximum", optional=True)
    hole_length_mean: float = _metric("recomputed blocks per hole", optional=True)
    evictions: int = _metric("blocks evicted from HBM")
    oversized_requests: int = _metric("requests larger than the cache (served uncached)")
    oversized_blocks: int = _metric("blocks of those requests")
    max_resident_blocks: int = _metric("largest number of resident blocks")
    sample_rate: float = _metric("1 = exact replay; below 1, a miniature simulation at this rate: counts are "
                                 "the sample's divided by the rate, holes are unavailable (NaN)", default=1.0)
    served_ratio: float = _metric("(HBM hits + lower-tier hits) / accesses; = hit_ratio without tiers",
                                  default=NAN)
    tier_hits: Mapping[str, int] = _per_tier("block accesses served from each lower tier (loaded into HBM)")
    tier_loaded_bytes: Mapping[str, int] = _per_tier("bytes loaded from each lower tier into HBM")
    tier_written_bytes: Mapping[str, int] = _per_tier("bytes written to each lower tier")
    tier_evictions: Mapping[str, int] = _per_tier("blocks evicted from each lower tier")
    tier_skipped_writes: Mapping[str, int] = _per_tier(
        "blocks a lower tier did not write because it could not free room without evicting the blocks of the "
        "request being replayed (the full-pool rule)")
    prompt_tokens: int = _metric("prompt tokens counted (each request's input_tokens)", default=0)
    reused_tokens: int = _metric("prompt tokens served from a cache (a full block counts block_tokens, a "
                                 "partial last block its remainder)", default=0)
    token_hit_ratio: float = _metric("reused_tokens / prompt_tokens: what engines report as prefix-cache hit "
                                     "rate", default=NAN)
    ttft_mean_s: float = _ttft("estimated time to first token, mean over counted requests (s)")
    ttft_p50_s: float = _ttft("estimated time to first token, median (s)")
    ttft_p99_s: float = _ttft("estimated time to first token, 99th percentile (s)")
    ttft_speedup: float = _ttft("mean TTFT with no cache / mean TTFT")
    warmup_requests: int = field(default=0, metadata={"doc": "requests replayed before counting began"})
    windows: Mapping | None = field(default=None, metadata={
        "doc": "per window of trace time (sim.window): start_s, accesses, hits, served, prompt_tokens, "
               "reused_tokens and compute_savings per cost model (lists, one entry per window)"})

    def __eq__(self, other) -> bool:
        # NaN means "not measured": two results that both lack a metric agree on it (a
        # value read back from a journal or store is a new NaN object, unequal to itself)
        if not isinstance(other, Result):
            return NotImplemented
        return same_values(self.to_dict(), other.to_dict())

    __hash__ = object.__hash__

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Mapping):
                d[f.name] = _plain(v)
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "Result":
        names = {f.name for f in dataclasses.fields(cls)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        missing = names - set(d)
        if missing:
            raise ValueError(f"result record lacks {sorted(missing)}")
        # values read back from a store may be floats: ints are restored by declared type
        return cls(**{f.name: int(d[f.name]) if f.type in ("int", int) and d[f.name] == d[f.name] else d[f.name]
                      for f in dataclasses.fields(cls) if f.name in d})

    def row(self, cost_model: str) -> dict:
        """Flat metric values under one cost model (compute_savings = that model's; a
        per-tier field becomes one `<field>.<tier>` entry per tier; windows are left out)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("per_cost_model"):
                out[f.name] = v[cost_model]
            elif f.metadata.get("per_tier"):
                out.update({f"{f.name}.{k}": x for k, x in v.items()})
            elif f.name != "windows":
                out[f.name] = v
        return out

    @classmethod
    def from_row(cls, row: Mapping, cost_model: str) -> "Result":
        """The inverse of `row`: one cost model's view of a result (a stored point)."""
        d: dict = {}
        tiers: dict[str, dict] = {f: {} for f in per_tier_fields()}
        for k, v in row.items():
            base, _, tier = str(k).partition(".")
            if tier and base in tiers:
                tiers[base][tier] = int(v) if v == v else 0
            elif base in _FIELD_NAMES:
                d[base] = v
        d.update(tiers)
        d["compute_savings"] = {cost_model: d["compute_savings"]} if "compute_savings" in d else {}
        return cls.from_dict(d)

    @property
    def lower_tier_hits(self) -> int:
        return int(sum(self.tier_hits.values()))


def same_values(a, b) -> bool:
    """Equal records, where NaN (not measured) equals NaN."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b


def _plain(v):
    return {k: _plain(x) if isinstance(x, Mapping) else (list(x) if isinstance(x, (list, tuple, np.ndarray)) else x)
            for k, x in v.items()}


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Result))


def per_tier_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Result) if f.metadata.get("per_tier"))


def metric_fields() -> tuple[str, ...]:
    """Names of the per-capacity metrics, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(Result) if f.metadata.get("metric"))


def required_fields() -> tuple[str, ...]:
    """Fields every stored point has (no default, not optional)."""
    return tuple(f.name for f in dataclasses.fields(Result) if f.default is dataclasses.MISSING
                 and f.default_factory is dataclasses.MISSING and not f.metadata.get("optional"))


def optional_fields() -> tuple[str, ...]:
    """Metrics that a sampled result reports as unavailable (NaN)."""
    return tuple(f.name for f in dataclasses.fields(Result) if f.metadata.get("optional"))


def field_docs() -> dict[str, str]:
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(Result)}


def sampled(res: Result, rate: float, capacity: int, accesses: int, prompt_tokens: int | None = None) -> Result:
    """A result measured on a sample at `rate`, as an estimate for the full trace at
    `capacity`: ratios as measured, counts divided by the rate, holes and TTFT
    percentiles unavailable."""
    hits = round(res.hit_ratio * accesses)
    scale = {k: {t: round(x / rate) for t, x in getattr(res, k).items()} for k in per_tier_fields()}
    tokens = round(res.prompt_tokens / rate) if prompt_tokens is None else int(prompt_tokens)
    served = round(res.served_ratio * accesses)
    return dataclasses.replace(
        res, capacity_blocks=int(capacity), accesses=int(accesses), hits=hits, recomputed_blocks=accesses - served,
        **{k: NAN for k in optional_fields() if k not in ("ttft_mean_s", "ttft_speedup")},
        evictions=round(res.evictions / rate), oversized_requests=round(res.oversized_requests / rate),
        oversized_blocks=round(res.oversized_blocks / rate), max_resident_blocks=round(res.max_resident_blocks / rate),
        sample_rate=float(rate), prompt_tokens=tokens, reused_tokens=round(res.token_hit_ratio * tokens)
        if res.token_hit_ratio == res.token_hit_ratio else 0, warmup_requests=res.warmup_requests, **scale)


def make_result(capacity: int, accesses: int, hit_by_depth: np.ndarray, holes: dict,
                counters: Mapping[str, int], compute_savings: Mapping[str, float], *, hbm_hits: int | None = None,
                tiers: Mapping[str, Mapping[str, int]] | None = None, tokens: tuple[int, int] = (0, 0),
                ttft: Mapping[str, float] | None = None, warmup_requests: int = 0,
                windows: Mapping | None = None) -> Result:
    """The one constructor every engine path uses. `hit_by_depth` counts served blocks
    (HBM and lower tiers); `hbm_hits` the HBM hits alone (default: all of them). `holes`
    holds holes_total and the holes_per_request_* statistics; `counters` evictions,
    oversized_requests, oversized_blocks and max_resident_blocks; `tiers` maps each
    lower-tier field (tier_hits, ...) to {tier name: count}; `tokens` is (prompt tokens,
    reused tokens); `ttft` the ttft_* fields."""
    n_served = int(hit_by_depth.sum())
    n_hits = n_served if hbm_hits is None else int(hbm_hits)
    misses = accesses - n_served
    n_holes = int(holes["holes_total"])
    prompt, reused = (int(tokens[0]), int(tokens[1]))
    return Result(
        capacity_blocks=int(capacity), accesses=int(accesses), hits=n_hits,
        hit_ratio=n_hits / accesses if accesses else NAN, compute_savings=dict(compute_savings),
        recomputed_blocks=misses, holes_total=float(n_holes),
        holes_per_request_mean=float(holes["holes_per_request_mean"]),
        holes_per_request_p50=float(holes["holes_per_request_p50"]),
        holes_per_request_p99=float(holes["holes_per_request_p99"]),
        holes_per_request_max=float(holes["holes_per_request_max"]),
        hole_length_mean=misses / n_holes if n_holes else 0.0,
        evictions=int(counters["evictions"]), oversized_requests=int(counters["oversized_requests"]),
        oversized_blocks=int(counters["oversized_blocks"]),
        max_resident_blocks=int(counters["max_resident_blocks"]),
        served_ratio=n_served / accesses if accesses else NAN,
        **{k: dict(v) for k, v in (tiers or {}).items()},
        prompt_tokens=prompt, reused_tokens=reused, token_hit_ratio=reused / prompt if prompt else NAN,
        **dict(ttft or {}), warmup_requests=int(warmup_requests), windows=windows,
    )
