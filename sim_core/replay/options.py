"""The checked options of one `simulate` call: mode and order, the tiers below HBM, HBM
admission, partial blocks, warm-up, windows and the TTFT hardware (`options` checks them
once, with errors that name the argument)."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..traces.sums import full_requests
from .accounting import PARTIAL_BLOCKS, duration_s, warmup_cut
from ..catalog.hardware import as_hardware
from ..tiers.spec import as_tier_specs, parse_admit
from ..catalog.models import QWEN3_CODER_30B, get_model
from ..result import Hits, Mode, Order
from ..traces.sample import MIN_SAMPLED_BLOCKS, scaled_capacity

MODES = tuple(m.value for m in Mode)
HITS = tuple(h.value for h in Hits)


def enum_value(kind, name: str, value):
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(k.value for k in kind)}") from None





def tier_rate(r: float, tiers, by: str, floor: int | None) -> float:
    """`r`, doubled until every non-empty lower tier's scaled cache holds the floor."""

    need = MIN_SAMPLED_BLOCKS[by] if floor is None else int(floor)
    while r < 1.0 and any(t.capacity and scaled_capacity(t.capacity, r, by) < need for t in tiers):
        r = min(1.0, r * 2)
    return r


@dataclass(frozen=True)
class Options:
    """How a replay is counted and what sits under HBM (checked once, by `_options`)."""

    tiers: tuple  # hierarchy.TierSpec, top down
    hbm_admit: str
    skip_partial: bool
    cut: tuple  # warm-up: (first counted request, its arrival) on the full trace
    window_s: float | None
    t0: float  # the full trace's first arrival: where windows start
    hardware: object  # hardware.Hardware or None
    overlap: bool
    model: object  # models.ModelConfig (FLOPs and KV bytes of TTFT and tier bytes)
    accesses: int  # counted block accesses of the full trace
    prompt_tokens: int | None  # counted prompt tokens of the full trace (None: not known)
    rate: float = 1.0  # the sample's rate (per-request TTFT scales by 1/rate)

    def changes_replay(self) -> bool:
        return bool(self.tiers) or self.hbm_admit != "all" or self.skip_partial or self.cut[0] > 0 or \
            self.window_s is not None or self.hardware is not None

    def one_pass_ok(self) -> bool:
        """A one-pass curve keeps no per-request counts and models no tiers or admission."""
        return not self.tiers and self.hbm_admit == "all" and self.window_s is None and self.hardware is None


def options(trace, mode, tiers, hbm_admit, partial_blocks, warmup, window, hardware, overlap, model) -> Options:

    specs = tuple(as_tier_specs(tiers))
    admit = "all" if hbm_admit is None else str(hbm_admit)
    parse_admit(admit, "hbm_admit")
    if partial_blocks not in PARTIAL_BLOCKS:
        raise ValueError(f"unknown partial_blocks {partial_blocks!r}; valid: {', '.join(PARTIAL_BLOCKS)}")
    if not isinstance(overlap, (bool, np.bool_)):
        raise ValueError(f"overlap must be true or false, got {overlap!r}")
    hw = as_hardware(hardware)
    window_s = None if window is None else duration_s(window, "window")
    full = full_requests(trace)
    if full is None:  # samples without the trace's per-request counts
        if warmup or window_s is not None:
            raise ValueError("warmup and windows need the trace's per-request counts, which these samples lack")
        cut, accesses, prompt, t0 = (0, -math.inf), int(trace.n_accesses), None, 0.0
    else:
        arrival, n, tokens = full
        cut = warmup_cut(arrival, warmup)
        accesses, prompt = int(n[cut[0]:].sum()), int(tokens[cut[0]:].sum())
        t0 = float(arrival[0]) if len(arrival) else 0.0
    if not accesses:
        raise ValueError(f"warmup {warmup!r} leaves no block access to count")
    return Options(specs, admit, partial_blocks == "skip", cut, window_s, t0, hw, bool(overlap),
                   get_model(model) if model is not None else QWEN3_CODER_30B, accesses, prompt)


def resolve_order(mode: str | Mode, order: str | Order | None) -> Order:
    """The replay order: `order`, or the mode's default (request: tail_first, block:
    forward). Block mode accepts only forward."""
    mode = enum_value(Mode, "mode", mode)
    if order is None:
        return Order.TAIL_FIRST if mode is Mode.REQUEST else Order.FORWARD
    order = enum_value(Order, "order", order)
    if mode is Mode.BLOCK and order is not Order.FORWARD:
        raise ValueError("order=tail_first needs mode=request: block mode handles every access on its own, "
                         "in trace order")
    return order


def check_rate(rate) -> float:
    if rate is None:
        return 1.0
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 < float(rate) <= 1:
        raise ValueError(f"sample_rate must be a number in (0, 1], got {rate!r}")
    return float(rate)
