"""NVIDIA Dynamo replay rows (``fmt="dynamo"``): Mooncake-style JSONL with sessions

The rows Dynamo's data generator writes and its mocker replays (github ai-dynamo/dynamo:
the row schema ``MooncakeRow`` in ``lib/data-gen/src/mooncake.rs``, read by
``Trace::from_mooncake`` in ``lib/mocker/src/loadgen/trace.rs``; the file format and its
512-token default in ``benchmarks/data_generator/README.md``)::

    {"session_id": "s1", "timestamp": 0, "input_length": 1100, "output_length": 52,
     "hash_ids": [0, 1, 2]}
    {"session_id": "s1", "delay": 2500, "input_length": 1700, "output_length": 40,
     "hash_ids": [0, 1, 2, 3]}

==================  ========  =====================================================
field               required  meaning
==================  ========  =====================================================
``hash_ids``        yes       list of ints: prefix-chained hashes of blocks of
                              ``file_block_tokens`` tokens (Dynamo's
                              ``--trace-block-size``; default 512)
``output_length``   yes       generated tokens (int >= 0); alias ``output_tokens``
``input_length``    no        prompt tokens (int >= 0); alias ``input_tokens``;
                              absent = len(hash_ids) * block size
``timestamp``       [1]       arrival in milliseconds; alias ``created_time``
``delay``           no        ms after the previous row of the same session;
                              alias ``delay_ms``; not allowed on a session's
                              first row
``session_id``      no        string or integer: rows sharing it are the turns of
                              one session; absent = an independent request (-1)
``request_id``      no        string or integer, unique: names the row for
                              ``wait_for``
``wait_for``        no        request ids of earlier rows this one waits on [2]
``tool_wait_ms``    no        ms of tool calls waited after them (Trace.tool_wait_s)
``branches``        no        request ids this row spawns (counted in meta)
``prefix_reset``    no        not read
==================  ========  =====================================================

[1] Arrival of a row: its ``timestamp``; else, for a later turn, the previous turn's
arrival + ``delay`` (0 when absent); else 0. Dynamo replays a later turn closed-loop,
``delay`` after the previous turn *completes*; a trace has no service time, so here it
arrives ``delay`` after the previous turn *arrives* (a departure: turns come earlier
than on a live replay by the previous turn's latency). A row's ``timestamp`` wins over
``delay`` when both are given. Timestamps in another unit are detected
(:mod:`.times`); delays and tool waits stay milliseconds. An ``input_length`` the hashes
do not cover is kept, not clamped as Dynamo does: counted and reported
(:mod:`.blocksize`, which also infers a block size the lengths contradict). A file that
is plain Mooncake (none of Dynamo's extra keys) is read by ``fmt="mooncake"`` under
``format=auto``.

[2] The agentic variant (``AgenticMooncakeRow`` in ``lib/data-gen/src/mooncake.rs``,
written by ``agent_trace_to_mooncake --agentic``): a row with ``wait_for`` and no
``timestamp`` arrives ``delay + tool_wait_ms`` after the latest arrival among the rows
it waits for (Dynamo waits for their completions: the same departure as [1]).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .lines import Line, Sessions, iter_objects, short
from .mooncake import DYNAMO_KEYS
from .times import UNITS, resolve, stamp

DEFAULT_BLOCK_TOKENS = 512


def _rows(b: Builder):
    """Every row checked, in file order: (line, hashes, raw stamp or NaN, delay ms, tool
    wait ms, dependencies as line indices, session, input length, output length)."""
    sessions = Sessions()
    by_id: dict[str, int] = {}  # request_id -> its row index
    rows = []
    started: set[int] = set()  # sessions with a row so far
    for lineno, obj in iter_objects(b.path):
        ln = Line(b.where, lineno)
        hashes = ln.hashes(ln.required(obj, "hash_ids"), "hash_ids")
        key, value = ln.first(obj, ("output_length", "output_tokens"))
        if value is None:
            raise ln.fail("output_length", "missing required field (also accepted: 'output_tokens')")
        olen = ln.integer(value, key, minimum=0)
        ilen = ln.optional_integer(obj, ("input_length", "input_tokens"))
        ts_key, ts = ln.first(obj, ("timestamp", "created_time"))
        ts = float("nan") if ts is None else stamp(ln, ts, ts_key)
        delay_key, delay = ln.first(obj, ("delay", "delay_ms"))
        delay = 0.0 if delay is None else ln.number(delay, delay_key)
        if delay < 0:
            raise ln.fail(delay_key, f"expected a delay >= 0 ms, got {delay}")
        wait = obj.get("tool_wait_ms")
        wait = 0.0 if wait is None else ln.number(wait, "tool_wait_ms")
        if wait < 0:
            raise ln.fail("tool_wait_ms", f"expected a wait >= 0 ms, got {wait}")
        deps = []
        for field in ("wait_for", "branches"):
            names = obj.get(field)
            if names is not None and (not isinstance(names, list) or not all(isinstance(x, str) for x in names)):
                raise ln.fail(field, f"expected a list of request ids, got {short(names)}")
        for dep in obj.get("wait_for") or ():
            if dep not in by_id:
                raise ln.fail("wait_for", f"request_id {dep[:60]!r} is not on an earlier row")
            deps.append(by_id[dep])
        rid = obj.get("request_id")
        if rid is not None:
            rid = ln.string(rid, "request_id") if not isinstance(rid, int) or isinstance(rid, bool) else str(rid)
            if rid in by_id:
                raise ln.fail("request_id", f"duplicate request_id {rid[:60]!r} (first on line {rows[by_id[rid]][0]})")
            by_id[rid] = len(rows)
        sid = obj.get("session_id")
        session = sessions.id_of(ln, sid, "session_id")  # -1: an independent request
        if delay and not deps and session not in started:  # a delay after nothing
            raise ln.fail(delay_key, f"a delay on the first row of session {sid!r}")
        if session >= 0:
            started.add(session)
        rows.append((lineno, hashes, ts, delay, wait, deps, session, ilen, olen, bool(obj.get("branches"))))
    return rows, len(sessions.ids)


def load_dynamo(path: str | Path, *, name: str | None = None,
                context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """Dynamo replay rows (Mooncake schema + session_id and delay; the agentic variant's
    request_id, wait_for, branches and tool_wait_ms)."""
    b = Builder(path, DEFAULT_BLOCK_TOKENS, context_tokens, "ms", **options)
    rows, n_sessions = _rows(b)
    raw = np.array([r[2] for r in rows], dtype=np.float64)
    stamps, b.times_resolved = resolve(raw, "ms", b.time_override, b.where)
    ms = UNITS["ms"]  # delays and tool waits are milliseconds whatever the timestamps' unit
    arrival = np.zeros(len(rows))
    last: dict[int, float] = {}  # session -> arrival of its previous row
    agentic = any(r[5] or r[4] for r in rows)
    for i, (lineno, hashes, ts, delay, wait, deps, session, ilen, olen, _) in enumerate(rows):
        previous = last.get(session) if session >= 0 else None
        if not np.isnan(ts):
            arrival[i] = stamps[i]
        elif deps:
            arrival[i] = max(arrival[d] for d in deps) + (delay + wait) / ms
        elif previous is not None:
            arrival[i] = previous + delay / ms
        if session >= 0:
            last[session] = arrival[i]
        b.add(hashes, arrival[i], session, ilen, olen, wait / ms if agentic else float("nan"))
    return b.build("dynamo", name, {"sessions": n_sessions, "agentic": agentic,
                                    "rows_with_branches": sum(r[9] for r in rows)})


def _is_dynamo(obj: dict) -> bool:
    return "hash_ids" in obj and "chat_id" not in obj and (
        bool(DYNAMO_KEYS & obj.keys()) or "timestamp" not in obj)


FORMAT = TraceFormat(
    name="dynamo", read=load_dynamo, order=70, sniff=_is_dynamo,
    description="NVIDIA Dynamo replay rows: Mooncake JSONL plus session_id and delay",
    options=HASH_OPTIONS, settings=HASH_SETTINGS,
)
