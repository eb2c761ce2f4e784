"""One serving replay's outcome: the record every consumer iterates (like sim_core.Result).

Times are seconds of virtual time from the first arrival. A percentile is the sample's
value at rank round((n - 1) p / 100), as Dynamo's replay reports it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..result import same_values

NAN = float("nan")


def _m(doc: str, **kw):
    return field(metadata={"metric": True, "doc": doc}, **kw)


@dataclass(frozen=True, eq=False)
class ServeResult:
    capacity_blocks: int = field(metadata={"doc": "KV cache per replica, in blocks"})
    replicas: int = field(metadata={"doc": "engines behind the router"})
    arrival_speedup: float = field(metadata={"doc": "trace arrival times divided by this"})
    requests: int = _m("requests served (all finish)")
    prompt_tokens: int = _m("prompt tokens of those requests")
    output_tokens: int = _m("output tokens generated")
    first_reuse_ratio: float = _m("prompt tokens reused from the cache at each request's first admission / "
                                  "prompt tokens: the clean cross-request hit rate")
    reuse_ratio: float = _m("prompt tokens reused, counting re-admissions after preemption (each request's "
                            "best admission) / prompt tokens: Dynamo's prefix_cache_reused_ratio")
    ttft_mean_s: float = _m("time to first token (arrival to the end of the step that completes the prefill), mean")
    ttft_p50_s: float = _m("time to first token, median")
    ttft_p90_s: float = _m("time to first token, 90th percentile")
    ttft_p99_s: float = _m("time to first token, 99th percentile")
    tpot_mean_s: float = _m("time per output token after the first, (last - first) / (outputs - 1), mean over "
                            "requests with more than one output token")
    itl_mean_s: float = _m("inter-token latency: every gap between consecutive tokens, mean")
    e2e_mean_s: float = _m("arrival to last token, mean")
    e2e_p99_s: float = _m("arrival to last token, 99th percentile")
    queue_wait_mean_s: float = _m("arrival to first admission, mean")
    throughput_rps: float = _m("requests finished / makespan")
    output_tps: float = _m("output tokens / makespan")
    input_tps: float = _m("prompt tokens / makespan")
    makespan_s: float = _m("first arrival to last token")
    preemptions: int = _m("requests preempted (blocks released, progress recomputed); with SGLang's scheduler, "
                          "its retractions")
    recomputed_tokens: int = _m("tokens computed again after a preemption (progress lost minus what the "
                                "re-admission found in the cache)")
    computed_tokens: int = _m("tokens whose KV was computed (prefill and decode, recomputation included)")
    evictions: int = _m("blocks evicted from the replicas' caches")
    steps: int = _m("engine steps")
    queue_peak: int = _m("largest waiting queue of any replica")
    queue_mean: float = _m("waiting requests over all replicas, time-weighted mean over the makespan")
    pinned_peak: int = _m("most blocks pinned by running requests on one replica at a step start")
    tpot_p99_s: float = _m("time per output token, 99th percentile over requests with more than one output token",
                            default=NAN)
    regret_tokens: int = _m("prompt tokens recomputed because the router sent a request to a replica holding "
                            "less of its prefix than another held at that moment", default=0)
    busy_imbalance: float = _m("busiest replica's busy time / the mean over replicas (1: balanced)", default=NAN)
    prefill_imbalance: float = _m("most prefilled tokens on one replica / the mean over replicas", default=NAN)
    jain_busy: float = _m("Jain's fairness index of busy time over replicas, (sum x)^2 / (R sum x^2): 1 balanced, "
                          "1/R all on one", default=NAN)
    ceiling_reuse_ratio: float = _m("the fleet ceiling: prompt tokens Belady would reuse over one pooled cache of "
                                    "replicas x capacity blocks / prompt tokens (docs/fleet.md)", default=NAN)
    infinite_reuse_ratio: float = _m("prompt tokens an infinite cache would reuse / prompt tokens", default=NAN)
    goodput_ratio: float = _m("requests meeting the SLO / requests (NaN without an SLO)", default=NAN)
    goodput_rps: float = _m("requests meeting the SLO / makespan", default=NAN)
    goodput_tps: float = _m("output tokens of requests meeting the SLO / makespan", default=NAN)
    slo_ttft_s: float = field(default=NAN, metadata={"doc": "the SLO's TTFT bound (NaN: none)"})
    slo_tpot_s: float = field(default=NAN, metadata={"doc": "the SLO's TPOT bound (NaN: none)"})
    extrapolated_steps: int = _m("steps step_model=measured timed outside aiconfigurator-core's measured data (tokens "
                                 "per pass, prefill or decode attention beyond its grid): their times are the "
                                 "package's extrapolation", default=0)
    # the roles (docs/disagg.md): a disaggregated fleet has prefill_replicas prefill replicas
    # (the first in per_replica) and `replicas` decode replicas; an aggregated one counts as
    # all decode, as Dynamo's replay reports it. TTFT = its five parts, each a mean.
    prefill_replicas: int = field(default=0, metadata={"doc": "prefill replicas before the `replicas` decode "
                                                              "replicas (0: an aggregated fleet)"})
    handoff_mean_s: float = _m("prefill completion (source held) to decode activation, mean (0: aggregated)",
                               default=0.0)
    handoff_p99_s: float = _m("prefill completion to decode activation, 99th percentile", default=0.0)
    ttft_prefill_queue_s: float = _m("TTFT's part: arrival to the first (prefill) admission, mean", default=NAN)
    ttft_prefill_s: float = _m("TTFT's part: first admission to the end of the prompt's pass (aggregated: the "
                               "first token), mean", default=NAN)
    ttft_handoff_wait_s: float = _m("TTFT's part: prefill completion to the decode replica's reservation, mean",
                                    default=0.0)
    ttft_transfer_s: float = _m("TTFT's part: reservation to activation on the decode replica (the transfer and "
                                "the wait for its pass boundary), mean", default=0.0)
    ttft_first_decode_s: float = _m("TTFT's part: activation to the first visible token (the wait for admission "
                                    "and one decode step), mean", default=0.0)
    transfer_bytes: int = _m("KV bytes moved from prefill to decode replicas (0: transfers free or aggregated)",
                             default=0)
    decode_resident_ratio: float = _m("prompt tokens the decode replica already held at reservation (not moved) / "
                                      "prompt tokens", default=0.0)
    gpu_seconds_prefill: float = _m("prefill replicas x GPUs each x makespan (provisioned, as Dynamo's "
                                    "prefill_worker_seconds x GPUs)", default=0.0)
    gpu_seconds_decode: float = _m("decode (aggregated: all) replicas x GPUs each x makespan", default=NAN)
    busy_gpu_seconds_prefill: float = _m("GPU-seconds the prefill replicas spent in steps", default=0.0)
    busy_gpu_seconds_decode: float = _m("GPU-seconds the decode (aggregated: all) replicas spent in steps",
                                        default=NAN)
    preemptions_prefill: int = _m("preemptions on prefill replicas", default=0)
    router: str = field(default="round_robin", metadata={"doc": "the router in front of the replicas"})
    decode_router: str = field(default="", metadata={"doc": "the decode pool's router ('' aggregated)"})
    # the setup, not the outcome: left out of equality (a point read back from MLflow has no text or mapping)
    step_model: str = field(default="", metadata={
        "setup": True,
        "doc": "the step-time model; for measured: model, GPU, backend, data and package versions, TP, composition"})
    kv_budget: dict = field(default_factory=dict, metadata={
        "setup": True,
        "doc": "with a GPU and a Hugging Face model: the KV cache memory leaves (sim_core.catalog.kvmemory): "
               "memory, fraction, weights, activations, runtime bytes per GPU, tokens, blocks, host_blocks"})
    output_tokens_assumed: int = field(default=0, metadata={
        "doc": "the trace has no output lengths: every request generates this many (0: the trace's own)"})
    tier_hits: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True, "doc": "blocks loaded from each lower tier instead of recomputed"})
    tier_loaded_bytes: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True, "doc": "bytes loaded from each lower tier"})
    tier_capacity: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True, "doc": "each lower tier's capacity in blocks (per replica, or the fleet's "
                                                 "for a shared one)"})
    tier_shared: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True, "doc": "1 for the tier the replicas share, 0 for each replica's own"})
    tier_load_s: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True,
        "doc": "seconds requests waited for loads from each lower tier (latency, transfer and queueing on the link)"})
    tier_skipped_writes: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True,
        "doc": "blocks a lower tier refused to take because it held nothing it could evict (the full-pool rule; "
               "a stretch refused again on later steps counts once)"})
    tier_first_tokens: dict = field(default_factory=dict, metadata={
        "metric": True, "per_tier": True,
        "doc": "prompt tokens each lower tier served at the requests' first admissions"})
    hbm_first_reuse_ratio: float = _m("prompt tokens HBM served at the first admissions / prompt tokens (with "
                                      "lower tiers: first_reuse_ratio minus their share; without, first_reuse_ratio)",
                                      default=NAN)
    pool_foreign_blocks: int = _m("blocks loaded from the shared pool that another replica had written", default=0)
    per_replica: list = field(default_factory=list, metadata={
        "doc": "one record per engine (prefill replicas first): requests, prompt_tokens, first_reuse_ratio, "
               "reuse_ratio (a decode replica: the prompt it already held), ttft_mean_s, ttft_p50_s, ttft_p99_s, "
               "busy_s, prefilled_tokens, preemptions, evictions, queue_peak; with lower tiers also hbm_tokens, "
               "pool_foreign_blocks and per tier tier_tokens.<tier> (first admissions), tier_loads.<tier> (blocks), "
               "load_wait_s.<tier>, skipped_writes.<tier>"})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __eq__(self, other) -> bool:
        if not isinstance(other, ServeResult):
            return NotImplemented
        a, b = self.to_dict(), other.to_dict()
        for k in _SETUP:
            a.pop(k), b.pop(k)
        return same_values(a, b)

    __hash__ = object.__hash__


_SETUP = tuple(f.name for f in dataclasses.fields(ServeResult) if f.metadata.get("setup"))


def serve_metric_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(ServeResult) if f.metadata.get("metric"))


def imbalance_fields(busy: np.ndarray, prefilled: np.ndarray) -> dict:
    """Load imbalance over replicas: max / mean of busy time and of prefilled tokens, and
    Jain's index of busy time."""
    busy = np.asarray(busy, float)
    pf = np.asarray(prefilled, float)
    sq = float((busy ** 2).sum())
    return {"busy_imbalance": float(busy.max() / busy.mean()) if busy.mean() > 0 else NAN,
            "prefill_imbalance": float(pf.max() / pf.mean()) if pf.mean() > 0 else NAN,
            "jain_busy": float(busy.sum() ** 2 / (len(busy) * sq)) if sq > 0 else NAN}


