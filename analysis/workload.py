"""Workload characterization of a prefix-cache trace (paper sec. 4 and appendix B).

``characterize(trace)`` returns every statistic the paper uses to describe the
FreeInference and Chutes traces, by name, computed with vectorised numpy and compiled
passes over the accesses (a few million accesses take about a second). It is what the
synthetic generator is calibrated against (the published values are in
:mod:`sim_core.traces.synth.targets`: ``calibration_table(characterize(t), TARGETS_FREEINFERENCE)``)
and what users run on their own traces.

Conventions used by every statistic:

* **Session.** Requests with the same ``trace.session`` id >= 0 form a session; a
  request with session id -1 is a session of its own. A *multi-turn* session has at
  least two requests; every other request is *single-turn*.
* **Request length** is ``trace.input_tokens`` (prompt tokens). Percentiles use
  numpy's default linear interpolation.
* **Footprint** of a session is its number of distinct block ids (every block any of
  its requests touches, shared system-prompt blocks included); it is proportional to
  the session's KV bytes.
* **Block categories** (paper sec. 4.1, only when ``block_category`` is given, one int
  per dense block id): 0 = system prompt, 1 = multi-turn history, 2 = single-turn
  prompt. :func:`infer_block_category` approximates them from a trace alone.
"""
from __future__ import annotations

import math

import numpy as np

from sim_core.jit import njit

SYSTEM, HISTORY, SINGLE_TURN = 0, 1, 2

def session_index(trace) -> tuple[np.ndarray, np.ndarray]:
    """(dense session index per request, requests per session); -1 ids become singletons."""
    s = np.asarray(trace.session, dtype=np.int64).copy()
    neg = s < 0
    if neg.any():
        s[neg] = (s.max() if (~neg).any() else -1) + 1 + np.arange(int(neg.sum()), dtype=np.int64)
    _, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
    return inv.astype(np.int64), counts.astype(np.int64)


def session_times(trace) -> tuple[np.ndarray, np.ndarray]:
    """(intra-session gaps, durations of multi-turn sessions), in seconds. A gap is the
    time between consecutive requests of a session, ordered by arrival; a duration is
    last minus first arrival (single-turn sessions have neither)."""
    sess, per_sess = session_index(trace)
    arrival = np.asarray(trace.arrival_s, dtype=np.float64)
    order = np.lexsort((arrival, sess))
    s_sorted = sess[order]
    a_sorted = arrival[order]
    same = s_sorted[1:] == s_sorted[:-1]
    gaps = np.diff(a_sorted)[same]  # only multi-turn sessions have consecutive pairs
    grp_start = np.flatnonzero(np.concatenate(([True], ~same)))
    grp_end = np.concatenate((grp_start[1:], [len(arrival)])) - 1
    duration = a_sorted[grp_end] - a_sorted[grp_start]  # per dense session (sorted order)
    return gaps, duration[per_sess[s_sorted[grp_start]] >= 2]


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else math.nan


def _top_share(x: np.ndarray, frac: float) -> float:
    """Share of sum(x) held by the largest ceil(frac * len(x)) entries."""
    if len(x) == 0 or x.sum() == 0:
        return math.nan
    k = max(1, math.ceil(frac * len(x)))
    top = np.partition(x, len(x) - k)[len(x) - k:]
    return float(top.sum() / x.sum())


@njit
def _session_pass(offsets, blocks, req_order, sess_sorted, n_sessions, n_unique):
    mark = np.full(n_unique, -1, np.int64)  # the last session seen to touch each block
    footprint = np.zeros(n_sessions, np.int64)
    sessions_per_block = np.zeros(n_unique, np.int64)
    for k in range(req_order.shape[0]):
        r = req_order[k]
        s = sess_sorted[k]
        for i in range(offsets[r], offsets[r + 1]):
            b = blocks[i]
            if mark[b] != s:
                mark[b] = s
                footprint[s] += 1
                sessions_per_block[b] += 1
    return footprint, sessions_per_block


def _session_blocks(trace, sess_of_req: np.ndarray, n_sessions: int) -> tuple[np.ndarray, np.ndarray]:
    """(footprint per session, number of distinct sessions touching each block): one
    compiled pass over the requests grouped by session, with no per-access temporaries
    (a sort of (session, block) keys took 10 bytes per access)."""
    order = np.argsort(sess_of_req, kind="stable")
    return _session_pass(trace.req_offsets, trace.blocks, order, np.asarray(sess_of_req, dtype=np.int64)[order],
                         n_sessions, trace.n_unique)


