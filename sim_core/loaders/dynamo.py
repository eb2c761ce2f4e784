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
``request_id``      no        ignored
==================  ========  =====================================================

[1] Arrival of a row: its ``timestamp``; else, for a later turn, the previous turn's
arrival + ``delay`` (0 when absent); else 0. Dynamo replays a later turn closed-loop,
``delay`` after the previous turn *completes*; a trace has no service time, so here it
arrives ``delay`` after the previous turn *arrives* (a departure: turns come earlier
than on a live replay by the previous turn's latency). A row's ``timestamp`` wins over
``delay`` when both are given. ``input_length`` above ``len(hash_ids) * block size`` is
clamped to it, as Dynamo does (counted in ``meta["clamped_inputs"]``). A file that is
plain Mooncake (none of Dynamo's extra keys) is read by ``fmt="mooncake"`` under
``format=auto``.
"""
from __future__ import annotations

from pathlib import Path

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import Option, TraceFormat
from .lines import Line, Sessions, iter_objects
from .mooncake import DYNAMO_KEYS

DEFAULT_BLOCK_TOKENS = 512


def load_dynamo(path: str | Path, *, name: str | None = None,
                context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
                file_block_tokens: int | None = None) -> Trace:
    """Dynamo replay rows (Mooncake schema + session_id and delay)."""
    bt = int(file_block_tokens or DEFAULT_BLOCK_TOKENS)
    if bt <= 0:
        raise ValueError(f"file_block_tokens must be positive, got {bt}")
    b = Builder(path, bt, context_tokens)
    sessions = Sessions()
    last_arrival: dict[int, float] = {}  # session -> arrival of its previous row
    clamped = 0
    for lineno, obj in iter_objects(b.path):
        ln = Line(b.where, lineno)
        hashes = ln.hashes(ln.required(obj, "hash_ids"), "hash_ids")
        key, value = ln.first(obj, ("output_length", "output_tokens"))
        if value is None:
            raise ln.fail("output_length", "missing required field (also accepted: 'output_tokens')")
        olen = ln.integer(value, key, minimum=0)
        ilen = ln.optional_integer(obj, ("input_length", "input_tokens"))
        ts_key, ts = ln.first(obj, ("timestamp", "created_time"))
        delay_key, delay = ln.first(obj, ("delay", "delay_ms"))
        sid = obj.get("session_id")
        session = sessions.id_of(ln, sid, "session_id")  # -1: an independent request
        previous = last_arrival.get(session) if session >= 0 else None
        if delay is not None:
            delay = ln.number(delay, delay_key)
            if delay < 0:
                raise ln.fail(delay_key, f"expected a delay >= 0 ms, got {delay}")
            if previous is None and delay != 0:
                raise ln.fail(delay_key, f"a delay on the first row of session {sid!r}")
        if ts is not None:
            arrival = ln.number(ts, ts_key) / 1000.0
        elif previous is not None:
            arrival = previous + (delay or 0.0) / 1000.0
        else:
            arrival = 0.0
        if session >= 0:
            last_arrival[session] = arrival
        capacity = len(hashes) * bt
        if ilen is None:
            ilen = capacity
        elif ilen > capacity:
            ilen, clamped = capacity, clamped + 1
        b.add(hashes, arrival, session, ilen, olen)
    return b.build("dynamo", name, {"sessions": len(sessions.ids), "clamped_inputs": clamped})


def _is_dynamo(obj: dict) -> bool:
    return "hash_ids" in obj and "chat_id" not in obj and (
        bool(DYNAMO_KEYS & obj.keys()) or "timestamp" not in obj)


FORMAT = TraceFormat(
    name="dynamo", read=load_dynamo, order=70, sniff=_is_dynamo,
    description="NVIDIA Dynamo replay rows: Mooncake JSONL plus session_id and delay",
    options=("context_tokens", "file_block_tokens"),
    settings=(Option("file_block_tokens", "int", "the format's default", "64"),),
)
