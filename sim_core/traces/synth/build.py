"""Materialise a plan: the block ids of every request in arrival order, dense ids by
first appearance, sessions numbered by first arrival, and the Trace."""
from __future__ import annotations

import logging

import numpy as np

from ...digest import generator_digest
from ...jit import njit
from ..trace import Trace
from ..file import densify_in_place
from .plan import plan_requests
from .profiles import BLOCK_TOKENS, DEFAULT_SCALE, MAX_BLOCKS, PROFILES, SynthProfile, get_profile

log = logging.getLogger("sim_core.traces.synth")


@njit
def _fill_blocks(offsets, starts, lengths, out):
    """Request r is the id ranges starts[r, k] .. + lengths[r, k], k = 0, 1, 2, in turn."""
    for r in range(lengths.shape[0]):
        o = offsets[r]
        for k in range(lengths.shape[1]):
            s = starts[r, k]
            for j in range(lengths[r, k]):
                out[o + j] = s + j
            o += lengths[r, k]


def generate_labeled(profile: str | SynthProfile = "freeinference", *, scale: float = DEFAULT_SCALE,
                     seed: int = 0, concurrency: float | None = None,
                     stream_seeds: dict | None = None, week: int = 0) -> tuple[Trace, np.ndarray]:
    """Generate a trace and the category of each dense block id.

    Returns ``(trace, block_category)`` with ``block_category`` int8[n_unique]:
    0 = system prompt, 1 = multi-turn history, 2 = single-turn prompt.
    ``stream_seeds`` (diagnostics) draws the named steps of the plan (``plan.STREAMS``:
    turns, sys, grow, time, single, tok) as that seed would, the others as ``seed``.
    ``week`` > 0 draws another week of the same seed, independent of week 0 (the seed's
    own trace); ``trace.weeks`` in a sweep replays weeks 0..k-1 back to back.
    """
    if int(week) < 0:
        raise ValueError(f"week must be >= 0, got {week}")
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
    plan = plan_requests(prof, float(scale), int(seed), conc, stream_seeds, int(week))
    order = np.argsort(plan.arrival_s, kind="stable")  # keeps each session's turn order
    lengths = plan.n_blocks[order]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    blocks = np.empty(int(offsets[-1]), dtype=np.int32)
    _fill_blocks(offsets, np.stack([plan.a_start, plan.b_start, plan.c_start], 1)[order].astype(np.int64),
                 np.stack([plan.a_len, plan.b_len, plan.c_len], 1)[order].astype(np.int64), blocks)
    dense, n_unique = densify_in_place(blocks, len(plan.raw_category))
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
        "generator": "sim_core.traces.synth",
        "profile": prof.name,
        "scale": float(scale),
        "seed": int(seed),
        "concurrency": conc,
        "window_s": plan.window_s,
        "multi_turn_sessions": plan.n_multi_sessions,
        "multi_turn_requests": plan.n_multi_requests,
        "compressed_sessions": plan.compressed_sessions,
        "padded_sessions": plan.padded_sessions,
        "compactions": plan.compactions,
        "max_blocks": MAX_BLOCKS,
    }
    if week:
        meta["week"] = int(week)
    if stream_seeds:
        meta["stream_seeds"] = dict(stream_seeds)
    if prof.name not in PROFILES or PROFILES[prof.name] != prof:
        meta["profile_params"] = repr(prof.to_dict())
    trace = Trace(offsets, blocks, plan.arrival_s[order], session, plan.input_tokens[order],
                  plan.output_tokens[order], block_tokens=BLOCK_TOKENS, name=prof.name,
                  source="synthetic", dropped_requests=0, meta=meta)
    trace._content_digest = generator_digest(meta)  # what trace_digest returns for it
    return trace, block_category


def generate(profile: str | SynthProfile = "freeinference", *, scale: float = DEFAULT_SCALE,
             seed: int = 0, concurrency: float | None = None, stream_seeds: dict | None = None,
             week: int = 0) -> Trace:
    """Generate a synthetic trace (see the module docstring for the model).

    Args:
        profile: a name in :data:`PROFILES` or a :class:`SynthProfile`.
        scale: fraction of the full trace's sessions and requests (1.0 = full size:
            327.5K requests / ~10.5B tokens for ``freeinference``).
        seed: the same seed gives the same arrays bit for bit.
        concurrency: mean number of concurrently active sessions (default: the profile's).
        stream_seeds: diagnostics, see :func:`generate_labeled`.
        week: another independent week of the same seed (0: the seed's own trace).
    """
    return generate_labeled(profile, scale=scale, seed=seed, concurrency=concurrency,
                            stream_seeds=stream_seeds, week=week)[0]
