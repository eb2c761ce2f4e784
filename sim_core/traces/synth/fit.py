"""A profile's statistics from its request plan alone, and the knob fit that uses them.

:func:`plan_statistics` computes what ``analysis.workload.characterize`` measures on a
built trace (the same names and definitions) from the multi-turn and single-turn plans
and the arrival times, without materialising a block: under a second at full scale against
about 70 s to build and characterize the trace, which is what makes a full-scale fit
affordable. ``tests/test_synth.py`` checks the two agree.

:func:`fit` moves named knobs of a profile (:data:`KNOBS`, in two groups:
:data:`KNOB_GROUPS`) by Nelder-Mead to minimise the weighted sum of squared log ratios
to the targets (``python -m benchmarks.fidelity fit [--knobs time]``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from .plan import draw
from .profiles import SynthProfile, get_profile


def _wpercentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """np.percentile(q) of `values` each repeated `weights` (integer) times, without
    repeating them (linear interpolation between the two order statistics around it)."""
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    h = (int(cw[-1]) - 1) * q / 100.0
    k = math.floor(h)
    lo, hi = (float(v[np.searchsorted(cw, i, side="right")]) for i in (k, min(k + 1, int(cw[-1]) - 1)))
    return lo + (h - k) * (hi - lo)


def plan_statistics(profile: str | SynthProfile = "freeinference", *, scale: float = 1.0, seed: int = 0) -> dict:
    prof = get_profile(profile)
    d = draw(prof, scale, seed, prof.concurrency)
    mt, st = d.mt, d.st
    sys_len = mt.base_len[mt.prompt] + mt.tail  # per multi-turn session
    ctx_sess = np.zeros(len(mt.history_len), np.int64)
    ctx_sess[mt.context] = mt.sess
    fp_multi = sys_len + np.bincount(ctx_sess, weights=mt.history_len, minlength=mt.M).astype(np.int64)
    len_single = d.n_blocks[mt.Rm:]  # a single-turn request's length is its footprint
    fp = np.sort(np.concatenate((fp_multi, len_single)))[::-1]
    n_sess = len(fp)

    prompt_reads = np.bincount(mt.prompt, weights=mt.n, minlength=len(mt.base_len))
    tpl_reads = np.bincount(st.s_tpl[st.is_tpl], minlength=len(st.tpl_len))
    u_sys = int(mt.base_len[prompt_reads > 0].sum() + mt.tail.sum())
    u_hist = int(mt.history_len.sum())
    u_single = int(st.tpl_len[tpl_reads > 0].sum() + st.s_unique.sum())
    u = u_sys + u_hist + u_single
    a_sys = int((sys_len * mt.n).sum())
    a_single = int(len_single.sum())
    a = int(mt.m_blocks.sum()) + a_single

    # history: request j of a context adds seg_j blocks, read by it and the rest of its context
    hist = mt.m_blocks - sys_len[mt.sess]
    first = np.r_[True, mt.context[1:] != mt.context[:-1]]
    seg = hist - np.where(first, 0, np.r_[0, hist[:-1]])
    idx = np.arange(mt.Rm)
    last = np.zeros(len(mt.history_len), np.int64)
    np.maximum.at(last, mt.context, idx)
    reads = last[mt.context] - idx + 1
    once = int(st.s_unique.sum() + st.tpl_len[tpl_reads == 1].sum())

    arrival_m, arrival_s = d.arrival_m, d.arrival_s
    span = float(max(arrival_m.max(), arrival_s.max()) - min(arrival_m.min(), arrival_s.min()))
    step = np.diff(arrival_m, prepend=0.0)  # time since the previous multi-turn request
    gaps = step[mt.turn > 0]
    ends = mt.starts + mt.n - 1
    duration = arrival_m[ends] - arrival_m[mt.starts]
    tokens = d.input_tokens
    sys_blocks = np.concatenate((mt.base_len[prompt_reads > 0], mt.tail))
    sys_reads = np.concatenate((prompt_reads[prompt_reads > 0], mt.n)).astype(np.int64)
    # a history block's reuse: the next request of its context, which reads all of it;
    # its lifetime runs to the context's last request
    again = ~first
    reuse_s, reused = step[again], np.r_[0, hist[:-1]][again]
    life = arrival_m[last[mt.context]] - arrival_m
    # a base system prompt's blocks are read by every request of the sessions that use it,
    # a session's own system suffix by that session's requests
    rp = mt.prompt[mt.sess]
    by_p = np.lexsort((arrival_m, rp))
    rp_s = rp[by_p]
    again_p = np.r_[False, rp_s[1:] == rp_s[:-1]]
    sys_reuse = np.concatenate((np.diff(arrival_m[by_p], prepend=0.0)[again_p], gaps))
    sys_reused = np.concatenate((mt.base_len[rp_s[again_p]], mt.tail[mt.sess[mt.turn > 0]]))
    p_first = np.full(len(mt.base_len), np.inf)
    p_last = np.full(len(mt.base_len), -np.inf)
    np.minimum.at(p_first, rp, arrival_m)
    np.maximum.at(p_last, rp, arrival_m)
    sys_life = np.concatenate(((p_last - p_first)[prompt_reads > 0], duration))
    return {
        "multi_turn_request_share": mt.Rm / (mt.Rm + st.Rs),
        "mean_input_tokens": float(tokens.mean()),
        "median_input_tokens": float(np.median(tokens)),
        "median_input_tokens_multi_turn": float(np.median(tokens[:mt.Rm])),
        "p90_input_tokens": float(np.percentile(tokens, 90)),
        "gap_median_s": float(np.median(gaps)),
        "gap_share_under_22min": float((gaps < 1_320.0).mean()),
        "session_duration_median_s": float(np.median(duration)),
        "session_duration_p90_s": float(np.percentile(duration, 90)),
        "session_duration_p99_s": float(np.percentile(duration, 99)),
        "concurrency_mean": float(duration.sum() / span),
        "span_s": span,
        "footprint_median_blocks": float(np.median(fp)),
        "footprint_p99_blocks": float(np.percentile(fp, 99)),
        "footprint_max_blocks": float(fp[0]),
        "footprint_top10_share": float(fp[: int(math.ceil(0.1 * n_sess))].sum() / fp.sum()),
        "footprint_top1_share": float(fp[: int(math.ceil(0.01 * n_sess))].sum() / fp.sum()),
        "system_block_share": u_sys / u,
        "system_access_share": a_sys / a,
        "history_block_share": u_hist / u,
        "history_access_share": (a - a_sys - a_single) / a,
        "single_turn_block_share": u_single / u,
        "single_turn_access_share": a_single / a,
        "single_turn_once_share": once / u_single,
        "compulsory_miss_ratio": u / a,
        "one_hit_block_share": (once + int(seg[reads == 1].sum())) / u,
        "system_accesses_median": _wpercentile(sys_reads, sys_blocks, 50),
        "history_accesses_median": _wpercentile(reads, seg, 50),
        "system_reuse_median_s": _wpercentile(sys_reuse, sys_reused, 50),
        "system_reuse_p99_s": _wpercentile(sys_reuse, sys_reused, 99),
        "system_lifetime_median_s": _wpercentile(sys_life, sys_blocks, 50),
        "system_lifetime_p99_s": _wpercentile(sys_life, sys_blocks, 99),
        "history_reuse_median_s": _wpercentile(reuse_s, reused, 50),
        "history_reuse_p99_s": _wpercentile(reuse_s, reused, 99),
        "history_lifetime_median_s": _wpercentile(life, seg, 50),
        "n_accesses": float(a),
        "n_unique_blocks": float(u),
    }


def _scaled(knots, f, lo=0.0, hi=1.0):
    """Knots with the values at probabilities in [lo, hi) multiplied by f."""
    return tuple((p, v * f if lo <= p < hi else v) for p, v in knots)


#: The fitted knobs: name -> (profile, x) -> profile. x is a log factor for sizes and
#: lengths, an additive step for exponents and shares; x = 0 is the profile itself.
KNOBS: dict[str, Callable[[SynthProfile, float], SynthProfile]] = {
    "growth": lambda p, x: dataclasses.replace(p, growth=_scaled(p.growth, math.exp(x))),
    "growth_decay": lambda p, x: dataclasses.replace(p, growth_decay=max(0.0, p.growth_decay + x)),
    "first_msg": lambda p, x: dataclasses.replace(p, first_msg=_scaled(p.first_msg, math.exp(x))),
    "growth_turns_exponent": lambda p, x: dataclasses.replace(p, growth_turns_exponent=p.growth_turns_exponent + x),
    "turns_tail": lambda p, x: dataclasses.replace(p, turns=_scaled(p.turns, math.exp(x), 0.8)),
    "sys_len": lambda p, x: dataclasses.replace(p, sys_len=_scaled(p.sys_len, math.exp(x))),
    "sys_prompts": lambda p, x: dataclasses.replace(p, sys_prompts=max(1, int(p.sys_prompts * math.exp(x)))),
    "template_len": lambda p, x: dataclasses.replace(p, template_len=_scaled(p.template_len, math.exp(x))),
    "templates": lambda p, x: dataclasses.replace(p, templates=max(1, int(p.templates * math.exp(x)))),
    "template_zipf": lambda p, x: dataclasses.replace(p, template_zipf=max(0.0, p.template_zipf + x)),
    "template_share": lambda p, x: dataclasses.replace(p, template_share=min(0.9, max(0.01, p.template_share + x))),
    "plain_len_tail": lambda p, x: dataclasses.replace(p, plain_len=_scaled(p.plain_len, math.exp(x), 0.87)),
    "template_suffix": lambda p, x: dataclasses.replace(p, template_suffix=_scaled(p.template_suffix, math.exp(x))),
    "plain_len_body": lambda p, x: dataclasses.replace(p, plain_len=_scaled(p.plain_len, math.exp(x), 0.0, 0.87)),
    # time (the second fit, `benchmarks.fidelity fit --knobs time`): the per-session pace, its
    # spread over sessions, its trend with turn count, the per-gap spread, and the pauses
    "gap": lambda p, x: dataclasses.replace(p, gap=_scaled(p.gap, math.exp(x))),
    "gap_spread": lambda p, x: dataclasses.replace(p, gap=_scaled(p.gap, math.exp(x), 0.51)),
    "gap_turns_exponent": lambda p, x: dataclasses.replace(p, gap_turns_exponent=p.gap_turns_exponent + x),
    "gap_turn_sigma": lambda p, x: dataclasses.replace(p, gap_turn_sigma=min(1.8, max(0.0, p.gap_turn_sigma + x))),
    "gap_context_exponent": lambda p, x: dataclasses.replace(p, gap_context_exponent=p.gap_context_exponent + x),
    "pause_share": lambda p, x: dataclasses.replace(p, pause_share=min(1.0, p.pause_share * math.exp(x))),
    "pause_max": lambda p, x: dataclasses.replace(p, pause_s=(p.pause_s[0], max(1.1 * p.pause_s[0],
                                                                                p.pause_s[1] * math.exp(x)))),
    # system prompts' bursts (`benchmarks.fidelity fit --knobs prompts`): how often a prompt's
    # session starts a new burst, and the idle time between the sessions of a burst
    "sys_burst_share": lambda p, x: dataclasses.replace(p, sys_burst_share=min(1.0, p.sys_burst_share * math.exp(x))),
    "sys_burst_gap": lambda p, x: dataclasses.replace(p, sys_burst_gap=_scaled(p.sys_burst_gap, math.exp(x))),
    "sys_burst_gap_spread": lambda p, x: dataclasses.replace(p, sys_burst_gap=_scaled(p.sys_burst_gap, math.exp(x),
                                                                                      0.51)),
}
_TIME = ("gap", "gap_spread", "gap_turns_exponent", "gap_turn_sigma", "gap_context_exponent", "pause_share",
         "pause_max")
#: the knobs of each fit: the workload statistics first, then the time structure, then
#: the system prompts' bursts
_PROMPTS = ("sys_burst_share", "sys_burst_gap", "sys_burst_gap_spread")
KNOB_GROUPS = {"statistics": tuple(k for k in KNOBS if k not in _TIME + _PROMPTS), "time": _TIME,
               "prompts": _PROMPTS}
#: initial simplex steps of each knob
STEPS = {"growth": 0.2, "growth_decay": 0.15, "first_msg": 0.5, "growth_turns_exponent": 0.1, "turns_tail": 0.3,
         "sys_len": 0.15, "sys_prompts": 0.3, "template_len": 0.3, "templates": 0.5, "template_zipf": 0.3,
         "template_share": 0.05, "plain_len_tail": 0.3, "template_suffix": 0.4, "plain_len_body": 0.2,
         "gap": 0.3, "gap_spread": 0.3, "gap_turns_exponent": 0.3, "gap_turn_sigma": 0.3, "gap_context_exponent": 0.2,
         "pause_share": 0.3, "pause_max": 0.3, "sys_burst_share": 0.5, "sys_burst_gap": 0.5, "sys_burst_gap_spread": 0.5}
#: shares near 1 are fitted on their complement (0.997 against 0.993 is a 2.3x miss)
COMPLEMENT = ("gap_share_under_22min",)


def apply(profile: SynthProfile, x: dict[str, float]) -> SynthProfile:
    for name, v in x.items():
        profile = KNOBS[name](profile, v)
    return profile


def fit(profile: str | SynthProfile, targets: dict[str, float], *, weights: dict[str, float] | None = None,
        knobs=KNOB_GROUPS["statistics"], maxfev: int = 800, seed: int = 0, log: Callable[[str], None] | None = None):
    """Nelder-Mead over `knobs` (full scale, one seed). Returns (best x by knob, its loss,
    its statistics)."""
    from scipy.optimize import minimize  # a dependency of lightgbm; only the fit needs it

    base = get_profile(profile)
    weights = weights or {}
    best = {"loss": math.inf}

    def loss(v):
        x = dict(zip(knobs, map(float, v)))
        try:
            s = plan_statistics(apply(base, x), seed=seed)
        except ValueError:
            return 1e6
        val = sum(weights.get(k, 1.0) * (math.log((1 - s[k]) / (1 - t)) if k in COMPLEMENT else math.log(s[k] / t)) ** 2
                  for k, t in targets.items())
        if val < best["loss"]:
            best.update(loss=val, x=x, stats=s)
            if log:
                log(f"{val:.4f} " + " ".join(f"{k}={s[k] / t:.3f}" for k, t in targets.items()))
        return val

    x0 = np.zeros(len(knobs))
    simplex = np.vstack([x0] + [np.eye(len(knobs))[i] * STEPS[k] for i, k in enumerate(knobs)])
    minimize(loss, x0, method="Nelder-Mead", options={"maxfev": maxfev, "initial_simplex": simplex})
    return best["x"], best["loss"], best["stats"]
