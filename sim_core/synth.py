"""Deterministic synthetic prefix-cache traces calibrated to the paper's workload statistics.

The FreeInference and Chutes traces are not redistributed, so ``trace=freeinference`` and
``trace=chutes`` replay a generated stand-in (``source="synthetic"``). The generator
reproduces the structure that matters to eviction (paper sec. 4): prefix-chained
blocks, append-only multi-turn sessions, shared system prompts, mostly-unique
single-turn prompts with a templated minority, session-paced arrivals, heavy-tailed
session sizes and footprints. ``analysis.workload.characterize`` measures a trace with
the paper's definitions; ``TARGETS_FREEINFERENCE`` there lists what the
``freeinference`` profile is calibrated to.

Model (lengths in 16-token blocks, times in seconds):

* **Multi-turn sessions.** Session *i* has ``n_i >= 2`` requests (heavy-tailed up to
  ``max_turns``). Its first request is ``system prompt + first user message``; the
  system prompt is a *base prompt* drawn from a pool with Zipf-like popularity (shared
  across sessions) followed by a short per-session system suffix (environment/date
  details, unique to the session). Request k+1 is request k plus ``delta_k >= 1`` new
  blocks (the previous answer and the next user message or tool output): append-only
  growth. ``delta_k`` is lognormal-like around ``m_i * k ** -growth_decay`` (early turns
  read more context than later ones) with a per-session mean ``m_i``.
* **Single-turn requests** (one session id each): a ``template_share`` fraction start
  with a shared task template (pool with Zipf-like popularity) followed by a unique
  suffix; the rest are unique prompts.
* **Block identity.** Every piece above is a run of fresh ids that is always preceded
  by the same content (a base prompt at position 0, a session's private stream after
  its base prompt, a template at position 0, a unique tail after its template), so two
  requests share a block id iff they share the whole prefix up to that block: depth and
  parent are properties of the id, as with real chained KV-block hashes. Dense ids are
  numbered in order of first appearance.
* **Context cap.** No request exceeds ``MAX_BLOCKS`` (256K tokens). The cap is applied
  while planning, never by dropping: a session whose growth would overrun it has its
  per-turn growth scaled down so its last request ends just under the cap (its first
  request is at most half the cap); template suffixes and unique prompts are clipped.
  Request counts are therefore exact and ``dropped_requests == 0``.
* **Time.** Gaps between consecutive requests of a session are lognormal-like around a
  per-session median (``gap``; sessions with many turns are agent loops and a bit
  faster: ``(n_i / 10) ** -gap_turns_exponent``); a ``pause_share`` of the sessions
  also contain one long pause (log-uniform on ``pause_s``: a person coming back). The
  trace window ``W`` follows from Little's law so that the time-average number of
  active sessions (a session is active from its first to its last request) equals
  ``concurrency``: ``sum(durations) = concurrency * W``. Session starts are uniform on
  ``[0, W - duration]`` (a Poisson process conditioned on the number of sessions, with
  no session cut by the window edges); single-turn arrivals are uniform on ``[0, W]``.
  No session may last more than ``max_session_span_frac * W``: longer ones lose the
  excess from their longest gaps (the pauses first). A small trace (a few dozen
  multi-turn sessions) cannot hold a high concurrency at its sessions' natural pace:
  there the window is kept as long as the longest session's pace needs, and sessions
  of above-median duration get one extra idle pause each until Little's law holds, so
  concurrency is exact at every scale while gap and duration medians stay put (the
  upper duration percentiles grow instead).
* **Scale.** ``scale`` multiplies the number of multi-turn sessions, of their requests
  (``multi_requests`` is hit exactly), of single-turn requests *and the sizes of the
  system-prompt and template pools*, so reuse per prompt, and therefore every share
  and distribution, is scale-invariant; request lengths never depend on ``scale``.
* **Small samples.** A default trace has only ~50 multi-turn sessions, and a handful of
  them hold most multi-turn requests. Draws are therefore stratified so that a small
  trace keeps the mass balance of the full one instead of depending on whether the seed
  happened to give the 400-turn session a huge first message: session lengths use the
  conditional mean of each 1/m quantile stratum (then low-variance unbiased rounding,
  rescaled to the exact request total); session-level draws are Latin-hypercube
  stratified, weighted by the session's number of requests where request-weighted
  statistics depend on them; pool lengths are stratified by usage; per-turn growth and
  gaps are stratified within each session. The seed shuffles the strata and drives every
  jitter, so different seeds give different traces.

The three block categories of paper sec. 4.1 are known by construction and returned by
:func:`generate_labeled`: 0 = system prompt (base prompts and per-session system
suffixes; they only appear in multi-turn sessions), 1 = multi-turn history, 2 =
single-turn prompt (templates and unique single-turn content).

Output tokens are not calibrated (the paper gives no statistics): a multi-turn answer is
a fraction of the next request's growth, other answers are lognormal.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from .jit import njit
from .models import QWEN3_CODER_30B
from .trace import Trace

log = logging.getLogger(__name__)

BLOCK_TOKENS = 16
MAX_CONTEXT_TOKENS = QWEN3_CODER_30B.context_tokens  # the paper's cap: the model's window
MAX_BLOCKS = MAX_CONTEXT_TOKENS // BLOCK_TOKENS  # 16,384

#: Default ``scale``: about 1/150 of the full traces, ~4-5M block accesses for
#: ``freeinference`` (a default sweep replays in minutes on two cores).
DEFAULT_SCALE = 1.0 / 150.0

SYSTEM, HISTORY, SINGLE_TURN = 0, 1, 2
CATEGORY_NAMES = ("system", "history", "single_turn")

Knots = tuple[tuple[float, float], ...]
"""Quantile knots ``((p, value), ...)`` with 0 < p < 1 strictly increasing, values > 0.