def characterize(trace, block_category: np.ndarray | None = None) -> dict[str, float]:
    """Workload statistics of a trace, by name.

    Size: ``n_requests``, ``n_sessions`` (incl. single-turn), ``n_multi_turn_sessions``,
    ``n_accesses`` (block accesses), ``n_unique_blocks``, ``total_input_tokens``,
    ``span_s`` (last minus first arrival).

    Requests: ``multi_turn_request_share`` (requests in multi-turn sessions / all
    requests); ``mean_input_tokens``, ``median_input_tokens``, ``p90_input_tokens`` over
    all requests; ``median_input_tokens_multi_turn`` over requests of multi-turn
    sessions; ``requests_per_session_median`` / ``_max`` over multi-turn sessions.

    Time: ``gap_median_s`` is the median over all pairs of consecutive requests of a
    multi-turn session (ordered by arrival) of the time between their arrivals;
    ``gap_share_under_22min`` the fraction of those gaps below 1,320 s.
    ``session_duration_median_s`` / ``_p90_s`` / ``_p99_s``: last minus first arrival of
    each multi-turn session. ``concurrency_mean``: time-average, over the trace span
    [first arrival, last arrival], of the number of multi-turn sessions that are
    active (a session is active from its first to its last request's arrival), i.e.
    sum of multi-turn session durations / span (single-turn sessions last 0 s).

    Footprint: ``footprint_median_blocks``, ``footprint_p99_blocks``,
    ``footprint_max_blocks`` over all sessions (single-turn included);
    ``footprint_top10_share`` / ``footprint_top1_share``: share of the summed footprint
    (= KV bytes) held by the largest 10% / 1% of sessions (rounded up).

    Blocks: ``compulsory_miss_ratio`` = distinct blocks / accesses (misses of an infinite
    cache); ``one_hit_block_share`` = fraction of distinct blocks accessed exactly once.

    With ``block_category`` (int per dense block id, 0 system / 1 history / 2 single-turn):
    ``{system,history,single_turn}_block_share`` (share of distinct blocks),
    ``{..}_access_share`` (share of accesses), ``single_turn_once_share`` (fraction of
    single-turn blocks accessed exactly once), ``system_accesses_median`` and
    ``history_accesses_median`` (median accesses per block of the category).
    """
    R = trace.n_requests
    N = trace.n_accesses
    U = trace.n_unique
    if R == 0 or N == 0:
        raise ValueError(f"cannot characterize trace {trace.name!r}: it has no requests or no blocks")
    arrival = np.asarray(trace.arrival_s, dtype=np.float64)
    itok = np.asarray(trace.input_tokens, dtype=np.int64)
    sess, per_sess = session_index(trace)
    S = len(per_sess)
    multi_sess = per_sess >= 2
    multi_req = multi_sess[sess]
    out: dict[str, float] = {
        "n_requests": float(R),
        "n_sessions": float(S),
        "n_multi_turn_sessions": float(multi_sess.sum()),
        "n_accesses": float(N),
        "n_unique_blocks": float(U),
        "total_input_tokens": float(itok.sum()),
        "span_s": float(arrival.max() - arrival.min()) if R else math.nan,
        "multi_turn_request_share": float(multi_req.mean()) if R else math.nan,
        "mean_input_tokens": float(itok.mean()) if R else math.nan,
        "median_input_tokens": _pct(itok, 50),
        "p90_input_tokens": _pct(itok, 90),
        "median_input_tokens_multi_turn": _pct(itok[multi_req], 50),
        "requests_per_session_median": _pct(per_sess[multi_sess], 50),
        "requests_per_session_max": float(per_sess[multi_sess].max()) if multi_sess.any() else math.nan,
    }

    # ---- time: gaps and durations of multi-turn sessions
    gaps, duration = session_times(trace)
    span = out["span_s"]
    out.update({
        "gap_median_s": _pct(gaps, 50),
        "gap_share_under_22min": float((gaps < 1_320.0).mean()) if len(gaps) else math.nan,
        "session_duration_median_s": _pct(duration, 50),
        "session_duration_p90_s": _pct(duration, 90),
        "session_duration_p99_s": _pct(duration, 99),
        "concurrency_mean": float(duration.sum() / span) if span and span > 0 else math.nan,
    })

    # ---- footprints and block reuse
    footprint, _ = _session_blocks(trace, sess, S)
    counts = np.bincount(trace.blocks, minlength=U)
    out.update({
        "footprint_median_blocks": _pct(footprint, 50),
        "footprint_p99_blocks": _pct(footprint, 99),
        "footprint_max_blocks": float(footprint.max()) if S else math.nan,
        "footprint_top10_share": _top_share(footprint, 0.10),
        "footprint_top1_share": _top_share(footprint, 0.01),
        "compulsory_miss_ratio": U / N if N else math.nan,
        "one_hit_block_share": float((counts == 1).mean()) if U else math.nan,
    })

    if block_category is not None:
        cat = np.asarray(block_category)
        if len(cat) != U:
            raise ValueError(f"block_category has {len(cat)} entries, trace has {U} distinct blocks")
        for c, name in ((SYSTEM, "system"), (HISTORY, "history"), (SINGLE_TURN, "single_turn")):
            mask = cat == c
            out[f"{name}_block_share"] = float(mask.mean()) if U else math.nan
            out[f"{name}_access_share"] = float(counts[mask].sum() / N) if N else math.nan
        single = counts[cat == SINGLE_TURN]
        out["single_turn_once_share"] = float((single == 1).mean()) if len(single) else math.nan
        out["system_accesses_median"] = _pct(counts[cat == SYSTEM], 50)
        out["history_accesses_median"] = _pct(counts[cat == HISTORY], 50)
    return out


