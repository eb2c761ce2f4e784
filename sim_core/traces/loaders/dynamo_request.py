"""NVIDIA Dynamo request trace (``fmt="dynamo_request"``): what a live Dynamo records

Records of schema ``dynamo.request.trace.v1`` (github ai-dynamo/dynamo, reader
``lib/data-gen/src/request_trace/load.rs``: ``RequestTraceRecord`` and
``load_request_trace_records``), one per line, bare or wrapped as ``{"event": {...}}``;
only ``request_end`` events become requests::

    {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
     "event_time_unix_ms": 1717000000900, "agent_context": {"session_id": "root"},
     "request": {"request_id": "req-1", "request_received_ms": 1717000000000,
                 "output_tokens": 4,
                 "replay": {"trace_block_size": 16, "input_length": 40,
                            "input_sequence_hashes": [11, 22, 33]}}}

=======================================  ========  ====================================
field                                    required  meaning
=======================================  ========  ====================================
``schema``                               yes       ``"dynamo.request.trace.v1"``
``event_type``                           yes       ``request_end`` (a request);
                                                   ``request_payload``, ``tool_start``,
                                                   ``tool_end``, ``tool_error``: skipped
``request.request_id``                   yes       string, unique in the file
``request.request_received_ms``          yes       arrival, Unix epoch milliseconds
``request.output_tokens``                yes       generated tokens (int >= 0)
``request.replay.trace_block_size``      yes       tokens per hash (int > 0; one value
                                                   for the whole file)
``request.replay.input_length``          yes       prompt tokens (int >= 0)
``request.replay.input_sequence_hashes`` yes       prefix-chained block hashes:
                                                   exactly ceil(input_length / block
                                                   size), the last over a partial
                                                   block when the length is not a
                                                   multiple of the block size
``agent_context.session_id``             no        session key (string)
=======================================  ========  ====================================

Any other event type is an error, as in Dynamo's reader; a line that is not a record
(its ``event`` not an object) is skipped, as there. ``arrival_s =
request_received_ms / 1000``, made relative to the first request. Requests with and without ``agent_context`` may be mixed
(Dynamo's agentic replay refuses that; a cache trace does not need it).
"""
from __future__ import annotations

from pathlib import Path

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .lines import Line, Sessions, iter_objects

SCHEMA = "dynamo.request.trace.v1"
SKIPPED = frozenset({"request_payload", "tool_start", "tool_end", "tool_error"})


def load_dynamo_request(path: str | Path, *, name: str | None = None,
                        context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """Dynamo ``dynamo.request.trace.v1`` JSONL: one request per request_end event."""
    b = Builder(path, 1, context_tokens, "ms", **options)  # block size: the file's, from its first request
    file_bt = 0
    sessions = Sessions()
    seen_ids: dict[str, int] = {}
    block_line = 0
    skipped = 0
    for lineno, obj in iter_objects(b.path):
        ln = Line(b.where, lineno)
        prefix = ""
        if "event" in obj:  # the wrapped form: {"timestamp": ..., "event": {...}}
            if not isinstance(obj["event"], dict):
                skipped += 1
                continue
            obj, prefix = obj["event"], "event."
        schema = ln.required(obj, "schema", prefix + "schema")
        if schema != SCHEMA:
            raise ln.fail(prefix + "schema", f"unknown schema {schema!r:.60} (expected {SCHEMA!r})")
        kind = ln.string(ln.required(obj, "event_type", prefix + "event_type"), prefix + "event_type")
        ln.integer(ln.required(obj, "event_time_unix_ms", prefix + "event_time_unix_ms"),
                   prefix + "event_time_unix_ms", minimum=0)
        if kind in SKIPPED:
            skipped += 1
            continue
        if kind != "request_end":
            raise ln.fail(prefix + "event_type", f"unsupported event type {kind!r:.60} (request_end, "
                                                  f"request_payload or tool_* events)")
        rp = prefix + "request."
        req = ln.mapping(ln.required(obj, "request", rp[:-1]), rp[:-1])
        rid = ln.string(ln.required(req, "request_id", rp + "request_id"), rp + "request_id")
        if rid in seen_ids:
            raise ln.fail(rp + "request_id", f"duplicate request_id {rid!r:.60} (first on line {seen_ids[rid]})")
        seen_ids[rid] = lineno
        received = ln.integer(ln.required(req, "request_received_ms", rp + "request_received_ms"),
                              rp + "request_received_ms", minimum=0)
        olen = ln.integer(ln.required(req, "output_tokens", rp + "output_tokens"), rp + "output_tokens", minimum=0)
        xp = rp + "replay."
        replay = ln.mapping(ln.required(req, "replay", xp[:-1]), xp[:-1])
        bt = ln.integer(ln.required(replay, "trace_block_size", xp + "trace_block_size"),
                        xp + "trace_block_size", minimum=1)
        if not block_line:
            file_bt, block_line = bt, lineno
            b.block_tokens = b.block_override or bt
        elif bt != file_bt:
            raise ln.fail(xp + "trace_block_size", f"{bt} differs from {file_bt} (line {block_line}); "
                                                   f"one trace has one block size")
        ilen = ln.integer(ln.required(replay, "input_length", xp + "input_length"), xp + "input_length",
                          minimum=0)
        hashes = ln.hashes(ln.required(replay, "input_sequence_hashes", xp + "input_sequence_hashes"),
                           xp + "input_sequence_hashes")
        want = -(-ilen // bt)
        if len(hashes) != want:
            raise ln.fail(xp + "input_sequence_hashes", f"input_length {ilen} with trace_block_size {bt} "
                                                        f"needs exactly {want} hashes, got {len(hashes)}")
        context = obj.get("agent_context")
        sid = None
        if context is not None:
            sid = ln.mapping(context, prefix + "agent_context").get("session_id")
            sid = None if sid is None else ln.string(sid, prefix + "agent_context.session_id")
        b.add(hashes, received, sessions.id_of(ln, sid, prefix + "agent_context.session_id"), ilen, olen)
    return b.build("dynamo_request", name, {"sessions": len(sessions.ids), "skipped_events": skipped})


def _is_dynamo_request(obj: dict) -> bool:
    event = obj.get("event")
    return obj.get("schema") == SCHEMA or (isinstance(event, dict) and event.get("schema") == SCHEMA)


FORMAT = TraceFormat(
    name="dynamo_request", read=load_dynamo_request, order=80, sniff=_is_dynamo_request,
    description="NVIDIA Dynamo request trace (dynamo.request.trace.v1 request_end events)",
    options=HASH_OPTIONS, settings=HASH_SETTINGS,
)
