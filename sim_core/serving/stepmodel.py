"""Step-time models: how long one engine step (a batch of prefill chunks and decodes) takes.

Three models behind one compiled function, `step_seconds`:

dynamo    NVIDIA Dynamo's mocker polynomial (lib/mocker/src/common/perf_model.rs):
          prefill ms = p2 T^2 + p1 T + p0, T = the step's uncached prefill tokens;
          decode ms = max(dmin, d2 u^2 + d1 u + d0), u = min(1, the decodes' context
          tokens / the KV cache's tokens); a mixed step adds the two.
roofline  from the model's FLOPs and bytes and the part's peak and bandwidth (BLIS-shaped):
          each phase takes max(FLOPs / (peak x MFU), bytes / HBM bandwidth); the step is
          prefill phase + decode phase + a per-step and a per-request overhead.
profile   a measured table: prefill ms by the step's prefill tokens (linear, extrapolated
          from the last two points), decode ms by (decodes, mean context) (bilinear,
          clamped to the table), added.
measured  NVIDIA aiconfigurator-core's measured kernels for a model, GPU, backend and TP,
          as tables interpolated per prefill chunk (sim_core.serving.measured.step; the
          serving loop calls it with the step itself, not these aggregates).

A model is a kind and flat float64 arrays (`StepModel`), so the serving loop stays one
compiled function for all three.
"""
from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ..jit import inline_njit
from .measured.step import prefill_ms

KINDS = ("dynamo", "roofline", "profile", "measured")
K_DYNAMO, K_ROOFLINE, K_PROFILE, K_MEASURED = range(4)

# Dynamo's default (uncalibrated) polynomial, lib/mocker/src/common/perf_model.rs: prefill
# 4.209989e-7 T^2 + 1.518344e-2 T + 16.50142 ms; decode max(1, -25.74 u^2 + 54.01 u + 5.74) ms
DYNAMO_POLY = dict(p2=4.209989e-7, p1=1.518344e-2, p0=16.50142, d2=-25.74, d1=54.01, d0=5.74, dmin=1.0)
# round_means=1: T is Dynamo's b x (floor(sum of tokens through the chunk / b) - floor(sum of
# tokens before it / b)) over the b prefill chunks of the step (its integer means), not the
# exact sum; up to b - 1 tokens fewer. Off by default: the aggregated replay's figures are
# pinned without it; a disaggregated fleet turns it on (docs/disagg.md).
DYNAMO_OPTIONS = dict(round_means=0.0)

# roofline parameter slots
(R_A, R_B, R_PEAK_P, R_PEAK_D, R_BW, R_W_DENSE, R_W_EXPERT, R_EXPERTS, R_ACTIVE, R_KVB, R_T0, R_TREQ) = range(12)


@dataclass(frozen=True)
class StepModel:
    """A step-time model as the compiled loop takes it."""

    kind: str
    params: np.ndarray  # float64: the kind's coefficients (layout per kind, below)
    prefill_x: np.ndarray  # profile: prefill tokens (ascending)
    prefill_ms: np.ndarray  # profile: ms at those tokens
    decode_batch: np.ndarray  # profile: decodes per step (ascending)
    decode_ctx: np.ndarray  # profile: mean context tokens (ascending)
    decode_ms: np.ndarray  # profile: ms, [len(decode_batch), len(decode_ctx)]
    describe: str
    data_range: str = ""  # measured: the range the data covers (sim_core.serving.measured.grid)

    @property
    def code(self) -> int:
        return KINDS.index(self.kind)

    def arrays(self) -> tuple:
        return (np.int64(self.code), self.params, self.prefill_x, self.prefill_ms, self.decode_batch,
                self.decode_ctx, self.decode_ms)


_EMPTY = np.zeros(1, np.float64)
_EMPTY2 = np.zeros((1, 1), np.float64)


def dynamo_model(kv_tokens: int, **over) -> StepModel:
    """Dynamo's polynomial; `kv_tokens` is the engine's KV cache in tokens (its decode term's
    denominator). `over` replaces coefficients (p2, p1, p0, d2, d1, d0, dmin)."""
    valid = {**DYNAMO_POLY, **DYNAMO_OPTIONS}
    unknown = set(over) - set(valid)
    if unknown:
        raise ValueError(f"step_model dynamo has no coefficient(s) {sorted(unknown)}; valid: {', '.join(valid)}")
    c = {**valid, **{k: _real(v, f"step_model.{k}") for k, v in over.items()}}
    if c["round_means"] not in (0.0, 1.0):
        raise ValueError(f"step_model.round_means must be 0 or 1, got {over['round_means']!r}")
    p = np.array([c["p2"], c["p1"], c["p0"], c["d2"], c["d1"], c["d0"], c["dmin"], float(max(kv_tokens, 1)),
                  c["round_means"]])
    return StepModel("dynamo", p, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY2,
                     "Dynamo mocker polynomial (lib/mocker/src/common/perf_model.rs)")


