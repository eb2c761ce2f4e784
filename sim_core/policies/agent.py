"""Agent hints: what an agent framework knows about its sessions, as eviction classes.

Three policies (docs/agents.md), each "evict the lowest class first, LRU within a class"
over sessions (structures/sessclass.py):

  ttl_pin     after a turn is served, its session's blocks are held for a TTL: not
              evicted while any block outside a held session is resident (Continuum,
              Li et al., arXiv 2511.02230: KV cache pinned for the duration of a tool
              call, released when the TTL expires). The TTL is `ttl` seconds, or, where
              the trace records tool waits (`Trace.tool_wait_s`, see `tool_waits`), the
              turn's tool wait plus `ttl` (the replay serves a turn at its arrival, the
              next turn arrives after decode and the tool, so `ttl` is the margin).
  agent_end   a session whose last turn has been served is over: its blocks are demoted
              below every live session's (the session-close hint of SGLang's session
              radix cache, sgl-project/sglang PR 27058 / 29173: a closed session frees
              first). Which turn is the last is read from the trace's sessions.
  agent_next  evict from the session whose next turn comes furthest in the future (ended
              sessions first, LRU among them); within a session, its least recently used
              block. It knows every session's next arrival, not which blocks that turn
              reuses: a session-level oracle between LRU and Belady (the steps-to-
              execution priority of SGLang's agent-aware eviction RFC, issue 24656).

Common rules. A block belongs to the session of the request that touched it last (a
shared system prompt follows its last user, as in session.py). Requests whose session is
-1 are sessions of their own (one turn: agent_end and agent_next treat them as ended once
served). A turn "is served" when its request is replayed (no service time); in request
mode a request larger than the cache touches nothing and is not a turn, as Belady does
not count it as a future use. ttl_pin with ttl 0 and no tool waits is LRU exactly, and so
is agent_end on a trace without sessions (tests/test_policies_agent.py).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import hook_njit
from ..result import Mode
from ..structures.sessclass import (LAST, attach, expire, hold_until, new_classes, pop_victim, request_at,
                                    set_class)
from .api import PolicySpec, register_hooks
from ..traces.sessions import next_in_session
from .session import session_of_request

TTL_SOURCES = ("auto", "fixed", "tool_wait")
#: the agent-hint policies, in the order tables show them (sweep/report/agents.py)
HINT_POLICIES = ("ttl_pin", "agent_end", "agent_next")


def tool_waits(trace) -> np.ndarray | None:
    """float64[R]: seconds between request r's answer and its session's next turn while
    the agent ran a tool (NaN: r did not end in a tool call, or is its session's last);
    None when the trace records no tool waits. Read off `Trace.tool_wait_s`, which holds
    each request's wait *before* it, as the loaders record it (0: none)."""
    w = trace.tool_wait_s
    if w is None:
        return None
    out = np.full(trace.n_requests, np.nan)
    a, b = next_in_session(trace)
    out[a] = np.where(w[b] > 0, w[b], np.nan)
    return out


def next_turn(ctx) -> np.ndarray:
    """int64[R]: the index of each request's session's next turn, R if none. Empty
    requests and, in request mode, requests larger than the cache are not turns."""
    t = ctx.trace
    R = t.n_requests
    sreq, _ = session_of_request(t)
    lengths = t.request_lengths
    turn = lengths > 0
    if ctx.mode == Mode.REQUEST:
        turn &= lengths <= ctx.capacity
    idx = np.flatnonzero(turn)
    order = idx[np.argsort(sreq[idx], kind="stable")]  # by session, then by index
    out = np.full(R, R, np.int64)
    same = sreq[order[1:]] == sreq[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out


class AgentState(NamedTuple):
    prev: np.ndarray
    nxt: np.ndarray
    bsess: np.ndarray
    stamp: np.ndarray
    H: np.ndarray
    P: np.ndarray
    K: np.ndarray
    n: np.ndarray
    cls: np.ndarray
    inh: np.ndarray
    fixkey: np.ndarray
    stash: np.ndarray
    sv: np.ndarray
    sreq: np.ndarray      # int32[R] dense session of each request
    after_cls: np.ndarray  # int8[R] class of the session once request r is served
    after_key: np.ndarray  # float64[R] its fixed key (agent_next), or its hold deadline (ttl_pin)
    offsets: np.ndarray   # the trace's req_offsets (to find "now" from an access index)
    arrival: np.ndarray   # the trace's arrival_s
    held: np.ndarray      # bool[1]: ttl_pin (classes change with time)


def _state(ctx, after_cls, after_key, fixed: bool, held: bool) -> AgentState:
    t = ctx.trace
    sreq, S = session_of_request(t)
    return AgentState(**new_classes(t.n_unique, S, fixed), sreq=sreq,
                      after_cls=np.ascontiguousarray(after_cls, np.int8),
                      after_key=np.ascontiguousarray(after_key, np.float64),
                      offsets=t.req_offsets, arrival=t.arrival_s, held=np.array([held]))


def make_ttl_pin(ctx) -> AgentState:
    t = ctx.trace
    ttl = float(ctx.params.get("ttl", 0.0))
    source = str(ctx.params.get("source", "auto"))
    if ttl < 0 or not np.isfinite(ttl):
        raise ValueError(f"ttl_pin: ttl must be a finite number of seconds >= 0, got {ttl}")
    if source not in TTL_SOURCES:
        raise ValueError(f"ttl_pin: source must be one of {TTL_SOURCES}, got {source!r}")
    waits = tool_waits(t)
    if source == "tool_wait" and waits is None:
        raise ValueError(f"ttl_pin: source=tool_wait but trace {t.name!r} records no tool waits")
    per_req = np.full(t.n_requests, ttl)
    if waits is not None and source != "fixed":
        # a turn that did not end in a tool call (NaN) is not held
        per_req = np.where(np.isnan(waits), 0.0, np.maximum(waits, 0.0) + ttl)
    hold = per_req > 0
    deadline = np.where(hold, t.arrival_s + per_req, -1.0)
    return _state(ctx, hold.astype(np.int8), deadline, fixed=False, held=True)


def make_agent_end(ctx) -> AgentState:
    nt = next_turn(ctx)
    live = nt < ctx.trace.n_requests
    return _state(ctx, live.astype(np.int8), np.zeros(len(nt)), fixed=False, held=False)


def make_agent_next(ctx) -> AgentState:
    nt = next_turn(ctx)
    live = nt < ctx.trace.n_requests
    return _state(ctx, live.astype(np.int8), nt.astype(np.float64), fixed=True, held=False)


@hook_njit
def _touch(st, b, j, r):
    s = st.sreq[r]
    if st.sv[LAST] != r:  # r's first block: r is served now, its session changes class
        st.sv[LAST] = r
        if st.held[0]:
            hold_until(st, s, st.after_key[r])
            set_class(st, s, st.after_cls[r], 0.0)
        else:
            set_class(st, s, st.after_cls[r], st.after_key[r])
    attach(st, b, s, j)


@hook_njit
def on_hit(st, b, j, r, d):
    _touch(st, b, j, r)


@hook_njit
def on_insert(st, b, j, r, d):
    _touch(st, b, j, r)


@hook_njit
def evict(st, j, r, pin):
    if st.held[0]:
        expire(st, st.arrival[request_at(st, st.offsets, j)])
    return pop_victim(st, j, r, pin)


register_hooks(AgentState, on_hit, on_insert, evict)

_NO_SERVING = "its classes follow the request being served, which the serving replay's shared pins do not name"
# weight 2.0: a guess from lru_session's 1.5 (a heap update per tail change), not yet
# measured with benchmarks.speed; sampling by depth as a sweep samples lru, error not yet
# measured with benchmarks.sampling (docs/sampling.md has no row for them)

SPEC = [
    PolicySpec(
        "ttl_pin", make_ttl_pin,
        "Agent hint (Continuum) - after a turn, its session's blocks are held for a TTL (`ttl` s, or the "
        "trace's tool wait + `ttl`); held blocks go only when nothing else is left; LRU otherwise.",
        defaults={"ttl": 10.0, "source": "auto"}, family="agent", in_all=False,
        no_serving=_NO_SERVING, weight=2.0),
    PolicySpec(
        "agent_end", make_agent_end,
        "Agent hint (session close) - blocks of sessions whose last turn has been served are "
        "evicted first; LRU within each class.",
        family="agent", offline=False, in_all=False, no_serving=_NO_SERVING, weight=2.0),
    PolicySpec(
        "agent_next", make_agent_next,
        "Agent hint, session-level oracle - evicts from the session whose next turn is furthest "
        "away (ended sessions first), its least recently used block first.",
        family="oracle", offline=True, in_all=False, no_serving=_NO_SERVING, weight=2.0),
]
