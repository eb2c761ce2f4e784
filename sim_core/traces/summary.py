"""Workload summary of a `Trace`: the numbers logged with every sweep and printed by the CLI."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..jit import njit
from .trace import Trace

__all__ = ["SUMMARY_KEYS", "format_summary", "summary"]

#: Keys of :func:`summary`, in display order.
SUMMARY_KEYS = (
    "name", "source", "requests", "block_accesses", "unique_blocks", "compulsory_miss_ratio",
    "span_s", "sessions", "multi_turn_request_share", "mean_tokens_per_request",
    "dropped_requests", "block_tokens",
)


def summary(trace: Trace) -> dict[str, Any]:
    """Plain-Python summary statistics of a trace.

    - ``requests``: number of requests R; ``block_accesses``: total blocks over all requests.
    - ``unique_blocks``: distinct block ids; ``compulsory_miss_ratio`` = unique / accesses
      (the miss ratio of an infinite cache; 0 for a trace without accesses).
    - ``span_s``: last arrival minus first arrival (seconds).
    - ``sessions``: distinct session ids >= 0 (-1 = unknown is not a session).
    - ``multi_turn_request_share``: share of all requests whose session has >= 2 requests
      (requests of unknown session never count; 0 when no session is known).
    - ``mean_tokens_per_request``: mean input (prompt) tokens.
    - ``dropped_requests``, ``block_tokens``, ``source``, ``name``: copied from the trace.
    """
    R = trace.n_requests
    N = trace.n_accesses
    blocks = trace.blocks[:N]
    # ids are dense by construction; counting present ids keeps this exact even if not
    unique = _count_present(blocks, trace.n_unique) if N else 0
    known = trace.session[trace.session >= 0]
    if len(known):
        _, counts = np.unique(known, return_counts=True)
        sessions = len(counts)
        multi = int(counts[counts >= 2].sum())
    else:
        sessions, multi = 0, 0
    return {
        "name": trace.name,
        "source": trace.source,
        "requests": int(R),
        "block_accesses": int(N),
        "unique_blocks": unique,
        "compulsory_miss_ratio": unique / N if N else 0.0,
        "span_s": float(trace.arrival_s.max() - trace.arrival_s.min()) if R else 0.0,
        "sessions": int(sessions),
        "multi_turn_request_share": multi / R if R else 0.0,
        "mean_tokens_per_request": float(trace.input_tokens.mean()) if R else 0.0,
        "dropped_requests": int(trace.dropped_requests),
        "block_tokens": int(trace.block_tokens),
    }


@njit
def _count_present(blocks, n):
    # one pass over a bitmap: np.bincount would first widen 664M int32 ids to int64 (5 GB, ~14 s)
    seen = np.zeros(n, np.bool_)
    c = 0
    for b in blocks:
        if not seen[b]:
            seen[b] = True
            c += 1
    return c


def _fmt_value(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.4f}" if abs(v) < 1 else f"{v:,.2f}"
    return str(value)


def format_summary(d: dict[str, Any]) -> str:
    """Two-column console table: keys left-aligned, values right-aligned.

    Known keys come first in :data:`SUMMARY_KEYS` order, any extra keys after them.
    """
    keys = [k for k in SUMMARY_KEYS if k in d] + [k for k in d if k not in SUMMARY_KEYS]
    if not keys:
        return ""
    rows = [(k, _fmt_value(d[k])) for k in keys]
    kw = max(len(k) for k, _ in rows)
    vw = max(len(v) for _, v in rows)
    return "\n".join(f"{k:<{kw}}  {v:>{vw}}" for k, v in rows)
