"""Online fit of reuse intervals to an exponential, over flat float64 arrays.

Shared by workload_aware (one histogram per category) and asymcache (one histogram).
A histogram is H_BINS log2 buckets at F[hb:hb+H_BINS] with its interval sum at F[sb]
and count at F[cb]: the policies keep their whole state in two flat arrays (see
workload_aware for why), so every function takes the array and the offsets.
"""
from __future__ import annotations

import math

import numpy as np

from ..jit import njit

FITS = ("median", "mean")

# reuse-interval histogram: bucket k holds [2^(k-H_OFF), 2^(k-H_OFF+1)); bucket 0 also 0
H_BINS = 72
H_OFF = 24


@njit
def hist_bucket(x):
    if x <= 0.0:
        return 0
    k = int(math.floor(math.log2(x))) + H_OFF
    if k < 0:
        return 0
    if k >= H_BINS:
        return H_BINS - 1
    return k


@njit
def hist_record(F, hb, sb, cb, x):
    """Add interval x to the histogram at F[hb:hb+H_BINS], its sum F[sb], count F[cb]."""
    F[hb + hist_bucket(x)] += 1.0
    F[sb] += x
    F[cb] += 1.0


@njit
def hist_rate(F, hb, sb, cb, fit):
    """Fitted exponential rate (fit 0: ln 2 / median, 1: 1 / mean)."""
    n = F[cb]
    if fit == 1:
        if F[sb] <= 0.0:
            return 2.0 ** H_OFF
        return n / F[sb]
    half = 0.5 * n
    cum = 0.0
    for i in range(H_BINS):
        h = F[hb + i]
        if h > 0.0 and cum + h >= half:
            lo = 2.0 ** (i - H_OFF)
            return math.log(2.0) / (lo * 2.0 ** ((half - cum) / h))
        cum += h
    return 1.0


@njit
def refit_due(I, meta, r, every):
    """Count requests at I[meta] (last request seen) and I[meta + 1] (requests since the
    last refit); True when request r is new and `every` requests have passed."""
    if I[meta] == r:
        return False
    I[meta] = r
    I[meta + 1] += 1
    if I[meta + 1] >= every:
        I[meta + 1] = 0
        return True
    return False


def request_times(trace, clock: str) -> np.ndarray:
    if clock == "wall":
        return np.asarray(trace.arrival_s, dtype=np.float64)
    return np.arange(trace.n_requests, dtype=np.float64)  # "request" ("access" uses j)