ROOFLINE_DEFAULTS = dict(mfu_prefill=None, mfu_decode=0.3, step_overhead_s=0.0005, request_overhead_s=4e-6)


def roofline_model(hardware, model, tp: int = 1, **over) -> StepModel:
    """The roofline of `model` on `hardware` (sim_core.catalog.hardware.Hardware), `tp` GPUs of it.
    mfu_prefill defaults to the part's MFU (the idle TTFT estimate's), mfu_decode to 0.3;
    the overheads to 0.5 ms per step and 4 us per scheduled request."""
    unknown = set(over) - set(ROOFLINE_DEFAULTS)
    if unknown:
        raise ValueError(f"step_model roofline has no parameter(s) {sorted(unknown)}; "
                         f"valid: {', '.join(ROOFLINE_DEFAULTS)}")
    if hardware is None:
        raise ValueError("step_model roofline needs a hardware part (hardware=h100_sxm, ...)")
    c = {**ROOFLINE_DEFAULTS, **over}
    mfu_p = hardware.mfu if c["mfu_prefill"] is None else _unit(c["mfu_prefill"], "step_model.mfu_prefill")
    mfu_d = _unit(c["mfu_decode"], "step_model.mfu_decode")
    t0 = _nonneg(c["step_overhead_s"], "step_model.step_overhead_s")
    treq = _nonneg(c["request_overhead_s"], "step_model.request_overhead_s")
    m = model
    wb = 2.0  # bytes per weight (BF16)
    attn = m.hidden * m.head_dim * (2 * m.q_heads + 2 * m.kv_heads)
    if m.n_experts:
        dense = m.layers * (attn + m.hidden * m.n_experts) * wb
        expert = m.layers * 3 * m.hidden * m.mlp_intermediate * wb
        experts, active = m.n_experts, m.active_experts
    else:
        dense = m.layers * (attn + 3 * m.hidden * m.mlp_intermediate) * wb
        expert, experts, active = 0.0, 0, 0
    tp = int(tp)
    p = np.array([m.flops_a, m.flops_b, hardware.peak_flops * mfu_p * tp, hardware.peak_flops * mfu_d * tp,
                  hardware.hbm_bps * tp, dense, expert, experts, active, m.kv_bytes_per_token, t0, treq], np.float64)
    return StepModel("roofline", p, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY2,
                     f"roofline: {m.name} on {hardware.name} x{tp}, MFU {mfu_p:g}/{mfu_d:g}")