The distribution is piecewise log-logistic: ``log(value)`` is linear in ``logit(p)``
between knots and extrapolated with the end slopes, so the tails are Pareto-like with
index ``1 / slope`` (then clipped to the quantity's bounds).
"""


def knot_quantile(u: np.ndarray, knots: Knots, lo: float = 0.0, hi: float = math.inf) -> np.ndarray:
    """Quantile function of a knot distribution (see :data:`Knots`), clipped to [lo, hi]."""
    if len(knots) < 2:
        raise ValueError("a knot distribution needs at least two knots")
    p = np.array([k[0] for k in knots], dtype=np.float64)
    v = np.log(np.array([k[1] for k in knots], dtype=np.float64))
    if np.any(np.diff(p) <= 0) or p[0] <= 0 or p[-1] >= 1:
        raise ValueError(f"knot probabilities must increase strictly inside (0, 1): {knots}")
    x = np.log(p / (1 - p))
    uu = np.clip(np.asarray(u, dtype=np.float64), 1e-12, 1 - 1e-12)
    ux = np.log(uu / (1 - uu))
    i = np.clip(np.searchsorted(x, ux) - 1, 0, len(x) - 2)
    slope = (v[i + 1] - v[i]) / (x[i + 1] - x[i])
    return np.clip(np.exp(v[i] + slope * (ux - x[i])), lo, hi)


@dataclass(frozen=True)
class SynthProfile:
    """Every knob of the generator. Lengths are in 16-token blocks, times in seconds.

    Sizes (``multi_sessions``, ``single_requests``, ``sys_prompts``, ``templates``) are
    for ``scale=1.0`` and are multiplied by ``scale``.
    """

    name: str
    description: str
    # ---- population at scale=1
    multi_sessions: int  # multi-turn sessions
    multi_requests: int  # requests in multi-turn sessions (hit exactly, see ``turns``)
    single_requests: int  # single-turn requests (one session each)
    # ---- multi-turn sessions
    turns: Knots  # shape of requests per session; rescaled so they sum to multi_requests
    max_turns: int
    sys_prompts: int  # base system prompts in the pool
    sys_zipf: float  # popularity ~ rank ** -sys_zipf (< 1 keeps reuse scale-invariant)
    sys_len: Knots  # base system prompt length
    sys_tail: Knots  # per-session system suffix (unique to the session), may round to 0
    first_msg: Knots  # first user message
    growth: Knots  # per-session mean growth per turn for a 10-request session
    growth_turns_exponent: float  # growth scales with (n / 10) ** exponent
    growth_decay: float  # the k-th turn's growth is scaled by k ** -growth_decay (front-loaded)
    growth_turn_sigma: float  # per-turn lognormal spread of the growth
    # ---- single-turn requests
    template_share: float  # fraction of single-turn requests that start with a template
    templates: int  # task templates in the pool
    template_zipf: float
    template_len: Knots
    template_suffix: Knots  # unique text after the template
    plain_len: Knots  # untemplated single-turn prompt length
    # ---- time
    gap: Knots  # per-session median gap between requests for a 10-request session
    gap_turns_exponent: float  # gap median scales with (n / 10) ** -exponent
    gap_turn_sigma: float  # per-gap lognormal spread around the session median
    pause_share: float  # share of multi-turn sessions with one long pause on a random gap
    pause_s: tuple[float, float]  # long pauses: log-uniform on this range
    concurrency: float  # default mean number of concurrently active sessions
    max_session_span_frac: float = 0.9
    min_gap_s: float = 0.25
    # ---- output tokens (not calibrated)
    output_median: float = 300.0
    output_sigma: float = 1.0

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"SynthProfile {self.name!r}: {what}")

        need(self.multi_sessions >= 1 and self.single_requests >= 1, "needs sessions and single-turn requests")
        need(self.multi_requests >= 2 * self.multi_sessions, "multi_requests must be >= 2 * multi_sessions")
        need(2 <= self.max_turns and self.sys_prompts >= 1 and self.templates >= 1, "pool sizes and max_turns")
        need(0.0 <= self.template_share <= 1.0 and 0.0 <= self.pause_share <= 1.0, "shares must be in [0, 1]")
        need(0.0 < self.max_session_span_frac <= 1.0, "max_session_span_frac must be in (0, 1]")
        need(0.0 < self.pause_s[0] < self.pause_s[1], "pause_s must be an increasing positive range")
        need(self.concurrency > 0 and self.min_gap_s >= 0, "concurrency and min_gap_s")
        lim = math.pi / math.sqrt(3)
        need(0 <= self.growth_turn_sigma < lim and 0 <= self.gap_turn_sigma < lim,
             f"per-turn spreads must be below {lim:.2f}")
        for name in ("turns", "sys_len", "sys_tail", "first_msg", "growth", "template_len",
                     "template_suffix", "plain_len", "gap"):
            knots = getattr(self, name)
            try:
                knot_quantile(np.array([0.5]), knots)
            except ValueError as e:
                raise ValueError(f"SynthProfile {self.name!r}: {name}: {e}") from None
            need(all(v > 0 for _, v in knots), f"{name}: knot values must be positive")

    def to_dict(self) -> dict:
        return asdict(self)


# The freeinference knobs were fitted (derivative-free search, then rounded) to the
# published statistics at full size and, averaged over seeds, at DEFAULT_SCALE. The
# statistics do not pin every spread, and the fit settled on low-variance choices that
# keep ~50-session default traces representative: near-constant per-session growth and
# pace (variety comes from turn counts, per-turn spread and the front-loaded decay),
# near-uniform template popularity, tiny per-session system suffixes.
FREEINFERENCE = SynthProfile(
    name="freeinference",
    description=(
        "FreeInference Trace stand-in: agentic-heavy (34.3% of requests in multi-turn "
        "sessions, 32K tokens/request), calibrated to paper sec. 3.1, 4.1-4.5, App. B."
    ),
    multi_sessions=7_905,
    multi_requests=112_349,  # 34.3% of 327,548
    single_requests=215_199,
    turns=((0.5, 3.32), (0.9, 24.6), (0.99, 95.2)),
    max_turns=412,
    sys_prompts=2_048,
    sys_zipf=0.21,
    sys_len=((0.1, 797.0), (0.5, 1063.0), (0.9, 1414.0)),
    sys_tail=((0.5, 1.0), (0.9, 3.0)),
    first_msg=((0.5, 28.6), (0.9, 102.7), (0.99, 140.0)),
    growth=((0.5, 375.6), (0.9, 375.9)),
    growth_turns_exponent=0.0123,
    growth_decay=0.334,
    growth_turn_sigma=0.5,
    template_share=0.1322,
    templates=2_365,
    template_zipf=0.026,
    template_len=((0.5, 932.0), (0.85, 3681.0), (0.95, 8982.0), (0.99, 10330.0)),
    template_suffix=((0.5, 75.9), (0.9, 379.0)),
    plain_len=((0.6, 45.0), (0.87, 212.0), (0.97, 463.0), (0.995, 1158.0)),
    gap=((0.5, 9.658), (0.9, 15.68)),
    gap_turns_exponent=0.1247,
    gap_turn_sigma=0.503,
    pause_share=0.0817,
    pause_s=(1_320.0, 25_200.0),
    concurrency=12.0,
)

CHUTES = SynthProfile(
    name="chutes",
    description=(
        "Chutes Trace stand-in: mixed human conversations and agents (26.1% of requests in "
        "multi-turn sessions, 18.7K tokens/request, 130.9-day span at full size); knobs "
        "beyond those published are FreeInference-like guesses with shorter, chattier "
        "sessions and smaller system prompts."
    ),
    multi_sessions=30_000,
    multi_requests=134_624,
    single_requests=381_176,
    turns=((0.5, 3.0), (0.9, 10.0), (0.99, 60.0)),
    max_turns=400,
    sys_prompts=3_000,
    sys_zipf=0.8,
    sys_len=((0.1, 50.0), (0.5, 400.0), (0.9, 1200.0)),
    sys_tail=((0.5, 10.0), (0.9, 60.0)),
    first_msg=((0.5, 100.0), (0.9, 1200.0)),
    growth=((0.5, 135.0), (0.9, 420.0)),
    growth_turns_exponent=0.0,
    growth_decay=0.0,
    growth_turn_sigma=1.0,
    template_share=0.10,
    templates=4_000,
    template_zipf=0.5,
    template_len=((0.5, 1500.0), (0.9, 5000.0)),
    template_suffix=((0.5, 20.0), (0.9, 100.0)),
    plain_len=((0.5, 60.0), (0.9, 600.0)),
    gap=((0.5, 25.0), (0.9, 60.0)),
    gap_turns_exponent=0.2,
    gap_turn_sigma=1.0,
    pause_share=0.10,
    pause_s=(1_320.0, 86_400.0),
    concurrency=6.0,
)

PROFILES: dict[str, SynthProfile] = {p.name: p for p in (FREEINFERENCE, CHUTES)}


def get_profile(profile: str | SynthProfile) -> SynthProfile:
    if isinstance(profile, SynthProfile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(
            f"unknown synthetic profile {profile!r}; valid profiles: {', '.join(sorted(PROFILES))}"
        ) from None


# --------------------------------------------------------------------- sampling helpers
_GOLDEN = (math.sqrt(5) - 1) / 2
_TIER = 0.75  # sessions above this quantile of turns are stratified by request weight


def _lhs(rng: np.random.Generator, m: int, weights: np.ndarray | None = None,
         split_quantile: float | None = None) -> np.ndarray:
    """Latin-hypercube uniforms: one jittered draw per 1/m stratum, in random order.

    With ``weights`` the strata have widths proportional to the weights, so the
    *weighted* distribution of the draws is stratified: a session holding 30% of a
    trace's requests gets its draw from a 30%-wide stratum, and request-weighted
    statistics stay close to their expectation in small traces. The strata are laid out
    in golden-ratio order of the weights' ranks, so items of similar weight (e.g. the
    many 2-4 request sessions) also land evenly across [0, 1]. Each draw is still
    marginally uniform. With ``split_quantile`` only items heavier than that quantile of
    the weights are stratified by weight; the others get a :func:`_lattice` draw paired
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
        u[light] = _lattice(rng, w[light])
        if (~light).any():
            u[~light] = _lhs(rng, int((~light).sum()), w[~light])
        return u
    rank = np.empty(len(w), dtype=np.int64)
    rank[np.argsort(w + 1e-9 * rng.random(len(w)), kind="stable")] = np.arange(len(w))
    order = np.argsort((rank * _GOLDEN + rng.random()) % 1.0)
    cw = np.cumsum(w[order])
    u = np.empty(len(w))
    u[order] = (cw - w[order] * (1.0 - rng.random(len(w)))) / cw[-1]
    return np.clip(u, 1e-9, 1 - 1e-9)