def infer_block_category(trace) -> np.ndarray:
    """Approximate paper sec. 4.1 categories from the access stream alone.

    The paper labels system prompts by message role, which a block trace does not
    carry. Proxy: a block seen in a multi-turn session is *system* if more than one
    session touches it (a cross-session shared prefix) and *history* otherwise; a block
    seen only in single-turn requests is *single-turn*. System prompts used by a single
    session are therefore counted as history.
    """
    sess, per_sess = session_index(trace)
    _, sessions_per_block = _session_blocks(trace, sess, len(per_sess))
    in_multi = np.zeros(trace.n_unique, dtype=bool)
    multi_access = np.repeat(per_sess[sess] >= 2, trace.request_lengths)
    in_multi[trace.blocks[multi_access]] = True
    cat = np.full(trace.n_unique, SINGLE_TURN, dtype=np.int8)
    cat[in_multi] = HISTORY
    cat[in_multi & (sessions_per_block > 1)] = SYSTEM
    return cat


# ----------------------------------------------------------------- per-block time statistics
def has_sessions(trace) -> bool:
    """Does the trace say which requests form a session? (Mooncake traces do not: every
    session id is -1, and the session statistics above would treat each request as a
    session of its own.)"""
    return bool((np.asarray(trace.session) >= 0).any())


@njit
def _reuse_pass(offsets, blocks, arrival, n_unique, n_intervals):
    """One pass in time order: each block's first and last access time, and each reuse
    (an access after the first) as its interval and block."""
    first = np.zeros(n_unique, np.float64)
    last = np.zeros(n_unique, np.float64)
    seen = np.zeros(n_unique, np.bool_)
    interval = np.empty(n_intervals, np.float32)
    iblock = np.empty(n_intervals, blocks.dtype)
    j = 0
    for r in range(offsets.shape[0] - 1):
        t = arrival[r]
        for i in range(offsets[r], offsets[r + 1]):
            b = blocks[i]
            if seen[b]:
                interval[j] = t - last[b]
                iblock[j] = b
                j += 1
            else:
                seen[b] = True
                first[b] = t
            last[b] = t
    return last - first, interval, iblock


