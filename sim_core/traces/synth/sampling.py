"""Stratified draws: the helpers that keep a small trace's mass balance close to the
full trace's (see "Small samples" in sim_core.traces.synth), and the session-time solvers."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...jit import njit
from .profiles import Knots, SynthProfile, knot_quantile

_GOLDEN = (math.sqrt(5) - 1) / 2
TIER = 0.75  # sessions above this quantile of turns are stratified by request weight


def lhs(rng: np.random.Generator, m: int, weights: np.ndarray | None = None,
        split_quantile: float | None = None) -> np.ndarray:
    """Latin-hypercube uniforms: one jittered draw per 1/m stratum, in random order.

    With ``weights`` the strata have widths proportional to the weights, so the
    *weighted* distribution of the draws is stratified: a session holding 30% of a
    trace's requests gets its draw from a 30%-wide stratum, and request-weighted
    statistics stay close to their expectation in small traces. The strata are laid out
    in golden-ratio order of the weights' ranks, so items of similar weight (e.g. the
    many 2-4 request sessions) also land evenly across [0, 1]. Each draw is still
    marginally uniform. With ``split_quantile`` only items heavier than that quantile of
    the weights are stratified by weight; the others get a :func:`lattice` draw paired
    with their weight.
    """
    if weights is None:
        return (rng.permutation(m) + rng.random(m)) / m
    w = np.asarray(weights, dtype=np.float64)
    if split_quantile is not None and len(w) > 1:
        # two tiers: the light items (most sessions) get plain LHS among themselves, so
        # session-level statistics stay stratified; the heavy ones weighted LHS
        light = w <= np.quantile(w, split_quantile)
        u = np.empty(len(w))
        u[light] = lattice(rng, w[light])
        if (~light).any():
            u[~light] = lhs(rng, int((~light).sum()), w[~light])
        return u
    rank = np.empty(len(w), dtype=np.int64)
    rank[np.argsort(w + 1e-9 * rng.random(len(w)), kind="stable")] = np.arange(len(w))
    order = np.argsort((rank * _GOLDEN + rng.random()) % 1.0)
    cw = np.cumsum(w[order])
    u = np.empty(len(w))
    u[order] = (cw - w[order] * (1.0 - rng.random(len(w)))) / cw[-1]
    return np.clip(u, 1e-9, 1 - 1e-9)


def lattice(rng: np.random.Generator, key: np.ndarray) -> np.ndarray:
    """Randomly shifted golden-ratio lattice over the items ranked by ``key``.

    Pairs a new draw with an existing one (e.g. a session's pace with its number of
    requests) in a low-discrepancy way: every range of keys gets draws spread evenly over
    [0, 1], so functions of both (a session's duration) are stratified too, not just
    each marginal.
    """
    m = len(key)
    rank = np.empty(m, dtype=np.int64)
    rank[np.argsort(key + 1e-9 * rng.random(m), kind="stable")] = np.arange(m)
    return np.clip((rank * _GOLDEN + rng.random()) % 1.0, 1e-9, 1 - 1e-9)


def stratum_means(rng: np.random.Generator, m: int, ppf: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Conditional mean of each 1/m quantile stratum (deterministic), in random order."""
    j = max(1, -(-4096 // m))  # sub-points per stratum
    u = (np.arange(m * j, dtype=np.float64) + 0.5) / (m * j)
    means = ppf(u).reshape(m, j).mean(axis=1)
    return means[rng.permutation(m)]


def std_logistic(u: np.ndarray) -> np.ndarray:
    """Unit-variance logistic quantiles (a closed-form stand-in for a normal draw)."""
    return np.log(u / (1 - u)) * (math.sqrt(3) / math.pi)


def logistic_mgf(sigma: float) -> float:
    """E[exp(sigma * z)] for a unit-variance logistic z (finite for sigma < pi / sqrt(3))."""
    a = sigma * math.sqrt(3)
    if a >= math.pi:
        raise ValueError(f"a lognormal-like spread of {sigma} is too wide (max {math.pi / math.sqrt(3):.2f})")
    return a / math.sin(a) if a > 0 else 1.0


def lhs_within(rng: np.random.Generator, group: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Latin-hypercube uniforms stratified inside each group (items grouped contiguously).

    A session's per-turn draws then cover its own distribution evenly, so its total
    (duration, context growth) has the right mean with little sampling noise.
    """
    starts = np.concatenate(([0], np.cumsum(size)[:-1]))
    key = rng.random(len(group))
    order = np.lexsort((key, group))
    rank = np.empty(len(group), dtype=np.int64)
    rank[order] = np.arange(len(group)) - np.repeat(starts, size)
    return (rank + rng.random(len(group))) / size[group]


def random_round(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Systematic (low-variance) unbiased rounding to int64: each value goes to its floor
    or ceiling and, in a random order, the running total never drifts by a unit."""
    x = np.asarray(x, dtype=np.float64)
    order = rng.permutation(len(x))
    start = rng.random()
    c = np.floor(np.cumsum(x[order]) + start)
    out = np.empty(len(x), dtype=np.int64)
    out[order] = np.diff(np.concatenate(([np.floor(start)], c))).astype(np.int64)
    return out


def zipf_assign(rng: np.random.Generator, pool: int, n: int, alpha: float,
                weights: np.ndarray | None = None) -> np.ndarray:
    """Assign n items to a pool with popularity ~ rank**-alpha (stratified, random ranks)."""
    w = np.arange(1, pool + 1, dtype=np.float64) ** -alpha
    w = w[rng.permutation(pool)]
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, lhs(rng, n, weights), side="right"), pool - 1).astype(np.int64)


def pool_lengths(rng: np.random.Generator, pool: int, choice: np.ndarray, weight: np.ndarray,
                 knots: Knots, hi: int) -> np.ndarray:
    """Lengths of the pool members (prompts, templates) actually chosen; 0 for unused ones.

    Drawn by weighted LHS with each member's total usage as weight, so the usage-weighted
    length distribution is stratified even when a few popular members dominate.
    """
    usage = np.bincount(choice, weights=weight, minlength=pool)
    used = np.flatnonzero(usage > 0)
    out = np.zeros(pool, dtype=np.int64)
    if len(used):
        out[used] = np.rint(knot_quantile(lhs(rng, len(used), usage[used]), knots, 1, hi))
    return out


def segment_cumsum(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sum of x restarted at each segment (segments given by counts)."""
    cs = np.cumsum(x)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    base = cs[starts] - x[starts]
    return cs - np.repeat(base, counts)


def session_turns(rng: np.random.Generator, m: int, total: int, prof: SynthProfile) -> np.ndarray:
    """Requests per session: stratum means of the ``turns`` shape, rescaled to sum to total."""
    lo, hi = 2.0, float(prof.max_turns)
    total = min(total, m * prof.max_turns)
    means = stratum_means(rng, m, lambda u: knot_quantile(u, prof.turns, lo, hi))
    f = 1.0
    for _ in range(60):  # multiplicative rescale under the clip to [lo, hi]
        x = np.clip(means * f, lo, hi)
        s = x.sum()
        if abs(s - total) < 0.5:
            break
        f *= total / s
    # largest-remainder rounding: the multiset of lengths is a function of m alone, so
    # small traces do not gain or lose a turn at the median by chance
    n = np.floor(x).astype(np.int64)
    frac = x - n + 1e-9 * rng.random(m)  # random tie-break
    need = total - int(n.sum())
    if need > 0:
        n[np.argsort(-frac, kind="stable")[:need]] += 1
    elif need < 0:  # only if clipping left a surplus
        idx = np.flatnonzero(n > 2)
        n[idx[np.argsort(frac[idx], kind="stable")[: -need]]] -= 1
    return n


def random_gap(rng: np.random.Generator, first: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Index of one uniformly chosen gap (turns 1..n-1) of each given session."""
    return first + 1 + np.floor(rng.random(len(n)) * (n - 1)).astype(np.int64)


def solve_window(dur: np.ndarray, concurrency: float, frac: float) -> tuple[float, float]:
    """Largest window W with sum(min(dur, frac * W)) == concurrency * W (Little's law).

    Returns (W, frac * W). Sessions longer than frac * W must be compressed to it.
    """
    M = len(dur)
    if concurrency >= frac * M:
        raise ValueError(
            f"concurrency {concurrency:g} needs more than {concurrency / frac:.0f} multi-turn "
            f"sessions, the trace has {M}: raise scale or lower concurrency")
    d = np.sort(dur)
    below = np.concatenate(([0.0], np.cumsum(d)))  # below[j] = sum of the j shortest
    k = np.arange(M)  # sessions clipped (the k longest)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = below[M - k] / (concurrency - k * frac)
    longest_free = d[M - 1 - k]  # longest unclipped session
    shortest_clipped = np.concatenate(([np.inf], d[::-1][:-1]))[k]
    ok = (concurrency - k * frac > 0) & (longest_free <= frac * w) & (shortest_clipped >= frac * w)
    j = int(np.flatnonzero(ok)[0])
    return float(w[j]), float(frac * w[j])


@njit
def chain_bursts(new, d, idle, window):
    """(burst of each session, its start within the burst, each burst's length): session
    i + 1 starts idle[i] after session i ends, a new burst at each `new` and where the
    burst would outgrow `window`."""
    M = len(d)
    burst = np.empty(M, np.int64)
    offs = np.empty(M)
    length = np.empty(M)
    b, t = -1, 0.0
    for i in range(M):
        if new[i] or t + d[i] > window:
            b += 1
            t = 0.0
        burst[i] = b
        offs[i] = t
        length[b] = t + d[i]
        t += d[i] + idle[i]
    return burst, offs, length[:b + 1]


@njit
def clip_session_gaps(gap, starts, n, dur, limit):
    """Shorten sessions longer than limit by clipping their longest gaps (water-filling).

    Gaps longer than a per-session threshold tau are cut to tau, tau chosen so the
    session lasts exactly ``limit``; short gaps (the typical pace) are untouched. If even
    that is impossible above the smallest gap, all gaps are scaled down uniformly.
    """
    for i in range(len(n)):
        if dur[i] <= limit:
            continue
        a = starts[i] + 1  # first gap of the session (turn 0 has none)
        b = starts[i] + n[i]
        g = np.sort(gap[a:b])[::-1]
        m = len(g)
        cum = 0.0
        tau = -1.0
        for j in range(1, m + 1):  # j largest gaps clipped to tau
            cum += g[j - 1]
            t = (limit - (dur[i] - cum)) / j
            nxt = g[j] if j < m else 0.0
            if t >= nxt:
                tau = t
                break
        if tau > 0:
            for q in range(a, b):
                if gap[q] > tau:
                    gap[q] = tau
        else:
            f = limit / dur[i]
            for q in range(a, b):
                gap[q] *= f
