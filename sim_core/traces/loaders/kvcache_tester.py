"""WEKA's kv-cache-tester agentic traces (``fmt="kvcache_tester"``): one conversation a file

github callanjfox/kv-cache-tester (Apache-2.0), read at commit 94f6046: the layout in
``docs/trace_replay_tester.md`` ("Trace Format") and the reader ``normalize_trace`` /
``flatten_requests`` in ``trace_replay_tester.py``; ``traces/trace_0001.json`` ... are
Claude Code conversations with sub-agents. A directory of such files, or one file, each
one JSON object (on one line)::

    {"id": "trace_0003", "block_size": 64, "hash_id_scope": "local",
     "requests": [{"t": 0.0, "type": "n", "in": 16564, "out": 244, "hash_ids": [1, 2, 3],
                   "api_time": 7.3, "think_time": 0.0},
                  {"t": 134.2, "type": "subagent", "agent_id": "agent_001",
                   "requests": [{"t": 0.0, "type": "n", "in": 9526, "out": 363, "hash_ids": [...]}]}]}

====================  ========  ====================================================
field                 required  meaning
====================  ========  ====================================================
``block_size``        no        tokens per hash (default 64; one value for all files)
``hash_id_scope``     no        ``global``: ids shared by every file; otherwise
                                (``local``, ``per_context``) ids are the file's own
``requests``          yes       list of requests and sub-agent markers
``requests[].t``      yes       seconds from the conversation's (or sub-agent's) start
``requests[].type``   no        ``s`` / ``n`` (streaming or not: both are requests);
                                ``subagent``: a marker holding the sub-agent's own
                                ``requests``, its times counted from the marker's ``t``
``requests[].in``     no        prompt tokens; the hashes cover its full blocks only
                                (``floor(in / block_size)`` of them)
``requests[].out``    no        generated tokens
``requests[].hash_ids``  yes    block ids (a request's; absent on markers)
``think_time``        no        client time before the request (tool calls, the
                                user), seconds: kept as ``Trace.tool_wait_s``
====================  ========  ====================================================

Each conversation is a session, and each sub-agent a session of its own. The files
carry no absolute time: every conversation starts at 0, as the tester starts its users
together. Other keys (``models``, ``tool_tokens``, ``api_time``, ...) are not read.
"""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .lines import Line, iter_records, short
from .times import stamp

DEFAULT_BLOCK_TOKENS = 64
_MAX_DEPTH = 64  # sub-agents nest a few levels; deeper is not a trace
#: file-local ids become ids from here on, apart from global ones (small ints in practice)
_LOCAL_BASE = 1 << 62


def _local(names: dict[int, int], counter: list[int], h: int) -> int:
    got = names.get(h)
    if got is None:
        got = names[h] = counter[0]
        counter[0] += 1
    return got


def load_kvcache_tester(path: str | Path, *, name: str | None = None,
                        context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """kv-cache-tester conversations (a JSON file, or a directory of them)."""
    b = Builder(path, DEFAULT_BLOCK_TOKENS, context_tokens, "s", partial_last=False, directory=True, **options)
    first_size: tuple[int, str] | None = None
    n_sessions = n_sub = 0
    names: dict[int, int] = {}  # a file's own id -> a trace-wide one (files whose ids are their own)
    counter = [_LOCAL_BASE]

    def walk(ln: Line, requests: Any, base: float, prefix: str, local: bool, depth: int) -> None:
        nonlocal n_sessions, n_sub
        if not isinstance(requests, list):
            raise ln.fail(prefix + "requests", f"expected a list of requests, got {short(requests)}")
        if depth > _MAX_DEPTH:
            raise ln.fail(prefix + "requests", f"sub-agents nested more than {_MAX_DEPTH} deep")
        session = n_sessions
        n_sessions += 1
        for i, req in enumerate(requests):
            rp = f"{prefix}requests[{i}]."
            if not isinstance(req, dict):
                raise ln.fail(rp[:-1], f"expected a request object, got {short(req)}")
            t = base + stamp(ln, ln.required(req, "t", rp + "t"), rp + "t")
            if req.get("type") == "subagent":
                n_sub += 1
                walk(ln, req.get("requests") or [], t, rp, local, depth + 1)
                continue
            hashes = ln.hashes(ln.required(req, "hash_ids", rp + "hash_ids"), rp + "hash_ids")
            if local:
                hashes = array("q", (_local(names, counter, h) for h in hashes))
            ilen = ln.optional_integer(req, ("in",), rp)
            olen = ln.optional_integer(req, ("out",), rp) or 0
            think = req.get("think_time")
            think = float("nan") if think is None else ln.number(think, rp + "think_time")
            b.add(hashes, t, session, ilen, olen, think)

    for file, lineno, obj in iter_records(b.path):
        ln = Line(str(file), lineno)
        size = obj.get("block_size")
        size = DEFAULT_BLOCK_TOKENS if size is None else ln.integer(size, "block_size", minimum=1)
        if first_size is None:
            first_size = (size, str(file))
            b.block_tokens = b.block_override or size
        elif size != first_size[0]:
            raise ln.fail("block_size", f"{size} differs from {first_size[0]} ({first_size[1]}); one trace has "
                                        f"one block size")
        scope = obj.get("hash_id_scope")
        if scope is not None:
            ln.string(scope, "hash_id_scope")
        local = scope != "global"
        names.clear()  # a new namespace: this file's ids are its own
        walk(ln, ln.required(obj, "requests"), 0.0, "", local, 0)
    return b.build("kvcache_tester", name, {"sessions": n_sessions, "subagent_sessions": n_sub})


def _is_kvcache_tester(obj: dict) -> bool:
    reqs = obj.get("requests")
    first = reqs[0] if isinstance(reqs, list) and reqs and isinstance(reqs[0], dict) else {}
    return isinstance(reqs, list) and ("block_size" in obj or "hash_id_scope" in obj or "t" in first)


FORMAT = TraceFormat(
    name="kvcache_tester", read=load_kvcache_tester, order=110, sniff=_is_kvcache_tester,
    description="WEKA kv-cache-tester agentic traces: one conversation a JSON file, sub-agents nested",
    options=HASH_OPTIONS, settings=HASH_SETTINGS, directories=True,
)
