"""FreeInference agentic trace (``fmt="freeinference"``, block_tokens = 16)

github HarvardMadSys/freeinference_agentic_trace, raw ``traces/<day>.jsonl``: one
top-level agent *session* per line. A session object::

    {"session_id": "s-1",                 # or "id"; string or int; required
     "requests": [                        # required list, may be empty
        {"start_ms": 1778977459236,       # required number, arrival in ms
         "block_ids": [123, 456, 789],    # required list of ints, 16-token blocks
         "input_tokens": 40,              # optional, alias "input_length"
         "output_tokens": 230,            # optional, alias "output_length"
         "tool_calls": [                  # optional list (or null) of objects
            {"name": "task", "subagent": <session object> or null}]}]}

Only the keys above are read; every other key (``week``, ``provider_tokens``,
``role_tokens``, ``mutation``, ...) is ignored. When both spellings of a key are
present the first listed wins. ``start_ms`` is Unix epoch milliseconds, made relative
to the first request (sim_core.traces.loaders.times). Flattening: every session, top-level or nested under a tool call's
``subagent`` (recursively, to any depth), becomes its own session with a new dense
id 0, 1, 2, ... assigned in file order, depth first (a session gets its id before
the subagents it spawns); all requests of all sessions are then ordered by arrival
(ties keep this depth-first order). Error messages name nested fields by their
path, e.g. ``field 'requests[3].tool_calls[0].subagent.requests[1].block_ids'``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .kvcache_tester import _is_kvcache_tester
from .lines import Line, iter_objects, short
from .times import stamp


def load_freeinference(path: str | Path, *, name: str | None = None,
                       context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """FreeInference agentic JSONL trace: one session per line, subagent sessions flattened."""
    b = Builder(path, 16, context_tokens, "ms", **options)
    path, where = b.path, b.where
    n_sessions = 0
    n_subagents = 0

    def walk(ln: Line, sess: Any, prefix: str) -> None:
        nonlocal n_sessions, n_subagents
        if not isinstance(sess, dict):
            raise ln.fail(prefix.rstrip(".") or "session",
                          f"expected a session object, got {short(sess)}")
        sid = sess.get("session_id")
        if sid is None:
            sid = sess.get("id")
        if sid is None:
            raise ln.fail(prefix + "session_id", "missing required field (also accepted: 'id')")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)):
            raise ln.fail(prefix + "session_id", f"expected a string or integer, got {short(sid)}")
        requests = ln.required(sess, "requests", prefix + "requests")
        if not isinstance(requests, list):
            raise ln.fail(prefix + "requests", f"expected a list of request objects, got {short(requests)}")
        session_id = n_sessions
        n_sessions += 1
        for i, req in enumerate(requests):
            rp = f"{prefix}requests[{i}]"
            if not isinstance(req, dict):
                raise ln.fail(rp, f"expected a request object, got {short(req)}")
            start = stamp(ln, ln.required(req, "start_ms", rp + ".start_ms"), rp + ".start_ms")
            hashes = ln.hashes(ln.required(req, "block_ids", rp + ".block_ids"), rp + ".block_ids")
            ilen = ln.optional_integer(req, ("input_tokens", "input_length"), rp + ".")
            olen = ln.optional_integer(req, ("output_tokens", "output_length"), rp + ".")
            b.add(hashes, start, session_id, ilen, olen or 0)
            calls = req.get("tool_calls")
            if calls is None:
                continue
            if not isinstance(calls, list):
                raise ln.fail(rp + ".tool_calls", f"expected a list of tool-call objects, got {short(calls)}")
            for j, call in enumerate(calls):
                cp = f"{rp}.tool_calls[{j}]"
                if not isinstance(call, dict):
                    raise ln.fail(cp, f"expected a tool-call object, got {short(call)}")
                sub = call.get("subagent")
                if sub is not None:
                    n_subagents += 1
                    walk(ln, sub, cp + ".subagent.")

    for lineno, obj in iter_objects(path):
        walk(Line(where, lineno), obj, "")
    return b.build("freeinference", name, {"sessions": n_sessions, "subagent_sessions": n_subagents})


FORMAT = TraceFormat(
    name="freeinference", read=load_freeinference, order=30, sniff=lambda obj: "requests" in obj and not _is_kvcache_tester(obj),
    description="FreeInference agentic JSONL: one session per line, subagent sessions nested",
    options=HASH_OPTIONS, settings=HASH_SETTINGS,
)
