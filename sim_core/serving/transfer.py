"""KV transfer between a prefill and a decode replica: how long a handoff's bytes take.

A transfer of `tokens` prompt tokens takes

    latency_s + tokens x bytes_per_token / bandwidth_bps

seconds: Dynamo 1.6.1's HandoffTransferTiming::delay_ms (ai-dynamo/aisimulate
crates/core/src/engine/handoff.rs) with a per-transfer latency added (Dynamo has none).
`tokens` is the whole prompt ("prompt", Dynamo's full_prompt and its default) or the
blocks the decode replica does not already hold, whole blocks ("missing", Dynamo's
destination_missing). Without `kv_transfer` a transfer is free, as Dynamo's replay is by
default (its kv_transfer_bandwidth is null).

With `contention` a prefill replica's outgoing link is shared: its transfers in flight
divide `bandwidth_bps` equally (processor sharing), so two transfers started together
take twice as long each. Dynamo times each transfer alone at full bandwidth.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..jit import hook_njit
from ..structures.pairheap import heap_push

TOKENS = ("prompt", "missing")


@dataclass(frozen=True)
class KVTransfer:
    """How a handoff's KV crosses from the prefill to the decode replica (checked: `kv_transfer`)."""

    bytes_per_token: float  # KV bytes of one token (the model's, unless given)
    bandwidth_bps: float  # the link's bytes per second
    latency_s: float = 0.0  # added to every transfer
    tokens: str = "prompt"  # prompt: every prompt token moves; missing: the blocks the decode replica lacks
    contention: bool = False  # a prefill replica's transfers in flight share its link

    def seconds(self, tokens: int) -> float:
        """One transfer's time alone on the link."""
        return self.latency_s + tokens * self.bytes_per_token / self.bandwidth_bps

    def describe(self) -> str:
        share = ", shared link" if self.contention else ""
        lat = f" + {self.latency_s * 1e3:g} ms" if self.latency_s else ""
        return (f"KV transfer {self.bytes_per_token:g} B/token at {self.bandwidth_bps / 1e9:g} GB/s{lat} "
                f"({self.tokens} tokens{share})")


_KEYS = ("bytes_per_token", "bandwidth_bps", "latency_s", "tokens", "contention")


def kv_transfer(given, model_bytes_per_token: int) -> KVTransfer | None:
    """A checked KVTransfer from a mapping (None: transfers are free); a missing
    bytes_per_token is the model's. ValueError names the field."""
    if given is None or isinstance(given, KVTransfer):
        return given
    if not isinstance(given, Mapping):
        raise ValueError(f"kv_transfer must be a mapping such as {{'bytes_per_token': 98304, 'bandwidth_bps': 50e9}}, "
                         f"got {given!r}")
    unknown = set(given) - set(_KEYS)
    if unknown:
        raise ValueError(f"kv_transfer has no key(s) {sorted(unknown)}; valid: {', '.join(_KEYS)}")
    if given.get("bandwidth_bps") is None:
        raise ValueError("kv_transfer.bandwidth_bps is required (bytes per second of the link, e.g. 50e9)")
    bpt = given.get("bytes_per_token")
    out = {"bytes_per_token": _positive(model_bytes_per_token if bpt is None else bpt, "kv_transfer.bytes_per_token"),
           "bandwidth_bps": _positive(given["bandwidth_bps"], "kv_transfer.bandwidth_bps")}
    lat = given.get("latency_s", 0.0)
    if isinstance(lat, bool) or not isinstance(lat, numbers.Real) or not 0 <= lat < math.inf:
        raise ValueError(f"kv_transfer.latency_s must be a number of seconds >= 0, got {lat!r}")
    tok = given.get("tokens", "prompt")
    if tok not in TOKENS:
        raise ValueError(f"kv_transfer.tokens must be one of {', '.join(TOKENS)}, got {tok!r}")
    share = given.get("contention", False)
    if not isinstance(share, bool):
        raise ValueError(f"kv_transfer.contention must be true or false, got {share!r}")
    return KVTransfer(out["bytes_per_token"], out["bandwidth_bps"], float(lat), tok, share)


