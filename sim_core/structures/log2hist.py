"""Counts of positive integers by log2 bucket, in a slice H[o:o+n] of an integer array
(3L-Cache: the evicted blocks' access counts, whose quantile sets its sample boundary)."""
from __future__ import annotations

import numpy as np

from ..jit import inline_njit, njit


@inline_njit
def log2_count(H, o, x):
    """Count x >= 1 in bucket floor(log2 x) (the caller's n buckets must reach it)."""
    k = 0
    while x > 1:
        x >>= 1
        k += 1
    H[o + k] += 1


@njit
def log2_quantile(H, o, n, q):
    """The q-quantile of the counted values as libCacheSim's 3L-Cache estimates it: 1 if
    it falls in bucket 0, else interpolated linearly over [2^(i-1), 2^i] for bucket i
    and rounded up."""
    total = 0
    for i in range(n):
        total += H[o + i]
    acc = 0
    for i in range(n):
        acc += H[o + i]
        if acc >= q * total:
            if i == 0:
                return 1
            lo = 2.0 ** (i - 1)
            hi = 2.0 ** i
            frac = (q * total + H[o + i] - acc) / H[o + i]
            return np.int64(lo + np.ceil((hi - lo) * frac))
    return 1  # not reached: the last bucket completes the total
