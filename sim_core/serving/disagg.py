"""serve()'s roles: a disaggregated fleet's state before the replay, and every fleet's
per-role figures after it (docs/disagg.md).

The replay itself is the loop's (loop.py) with the handoff's actions (handoff.py); here
are the checks that each role's KV cache can hold its part of every request, the decode
role's request state, router view and handoff state, and the figures: TTFT in its five
parts, the handoff, the bytes moved, what the decode replicas already held, GPU-seconds
per role.
"""
from __future__ import annotations

import numpy as np

from .decode_routers import DECODE_ROUTERS, get_decode_router
from .handoff import Handoff, new_handoff
from .result import _pct
from .routers.view import new_view
from .schedulers import N_CFG
from .state import C_PREEMPT, F_BUSY, new_reqs
from .transfer import link_array


def check_fits(prompt: np.ndarray, out: np.ndarray, cap_prefill: int, cap_decode: int, bt: int) -> None:
    """Each role's KV cache must hold its part of every request: a prefill replica the
    prompt, a decode replica the prompt and the output (ValueError naming the field)."""
    for what, cap, need in (("prefill_capacity_blocks", cap_prefill, -(-prompt // bt)),
                            ("capacity_blocks", cap_decode, -(-(prompt + out - 1) // bt))):
        big = np.flatnonzero(need > cap)
        if len(big):
            r = int(big[0])
            role = "prefill replica's prompt" if what.startswith("prefill") else "decode replica's prompt and output"
            raise ValueError(f"{what}={cap} is smaller than request {r}'s {int(need[r])} blocks (its {role}, "
                             f"{bt}-token blocks): it could never run; {len(big)} request(s) need more")


def idle(n_rep: int) -> Handoff:
    """The handoff state of an aggregated fleet: no prefill replicas, nothing to hand off."""
    nothing = (0,) + tuple(np.zeros(1) for _ in range(5)) + (np.zeros((1, 1)),)
    return new_handoff(0, n_rep, 0, 0, 0, False, 0, link_array(None), np.zeros(N_CFG, np.int64), nothing)


def decode_side(dep, ext, prompt, out, reqs, seed: int, dcfg: np.ndarray, dsm) -> tuple:
    """(the decode role's request state, its router's view, the handoff state) of a
    disaggregated fleet: prefill replicas 0 .. P-1, decode replicas P .. P+D-1. The
    decode state shares the trace's arrays and the arrival times with the prefill's; a
    request there generates its whole output after the prefill's hidden token."""
    P, D = dep.prefill_replicas, dep.replicas
    dreqs = new_reqs(ext, reqs.full, prompt, out + 1, reqs.arrive, reqs.session)
    spec = get_decode_router(dep.decode_router)
    vd = new_view(spec.pack(dict(dep.decode_router_params)), seed + 1, P + D, 1, ext.n_requests, False, False,
                  np.inf, 0.0)
    x = dep.kv_transfer
    ho = new_handoff(ext.n_requests, P + D, P, D, DECODE_ROUTERS.index(spec.name),
                     x is not None and x.tokens == "missing", int(dcfg[1]), link_array(x), dcfg, dsm.arrays())
    return dreqs, vd, ho


def role_fields(dep, cache, reqs, dreqs, ho: Handoff, prompt: np.ndarray, makespan: float, bt: int) -> dict:
    """The per-role figures of a ServeResult: TTFT's parts, the handoff, bytes moved,
    prompt the decode replicas held, GPU-seconds and preemptions per role. An aggregated
    fleet counts as all decode; its TTFT is queue + prefill."""
    P, D = dep.prefill_replicas, dep.replicas
    arrive = reqs.arrive
    tp_d = dep.engine.tp
    busy = cache.f[:, F_BUSY]
    out = {"prefill_replicas": P, "ttft_prefill_queue_s": float((reqs.t_admit - arrive).mean()),
           "gpu_seconds_decode": D * tp_d * makespan, "busy_gpu_seconds_decode": float(busy[P:].sum()) * tp_d}
    if not P:
        out["ttft_prefill_s"] = float((reqs.t_first - reqs.t_admit).mean())
        return out
    tp_p = dep.prefill.tp
    hand = ho.t_act - ho.t_held
    x = dep.kv_transfer
    moved = int(ho.tok.sum()) if x is not None else 0
    out.update(ttft_prefill_s=float((ho.t_held - reqs.t_admit).mean()),
               ttft_handoff_wait_s=float((ho.t_res - ho.t_held).mean()),
               ttft_transfer_s=float((ho.t_act - ho.t_res).mean()),
               ttft_first_decode_s=float((dreqs.t_first - ho.t_act).mean()),
               handoff_mean_s=float(hand.mean()), handoff_p99_s=_pct(hand, 99),
               transfer_bytes=int(round(moved * x.bytes_per_token)) if x is not None else 0,
               decode_resident_ratio=float(ho.held.sum()) * bt / float(prompt.sum()),
               gpu_seconds_prefill=P * tp_p * makespan, busy_gpu_seconds_prefill=float(busy[:P].sum()) * tp_p,
               preemptions_prefill=int(cache.c[:P, C_PREEMPT].sum()), decode_router=dep.decode_router)
    return out
