"""Serving under load: a virtual-time replay of engines with continuous batching.

`serve(trace, policy, capacity_blocks, ...)` replays a trace's requests at their arrival
times (divided by `arrival_speedup`) through `replicas` engines behind a router. Each
engine runs vLLM v1's scheduler or SGLang's over its own KV block pool, whose unpinned
blocks the eviction `policy` chooses among; each step lasts what the engine's step-time
model says.
The model, what it leaves out and every metric: docs/serving.md.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import os
import re
from typing import Mapping

import numpy as np

from ..catalog.cost import cost_per_depth
from ..tiers.hierarchy import T_BAD_VICTIM, T_FAILED
from ..policies import PolicyContext, get_policy, resolve_params
from .ceiling import fleet_ceiling
from .deployment import FIELDS, Deployment, deployment, kv_capacity, measured_config, prefill_pool_params
from .disagg import check_fits, decode_side, idle, role_fields
from .engines import ENGINES, ServeEngine
from .loop import replica_states, run_serve
from .result import ServeResult, goodput_fields, imbalance_fields, latency_fields, serve_metric_fields
from .routers import ROUTERS, get_router, lag, router_view
from .routers.view import RS_REGRET
from .schedulers import engine_cfg, new_sched_state
from .state import (C_BADV, C_CAP, C_DEC_TOKENS, C_ERR, C_EVICT, C_EXTRAP, C_PEAK_PINNED, C_PF_TOKENS, C_PREEMPT, C_QPEAK,
                    C_COMPUTED, C_STEPS, ERR_POLICY, ERR_STALL, ERR_STATE, F_BUSY, F_QAREA, new_state)
from .sessions import turns
from .stepmodel import dynamo_model, measured_model, profile_model, roofline_model
from .tier_results import tier_fields
from .tiers import build_below

log = logging.getLogger(__name__)

__all__ = ["Deployment", "ENGINES", "ROUTERS", "ServeEngine", "ServeResult", "deployment", "serve", "serve_metric_fields",
           "slo_seconds", "step_model_of"]


def serve(trace, policy: str, capacity_blocks: int | None, *, deployment: Deployment | None = None,
          arrival_speedup: float = 1.0, seed: int = 0, params: Mapping | None = None, slo: Mapping | None = None,
          cost_model: str | None = None, sessions: bool = False, **fields) -> ServeResult:
    """Replay `trace` through a deployment's replicas, each with `capacity_blocks` KV blocks.

    The deployment (sim_core.serving.deployment) is `deployment`, or is built from its
    fields given as keywords: `replicas`, `engine` (a preset name of `ENGINES` or a mapping
    {"preset": name, key: override}: max_num_seqs, max_num_batched_tokens, chunked_prefill,
    step_model, tp, ...), `router` (one of `ROUTERS`) with its `router_params`
    (sim_core.serving.routers, docs/fleet.md), `tiers`, `hardware`, `model` and `overlap`;
    not both. `policy` (and its `params`) is any registered eviction policy that can run
    with pinned blocks; `hardware` and `model` feed the roofline and measured step models
    (and name the model whose FLOPs a cost-aware policy optimises, `cost_model` overriding):
    `model` a sim_core.catalog.models name, a Hugging Face id bundled with
    aiconfigurator-core or a local directory holding config.json; with a GPU and such a
    model `capacity_blocks=None` (or "auto") derives each engine's KV cache from memory
    (sim_core.catalog.kvmemory). `slo` {"ttft": "2s", "tpot": "50ms"} adds goodput. `sessions=True` closes each session's loop: turn k+1 is sent when
    turn k finishes, plus the trace's gap between them (sim_core.serving.sessions). The
    engine's block size is the trace's (sim_core.traces.reblock coarsens a trace). `tiers` (as
    simulate takes them, with the same rules and `hierarchy` names; the rules a tier leaves
    out are the engine's hierarchy's) hold blocks below each replica's HBM, and a tier marked
    shared is one pool for the whole fleet: a block found there is loaded at the tier's
    bandwidth (the hardware's link, or the tier's bandwidth_bps; inf copies instantaneously)
    after its latency_s, and the step that needs it waits for the load, overlapped with its
    compute when `overlap` (sim_core.serving.tiers, docs/tiers.md). `prefill_replicas=P` > 0 disaggregates the fleet: P prefill replicas
    behind `router` hand each prompt's KV to the `replicas` decode replicas
    (sim_core.serving.handoff; `kv_transfer`, `decode_router`, `prefill_engine`,
    `prefill_capacity_blocks`: docs/disagg.md)."""
    spec = get_policy(policy)
    why = cannot_serve(spec)
    if why:
        raise ValueError(f"policy {spec.name!r} cannot run in the serving replay: {why}")
    params = resolve_params(spec, params)
    dep = _deployment(deployment, fields)
    n_rep = dep.replicas
    P = dep.prefill_replicas
    rspec = get_router(dep.router)
    rgot = dict(dep.router_params)
    eng = dep.engine
    pre = dep.prefill  # the engine that prefills (the fleet's own when aggregated)
    speedup = _positive_real(arrival_speedup, "arrival_speedup")
    specs = list(dep.tiers)
    if specs and eng.scheduler != "vllm":
        raise ValueError(f"tiers are modelled for the vLLM scheduler only, not engine {eng.name!r}'s "
                         f"{eng.scheduler} scheduler: give no tiers")
    if trace.depth is not None or trace.tail_first:
        raise ValueError("serve takes a whole trace, not a sample or a replay view: spatial sampling does not "
                         "preserve queueing (docs/serving.md)")
    if trace.n_requests == 0 or trace.n_accesses == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    slo_ttft, slo_tpot = _slo(slo)
    mdl, hw = dep.model, dep.hardware
    bt = int(trace.block_tokens)
    cap, budget = kv_capacity(dep, capacity_blocks, bt)
    cap_p = dep.prefill_capacity_blocks or cap if P else cap  # each prefilling replica's
    mcfg = measured_config(dep) if "measured" in (eng.step_model, pre.step_model) else None

    prompt, out, assumed = served_lengths(trace, eng)
    need = -(-(prompt + out - 1) // bt)
    big = np.flatnonzero(need > cap)
    if P:
        check_fits(prompt, out, cap_p, cap, bt)
    elif len(big):
        r = int(big[0])
        raise ValueError(f"capacity_blocks={cap} is smaller than request {r}'s {int(need[r])} blocks "
                         f"({int(prompt[r])} prompt + {int(out[r])} output tokens of {bt}-token blocks): "
                         f"it could never run; {len(big)} request(s) need more than the cache")
    if eng.scheduler == "sglang":  # SGLang admits a request only below its tokens plus output room
        room = prompt + np.minimum(out, eng.clip_max_new_tokens)
        big = np.flatnonzero(room >= cap * bt)
        if len(big):
            r = int(big[0])
            raise ValueError(f"capacity_blocks={cap} ({cap * bt} tokens) is too small for request {r}: SGLang "
                             f"admits it only below {int(prompt[r])} prompt + min({int(out[r])} output, "
                             f"clip_max_new_tokens={eng.clip_max_new_tokens}) tokens; {len(big)} request(s) "
                             f"could never run")
    if not isinstance(sessions, (bool, np.bool_)):
        raise ValueError(f"sessions must be true or false, got {sessions!r}")
    if sessions and not np.any(trace.session >= 0):
        raise ValueError(f"sessions=True needs session ids, and trace {trace.name!r} has none "
                         f"(trace.sessions=auto infers them: sim_core/traces/sessions.py)")
    arrive = (trace.arrival_s - trace.arrival_s.min()) / speedup
    tu, order = turns(trace.session, arrive, bool(sessions))
    sm = _step_model(pre, cap_p * bt, hw, mdl, mcfg)  # the prefilling replicas' (all, when aggregated)

    ext = engine_blocks(trace, prompt, out)
    cost = cost_per_depth(cost_model or mdl.name, max(ext.max_request_blocks, 1), bt, mdl)
    ctx = PolicyContext(trace=ext, capacity=cap, mode="request", cost_per_depth=cost, params=params, seed=seed)
    ctx_p = dataclasses.replace(ctx, capacity=cap_p)
    Q = P + n_rep  # prefill replicas first
    sts = replica_states(tuple(spec.make_state(ctx_p if q < P else ctx) for q in range(Q)))
    cache, reqs, queues = new_state(ext, Q, max(cap, cap_p), max(eng.max_num_seqs, pre.max_num_seqs),
                                    ext.request_lengths, prompt, np.ones_like(out) if P else out, arrive,
                                    trace.session, track_times=lag(rgot) > 0)
    cache.c[:P, C_CAP] = cap_p
    cache.c[P:, C_CAP] = cap  # new_state gave every replica the larger of the two
    rcode, view = router_view(rspec, rgot, seed, P or n_rep, ext.n_unique, trace.n_requests)
    views = _below(specs, ext, cost, seed, Q, hw, mdl, bt, dep.overlap)
    cfg = engine_cfg(pre, cap_p, bt, _checking())
    ss = new_sched_state(Q, ext.n_unique, trace.n_requests, eng.schedule_conservativeness, eng.lpm,
                         eng.dynamo_compat) if eng.scheduler == "sglang" else None  # None: vLLM's
    if P:  # the decode pool: its engine, step model and router; the handoff between the two
        dsm = _step_model(eng, cap * bt, hw, mdl, mcfg)
        dreqs, vd, ho = decode_side(dep, ext, prompt, out, reqs, seed, engine_cfg(eng, cap, bt, _checking(), True),
                                   dsm)
    else:
        dreqs, vd, ho = reqs, view, idle(n_rep)
    makespan = run_serve(sts, cache, views, reqs, queues, tu, order, cfg, ss, np.int64(rcode), view,
                         *sm.arrays(), dreqs, vd, ho if P else None)
    err = int(cache.c[0, C_ERR])
    if err == ERR_POLICY:
        q = int(np.flatnonzero(cache.c[:, C_BADV] != 0)[0]) if np.any(cache.c[:, C_BADV] != 0) else 0
        raise RuntimeError(f"policy {spec.name} returned an invalid victim {int(cache.c[q, C_BADV])} "
                           f"(not resident, or pinned by a running request) at capacity {cap}")
    if err == ERR_STATE:
        raise RuntimeError("the serving replay's block pool lost count of its blocks (a bug; SERVE_CHECK found it)")
    # unfinished where requests finish: a disaggregated fleet's decode side (dreqs; its prefill
    # side, reqs, ends at the hidden token, so counting it reported a decode stall as 0)
    left = int(np.count_nonzero(dreqs.gen < dreqs.out))
    if err == ERR_STALL or left or np.any(np.isnan(reqs.t_last)):
        raise RuntimeError(f"the serving replay stalled with {left} requests "
                           f"unfinished (capacity {cap}, engine {eng.name})")
    for i, s in enumerate(specs):
        for lo in views[:Q]:  # past Q: padding (_below)
            tier = (lo.t1, lo.t2, lo.t3)[i]
            if tier.c[T_FAILED]:
                raise RuntimeError(f"tier {s.name!r}: policy {s.policy} returned an invalid victim "
                                   f"{tier.c[T_BAD_VICTIM]} at capacity {s.capacity}")
    res = _result(trace, cap, n_rep, speedup, cache, reqs, prompt, out, assumed, float(makespan),
                  slo_ttft, slo_tpot, dreqs, P, ho.held * bt)
    res = dataclasses.replace(res, **role_fields(dep, cache, reqs, dreqs, ho, prompt, float(makespan), bt))
    out_steps = int(cache.c[:, C_EXTRAP].sum())
    if out_steps:
        why = cache.c[:, C_EXTRAP + 1:C_EXTRAP + 4].sum(axis=0)
        log.warning("%d of %d steps ran outside the data %s measured (tokens per pass: %d, prefill attention: %d, "
                    "decode attention: %d): their times are its extrapolation; %s", out_steps, res.steps,
                    "aiconfigurator-core", *map(int, why), sm.data_range)
    res = dataclasses.replace(res, extrapolated_steps=out_steps, step_model=sm.describe,
                              kv_budget=budget.as_dict() if budget else {})
    # the fleet ceiling over the order requests reached the engines (arrival order, or with
    # sessions=True the order turns were released): docs/fleet.md
    # over the replicas that prefill, and every block their tiers hold (a shared tier once)
    held = (P or n_rep) * cap_p + sum(s.capacity if s.shared else n_rep * s.capacity for s in specs)
    best, inf = fleet_ceiling(ext, np.minimum(trace.request_lengths, prompt // bt), held, order=view.ro)
    P = float(prompt.sum())
    res = dataclasses.replace(res, router=rspec.name, regret_tokens=int(view.rs[RS_REGRET]),
                              ceiling_reuse_ratio=best * bt / P, infinite_reuse_ratio=inf * bt / P)
    if specs:
        return tier_fields(res, specs, views, cache, reqs, bt)
    return dataclasses.replace(res, hbm_first_reuse_ratio=res.first_reuse_ratio)  # no tier: HBM served it all


def _deployment(dep, given: dict) -> Deployment:
    """The deployment serve() replays: `dep`, or one built from the keywords `given`."""
    unknown = set(given) - set(FIELDS)
    if unknown:
        raise TypeError(f"serve() got unexpected keyword argument(s) {sorted(unknown)}")
    if dep is None:
        return deployment(**given)
    if given:
        raise ValueError(f"give the deployment once: deployment=, or its fields {sorted(given)} as keywords")
    if not isinstance(dep, Deployment):
        raise ValueError(f"deployment must be a sim_core.serving.Deployment (sim_core.serving.deployment(...)), "
                         f"got {dep!r}")
    return dep


def _below(specs, ext, cost, seed: int, n_rep: int, hw, mdl, bt: int, overlap: bool) -> tuple:
    """Every replica's view of its lower tiers (a shared one built once) with their links:
    bandwidth and latency; the tuple padded to a power of two."""
    bw = np.ones(3)
    lat = np.zeros(3)
    for i, s in enumerate(specs):
        lat[i] = s.latency_s
        if s.bandwidth_bps:
            bw[i] = float(s.bandwidth_bps)
        elif s.capacity == 0:  # holds nothing, loads nothing
            continue
        elif hw is None:
            raise ValueError(f"tier {s.name!r} needs a load bandwidth: give hardware (a part such as h100_sxm) "
                             f"or the tier's bandwidth_bps (inf: copies are instantaneous)")
        else:
            bw[i] = hw.link_bps(s.link)
    views = build_below(specs, ext, cost, seed, n_rep, bw, lat, float(mdl.kv_bytes_per_block(bt)), overlap)
    # Padded as the policy states are (replica_states), to the next power of two, so 1, 2, 3-4,
    # 5-8, ... replicas each share one compile; but from 1, not 16: a view holds three tiers and
    # about 60 arrays, and the compile grows with the tuple; the flat replay's one view serves all.
    return replica_states(views, minimum=1)


def engine_blocks(trace, prompt: np.ndarray, out: np.ndarray):
    """The trace as the engine's cache sees it: each request's blocks that ever fill,
    floor((prompt + output - 1) / block_tokens) of them (the last output token is never
    computed). The first are its full prompt blocks, with the trace's ids; the rest (the
    partial prompt block once decode fills it, then decode blocks) hold generated tokens,
    unique to the request: each gets a fresh id, so it takes cache space and an eviction
    like any block (vLLM and Dynamo hash and keep them) but is never found by another
    request."""
    bt = int(trace.block_tokens)
    full = np.minimum(trace.request_lengths, prompt // bt)
    k = np.maximum((prompt + out - 1) // bt, full)
    offs = np.zeros(trace.n_requests + 1, np.int64)
    np.cumsum(k, out=offs[1:])
    pos = np.arange(int(offs[-1]), dtype=np.int64) - np.repeat(offs[:-1], k)
    src = np.repeat(trace.req_offsets[:-1], k) + pos
    theirs = pos < np.repeat(full, k)
    fresh = np.cumsum(~theirs) - 1 + trace.n_unique
    blocks = np.where(theirs, trace.blocks[np.where(theirs, src, 0)] if trace.n_accesses else 0, fresh)
    return dataclasses.replace(trace, req_offsets=offs, blocks=blocks.astype(np.int32), source_ids=None,
                               meta=dict(trace.meta))


def _checking() -> bool:
    """KVSWEEP_SERVE_CHECK=1: check the block pool's counters after every step (slow; tests)."""
    return os.environ.get("KVSWEEP_SERVE_CHECK", "") == "1"