def _lattice(rng: np.random.Generator, key: np.ndarray) -> np.ndarray:
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


def _stratum_means(rng: np.random.Generator, m: int, ppf: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Conditional mean of each 1/m quantile stratum (deterministic), in random order."""
    j = max(1, -(-4096 // m))  # sub-points per stratum
    u = (np.arange(m * j, dtype=np.float64) + 0.5) / (m * j)
    means = ppf(u).reshape(m, j).mean(axis=1)
    return means[rng.permutation(m)]


def _std_logistic(u: np.ndarray) -> np.ndarray:
    """Unit-variance logistic quantiles (a closed-form stand-in for a normal draw)."""
    return np.log(u / (1 - u)) * (math.sqrt(3) / math.pi)


def _logistic_mgf(sigma: float) -> float:
    """E[exp(sigma * z)] for a unit-variance logistic z (finite for sigma < pi / sqrt(3))."""
    a = sigma * math.sqrt(3)
    if a >= math.pi:
        raise ValueError(f"a lognormal-like spread of {sigma} is too wide (max {math.pi / math.sqrt(3):.2f})")
    return a / math.sin(a) if a > 0 else 1.0


def _lhs_within(rng: np.random.Generator, group: np.ndarray, size: np.ndarray) -> np.ndarray:
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


def _random_round(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Systematic (low-variance) unbiased rounding to int64: each value goes to its floor
    or ceiling and, in a random order, the running total never drifts by a unit."""
    x = np.asarray(x, dtype=np.float64)
    order = rng.permutation(len(x))
    start = rng.random()
    c = np.floor(np.cumsum(x[order]) + start)
    out = np.empty(len(x), dtype=np.int64)
    out[order] = np.diff(np.concatenate(([np.floor(start)], c))).astype(np.int64)
    return out


def _zipf_assign(rng: np.random.Generator, pool: int, n: int, alpha: float,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """Assign n items to a pool with popularity ~ rank**-alpha (stratified, random ranks)."""
    w = np.arange(1, pool + 1, dtype=np.float64) ** -alpha
    w = w[rng.permutation(pool)]
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, _lhs(rng, n, weights), side="right"), pool - 1).astype(np.int64)


