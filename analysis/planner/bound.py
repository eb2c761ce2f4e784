"""Candidates that cannot meet a TTFT bound, known without a replay.

Two facts, both from the model `serve` replays (docs/planning.md#the-prefill-bound):

1. A replica prefills at most `rate` prompt tokens per second. Every step lasts at least
   what its step-time model gives a step of its T new prompt tokens with one request, no
   attention context and no decode (each model is non-decreasing in the FLOPs, the KV read,
   the requests and the decodes of a step), and T is at most the step's token budget. So
   rate = max over T of T / step_seconds(T), scanned over every T up to the budget.

2. A set S of requests needs at least W(S) prompt tokens computed: its prompt tokens minus
   what an infinite cache could reuse, which is each distinct full prompt block once
   (the engine reuses full blocks only, and never a request's last token). Dropping a
   request lowers W by at most its prompt tokens, so W(S) >= W(all) - the prompt tokens of
   the requests left out.

If TTFT p99 <= S, all but the k = n - 1 - round((n - 1) 0.99) slowest requests had their
first token by (last arrival + S), so the fleet computed at least W(all) minus the k largest
prompts by then: R replicas with W(all) - top_k > R x rate x (last arrival + S) cannot meet
it. The same holds for any TTFT percentile, and for a goodput floor g with the loosest TTFT
bound (k = n - ceil(g n)). Times are the serving replay's: arrivals from the first,
divided by the load.

A disaggregated fleet computes every prompt on its P prefill replicas: the same bound holds
with P and the prefill replicas' rate, whatever its decode replicas (plan._lanes).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sim_core.serving import served_lengths, step_model_of
from sim_core.serving.stepmodel import prefill_seconds


@dataclass(frozen=True)
class Work:
    """The trace's prefill work at one load, as the bound needs it."""

    min_tokens: float  # W(all): prompt tokens minus an infinite cache's reuse
    prompt_tokens: float
    top: np.ndarray  # cumulative prompt tokens of the largest prompts: top[k] = the k largest
    requests: int
    horizon_s: float  # the last arrival, in the replay's time (divided by the load)


def work(trace, engine, load: float) -> Work:
    prompt, _, _ = served_lengths(trace, engine)
    bt = int(trace.block_tokens)
    full = np.minimum(trace.request_lengths, prompt // bt)
    starts = trace.req_offsets[:-1]
    # each request's leading full prompt blocks, the only ones any request can find cached
    idx = np.repeat(starts, full) + (np.arange(int(full.sum())) - np.repeat(np.cumsum(full) - full, full))
    distinct = len(np.unique(trace.blocks[idx])) if len(idx) else 0
    P = float(prompt.sum())
    top = np.concatenate([[0.0], np.cumsum(np.sort(prompt)[::-1].astype(np.float64))])
    arrive = trace.arrival_s - trace.arrival_s.min()
    return Work(min_tokens=P - bt * float(full.sum() - distinct), prompt_tokens=P, top=top,
                requests=int(trace.n_requests), horizon_s=float(arrive.max()) / float(load))


def prefill_rate(dep, kv_tokens: int) -> float:
    """The most prompt tokens per second one replica of deployment `dep` that prefills can
    compute: an aggregated replica, or a prefill replica of a disaggregated fleet (its decode
    replicas compute no prompt: the KV comes by the handoff, docs/disagg.md).

    A disaggregated fleet on Dynamo's polynomial times a step of t new tokens in b chunks at
    its integer means (stepmodel.DYNAMO_OPTIONS round_means), at least t - (b - 1) tokens
    with b <= max_num_seqs: the step is timed at that many, so the rate stays an upper bound."""
    eng = dep.prefill if dep.disaggregated else dep.engine
    if dep.disaggregated:
        dep = dataclasses.replace(dep, engine=eng)
    sm = step_model_of(dep, int(kv_tokens))
    slack = int(eng.max_num_seqs) - 1 if eng.step_model == "dynamo" and eng.step_params.get("round_means") else 0
    a = float(dep.model.flops_a)
    best = 0.0
    for t in range(1, int(eng.max_num_batched_tokens) + 1):
        timed = max(t - slack, 0)
        s = prefill_seconds(sm, timed, a)
        if s > 0:
            best = max(best, t / s)
    return best if best > 0 else math.inf


def allowed_misses(slo, n: int) -> list[tuple[float, int]]:
    """(TTFT bound in seconds, requests that may exceed it) for each TTFT bound of the SLO."""
    out = []
    for b in slo.bounds:
        if b.key.startswith("ttft"):
            rank = int(math.floor((n - 1) * b.percentile / 100.0 + 0.5))
            out.append((b.seconds, n - 1 - rank))
    ttft = [b.seconds for b in slo.bounds if b.key.startswith("ttft")]
    if slo.goodput is not None and ttft:
        out.append((max(ttft), n - math.ceil(slo.goodput * n - 1e-9)))
    return out


def min_replicas(w: Work, slo, rate: float) -> int:
    """The fewest replicas of prefill `rate` (tokens/s each) that the bound lets meet the
    SLO's TTFT bounds (1 when it has none)."""
    need = 1
    for secs, k in allowed_misses(slo, w.requests):
        tokens = w.min_tokens - float(w.top[min(max(k, 0), w.requests)])
        if tokens > 0:
            need = max(need, math.ceil(tokens / (rate * (w.horizon_s + secs)) - 1e-12))
    return need
