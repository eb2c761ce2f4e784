"""Accelerator parts for the TTFT estimate, and the estimate itself.

TTFT here is service time, not a queue: a request's prefill time on an idle part,
  compute = recomputed FLOPs / (peak dense BF16 FLOP/s x MFU)
  load    = sum over lower tiers of (bytes loaded from the tier / the tier's bandwidth)
  TTFT    = max(compute, load) with `overlap` (layer-wise pipelining of loads under
            compute), compute + load without.
No scheduler, batching or queueing is modelled: with load, real TTFT is longer.
The FLOPs are the model's cost model (sim_core.catalog.cost: a + b*p per token), summed over
the recomputed blocks as full blocks.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Mapping

import numpy as np

GB = 1e9


@dataclass(frozen=True)
class Hardware:
    """One accelerator and the links below its HBM. Bandwidths in bytes/s (one direction)."""

    name: str
    peak_flops: float  # dense BF16 tensor FLOP/s, without sparsity
    hbm_bytes: float  # HBM capacity
    host_link_bps: float  # GPU <-> host memory (PCIe or NVLink-C2C)
    ssd_bps: float  # host SSD (or remote store) read bandwidth
    mfu: float = 0.5  # achieved fraction of peak in prefill
    hbm_bps: float = 3.35e12  # HBM bandwidth (the serving roofline's memory-bound steps)

    def link_bps(self, link: str) -> float:
        if link == "host":
            return self.host_link_bps
        if link == "ssd":
            return self.ssd_bps
        raise ValueError(f"unknown link {link!r}; valid: host, ssd")


# Datasheet values; sources in docs/tiers.md ("Hardware").
PARTS: dict[str, Hardware] = {h.name: h for h in (
    Hardware("h100_sxm", peak_flops=989e12, hbm_bytes=80 * GB, host_link_bps=64 * GB, ssd_bps=7 * GB,
             hbm_bps=3350 * GB),
    Hardware("h200", peak_flops=989e12, hbm_bytes=141 * GB, host_link_bps=64 * GB, ssd_bps=7 * GB, hbm_bps=4800 * GB),
    Hardware("b200", peak_flops=2250e12, hbm_bytes=180 * GB, host_link_bps=64 * GB, ssd_bps=14 * GB,
             hbm_bps=8000 * GB),
    Hardware("gh200", peak_flops=989e12, hbm_bytes=96 * GB, host_link_bps=450 * GB, ssd_bps=7 * GB,
             hbm_bps=4000 * GB),
    Hardware("l40s", peak_flops=362e12, hbm_bytes=48 * GB, host_link_bps=32 * GB, ssd_bps=7 * GB, hbm_bps=864 * GB),
)}


def as_hardware(hw) -> Hardware | None:
    """A Hardware from a part name, a Hardware, or a mapping {part: name, field: override...}
    (a field of None keeps the part's value). Each value is checked and a bad one named."""
    if hw is None or isinstance(hw, Hardware):
        return _checked(hw) if hw is not None else None
    if isinstance(hw, str):
        hw = {"part": hw}
    if not isinstance(hw, Mapping):
        raise ValueError(f"hardware must be a part name or a mapping, got {hw!r}")
    d = dict(hw)
    part = d.pop("part", None) or d.get("name")
    if part is None or str(part).lower() in ("none", "null"):
        return None
    part = str(part).lower()
    if part not in PARTS:
        raise ValueError(f"unknown hardware part {part!r}; valid: {', '.join(PARTS)}")
    fields = {f.name for f in dataclasses.fields(Hardware)}
    unknown = set(d) - fields
    if unknown:
        raise ValueError(f"hardware has no field(s) {sorted(unknown)}; valid: part, "
                         f"{', '.join(sorted(fields - {'name'}))}")
    over = {k: v for k, v in d.items() if v is not None and k != "name"}
    return _checked(dataclasses.replace(PARTS[part], **over))


def _checked(h: Hardware) -> Hardware:
    for k in ("peak_flops", "hbm_bytes", "host_link_bps", "ssd_bps", "hbm_bps"):
        v = getattr(h, k)
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not v > 0 or v != v or v == float("inf"):
            raise ValueError(f"hardware.{k} must be a positive number, got {v!r}")
    m = h.mfu
    if isinstance(m, bool) or not isinstance(m, numbers.Real) or not 0 < m <= 1:
        raise ValueError(f"hardware.mfu must be in (0, 1], got {m!r}")
    return h


def ttft_stats(total_flops: np.ndarray, saved_flops: np.ndarray, loaded_bytes: np.ndarray,
               bandwidths: np.ndarray, hw: Hardware, overlap: bool, scale: float = 1.0,
               percentiles: bool = True, latencies: np.ndarray | None = None) -> dict[str, float]:
    """The ttft_* result fields over requests. total_flops, saved_flops: float64[R] (each
    request's prefill FLOPs from scratch, and those its served blocks save);
    loaded_bytes: float64[T, R] per lower tier, bandwidths: float64[T] bytes/s. `scale`
    multiplies every per-request value (1/rate on a sample); percentiles are NaN when
    not asked for (a sample's requests are partial)."""
    rate = hw.peak_flops * hw.mfu
    compute = np.maximum(total_flops - saved_flops, 0.0) * (scale / rate)
    load = (loaded_bytes * scale / bandwidths[:, None]).sum(axis=0) if len(bandwidths) else np.zeros_like(compute)
    if latencies is not None and len(latencies):  # a tier's first byte comes after its latency (a remote store)
        load = load + ((loaded_bytes > 0) * latencies[:, None]).sum(axis=0)
    t = np.maximum(compute, load) if overlap else compute + load
    base = total_flops * (scale / rate)
    nan = float("nan")
    if not len(t):
        return {"ttft_mean_s": nan, "ttft_p50_s": nan, "ttft_p99_s": nan, "ttft_speedup": nan}
    mean = float(t.mean())
    return {"ttft_mean_s": mean,
            "ttft_p50_s": float(np.percentile(t, 50)) if percentiles else nan,
            "ttft_p99_s": float(np.percentile(t, 99)) if percentiles else nan,
            "ttft_speedup": float(base.mean()) / mean if mean > 0 else nan}