def cannot_serve(spec) -> str:
    """Why the serving replay cannot run this policy, a PolicySpec or its name ("" when it can)."""
    if isinstance(spec, str):
        spec = get_policy(spec)
    if spec.bound_of:
        return "it is a bound over a flat cache, not a policy"
    if spec.solve is not None:
        return "it is solved over the whole trace, not replayed"
    if spec.train is not None:
        return "a learned policy pauses the replay to retrain, which the serving loop does not"
    return spec.no_serving


def served_lengths(trace, eng: ServeEngine):
    """(prompt tokens, output tokens >= 1, output tokens assumed or 0) of each request."""
    prompt = trace.input_tokens.astype(np.int64).copy()
    bt = int(trace.block_tokens)
    n = trace.request_lengths
    # a trace without token counts: its blocks are full
    prompt = np.where(prompt > 0, prompt, n * bt)
    out = trace.output_tokens.astype(np.int64)
    assumed = 0
    if not np.any(out > 0):
        assumed = int(eng.default_output_tokens)
        log.warning("trace %s has no output lengths: every request generates %d tokens "
                    "(engine.default_output_tokens)", trace.name, assumed)
        out = np.full(trace.n_requests, assumed, np.int64)
    return prompt, np.maximum(out, 1), assumed


def step_model_of(dep: Deployment, kv_tokens: int):
    """The step-time model (stepmodel.StepModel) of one replica of `dep` whose KV cache holds
    `kv_tokens` tokens (Dynamo's polynomial reads it)."""
    eng = dep.engine
    return _step_model(eng, kv_tokens, dep.hardware, dep.model,
                       measured_config(dep) if eng.step_model == "measured" else None)