def _positive(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
        raise ValueError(f"{what} must be a positive number, got {v!r}")
    return float(v)


# The compiled side reads the handoff's state (handoff.Handoff): `f`, the link (layout
# below); per request the bytes left (x_rem) and a link of its replica's list (x_nx); per
# prefill replica its transfers in flight (x_head, x_n), when their shares were last
# settled (x_upd) and when the first one's bytes will be through (x_next); and a heap of
# transfers whose bytes are through, keyed by when they complete (hk, hv, hn).
F_BPT, F_BW, F_LAT, F_SHARED = range(4)
N_F = 4


def link_array(x: KVTransfer | None):
    """Handoff.f for a transfer model (None: free)."""
    if x is None:
        return np.zeros(N_F)
    return np.array([x.bytes_per_token, x.bandwidth_bps, x.latency_s, float(x.contention)])


@hook_njit
def _settle(ho, p, t):
    """Charge the transfers of prefill replica p for the bytes they moved until t."""
    n = ho.x_n[p]
    if n > 0:
        moved = (t - ho.x_upd[p]) * ho.f[F_BW] / n
        r = ho.x_head[p]
        while r >= 0:
            ho.x_rem[r] -= moved
            r = ho.x_nx[r]
    ho.x_upd[p] = t


@hook_njit
def _plan(ho, p):
    """When the first of replica p's transfers in flight will have moved its bytes."""
    n = ho.x_n[p]
    best = math.inf
    r = ho.x_head[p]
    while r >= 0:
        best = min(best, ho.x_rem[r])
        r = ho.x_nx[r]
    ho.x_next[p] = ho.x_upd[p] + max(best, 0.0) * n / ho.f[F_BW] if n > 0 else math.inf


@hook_njit
def start(ho, r, p, tokens, t):
    """Request r's KV (`tokens` of them) leaves prefill replica p at t: False when it is
    free (no kv_transfer), so the transfer completes at once."""
    if ho.f[F_BW] <= 0.0:
        return False
    nbytes = tokens * ho.f[F_BPT]
    if ho.f[F_SHARED] == 0.0:  # alone on the link: its time is known now
        heap_push(ho.hk, ho.hv, ho.hn, t + ho.f[F_LAT] + nbytes / ho.f[F_BW], r)
        return True
    _settle(ho, p, t)
    ho.x_rem[r] = nbytes
    ho.x_nx[r] = ho.x_head[p]
    ho.x_head[p] = r
    ho.x_n[p] += 1
    _plan(ho, p)
    return True


@hook_njit
def next_time(ho):
    """The earliest moment a transfer's state changes: a completion, or (shared links) the
    bytes of one are through."""
    tn = ho.hk[0] if ho.hn[0] > 0 else math.inf
    if ho.f[F_SHARED] != 0.0:
        for p in range(ho.x_next.shape[0]):
            tn = min(tn, ho.x_next[p])
    return tn


@hook_njit
def flow(ho, t):
    """Shared links: the transfers whose bytes are through by t leave their link (the
    others' shares grow) and complete after the latency."""
    if ho.f[F_SHARED] == 0.0:
        return
    for p in range(ho.x_next.shape[0]):
        if ho.x_next[p] > t:
            continue
        _settle(ho, p, t)
        least = math.inf
        r = ho.x_head[p]
        while r >= 0:
            least = min(least, ho.x_rem[r])
            r = ho.x_nx[r]
        # the first due is through by definition; others within a thousandth of a token
        # (rounding of the shares) leave with it
        done = least + 1e-3 * ho.f[F_BPT]
        prev = -1
        r = ho.x_head[p]
        while r >= 0:
            nx = ho.x_nx[r]
            if ho.x_rem[r] <= done:
                if prev < 0:
                    ho.x_head[p] = nx
                else:
                    ho.x_nx[prev] = nx
                ho.x_n[p] -= 1
                heap_push(ho.hk, ho.hv, ho.hn, t + ho.f[F_LAT], r)
            else:
                prev = r
            r = nx
        _plan(ho, p)