def _pct(x: np.ndarray, p: float) -> float:
    """The value at rank round((n - 1) p / 100) of the sorted sample (half away from zero),
    as Dynamo's replay reports its percentiles."""
    n = len(x)
    if not n:
        return NAN
    k = int(np.floor((n - 1) * p / 100.0 + 0.5))
    return float(np.partition(x, k)[k])


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if len(x) else NAN


def latency_fields(arrive, t_first, t_last, out) -> dict:
    """TTFT, TPOT, ITL and end-to-end statistics of a set of finished requests."""
    ttft = t_first - arrive
    e2e = t_last - arrive
    multi = out > 1
    gaps = (t_last - t_first)[multi]
    tpot = gaps / (out[multi] - 1)
    n_gaps = int((out[multi] - 1).sum())
    return {"ttft_mean_s": _mean(ttft), "ttft_p50_s": _pct(ttft, 50), "ttft_p90_s": _pct(ttft, 90),
            "ttft_p99_s": _pct(ttft, 99), "tpot_mean_s": _mean(tpot), "tpot_p99_s": _pct(tpot, 99),
            "itl_mean_s": float(gaps.sum() / n_gaps) if n_gaps else NAN,
            "e2e_mean_s": _mean(e2e), "e2e_p99_s": _pct(e2e, 99)}


def goodput_fields(arrive, t_first, t_last, out, makespan: float, slo_ttft: float, slo_tpot: float) -> dict:
    """Requests meeting the SLO: TTFT within its bound and (for more than one output token)
    the mean gap (last - first) / (outputs - 1) within the TPOT bound."""
    if slo_ttft != slo_ttft and slo_tpot != slo_tpot:
        return {}
    ok = np.ones(len(arrive), bool)
    if slo_ttft == slo_ttft:
        ok &= (t_first - arrive) <= slo_ttft
    if slo_tpot == slo_tpot:
        multi = out > 1
        tpot = np.where(multi, (t_last - t_first) / np.maximum(out - 1, 1), 0.0)
        ok &= tpot <= slo_tpot
    n = len(arrive)
    span = makespan if makespan > 0 else NAN
    return {"goodput_ratio": float(ok.mean()) if n else NAN, "goodput_rps": float(ok.sum()) / span,
            "goodput_tps": float(out[ok].sum()) / span}
