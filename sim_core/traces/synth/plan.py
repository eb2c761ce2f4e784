"""The request-level plan of a synthetic trace, built in named steps.

Each step draws from its own random stream (spawned from the seed), so the steps are
independent: changing one never shifts another's draws.

  multi-turn sessions   turns per session, system prompts, first messages, growth
  single-turn requests  templated and unique prompts
  id layout             raw block-id ranges of every request, and their categories
  arrival times         session pacing, pauses, the window (Little's law), prompt and template bursts
  tokens                input and output tokens per request
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .profiles import (BLOCK_TOKENS, HISTORY, MAX_BLOCKS, SINGLE_TURN, SYSTEM, SynthProfile,
                       get_profile, knot_quantile)
from .sampling import (TIER, chain_bursts, clip_session_gaps, lhs, lhs_within, logistic_mgf, pool_lengths,
                       random_gap, random_round, segment_cumsum, session_turns, solve_window,
                       std_logistic, zipf_assign)


#: the context (blocks) at which `gap_context_exponent` leaves a gap as drawn: a 64K-token prompt
GAP_CONTEXT_REF = 4096.0


@dataclass
class Plan:
    """Request-level description of a trace (plan order: sessions' turns, then singles)."""

    session: np.ndarray  # int64[R] plan session id (multi 0..M-1, singles M..)
    arrival_s: np.ndarray  # float64[R]
    n_blocks: np.ndarray  # int64[R]
    input_tokens: np.ndarray  # int64[R]
    output_tokens: np.ndarray  # int64[R]
    a_start: np.ndarray  # int64[R] first id range (base prompt or template), raw ids
    a_len: np.ndarray
    b_start: np.ndarray  # second id range (session system suffix or single-turn unique tail)
    b_len: np.ndarray
    c_start: np.ndarray  # third id range (the history of the session's current context; 0 for single-turn)
    c_len: np.ndarray
    raw_category: np.ndarray  # int8[U_raw]
    n_multi_requests: int
    n_multi_sessions: int
    window_s: float
    compressed_sessions: int
    padded_sessions: int
    compactions: int


@dataclass
class MultiTurn:
    """Multi-turn sessions: M sessions, Rm requests (session-major, turns in order)."""

    n: np.ndarray  # int64[M] requests per session
    prompt: np.ndarray  # int64[M] base system prompt of each session
    base_len: np.ndarray  # int64[P] length of each base prompt (0 if unused)
    tail: np.ndarray  # int64[M] per-session system suffix
    sess: np.ndarray  # int64[Rm] session of each request
    starts: np.ndarray  # int64[M] first request of each session
    turn: np.ndarray  # int64[Rm] 0-based turn
    delta: np.ndarray  # int64[Rm] blocks added by each turn (0 for the first)
    m_blocks: np.ndarray  # int64[Rm] request length
    context: np.ndarray  # int64[Rm] context (history stream) of each request, numbered across sessions
    history_len: np.ndarray  # int64[C] history blocks of each context
    compactions: int  # contexts rewritten by compaction

    @property
    def M(self) -> int:
        return len(self.n)

    @property
    def Rm(self) -> int:
        return len(self.sess)


@dataclass
class SingleTurn:
    """Single-turn requests: a templated share and unique prompts."""

    is_tpl: np.ndarray  # bool[Rs]
    s_tpl: np.ndarray  # int64[Rs] template of each request, -1 = none
    tpl_len: np.ndarray  # int64[Q] length of each template (0 if unused)
    s_unique: np.ndarray  # int64[Rs] unique blocks of each request

    @property
    def Rs(self) -> int:
        return len(self.is_tpl)

    @property
    def template_blocks(self) -> np.ndarray:
        """int64[Rs] template blocks each request starts with (0 without a template)."""
        return np.where(self.is_tpl, self.tpl_len[np.maximum(self.s_tpl, 0)], 0)

    @property
    def lengths(self) -> np.ndarray:
        """int64[Rs] blocks of each request (its template, then its unique blocks)."""
        return self.template_blocks + self.s_unique


def multi_turn_sessions(prof: SynthProfile, scale: float, r_turns, r_sys, r_grow) -> MultiTurn:
    cap = MAX_BLOCKS
    M = max(1, int(round(prof.multi_sessions * scale)))
    n = session_turns(r_turns, M, max(2 * M, int(round(prof.multi_requests * scale))), prof)
    P = max(1, int(round(prof.sys_prompts * scale)))
    prompt = zipf_assign(r_sys, P, M, prof.sys_zipf)
    base_len = pool_lengths(r_sys, P, prompt, n, prof.sys_len, cap // 4)
    tail = np.rint(knot_quantile(lhs(r_sys, M), prof.sys_tail, 0, cap // 8)).astype(np.int64)
    first = np.rint(knot_quantile(lhs(r_sys, M, n, TIER), prof.first_msg, 1, cap)).astype(np.int64)
    first_req = base_len[prompt] + tail + first
    over = first_req > cap // 2
    first = np.where(over, np.maximum(1, first - (first_req - cap // 2)), first)
    first_req = base_len[prompt] + tail + first

    mean_growth = knot_quantile(lhs(r_grow, M, n, TIER), prof.growth, 1.0, float(cap)) * (
        n / 10.0) ** prof.growth_turns_exponent
    Rm = int(n.sum())
    sess = np.repeat(np.arange(M, dtype=np.int64), n)
    starts = np.concatenate(([0], np.cumsum(n)[:-1]))
    turn = np.arange(Rm, dtype=np.int64) - np.repeat(starts, n)
    sig = prof.growth_turn_sigma
    decay = np.maximum(turn, 1).astype(np.float64) ** -prof.growth_decay
    z = np.zeros(Rm)
    z[turn > 0] = std_logistic(lhs_within(r_grow, sess[turn > 0], n - 1))
    raw = mean_growth[sess] * decay * np.exp(sig * z) / logistic_mgf(sig)
    delta = np.where(turn > 0, np.maximum(1, np.rint(raw)), 0).astype(np.int64)
    total = np.add.reduceat(delta, starts)
    final = first_req + total
    big = final > cap
    sys_len = base_len[prompt] + tail
    if prof.compaction and big.any():
        m_blocks, context, history_len = compact(first_req, sys_len, delta, n, cap, prof.compact_summary, r_grow)
        return MultiTurn(n=n, prompt=prompt, base_len=base_len, tail=tail, sess=sess, starts=starts, turn=turn,
                         delta=delta, m_blocks=m_blocks, context=context, history_len=history_len,
                         compactions=len(history_len) - M)
    if big.any():
        # final request lands just under the cap: cap minus a fraction of a turn's growth
        target = cap - np.floor(r_grow.random(M) * np.minimum(mean_growth, cap / 64)).astype(np.int64)
        target = np.maximum(target, first_req + n - 1)
        extra = total - (n - 1)  # growth above the 1-block minimum per turn
        room = target - first_req - (n - 1)
        factor = np.where(big, room / np.maximum(extra, 1), 1.0)
        delta = np.where(turn > 0, 1 + np.floor((delta - 1) * factor[sess]), 0).astype(np.int64)
    m_blocks = first_req[sess] + segment_cumsum(delta, n)
    return MultiTurn(n=n, prompt=prompt, base_len=base_len, tail=tail, sess=sess, starts=starts,
                     turn=turn, delta=delta, m_blocks=m_blocks, context=sess.copy(),
                     history_len=m_blocks[starts + n - 1] - sys_len, compactions=0)


def compact(first_req, sys_len, delta, n, cap, summary_knots, rng):
    """Context compaction (``SynthProfile.compaction``): a session grows at its natural
    pace, and a turn that would overrun the context window instead starts a new context:
    the system prompt, a summary of the history so far (fresh blocks, ``compact_summary``)
    and the turn's new blocks. The new context shares only the system prompt with the old
    one. Returns (request lengths, context of each request, history blocks per context)."""
    Rm = len(delta)
    m_blocks = np.empty(Rm, np.int64)
    context = np.empty(Rm, np.int64)
    hist = []
    u = rng.random(Rm)
    summ = np.rint(knot_quantile(u, summary_knots, 1, cap // 4)).astype(np.int64)
    j = 0
    for i in range(len(n)):
        ctx = int(first_req[i])
        for k in range(int(n[i])):
            if k > 0:
                if ctx + delta[j] > cap:
                    hist.append(ctx - int(sys_len[i]))
                    ctx = min(int(sys_len[i]) + int(summ[j]) + int(delta[j]), cap)
                else:
                    ctx += int(delta[j])
            m_blocks[j] = ctx
            context[j] = len(hist)
            j += 1
        hist.append(ctx - int(sys_len[i]))
    return m_blocks, context, np.array(hist, np.int64)


def single_turn_requests(prof: SynthProfile, scale: float, r_single) -> SingleTurn:
    cap = MAX_BLOCKS
    Rs = max(1, int(round(prof.single_requests * scale)))
    n_tpl = int(round(prof.template_share * Rs))
    is_tpl = np.zeros(Rs, dtype=bool)
    is_tpl[r_single.permutation(Rs)[:n_tpl]] = True
    Q = max(1, int(round(prof.templates * scale)))
    tpl = zipf_assign(r_single, Q, n_tpl, prof.template_zipf)
    tpl_len = pool_lengths(r_single, Q, tpl, np.ones(n_tpl), prof.template_len, cap - 1)
    suffix = np.rint(knot_quantile(lhs(r_single, n_tpl), prof.template_suffix, 1, cap)).astype(np.int64)
    suffix = np.minimum(suffix, cap - tpl_len[tpl])
    plain = np.rint(knot_quantile(lhs(r_single, Rs - n_tpl), prof.plain_len, 1, cap)).astype(np.int64)
    s_tpl = np.full(Rs, -1, dtype=np.int64)
    s_tpl[is_tpl] = tpl
    s_unique = np.empty(Rs, dtype=np.int64)
    s_unique[is_tpl] = suffix
    s_unique[~is_tpl] = plain
    return SingleTurn(is_tpl=is_tpl, s_tpl=s_tpl, tpl_len=tpl_len, s_unique=s_unique)


def id_layout(mt: MultiTurn, st: SingleTurn, scale: float):
    """Raw id ranges (a, b, c: start and length each) of every request and the category
    of every raw id. Layout: [base prompts][templates][session system suffixes]
    [session contexts' histories][single-turn unique content]."""
    base_len, tpl_len, s_unique, tail = mt.base_len, st.tpl_len, st.s_unique, mt.tail
    prompt, sess, is_tpl, s_tpl = mt.prompt, mt.sess, st.is_tpl, st.s_tpl

    def offsets(lengths, at):
        return at + np.concatenate(([0], np.cumsum(lengths)[:-1])), at + int(lengths.sum())

    base_off, o = offsets(base_len, 0)
    tpl_off, o = offsets(tpl_len, o)
    tail_off, o = offsets(tail, o)
    hist_off, o = offsets(mt.history_len, o)
    uniq_off, n_raw = offsets(s_unique, o)
    if n_raw >= np.iinfo(np.int32).max:
        raise ValueError(f"scale={scale} needs {n_raw} block ids, more than int32 holds")
    seg_len = np.concatenate((base_len, tpl_len, tail, mt.history_len, s_unique))
    seg_cat = np.repeat(np.array([SYSTEM, SINGLE_TURN, SYSTEM, HISTORY, SINGLE_TURN], np.int8),
                        [len(base_len), len(tpl_len), len(tail), len(mt.history_len), st.Rs])
    raw_category = np.repeat(seg_cat, seg_len)

    zero = np.zeros(st.Rs, np.int64)
    sys_len = base_len[prompt][sess] + tail[sess]
    a_start = np.concatenate((base_off[prompt][sess], np.where(is_tpl, tpl_off[np.maximum(s_tpl, 0)], 0)))
    a_len = np.concatenate((base_len[prompt][sess], st.template_blocks))
    b_start = np.concatenate((tail_off[sess], uniq_off))
    b_len = np.concatenate((tail[sess], s_unique))
    c_start = np.concatenate((hist_off[mt.context], zero))
    c_len = np.concatenate((mt.m_blocks - sys_len, zero))
    return a_start, a_len, b_start, b_len, c_start, c_len, raw_category


def arrival_times(prof: SynthProfile, mt: MultiTurn, s_tpl: np.ndarray, concurrency: float, r_time):
    """(arrival of the multi-turn requests, of the single-turn ones, window, sessions
    compressed to the span limit, sessions padded with an idle pause)."""
    n, sess, starts, turn, M, Rm = mt.n, mt.sess, mt.starts, mt.turn, mt.M, mt.Rm
    Rs = len(s_tpl)
    g_med = knot_quantile(lhs(r_time, M, n - 1, TIER), prof.gap, 1e-3) * (n / 10.0) ** -prof.gap_turns_exponent
    gs = prof.gap_turn_sigma
    z = np.zeros(Rm)
    z[turn > 0] = std_logistic(lhs_within(r_time, sess[turn > 0], n - 1))
    gap = g_med[sess] * np.exp(gs * z)
    if prof.gap_context_exponent:
        served = np.r_[mt.m_blocks[0], mt.m_blocks[:-1]]  # the request before each gap
        gap = gap * (served / GAP_CONTEXT_REF) ** prof.gap_context_exponent
    gap = np.where(turn > 0, np.clip(gap, prof.min_gap_s, prof.gap_max_s), 0.0)
    body = np.add.reduceat(gap, starts)  # session durations at their natural pace
    # long pauses (a person coming back): one in a share of the sessions, on a random
    # gap, so a session's pause time does not grow with its turn count
    lo, hi = prof.pause_s
    k = int(random_round(r_time, np.array([prof.pause_share * M]))[0])
    # systematic sample over the sessions ranked by duration: every duration range gets
    # its share of pauses (a small trace does not pause five short sessions by chance)
    by_dur = np.argsort(body + 1e-9 * r_time.random(M), kind="stable")
    paused = by_dur[np.floor((np.arange(k) + r_time.random()) * M / max(k, 1)).astype(np.int64)]
    gap[random_gap(r_time, starts[paused], n[paused])] = np.exp(
        np.log(lo) + lhs(r_time, k) * np.log(hi / lo))
    dur = np.add.reduceat(gap, starts)
    frac = prof.max_session_span_frac
    window, limit = solve_window(dur, concurrency, frac)
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
        gap[random_gap(r_time, starts[cand], n[cand])] += extra
        dur[cand] += extra
        padded = take
    compressed = int((dur > limit).sum())
    if compressed:
        clip_session_gaps(gap, starts, n, dur, limit)
        dur = np.minimum(dur, limit)
    offs = segment_cumsum(gap, n)
    if prof.sys_burst_share < 1.0:
        t0 = prompt_bursts(mt.prompt, dur, window, prof.sys_burst_share, prof.sys_burst_gap, prof.diurnal, r_time)
    else:
        t0 = diurnal_times(r_time.random(M), np.maximum(window - dur, 0.0), prof.diurnal)
    arrival_m = t0[sess] + offs
    arrival_s = diurnal_times(r_time.random(Rs), np.full(Rs, window), prof.diurnal)
    if prof.template_burst_share < 1.0:
        t = np.flatnonzero(s_tpl >= 0)
        arrival_s[t] = prompt_bursts(s_tpl[t], np.zeros(len(t)), window, prof.template_burst_share,
                                     prof.template_burst_gap, prof.diurnal, r_time)
    return arrival_m, arrival_s, window, compressed, padded


def prompt_bursts(key: np.ndarray, dur: np.ndarray, window: float, share: float, gap, diurnal: float,
                  rng) -> np.ndarray:
    """Start times of items that come in bursts by key (the sessions of a system prompt,
    the requests of a template): a key's items, in random order, are split into bursts
    (a new one with probability `share`, or where the chain would outgrow the window); in
    a burst each item starts a `gap` (Knots) after the previous one ends (`dur`: 0 for a
    request), and the bursts start on the daily cycle. Durations are kept, so Little's
    law still holds."""
    M = len(key)
    order = np.lexsort((rng.random(M), key))
    p, d = key[order], dur[order]
    new = np.r_[True, p[1:] != p[:-1]] | (rng.random(M) < share)
    idle = knot_quantile(rng.random(M), gap, 0.0)
    burst, offs, length = chain_bursts(new, d, idle, window)
    t0 = np.empty(M)
    t0[order] = diurnal_times(rng.random(len(length)), window - length, diurnal)[burst] + offs
    return t0


def diurnal_times(u: np.ndarray, room: np.ndarray, amplitude: float) -> np.ndarray:
    """Start times on [0, room] for uniforms u: uniform when amplitude is 0, otherwise
    drawn from a daily cycle with density proportional to 1 + amplitude * sin(2 pi t /
    1 day) (inverse transform on a grid). Little's law still holds: only when sessions
    start moves, not how long they last."""
    if amplitude <= 0:
        return u * room
    day = 86_400.0
    top = float(room.max())
    grid = np.linspace(0.0, top, max(2, int(top / 60.0) + 2))  # one-minute steps
    dens = 1.0 + amplitude * np.sin(2 * np.pi * grid / day)
    cdf = np.concatenate(([0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(grid))))
    # each start is drawn inside its own [0, room_i]: scale u to the CDF mass there
    return np.interp(u * np.interp(room, grid, cdf), cdf, grid)


def token_counts(prof: SynthProfile, mt: MultiTurn, n_blocks: np.ndarray, Rs: int, r_tok):
    """(input tokens, output tokens) per request; a multi-turn answer is part of the next
    request's growth."""
    Rm = mt.Rm
    partial = r_tok.integers(0, BLOCK_TOKENS, size=Rm + Rs)
    input_tokens = n_blocks * BLOCK_TOKENS - partial
    out = np.rint(prof.output_median * np.exp(prof.output_sigma * r_tok.standard_normal(Rm + Rs)))
    out = np.clip(out, 1, 32_768).astype(np.int64)
    nxt = np.concatenate((mt.delta[1:], [0]))
    last = mt.turn == mt.n[mt.sess] - 1
    share = 0.1 + 0.5 * r_tok.random(Rm)
    out_m = np.where(last, out[:Rm], np.maximum(1, np.floor(nxt * BLOCK_TOKENS * share))).astype(np.int64)
    return input_tokens, np.concatenate((out_m, out[Rm:]))


#: the plan's random streams, in spawn order (each step draws from its own)
STREAMS = ("turns", "sys", "grow", "time", "single", "tok")


def _streams(seed: int, stream_seeds: dict | None, week: int = 0) -> list[np.random.Generator]:
    """One generator per step; `stream_seeds` re-seeds named streams (the stream a
    different seed would give), to find which step a seed-to-seed difference comes from.
    Week w > 0 of a seed is another independent draw (trace.weeks: sweep/weeks.py); week 0
    is the seed's own trace."""
    def spawn(s):
        return np.random.SeedSequence([int(s), 0x5EED] + ([int(week)] if week else [])).spawn(len(STREAMS))

    seqs = spawn(seed)
    for name, s in (stream_seeds or {}).items():
        if name not in STREAMS:
            raise ValueError(f"unknown stream {name!r}; streams: {', '.join(STREAMS)}")
        seqs[STREAMS.index(name)] = spawn(s)[STREAMS.index(name)]
    return [np.random.default_rng(q) for q in seqs]


@dataclass
class Drawn:
    """Every random step of a plan (the sessions, the single-turn requests, times and
    tokens); :func:`plan_requests` lays block ids over it, ``fit.plan_statistics``
    measures it without building blocks."""

    mt: MultiTurn
    st: SingleTurn
    n_blocks: np.ndarray  # int64[R] plan order: multi-turn requests, then single-turn
    arrival_m: np.ndarray
    arrival_s: np.ndarray
    window_s: float
    compressed_sessions: int
    padded_sessions: int
    input_tokens: np.ndarray
    output_tokens: np.ndarray


def draw(prof: SynthProfile, scale: float, seed: int, concurrency: float,
         stream_seeds: dict | None = None, week: int = 0) -> Drawn:
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if not concurrency > 0:
        raise ValueError(f"concurrency must be positive, got {concurrency}")
    r_turns, r_sys, r_grow, r_time, r_single, r_tok = _streams(seed, stream_seeds, week)
    mt = multi_turn_sessions(prof, scale, r_turns, r_sys, r_grow)
    st = single_turn_requests(prof, scale, r_single)
    n_blocks = np.concatenate((mt.m_blocks, st.lengths))
    arrival_m, arrival_s, window, compressed, padded = arrival_times(prof, mt, st.s_tpl, concurrency, r_time)
    input_tokens, output_tokens = token_counts(prof, mt, n_blocks, st.Rs, r_tok)
    return Drawn(mt, st, n_blocks, arrival_m, arrival_s, window, compressed, padded, input_tokens, output_tokens)


def plan_requests(prof: SynthProfile, scale: float, seed: int, concurrency: float,
                  stream_seeds: dict | None = None, week: int = 0) -> Plan:
    d = draw(prof, scale, seed, concurrency, stream_seeds, week)
    mt, st = d.mt, d.st
    a_start, a_len, b_start, b_len, c_start, c_len, raw_category = id_layout(mt, st, scale)
    return Plan(
        session=np.concatenate((mt.sess, mt.M + np.arange(st.Rs, dtype=np.int64))),
        arrival_s=np.concatenate((d.arrival_m, d.arrival_s)),
        n_blocks=d.n_blocks, input_tokens=d.input_tokens, output_tokens=d.output_tokens,
        a_start=a_start, a_len=a_len, b_start=b_start, b_len=b_len, c_start=c_start, c_len=c_len,
        raw_category=raw_category, n_multi_requests=mt.Rm, n_multi_sessions=mt.M,
        window_s=d.window_s, compressed_sessions=d.compressed_sessions, padded_sessions=d.padded_sessions,
        compactions=mt.compactions,
    )


def expected_size(profile: str | SynthProfile = "freeinference", *, scale: float = 1.0,
                  seed: int = 0) -> dict:
    """Requests, tokens and block accesses a trace would have, without building its blocks.

    Cheap even at ``scale=1.0`` (it plans the requests but never materialises the blocks).
    """
    prof = get_profile(profile)
    plan = plan_requests(prof, scale, seed, prof.concurrency)
    return {
        "requests": int(len(plan.n_blocks)),
        "multi_turn_requests": plan.n_multi_requests,
        "multi_turn_sessions": plan.n_multi_sessions,
        "input_tokens": int(plan.input_tokens.sum()),
        "accesses": int(plan.n_blocks.sum()),
    }