def _step_model(eng: ServeEngine, kv_tokens: int, hw, mdl, mcfg=None):
    if eng.step_model == "measured":
        over = dict(eng.step_params)
        unknown = set(over) - {"composition"}
        if unknown:
            raise ValueError(f"step_model measured has no parameter(s) {sorted(unknown)}; valid: composition")
        return measured_model(mcfg, over.get("composition", "fused"))
    if eng.step_model == "dynamo":
        return dynamo_model(kv_tokens, **dict(eng.step_params))
    if eng.step_model == "roofline":
        return roofline_model(hw, mdl, eng.tp, **dict(eng.step_params))
    return profile_model(eng.profile)


def _result(trace, cap, n_rep, speedup, cache, reqs, prompt, out, assumed, makespan, slo_ttft, slo_tpot, dreqs,
            n_pre, held):
    """The ServeResult of a replay. A disaggregated fleet (n_pre prefill replicas first) times
    tokens from its decode side (`dreqs`); a decode replica's reuse is the prompt it held."""
    arrive = reqs.arrive
    lat = latency_fields(arrive, dreqs.t_first, dreqs.t_last, out)
    P = int(prompt.sum())
    computed = int(cache.c[:, C_COMPUTED].sum())
    span = makespan if makespan > 0 else float("nan")
    per = []
    for q in range(n_pre + n_rep):
        dec = n_pre and q >= n_pre
        k = (dreqs if dec else reqs).rep == q
        lq = latency_fields(arrive[k], dreqs.t_first[k], dreqs.t_last[k], out[k])
        pq = int(prompt[k].sum())
        first, best = (held[k], held[k]) if dec else (reqs.hit_first[k], reqs.hit_max[k])
        per.append({"requests": int(k.sum()), "prompt_tokens": pq,
                    "first_reuse_ratio": float(first.sum()) / pq if pq else float("nan"),
                    "reuse_ratio": float(best.sum()) / pq if pq else float("nan"),
                    "ttft_mean_s": lq["ttft_mean_s"], "ttft_p50_s": lq["ttft_p50_s"], "ttft_p99_s": lq["ttft_p99_s"],
                    "busy_s": float(cache.f[q, F_BUSY]), "prefilled_tokens": int(cache.c[q, C_PF_TOKENS]),
                    "decode_tokens": int(cache.c[q, C_DEC_TOKENS]), "preemptions": int(cache.c[q, C_PREEMPT]),
                    "evictions": int(cache.c[q, C_EVICT]), "queue_peak": int(cache.c[q, C_QPEAK]),
                    "steps": int(cache.c[q, C_STEPS])})
    good = goodput_fields(arrive, dreqs.t_first, dreqs.t_last, out, makespan, slo_ttft, slo_tpot)
    lost = int(reqs.lost.sum())
    hits_again = int(reqs.hit_sum.sum() - reqs.hit_first.sum())
    if n_pre:  # a decode replica's admissions after a preemption all come again
        lost += int(dreqs.lost.sum())
        hits_again += int(dreqs.hit_sum.sum())
    return ServeResult(
        capacity_blocks=cap, replicas=n_rep, arrival_speedup=speedup, requests=trace.n_requests,
        prompt_tokens=P, output_tokens=int(out.sum()),
        first_reuse_ratio=float(reqs.hit_first.sum()) / P, reuse_ratio=float(reqs.hit_max.sum()) / P,
        **lat, queue_wait_mean_s=float((reqs.t_admit - arrive).mean()),
        throughput_rps=trace.n_requests / span, output_tps=float(out.sum()) / span, input_tps=P / span,
        makespan_s=makespan, preemptions=int(cache.c[:, C_PREEMPT].sum()), recomputed_tokens=lost - hits_again,
        computed_tokens=computed, evictions=int(cache.c[:, C_EVICT].sum()), steps=int(cache.c[:, C_STEPS].sum()),
        queue_peak=int(cache.c[:, C_QPEAK].max()), queue_mean=float(cache.f[:, F_QAREA].sum()) / span,
        pinned_peak=int(cache.c[:, C_PEAK_PINNED].max()),
        **imbalance_fields(cache.f[:n_pre or n_rep, F_BUSY], cache.c[:n_pre or n_rep, C_PF_TOKENS]), **good,
        slo_ttft_s=slo_ttft,
        slo_tpot_s=slo_tpot, output_tokens_assumed=assumed, per_replica=per)