def block_reuse(trace) -> dict[str, np.ndarray]:
    """Per-block access statistics over time (paper sec. 4.1-4.3), with an access's time
    being its request's arrival:

    * ``accesses`` [U]: accesses of each block (its frequency);
    * ``lifetime_s`` [U]: last minus first access time (0 for a block accessed once);
    * ``interval_s`` (float32) and ``interval_block``: one entry per reuse, i.e. per pair
      of consecutive accesses of a block (its reuse interval, in seconds), and that
      block, in time order.

    One compiled pass over the accesses; memory is about 8 bytes per reuse (float32
    intervals: 0.06 s resolution a week out), so a full-scale week fits in ~5 GB.
    """
    counts = np.bincount(trace.blocks, minlength=trace.n_unique)
    n_intervals = len(trace.blocks) - int(np.count_nonzero(counts))
    lifetime, interval, iblock = _reuse_pass(trace.req_offsets, trace.blocks,
                                             np.asarray(trace.arrival_s, dtype=np.float64), trace.n_unique,
                                             n_intervals)
    return {"accesses": counts, "lifetime_s": lifetime, "interval_s": interval, "interval_block": iblock}


def category_reuse(trace, block_category) -> dict[str, float]:
    """Reuse intervals and lifetimes of system-prompt and history blocks (paper sec.
    4.1-4.2; names as in :data:`REUSE_TARGETS_FREEINFERENCE`): the median and 99th
    percentile over every reuse interval of a category's blocks, and the median lifetime
    over its blocks (0 for a block accessed once; for system blocks also the 99th
    percentile). Memory as :func:`block_reuse`."""
    cat = np.asarray(block_category)
    if len(cat) != trace.n_unique:
        raise ValueError(f"block_category has {len(cat)} entries, trace has {trace.n_unique} distinct blocks")
    r = block_reuse(trace)
    out = {}
    for c, name in ((SYSTEM, "system"), (HISTORY, "history")):
        iv = r["interval_s"][(cat == c)[r["interval_block"]]]
        out[f"{name}_reuse_median_s"] = _pct(iv, 50)
        out[f"{name}_reuse_p99_s"] = _pct(iv, 99)
        life = r["lifetime_s"][cat == c]
        out[f"{name}_lifetime_median_s"] = _pct(life, 50)
        if c == SYSTEM:
            out["system_lifetime_p99_s"] = _pct(life, 99)
    return out


#: lags (seconds) at which :func:`window_overlap` is reported: adjacent 5-minute windows,
#: then out to a day (paper Fig. 3 (c))
OVERLAP_LAGS_S = (300, 1_800, 3_600, 7_200, 86_400)


