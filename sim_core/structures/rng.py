"""Seeded random numbers for policies.

One generator, xorshift64*, for every policy that draws its own random numbers
(RandomCompute's pool, LRB, 3L-Cache), plus libCacheSim's `next_rand` LCG for the two
policies that reproduce libCacheSim's draws exactly (LeCaR, LHD: their equality tests
need the same sequence). The state is a 64-bit word in the policy's own arrays: runs
are reproducible per seed and independent of numba's global generator and of other
replays in the same thread.

The seeding and the reduction to [0, n) differ per policy: they are kept as the policies
had them, because changing either changes every sampled result.
"""
from __future__ import annotations

import numpy as np

from ..jit import hook_njit

MASK64 = (1 << 64) - 1
GOLDEN64 = 0x9E3779B97F4A7C15


def _splitmix64(x: int) -> int:
    x = (x + GOLDEN64) & MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def new_rng(seed: int, stream: int = 0) -> np.ndarray:
    """uint64[1] xorshift64* state from a seed (never zero), for `below`."""
    s = _splitmix64((int(seed) * 0x100000001B3 + stream) & MASK64) or 0x2545F4914F6CDD1D
    return np.array([s], dtype=np.uint64)


def seed_word(seed: int, salt: int, fold: int) -> int:
    """xorshift64* state (never zero) as an int64, to keep in a slot of an int64 array
    (for `below_mod`); `salt` and `fold` separate the streams of different policies."""
    z = (int(seed) * GOLDEN64 + salt) & MASK64
    z ^= z >> fold
    z = z or 1
    return z - 2**64 if z >= 2**63 else z


@hook_njit
def _step(x):
    """One xorshift64 state transition (uint64 -> uint64)."""
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    return x


_STAR = np.uint64(2685821657736338717)  # xorshift64* output multiplier


@hook_njit
def below(rng, n):
    """Uniform integer in [0, n) for 0 < n < 2**31; state in rng = uint64[1]
    (top 31 bits of the output, scaled: no modulo bias)."""
    x = _step(rng[0])
    rng[0] = x
    z = x * _STAR
    return np.int64(((z >> np.uint64(33)) * np.uint64(n)) >> np.uint64(31))


@hook_njit
def below_mod(h, i, n):
    """Integer in [0, n); state in the int64 slot h[i] (63-bit output modulo n)."""
    x = _step(np.uint64(h[i]))
    h[i] = np.int64(x)
    v = np.int64((x * _STAR) >> np.uint64(1))
    return v % n


_LCG_MUL = np.uint64(6364136223846793005)
_LCG_INC = np.uint64(1442695040888963407)


@hook_njit
def lcg_next(rng):
    """libCacheSim's next_rand (Knuth's MMIX LCG); state in rng = uint64[1], seeded
    with the plain seed as libCacheSim does."""
    s = rng[0] * _LCG_MUL + _LCG_INC
    rng[0] = s
    return s


def new_lcg(seed: int) -> np.ndarray:
    return np.array([seed], dtype=np.uint64)