def _pool_lengths(rng: np.random.Generator, pool: int, choice: np.ndarray, weight: np.ndarray,
                  knots: Knots, hi: int) -> np.ndarray:
    """Lengths of the pool members (prompts, templates) actually chosen; 0 for unused ones.

    Drawn by weighted LHS with each member's total usage as weight, so the usage-weighted
    length distribution is stratified even when a few popular members dominate.
    """
    usage = np.bincount(choice, weights=weight, minlength=pool)
    used = np.flatnonzero(usage > 0)
    out = np.zeros(pool, dtype=np.int64)
    if len(used):
        out[used] = np.rint(knot_quantile(_lhs(rng, len(used), usage[used]), knots, 1, hi))
    return out


def _segment_cumsum(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sum of x restarted at each segment (segments given by counts)."""
    cs = np.cumsum(x)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    base = cs[starts] - x[starts]
    return cs - np.repeat(base, counts)


def _session_turns(rng: np.random.Generator, m: int, total: int, prof: SynthProfile) -> np.ndarray:
    """Requests per session: stratum means of the ``turns`` shape, rescaled to sum to total."""
    lo, hi = 2.0, float(prof.max_turns)
    total = min(total, m * prof.max_turns)
    means = _stratum_means(rng, m, lambda u: knot_quantile(u, prof.turns, lo, hi))
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


def _random_gap(rng: np.random.Generator, first: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Index of one uniformly chosen gap (turns 1..n-1) of each given session."""
    return first + 1 + np.floor(rng.random(len(n)) * (n - 1)).astype(np.int64)


def _solve_window(dur: np.ndarray, concurrency: float, frac: float) -> tuple[float, float]:
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
def _clip_session_gaps(gap, starts, n, dur, limit):
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


# ------------------------------------------------------------------------------ plan
@dataclass
class _Plan:
    """Request-level description of a trace (plan order: sessions' turns, then singles)."""

    session: np.ndarray  # int64[R] plan session id (multi 0..M-1, singles M..)
    arrival_s: np.ndarray  # float64[R]
    n_blocks: np.ndarray  # int64[R]
    input_tokens: np.ndarray  # int64[R]
    output_tokens: np.ndarray  # int64[R]
    a_start: np.ndarray  # int64[R] first id range (base prompt or template), raw ids
    a_len: np.ndarray
    b_start: np.ndarray  # second id range (session stream or unique tail)
    b_len: np.ndarray
    raw_category: np.ndarray  # int8[U_raw]
    n_multi_requests: int
    n_multi_sessions: int
    window_s: float
    compressed_sessions: int
    padded_sessions: int


def _plan(prof: SynthProfile, scale: float, seed: int, concurrency: float) -> _Plan:
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if not concurrency > 0:
        raise ValueError(f"concurrency must be positive, got {concurrency}")
    ss = np.random.SeedSequence([int(seed), 0x5EED])
    r_turns, r_sys, r_grow, r_time, r_single, r_tok = (np.random.default_rng(s) for s in ss.spawn(6))
    cap = MAX_BLOCKS

    # ---------------------------------------------------------------- multi-turn
    M = max(1, int(round(prof.multi_sessions * scale)))
    n = _session_turns(r_turns, M, max(2 * M, int(round(prof.multi_requests * scale))), prof)
    P = max(1, int(round(prof.sys_prompts * scale)))
    prompt = _zipf_assign(r_sys, P, M, prof.sys_zipf)
    base_len = _pool_lengths(r_sys, P, prompt, n, prof.sys_len, cap // 4)
    tail = np.rint(knot_quantile(_lhs(r_sys, M), prof.sys_tail, 0, cap // 8)).astype(np.int64)
    first = np.rint(knot_quantile(_lhs(r_sys, M, n, _TIER), prof.first_msg, 1, cap)).astype(np.int64)
    first_req = base_len[prompt] + tail + first
    over = first_req > cap // 2
    first = np.where(over, np.maximum(1, first - (first_req - cap // 2)), first)
    first_req = base_len[prompt] + tail + first

    mean_growth = knot_quantile(_lhs(r_grow, M, n, _TIER), prof.growth, 1.0, float(cap)) * (
        n / 10.0) ** prof.growth_turns_exponent
    Rm = int(n.sum())
    sess = np.repeat(np.arange(M, dtype=np.int64), n)
    starts = np.concatenate(([0], np.cumsum(n)[:-1]))
    turn = np.arange(Rm, dtype=np.int64) - np.repeat(starts, n)
    sig = prof.growth_turn_sigma
    decay = np.maximum(turn, 1).astype(np.float64) ** -prof.growth_decay
    z = np.zeros(Rm)
    z[turn > 0] = _std_logistic(_lhs_within(r_grow, sess[turn > 0], n - 1))
    raw = mean_growth[sess] * decay * np.exp(sig * z) / _logistic_mgf(sig)
    delta = np.where(turn > 0, np.maximum(1, np.rint(raw)), 0).astype(np.int64)
    total = np.add.reduceat(delta, starts)
    final = first_req + total
    big = final > cap
    if big.any():
        # final request lands just under the cap: cap minus a fraction of a turn's growth
        target = cap - np.floor(r_grow.random(M) * np.minimum(mean_growth, cap / 64)).astype(np.int64)
        target = np.maximum(target, first_req + n - 1)
        extra = total - (n - 1)  # growth above the 1-block minimum per turn
        room = target - first_req - (n - 1)
        factor = np.where(big, room / np.maximum(extra, 1), 1.0)
        delta = np.where(turn > 0, 1 + np.floor((delta - 1) * factor[sess]), 0).astype(np.int64)
    m_blocks = first_req[sess] + _segment_cumsum(delta, n)
    stream_len = m_blocks[starts + n - 1] - base_len[prompt]  # session-private blocks

    # ---------------------------------------------------------------- single-turn
    Rs = max(1, int(round(prof.single_requests * scale)))
    n_tpl = int(round(prof.template_share * Rs))
    is_tpl = np.zeros(Rs, dtype=bool)
    is_tpl[r_single.permutation(Rs)[:n_tpl]] = True
    Q = max(1, int(round(prof.templates * scale)))
    tpl = _zipf_assign(r_single, Q, n_tpl, prof.template_zipf)
    tpl_len = _pool_lengths(r_single, Q, tpl, np.ones(n_tpl), prof.template_len, cap - 1)
    suffix = np.rint(knot_quantile(_lhs(r_single, n_tpl), prof.template_suffix, 1, cap)).astype(np.int64)
    suffix = np.minimum(suffix, cap - tpl_len[tpl])
    plain = np.rint(knot_quantile(_lhs(r_single, Rs - n_tpl), prof.plain_len, 1, cap)).astype(np.int64)
    s_tpl = np.full(Rs, -1, dtype=np.int64)
    s_tpl[is_tpl] = tpl
    s_unique = np.empty(Rs, dtype=np.int64)
    s_unique[is_tpl] = suffix
    s_unique[~is_tpl] = plain

    # ---------------------------------------------------------------- raw id layout
    # [base prompts][templates][session streams][single-turn unique content]
    base_off = np.concatenate(([0], np.cumsum(base_len)[:-1]))
    o_tpl = int(base_len.sum())
    tpl_off = o_tpl + np.concatenate(([0], np.cumsum(tpl_len)[:-1]))
    o_stream = o_tpl + int(tpl_len.sum())
    stream_off = o_stream + np.concatenate(([0], np.cumsum(stream_len)[:-1]))
    o_uniq = o_stream + int(stream_len.sum())
    uniq_off = o_uniq + np.concatenate(([0], np.cumsum(s_unique)[:-1]))
    n_raw = o_uniq + int(s_unique.sum())
    if n_raw >= np.iinfo(np.int32).max:
        raise ValueError(f"scale={scale} needs {n_raw} block ids, more than int32 holds")
    hist_len = stream_len - tail
    seg_len = np.concatenate((base_len, tpl_len, np.stack([tail, hist_len], 1).ravel(), s_unique))
    seg_cat = np.concatenate((
        np.full(P, SYSTEM, np.int8), np.full(Q, SINGLE_TURN, np.int8),
        np.tile(np.array([SYSTEM, HISTORY], np.int8), M), np.full(Rs, SINGLE_TURN, np.int8)))
    raw_category = np.repeat(seg_cat, seg_len)

    a_start = np.concatenate((base_off[prompt][sess], np.where(is_tpl, tpl_off[np.maximum(s_tpl, 0)], 0)))
    a_len = np.concatenate((base_len[prompt][sess], np.where(is_tpl, tpl_len[np.maximum(s_tpl, 0)], 0)))
    b_start = np.concatenate((stream_off[sess], uniq_off))
    b_len = np.concatenate((m_blocks - base_len[prompt][sess], s_unique))
    n_blocks = a_len + b_len

    # ---------------------------------------------------------------- time
    g_med = knot_quantile(_lhs(r_time, M, n - 1, _TIER), prof.gap, 1e-3) * (n / 10.0) ** -prof.gap_turns_exponent
    gs = prof.gap_turn_sigma
    z = np.zeros(Rm)
    z[turn > 0] = _std_logistic(_lhs_within(r_time, sess[turn > 0], n - 1))
    gap = g_med[sess] * np.exp(gs * z)
    gap = np.where(turn > 0, np.maximum(gap, prof.min_gap_s), 0.0)
    body = np.add.reduceat(gap, starts)  # session durations at their natural pace
    # long pauses (a person coming back): one in a share of the sessions, on a random
    # gap, so a session's pause time does not grow with its turn count
    lo, hi = prof.pause_s
    k = int(_random_round(r_time, np.array([prof.pause_share * M]))[0])
    # systematic sample over the sessions ranked by duration: every duration range gets
    # its share of pauses (a small trace does not pause five short sessions by chance)
    by_dur = np.argsort(body + 1e-9 * r_time.random(M), kind="stable")
    paused = by_dur[np.floor((np.arange(k) + r_time.random()) * M / max(k, 1)).astype(np.int64)]
    gap[_random_gap(r_time, starts[paused], n[paused])] = np.exp(
        np.log(lo) + _lhs(r_time, k) * np.log(hi / lo))
    dur = np.add.reduceat(gap, starts)
    frac = prof.max_session_span_frac
    window, limit = _solve_window(dur, concurrency, frac)
    padded = 0
    if window < body.max() / frac:
        # Too few sessions to sustain the concurrency at their natural pace (small
        # scales): instead of speeding up the longest sessions, keep the window their
        # pace needs and idle some sessions (one extra pause each), longer-than-median
        # sessions first so the duration median is preserved, until Little's law holds.
        window = float(body.max() / frac)
        limit = frac * window
        deficit = concurrency * window - float(np.minimum(dur, limit).sum())
        cand = r_time.permutation(np.flatnonzero(dur < limit))
        cand = np.concatenate((cand[dur[cand] >= np.median(dur)], cand[dur[cand] < np.median(dur)]))
        room = limit - dur[cand]
        used = np.cumsum(room)
        take = min(int(np.searchsorted(used, deficit)) + 1, len(room))  # room > deficit: c < frac*M
        extra = room[:take].copy()
        extra[-1] -= used[take - 1] - deficit
        cand = cand[:take]
        gap[_random_gap(r_time, starts[cand], n[cand])] += extra
        dur[cand] += extra
        padded = take
    compressed = int((dur > limit).sum())
    if compressed:
        _clip_session_gaps(gap, starts, n, dur, limit)
        dur = np.minimum(dur, limit)
    offs = _segment_cumsum(gap, n)
    t0 = r_time.random(M) * np.maximum(window - dur, 0.0)
    arrival_m = t0[sess] + offs
    arrival_s = r_time.random(Rs) * window

    # ---------------------------------------------------------------- tokens
    partial = r_tok.integers(0, BLOCK_TOKENS, size=Rm + Rs)
    input_tokens = n_blocks * BLOCK_TOKENS - partial
    out = np.rint(prof.output_median * np.exp(prof.output_sigma * r_tok.standard_normal(Rm + Rs)))
    out = np.clip(out, 1, 32_768).astype(np.int64)
    # a multi-turn answer is part of the next request's growth
    nxt = np.concatenate((delta[1:], [0]))
    last = turn == n[sess] - 1
    share = 0.1 + 0.5 * r_tok.random(Rm)
    out_m = np.where(last, out[:Rm], np.maximum(1, np.floor(nxt * BLOCK_TOKENS * share))).astype(np.int64)
    output_tokens = np.concatenate((out_m, out[Rm:]))

    return _Plan(
        session=np.concatenate((sess, M + np.arange(Rs, dtype=np.int64))),
        arrival_s=np.concatenate((arrival_m, arrival_s)),
        n_blocks=n_blocks, input_tokens=input_tokens, output_tokens=output_tokens,
        a_start=a_start, a_len=a_len, b_start=b_start, b_len=b_len,
        raw_category=raw_category, n_multi_requests=Rm, n_multi_sessions=M,
        window_s=window, compressed_sessions=compressed, padded_sessions=padded,
    )


def expected_size(profile: str | SynthProfile = "freeinference", *, scale: float = 1.0,
                  seed: int = 0) -> dict:
    """Requests, tokens and block accesses a trace would have, without building its blocks.

    Cheap even at ``scale=1.0`` (it plans the requests but never materialises the blocks).
    """
    prof = get_profile(profile)
    plan = _plan(prof, scale, seed, prof.concurrency)
    return {
        "requests": int(len(plan.n_blocks)),
        "multi_turn_requests": plan.n_multi_requests,
        "multi_turn_sessions": plan.n_multi_sessions,
        "input_tokens": int(plan.input_tokens.sum()),
        "accesses": int(plan.n_blocks.sum()),
    }


# ------------------------------------------------------------------------ materialise
@njit
def _fill_blocks(offsets, a_start, a_len, b_start, b_len, out):
    for r in range(len(a_len)):
        o = offsets[r]
        s = a_start[r]
        for j in range(a_len[r]):
            out[o + j] = s + j
        o += a_len[r]
        s = b_start[r]
        for j in range(b_len[r]):
            out[o + j] = s + j


@njit
def _densify(blocks, n_raw):
    """Renumber raw ids in place to 0..U-1 by first appearance; returns (raw->dense, U)."""
    dense = np.full(n_raw, -1, np.int32)
    nxt = 0
    for i in range(len(blocks)):
        b = blocks[i]
        d = dense[b]
        if d < 0:
            d = nxt
            dense[b] = d
            nxt += 1
        blocks[i] = d
    return dense, nxt


def generate_labeled(profile: str | SynthProfile = "freeinference", *, scale: float = DEFAULT_SCALE,
                     seed: int = 0, concurrency: float | None = None) -> tuple[Trace, np.ndarray]:
    """Generate a trace and the category of each dense block id.

    Returns ``(trace, block_category)`` with ``block_category`` int8[n_unique]:
    0 = system prompt, 1 = multi-turn history, 2 = single-turn prompt.
    """
    prof = get_profile(profile)
    if concurrency is None:
        conc = float(prof.concurrency)
        sessions = max(1, int(round(prof.multi_sessions * float(scale))))
        feasible = 0.5 * prof.max_session_span_frac * sessions
        if conc > feasible:  # a tiny trace cannot keep the profile's default concurrency
            log.warning("synthetic %s at scale=%g has %d multi-turn sessions: concurrency lowered "
                        "from %g to %g", prof.name, scale, sessions, conc, feasible)
            conc = feasible
    else:
        conc = float(concurrency)
    plan = _plan(prof, float(scale), int(seed), conc)
    order = np.argsort(plan.arrival_s, kind="stable")  # keeps each session's turn order
    lengths = plan.n_blocks[order]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    blocks = np.empty(int(offsets[-1]), dtype=np.int32)
    _fill_blocks(offsets, plan.a_start[order].astype(np.int64), plan.a_len[order].astype(np.int64),
                 plan.b_start[order].astype(np.int64), plan.b_len[order].astype(np.int64), blocks)
    dense, n_unique = _densify(blocks, len(plan.raw_category))
    used = dense >= 0
    block_category = np.empty(n_unique, dtype=np.int8)
    block_category[dense[used]] = plan.raw_category[used]

    # session ids numbered by first arrival
    sess = plan.session[order]
    _, first_idx, inv = np.unique(sess, return_index=True, return_inverse=True)
    rank = np.empty(len(first_idx), dtype=np.int64)
    rank[np.argsort(first_idx, kind="stable")] = np.arange(len(first_idx))
    session = rank[inv]

    meta = {
        "generator": "sim_core.synth",
        "profile": prof.name,
        "scale": float(scale),
        "seed": int(seed),
        "concurrency": conc,
        "window_s": plan.window_s,
        "multi_turn_sessions": plan.n_multi_sessions,
        "multi_turn_requests": plan.n_multi_requests,
        "compressed_sessions": plan.compressed_sessions,
        "padded_sessions": plan.padded_sessions,
        "max_blocks": MAX_BLOCKS,
    }
    if prof.name not in PROFILES or PROFILES[prof.name] != prof:
        meta["profile_params"] = repr(prof.to_dict())
    trace = Trace(offsets, blocks, plan.arrival_s[order], session, plan.input_tokens[order],
                  plan.output_tokens[order], block_tokens=BLOCK_TOKENS, name=prof.name,
                  source="synthetic", dropped_requests=0, meta=meta)
    return trace, block_category


def generate(profile: str | SynthProfile = "freeinference", *, scale: float = DEFAULT_SCALE,
             seed: int = 0, concurrency: float | None = None) -> Trace:
    """Generate a synthetic trace (see the module docstring for the model).

    Args:
        profile: a name in :data:`PROFILES` or a :class:`SynthProfile`.
        scale: fraction of the full trace's sessions and requests (1.0 = full size:
            327.5K requests / ~10.5B tokens for ``freeinference``).
        seed: the same seed gives the same arrays bit for bit.
        concurrency: mean number of concurrently active sessions (default: the profile's).
    """
    return generate_labeled(profile, scale=scale, seed=seed, concurrency=concurrency)[0]


__all__ = [
    "BLOCK_TOKENS", "CATEGORY_NAMES", "CHUTES", "DEFAULT_SCALE", "FREEINFERENCE", "HISTORY",
    "MAX_BLOCKS", "PROFILES", "SINGLE_TURN", "SYSTEM", "SynthProfile", "expected_size",
    "generate", "generate_labeled", "get_profile", "knot_quantile",
]