_SLO_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0}


def slo_seconds(v, what: str) -> float:
    """Seconds from a latency with its unit ('500ms', '2s', '1m'); a bare number is refused."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|min|m)\s*", str(v)) \
        if isinstance(v, str) else None
    if not m:
        raise ValueError(f"{what} must be a latency with its unit, such as '500ms' or '2s', got {v!r}")
    x = float(m.group(1)) * _SLO_UNITS[m.group(2)]
    if not x > 0 or math.isinf(x):
        raise ValueError(f"{what} must be positive, got {v!r}")
    return x


def _slo(slo) -> tuple[float, float]:
    nan = float("nan")
    if slo is None:
        return nan, nan
    if not isinstance(slo, Mapping):
        raise ValueError(f"slo must be a mapping such as {{'ttft': '2s', 'tpot': '50ms'}}, got {slo!r}")
    unknown = set(slo) - {"ttft", "tpot"}
    if unknown:
        raise ValueError(f"slo has no key(s) {sorted(unknown)}; valid: ttft, tpot")
    got = {k: slo_seconds(v, f"slo.{k}") for k, v in slo.items() if v is not None}
    return got.get("ttft", nan), got.get("tpot", nan)


def _positive_int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{what} must be a positive integer, got {v!r}")
    return int(v)


def _positive_real(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
        raise ValueError(f"{what} must be a positive number, got {v!r}")
    return float(v)
