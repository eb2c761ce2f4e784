"""Deterministic synthetic prefix-cache traces calibrated to the paper's workload statistics.

The FreeInference and Chutes traces are not redistributed, so ``trace=freeinference`` and
``trace=chutes`` replay a generated stand-in (``source="synthetic"``). The generator
reproduces the structure that matters to eviction (paper sec. 4): prefix-chained
blocks, append-only multi-turn sessions, shared system prompts, mostly-unique
single-turn prompts with a templated minority, session-paced arrivals, heavy-tailed
session sizes and footprints. ``analysis.workload.characterize`` measures a trace with
the paper's definitions; ``TARGETS_FREEINFERENCE`` in :mod:`sim_core.traces.synth.targets`
lists what the ``freeinference`` profile is calibrated to.

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
* **Context cap and compaction.** No request exceeds ``MAX_BLOCKS`` (256K tokens), and
  nothing is dropped (``dropped_requests == 0``). With ``compaction`` (on for
  ``freeinference``) a session grows at its natural pace, and a turn that would overrun
  the window starts a new context instead: the system prompt, a summary of the history
  (fresh blocks, ``compact_summary``) and the turn's new blocks, as agent harnesses do
  when the context fills (Claude Code's auto-compact, Codex CLI's compaction, OpenHands'
  summarizing condenser). The new context shares only the system prompt with the old
  one, so a session's footprint can exceed the window many times over: the paper's
  largest FreeInference session holds 234 GiB of KV, ten 24-GiB windows, which
  append-only sessions cannot produce. Without it, a session whose growth would overrun
  the cap has its per-turn growth scaled down so its last request ends just under the
  cap. Either way a first request is at most half the cap; template suffixes and unique
  prompts are clipped.
* **Time.** Gaps between consecutive requests of a session are log-logistic around a
  per-session median (``gap``, times ``(n_i / 10) ** -gap_turns_exponent`` for a session
  of n_i requests), spread by ``gap_turn_sigma`` per gap and scaled by ``(blocks served /
  4096) ** gap_context_exponent``: a turn on a long context takes longer (its prefill,
  decode and tool work grow with it), so history blocks are reused more slowly than the
  median gap. A turn gap is at most ``gap_max_s``; a ``pause_share`` of the sessions
  also contain one long pause (log-uniform on ``pause_s``: a person coming back). The
  trace window ``W`` follows from Little's law so that the time-average number of
  active sessions (a session is active from its first to its last request) equals
  ``concurrency``: ``sum(durations) = concurrency * W``. Session starts are uniform on
  ``[0, W - duration]`` (a Poisson process conditioned on the number of sessions, with
  no session cut by the window edges); single-turn arrivals are uniform on ``[0, W]``.
  With ``sys_burst_share`` < 1 (``freeinference``: 0.005) the sessions of a system
  prompt come in bursts instead (a user or an application running its tasks one after
  another): each session starts a new burst with that probability, or where the burst
  would outgrow the window, else it starts ``sys_burst_gap`` after the previous session
  of its burst ends; the bursts' starts are uniform as above. Durations are unchanged,
  so Little's law still holds. The paper's system-prompt blocks "routinely outlive
  individual conversations" yet live a median of 291 s, which independent starts
  cannot give (hours: a rare prompt's few sessions land far apart). With
  ``template_burst_share`` < 1 (``freeinference``: 0.005) a template's single-turn
  requests come in bursts the same way, ``template_burst_gap`` apart (a batch job or an
  app calling its task template): arriving on their own they would form a persistent
  core reused all week, where the paper's working set has none (adjacent 5-minute
  windows share over 30% of their blocks, near zero two hours apart: Fig. 3 (c)).
  With ``diurnal`` = a > 0, both follow a daily cycle instead: start-time density
  proportional to ``1 + a sin(2 pi t / 1 day)``. The mean concurrency is unchanged, the
  peak one is higher, and cache pressure at the peaks lowers 24 GiB hit and savings
  ratios. The paper gives no hourly load for FreeInference; ``freeinference``'s a = 0.3
  is fitted to LRU's and Belady's 24 GiB compute savings after the time knobs
  (docs/fidelity.md), not measured.
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

Code: profiles.py (knobs and calibrations), sampling.py (stratified draws), plan.py
(the request-level plan, in named steps: multi-turn sessions, single-turn requests,
block-id layout, arrival times, tokens), build.py (block ids and the Trace) and fit.py
(a plan's statistics without its blocks, and the knob fit).
"""
from .build import generate, generate_labeled
from .plan import expected_size
from .profiles import (BLOCK_TOKENS, CATEGORY_NAMES, CHUTES, DEFAULT_SCALE, FREEINFERENCE, HISTORY,
                       MAX_BLOCKS, MAX_CONTEXT_TOKENS, PROFILES, SINGLE_TURN, SYSTEM, Knots,
                       SynthProfile, get_profile, knot_quantile)

__all__ = [
    "BLOCK_TOKENS", "CATEGORY_NAMES", "CHUTES", "DEFAULT_SCALE", "FREEINFERENCE", "HISTORY",
    "MAX_BLOCKS", "PROFILES", "SINGLE_TURN", "SYSTEM", "SynthProfile", "expected_size",
    "generate", "generate_labeled", "get_profile", "knot_quantile",
]