def profile_model(table: Mapping | str | Path) -> StepModel:
    """A measured profile: a mapping (or a JSON file of one)
    {"prefill": {"tokens": [...], "ms": [...]},
     "decode": {"batch": [...], "context": [...], "ms": [[...] per batch]}}."""
    where = "step_model.profile"
    if isinstance(table, (str, Path)):
        p = Path(table)
        if not p.is_file():
            raise ValueError(f"{where}: no such file {str(p)!r}")
        try:
            table = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: {p}: not JSON ({e})") from None
        where = str(p)
    if not isinstance(table, Mapping) or "prefill" not in table or "decode" not in table:
        raise ValueError(f"{where}: a profile needs 'prefill' and 'decode' tables")
    pf, dc = table["prefill"], table["decode"]
    px = _axis(pf.get("tokens"), f"{where}: prefill.tokens")
    py = _values(pf.get("ms"), len(px), f"{where}: prefill.ms")
    db = _axis(dc.get("batch"), f"{where}: decode.batch")
    dx = _axis(dc.get("context"), f"{where}: decode.context")
    try:
        dm = np.asarray(dc.get("ms"), np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: decode.ms must be a table of numbers") from None
    if dm.shape != (len(db), len(dx)) or not np.all(np.isfinite(dm)) or np.any(dm < 0):
        raise ValueError(f"{where}: decode.ms must be {len(db)} rows of {len(dx)} non-negative numbers "
                         f"(one row per batch, one column per context)")
    return StepModel("profile", np.zeros(1), px, py, db, dx, dm, f"measured profile ({where})")


def prefill_seconds(sm: StepModel, tokens: int, flops_per_token: float) -> float:
    """Seconds of a step that prefills `tokens` new tokens of one request, nothing cached and
    no decodes, under step model `sm` (`flops_per_token`: the model's FLOPs per token, which
    the roofline reads)."""
    if sm.kind == "measured":
        return float(prefill_ms(sm.params, int(tokens))) * 1e-3
    return float(step_seconds(*sm.arrays(), 1, int(tokens), tokens * flops_per_token, float(tokens), 0, 0.0))


def measured_model(cfg, composition: str = "fused") -> StepModel:
    """aiconfigurator-core's data for `cfg` (sim_core.serving.measured.configure): tables
    built once per configuration and package version, cached on disk."""
    from .measured.tables import model_arrays  # imports nothing of the package until asked

    p, meta = model_arrays(cfg, composition)
    return StepModel("measured", p, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY2,
                     f"measured: {meta['model']} on {meta['gpu']}, {meta['backend']} {meta['data']} data "
                     f"(aiconfigurator-core {meta['package']}), TP {meta['tp']}"
                     + (f" (moe_tp {meta['moe_tp']} x moe_ep {meta['moe_ep']})" if cfg.model.arch.experts else "")
                     + f", {composition} steps", meta["grid"])


def _axis(v, what: str) -> np.ndarray:
    try:
        a = np.asarray(v, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a list of numbers") from None
    if a.ndim != 1 or len(a) < 1 or not np.all(np.isfinite(a)) or np.any(np.diff(a) <= 0) or np.any(a < 0):
        raise ValueError(f"{what} must be a non-empty ascending list of non-negative numbers")
    return a


def _values(v, n: int, what: str) -> np.ndarray:
    try:
        a = np.asarray(v, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a list of numbers") from None
    if a.shape != (n,) or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{what} must be {n} non-negative numbers (one per entry of its axis)")
    return a


def _real(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v:
        raise ValueError(f"{what} must be a number, got {v!r}")
    return float(v)


def _unit(v, what: str) -> float:
    v = _real(v, what)
    if not 0 < v <= 1:
        raise ValueError(f"{what} must be in (0, 1], got {v!r}")
    return v


def _nonneg(v, what: str) -> float:
    v = _real(v, what)
    if v < 0:
        raise ValueError(f"{what} must be >= 0, got {v!r}")
    return v


# ------------------------------------------------------------------ compiled side
@inline_njit
def _interp(x, xs, ys):
    n = xs.shape[0]
    if n == 1:
        return ys[0] * x / xs[0] if xs[0] > 0 else ys[0]
    i = 0
    if x >= xs[n - 1]:
        i = n - 2
    else:
        while i < n - 2 and xs[i + 1] <= x:
            i += 1
    f = (x - xs[i]) / (xs[i + 1] - xs[i])
    y = ys[i] + f * (ys[i + 1] - ys[i])
    return y if y > 0.0 else 0.0


@inline_njit
def _bracket(x, xs):
    n = xs.shape[0]
    if n == 1 or x <= xs[0]:
        return 0, 0.0
    if x >= xs[n - 1]:
        return n - 2, 1.0
    i = 0
    while xs[i + 1] <= x:
        i += 1
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


@inline_njit
def _bilinear(b, c, bs, cs, ms):
    i, fi = _bracket(b, bs)
    k, fk = _bracket(c, cs)
    i1 = min(i + 1, bs.shape[0] - 1)
    k1 = min(k + 1, cs.shape[0] - 1)
    lo = ms[i, k] + fk * (ms[i, k1] - ms[i, k])
    hi = ms[i1, k] + fk * (ms[i1, k1] - ms[i1, k])
    return lo + fi * (hi - lo)


@inline_njit
def step_seconds(kind, p, px, py, db, dc, dm, n_pf, pf_tokens, pf_flops, pf_ctx, n_dec, dec_ctx):
    """Seconds of one step: `n_pf` prefill chunks costing `pf_flops` and reading `pf_ctx`
    tokens of KV (context plus the chunk), with `pf_tokens` new prompt tokens in all;
    `n_dec` decodes whose sequences (their tokens so far) sum to `dec_ctx` tokens."""
    if kind == K_DYNAMO:
        ms = 0.0
        if pf_tokens > 0:
            T = float(pf_tokens)
            ms += p[0] * T * T + p[1] * T + p[2]
        if n_dec > 0:
            u = dec_ctx / p[7]
            if u > 1.0:
                u = 1.0
            d = p[3] * u * u + p[4] * u + p[5]
            ms += d if d > p[6] else p[6]
        return ms * 1e-3
    if kind == K_ROOFLINE:
        t = 0.0
        if n_pf > 0:
            experts = min(p[R_EXPERTS], float(pf_tokens) * p[R_ACTIVE])
            w = p[R_W_DENSE] + experts * p[R_W_EXPERT]
            t += max(pf_flops / p[R_PEAK_P], (w + p[R_KVB] * pf_ctx) / p[R_BW])
        if n_dec > 0:
            experts = min(p[R_EXPERTS], float(n_dec) * p[R_ACTIVE])
            w = p[R_W_DENSE] + experts * p[R_W_EXPERT]
            f = n_dec * p[R_A] + p[R_B] * (dec_ctx - n_dec)  # each new token attends to the others
            t += max(f / p[R_PEAK_D], (w + p[R_KVB] * dec_ctx) / p[R_BW])
        return t + p[R_T0] + p[R_TREQ] * (n_pf + n_dec)
    ms = 0.0
    if pf_tokens > 0:
        ms += _interp(float(pf_tokens), px, py)
    if n_dec > 0:
        ms += _bilinear(float(n_dec), dec_ctx / n_dec, db, dc, dm)
    return ms * 1e-3