def window_overlap(trace, lags_s=OVERLAP_LAGS_S, window_s: float = 300.0, sample: int = 32,
                   seed: int = 0) -> dict[str, float]:
    """Working-set churn (paper Fig. 3 (c)): the Jaccard overlap of the distinct blocks of
    two ``window_s`` windows ``lag`` apart, averaged over every such pair of windows of
    which at least one holds a block. Keys ``overlap_<lag>s``.

    Estimated on a random 1/``sample`` of the block ids (``sample=1``: exact): a pair's
    overlap on the blocks kept estimates its overlap on all of them (a ratio estimate,
    close for windows of many blocks), and a full-scale week then needs ~1 GB, not ~10."""
    if window_s <= 0 or sample < 1 or any(round(lag / window_s) < 1 for lag in lags_s):
        raise ValueError("window_s must be positive, every lag at least one window, sample at least 1")
    keep = np.random.default_rng(seed).random(trace.n_unique) * sample < 1.0
    pos = np.flatnonzero(keep[trace.blocks])
    if not len(pos):
        return {f"overlap_{int(lag)}s": math.nan for lag in lags_s}
    arrival = np.asarray(trace.arrival_s, dtype=np.float64)
    req = np.searchsorted(trace.req_offsets, pos, side="right") - 1
    win = ((arrival[req] - arrival.min()) // window_s).astype(np.int64)
    key = np.unique((win << 32) | trace.blocks[pos].astype(np.int64))  # distinct (window, block)
    kw = key >> 32
    nw = int(kw[-1]) + 1
    size = np.bincount(kw, minlength=nw)
    out = {}
    for lag in lags_s:
        L = int(round(lag / window_s))
        later = key + (np.int64(L) << 32)  # each (window, block) L windows on
        at = np.minimum(np.searchsorted(key, later), len(key) - 1)
        inter = np.bincount(kw[key[at] == later], minlength=nw)[:max(nw - L, 0)]
        union = size[:len(inter)] + size[L:L + len(inter)] - inter
        ok = union > 0
        out[f"overlap_{int(lag)}s"] = float((inter[ok] / union[ok]).mean()) if ok.any() else math.nan
    return out


def frequency_bins(accesses: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Bin of each block by its number of accesses: 1, 2, 3-4, 5-8, 9-16, ... (log2)."""
    a = np.maximum(np.asarray(accesses, dtype=np.int64), 1)
    k = np.ceil(np.log2(a)).astype(np.int64)  # 1 -> 0, 2 -> 1, 3-4 -> 2, 5-8 -> 3
    labels = [("1" if i == 0 else "2" if i == 1 else f"{2 ** (i - 1) + 1}-{2 ** i}") for i in range(int(k.max()) + 1)]
    return k, labels


def _quartiles(x: np.ndarray) -> dict[str, float]:
    if not len(x):
        return {"p25": math.nan, "median": math.nan, "p75": math.nan}
    p25, p50, p75 = np.percentile(x, [25, 50, 75])
    return {"p25": float(p25), "median": float(p50), "p75": float(p75)}


def frequency_profile(reuse: dict[str, np.ndarray]) -> list[dict]:
    """Paper Fig. 5 (a, b): per frequency bin, the number of blocks, quartiles of their
    reuse intervals and of their lifetimes. Rows for bins without blocks are left out."""
    k, labels = frequency_bins(reuse["accesses"])
    k_int = k.astype(np.int8)[reuse["interval_block"]]  # one byte per reuse: bins number < 64
    rows = []
    for i, label in enumerate(labels):
        blocks = k == i
        n = int(blocks.sum())
        if n:
            rows.append({"accesses": label, "blocks": n,
                         "interval_s": _quartiles(reuse["interval_s"][k_int == i]),
                         "lifetime_s": _quartiles(reuse["lifetime_s"][blocks])})
    return rows


def further_reuse(accesses: np.ndarray, k_max: int = 16) -> list[dict]:
    """Paper Fig. 5 (c): for k = 1, 2, ...: of the blocks accessed at least k times, the
    share accessed at least k + 1 times (the probability of a further reuse after the
    k-th access). Stops where no block reaches k."""
    a = np.asarray(accesses, dtype=np.int64)
    rows = []
    for k in range(1, k_max + 1):
        at_risk = int((a >= k).sum())
        if not at_risk:
            break
        rows.append({"k": k, "blocks": at_risk, "p_further_reuse": float((a >= k + 1).sum() / at_risk)})
    return rows


def session_footprints(trace) -> np.ndarray:
    """Distinct blocks of each session (single-turn requests are sessions of their own)."""
    sess, per_sess = session_index(trace)
    return _session_blocks(trace, sess, len(per_sess))[0]


def lorenz(values: np.ndarray, points: int = 101) -> tuple[np.ndarray, np.ndarray]:
    """(share of items, largest first; share of the total they hold): the concentration
    curve of paper Fig. 10 (b). (0.1, 0.762) reads "the top 10% hold 76.2%"."""
    v = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    if not len(v) or v.sum() == 0:
        return np.zeros(0), np.zeros(0)
    cum = np.concatenate(([0.0], np.cumsum(v) / v.sum()))
    x = np.linspace(0.0, 1.0, points)
    return x, np.interp(x * len(v), np.arange(len(v) + 1), cum)


def active_sessions(trace) -> tuple[np.ndarray, np.ndarray]:
    """(times, active multi-turn sessions from each time on): the step function whose
    time average is ``concurrency_mean`` (a session is active from its first to its last
    request's arrival, both included)."""
    sess, per_sess = session_index(trace)
    arrival = np.asarray(trace.arrival_s, dtype=np.float64)
    S = len(per_sess)
    first = np.full(S, np.inf)
    last = np.full(S, -np.inf)
    np.minimum.at(first, sess, arrival)
    np.maximum.at(last, sess, arrival)
    multi = per_sess >= 2
    times = np.concatenate((first[multi], last[multi]))
    # at equal times starts come first: a session ending when another starts overlaps it
    delta = np.concatenate((np.ones(int(multi.sum())), -np.ones(int(multi.sum()))))
    order = np.lexsort((-delta, times))
    return times[order], np.cumsum(delta[order])


__all__ = [
    "active_sessions", "block_reuse", "category_reuse", "characterize",
    "frequency_bins", "frequency_profile", "further_reuse", "has_sessions", "infer_block_category", "lorenz",
    "session_footprints", "session_index", "session_times",
]
